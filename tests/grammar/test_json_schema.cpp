// Structured outputs' grammar engine: JSON Schema -> grammar, the byte matcher,
// and the token masks over a vocabulary. Outputs are checked with an independent
// validator (json_validate.h) and nlohmann's parser, not with the grammar itself.
#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "grammar/json_schema.h"
#include "grammar/token_mask.h"
#include "json_validate.h"

using namespace mx;
using namespace mx::grammar;
using ojson = nlohmann::ordered_json;

namespace {

bool accepts(const Grammar& g, const std::string& text) {
  Matcher m(g);
  return m.accept_bytes(text) && m.complete();
}

// The error compiling a schema ("" if it compiles).
std::string error_of(const char* schema) {
  try {
    json_schema_grammar(ojson::parse(schema));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

const char* kPerson = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 8},
    "age": {"type": "integer"},
    "score": {"type": ["number", "null"]},
    "tags": {"type": "array", "items": {"enum": ["a", "b", 3]}, "maxItems": 2},
    "born": {"type": "string", "format": "date"},
    "id": {"type": "string", "format": "uuid"},
    "ok": {"type": "boolean"}
  },
  "required": ["name", "age"]
})";

TEST(JsonSchemaGrammar, AcceptsValidInstancesRejectsInvalidOnes) {
  const Grammar g = json_schema_grammar(ojson::parse(kPerson));
  for (const char* ok : {R"({"name":"Ann","age":3})", R"({ "name" : "\u00e9t\u00E9", "age" : -12 })",
                         "{\"name\":\"caf\xC3\xA9\",\"age\":0,\"score\":null}",
                         R"({"name":"x","age":1,"score":-1.5e+3,"tags":["a",3],"born":"2024-02-29","ok":false})",
                         R"({"name":"x","age":1,"id":"123e4567-e89b-12d3-a456-426614174000"})",
                         "{\n  \"name\": \"x\",\n  \"age\": 10\n}"})
    EXPECT_TRUE(accepts(g, ok)) << ok;
  for (const char* bad : {R"({"age":3})",                          // required name missing
                          R"({"age":3,"name":"x"})",               // properties come in the schema's order
                          R"({"name":"","age":3})",                // minLength 1
                          R"({"name":"123456789","age":3})",       // maxLength 8
                          R"({"name":"x","age":1.5})",             // integer
                          R"({"name":"x","age":01})",              // leading zero
                          R"({"name":"x","age":12345678901234567})",  // 17 digits: numbers are bounded
                          R"({"name":"x","age":1,"tags":["c"]})",  // not in the enum
                          R"({"name":"x","age":1,"tags":["a","b","a"]})",  // maxItems 2
                          R"({"name":"x","age":1,"born":"2024-13-01"})",   // no month 13
                          R"({"name":"x","age":1,"extra":1})",             // additionalProperties absent: false
                          "{\"name\":\"\xC3\",\"age\":1}",                 // a cut UTF-8 character
                          "{\"name\":\"\xED\xA0\x80\",\"age\":1}",         // a UTF-16 surrogate in UTF-8
                          R"({"name":"a	b","age":1})",                      // a raw tab in a string
                          R"({"name":"x","age":1} )"})                      // nothing after the value
    EXPECT_FALSE(accepts(g, bad)) << bad;
}

TEST(JsonSchemaGrammar, RefsAnyOfConstAndTuples) {
  const char* tree = R"({
    "$defs": {"node": {"type": "object", "properties": {"v": {"const": 1}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v"]}},
    "anyOf": [{"$ref": "#/$defs/node"}, {"type": "array", "prefixItems": [{"type": "string"}, {"type": "boolean"}], "items": false, "minItems": 1}]
  })";
  const Grammar g = json_schema_grammar(ojson::parse(tree));
  for (const char* ok : {R"({"v":1})", R"({"v":1,"kids":[{"v":1,"kids":[]},{"v":1}]})", R"(["s"])", R"(["s",true])"})
    EXPECT_TRUE(accepts(g, ok)) << ok;
  for (const char* bad : {R"({"v":2})", R"({"v":1,"kids":[{"kids":[]}]})", R"([])", R"(["s",true,1])", R"([true])"})
    EXPECT_FALSE(accepts(g, bad)) << bad;
  const Grammar extra = json_schema_grammar(ojson::parse(
      R"({"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":{"type":"string"}})"));
  EXPECT_TRUE(accepts(extra, R"({"a":1,"b":"x","c":"y"})"));
  EXPECT_TRUE(accepts(extra, R"({"b":"x"})"));
  EXPECT_FALSE(accepts(extra, R"({"a":1,"b":2})"));
  const Grammar any = json_object_grammar();
  EXPECT_TRUE(accepts(any, R"({"a":[1,{"b":null}],"c":"d"})"));
  EXPECT_FALSE(accepts(any, R"([1])"));  // json_object: an object at the top
}

TEST(JsonSchemaGrammar, UnsupportedKeywordsAreErrorsNamingThem) {
  EXPECT_EQ(error_of(R"({"type":"string","pattern":"^a+$"})"), "");  // grammar/regex.h; tests/grammar/test_regex.cpp
  EXPECT_NE(error_of(R"x({"type":"string","pattern":"(?=a)"})x").find("'pattern' at #"), std::string::npos);
  EXPECT_NE(error_of(R"({"type":"object","properties":{"n":{"type":"integer","minimum":0}}})").find("'minimum' at #/properties/n"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type":"string","format":"email"})").find("format 'email'"), std::string::npos);
  EXPECT_NE(error_of(R"({"$ref":"#/$defs/missing"})").find("does not resolve"), std::string::npos);
  EXPECT_NE(error_of(R"({"type":"frog"})").find("'frog'"), std::string::npos);
  EXPECT_NE(error_of(R"({"type":"array","maxItems":100000})").find("maxItems"), std::string::npos);
  EXPECT_NE(error_of(R"(false)").find("matches nothing"), std::string::npos);
  // Self-reference with nothing consumed first cannot expand: an error, not a hang.
  EXPECT_NE(error_of(R"({"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/a"}]}},"$ref":"#/$defs/a"})").find("does not terminate"),
            std::string::npos);
}

// Every keyword of a schema applies: enum / const values the keywords beside them
// refuse are dropped, and a schema left with none (or with "type": []) matches
// nothing, an error rather than a grammar that cannot finish (found probing the server).
TEST(JsonSchemaGrammar, EnumAndConstKeepOnlyWhatTheKeywordsBesideThemAdmit) {
  const Grammar strs = json_schema_grammar(ojson::parse(R"({"type":"string","enum":["a",1,"b",null]})"));
  EXPECT_TRUE(accepts(strs, R"("a")"));
  EXPECT_TRUE(accepts(strs, R"("b")"));
  EXPECT_FALSE(accepts(strs, "1"));
  EXPECT_FALSE(accepts(strs, "null"));
  const Grammar ints = json_schema_grammar(ojson::parse(R"({"type":["integer","null"],"enum":[1.0,1.5,2,null,"2"]})"));
  for (const char* ok : {"1.0", "2", "null"}) EXPECT_TRUE(accepts(ints, ok)) << ok;
  for (const char* bad : {"1.5", R"("2")"}) EXPECT_FALSE(accepts(ints, bad)) << bad;
  const Grammar longer = json_schema_grammar(ojson::parse(R"({"type":"string","minLength":2,"enum":["a","bb","ccc"]})"));
  EXPECT_FALSE(accepts(longer, R"("a")"));
  EXPECT_TRUE(accepts(longer, R"("bb")"));
  EXPECT_TRUE(accepts(longer, R"("ccc")"));
  const Grammar both = json_schema_grammar(ojson::parse(R"({"enum":[1,2,3],"const":2})"));
  EXPECT_TRUE(accepts(both, "2"));
  EXPECT_FALSE(accepts(both, "1"));
  const Grammar plain = json_schema_grammar(ojson::parse(R"({"enum":[{"x":1},[1,2]],"description":"any"})"));
  EXPECT_TRUE(accepts(plain, R"({"x":1})"));
  EXPECT_TRUE(accepts(plain, "[1,2]"));
  for (const char* none : {R"({"type":"string","enum":[1,2]})", R"({"type":"integer","const":"a"})",
                           R"({"type":"object","enum":[1]})", R"({"type":"string","minLength":5,"enum":["a"]})",
                           R"({"type":"array","maxItems":1,"const":[1,2,3]})", R"({"enum":[1,2],"const":3})",
                           R"({"type":"object","properties":{"a":{"type":"string","const":5}}})"})
    EXPECT_NE(error_of(none).find("matches nothing"), std::string::npos) << none;
  EXPECT_NE(error_of(R"({"type":[]})").find("'type' at # is an empty array"), std::string::npos);
  EXPECT_NE(error_of(R"({"type":"object","properties":{"a":{"type":[]}}})").find("#/properties/a"), std::string::npos);
  // Keywords beside anyOf / oneOf / allOf apply to each alternative; the same one inside with
  // another value is refused (a conjunction, not a merge).
  const Grammar beside = json_schema_grammar(ojson::parse(R"({"type":"string","anyOf":[{"minLength":2},{"format":"date"}],"title":"t"})"));
  for (const char* ok : {R"("ab")", R"("2024-01-02")"}) EXPECT_TRUE(accepts(beside, ok)) << ok;
  for (const char* bad : {R"("a")", "12", "true"}) EXPECT_FALSE(accepts(beside, bad)) << bad;
  EXPECT_NE(error_of(R"({"type":"string","oneOf":[{"type":"integer"}]})").find("'type' beside 'oneOf' and at #/oneOf/0 differ"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"$defs":{"a":{"type":"string"}},"$ref":"#/$defs/a","maxLength":3})")
                .find("'maxLength' beside '$ref'"),
            std::string::npos);
  EXPECT_EQ(error_of(R"({"$ref":"#/$defs/a","description":"d","$defs":{"a":{"type":"string"}}})"), "");
}

// A vocabulary like a byte-level BPE one: every byte, then multi-byte pieces.
std::vector<std::string> test_vocab() {
  std::vector<std::string> v;
  for (int b = 0; b < 256; ++b) v.push_back(std::string(1, char(b)));
  for (const char* p : {"{\"", "\":", "\",", "\"}", "\"]", "name", "age", "tags", "true", "false", "null", "12",
                        "-3", ".5", "e+", " \"", "  ", "\n ", "ab", "caf\xC3\xA9", "\xC3", "\xA9\"", "}}", "]}",
                        "2024-", "-01", "{}", "[]", "[\"", "\\u00", "\\n", ", \""})
    v.push_back(p);
  v.push_back("");  // a control token: never admitted
  return v;
}

TEST(TokenMask, EqualsCheckingEveryTokenAndRandomOutputsValidate) {
  const ojson schema = ojson::parse(kPerson);
  const nlohmann::json plain = nlohmann::json::parse(kPerson);
  auto trie = std::make_shared<const VocabTrie>(test_vocab());
  GrammarMasks masks(json_schema_grammar(schema), trie);
  std::mt19937 rng(3);
  int complete_outputs = 0;
  for (int walk = 0; walk < 40; ++walk) {
    Matcher m(masks.grammar());
    std::string out;
    for (int step = 0; step < 400 && !m.must_end(); ++step) {
      const auto ok = masks.admitted(m);
      std::vector<int32_t> ids;
      for (size_t id = 0; id < ok->size(); ++id) {
        Matcher probe = m;
        const bool fits = !trie->piece(int32_t(id)).empty() && probe.accept_bytes(trie->piece(int32_t(id)));
        ASSERT_EQ(bool((*ok)[id]), fits) << "token " << id << " after " << out;
        if (fits) ids.push_back(int32_t(id));
      }
      if (m.complete() && rng() % 4 == 0) break;  // the model chose EOS
      ASSERT_FALSE(ids.empty()) << "dead end after " << out;
      // Prefer structure over long strings so walks finish.
      const int32_t id = ids[rng() % ids.size()];
      ASSERT_TRUE(m.accept_bytes(trie->piece(id)));
      out += trie->piece(id);
    }
    if (!m.complete()) continue;
    ++complete_outputs;
    const nlohmann::json v = nlohmann::json::parse(out, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << out;
    EXPECT_EQ(mxtest::validate_json(v, plain, plain), "") << out;
  }
  EXPECT_GE(complete_outputs, 10);
  EXPECT_GT(masks.cache_hits(), 0u);
}

}  // namespace
