#pragma once
// Helpers for the server tests: an in-process server on a free 127.0.0.1 port,
// JSON / SSE clients, /metrics parsing, and a small text model with a
// tokenizer.json.
#include <httplib.h>

#include <chrono>
#include <functional>
#include <gtest/gtest.h>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "core/thread_pool.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "formats/gguf.h"
#include "tokenizer/model_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "models/model.h"
#include "devtools/synthetic.h"
#include "server/http_server.h"
#include "test_util.h"

namespace mxtest {

using nlohmann::json;

inline std::string stories_bin() { return (stories260k() / "stories260K.bin").string(); }

// Writes a synthetic llama ("small": vocab 2048, context 2048) to dir, with a
// tokenizer.json of our own (not make-test-model's), cut from GPT-2's vocabulary: ids 0..2046 are GPT-2's first
// tokens (the 256 byte symbols, then merges in rank order), 2047 is
// <|endoftext|> (also the model's EOS), and the merges are those whose parts
// and result are all in that vocabulary. A real byte-level BPE, so text of any
// bytes round-trips and multi-byte UTF-8 characters split across tokens.
inline void write_text_model(const std::string& dir, uint64_t seed = 0) {
  mx::SyntheticSpec spec;
  spec.arch = "llama";
  spec.preset = "small";
  spec.seed = seed;
  mx::write_synthetic_model(dir, spec);
  // Our own tokenizer replaces whatever make-test-model's writer put there.
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "generation_config.json", "chat_template.jinja",
                        "special_tokens_map.json"})
    fs::remove(fs::path(dir) / f);
  const int vocab = 2048;
  fs::path gguf = source_dir() / "tests" / "data" / "tokenizer-vectors" / "ggml-vocab-gpt-2.gguf";
  if (!fs::exists(gguf)) gguf = shared_dir() / "tokenizer-vectors" / "ggml-vocab-gpt-2.gguf";
  mx::GgufFile g(gguf.string());
  const auto& toks = g.get_string_array("tokenizer.ggml.tokens");
  json v = json::object();
  for (int i = 0; i < vocab - 1; ++i) v[std::string(toks[size_t(i)])] = i;
  json merges = json::array();
  for (auto m : g.get_string_array("tokenizer.ggml.merges")) {
    const size_t sp = m.find(' ', 1);
    const std::string a(m.substr(0, sp)), b(m.substr(sp + 1));
    if (v.contains(a) && v.contains(b) && v.contains(a + b)) merges.push_back(std::string(m));
  }
  json j;
  j["version"] = "1.0";
  j["added_tokens"] = json::array({{{"id", vocab - 1}, {"content", "<|endoftext|>"}, {"special", true},
                                    {"lstrip", false}, {"rstrip", false}, {"normalized", false}, {"single_word", false}}});
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  j["post_processor"] = nullptr;
  j["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  j["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", ""},
                {"end_of_word_suffix", ""}, {"fuse_unk", false}, {"byte_fallback", false}, {"vocab", v},
                {"merges", merges}};
  spit(fs::path(dir) / "tokenizer.json", j.dump());
  // Only the config's EOS changes (no tensor shape does).
  json cfg = json::parse(slurp(fs::path(dir) / "config.json"));
  cfg["eos_token_id"] = vocab - 1;
  cfg["bos_token_id"] = vocab - 1;
  spit(fs::path(dir) / "config.json", cfg.dump(2));
}

// A synthetic family's checkpoint (random weights, its tokenizer.json and chat
// template) written to d/arch; returns the directory.
inline std::string synthetic_model_dir(const TempDir& d, const std::string& arch, uint64_t seed = 0) {
  const std::string dir = (d.path() / arch).string();
  mx::SyntheticSpec s;
  s.arch = arch;
  s.seed = seed;
  mx::write_synthetic_model(dir, s);
  return dir;
}

// Sets a checkpoint's max_position_embeddings (the tiny presets' 512 is too
// short for prompts that describe tools in a synthetic vocabulary).
inline void set_context_length(const std::string& dir, int n) {
  json cfg = json::parse(slurp(fs::path(dir) / "config.json"));
  cfg["max_position_embeddings"] = n;
  spit(fs::path(dir) / "config.json", cfg.dump(2));
}

// An in-process server: engine + HttpServer on a free port, run on a thread.
class TestServer {
 public:
  struct Options {
    mx::EngineOptions engine;
    std::string tokenizer;  // a tokenizer file (tokenizer.json, .gguf, llama2.c's), or "" for none
    std::string name = "test-model";
    int http_threads = 96;
    mx::server::ApiLimits limits;
    mx::server::AccessOptions access;
    mx::server::HttpLimits http_limits;  // http/transport.h
  };
  // model_dir: the directory whose chat template the server loads ("" for none).
  TestServer(const std::string& model_path, const Options& o, const std::string& model_dir = "") {
    // One compute thread: the engine, HTTP and client threads already share the
    // 2 cores, and a spinning pool worker would fight them (outputs do not depend
    // on the thread count). No effect if the process's pool already exists.
    mx::set_global_threads(1);
    if (!o.tokenizer.empty()) tok_ = mx::load_model_tokenizer(model_path, o.tokenizer).tokenizer;
    engine_ = std::make_unique<mx::Engine>(mx::load_model(model_path), o.engine);
    mx::server::ServerOptions so;
    so.host = "127.0.0.1";
    so.port = 0;
    so.served_model_name = o.name;
    so.http_threads = o.http_threads;
    so.limits = o.limits;
    so.access = o.access;
    so.http_limits = o.http_limits;
    so.model_dir = model_dir;
    so.kv_block_size = o.engine.block_size;
    http_ = std::make_unique<mx::server::HttpServer>(*engine_, tok_.get(), so);
    port_ = http_->bind();
    engine_->start();
    thread_ = std::thread([this] { http_->run(); });
  }
  ~TestServer() {
    http_->shutdown(std::chrono::milliseconds(2000));
    thread_.join();
    engine_->stop();
  }
  // Options that load model_dir's own tokenizer.json.
  static Options with_own_tokenizer(const std::string& model_dir) {
    Options o;
    o.tokenizer = model_dir + "/tokenizer.json";
    return o;
  }
  int port() const { return port_; }
  mx::Engine& engine() { return *engine_; }
  const mx::Tokenizer* tokenizer() const { return tok_.get(); }
  mx::server::HttpServer& http() { return *http_; }

 private:
  std::unique_ptr<mx::Tokenizer> tok_;
  std::unique_ptr<mx::Engine> engine_;
  std::unique_ptr<mx::server::HttpServer> http_;
  std::thread thread_;
  int port_ = 0;
};

struct HttpResult {
  int status = -1;  // -1: no response
  std::string body;
  json j;  // body parsed, when it is JSON
  httplib::Headers headers;
};

inline HttpResult http_request(int port, const std::string& method, const std::string& path,
                               const std::string& body = "", const std::string& content_type = "application/json",
                               const httplib::Headers& headers = {}) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_connection_timeout(30);
  cli.set_read_timeout(120);
  cli.set_write_timeout(30);
  HttpResult r;
  httplib::Result res = method == "GET" ? cli.Get(path.c_str(), headers)
                                         : cli.Post(path.c_str(), headers, body, content_type.c_str());
  if (!res) return r;
  r.status = res->status;
  r.body = res->body;
  r.headers = res->headers;
  r.j = json::parse(r.body, nullptr, false);
  return r;
}

inline HttpResult post(int port, const std::string& path, const json& body) {
  return http_request(port, "POST", path, body.dump());
}

// A streamed response: the data chunks in order, whether [DONE] came last.
struct SseResult {
  int status = -1;
  std::vector<json> chunks;
  std::vector<std::string> comments;
  bool done = false;
  bool bad_event = false;  // an event that is neither JSON, [DONE] nor a comment
  std::string raw;
};

// on_chunk returning false drops the connection (a client going away).
inline SseResult post_stream(int port, const std::string& path, const json& body,
                             const std::function<bool(const json&)>& on_chunk = {}) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_connection_timeout(30);
  cli.set_read_timeout(120);
  SseResult r;
  std::string pending;
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.set_header("Accept", "text/event-stream");
  req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
    r.raw.append(d, n);
    pending.append(d, n);
    for (size_t e; (e = pending.find("\n\n")) != std::string::npos;) {
      const std::string ev = pending.substr(0, e);
      pending.erase(0, e + 2);
      if (ev.rfind(":", 0) == 0) {
        r.comments.push_back(ev);
      } else if (ev == "data: [DONE]") {
        r.done = true;
      } else if (ev.rfind("data: ", 0) == 0) {
        json j = json::parse(ev.substr(6), nullptr, false);
        if (j.is_discarded() || r.done) r.bad_event = true;
        r.chunks.push_back(j);
        if (on_chunk && !on_chunk(j)) return false;
      } else {
        r.bad_event = true;
      }
    }
    return true;
  };
  httplib::Result res = cli.send(req);
  if (res) r.status = res->status;
  if (!pending.empty()) r.bad_event = true;
  return r;
}

// Value of one sample line of the Prometheus text ("name{labels} value"); NaN if absent.
inline double metric(const std::string& text, const std::string& series) {
  size_t pos = 0;
  while ((pos = text.find(series + " ", pos)) != std::string::npos) {
    if (pos == 0 || text[pos - 1] == '\n') return std::stod(text.substr(pos + series.size() + 1));
    pos += series.size();
  }
  return std::nan("");
}

inline std::string metrics_text(int port) { return http_request(port, "GET", "/metrics").body; }

// Polls /metrics until pred holds (or the timeout); returns the last text.
inline std::string wait_metrics(int port, const std::function<bool(const std::string&)>& pred,
                                std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  std::string t;
  for (;;) {
    t = metrics_text(port);
    if (pred(t) || std::chrono::steady_clock::now() > end) return t;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

inline std::vector<int32_t> ids_of(const json& a) { return a.get<std::vector<int32_t>>(); }

// A prompt of len ids starting with BOS, different for each i.
inline std::vector<int32_t> prompt_of(int i, int len) {
  std::vector<int32_t> p = {1};
  for (int j = 1; j < len; ++j) p.push_back(3 + (i * 37 + j * 11) % 500);
  return p;
}

// What the single-request generator makes of p (the server must answer the same).
inline std::vector<int32_t> reference(mx::Model& m, const std::vector<int32_t>& p, int max_tokens, float temp = 0,
                               uint64_t seed = 0, bool ignore_eos = false) {
  mx::GenerateOptions o;
  o.max_tokens = max_tokens;
  o.sampling.temperature = temp;
  o.sampling.seed = seed;
  o.ignore_eos = ignore_eos;
  return mx::generate(m, p, o).tokens;
}

// Every error is OpenAI's {"error": {"message", "type", "param", "code"}}.
inline void expect_error(const HttpResult& r, int status, const std::string& fragment = "") {
  EXPECT_EQ(r.status, status) << r.body;
  ASSERT_TRUE(r.j.is_object() && r.j.contains("error")) << r.body;
  const json& e = r.j["error"];
  ASSERT_TRUE(e.is_object()) << r.body;
  EXPECT_TRUE(e.contains("message") && e["message"].is_string() && !e["message"].get<std::string>().empty()) << r.body;
  EXPECT_TRUE(e.contains("type") && e["type"].is_string()) << r.body;
  EXPECT_TRUE(e.contains("param")) << r.body;
  EXPECT_TRUE(e.contains("code")) << r.body;
  if (!fragment.empty()) {
    EXPECT_NE(e["message"].get<std::string>().find(fragment), std::string::npos) << r.body;
  }
}

inline TestServer::Options stories_opts(int max_running = 16) {
  TestServer::Options o;
  o.engine.max_running = max_running;
  o.name = "stories260K";
  return o;
}

// Concatenated stream: text and token ids of choice 0.
struct Joined {
  std::string text;
  std::vector<int32_t> ids;
  std::string finish;
  int finishes = 0;
};
inline Joined join_stream(const SseResult& s, bool chat) {
  Joined j;
  for (const json& c : s.chunks) {
    if (c["choices"].empty()) continue;
    const json& ch = c["choices"][0];
    if (chat) {
      if (ch["delta"].contains("content")) j.text += ch["delta"]["content"].get<std::string>();
    } else {
      j.text += ch["text"].get<std::string>();
    }
    for (int32_t id : ch["token_ids"]) j.ids.push_back(id);
    if (!ch["finish_reason"].is_null()) {
      j.finish = ch["finish_reason"];
      ++j.finishes;
    }
  }
  return j;
}


}  // namespace mxtest
