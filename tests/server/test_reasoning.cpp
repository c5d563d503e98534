// reasoning_content: the incremental splitter (server/reasoning.h) against the
// rule applied to whole texts, fed in every possible pieces; and through the
// server on the synthetic Qwen3 (its real chat template thinks).
#include <gtest/gtest.h>

#include "devtools/synthetic.h"
#include "server/reasoning.h"
#include "server/text_stream.h"
#include "server_test_util.h"

using namespace mxtest;
using mx::server::ReasoningSplitter;

namespace {

// The rule on a whole text, written directly.
std::pair<std::string, std::string> split_whole(std::string text, bool open) {
  size_t i = 0;
  while (!open && i < text.size() && std::string(" \n\t\r").find(text[i]) != std::string::npos) ++i;
  if (!open && text.compare(i, 7, "<think>") != 0) return {"", text};
  if (!open) text.erase(0, i + 7);
  const size_t end = text.find("</think>");
  if (end == std::string::npos) return {text, ""};
  size_t c = end + 8;
  while (c < text.size() && text[c] == '\n') ++c;
  return {text.substr(0, end), text.substr(c)};
}

std::pair<std::string, std::string> split_pieces(const std::string& text, bool open, size_t piece) {
  ReasoningSplitter s(open);
  std::string r, c;
  for (size_t i = 0; i < text.size(); i += piece) s.push(std::string_view(text).substr(i, piece), r, c);
  s.finish(r, c);
  return {r, c};
}

TEST(Reasoning, SplitsAsTheWholeTextRuleWhateverThePieces) {
  for (const char* t : {"<think>\nLet me see.\n</think>\n\nThe answer is 4.", "  <think>a</think>b", "no thinking here",
                        "<think>never closed", "<thi", "<thinking is not a tag", "x <think>y</think>z",
                        "</think> dangling", "<think></think>", "<think>a</thin</think>\n\n\nc</think>d", ""})
    for (bool open : {false, true}) {
      const auto want = split_whole(t, open);
      for (size_t piece : {size_t(1), size_t(2), size_t(3), size_t(7), size_t(100)})
        EXPECT_EQ(split_pieces(t, open, piece), want) << "'" << t << "' open " << open << " piece " << piece;
    }
  EXPECT_TRUE(ReasoningSplitter::prompt_opens_reasoning("<|assistant|>\n<think>\n"));
  EXPECT_FALSE(ReasoningSplitter::prompt_opens_reasoning("<think>\n\n</think>\n\n"));
  EXPECT_FALSE(ReasoningSplitter::prompt_opens_reasoning("<|im_start|>assistant\n"));
}

TEST(Reasoning, ServerSplitsTheAnswerAndPassesChatTemplateKwargs) {
  TempDir d;
  const std::string m = synthetic_model_dir(d, "qwen3");
  TestServer srv(m, TestServer::with_own_tokenizer(m), m);
  json body = {{"messages", json::array({{{"role", "user"}, {"content", "Think, then answer."}}})},
               {"max_tokens", 40}, {"temperature", 1.0}, {"seed", 5}, {"ignore_eos", true}};
  auto r = post(srv.port(), "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const json& msg = r.j["choices"][0]["message"];
  ASSERT_TRUE(msg.contains("reasoning_content")) << r.body;
  // What the model generated (as text: invalid UTF-8 replaced, as the server
  // sends it), split by the rule, is what the server answered.
  std::vector<int32_t> ids = r.j["choices"][0]["token_ids"];
  const auto want = split_whole(mx::server::sanitize_utf8(srv.tokenizer()->decode(ids)), false);
  EXPECT_EQ(msg["reasoning_content"].is_null() ? std::string() : msg["reasoning_content"].get<std::string>(), want.first);
  EXPECT_EQ(msg["content"], want.second);
  // Streamed: the deltas add up to the same two texts.
  body["stream"] = true;
  auto s = post_stream(srv.port(), "/v1/chat/completions", body);
  std::string rs, cs;
  for (const json& ev : s.chunks)
    for (const json& ch : ev["choices"]) {
      if (ch["delta"].contains("reasoning_content")) rs += ch["delta"]["reasoning_content"].get<std::string>();
      if (ch["delta"].contains("content")) cs += ch["delta"]["content"].get<std::string>();
    }
  EXPECT_EQ(rs, want.first);
  EXPECT_EQ(cs, want.second);
  // chat_template_kwargs reach the template: Qwen3 with enable_thinking false
  // closes an empty think block in the prompt, so the prompt is longer.
  body.erase("stream");
  body["chat_template_kwargs"] = {{"enable_thinking", false}};
  auto off = post(srv.port(), "/v1/chat/completions", body);
  ASSERT_EQ(off.status, 200) << off.body;
  EXPECT_GT(off.j["usage"]["prompt_tokens"].get<int>(), r.j["usage"]["prompt_tokens"].get<int>());
  body["chat_template_kwargs"] = "no";
  EXPECT_EQ(post(srv.port(), "/v1/chat/completions", body).status, 400);
}

}  // namespace
