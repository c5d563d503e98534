// What a running server reads from disk and how much work a request can cost
// before it is refused (issue 21, findings 8 and 10): the chat template is read
// once at startup (a broken one stops the start; changing or deleting it later
// changes nothing, and no error names a server path); a text prompt far beyond
// the context is refused before it is tokenized.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include "server_test_util.h"

using namespace mxtest;

namespace {

std::string qwen3_dir(const TempDir& d) { return synthetic_model_dir(d, "qwen3"); }

TestServer::Options with_tokenizer(const std::string& dir) {
  TestServer::Options o = TestServer::with_own_tokenizer(dir);
  o.engine.max_running = 2;
  return o;
}

const json kChat = {{"messages", {{{"role", "user"}, {"content", "Hello there"}}}}, {"max_tokens", 3},
                    {"temperature", 0}};

TEST(RequestState, ChatTemplateIsReadOnceAtStartup) {
  TempDir d;
  const std::string m = qwen3_dir(d);
  TestServer srv(m, with_tokenizer(m), m);
  auto first = post(srv.port(), "/v1/chat/completions", kChat);
  ASSERT_EQ(first.status, 200) << first.body;
  // Broken on disk, then gone: the running server answers the same.
  spit(fs::path(m) / "tokenizer_config.json", "{ not json");
  auto broken = post(srv.port(), "/v1/chat/completions", kChat);
  EXPECT_EQ(broken.status, 200) << broken.body;
  EXPECT_EQ(broken.j["choices"][0]["token_ids"], first.j["choices"][0]["token_ids"]);
  fs::remove(fs::path(m) / "tokenizer_config.json");
  EXPECT_EQ(post(srv.port(), "/v1/chat/completions", kChat).status, 200);
}

TEST(RequestState, BrokenChatTemplateStopsTheStartNamingIt) {
  TempDir d;
  const std::string m = qwen3_dir(d);
  json cfg = json::parse(slurp(fs::path(m) / "tokenizer_config.json"));
  cfg["chat_template"] = "{% for m in messages %}{{ m.content }";  // unclosed
  spit(fs::path(m) / "tokenizer_config.json", cfg.dump());
  try {
    TestServer srv(m, with_tokenizer(m), m);
    ADD_FAILURE() << "a broken template started";
  } catch (const mx::Error& e) {
    EXPECT_NE(std::string(e.what()).find("line"), std::string::npos) << e.what();
  }
}

TEST(RequestState, ChatErrorsNameNoServerPath) {
  TempDir d;
  const std::string m = qwen3_dir(d);
  TestServer srv(m, with_tokenizer(m), m);
  json bad = kChat;
  bad["messages"] = {{{"content", "no role"}}};
  auto r = post(srv.port(), "/v1/chat/completions", bad);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body.find(d.path().string()), std::string::npos) << r.body;
}

TEST(RequestState, HugeTextPromptIsRefusedBeforeTokenizing) {
  TempDir d;
  const std::string m = qwen3_dir(d);
  TestServer srv(m, with_tokenizer(m), m);
  const std::string text(7 << 20, 'a');  // 7 MB: the tiny model's context is 512 tokens
  const auto t0 = std::chrono::steady_clock::now();
  auto r = post(srv.port(), "/v1/completions", {{"prompt", text}, {"max_tokens", 1}});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.status, 400) << r.body.substr(0, 300);
  EXPECT_EQ(r.j["error"]["code"], "context_length_exceeded");
  // The message counts bytes, not tokens: the byte bound refused it, before any
  // tokenizing. (The time is printed, not asserted: sanitizer builds and a busy
  // machine move it, and tests decide correctness, not speed.)
  EXPECT_NE(r.body.find("bytes"), std::string::npos) << r.body;
  std::printf("[ timing   ] 7 MB prompt refused in %.3f s\n", s);
  // A prompt that may fit is still tokenized and checked exactly.
  auto ok = post(srv.port(), "/v1/completions", {{"prompt", "Hello there"}, {"max_tokens", 2}});
  EXPECT_EQ(ok.status, 200) << ok.body;
}

}  // namespace
