#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "core/error.h"
#include "core/mapped_file.h"
#include "formats/gguf.h"
#include "test_util.h"

using namespace mx;

namespace {

namespace fs = std::filesystem;


template <typename T>
void put(std::string& s, T v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof(T));
}
void put_str(std::string& s, std::string_view v) {
  put<uint64_t>(s, v.size());
  s.append(v);
}

// Writes GGUF files byte by byte, so tests can also write broken ones.
struct Builder {
  uint32_t magic = 0x46554747, version = 3;
  uint64_t alignment = 32;  // the layout the builder uses for tensor data
  std::string kv;
  uint64_t n_kv = 0;
  struct T {
    std::string name;
    std::vector<int64_t> dims;
    uint32_t type;
    std::string data;
    std::optional<uint64_t> offset;  // override the computed one
  };
  std::vector<T> tensors;

  void key(std::string_view k, GgufType t) {
    put_str(kv, k);
    put<uint32_t>(kv, uint32_t(t));
    ++n_kv;
  }
  template <typename V>
  void scalar(std::string_view k, GgufType t, V v) {
    key(k, t);
    put<V>(kv, v);
  }
  void string(std::string_view k, std::string_view v) {
    key(k, GgufType::STRING);
    put_str(kv, v);
  }
  void strings(std::string_view k, const std::vector<std::string>& v) {
    key(k, GgufType::ARRAY);
    put<uint32_t>(kv, uint32_t(GgufType::STRING));
    put<uint64_t>(kv, v.size());
    for (const auto& s : v) put_str(kv, s);
  }
  void int32s(std::string_view k, const std::vector<int32_t>& v) {
    key(k, GgufType::ARRAY);
    put<uint32_t>(kv, uint32_t(GgufType::INT32));
    put<uint64_t>(kv, v.size());
    for (int32_t x : v) put<int32_t>(kv, x);
  }
  void tensor(std::string name, std::vector<int64_t> dims, uint32_t type, uint64_t nbytes, uint8_t fill) {
    tensors.push_back({std::move(name), std::move(dims), type, std::string(nbytes, char(fill)), std::nullopt});
  }

  static uint64_t pad(uint64_t x, uint64_t a) { return x + (a - x % a) % a; }

  std::string build() const {
    std::string s;
    put<uint32_t>(s, magic);
    put<uint32_t>(s, version);
    put<uint64_t>(s, tensors.size());
    put<uint64_t>(s, n_kv);
    s += kv;
    uint64_t off = 0;
    std::vector<uint64_t> offs;
    for (const auto& t : tensors) {
      put_str(s, t.name);
      put<uint32_t>(s, uint32_t(t.dims.size()));
      for (int64_t d : t.dims) put<int64_t>(s, d);
      put<uint32_t>(s, t.type);
      put<uint64_t>(s, t.offset.value_or(off));
      offs.push_back(off);
      off = pad(off + t.data.size(), alignment);
    }
    s.resize(pad(s.size(), alignment), '\0');
    const size_t base = s.size();
    for (size_t i = 0; i < tensors.size(); ++i) {
      s.resize(base + offs[i], '\0');
      s += tensors[i].data;
    }
    s.resize(pad(s.size(), alignment), '\0');
    return s;
  }
};

// A small valid file: every metadata type and tensors of several ggml types.
Builder tiny() {
  Builder b;
  b.string("general.architecture", "tiny");
  b.scalar<uint8_t>("t.u8", GgufType::UINT8, 200);
  b.scalar<int8_t>("t.i8", GgufType::INT8, -5);
  b.scalar<uint16_t>("t.u16", GgufType::UINT16, 60000);
  b.scalar<int16_t>("t.i16", GgufType::INT16, -30000);
  b.scalar<uint32_t>("t.u32", GgufType::UINT32, 4000000000u);
  b.scalar<int32_t>("t.i32", GgufType::INT32, -7);
  b.scalar<float>("t.f32", GgufType::FLOAT32, 1.5f);
  b.scalar<uint8_t>("t.bool", GgufType::BOOL, 1);
  b.scalar<uint64_t>("t.u64", GgufType::UINT64, 1ull << 40);
  b.scalar<int64_t>("t.i64", GgufType::INT64, -(1ll << 40));
  b.scalar<double>("t.f64", GgufType::FLOAT64, 2.25);
  b.strings("t.strs", {"a", "", "ccc"});
  b.int32s("t.ints", {1, -2, 3});
  // an array of arrays of strings
  b.key("t.nested", GgufType::ARRAY);
  put<uint32_t>(b.kv, uint32_t(GgufType::ARRAY));
  put<uint64_t>(b.kv, 2);
  for (int i = 0; i < 2; ++i) {
    put<uint32_t>(b.kv, uint32_t(GgufType::STRING));
    put<uint64_t>(b.kv, uint64_t(i + 1));
    for (int k = 0; k <= i; ++k) put_str(b.kv, "s" + std::to_string(i) + std::to_string(k));
  }
  b.tensor("f32", {4, 3}, ggml_type::F32, 48, 0x11);
  b.tensor("f16", {8}, ggml_type::F16, 16, 0x22);
  b.tensor("bf16", {5, 1}, ggml_type::BF16, 10, 0x33);
  b.tensor("q8_0", {64, 2}, ggml_type::Q8_0, 2 * 2 * 34, 0x44);
  b.tensor("q4_0", {32}, ggml_type::Q4_0, 18, 0x55);
  b.tensor("q4_k", {256, 1, 1}, ggml_type::Q4_K, 144, 0x66);
  b.tensor("q6_k", {512}, ggml_type::Q6_K, 2 * 210, 0x77);
  b.tensor("mxfp4", {32, 3}, ggml_type::MXFP4, 3 * 17, 0x88);
  return b;
}

std::string write(const mxtest::TempDir& d, const std::string& bytes, const std::string& name = "m.gguf") {
  std::string p = d / name;
  mxtest::spit(p, bytes);
  return p;
}

// Expects parsing `bytes` to fail with an mx::Error whose message has every fragment.
void expect_error(const std::string& bytes, std::initializer_list<const char*> fragments) {
  mxtest::TempDir d;
  std::string p = write(d, bytes);
  try {
    GgufFile f(p);
    ADD_FAILURE() << "no error for a malformed file";
  } catch (const Error& e) {
    for (const char* f : fragments)
      EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << "message '" << e.what() << "' lacks '" << f << "'";
  }
}

std::string header(uint64_t n_tensors, uint64_t n_kv) {
  std::string s;
  put<uint32_t>(s, 0x46554747);
  put<uint32_t>(s, 3);
  put<uint64_t>(s, n_tensors);
  put<uint64_t>(s, n_kv);
  return s;
}

}  // namespace

TEST(Gguf, VocabFilesMetadata) {
  struct Want {
    const char* name;
    const char* model;
    const char* arch;
    size_t n_tokens;
  };
  const Want wants[] = {
      {"bert-bge", "bert", "bert", 30522},  {"deepseek-coder", "gpt2", "llama", 32256},
      {"gpt-2", "gpt2", "gpt2", 50257},     {"llama-spm", "llama", "llama", 32000},
      {"mpt", "gpt2", "mpt", 50432},        {"phi-3", "llama", "phi3", 32064},
      {"refact", "gpt2", "refact", 49216},
  };
  for (const Want& w : wants) {
    SCOPED_TRACE(w.name);
    GgufFile f((mxtest::tokenizer_vectors_dir() / fmt::format("ggml-vocab-{}.gguf", w.name)).string());
    EXPECT_EQ(f.version(), 3u);
    EXPECT_TRUE(f.tensors().empty());
    EXPECT_EQ(f.get_string("tokenizer.ggml.model"), w.model);
    EXPECT_EQ(f.get_string("general.architecture"), w.arch);
    EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens").size(), w.n_tokens);
    EXPECT_EQ(f.get_i32_array("tokenizer.ggml.token_type").size(), w.n_tokens);
    EXPECT_EQ(f.alignment(), 32u);
  }
  GgufFile g((mxtest::tokenizer_vectors_dir() / "ggml-vocab-gpt-2.gguf").string());
  EXPECT_EQ(g.get_u32("gpt2.block_count"), 12u);
  EXPECT_EQ(g.get_u32("gpt2.context_length"), 1024u);
  EXPECT_NEAR(g.get_f64("gpt2.attention.layer_norm_epsilon"), 1e-5, 1e-9);
  EXPECT_EQ(g.get_string_array("tokenizer.ggml.merges").size(), 50000u);
  EXPECT_EQ(g.get_string_array("tokenizer.ggml.merges")[0], "\xc4\xa0 t");  // "Ġ t"
  EXPECT_EQ(g.get_string_array("tokenizer.ggml.tokens")[50256], "<|endoftext|>");
  EXPECT_EQ(g.get_u32("tokenizer.ggml.bos_token_id"), 50256u);
  EXPECT_EQ(g.get_u32_or("no.such.key", 7), 7u);
  EXPECT_FALSE(g.has("no.such.key"));
  GgufFile spm((mxtest::tokenizer_vectors_dir() / "ggml-vocab-llama-spm.gguf").string());
  EXPECT_TRUE(spm.get_bool("tokenizer.ggml.add_bos_token"));
  std::vector<float> scores = spm.get_f32_array("tokenizer.ggml.scores");
  ASSERT_EQ(scores.size(), 32000u);
  EXPECT_LT(scores[1000], 0.0f);

  // type mismatches and missing keys name the key and the type found
  try {
    (void)g.get_string("gpt2.block_count");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'gpt2.block_count' is UINT32, expected STRING"), std::string::npos) << e.what();
  }
  try {
    (void)g.get_u32("tokenizer.ggml.model");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'tokenizer.ggml.model' is STRING, expected an integer"), std::string::npos)
        << e.what();
  }
  try {
    (void)g.get_f32_array("tokenizer.ggml.tokens");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("array of STRING"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)g.get("absent.key"), Error);
  EXPECT_THROW((void)g.tensor("absent"), Error);
}

TEST(Gguf, TinyFileParsesEveryTypeAndTensorLayout) {
  mxtest::TempDir d;
  const Builder b = tiny();
  GgufFile f(write(d, b.build()));
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.metadata().size(), 15u);
  EXPECT_EQ(f.metadata()[0].first, "general.architecture");
  EXPECT_EQ(f.get_string("general.architecture"), "tiny");
  EXPECT_EQ(f.get("t.u8").as_u64(), 200u);
  EXPECT_EQ(f.get("t.i8").as_i64(), -5);
  EXPECT_EQ(f.get("t.u16").as_u32(), 60000u);
  EXPECT_EQ(f.get("t.i16").as_i32(), -30000);
  EXPECT_EQ(f.get_u32("t.u32"), 4000000000u);
  EXPECT_EQ(f.get_i64("t.i32"), -7);
  EXPECT_THROW((void)f.get_u64("t.i32"), Error);  // negative as unsigned
  EXPECT_THROW((void)f.get("t.u32").as_i32(), Error);  // does not fit
  EXPECT_FLOAT_EQ(float(f.get_f64("t.f32")), 1.5f);
  EXPECT_TRUE(f.get_bool("t.bool"));
  EXPECT_EQ(f.get_u64("t.u64"), 1ull << 40);
  EXPECT_EQ(f.get_i64("t.i64"), -(1ll << 40));
  EXPECT_DOUBLE_EQ(f.get_f64("t.f64"), 2.25);
  EXPECT_EQ(f.get_string_array("t.strs"), (std::vector<std::string_view>{"a", "", "ccc"}));
  EXPECT_EQ(f.get_i32_array("t.ints"), (std::vector<int32_t>{1, -2, 3}));
  const GgufArray& nested = f.get_array("t.nested");
  ASSERT_EQ(nested.elem_type, GgufType::ARRAY);
  ASSERT_EQ(nested.arrays.size(), 2u);
  EXPECT_EQ(nested.arrays[1].as_array().strings, (std::vector<std::string_view>{"s10", "s11"}));
  EXPECT_NE(f.get("t.nested").to_string().find("s00"), std::string::npos);

  ASSERT_EQ(f.tensors().size(), b.tensors.size());
  EXPECT_EQ(f.data_offset() % 32, 0u);
  uint64_t expect_off = 0;
  const uint8_t* base = f.mapping()->data() + f.data_offset();
  for (size_t i = 0; i < b.tensors.size(); ++i) {
    const GgufTensorInfo& t = f.tensors()[i];
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.name, b.tensors[i].name);
    EXPECT_EQ(t.type, b.tensors[i].type);
    EXPECT_EQ(t.dims, b.tensors[i].dims);
    EXPECT_EQ(t.nbytes, b.tensors[i].data.size());
    EXPECT_EQ(t.offset, expect_off);
    EXPECT_EQ(t.data, base + expect_off);
    EXPECT_EQ(t.data[0], uint8_t(b.tensors[i].data[0]));
    EXPECT_EQ(t.data[t.nbytes - 1], uint8_t(b.tensors[i].data[0]));
    expect_off = Builder::pad(expect_off + t.nbytes, 32);
  }
  EXPECT_STREQ(f.tensor("q4_k").type_info->name, "Q4_K");
  EXPECT_EQ(f.tensor("q6_k").numel(), 512);
  EXPECT_EQ(f.tensor("mxfp4").shape_str(), "[32, 3]");
  EXPECT_EQ(f.find_tensor("nope"), nullptr);

  // block geometry from ggml
  EXPECT_EQ(ggml_type_info(ggml_type::Q8_0)->type_size, 34u);
  EXPECT_EQ(ggml_type_info(ggml_type::Q4_K)->block_size, 256);
  EXPECT_EQ(ggml_type_info(ggml_type::Q6_K)->type_size, 210u);
  EXPECT_EQ(ggml_type_info(ggml_type::MXFP4)->type_size, 17u);
  EXPECT_EQ(ggml_type_info(ggml_type::BF16)->type_size, 2u);
  EXPECT_EQ(ggml_type_info(4), nullptr);  // removed Q4_2

  // GGUF v2 reads the same; a custom alignment moves the data
  Builder v2 = tiny();
  v2.version = 2;
  v2.alignment = 64;
  v2.scalar<uint32_t>("general.alignment", GgufType::UINT32, 64);
  GgufFile f2(write(d, v2.build(), "v2.gguf"));
  EXPECT_EQ(f2.version(), 2u);
  EXPECT_EQ(f2.alignment(), 64u);
  EXPECT_EQ(f2.data_offset() % 64, 0u);
  EXPECT_EQ(f2.tensor("q8_0").offset % 64, 0u);
  EXPECT_EQ(f2.tensor("mxfp4").data[0], 0x88);
}

TEST(Gguf, CorruptFilesNameTheProblem) {
  const std::string good = tiny().build();

  std::string bad_magic = good;
  bad_magic[0] = 'X';
  expect_error(bad_magic, {"bad magic 'XGUF'", "not a GGUF file"});
  expect_error("GGU", {"too short"});
  expect_error(good.substr(0, 10), {"truncated"});

  std::string v1 = good;
  v1[4] = 1;
  expect_error(v1, {"version 1 is not supported"});
  std::string v9 = good;
  v9[4] = 9;
  expect_error(v9, {"unsupported GGUF version 9"});

  {  // a key whose length runs past the end of the file
    std::string s = header(0, 1);
    put<uint64_t>(s, 1ull << 60);
    s += std::string(19, 'k');
    expect_error(s, {"metadata key #0", "length 1152921504606846976", "more than the 19 bytes left"});
  }
  {  // a string value too long for the file
    std::string s = header(0, 1);
    put_str(s, "k");
    put<uint32_t>(s, uint32_t(GgufType::STRING));
    put<uint64_t>(s, 1000);
    s += "short";
    expect_error(s, {"metadata 'k'", "length 1000"});
  }
  {  // an array count no file could hold
    std::string s = header(0, 1);
    put_str(s, "tokenizer.ggml.tokens");
    put<uint32_t>(s, uint32_t(GgufType::ARRAY));
    put<uint32_t>(s, uint32_t(GgufType::STRING));
    put<uint64_t>(s, 1ull << 62);
    s += std::string(64, 'x');
    expect_error(s, {"metadata 'tokenizer.ggml.tokens'", "claims 4611686018427387904 STRING elements"});
  }
  {  // numeric array count past the end
    std::string s = header(0, 1);
    put_str(s, "a");
    put<uint32_t>(s, uint32_t(GgufType::ARRAY));
    put<uint32_t>(s, uint32_t(GgufType::FLOAT32));
    put<uint64_t>(s, 100);
    s += std::string(40, 'x');
    expect_error(s, {"metadata 'a'", "claims 100 FLOAT32 elements"});
  }
  {  // unknown value types
    std::string s = header(0, 1);
    put_str(s, "k");
    put<uint32_t>(s, 13);
    put<uint32_t>(s, 0);
    expect_error(s, {"metadata 'k' has unknown value type 13"});
    std::string a = header(0, 1);
    put_str(a, "k");
    put<uint32_t>(a, uint32_t(GgufType::ARRAY));
    put<uint32_t>(a, 77);
    put<uint64_t>(a, 0);
    expect_error(a, {"unknown array element type 77"});
  }
  {  // arrays nested without end
    std::string s = header(0, 1);
    put_str(s, "deep");
    put<uint32_t>(s, uint32_t(GgufType::ARRAY));
    for (int i = 0; i < 40; ++i) {
      put<uint32_t>(s, uint32_t(GgufType::ARRAY));
      put<uint64_t>(s, 1);
    }
    s += std::string(64, '\0');
    expect_error(s, {"nests arrays deeper"});
  }
  expect_error(header(1ull << 40, 0), {"tensor count 1099511627776 cannot fit"});
  expect_error(header(0, 1ull << 40), {"key-value count 1099511627776 cannot fit"});
  {
    Builder b = tiny();
    b.string("general.architecture", "again");
    expect_error(b.build(), {"duplicate metadata key 'general.architecture'"});
  }
  {
    Builder b = tiny();
    b.scalar<uint32_t>("general.alignment", GgufType::UINT32, 48);
    expect_error(b.build(), {"general.alignment 48 is not a power of two"});
  }
  {
    Builder b = tiny();
    b.tensors[2].offset = uint64_t(1) << 40;
    expect_error(b.build(), {"tensor 'bf16'", "runs past the end of the data section"});
  }
  {
    Builder b = tiny();
    b.tensors[3].offset = 4;
    expect_error(b.build(), {"tensor 'q8_0'", "offset 4 is misaligned"});
  }
  {
    Builder b = tiny();
    b.tensors[1].offset = 0;  // on top of tensor 0
    expect_error(b.build(), {"overlaps tensor"});
  }
  {
    Builder b = tiny();
    b.tensors[4].type = 99;
    expect_error(b.build(), {"tensor 'q4_0' has unknown ggml type 99"});
  }
  {
    Builder b = tiny();
    b.tensors[5].dims = {100};
    expect_error(b.build(), {"tensor 'q4_k'", "rows of 100 elements, not a multiple of the block size 256"});
  }
  {
    Builder b = tiny();
    b.tensors[0].dims = {1, 1, 1, 1, 1};
    expect_error(b.build(), {"tensor 'f32' has 5 dimensions"});
  }
  {
    Builder b = tiny();
    b.tensors[0].dims = {-4, 3};
    expect_error(b.build(), {"tensor 'f32' dimension 0 is negative"});
  }
  {
    Builder b = tiny();
    b.tensors[0].dims = {1ll << 40, 1ll << 40};
    expect_error(b.build(), {"tensor 'f32' has too many elements"});
  }
  {
    Builder b = tiny();
    b.tensors[6].name = b.tensors[7].name;
    expect_error(b.build(), {"duplicate tensor name 'mxfp4'"});
  }
  {
    Builder b = tiny();
    b.tensors[0].name = std::string(80, 'n');
    expect_error(b.build(), {"80-byte name"});
  }
  {  // tensor data cut off
    std::string s = good.substr(0, good.size() - 30);
    expect_error(s, {"tensor 'mxfp4'", "truncated file?"});
  }
}

TEST(Gguf, EveryTruncationAndByteFlipIsAnErrorNotACrash) {
  mxtest::TempDir d;
  const std::string good = tiny().build();
  std::string p = d / "t.gguf";
  size_t end_of_data;
  {
    std::string q = d / "good.gguf";
    mxtest::spit(q, good);
    GgufFile f(q);
    const GgufTensorInfo& last = f.tensors().back();
    end_of_data = size_t(last.data + last.nbytes - f.mapping()->data());
  }
  // Every prefix of the file that cuts into the header, the metadata or the tensor data.
  for (size_t n = 0; n < end_of_data; n += (n < 700 ? 1 : 37)) {
    mxtest::spit(p, good.substr(0, n));
    EXPECT_THROW(GgufFile f(p), Error) << "prefix of " << n << " bytes";
  }
  // Random corruption of the header and metadata: parse or mx::Error, nothing else.
  std::mt19937 rng(7);
  for (int i = 0; i < 400; ++i) {
    std::string s = good;
    for (int k = 0; k < 3; ++k) s[rng() % 640] = char(rng());
    mxtest::spit(p, s);
    try {
      GgufFile f(p);
      for (const auto& t : f.tensors()) ASSERT_LE(t.data + t.nbytes, f.mapping()->data() + f.mapping()->size());
    } catch (const Error&) {
    }
  }
}
