// The OpenAI server over real sockets (127.0.0.1, a free port): outputs equal
// the single-request generator, streaming equals non-streaming, 64 concurrent
// streams, prefix-cache reuse visible in /metrics, OpenAI error shapes, 429,
// client disconnects, and SIGTERM draining of the real binary.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>
#include <spawn.h>
#include <sys/wait.h>

#include <atomic>
#include <cmath>
#include <sstream>

#include "server/chat_prompt.h"
#include "server/text_stream.h"
#include "server/server_test_util.h"

using namespace mxtest;


TEST(Server, TokenIdCompletionEqualsGenerateCli) {
  TestServer srv(stories_bin(), stories_opts());
  const std::vector<int32_t> prompt = {1, 403, 261, 312};
  auto r = post(srv.port(), "/v1/completions",
                {{"model", "stories260K"}, {"prompt", prompt}, {"max_tokens", 40}, {"temperature", 0}});
  ASSERT_EQ(r.status, 200) << r.body;
  auto cli = run(mxserve() + " generate --model " + stories_bin() +
                 " --prompt-ids '1 403 261 312' --max-tokens 40 --temperature 0 --print-ids");
  ASSERT_EQ(cli.code, 0);
  std::vector<int32_t> want;
  std::istringstream ss(cli.out);
  for (int32_t id; ss >> id;) want.push_back(id);
  const json& ch = r.j["choices"][0];
  EXPECT_EQ(ids_of(ch["token_ids"]), want);
  EXPECT_EQ(ch["text"], "");  // no tokenizer: the ids are the output
  EXPECT_EQ(ch["index"], 0);
  EXPECT_EQ(ch["finish_reason"], want.size() == 40 ? "length" : "stop");
  EXPECT_TRUE(ch["logprobs"].is_null());
  EXPECT_EQ(r.j["object"], "text_completion");
  EXPECT_EQ(r.j["model"], "stories260K");
  EXPECT_EQ(r.j["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_TRUE(r.j["created"].is_number_integer());
  const json& u = r.j["usage"];
  EXPECT_EQ(u["prompt_tokens"], 4);
  EXPECT_EQ(u["completion_tokens"], want.size());
  EXPECT_EQ(u["total_tokens"], 4 + want.size());
  EXPECT_EQ(u["prompt_tokens_details"]["cached_tokens"], 0);

  // Several prompts: one choice each, in order; logprobs: 0 gives the sampled tokens' logprobs.
  auto ref = mx::load_model(stories_bin());
  auto m = post(srv.port(), "/v1/completions",
                {{"prompt", {prompt_of(1, 7), prompt_of(2, 9)}}, {"max_tokens", 6}, {"temperature", 0}, {"logprobs", 0}});
  ASSERT_EQ(m.status, 200) << m.body;
  ASSERT_EQ(m.j["choices"].size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const json& c = m.j["choices"][i];
    EXPECT_EQ(c["index"], i);
    EXPECT_EQ(ids_of(c["token_ids"]), reference(*ref, prompt_of(i + 1, 7 + 2 * i), 6));
    ASSERT_EQ(c["logprobs"]["token_logprobs"].size(), c["token_ids"].size());
    for (double lp : c["logprobs"]["token_logprobs"]) EXPECT_LE(lp, 0.0);
    EXPECT_EQ(c["logprobs"]["tokens"][0], "token_id:" + std::to_string(c["token_ids"][0].get<int>()));
  }
  EXPECT_EQ(m.j["usage"]["prompt_tokens"], 16);

  auto models = http_request(srv.port(), "GET", "/v1/models");
  ASSERT_EQ(models.status, 200);
  EXPECT_EQ(models.j["object"], "list");
  EXPECT_EQ(models.j["data"][0]["id"], "stories260K");
  EXPECT_EQ(models.j["data"][0]["vocab_size"], 512);  // what `mxserve bench --url` draws prompt ids from
  EXPECT_EQ(http_request(srv.port(), "GET", "/v1/models/stories260K").status, 200);
  auto health = http_request(srv.port(), "GET", "/health");
  EXPECT_EQ(health.status, 200);
}

TEST(Server, StreamingChunksConcatenateToTheNonStreamedResult) {
  TestServer srv(stories_bin(), stories_opts());
  json body = {{"model", "stories260K"}, {"prompt", prompt_of(3, 20)}, {"max_tokens", 50}, {"temperature", 0.9},
               {"seed", 42}, {"ignore_eos", true}};
  auto whole = post(srv.port(), "/v1/completions", body);
  ASSERT_EQ(whole.status, 200);
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  auto s = post_stream(srv.port(), "/v1/completions", body);
  ASSERT_EQ(s.status, 200);
  EXPECT_TRUE(s.done);
  EXPECT_FALSE(s.bad_event) << s.raw;
  ASSERT_GE(s.chunks.size(), 2u);
  Joined j = join_stream(s, false);
  EXPECT_EQ(j.ids, ids_of(whole.j["choices"][0]["token_ids"]));
  EXPECT_EQ(j.ids.size(), 50u);
  EXPECT_EQ(j.finish, "length");
  EXPECT_EQ(j.finishes, 1);
  const std::string id = s.chunks[0]["id"];
  for (size_t i = 0; i < s.chunks.size(); ++i) {
    const json& c = s.chunks[i];
    EXPECT_EQ(c["id"], id);
    EXPECT_EQ(c["object"], "text_completion");
    EXPECT_EQ(c["model"], "stories260K");
    EXPECT_TRUE(c["created"].is_number_integer());
    if (i + 1 < s.chunks.size()) {  // content chunks: usage null, one choice
      EXPECT_TRUE(c.contains("usage") && c["usage"].is_null());
      ASSERT_EQ(c["choices"].size(), 1u);
      const json& ch = c["choices"][0];
      EXPECT_EQ(ch["index"], 0);
      EXPECT_TRUE(ch.contains("text") && ch.contains("finish_reason") && ch.contains("logprobs"));
    }
  }
  const json& last = s.chunks.back();  // include_usage: a final chunk with no choices
  EXPECT_TRUE(last["choices"].empty());
  EXPECT_EQ(last["usage"]["completion_tokens"], 50);
  EXPECT_EQ(last["usage"]["prompt_tokens"], 20);
  EXPECT_EQ(last["usage"]["total_tokens"], 70);
  // The same prompt again: its full blocks (16 of 20 tokens) come from the prefix cache.
  EXPECT_EQ(whole.j["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(last["usage"]["prompt_tokens_details"]["cached_tokens"], 16);

  // Without stream_options there is no usage chunk and no usage field.
  body.erase("stream_options");
  auto s2 = post_stream(srv.port(), "/v1/completions", body);
  EXPECT_TRUE(s2.done);
  EXPECT_EQ(join_stream(s2, false).ids, j.ids);
  EXPECT_FALSE(s2.chunks.back().contains("usage"));
  EXPECT_FALSE(s2.chunks.back()["choices"].empty());
}

TEST(Server, SixtyFourConcurrentStreamsMatchSoloOutputs) {
  TestServer::Options o = stories_opts(32);  // 64 clients: half run, half queue
  TestServer srv(stories_bin(), o);
  auto ref = mx::load_model(stories_bin());
  const int n = 64;
  std::vector<std::vector<int32_t>> want(n), got(n);
  std::vector<std::vector<int32_t>> prompts(n);
  for (int i = 0; i < n; ++i) {
    prompts[i] = prompt_of(i, 4 + (i * 7) % 40);
    const float temp = i % 4 == 0 ? 0.8f : 0.0f;
    want[i] = reference(*ref, prompts[i], 24 + i % 9, temp, 1000 + i);
  }
  std::vector<int> status(n, 0);
  std::vector<char> done(n, 0);
  std::vector<std::thread> th;
  std::atomic<int> ready{0};
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i)
    th.emplace_back([&, i] {
      json body = {{"prompt", prompts[i]}, {"max_tokens", 24 + i % 9}, {"stream", true},
                   {"temperature", i % 4 == 0 ? 0.8 : 0.0}, {"seed", 1000 + i}};
      ++ready;
      while (ready < n) std::this_thread::yield();
      auto s = post_stream(srv.port(), "/v1/completions", body);
      status[i] = s.status;
      done[i] = s.done;
      got[i] = join_stream(s, false).ids;
    });
  for (auto& t : th) t.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(status[i], 200) << i;
    EXPECT_TRUE(done[i]) << i;
    EXPECT_EQ(got[i], want[i]) << "request " << i;
  }
  const std::string m =
      wait_metrics(srv.port(), [](const std::string& t) { return metric(t, "mxserve_requests_running") == 0; });
  EXPECT_EQ(metric(m, "mxserve_requests_running"), 0);
  EXPECT_EQ(metric(m, "mxserve_time_to_first_token_seconds_count"), n);
  std::printf("[ measured ] 64 concurrent streams on stories260K: %.3f s (%.0f requests/s), mean TTFT %.1f ms\n",
              secs, n / secs,
              1000 * metric(m, "mxserve_time_to_first_token_seconds_sum") /
                  metric(m, "mxserve_time_to_first_token_seconds_count"));
}

TEST(Server, PrefixCacheServesTheSharedPrefixWithIdenticalOutput) {
  TestServer srv(stories_bin(), stories_opts());
  auto ref = mx::load_model(stories_bin());
  const std::vector<int32_t> a = prompt_of(5, 160);
  std::vector<int32_t> b(a.begin(), a.begin() + 96);  // 60% shared: 6 full blocks of 16
  const std::vector<int32_t> tail = prompt_of(9, 65);
  b.insert(b.end(), tail.begin() + 1, tail.end());
  ASSERT_EQ(b.size(), 160u);
  auto ra = post(srv.port(), "/v1/completions", {{"prompt", a}, {"max_tokens", 12}, {"temperature", 0}});
  ASSERT_EQ(ra.status, 200);
  const std::string m0 = metrics_text(srv.port());
  auto rb = post(srv.port(), "/v1/completions", {{"prompt", b}, {"max_tokens", 12}, {"temperature", 0}});
  ASSERT_EQ(rb.status, 200);
  const std::string m1 = metrics_text(srv.port());
  const double prompt = metric(m1, "mxserve_prompt_tokens_total") - metric(m0, "mxserve_prompt_tokens_total");
  const double computed =
      metric(m1, "mxserve_prompt_tokens_computed_total") - metric(m0, "mxserve_prompt_tokens_computed_total");
  const double cached =
      metric(m1, "mxserve_prompt_tokens_cached_total") - metric(m0, "mxserve_prompt_tokens_cached_total");
  EXPECT_EQ(prompt, 160);
  EXPECT_NEAR(computed / prompt, 0.4, 1e-9);
  EXPECT_EQ(cached, 96);
  EXPECT_EQ(rb.j["usage"]["prompt_tokens_details"]["cached_tokens"], 96);
  EXPECT_EQ(ids_of(rb.j["choices"][0]["token_ids"]), reference(*ref, b, 12));
  EXPECT_EQ(ids_of(ra.j["choices"][0]["token_ids"]), reference(*ref, a, 12));
  EXPECT_NEAR(metric(m1, "mxserve_prefix_cache_hit_rate"), 96.0 / 320.0, 1e-9);
  EXPECT_GT(metric(m1, "mxserve_kv_blocks{state=\"cached\"}"), 0);
}

// stories260K with its llama2.c tokenizer (tok512.bin) takes a text prompt and
// answers with llama2.c run.c's greedy continuation, as text and as ids.
TEST(Server, StoriesTextPromptContinuesAsLlama2c) {
  TestServer::Options o = stories_opts();
  o.tokenizer = (stories260k() / "tok512.bin").string();
  TestServer srv(stories_bin(), o);
  const std::string prompt = "Lily and Ben went to the park.";
  auto r = post(srv.port(), "/v1/completions",
                {{"prompt", prompt}, {"max_tokens", 40}, {"temperature", 0}});
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string golden_dir = source_dir().string() + "/tests/data/stories260K-goldens/";
  std::vector<int32_t> want;
  for (const auto& l : read_lines(golden_dir + "lily_and_ben_greedy40_ids.txt")) want.push_back(std::stoi(l));
  std::string text = slurp(golden_dir + "lily_and_ben_greedy40.txt");
  text = text.substr(prompt.size(), text.size() - prompt.size() - 1);  // run.c printed the prompt and a newline
  const json& ch = r.j["choices"][0];
  EXPECT_EQ(ids_of(ch["token_ids"]), want);
  EXPECT_EQ(ch["text"], text);
  EXPECT_EQ(r.j["usage"]["prompt_tokens"], 13);  // BOS + 12, as run.c encodes it
  // Streamed, the chunks concatenate to the same text.
  auto st = post_stream(srv.port(), "/v1/completions",
                        {{"prompt", prompt}, {"max_tokens", 40}, {"temperature", 0}, {"stream", true}});
  ASSERT_EQ(st.status, 200);
  std::string streamed;
  for (const json& c : st.chunks)
    if (c.contains("choices") && !c["choices"].empty()) streamed += c["choices"][0].value("text", "");
  EXPECT_EQ(streamed, text);
}

TEST(Server, ErrorsUseTheOpenAiShape) {
  TestServer srv(stories_bin(), stories_opts());
  const int p = srv.port();
  expect_error(http_request(p, "POST", "/v1/completions", "{\"prompt\": [1,"), 400, "invalid JSON");
  expect_error(http_request(p, "POST", "/v1/completions", "[1, 2]"), 400, "JSON object");
  expect_error(http_request(p, "POST", "/v1/chat/completions", "not json"), 400, "invalid JSON");
  auto unknown = post(p, "/v1/completions", {{"model", "gpt-4"}, {"prompt", {1}}});
  expect_error(unknown, 404, "gpt-4");
  EXPECT_EQ(unknown.j["error"]["code"], "model_not_found");
  auto n2 = post(p, "/v1/completions", {{"prompt", {1}}, {"n", 0}});
  expect_error(n2, 400, "got 0");
  EXPECT_EQ(n2.j["error"]["param"], "n");
  EXPECT_EQ(n2.j["error"]["type"], "invalid_request_error");
  expect_error(post(p, "/v1/completions", {{"prompt", {1}}, {"max_tokens", -5}}), 400, "max_tokens");
  auto too_long = post(p, "/v1/completions", {{"prompt", prompt_of(0, 600)}, {"max_tokens", 4}});
  expect_error(too_long, 400, "context");
  EXPECT_EQ(too_long.j["error"]["code"], "context_length_exceeded");
  expect_error(post(p, "/v1/completions", {{"prompt", prompt_of(0, 500)}, {"max_tokens", 100}}), 400, "exceeds");
  expect_error(post(p, "/v1/completions", {{"prompt", {1, 99999}}}), 400, "vocabulary");
  expect_error(post(p, "/v1/completions", {{"prompt", {1}}, {"temperature", "hot"}}), 400, "temperature");
  expect_error(post(p, "/v1/completions", {{"prompt", {1}}, {"top_p", 1.5}}), 400, "top_p");
  expect_error(post(p, "/v1/completions", {{"prompt", "Once upon a time"}}), 400,
               "this model has no tokenizer; send token ids");
  expect_error(post(p, "/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "hi"}}}}}), 400,
               "no tokenizer");
  expect_error(post(p, "/v1/completions", {{"prompt", {1}}, {"logprobs", 6}}), 400, "logprobs");
  expect_error(post(p, "/v1/completions", {{"max_tokens", 3}}), 400, "prompt");
  expect_error(http_request(p, "GET", "/v1/nothing"), 404, "no route");
  expect_error(http_request(p, "GET", "/v1/models/gpt-4"), 404, "gpt-4");
  // Bodies over 8 MiB: 413.
  const std::string big = "{\"prompt\": [1], \"user\": \"" + std::string(9 << 20, 'x') + "\"}";
  expect_error(http_request(p, "POST", "/v1/completions", big), 413, "limit");
  // The server still works, and counted what it answered.
  EXPECT_EQ(post(p, "/v1/completions", {{"prompt", {1}}, {"max_tokens", 2}}).status, 200);
  // httplib counts a response (its logger) after writing it: the 413's connection may still be closing.
  const std::string m = wait_metrics(p, [](const std::string& t) {
    return metric(t, "mxserve_http_requests_total{code=\"413\"}") == 1;
  });
  EXPECT_GE(metric(m, "mxserve_http_requests_total{code=\"400\"}"), 10);
  EXPECT_EQ(metric(m, "mxserve_http_requests_total{code=\"413\"}"), 1);
}

TEST(Server, FullQueueAnswers429) {
  TestServer::Options o = stories_opts(1);
  o.engine.max_queue = 1;
  o.http_threads = 16;
  TestServer srv(stories_bin(), o);
  const int n = 12;
  std::vector<HttpResult> res(n);
  std::vector<std::thread> th;
  std::atomic<int> ready{0};
  for (int i = 0; i < n; ++i)
    th.emplace_back([&, i] {
      ++ready;
      while (ready < n) std::this_thread::yield();
      res[i] = post(srv.port(), "/v1/completions",
                    {{"prompt", prompt_of(i, 8)}, {"max_tokens", 480}, {"ignore_eos", true}, {"temperature", 0}});
    });
  for (auto& t : th) t.join();
  int ok = 0, full = 0;
  for (const auto& r : res) {
    if (r.status == 200) {
      ++ok;
      EXPECT_EQ(r.j["usage"]["completion_tokens"], 480);
    } else {
      expect_error(r, 429, "capacity");
      EXPECT_EQ(r.j["error"]["code"], "rate_limit_exceeded");
      EXPECT_TRUE(r.headers.count("Retry-After"));
      ++full;
    }
  }
  EXPECT_GE(ok, 1);
  EXPECT_GE(full, 1);
  // The engine publishes its gauges at the end of the step that finished the last request.
  const std::string m = wait_metrics(srv.port(), [](const std::string& t) {
    return metric(t, "mxserve_requests_running") == 0 && metric(t, "mxserve_requests_waiting") == 0;
  });
  EXPECT_EQ(metric(m, "mxserve_http_requests_total{code=\"429\"}"), full);
  EXPECT_EQ(metric(m, "mxserve_requests_running"), 0);
  EXPECT_EQ(metric(m, "mxserve_requests_waiting"), 0);
}

// A text model: synthetic llama "small" + a GPT-2-derived tokenizer.json.
class TextServer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    write_text_model(dir_->path().string(), 3);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string model_dir() { return dir_->path().string(); }
  static TestServer::Options opts() {
    TestServer::Options o;
    o.tokenizer = (dir_->path() / "tokenizer.json").string();
    o.name = "text-model";
    return o;
  }
  static TempDir* dir_;
};
TempDir* TextServer::dir_ = nullptr;

TEST_F(TextServer, TextPromptsChatStopStringsAndLogprobs) {
  TestServer srv(model_dir(), opts());
  const mx::Tokenizer& tok = *srv.tokenizer();
  const int p = srv.port();
  const std::string prompt = "Once upon a time, caf\xC3\xA9 \xE2\x82\xAC";
  json body = {{"model", "text-model"}, {"prompt", prompt}, {"max_tokens", 40}, {"temperature", 0},
               {"ignore_eos", true}};
  auto r = post(p, "/v1/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const json& ch = r.j["choices"][0];
  const std::string text = ch["text"];
  const auto ids = ids_of(ch["token_ids"]);
  ASSERT_EQ(ids.size(), 40u);
  EXPECT_EQ(r.j["usage"]["prompt_tokens"], tok.encode(prompt, true, true).size());
  // The text is the tokens' bytes (invalid sequences, if the random model makes any, as U+FFFD).
  EXPECT_EQ(text, mx::server::sanitize_utf8(tok.decode(ids)));

  // Streaming (seeded sampling, so random bytes split characters across tokens) equals non-streaming.
  json sb = body;
  sb["temperature"] = 1.0;
  sb["seed"] = 11;
  auto whole = post(p, "/v1/completions", sb);
  sb["stream"] = true;
  auto s = post_stream(p, "/v1/completions", sb);
  EXPECT_TRUE(s.done && !s.bad_event);
  Joined j = join_stream(s, false);
  EXPECT_EQ(j.text, whole.j["choices"][0]["text"]);
  EXPECT_EQ(j.ids, ids_of(whole.j["choices"][0]["token_ids"]));
  for (const json& c : s.chunks) {
    const std::string t = c["choices"][0]["text"];
    EXPECT_EQ(mx::server::sanitize_utf8(t), t);
  }

  // A stop string: the text ends right before its first occurrence; streamed the same.
  size_t at = std::string::npos;
  for (size_t i = 3; i + 2 < text.size() && at == std::string::npos; ++i)
    if (std::isalnum((unsigned char)text[i]) && std::isalnum((unsigned char)text[i + 1])) at = i;
  ASSERT_NE(at, std::string::npos) << "no two alphanumeric characters in: " << text;
  const std::string stop = text.substr(at, 2);
  json stb = body;
  stb["stop"] = {"\x01never", stop};
  auto st = post(p, "/v1/completions", stb);
  ASSERT_EQ(st.status, 200);
  EXPECT_EQ(st.j["choices"][0]["text"], text.substr(0, text.find(stop)));
  EXPECT_EQ(st.j["choices"][0]["finish_reason"], "stop");
  EXPECT_LE(st.j["usage"]["completion_tokens"].get<int>(), 40);
  stb["stream"] = true;
  Joined sj = join_stream(post_stream(p, "/v1/completions", stb), false);
  EXPECT_EQ(sj.text, text.substr(0, text.find(stop)));
  EXPECT_EQ(sj.finish, "stop");

  // Chat: the fallback template, streamed deltas equal the message; logprobs.
  json messages = {{{"role", "system"}, {"content", "You are terse."}}, {{"role", "user"}, {"content", "Hello!"}}};
  json cb = {{"model", "text-model"}, {"messages", messages}, {"max_completion_tokens", 24}, {"temperature", 0},
             {"logprobs", true}, {"ignore_eos", true}};
  auto c = post(p, "/v1/chat/completions", cb);
  ASSERT_EQ(c.status, 200) << c.body;
  EXPECT_EQ(c.j["object"], "chat.completion");
  EXPECT_EQ(c.j["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  const json& msg = c.j["choices"][0]["message"];
  EXPECT_EQ(msg["role"], "assistant");
  EXPECT_EQ(c.j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(c.j["usage"]["completion_tokens"], 24);
  EXPECT_EQ(c.j["usage"]["prompt_tokens"], tok.encode(mx::server::render_chat(messages), true, true).size());
  const json& lp = c.j["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(lp.size(), 24u);
  for (const json& e : lp) {
    EXPECT_LE(e["logprob"].get<double>(), 0.0);
    EXPECT_TRUE(e["bytes"].is_array() && e["top_logprobs"].is_array());
  }
  cb["stream"] = true;
  cb["stream_options"] = {{"include_usage", true}};
  auto cs = post_stream(p, "/v1/chat/completions", cb);
  ASSERT_TRUE(cs.done);
  ASSERT_GE(cs.chunks.size(), 3u);
  EXPECT_EQ(cs.chunks[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(cs.chunks[0]["choices"][0]["delta"]["role"], "assistant");
  Joined cj = join_stream(cs, true);
  EXPECT_EQ(cj.text, msg["content"]);
  EXPECT_EQ(cj.finish, "length");
  EXPECT_EQ(cs.chunks.back()["usage"]["completion_tokens"], 24);
  EXPECT_EQ(cs.chunks.back()["usage"]["prompt_tokens"], c.j["usage"]["prompt_tokens"]);
  size_t n_lp = 0;
  for (const json& k : cs.chunks)
    if (!k["choices"].empty() && k["choices"][0]["logprobs"].is_object())
      n_lp += k["choices"][0]["logprobs"]["content"].size();
  EXPECT_EQ(n_lp, 24u);
}

// Token-id prompts and "return_token_ids": true stream one event per generated
// token, even where a token's text is held back (a byte of an unfinished UTF-8
// character) or empty, so a client can time every token; the text still
// concatenates to the non-streamed completion.
TEST_F(TextServer, TokenIdRequestsStreamOneEventPerToken) {
  TestServer srv(model_dir(), opts());
  const int p = srv.port();
  const mx::Tokenizer& tok = *srv.tokenizer();
  const std::vector<int32_t> ids = tok.encode("Once upon a time", false);
  for (const json& prompt_field : {json(ids), json("Once upon a time")}) {
    json body = {{"prompt", prompt_field}, {"max_tokens", 48}, {"temperature", 0}, {"ignore_eos", true}};
    if (prompt_field.is_string()) body["return_token_ids"] = true;
    auto whole = post(p, "/v1/completions", body);
    ASSERT_EQ(whole.status, 200) << whole.body;
    body["stream"] = true;
    auto st = post_stream(p, "/v1/completions", body);
    ASSERT_EQ(st.status, 200);
    std::string text;
    std::vector<int32_t> streamed;
    int events_with_tokens = 0;
    for (const json& c : st.chunks) {
      const json& ch = c["choices"][0];
      text += ch["text"].get<std::string>();
      const auto t = ids_of(ch["token_ids"]);
      if (!t.empty()) ++events_with_tokens;
      EXPECT_LE(t.size(), 1u) << c.dump();
      streamed.insert(streamed.end(), t.begin(), t.end());
    }
    EXPECT_EQ(events_with_tokens, 48) << prompt_field.dump();
    EXPECT_EQ(streamed, ids_of(whole.j["choices"][0]["token_ids"]));
    EXPECT_EQ(text, whole.j["choices"][0]["text"]);
  }
}

TEST_F(TextServer, ClientDisconnectMidStreamCancelsTheRequest) {
  TestServer srv(model_dir(), opts());
  const int p = srv.port();
  int seen = 0;
  auto s = post_stream(p, "/v1/completions",
                       {{"prompt", {1, 2, 3}}, {"max_tokens", 2000}, {"ignore_eos", true}, {"stream", true},
                        {"temperature", 0}},
                       [&](const json&) { return ++seen < 2; });  // two chunks, then hang up
  EXPECT_EQ(seen, 2);
  EXPECT_FALSE(s.done);
  const std::string m = wait_metrics(p, [](const std::string& t) {
    return metric(t, "mxserve_requests_total{finish_reason=\"abort\"}") == 1 && metric(t, "mxserve_requests_running") == 0;
  });
  EXPECT_EQ(metric(m, "mxserve_requests_total{finish_reason=\"abort\"}"), 1);
  EXPECT_EQ(metric(m, "mxserve_requests_running"), 0);
  EXPECT_LT(metric(m, "mxserve_generation_tokens_total"), 2000);
  EXPECT_EQ(metric(m, "mxserve_kv_blocks{state=\"used\"}"), metric(m, "mxserve_kv_blocks{state=\"cached\"}"));
  EXPECT_EQ(srv.http().in_flight(), 0);
}

// The real binary: SIGTERM lets the in-flight stream finish, refuses new work, exits 0.
// `mxserve serve --model M ...` as a child process on a free port (its stderr in log).
struct Spawned {
  pid_t pid = 0;
  int port = 0;
};
Spawned spawn_serve(const std::vector<std::string>& extra, const std::string& log) {
  const std::string bin = mxserve();
  std::vector<std::string> args = {bin, "serve", "--port", "0", "--served-model-name", "m", "--threads", "1"};
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  Spawned sp;
  EXPECT_EQ(posix_spawn(&sp.pid, bin.c_str(), &fa, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  for (int i = 0; i < 300 && !sp.port; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const std::string t = slurp(log);
    const size_t at = t.find("http://127.0.0.1:");
    if (at != std::string::npos && t.find(" (", at) != std::string::npos) sp.port = std::stoi(t.substr(at + 17));
  }
  if (!sp.port) {
    kill(sp.pid, SIGKILL);
    waitpid(sp.pid, nullptr, 0);
    ADD_FAILURE() << "server did not start: " << slurp(log);
  }
  return sp;
}

// Waits up to `seconds` for pid to exit; its wait status, or -1 (then it is killed).
int wait_exit(pid_t pid, double seconds) {
  int st = 0;
  for (int i = 0; i < int(seconds * 50); ++i) {
    if (waitpid(pid, &st, WNOHANG) == pid) return st;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &st, 0);
  return -1;
}

TEST_F(TextServer, SigtermDrainsInFlightRequestsAndExitsZero) {
  TempDir d;
  const std::string log = d / "serve.log";
  const Spawned sp = spawn_serve({"--model", model_dir()}, log);
  if (!sp.port) return;
  const pid_t pid = sp.pid;
  const int port = sp.port;
  std::atomic<bool> signalled{false};
  int during_drain = 0;
  auto s = post_stream(port, "/v1/completions",
                       {{"model", "m"}, {"prompt", {1, 2, 3}}, {"max_tokens", 600}, {"ignore_eos", true},
                        {"stream", true}, {"temperature", 0}},
                       [&](const json&) {
                         if (!signalled.exchange(true)) {
                           kill(pid, SIGTERM);
                           // Until the signal is handled /health says 200; then 503 while the stream drains.
                           for (int k = 0; k < 400 && (during_drain = http_request(port, "GET", "/health").status) == 200; ++k)
                             std::this_thread::sleep_for(std::chrono::milliseconds(5));
                         }
                         return true;
                       });
  EXPECT_TRUE(s.done);
  Joined j = join_stream(s, false);
  EXPECT_EQ(j.ids.size(), 600u);
  EXPECT_EQ(j.finish, "length");
  EXPECT_EQ(during_drain, 503);
  const int st = wait_exit(pid, 10);
  ASSERT_NE(st, -1) << "server did not exit after SIGTERM: " << slurp(log);
  ASSERT_TRUE(WIFEXITED(st)) << slurp(log);
  EXPECT_EQ(WEXITSTATUS(st), 0) << slurp(log);
  EXPECT_NE(slurp(log).find("SIGTERM"), std::string::npos);
}

TEST_F(TextServer, SecondSigtermQuitsWithoutWaitingForTheDrain) {
  TempDir d;
  const std::string log = d / "serve.log";
  const Spawned sp = spawn_serve({"--model", model_dir(), "--shutdown-timeout", "600"}, log);
  if (!sp.port) return;
  std::atomic<bool> signalled{false};
  std::thread client([&] {
    post_stream(sp.port, "/v1/completions",
                {{"model", "m"}, {"prompt", {1, 2, 3}}, {"max_tokens", 2000}, {"ignore_eos", true},
                 {"stream", true}, {"temperature", 0}},
                [&](const json&) {
                  if (!signalled.exchange(true)) {
                    kill(sp.pid, SIGTERM);  // the drain would wait for all 2000 tokens
                    for (int k = 0; k < 400 && http_request(sp.port, "GET", "/health").status == 200; ++k)
                      std::this_thread::sleep_for(std::chrono::milliseconds(5));
                    kill(sp.pid, SIGTERM);
                  }
                  return true;
                });
  });
  const int st = wait_exit(sp.pid, 20);
  client.join();
  ASSERT_NE(st, -1) << "a second SIGTERM did not end the server: " << slurp(log);
  ASSERT_TRUE(WIFEXITED(st)) << slurp(log);
  EXPECT_EQ(WEXITSTATUS(st), 128 + SIGTERM) << slurp(log);
  EXPECT_NE(slurp(log).find("second SIGTERM"), std::string::npos) << slurp(log);
}
