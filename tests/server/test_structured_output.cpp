// Structured outputs through the server: response_format json_schema on the
// synthetic families (random weights, their own tokenizers and chat templates)
// gives JSON that validates against the schema (json_validate.h, independent of
// the grammar), the same greedy text with n-gram and MTP speculation as without,
// and a 400 naming the problem for formats it cannot honour.
#include <gtest/gtest.h>

#include "grammar/json_validate.h"
#include "devtools/synthetic.h"
#include "server_test_util.h"

using namespace mxtest;

namespace {

const json kSchema = json::parse(R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 6},
    "age": {"type": "integer"},
    "mood": {"enum": ["happy", "sad", null]},
    "born": {"type": "string", "format": "date"},
    "friends": {"type": "array", "maxItems": 2,
                "items": {"type": "object", "properties": {"id": {"type": "integer"}, "ok": {"type": "boolean"}},
                          "required": ["id"]}}
  },
  "required": ["name", "age", "mood", "born", "friends"]
})");

json chat_body(double temperature) {
  return {{"messages", json::array({{{"role", "user"}, {"content", "Describe a person as JSON."}}})},
          {"temperature", temperature},
          {"seed", 7},
          {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "person"}, {"schema", kSchema}}}}}};
}

// The content of a structured chat answer, checked: finished by the format, valid JSON, valid for the schema.
std::string structured_content(int port, const json& body, const std::string& what) {
  auto r = post(port, "/v1/chat/completions", body);
  EXPECT_EQ(r.status, 200) << what << ": " << r.body;
  if (r.status != 200) return "";
  const json& ch = r.j["choices"][0];
  const std::string content = ch["message"]["content"];
  EXPECT_EQ(ch["finish_reason"], "stop") << what << ": " << r.body;
  const json v = json::parse(content, nullptr, false);
  EXPECT_FALSE(v.is_discarded()) << what << ": " << content;
  EXPECT_EQ(validate_json(v, kSchema, kSchema), "") << what << ": " << content;
  return content;
}

TEST(StructuredOutput, EveryFamilyFitsTheSchemaAndSpeculationKeepsTheGreedyText) {
  struct Family {
    const char* arch;
    bool mtp;
  };
  for (Family f : {Family{"qwen3", false}, Family{"glm4_moe", true}, Family{"deepseek_v3", true}}) {
    TempDir d;
    const std::string m = synthetic_model_dir(d, f.arch, 3);
    std::string greedy;
    std::vector<mx::SpecMode> modes = {mx::SpecMode::off, mx::SpecMode::ngram};
    if (f.mtp) modes.push_back(mx::SpecMode::mtp);
    for (mx::SpecMode mode : modes) {
      TestServer::Options o = TestServer::with_own_tokenizer(m);
      o.engine.spec.mode = mode;
      TestServer srv(m, o, m);
      const std::string what = std::string(f.arch) + " spec " + std::to_string(int(mode));
      const std::string text = structured_content(srv.port(), chat_body(0), what);
      if (mode == mx::SpecMode::off) greedy = text;
      else EXPECT_EQ(text, greedy) << what;
      structured_content(srv.port(), chat_body(1.0), what + " sampled");
    }
  }
}

TEST(StructuredOutput, FormatsItCannotHonourAreA400NamingTheProblem) {
  TempDir d;
  const std::string m = synthetic_model_dir(d, "qwen3");
  TestServer srv(m, TestServer::with_own_tokenizer(m), m);
  auto ask = [&](const json& rf) {
    json b = chat_body(0);
    b["response_format"] = rf;
    return post(srv.port(), "/v1/chat/completions", b);
  };
  struct Case {
    json rf;
    const char* needle;
  };
  for (const Case& c : {Case{{{"type", "json_schema"}, {"json_schema", {{"schema", {{"type", "integer"}, {"minimum", 1}}}}}}, "'minimum'"},
                        Case{{{"type", "json_schema"}, {"json_schema", {{"name", "x"}}}}, "json_schema.schema"},
                        Case{{{"type", "xml"}}, "'xml'"},
                        Case{"json", "must be an object"},
                        Case{{{"type", "json_schema"}, {"json_schema", {{"schema", {{"$ref", "#/$defs/none"}}}}}}, "does not resolve"}}) {
    auto r = ask(c.rf);
    EXPECT_EQ(r.status, 400) << c.rf.dump() << " " << r.body;
    EXPECT_EQ(r.j["error"]["param"], "response_format") << r.body;
    EXPECT_NE(r.body.find(c.needle), std::string::npos) << r.body;
  }
  // {"type": "text"} is free text, as without response_format.
  auto r = ask({{"type", "text"}});
  EXPECT_EQ(r.status, 200) << r.body;
}

}  // namespace
