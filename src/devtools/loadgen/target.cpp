#include "devtools/loadgen/target.h"

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "core/error.h"
#include "engine/engine.h"

namespace mx::bench {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Token arrival bookkeeping shared by both targets.
struct Arrivals {
  Clock::time_point t0 = Clock::now(), last;
  RequestResult* r;
  explicit Arrivals(RequestResult* res) : r(res) { r->token_events = 0; }
  void tokens(int k) {
    if (k <= 0) return;
    ++r->token_events;
    const auto now = Clock::now();
    if (r->output_tokens == 0) {
      r->ttft_s = std::chrono::duration<double>(now - t0).count();
    } else {
      r->itl_s.push_back(std::chrono::duration<double>(now - last).count());
    }
    for (int i = 1; i < k; ++i) r->itl_s.push_back(0);
    r->output_tokens += k;
    last = now;
  }
};

class HttpTarget : public Target {
 public:
  HttpTarget(const std::string& url, std::string model, int vocab) : url_(url), model_(std::move(model)), vocab_(vocab) {
    const std::regex re(R"(^http://([^/:]+)(?::(\d+))?/?$)");
    std::smatch m;
    MX_CHECK(std::regex_match(url, m, re), "--url must be http://host[:port], got '{}'", url);
    host_ = m[1];
    port_ = m[2].matched ? std::stoi(m[2]) : 80;
    // The model's name and, when the server says it (mxserve serve's "vocab_size"),
    // its vocabulary, from /v1/models.
    if (model_.empty() || vocab_ == 0) {
      httplib::Client cli(host_, port_);
      cli.set_connection_timeout(10);
      auto res = cli.Get("/v1/models");
      if (model_.empty())
        MX_CHECK(res && res->status == 200, "{}: GET /v1/models failed ({}); pass --served-model", url,
                 res ? std::to_string(res->status) : httplib::to_string(res.error()));
      const json j = res && res->status == 200 ? json::parse(res->body, nullptr, false) : json();
      const bool listed = j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty();
      if (model_.empty()) {
        MX_CHECK(listed && j["data"][0].contains("id") && j["data"][0]["id"].is_string(),
                 "{}: /v1/models lists no model; pass --served-model", url);
        model_ = j["data"][0]["id"];
      }
      if (vocab_ == 0 && listed)
        for (const json& m : j["data"])
          if (m.is_object() && m.contains("id") && m["id"].is_string() && m["id"] == model_ && m.contains("vocab_size") &&
              m["vocab_size"].is_number_integer() && m["vocab_size"].get<int64_t>() > 3 &&
              m["vocab_size"].get<int64_t>() <= (int64_t(1) << 24))
            vocab_ = m["vocab_size"].get<int>();
    }
  }

  RequestResult send(const BenchRequest& q) override {
    RequestResult r;
    Arrivals arr(&r);
    httplib::Client cli(host_, port_);
    cli.set_connection_timeout(30);
    cli.set_read_timeout(3600);
    json body = {{"model", model_},     {"prompt", q.prompt},  {"max_tokens", q.max_tokens},
                 {"temperature", 0},    {"ignore_eos", true},  {"stream", true},
                 {"stream_options", {{"include_usage", true}}}};
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    req.set_header("Accept", "text/event-stream");
    std::string pending, raw;
    int usage_completion = -1;
    req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
      if (raw.size() < 4096) raw.append(d, std::min(n, size_t(4096)));
      pending.append(d, n);
      for (size_t e; (e = pending.find("\n\n")) != std::string::npos;) {
        const std::string ev = pending.substr(0, e);
        pending.erase(0, e + 2);
        if (ev.rfind("data: ", 0) != 0 || ev == "data: [DONE]") continue;
        const json j = json::parse(ev.substr(6), nullptr, false);
        if (j.is_discarded()) continue;
        if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
          const json& c = j["choices"][0];
          int k = 0;
          if (c.contains("token_ids") && c["token_ids"].is_array()) {
            k = int(c["token_ids"].size());
          } else if (c.contains("text") && c["text"].is_string() && !c["text"].get<std::string>().empty()) {
            k = 1;  // another engine: one token per text chunk (usage corrects the count)
          }
          arr.tokens(k);
        }
        if (j.contains("usage") && j["usage"].is_object()) {
          const json& u = j["usage"];
          r.prompt_tokens = u.value("prompt_tokens", 0);
          usage_completion = u.value("completion_tokens", -1);
          if (u.contains("prompt_tokens_details") && u["prompt_tokens_details"].is_object())
            r.cached_tokens = u["prompt_tokens_details"].value("cached_tokens", 0);
        }
      }
      return true;
    };
    httplib::Result res = cli.send(req);
    r.e2e_s = since(arr.t0);
    if (!res) {
      r.error = "HTTP error: " + httplib::to_string(res.error());
    } else if (res->status != 200) {
      r.error = fmt::format("HTTP {}: {}", res->status, raw.substr(0, 300));
    } else {
      if (usage_completion >= 0) r.output_tokens = usage_completion;
      r.ok = r.output_tokens > 0;
      if (!r.ok) r.error = "no tokens in the stream";
    }
    return r;
  }

  std::map<std::string, double> counters() override {
    httplib::Client cli(host_, port_);
    cli.set_connection_timeout(10);
    auto res = cli.Get("/metrics");
    if (!res || res->status != 200) return {};
    return parse_prometheus(res->body);
  }
  std::string describe() const override { return url_ + " (" + model_ + ")"; }
  int vocab_size() const override { return vocab_; }

 private:
  std::string url_, model_, host_;
  int port_ = 80, vocab_ = 0;
};

class EngineTarget : public Target {
 public:
  explicit EngineTarget(Engine& e) : engine_(e) {}

  RequestResult send(const BenchRequest& q) override {
    RequestResult r;
    Arrivals arr(&r);
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    GenerationRequest g;
    g.prompt = q.prompt;
    g.max_tokens = q.max_tokens;
    g.ignore_eos = true;
    g.sampling.temperature = 0;
    try {
      engine_.submit(std::move(g), [&](const TokenEvent& ev) {
        std::lock_guard<std::mutex> lk(mu);
        if (ev.token >= 0) arr.tokens(1);
        if (ev.finished) {
          r.prompt_tokens = ev.prompt_tokens;
          r.cached_tokens = ev.cached_tokens;
          r.ok = ev.finish_reason == FinishReason::Length || ev.finish_reason == FinishReason::Stop;
          if (!r.ok) r.error = "engine: " + mx::describe(ev.finish_reason, ev.error);
          done = true;
          cv.notify_all();
        }
      });
    } catch (const std::exception& e) {
      r.error = e.what();
      return r;
    }
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return done; });
    r.e2e_s = since(arr.t0);
    return r;
  }

  std::map<std::string, double> counters() override {
    const EngineMetrics m = engine_.metrics();
    return {{"mxserve_prompt_tokens_total", double(m.prompt_tokens)},
            {"mxserve_prompt_tokens_cached_total", double(m.cached_prompt_tokens)},
            {"mxserve_generation_tokens_total", double(m.generated_tokens)}};
  }
  std::string describe() const override { return "in-process engine"; }
  int vocab_size() const override { return engine_.config().vocab_size; }

 private:
  Engine& engine_;
};
}  // namespace

std::map<std::string, double> parse_prometheus(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    if (sp == std::string::npos || sp == 0) continue;
    try {
      size_t used = 0;
      const std::string v = line.substr(sp + 1);
      const double x = std::stod(v, &used);
      if (used == v.size()) out[line.substr(0, sp)] = x;
    } catch (const std::exception&) {
    }
  }
  return out;
}

std::unique_ptr<Target> http_target(const std::string& url, const std::string& model, int vocab_size) {
  return std::make_unique<HttpTarget>(url, model, vocab_size);
}
std::unique_ptr<Target> engine_target(Engine& engine) { return std::make_unique<EngineTarget>(engine); }

}  // namespace mx::bench
