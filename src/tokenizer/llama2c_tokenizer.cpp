#include "tokenizer/llama2c_tokenizer.h"

#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/mapped_file.h"
#include "tokenizer/tokenizer.h"

namespace mx {

namespace {

// Walks the file; returns false (with the reason) where it does not add up.
// Fills `out` when given; `count` gets the number of tokens.
bool parse(const MappedFile& f, SpmVocab* out, std::string* why, size_t* count = nullptr) {
  const auto* p = static_cast<const uint8_t*>(f.data());
  const size_t size = f.size();
  size_t off = 0;
  auto read_i32 = [&](int32_t& v) {
    if (size - off < 4) return false;
    std::memcpy(&v, p + off, 4);
    off += 4;
    return true;
  };
  int32_t max_len = 0;
  if (!read_i32(max_len) || max_len <= 0 || max_len > 4096) {
    *why = "no plausible max_token_length header";
    return false;
  }
  std::vector<std::string> text;
  std::vector<float> score;
  while (off < size) {
    float s;
    int32_t n;
    if (size - off < 8) {
      *why = fmt::format("truncated at token {} (byte {})", text.size(), off);
      return false;
    }
    std::memcpy(&s, p + off, 4);
    std::memcpy(&n, p + off + 4, 4);
    off += 8;
    if (n < 0 || n > max_len || size_t(n) > size - off) {
      *why = fmt::format("token {} claims {} bytes (max_token_length {}, {} left)", text.size(), n, max_len,
                         size - off);
      return false;
    }
    text.emplace_back(reinterpret_cast<const char*>(p + off), size_t(n));
    score.push_back(s);
    off += size_t(n);
  }
  if (text.size() < 3) {
    *why = fmt::format("{} tokens: fewer than <unk>, BOS and EOS", text.size());
    return false;
  }
  if (count) *count = text.size();
  if (!out) return true;
  out->text.resize(text.size());
  out->type.assign(text.size(), TokenType::Normal);
  for (size_t i = 0; i < text.size(); ++i) {
    std::string t = std::move(text[i]);
    if (t.size() == 6 && t.starts_with("<0x") && t.back() == '>') out->type[i] = TokenType::Byte;
    for (size_t m; (m = t.find(' ')) != std::string::npos;) t.replace(m, 1, "\xe2\x96\x81");  // ' ' -> ▁
    out->text[i] = std::move(t);
  }
  out->text[0] = "<unk>", out->type[0] = TokenType::Unknown;
  out->text[1] = "<s>", out->type[1] = TokenType::Control;
  out->text[2] = "</s>", out->type[2] = TokenType::Control;
  out->score = std::move(score);
  out->unk_id = 0, out->bos_id = 1, out->eos_id = 2;
  out->add_bos = true;
  out->add_space_prefix = true;
  out->pre = "llama2.c";
  return true;
}

}  // namespace

bool looks_like_llama2c_tokenizer(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  MappedFile f(path);
  std::string why;
  return parse(f, nullptr, &why);
}

std::unique_ptr<Tokenizer> load_tokenizer_llama2c(const std::string& path) {
  MappedFile f(path);
  SpmVocab v;
  std::string why;
  if (!parse(f, &v, &why)) fail("{}: not a llama2.c tokenizer file: {}", path, why);
  return make_spm_tokenizer(std::move(v), path);
}

std::optional<std::string> find_llama2c_tokenizer(const std::string& checkpoint, int vocab_size) {
  const auto dir = std::filesystem::path(checkpoint).parent_path();
  for (const std::string& name : {"tok" + std::to_string(vocab_size) + ".bin", std::string("tokenizer.bin")}) {
    const auto p = (dir / name).string();
    std::error_code ec;
    if (!std::filesystem::is_regular_file(p, ec)) continue;
    MappedFile f(p);
    std::string why;
    size_t n = 0;
    // llama2.c's folder holds Llama 2's 32000-token tokenizer.bin beside its small
    // models: only a file with the checkpoint's vocabulary size belongs to it.
    if (parse(f, nullptr, &why, &n) && n == size_t(vocab_size)) return p;
  }
  return std::nullopt;
}

}  // namespace mx
