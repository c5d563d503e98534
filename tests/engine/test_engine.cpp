// The serving engine: continuous batching, chunked prefill, prefix cache and
// preemption must never change what a request generates.
#include <gtest/gtest.h>

#include <map>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "models/model.h"
#include "engine/engine_test_util.h"
#include "test_util.h"

using namespace mx;
using mxtest::Collected;
using mxtest::submit;

namespace {

std::string stories() { return (mxtest::stories260k() / "stories260K.bin").string(); }

std::vector<int32_t> prompt_of(int i, int len) {
  std::vector<int32_t> p = {1};
  for (int j = 1; j < len; ++j) p.push_back(3 + (i * 37 + j * 11) % 500);
  return p;
}

GenerateResult solo_run(Model& m, const std::vector<int32_t>& p, int max_tokens, float temp = 0, uint64_t seed = 0) {
  GenerateOptions o;
  o.max_tokens = max_tokens;
  o.sampling.temperature = temp;
  o.sampling.seed = seed;
  return generate(m, p, o);
}
std::vector<int32_t> solo(Model& m, const std::vector<int32_t>& p, int max_tokens, float temp = 0, uint64_t seed = 0) {
  return solo_run(m, p, max_tokens, temp, seed).tokens;
}

}  // namespace

TEST(Engine, ConcurrentMixedRequestsMatchSoloOutputs) {
  auto ref = load_model(stories());
  EngineOptions o;
  o.max_running = 6;
  o.step_tokens = 40;  // forces chunked prefill mixed with decodes
  Engine e(load_model(stories()), o);
  Collected c;
  struct Want {
    uint64_t id;
    GenerateResult want;
  };
  std::vector<Want> wants;
  for (int i = 0; i < 24; ++i) {
    auto p = prompt_of(i, 5 + (i * 13) % 90);
    const int max_tokens = 8 + i % 17;
    const float temp = i % 3 == 0 ? 0.8f : 0.0f;
    wants.push_back({submit(e, c, p, max_tokens, temp, 100 + i), solo_run(*ref, p, max_tokens, temp, 100 + i)});
  }
  e.run_until_idle();
  for (const auto& w : wants) {
    EXPECT_EQ(c.tokens[w.id], w.want.tokens) << "request " << w.id;
    EXPECT_TRUE(c.final[w.id].finished);
    EXPECT_EQ(c.final[w.id].finish_reason, w.want.finish_reason);
  }
  EXPECT_EQ(e.metrics().requests_finished, 24u);
}

TEST(Engine, PrefixCacheComputesOnlyTheUnsharedSuffixWithIdenticalOutput) {
  auto ref = load_model(stories());
  Engine e(load_model(stories()), {});
  Collected c;
  auto a = prompt_of(1, 160);
  std::vector<int32_t> b(a.begin(), a.begin() + 96);  // 60% shared
  for (int j = 0; j < 64; ++j) b.push_back(7 + j * 5 % 400);
  submit(e, c, a, 4);
  e.run_until_idle();
  const auto before = e.metrics();
  const uint64_t id = submit(e, c, b, 16);
  e.run_until_idle();
  const auto after = e.metrics();
  EXPECT_EQ(after.cached_prompt_tokens - before.cached_prompt_tokens, 96u);
  EXPECT_EQ(after.computed_prompt_tokens - before.computed_prompt_tokens, 64u);
  EXPECT_EQ(c.final[id].cached_tokens, 96);
  EXPECT_EQ(c.tokens[id], solo(*ref, b, 16));
}

TEST(Engine, PreemptionUnderKvPressureKeepsOutputsExact) {
  auto ref = load_model(stories());
  EngineOptions o;
  o.kv_blocks = 24;  // 384 token slots for 8 requests of up to ~230 tokens
  o.max_running = 8;
  Engine e(load_model(stories()), o);
  Collected c;
  std::vector<std::pair<uint64_t, std::vector<int32_t>>> wants;
  for (int i = 0; i < 8; ++i) {
    auto p = prompt_of(i + 40, 100 + i * 7);
    wants.push_back({submit(e, c, p, 60), solo(*ref, p, 60)});
  }
  e.run_until_idle();
  EXPECT_GT(e.metrics().preemptions, 0u);
  for (const auto& [id, w] : wants) EXPECT_EQ(c.tokens[id], w) << "request " << id;
}

TEST(Engine, RejectsWhatCannotFitAndFullQueues) {
  EngineOptions o;
  o.kv_blocks = 4;
  o.max_running = 1;
  o.max_queue = 2;
  Engine e(load_model(stories()), o);
  Collected c;
  // Too long for the KV cache or the context: ContextTooLong (the server's
  // context_length_exceeded); other invalid requests: a plain Error.
  EXPECT_THROW(submit(e, c, prompt_of(0, 60), 10), Engine::ContextTooLong);  // 70 tokens > 64 slots
  auto plain_error = [&](const std::vector<int32_t>& p) {
    try {
      submit(e, c, p, 10);
    } catch (const Engine::ContextTooLong&) {
      return false;
    } catch (const Error&) {
      return true;
    }
    return false;
  };
  EXPECT_TRUE(plain_error({}));
  EXPECT_TRUE(plain_error({1, 9999}));
  EXPECT_THROW(submit(e, c, prompt_of(0, 10), 600), Engine::ContextTooLong);  // past the context
  for (int i = 0; i < 3; ++i) submit(e, c, prompt_of(i, 10), 4);
  EXPECT_THROW(submit(e, c, prompt_of(9, 10), 4), Engine::QueueFull);
  e.run_until_idle();
  EXPECT_EQ(c.final.size(), 3u);
}

TEST(Engine, FinishReasonsAreTheOpenAiStrings) {
  EXPECT_STREQ(to_string(FinishReason::Stop), "stop");
  EXPECT_STREQ(to_string(FinishReason::Length), "length");
  EXPECT_STREQ(to_string(FinishReason::Abort), "abort");
  EXPECT_STREQ(to_string(FinishReason::Error), "error");
  EXPECT_EQ(describe(FinishReason::Length, ""), "length");
  EXPECT_EQ(describe(FinishReason::Error, "the forward pass failed: x"), "error: the forward pass failed: x");
}

TEST(Engine, CancelEndsARequestWithAbortAndFreesItsKv) {
  Engine e(load_model(stories()), {});
  Collected c;
  const uint64_t id = submit(e, c, prompt_of(3, 20), 200);
  e.cancel(id);
  e.run_until_idle();
  EXPECT_EQ(c.final[id].finish_reason, FinishReason::Abort);
  const auto m = e.metrics();
  EXPECT_EQ(m.kv_blocks_free + m.kv_blocks_cached, m.kv_blocks_total);
}

TEST(Engine, BackgroundThreadServesRequests) {
  Engine e(load_model(stories()), {});
  e.start();
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int32_t> got;
  bool done = false;
  GenerationRequest r;
  r.prompt = {1};
  r.max_tokens = 32;
  r.sampling.temperature = 0;
  e.submit(r, [&](const TokenEvent& ev) {
    std::lock_guard<std::mutex> lk(mu);
    if (ev.token >= 0) got.push_back(ev.token);
    if (ev.finished) done = true;
    cv.notify_all();
  });
  std::unique_lock<std::mutex> lk(mu);
  ASSERT_TRUE(cv.wait_for(lk, std::chrono::seconds(30), [&] { return done; }));
  auto want = mxtest::read_lines(mxtest::stories260k() / "greedy_ids_from_bos.txt");
  ASSERT_EQ(got.size(), 32u);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(got[i], std::stoi(want[i]));
  lk.unlock();
  e.stop();
}
