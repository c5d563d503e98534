// Completions with echo: the prompt's text before the completion's and, with
// logprobs, each prompt token's logprob (the first null), equal to what the
// model's own full-prompt forward gives (prompt_logits); max_tokens 0 scores the
// prompt alone (lm-eval-harness's loglikelihood requests); a prefix-cache hit
// does not skip the scoring; streaming gives the same text and logprobs.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/generate.h"
#include "tokenizer/llama2c_tokenizer.h"
#include "server_test_util.h"

using namespace mxtest;

namespace {

TestServer::Options stories_text_opts() {
  TestServer::Options o = stories_opts();
  o.tokenizer = (stories260k() / "tok512.bin").string();
  return o;
}

// log softmax of row p of [n, V] logits at token t.
double logprob_at(const std::vector<float>& lg, int V, int p, int32_t t) {
  const float* row = lg.data() + size_t(p) * size_t(V);
  double mx = -INFINITY, s = 0;
  for (int v = 0; v < V; ++v) mx = std::max(mx, double(row[v]));
  for (int v = 0; v < V; ++v) s += std::exp(double(row[v]) - mx);
  return double(row[t]) - mx - std::log(s);
}

}  // namespace

TEST(Echo, PromptLogprobsEqualTheModelsAndPrecedeTheCompletion) {
  MXTEST_NEEDS(fs::exists(stories260k() / "tok512.bin"), "../shared/models/stories260K");
  TestServer srv(stories_bin(), stories_text_opts());
  const std::string prompt = "Once upon a time, there was a little girl";
  const json score = {{"prompt", prompt}, {"echo", true}, {"max_tokens", 0}, {"logprobs", 2}, {"temperature", 0}};
  auto r = post(srv.port(), "/v1/completions", score);
  ASSERT_EQ(r.status, 200) << r.body;
  const json& ch = r.j["choices"][0];
  EXPECT_EQ(ch["text"], prompt);  // what the model "says" here is the prompt itself
  EXPECT_EQ(ch["finish_reason"], "length");
  EXPECT_TRUE(ch["token_ids"].empty());
  EXPECT_EQ(r.j["usage"]["completion_tokens"], 0);
  const json& lp = ch["logprobs"];
  const size_t n = lp["tokens"].size();
  ASSERT_EQ(n, size_t(r.j["usage"]["prompt_tokens"].get<int>()));
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());

  // The model's own forward over the whole prompt, position by position.
  auto model = mx::load_model(stories_bin());
  auto tok = mx::load_tokenizer_llama2c((stories260k() / "tok512.bin").string());
  const std::vector<int32_t> ids = tok->encode(prompt, true);
  ASSERT_EQ(ids.size(), n);
  const int V = model->config().vocab_size;
  const std::vector<float> lg = mx::prompt_logits(*model, ids, true);
  double worst = 0;
  for (size_t i = 1; i < n; ++i) {
    const double want = logprob_at(lg, V, int(i) - 1, ids[i]);
    worst = std::max(worst, std::fabs(lp["token_logprobs"][i].get<double>() - want));
    EXPECT_EQ(lp["top_logprobs"][i].size(), 2u) << i;
    EXPECT_EQ(lp["tokens"][i], tok->token_piece(ids[i])) << i;
  }
  EXPECT_LT(worst, 1e-4);
  std::printf("prompt logprobs of %zu tokens: largest difference from the model's forward %.2e\n", n - 1, worst);

  // The same prompt again: a prefix-cache hit must not skip the scoring.
  auto again = post(srv.port(), "/v1/completions", score);
  ASSERT_EQ(again.status, 200);
  EXPECT_EQ(again.j["choices"][0]["logprobs"], lp);

  // With a completion: prompt first, then the generated tokens; offsets grow.
  json gen = score;
  gen["max_tokens"] = 8;
  auto g = post(srv.port(), "/v1/completions", gen);
  ASSERT_EQ(g.status, 200) << g.body;
  const json& gc = g.j["choices"][0];
  const std::string text = gc["text"];
  EXPECT_EQ(text.rfind(prompt, 0), 0u) << text;
  EXPECT_GT(text.size(), prompt.size());
  EXPECT_EQ(gc["logprobs"]["tokens"].size(), n + gc["token_ids"].size());
  EXPECT_EQ(gc["logprobs"]["text_offset"][n], prompt.size());
  for (size_t i = 1; i < gc["logprobs"]["text_offset"].size(); ++i)
    EXPECT_GE(gc["logprobs"]["text_offset"][i], gc["logprobs"]["text_offset"][i - 1]);
  for (size_t i = 1; i < n; ++i)
    EXPECT_EQ(gc["logprobs"]["token_logprobs"][i], lp["token_logprobs"][i]) << i;

  // Streamed: the prompt comes in the first chunk; the whole is the same.
  gen["stream"] = true;
  auto s = post_stream(srv.port(), "/v1/completions", gen);
  ASSERT_EQ(s.status, 200);
  std::string streamed;
  json tokens = json::array();
  for (const json& c : s.chunks) {
    streamed += c["choices"][0]["text"].get<std::string>();
    if (!c["choices"][0]["logprobs"].is_null())
      for (const json& t : c["choices"][0]["logprobs"]["tokens"]) tokens.push_back(t);
  }
  EXPECT_EQ(streamed, text);
  EXPECT_EQ(tokens, gc["logprobs"]["tokens"]);

  // echo without logprobs: only the text.
  auto plain = post(srv.port(), "/v1/completions", {{"prompt", prompt}, {"echo", true}, {"max_tokens", 0}});
  ASSERT_EQ(plain.status, 200) << plain.body;
  EXPECT_EQ(plain.j["choices"][0]["text"], prompt);
  EXPECT_TRUE(plain.j["choices"][0]["logprobs"].is_null());
}
