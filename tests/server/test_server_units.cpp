// Server building blocks without sockets: incremental detokenization (UTF-8,
// stop strings), the chat fallback template, request parsing and the metrics
// text.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_depth.h"
#include "server/chat_prompt.h"
#include "server/metrics.h"
#include "server/openai_api.h"
#include "server/text_stream.h"

using namespace mx::server;
using nlohmann::json;

namespace {

// Feeds bytes in the given pieces; returns what came out, one string per push, then finish().
std::vector<std::string> feed(TextStream& ts, const std::vector<std::string>& pieces) {
  std::vector<std::string> out;
  for (const auto& p : pieces) out.push_back(ts.push_bytes(p));
  out.push_back(ts.finish());
  return out;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x;
  return s;
}

bool valid_utf8(const std::string& s) { return sanitize_utf8(s) == s; }

}  // namespace

TEST(TextStream, HoldsIncompleteUtf8UntilComplete) {
  // "é" = C3 A9, "€" = E2 82 AC, "😀" = F0 9F 98 80, split across pieces at every byte.
  const std::string text = "a\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80!";
  for (size_t cut = 1; cut < text.size(); ++cut) {
    TextStream ts(nullptr, {});
    auto out = feed(ts, {text.substr(0, cut), text.substr(cut)});
    for (const auto& o : out) EXPECT_TRUE(valid_utf8(o)) << "cut " << cut;
    EXPECT_EQ(join(out), text) << "cut " << cut;
  }
  // One byte per piece.
  TextStream ts(nullptr, {});
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  auto out = feed(ts, bytes);
  EXPECT_EQ(join(out), text);
  EXPECT_EQ(out[1], "");          // C3 alone is held
  EXPECT_EQ(out[2], "\xC3\xA9");  // ... until A9 arrives
  for (const auto& o : out) EXPECT_TRUE(valid_utf8(o));
}

TEST(TextStream, InvalidBytesBecomeReplacementCharacters) {
  EXPECT_EQ(sanitize_utf8("a\x80z"), "a\xEF\xBF\xBDz");
  EXPECT_EQ(sanitize_utf8("\xC3z"), "\xEF\xBF\xBDz");            // lead byte without continuation
  EXPECT_EQ(sanitize_utf8("\xE2\x82z"), "\xEF\xBF\xBDz");        // maximal subpart: one U+FFFD
  EXPECT_EQ(sanitize_utf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(sanitize_utf8("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");                  // overlong
  std::string tail;
  EXPECT_EQ(sanitize_utf8("ok\xF0\x9F", true, &tail), "ok");
  EXPECT_EQ(tail, "\xF0\x9F");
  TextStream ts(nullptr, {});
  auto out = feed(ts, {"x\xF0\x9F"});  // never completed: U+FFFD at the end
  EXPECT_EQ(join(out), "x\xEF\xBF\xBD");
}

TEST(TextStream, StopStringsCutTextAndHoldPossiblePrefixes) {
  {
    TextStream ts(nullptr, {"END"});
    EXPECT_EQ(ts.push_bytes("hello E"), "hello ");  // "E" may start END
    EXPECT_EQ(ts.push_bytes("N"), "");
    EXPECT_FALSE(ts.stopped());
    EXPECT_EQ(ts.push_bytes("D and more"), "");
    EXPECT_TRUE(ts.stopped());
    EXPECT_EQ(ts.stop_matched(), "END");
    EXPECT_EQ(ts.push_bytes("ignored"), "");
    EXPECT_EQ(ts.finish(), "");
  }
  {
    TextStream ts(nullptr, {"END"});
    EXPECT_EQ(ts.push_bytes("an E"), "an ");
    EXPECT_EQ(ts.push_bytes("x"), "Ex");  // not a stop after all: released
    EXPECT_EQ(ts.push_bytes("EN"), "");
    EXPECT_EQ(ts.finish(), "EN");  // generation ended: what was held is text
  }
  {  // the earliest match wins, across several stop strings; the stop itself is never emitted
    TextStream ts(nullptr, {"world", "o w"});
    auto out = feed(ts, {"hell", "o wor", "ld"});
    EXPECT_EQ(join(out), "hell");
    EXPECT_EQ(ts.stop_matched(), "o w");
  }
  {  // a multi-byte stop string, split mid-character
    TextStream ts(nullptr, {"\xE2\x82\xAC"});
    auto out = feed(ts, {"5 \xE2", "\x82", "\xAC more"});
    EXPECT_EQ(join(out), "5 ");
    EXPECT_TRUE(ts.stopped());
  }
  {  // at every split point, the result is the same
    const std::string text = "The answer is 42.\nQ: next";
    for (size_t cut = 1; cut < text.size(); ++cut) {
      TextStream ts(nullptr, {"\nQ:"});
      EXPECT_EQ(join(feed(ts, {text.substr(0, cut), text.substr(cut)})), "The answer is 42.") << cut;
    }
  }
}

TEST(ChatPrompt, FallbackTemplateIsRoleTaggedLines) {
  json m = json::parse(R"([{"role":"system","content":"Be brief."},
                           {"role":"user","content":[{"type":"text","text":"Hi "},{"type":"text","text":"there"}]},
                           {"role":"assistant","content":null},
                           {"role":"user","content":"Bye"}])");
  EXPECT_EQ(render_chat(m), "system: Be brief.\nuser: Hi there\nassistant: \nuser: Bye\nassistant:");
  ChatTemplateOptions o;
  o.add_generation_prompt = false;
  EXPECT_EQ(render_chat(json::parse(R"([{"role":"user","content":"x"}])"), o), "user: x\n");
  EXPECT_THROW(render_chat(json::array()), mx::Error);
  EXPECT_THROW(render_chat(json::parse(R"([{"role":"wizard","content":"x"}])")), mx::Error);
  EXPECT_THROW(render_chat(json::parse(R"([{"role":"user"}])")), mx::Error);
  EXPECT_THROW(render_chat(json::parse(R"([{"role":"user","content":[{"type":"image_url"}]}])")), mx::Error);
  EXPECT_THROW(render_chat(json::parse(R"([{"role":"user","content":[]}])")), mx::Error);  // OpenAI: at least one part
  EXPECT_THROW(render_chat(json::parse(R"([{"role":"user","content":"x","name":5}])")), mx::Error);
  EXPECT_EQ(render_chat(json::parse(R"([{"role":"user","content":"x","name":"ann"}])")), "user: x\nassistant:");
}

TEST(OpenAiApi, ParsesPromptsAndSampling) {
  ApiContext ctx;
  ctx.served_model_name = "m";
  ctx.context_length = 64;
  auto r = parse_completion_request(json::parse(R"({"model":"m","prompt":[[1,2],[3]],"max_tokens":5,
      "temperature":0,"top_k":-1,"top_p":0.5,"min_p":0.1,"seed":7,"presence_penalty":0.5,
      "frequency_penalty":-0.5,"repetition_penalty":1.2,"stop_token_ids":[9],"ignore_eos":true,
      "stream":true,"stream_options":{"include_usage":true},"logprobs":0})"),
                                    ctx);
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_EQ(r.prompts[0], (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(r.max_tokens, (std::vector<int>{5, 5}));
  EXPECT_EQ(r.sampling.temperature, 0.0f);
  EXPECT_EQ(r.sampling.top_k, 0);
  EXPECT_EQ(r.sampling.top_p, 0.5f);
  EXPECT_EQ(r.sampling.seed, 7u);
  EXPECT_EQ(r.sampling.repetition_penalty, 1.2f);
  EXPECT_EQ(r.stop_token_ids, (std::vector<int32_t>{9}));
  EXPECT_TRUE(r.ignore_eos && r.stream && r.include_usage && r.logprobs);
  // Default max_tokens (16) is cut to the context; an explicit one is not.
  auto d = parse_completion_request(json::parse(R"({"prompt":[[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,
      20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51,52,53,54]]})"),
                                    ctx);
  EXPECT_EQ(d.max_tokens, (std::vector<int>{10}));
  ApiContext small = ctx;  // a KV cache smaller than the context cuts defaults too
  small.kv_capacity = 20;
  EXPECT_EQ(parse_completion_request(json::parse(R"({"prompt":[1,2,3,4,5,6,7,8,9,10]})"), small).max_tokens,
            (std::vector<int>{10}));

  auto expect_400 = [&](const char* body, const char* param) {
    try {
      parse_completion_request(json::parse(body), ctx);
      ADD_FAILURE() << "accepted " << body;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400) << body;
      EXPECT_EQ(e.param, param) << body << ": " << e.what();
    }
  };
  expect_400(R"({"prompt":[1],"n":0})", "n");
  expect_400(R"({"prompt":[1],"n":1000})", "n");
  expect_400(R"({"prompt":[1],"max_tokens":-1})", "max_tokens");
  expect_400(R"({"prompt":[1],"max_tokens":64})", "max_tokens");
  expect_400(R"({"prompt":[1],"temperature":"hot"})", "temperature");
  expect_400(R"({"prompt":[1],"temperature":-1})", "temperature");
  expect_400(R"({"prompt":[1],"top_p":0})", "top_p");
  expect_400(R"({"prompt":[1],"stop":["a","b","c","d","e"]})", "stop");
  expect_400(R"({"prompt":[1],"stop":"x"})", "stop");  // no tokenizer
  expect_400(R"({"prompt":"text"})", "prompt");         // no tokenizer
  expect_400(R"({"prompt":[]})", "prompt");
  expect_400(R"({"prompt":[1,"a"]})", "prompt");
  expect_400(R"({"prompt":[-1]})", "prompt");
  expect_400(R"({"prompt":[1],"logprobs":6})", "logprobs");
  expect_400(R"({"prompt":[1],"echo":true,"max_tokens":-1})", "max_tokens");
  expect_400(R"({"prompt":[1],"max_tokens":0})", "max_tokens");
  expect_400(R"({"prompt":[1],"stream_options":{"include_usage":true}})", "stream_options");
  try {
    parse_completion_request(json::parse(R"({"model":"other","prompt":[1]})"), ctx);
    ADD_FAILURE();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 404);
    EXPECT_EQ(e.code, "model_not_found");
  }
  EXPECT_THROW(parse_body("{"), ApiError);
  EXPECT_THROW(parse_body("[1]"), ApiError);
  // A number too large for a double is a 400 too (found by fuzz/openai_request: it escaped as a 500).
  EXPECT_THROW(parse_body(R"({"max_tokens": 4e443})"), ApiError);
  // Nested deeper than kMaxJsonDepth: a 400 before parsing (copying or dumping 100,000 levels
  // overflowed a server thread's stack). Brackets inside strings do not count.
  auto nested = [](int depth) { return R"({"prompt":[1],"x":)" + std::string(depth, '[') + std::string(depth, ']') + "}"; };
  EXPECT_NO_THROW(parse_body(nested(mx::kMaxJsonDepth - 1)));
  try {
    parse_body(nested(100000));
    ADD_FAILURE() << "accepted 100000 levels";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_NE(std::string(e.what()).find("more than 512 deep"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(parse_body(R"({"prompt":")" + std::string(100000, '[') + R"(\"{"})"));
  EXPECT_TRUE(mx::json_depth_at_most(R"({"a":"\"[[[", "b":[[1]]})", 3));
  EXPECT_FALSE(mx::json_depth_at_most(R"({"a":"\"[[[", "b":[[[1]]]})", 3));
  // Stop ids past the model's vocabulary could never be sampled: refused, not ignored.
  ApiContext v = ctx;
  v.vocab_size = 100;
  EXPECT_NO_THROW(parse_completion_request(json::parse(R"({"prompt":[1],"stop_token_ids":[99]})"), v));
  try {
    parse_completion_request(json::parse(R"({"prompt":[1],"stop_token_ids":[100]})"), v);
    ADD_FAILURE() << "accepted a stop id past the vocabulary";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param, "stop_token_ids");
  }
  json eb = error_body(ApiError(400, "bad", "x"));
  EXPECT_EQ(eb["error"]["message"], "bad");
  EXPECT_EQ(eb["error"]["type"], "invalid_request_error");
  EXPECT_EQ(eb["error"]["param"], "x");
  EXPECT_TRUE(eb["error"]["code"].is_null());
}

TEST(ServerMetrics, PrometheusText) {
  ServerMetrics m;
  m.ttft.observe(0.003);
  m.ttft.observe(100);
  m.count_finish("stop");
  mx::EngineMetrics em;
  em.kv_blocks_total = 10;
  em.kv_blocks_free = 7;
  em.prompt_tokens = 100;
  em.cached_prompt_tokens = 60;
  const std::string t = m.render(em, 3);
  EXPECT_NE(t.find("mxserve_kv_blocks{state=\"used\"} 3\n"), std::string::npos) << t;
  EXPECT_NE(t.find("mxserve_prefix_cache_hit_rate 0.6\n"), std::string::npos);
  EXPECT_NE(t.find("mxserve_requests_total{finish_reason=\"stop\"} 1\n"), std::string::npos);
  EXPECT_NE(t.find("mxserve_requests_total{finish_reason=\"abort\"} 0\n"), std::string::npos);
  EXPECT_NE(t.find("mxserve_time_to_first_token_seconds_bucket{le=\"0.005\"} 1\n"), std::string::npos);
  EXPECT_NE(t.find("mxserve_time_to_first_token_seconds_bucket{le=\"+Inf\"} 2\n"), std::string::npos);
  EXPECT_NE(t.find("mxserve_time_to_first_token_seconds_count 2\n"), std::string::npos);
  EXPECT_NE(t.find("mxserve_kernel_fallbacks_total 3\n"), std::string::npos);
}
