// llama2.c tokenizer files (tokenizer/llama2c_tokenizer.h): stories260K's tok512.bin
// encodes as llama2.c's run.c does (tok512_encode.tsv in ../shared holds run.c's
// ids), decodes back to the text, and is found beside the checkpoint.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "tokenizer/llama2c_tokenizer.h"
#include "tokenizer/model_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "test_util.h"

using namespace mx;

namespace {

std::string tok512() { return (mxtest::stories260k() / "tok512.bin").string(); }

struct Case {
  std::string text;
  std::vector<int32_t> ids;
};

// tok512_encode.tsv: the text ("\n" written as a backslash and n), a tab, the ids.
std::vector<Case> run_c_cases() {
  std::vector<Case> cases;
  for (const std::string& line : mxtest::read_lines(mxtest::stories260k() / "tok512_encode.tsv")) {
    const size_t tab = line.find('\t');
    if (tab == std::string::npos) continue;
    Case c;
    for (size_t i = 0; i < tab; ++i) {
      if (line[i] == '\\' && i + 1 < tab && line[i + 1] == 'n') {
        c.text += '\n';
        ++i;
      } else {
        c.text += line[i];
      }
    }
    std::istringstream ss(line.substr(tab + 1));
    for (int32_t id; ss >> id;) c.ids.push_back(id);
    cases.push_back(std::move(c));
  }
  return cases;
}

}  // namespace

TEST(Llama2cTokenizer, EncodesAsRunC) {
  auto tok = load_tokenizer_llama2c(tok512());
  EXPECT_EQ(tok->vocab_size, 512u);
  EXPECT_EQ(tok->bos_id, 1);
  EXPECT_EQ(tok->eos_id, 2);
  const auto cases = run_c_cases();
  ASSERT_GE(cases.size(), 8u);
  for (const Case& c : cases) {
    EXPECT_EQ(tok->encode(c.text, true), c.ids) << "'" << c.text << "'";
    // Decoding gives the text back: BOS is dropped, so is the dummy-prefix space.
    EXPECT_EQ(tok->decode(c.ids), c.text) << "'" << c.text << "'";
  }
}

TEST(Llama2cTokenizer, PiecesAndSpecials) {
  auto tok = load_tokenizer_llama2c(tok512());
  EXPECT_EQ(tok->token_text(1), "<s>");
  EXPECT_EQ(tok->token_type(1), TokenType::Control);
  EXPECT_EQ(tok->token_piece(1), "");
  EXPECT_EQ(tok->token_piece(13), "\n");  // <0x0A>: byte fallback
  EXPECT_TRUE(tok->is_eog(2));
  // In a continuation the leading space of a word stays (streamed text).
  const auto ids = tok->encode("Once upon", false);
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(tok->token_piece(ids[1]).front(), ' ');
}

TEST(Llama2cTokenizer, FoundBesideTheCheckpoint) {
  const std::string model = (mxtest::stories260k() / "stories260K.bin").string();
  ModelTokenizer mt = load_model_tokenizer(model, "");
  ASSERT_TRUE(mt.tokenizer);
  EXPECT_EQ(mt.path, tok512());
  mxtest::TempDir d;  // a checkpoint alone in its folder has none
  std::filesystem::copy_file(model, d / "m.bin");
  EXPECT_FALSE(load_model_tokenizer(d / "m.bin", "").tokenizer);
  EXPECT_TRUE(load_model_tokenizer(d / "m.bin", tok512()).tokenizer);  // --tokenizer
  // A tokenizer.bin of another vocabulary size (llama2.c keeps Llama 2's beside
  // its small models) is not the checkpoint's: skipped, and tok512.bin wins.
  std::string other(4, '\0');
  other[0] = 8;  // max_token_length 8, then 4 tokens: score 0, length 1, one byte
  for (char c : std::string("abcd")) other += std::string(4, '\0') + std::string("\x01\0\0\0", 4) + c;
  mxtest::spit(d / "tokenizer.bin", other);
  ASSERT_TRUE(looks_like_llama2c_tokenizer(d / "tokenizer.bin"));
  EXPECT_FALSE(load_model_tokenizer(d / "m.bin", "").tokenizer);
  std::filesystem::copy_file(tok512(), d / "tok512.bin");
  EXPECT_EQ(load_model_tokenizer(d / "m.bin", "").path, d / "tok512.bin");
}

TEST(Llama2cTokenizer, BadFilesAreClearErrors) {
  mxtest::TempDir d;
  const std::string raw = mxtest::slurp(tok512());
  auto write = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(d / name, std::ios::binary) << bytes;
    return d / name;
  };
  for (const auto& [name, bytes] : std::vector<std::pair<std::string, std::string>>{
           {"truncated.bin", raw.substr(0, raw.size() - 3)},
           {"empty.bin", ""},
           {"header-only.bin", raw.substr(0, 4)},
           {"garbage.bin", std::string(100, '\xff')}}) {
    const std::string p = write(name, bytes);
    EXPECT_FALSE(looks_like_llama2c_tokenizer(p)) << name;
    try {
      load_tokenizer_llama2c(p);
      ADD_FAILURE() << name << ": expected an error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("not a llama2.c tokenizer"), std::string::npos) << e.what();
    }
    EXPECT_THROW(load_model_tokenizer((mxtest::stories260k() / "stories260K.bin").string(), p), Error) << name;
  }
  EXPECT_THROW(load_model_tokenizer((mxtest::stories260k() / "stories260K.bin").string(), d / "missing.bin"), Error);
}
