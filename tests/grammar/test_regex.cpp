// Regular expressions as grammars (grammar/regex.h): the grammar accepts
// exactly what std::regex (ECMAScript) matches in full, over every string of a
// small alphabet up to a length; random walks give matching texts; JSON
// Schema's pattern searches within a JSON string, escaping what it matches; and
// what is not supported is an error naming it.
#include <gtest/gtest.h>

#include <random>
#include <regex>

#include "core/error.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"

using namespace mx;
using namespace mx::grammar;

namespace {

bool accepts(const Grammar& g, const std::string& s) {
  Matcher m(g);
  return m.accept_bytes(s) && m.complete();
}

// Every string over `alphabet` of length <= n.
std::vector<std::string> all_strings(const std::string& alphabet, int n) {
  std::vector<std::string> out = {""}, layer = {""};
  for (int len = 1; len <= n; ++len) {
    std::vector<std::string> next;
    for (const auto& s : layer)
      for (char c : alphabet) next.push_back(s + c);
    out.insert(out.end(), next.begin(), next.end());
    layer = std::move(next);
  }
  return out;
}

std::string error_of(const std::string& pattern) {
  try {
    regex_grammar(pattern);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Regex, AcceptsExactlyWhatStdRegexMatches) {
  const char* patterns[] = {"a*b",        "(ab|c)+",  "a{2,3}c?",       "[a-c]{1,2}[^a]",  "\\d+\\.?\\d*",
                            "^(a|b)*c$",  "a.c",      "(?:ab)?b{0,2}",  "[\\d.]+",         "\\w\\W?",
                            "a|",         "(a*b)*c",  "[-a]x?",         "\\(1\\)",         "a{2,}",
                            "[^\\s]\\s*", "(a?){3}",  "c{0}a",          "[a\\-c]+",        "\\u0061b"};
  const auto candidates = all_strings("abc1.(-) x", 4);
  for (const char* p : patterns) {
    SCOPED_TRACE(p);
    const Grammar g = regex_grammar(p);
    const std::regex re(p, std::regex::ECMAScript);
    int matched = 0;
    for (const std::string& s : candidates) {
      const bool want = std::regex_match(s, re);
      matched += want;
      ASSERT_EQ(accepts(g, s), want) << "'" << s << "'";
    }
    EXPECT_GT(matched, 0);
  }
}

TEST(Regex, RandomWalksMatch) {
  std::mt19937 rng(5);
  for (const char* p : {"[A-Z][a-z]{2,8}( [A-Z][a-z]{1,5})?", "\\d{3}-\\d{4}", "(yes|no|maybe)!*", ".{1,6}",
                        "[^x]{2}"}) {
    SCOPED_TRACE(p);
    const Grammar g = regex_grammar(p);
    const std::regex re(p, std::regex::ECMAScript);
    for (int walk = 0; walk < 50; ++walk) {
      Matcher m(g);
      std::string out;
      while (!m.must_end() && !(m.complete() && rng() % 3 == 0)) {
        const ByteSet next = m.next_bytes();
        std::vector<uint8_t> ascii;
        for (int b = 0; b < 128; ++b)
          if (next.has(uint8_t(b))) ascii.push_back(uint8_t(b));
        if (ascii.empty()) break;  // only non-ASCII continues: std::regex works on bytes, so stop here
        const uint8_t b = ascii[rng() % ascii.size()];
        ASSERT_TRUE(m.accept_bytes(std::string(1, char(b))));
        out += char(b);
      }
      if (m.complete()) {
        EXPECT_TRUE(std::regex_match(out, re)) << "'" << out << "'";
      }
    }
  }
}

TEST(Regex, NonAsciiCharactersAreWholeUtf8) {
  const Grammar dot = regex_grammar(".");
  EXPECT_TRUE(accepts(dot, "\xC3\xA9"));          // é
  EXPECT_TRUE(accepts(dot, "\xF0\x9F\x98\x80"));  // an emoji
  EXPECT_FALSE(accepts(dot, "\xC3"));             // half a character
  EXPECT_FALSE(accepts(dot, "\xED\xA0\x80"));     // a surrogate
  EXPECT_FALSE(accepts(dot, "\n"));
  const Grammar lit = regex_grammar("caf\xC3\xA9+");
  EXPECT_TRUE(accepts(lit, "caf\xC3\xA9\xC3\xA9"));
  EXPECT_FALSE(accepts(lit, "caf\xC3\xA9\xA9"));
}

TEST(Regex, UnsupportedSyntaxIsAnErrorNamingIt) {
  EXPECT_NE(error_of("(a)\\1").find("\\1"), std::string::npos);
  EXPECT_NE(error_of("a(?=b)").find("lookaround"), std::string::npos);
  EXPECT_NE(error_of("[\xC3\xA9]").find("non-ASCII"), std::string::npos);
  EXPECT_NE(error_of("a{1001}").find("over 1000"), std::string::npos);
  EXPECT_NE(error_of("(ab").find("')'"), std::string::npos);
  EXPECT_NE(error_of("*a").find("nothing to repeat"), std::string::npos);
  EXPECT_NE(error_of("a^b").find("'^'"), std::string::npos);
  EXPECT_NE(error_of("[b-a]").find("out of order"), std::string::npos);
  EXPECT_NE(error_of("a**").find("quantifier"), std::string::npos);
  EXPECT_NE(error_of("(a*)*b").find("can match nothing"), std::string::npos);
  EXPECT_NE(error_of("(a|)+").find("can match nothing"), std::string::npos);
  // Nested counts multiply: ((a{1000}){1000}){1000} asked for a billion elements (a server grew
  // past 15 GB compiling it); refused once a count's copies pass Grammar::kMaxElements.
  EXPECT_NE(error_of("((a{1000}){1000}){1000}").find("pattern too large"), std::string::npos);
  EXPECT_NE(error_of("((a{300}){300}){300}").find("pattern too large"), std::string::npos);
  EXPECT_EQ(error_of("(a{100}){1000}"), "");
}

TEST(Regex, JsonSchemaPatternSearchesInsideAJsonString) {
  using ojson = nlohmann::ordered_json;
  const Grammar anchored = json_schema_grammar(ojson::parse(R"({"type":"string","pattern":"^[a-c]+\"?$"})"));
  EXPECT_TRUE(accepts(anchored, R"("abc")"));
  EXPECT_TRUE(accepts(anchored, R"("ab\"")"));  // the quote it matches, escaped
  EXPECT_FALSE(accepts(anchored, R"("ab"")"));
  EXPECT_FALSE(accepts(anchored, R"("xab")"));
  const Grammar search = json_schema_grammar(ojson::parse(R"({"type":"string","pattern":"\\d{2}"})"));
  EXPECT_TRUE(accepts(search, R"("room 42, floor 3")"));
  EXPECT_FALSE(accepts(search, R"("room 4")"));
}
