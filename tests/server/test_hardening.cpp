// The server under bad input and load (issue "Hardening"): request limits
// with clear 400s, a flood against --max-queue (429 for the excess, every
// accepted request gets exactly its own tokens, bounded memory), slow readers,
// requests beyond the KV cache (400 or preemption, never a crash), and many
// clients hanging up mid-stream (their KV blocks return to free).
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <mutex>
#include <regex>

#include "server/server_test_util.h"

using namespace mxtest;

namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
#else
constexpr bool kAddressSanitizer = false;
#endif

// Resident set size and its peak since reset_peak_rss(), MiB (/proc/self/status VmRSS, VmHWM).
double status_mib(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field, 0) == 0) return std::stod(line.substr(std::string(field).size())) / 1024.0;
  return std::nan("");
}
void reset_peak_rss() { std::ofstream("/proc/self/clear_refs") << "5"; }

// Body of a greedy token-id completion of prompt_of(i, len).
json greedy(int i, int len, int max_tokens) {
  return {{"prompt", prompt_of(i, len)}, {"max_tokens", max_tokens}, {"ignore_eos", true}, {"temperature", 0}};
}
// The same sampled with seed i: stories260K's greedy continuations of similar
// prompts converge, seeded samples tell every request apart.
json seeded(int i, int len, int max_tokens) {
  json b = greedy(i, len, max_tokens);
  b["temperature"] = 1.0;
  b["seed"] = 1000 + i;
  return b;
}

}  // namespace

TEST(Hardening, EveryRequestLimitIsAClear400) {
  TestServer::Options o = stories_opts(4);
  o.limits.max_tokens = 64;
  o.limits.max_prompt_tokens = 100;
  o.limits.max_prompts = 3;
  TestServer srv(stories_bin(), o);
  const int p = srv.port();
  auto expect_param = [&](const json& body, const std::string& param, const std::string& fragment) {
    const HttpResult r = post(p, "/v1/completions", body);
    expect_error(r, 400, fragment);
    EXPECT_EQ(r.j["error"]["param"], param) << r.body;
  };
  json b = greedy(0, 4, 65);
  expect_param(b, "max_tokens", "limit of 64");
  b = greedy(0, 101, 4);
  expect_param(b, "prompt", "limit of 100 prompt tokens");
  b = {{"prompt", {{1, 2}, {1, 3}, {1, 4}, {1, 5}}}, {"max_tokens", 2}};
  expect_param(b, "prompt", "limit of 3 per request");
  b = greedy(0, 4, 2);
  b["n"] = 4;  // limit of 3 choices (max_prompts)
  expect_param(b, "n", "'n' must be in [1, 3]");
  b = greedy(0, 4, 2);
  b["stop_token_ids"] = std::vector<int>(257, 5);
  expect_param(b, "stop_token_ids", "at most 256");
  // Stop strings are checked before the missing tokenizer is.
  b = greedy(0, 4, 2);
  b["stop"] = {"a", "b", "c", "d", "e"};
  expect_param(b, "stop", "at most 4");
  b["stop"] = std::string(1025, 'x');
  expect_param(b, "stop", "over the limit of 1024");
  // Within every limit: served, and a default max_tokens is cut to the limit.
  auto ok = post(p, "/v1/completions", {{"prompt", prompt_of(1, 100)}, {"ignore_eos", true}, {"temperature", 0},
                                        {"max_tokens", 64}});
  ASSERT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(ok.j["usage"]["completion_tokens"], 64);
  auto three = post(p, "/v1/completions", {{"prompt", {{1, 2}, {1, 3}, {1, 4}}}, {"max_tokens", 2}});
  ASSERT_EQ(three.status, 200) << three.body;
  EXPECT_EQ(three.j["choices"].size(), 3u);
}

// Found by a probe of the server (each crashed it, or held gigabytes): a body nested 100,000 deep
// (a segfault copying it), a regex whose nested counts ask for a billion grammar elements, a stop
// id past the vocabulary (accepted, never matched), chat_template_kwargs that is not an object
// (checked only where a template takes it).
TEST(Hardening, ProbedBadInputIsAClear400) {
  TestServer::Options o = stories_opts(2);
  o.tokenizer = (stories260k() / "tok512.bin").string();
  TestServer srv(stories_bin(), o);
  const int p = srv.port();
  const std::string deep = R"({"prompt":[1],"max_tokens":2,"tools":)" + std::string(100000, '[') +
                           std::string(100000, ']') + "}";
  expect_error(http_request(p, "POST", "/v1/completions", deep), 400, "more than 512 deep");
  auto expect_param = [&](const std::string& path, const json& body, const std::string& param,
                          const std::string& fragment) {
    const HttpResult r = post(p, path, body);
    expect_error(r, 400, fragment);
    EXPECT_EQ(r.j["error"]["param"], param) << r.body;
  };
  const json hi = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 2}};
  json b = hi;
  b["regex"] = "((a{1000}){1000}){1000}";
  expect_param("/v1/chat/completions", b, "regex", "pattern too large");
  b = greedy(0, 4, 2);
  b["stop_token_ids"] = {5, 512};
  expect_param("/v1/completions", b, "stop_token_ids", "outside the vocabulary [0, 512)");
  b = hi;
  b["chat_template_kwargs"] = 5;
  expect_param("/v1/chat/completions", b, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
  b = hi;
  b["regex"] = "(ab|cd){3}";
  const HttpResult ok = post(p, "/v1/chat/completions", b);  // still serving, structured output too
  ASSERT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(ok.j["choices"][0]["message"]["content"].get<std::string>().size(), 2u);
}

// Found by a second probe (each answered 200 and ignored the field, or its output broke
// the schema it was given): fields of the wrong type, vLLM's fields this server does not
// implement, schemas that match nothing. vLLM's guided_* spellings constrain as they do there.
TEST(Hardening, ProbedFieldsAreCheckedAndVllmsGuidedFieldsConstrain) {
  TestServer::Options o = stories_opts(2);
  o.tokenizer = (stories260k() / "tok512.bin").string();
  TestServer srv(stories_bin(), o);
  const int p = srv.port();
  const json hi = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 24}, {"temperature", 0}};
  auto expect_param = [&](const json& body, const std::string& param, const std::string& fragment) {
    const HttpResult r = post(p, "/v1/chat/completions", body);
    expect_error(r, 400, fragment);
    EXPECT_EQ(r.j["error"]["param"], param) << body.dump() << " -> " << r.body;
  };
  auto with = [&](const char* k, const json& v) {
    json b = hi;
    b[k] = v;
    return b;
  };
  expect_param(with("user", 5), "user", "'user' must be a string");
  expect_param(with("reasoning_effort", 5), "reasoning_effort", "must be a string");
  expect_param(with("parallel_tool_calls", "x"), "parallel_tool_calls", "must be a boolean");
  expect_param(with("min_tokens", 5), "min_tokens", "not supported");
  expect_param(with("guided_grammar", "root ::= \"a\""), "guided_grammar", "not supported");
  json b = with("regex", "a+");
  b["guided_regex"] = "b+";
  expect_param(b, "guided_regex", "cannot be combined with 'regex'");
  expect_param(with("guided_choice", json::array()), "guided_choice", "non-empty array of strings");
  expect_param(with("guided_json", "{"), "guided_json", "not JSON");
  auto schema = [&](const json& s) {
    return with("response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", s}}}});
  };
  expect_param(schema({{"type", json::array()}}), "response_format", "matches nothing");
  expect_param(schema({{"type", "string"}, {"enum", {1, 2}}}), "response_format", "matches nothing");
  b = schema({{"type", "string"}});
  b["response_format"]["json_schema"]["name"] = 5;
  expect_param(b, "response_format", "json_schema.name must be a string");
  b = hi;
  b["messages"][0]["content"] = json::array();
  expect_param(b, "messages", "empty array");
  b = hi;
  b["messages"][0]["name"] = 5;
  expect_param(b, "messages", "name must be a string");

  auto content = [&](const json& body) {
    const HttpResult r = post(p, "/v1/chat/completions", body);
    EXPECT_EQ(r.status, 200) << body.dump() << " -> " << r.body;
    return r.status == 200 ? r.j["choices"][0]["message"]["content"].get<std::string>() : std::string();
  };
  const std::string choice = content(with("guided_choice", {"yes", "no", "maybe so"}));
  EXPECT_TRUE(choice == "yes" || choice == "no" || choice == "maybe so") << choice;
  EXPECT_TRUE(std::regex_match(content(with("guided_regex", "(ab|cd){3}")), std::regex("(ab|cd){3}")));
  for (const json& s : {json({{"type", "string"}, {"enum", {"x", 1, "y"}}}), json(R"({"enum":["x","y"]})")}) {
    const std::string text = content(with("guided_json", s));
    EXPECT_TRUE(text == "\"x\"" || text == "\"y\"") << s.dump() << " -> " << text;
  }
  expect_param(with("guided_json", std::string(100000, '[')), "guided_json", "more than 512 deep");
  expect_param(with("structured_outputs", {{"grammar", "x"}}), "structured_outputs", "not supported");
  expect_param(with("structured_outputs", {{"regex", "a"}, {"choice", {"a"}}}), "structured_outputs", "one of");
  expect_param(with("add_generation_prompt", false), "add_generation_prompt", "not supported");
  const std::string so = content(with("structured_outputs", {{"choice", {"left", "right"}}}));  // vLLM's newer spelling
  EXPECT_TRUE(so == "left" || so == "right") << so;
  // Neutral values are taken.
  for (const auto& [k, v] : {std::pair<const char*, json>{"min_tokens", 0}, {"logits_processors", json::array()},
                             {"structured_outputs", json::object()}, {"reasoning_effort", "xhigh"}})
    EXPECT_FALSE(content(with(k, v)).empty()) << k;
}

TEST(Hardening, FloodGets429sAndEveryAcceptedRequestItsOwnTokens) {
  TestServer::Options o = stories_opts(4);
  o.engine.max_queue = 4;
  o.http_threads = 64;
  TestServer srv(stories_bin(), o);
  auto ref = mx::load_model(stories_bin());
  const int n = 48, len = 6, gen = 24;
  std::vector<std::vector<int32_t>> expected(n);
  for (int i = 0; i < n; ++i) expected[size_t(i)] = reference(*ref, prompt_of(i, len), gen, 1.0f, uint64_t(1000 + i), true);

  auto flood = [&](int round) {
    std::vector<HttpResult> res(n);
    std::vector<std::thread> th;
    std::atomic<int> ready{0};
    for (int i = 0; i < n; ++i)
      th.emplace_back([&, i] {
        ++ready;
        while (ready < n) std::this_thread::yield();
        res[size_t(i)] = post(srv.port(), "/v1/completions", seeded(i, len, gen));
      });
    for (auto& t : th) t.join();
    int ok = 0, full = 0;
    for (int i = 0; i < n; ++i) {
      const HttpResult& r = res[size_t(i)];
      if (r.status == 200) {
        ++ok;
        // Its own tokens: every request samples a different continuation.
        EXPECT_EQ(ids_of(r.j["choices"][0]["token_ids"]), expected[size_t(i)]) << "round " << round << " request " << i;
        EXPECT_EQ(r.j["usage"]["prompt_tokens"], len);
      } else {
        expect_error(r, 429, "capacity");
        EXPECT_EQ(r.j["error"]["type"], "rate_limit_error");
        ++full;
      }
    }
    EXPECT_EQ(ok + full, n);
    EXPECT_GE(ok, 4) << "round " << round;
    EXPECT_GE(full, 1) << "round " << round;
    return ok;
  };
  for (int i = 0; i < n; ++i) ASSERT_NE(expected[size_t(i)], expected[size_t((i + 1) % n)]);
  flood(0);  // warms up allocator pools and thread stacks
  const double rss0 = status_mib("VmRSS:");
  reset_peak_rss();
  int accepted = 0;
  for (int round = 1; round <= 3; ++round) accepted += flood(round);
  const double peak = status_mib("VmHWM:"), rss1 = status_mib("VmRSS:");
  std::printf("[ figures  ] flood of %d x 3 requests, %d accepted: RSS %.1f MiB before, %.1f MiB after, peak %.1f MiB\n",
              n, accepted, rss0, rss1, peak);
  // Bounded: the queue holds at most max_running + max_queue requests of a small model.
  // (Not under ASan, whose quarantine keeps freed memory resident by design.)
  if (!kAddressSanitizer) {
    EXPECT_LT(peak - rss0, 64.0);
    EXPECT_LT(rss1 - rss0, 16.0);
  }
  const std::string m = wait_metrics(srv.port(), [](const std::string& t) {
    return metric(t, "mxserve_requests_running") == 0 && metric(t, "mxserve_requests_waiting") == 0;
  });
  EXPECT_EQ(metric(m, "mxserve_kv_blocks{state=\"used\"}"), metric(m, "mxserve_kv_blocks{state=\"cached\"}"));
  EXPECT_EQ(srv.http().in_flight(), 0);
}

TEST(Hardening, SlowReaderDoesNotHoldUpOthersAndGetsItsWholeStream) {
  TestServer srv(stories_bin(), stories_opts(4));
  auto ref = mx::load_model(stories_bin());
  const int p = srv.port();
  std::atomic<bool> fast_done{false};
  std::atomic<int> chunks_before_fast_done{0};
  json slow_body = greedy(7, 5, 200);
  slow_body["stream"] = true;
  SseResult slow;
  std::thread reader([&] {
    slow = post_stream(p, "/v1/completions", slow_body, [&](const json&) {
      if (!fast_done) ++chunks_before_fast_done;
      std::this_thread::sleep_for(std::chrono::milliseconds(15));  // reads one chunk per 15 ms
      return true;
    });
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  for (int i = 0; i < 6; ++i) {
    auto r = post(p, "/v1/completions", greedy(i, 5, 16));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(ids_of(r.j["choices"][0]["token_ids"]), reference(*ref, prompt_of(i, 5), 16, 0, 0, true));
  }
  fast_done = true;
  reader.join();
  EXPECT_TRUE(slow.done && !slow.bad_event);
  Joined j = join_stream(slow, false);
  EXPECT_EQ(j.ids, reference(*ref, prompt_of(7, 5), 200, 0, 0, true));
  EXPECT_EQ(j.finish, "length");
  // The fast requests finished while the slow reader was still reading (it needs > 3 s for its chunks).
  EXPECT_LT(chunks_before_fast_done.load(), int(slow.chunks.size()));
}

TEST(Hardening, RequestsBeyondTheKvCacheAre400OrPreemptedNeverACrash) {
  TestServer::Options o = stories_opts(4);
  o.engine.kv_blocks = 12;  // 192 tokens in all; stories260K's context is 512
  TestServer srv(stories_bin(), o);
  auto ref = mx::load_model(stories_bin());
  const int p = srv.port();
  // One sequence cannot outgrow the cache: a clear 400 whether the prompt or max_tokens is too large.
  auto big_prompt = post(p, "/v1/completions", greedy(0, 200, 4));
  expect_error(big_prompt, 400, "KV cache");
  EXPECT_EQ(big_prompt.j["error"]["code"], "context_length_exceeded");
  auto big_gen = post(p, "/v1/completions", greedy(0, 20, 400));  // 420 tokens fit the context, not the cache
  expect_error(big_gen, 400, "KV cache capacity of 192 tokens");
  EXPECT_EQ(big_gen.j["error"]["code"], "context_length_exceeded");
  // Together they do: 4 x (20 + 100) tokens = 32 blocks > 12, so the engine preempts and recomputes; outputs stay exact.
  std::vector<HttpResult> res(4);
  std::vector<std::thread> th;
  for (int i = 0; i < 4; ++i)
    th.emplace_back([&, i] { res[size_t(i)] = post(p, "/v1/completions", greedy(i + 1, 20, 100)); });
  for (auto& t : th) t.join();
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(res[size_t(i)].status, 200) << res[size_t(i)].body;
    EXPECT_EQ(ids_of(res[size_t(i)].j["choices"][0]["token_ids"]), reference(*ref, prompt_of(i + 1, 20), 100, 0, 0, true));
  }
  const std::string m = wait_metrics(p, [](const std::string& t) { return metric(t, "mxserve_requests_running") == 0; });
  EXPECT_GT(metric(m, "mxserve_preemptions_total"), 0);
  EXPECT_EQ(metric(m, "mxserve_kv_blocks{state=\"used\"}"), metric(m, "mxserve_kv_blocks{state=\"cached\"}"));
  EXPECT_EQ(post(p, "/v1/completions", greedy(9, 4, 4)).status, 200);
}

TEST(Hardening, ManyClientsHangingUpMidStreamFreeTheirKvBlocks) {
  TestServer srv(stories_bin(), stories_opts(8));
  const int p = srv.port();
  const int n = 8;
  std::vector<std::thread> th;
  std::atomic<int> hung_up{0};
  for (int i = 0; i < n; ++i)
    th.emplace_back([&, i] {
      json b = greedy(i, 40, 450);
      b["stream"] = true;
      int seen = 0;
      auto s = post_stream(p, "/v1/completions", b, [&](const json&) { return ++seen < 3 + i; });
      if (!s.done) ++hung_up;
    });
  for (auto& t : th) t.join();
  EXPECT_EQ(hung_up, n);
  const std::string m = wait_metrics(p, [&](const std::string& t) {
    return metric(t, "mxserve_requests_total{finish_reason=\"abort\"}") == n && metric(t, "mxserve_requests_running") == 0;
  });
  EXPECT_EQ(metric(m, "mxserve_requests_total{finish_reason=\"abort\"}"), n);
  EXPECT_LT(metric(m, "mxserve_generation_tokens_total"), n * 450);
  // Every block is free again, or held only by the prefix cache (evictable).
  EXPECT_EQ(metric(m, "mxserve_kv_blocks{state=\"used\"}"), metric(m, "mxserve_kv_blocks{state=\"cached\"}"));
  EXPECT_EQ(srv.http().in_flight(), 0);
  // And the server goes on serving.
  EXPECT_EQ(post(p, "/v1/completions", greedy(1, 4, 4)).status, 200);
}
