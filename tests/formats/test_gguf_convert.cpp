// GGUF interop: mxserve convert -> GGUF -> load gives the safetensors model
// exactly (logits bitwise, greedy tokens) for every architecture and type; the
// llama.cpp layout conventions (Q/K permutation, stacked experts, block_mxfp4
// nibble order, ggml block dequantization); writer/reader round trip; corrupt
// or unsupported files are clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <cstring>
#include <fstream>
#include <vector>

#include "core/error.h"
#include "engine/generate.h"
#include "formats/ggml_dequant.h"
#include "formats/gguf.h"
#include "convert/gguf_export.h"
#include "formats/gguf_model.h"
#include "formats/gguf_rows.h"
#include "formats/gguf_writer.h"
#include "formats/safetensors.h"
#include "tokenizer/tokenizer.h"
#include "models/model.h"
#include "devtools/synthetic.h"
#include "quant/mxfp4.h"
#include "convert/quantizer.h"
#include "model_test_util.h"
#include "test_util.h"

using namespace mx;

namespace {

std::string make_model(const mxtest::TempDir& d, const std::string& arch, DType dt) {
  return mxtest::make_synthetic(d / arch, arch, dt);
}

std::string convert(const std::string& dir, const std::string& out, GgufOutType t) {
  Checkpoint ck = load_checkpoint(dir);
  write_gguf_checkpoint(ck, out, t);
  return out;
}

// Same logits at every prompt position (bitwise unless `tol`: the largest
// difference relative to the largest logit), same greedy continuation, same MTP head.
void expect_same_model(const std::string& a, const std::string& b, float tol = 0) {
  auto ma = load_model(a), mb = load_model(b);
  const std::vector<int32_t> prompt = {1, 7, 42, 99, 3, 250, 17};
  auto la = prompt_logits(*ma, prompt, true), lb = prompt_logits(*mb, prompt, true);
  ASSERT_EQ(la.size(), lb.size());
  if (tol == 0) {
    EXPECT_EQ(std::memcmp(la.data(), lb.data(), la.size() * 4), 0) << a << " vs " << b;
  } else {
    float amax = 0, dmax = 0;
    for (size_t i = 0; i < la.size(); ++i) amax = std::max(amax, std::fabs(la[i])), dmax = std::max(dmax, std::fabs(la[i] - lb[i]));
    EXPECT_LE(dmax, tol * amax) << a << " vs " << b;
  }
  GenerateOptions g;
  g.max_tokens = 12;
  g.sampling.temperature = 0;
  g.ignore_eos = true;
  EXPECT_EQ(generate(*ma, prompt, g).tokens, generate(*mb, prompt, g).tokens);
  // deepseek2 GGUFs carry no MTP layer (llama.cpp's converter drops it too).
  if (ma->config().arch != Arch::DeepseekV3) {
    EXPECT_EQ(ma->num_mtp_layers(), mb->num_mtp_layers());
  }
  EXPECT_EQ(ma->config().eos_token_ids, mb->config().eos_token_ids);
  EXPECT_EQ(ma->config().bos_token_id, mb->config().bos_token_id);
}

struct ArchType {
  const char* arch;
  DType src;
  GgufOutType out;
};
void PrintTo(const ArchType& a, std::ostream* os) { *os << a.arch; }
class GgufEveryArch : public ::testing::TestWithParam<ArchType> {};

const char* type_name(GgufOutType t) {
  return t == GgufOutType::F32 ? "f32" : t == GgufOutType::F16 ? "f16" : t == GgufOutType::BF16 ? "bf16" : "mxfp4";
}

}  // namespace

TEST_P(GgufEveryArch, ConvertThenLoadIsTheSameModel) {
  mxtest::TempDir d;
  const ArchType p = GetParam();
  const std::string src = make_model(d, p.arch, p.src);
  const std::string gguf = convert(src, d / "m.gguf", p.out);
  // f16 rounds the few bf16 weights below f16's normal range (~6e-5); those
  // tensors load as f32, so logits differ by that rounding only.
  if (p.out == GgufOutType::F16) return expect_same_model(src, gguf, 2e-3f);
  if (p.out != GgufOutType::MXFP4) return expect_same_model(src, gguf);
  // MXFP4: the GGUF is bit-for-bit what `mxserve quantize` makes, and an
  // already-quantized checkpoint converts (keeping its MXFP4) to the same model.
  const std::string q = d / "quantized";
  quantize_checkpoint(src, q, {});
  expect_same_model(q, gguf);
  expect_same_model(q, convert(q, d / "q.gguf", GgufOutType::BF16));
}

INSTANTIATE_TEST_SUITE_P(
    All, GgufEveryArch,
    ::testing::Values(ArchType{"llama", DType::BF16, GgufOutType::BF16}, ArchType{"qwen2", DType::BF16, GgufOutType::BF16},
                      ArchType{"qwen3", DType::BF16, GgufOutType::BF16},
                      ArchType{"glm4_moe", DType::BF16, GgufOutType::BF16},
                      ArchType{"qwen3_moe", DType::BF16, GgufOutType::BF16},
                      ArchType{"deepseek_v3", DType::BF16, GgufOutType::BF16},
                      ArchType{"deepseek_v3", DType::BF16, GgufOutType::MXFP4},
                      ArchType{"llama", DType::F32, GgufOutType::F32}, ArchType{"glm4_moe", DType::F32, GgufOutType::F32},
                      ArchType{"qwen3", DType::BF16, GgufOutType::F16},
                      ArchType{"glm4_moe", DType::BF16, GgufOutType::F16},
                      ArchType{"llama", DType::BF16, GgufOutType::MXFP4},
                      ArchType{"glm4_moe", DType::BF16, GgufOutType::MXFP4},
                      ArchType{"qwen3_moe", DType::BF16, GgufOutType::MXFP4}),
    [](const auto& i) {
      return std::string(i.param.arch) + "_" + (i.param.src == DType::F32 ? "f32src_" : "") + type_name(i.param.out);
    });

TEST(GgufConvert, LlamaQKRowsArePermutedAsLlamaCppAndExpertsStacked) {
  mxtest::TempDir d;
  const std::string src = make_model(d, "llama", DType::F32);
  GgufFile g(convert(src, d / "l.gguf", GgufOutType::F32));
  Checkpoint ck = load_checkpoint(src);
  const ModelConfig& c = ck.config;
  // convert_hf_to_gguf.py: w.reshape(n_head, 2, rows/n_head/2, cols).swapaxes(1, 2).reshape(w.shape)
  for (const auto& [proj, heads] : {std::pair{"q", c.num_attention_heads}, std::pair{"k", c.num_key_value_heads}}) {
    const Tensor& hf = ck.tensors->get(fmt::format("model.layers.0.self_attn.{}_proj.weight", proj));
    const GgufTensorInfo& t = g.tensor(fmt::format("blk.0.attn_{}.weight", proj));
    const int64_t rows = hf.dim(0), cols = hf.dim(1), half = rows / heads / 2;
    ASSERT_EQ(t.dims, (std::vector<int64_t>{cols, rows}));
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t j = 0; j < half; ++j)
        for (int64_t s = 0; s < 2; ++s) {
          const int64_t grow = (h * half + j) * 2 + s, hrow = (h * 2 + s) * half + j;
          ASSERT_EQ(std::memcmp(t.data + grow * cols * 4, hf.as<float>() + hrow * cols, cols * 4), 0);
        }
  }
  EXPECT_TRUE(g.has("mxserve.rope_scaling"));  // llama3 scaling: exact parameters for us ...
  EXPECT_TRUE(g.find_tensor("rope_freqs.weight"));  // ... and llama.cpp's factors
  EXPECT_EQ(g.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(g.get_string_array("tokenizer.ggml.tokens").size(), size_t(c.vocab_size));

  const std::string moe = make_model(d, "glm4_moe", DType::F32);
  GgufFile gm(convert(moe, d / "g.gguf", GgufOutType::F32));
  Checkpoint cm = load_checkpoint(moe);
  const GgufTensorInfo& up = gm.tensor("blk.1.ffn_up_exps.weight");
  const int E = cm.config.moe.n_routed_experts;
  ASSERT_EQ(up.dims.size(), 3u);
  EXPECT_EQ(up.dims[2], E);
  for (int e = 0; e < E; ++e) {
    const Tensor& x = cm.tensors->get(fmt::format("model.layers.1.mlp.experts.{}.up_proj.weight", e));
    EXPECT_EQ(std::memcmp(up.data + e * x.nbytes(), x.data, x.nbytes()), 0);
  }
  EXPECT_EQ(gm.get_string("general.architecture"), "glm4moe");
  EXPECT_EQ(gm.get_u32("glm4moe.block_count"), uint32_t(cm.config.num_hidden_layers + 1));
  EXPECT_TRUE(gm.find_tensor(fmt::format("blk.{}.nextn.eh_proj.weight", cm.config.num_hidden_layers)));
  EXPECT_TRUE(gm.find_tensor("blk.1.post_attention_norm.weight"));
  EXPECT_TRUE(gm.find_tensor("blk.1.exp_probs_b.bias"));
}

// A llama with q/k/v biases: the Q and K biases are permuted as llama.cpp's converter does
// (rows of one value) and back, so the GGUF is the same model (they were refused, or crashed).
TEST(GgufConvert, LlamaQKBiasesArePermutedBothWays) {
  mxtest::TempDir d;
  const std::string src = make_model(d, "llama", DType::F32);
  nlohmann::json cfg = nlohmann::json::parse(mxtest::slurp(src + "/config.json"));
  cfg["attention_bias"] = true;
  mxtest::spit(src + "/config.json", cfg.dump());
  const ModelConfig c = parse_hf_config(cfg);
  mxtest::rewrite_checkpoint(src, [&](std::vector<NamedTensor>& list, std::vector<OwnedTensor>& keep) {
    uint32_t seed = 7;
    for (int l = 0; l < c.num_hidden_layers; ++l)
      for (const auto& [proj, n] : {std::pair{"q", c.num_attention_heads}, std::pair{"k", c.num_key_value_heads},
                                    std::pair{"v", c.num_key_value_heads}}) {
        keep.push_back(OwnedTensor::make(DType::F32, {int64_t(n) * c.head_dim}));
        for (int64_t i = 0; i < keep.back().t.numel(); ++i)
          keep.back().t.as<float>()[i] = float((seed = seed * 1664525u + 1013904223u) >> 8) / float(1 << 24) - 0.5f;
        list.push_back({fmt::format("model.layers.{}.self_attn.{}_proj.bias", l, proj), keep.back().t});
      }
  });
  expect_same_model(src, convert(src, d / "b.gguf", GgufOutType::F32));
}

TEST(GgufConvert, Mxfp4BlocksHaveGgmlNibbleOrder) {
  // ggml dequantize_row_mxfp4: y[j] = kvalues[qs[j] & 15] * d/2, y[j+16] = kvalues[qs[j] >> 4] * d/2
  static const int8_t kvalues[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  float x[64];
  for (int i = 0; i < 64; ++i) x[i] = float((i * 37) % 23) - 11.0f + 0.25f * (i % 3);
  uint8_t packed[32], scales[2], blocks[34], back_p[32], back_s[2];
  mxfp4::quantize_row(x, 64, packed, scales, mxfp4::ScaleRule::Spec);
  float ours[64];
  mxfp4::dequantize_row(packed, scales, 64, ours);
  ggml::mxfp4_row_to_ggml(packed, scales, 64, blocks);
  for (int b = 0; b < 2; ++b) {
    const float d = mxfp4::e8m0_to_f32(blocks[b * 17]) * 0.5f;
    for (int j = 0; j < 16; ++j) {
      EXPECT_EQ(kvalues[blocks[b * 17 + 1 + j] & 15] * d, ours[b * 32 + j]);
      EXPECT_EQ(kvalues[blocks[b * 17 + 1 + j] >> 4] * d, ours[b * 32 + j + 16]);
    }
  }
  ggml::mxfp4_row_from_ggml(blocks, 64, back_p, back_s);
  EXPECT_EQ(std::memcmp(back_p, packed, 32), 0);
  EXPECT_EQ(std::memcmp(back_s, scales, 2), 0);
  // Every byte value in every position, both ways: ggml's blocks and ours carry the
  // same nibbles.
  std::vector<uint8_t> p2(2048), s2(128), b2(128 * 17), back_p2(2048), back_s2(128);
  for (size_t i = 0; i < p2.size(); ++i) p2[i] = uint8_t(i * 97 + i / 256);
  for (size_t i = 0; i < s2.size(); ++i) s2[i] = uint8_t(i * 2 + 1);
  ggml::mxfp4_row_to_ggml(p2.data(), s2.data(), 4096, b2.data());
  ggml::mxfp4_row_from_ggml(b2.data(), 4096, back_p2.data(), back_s2.data());
  EXPECT_EQ(back_p2, p2);
  EXPECT_EQ(back_s2, s2);
}

TEST(GgufConvert, GgmlBlockDequantization) {
  auto put_half = [](uint8_t* p, float f) {
    const uint16_t h = f32_to_f16(f);
    std::memcpy(p, &h, 2);
  };
  float y[256];
  uint8_t q8[34];
  put_half(q8, 0.5f);
  for (int j = 0; j < 32; ++j) q8[2 + j] = uint8_t(int8_t(j - 16));
  ggml::dequantize_row(ggml_type::Q8_0, q8, 32, y);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], (j - 16) * 0.5f);
  uint8_t q4[18];
  put_half(q4, 2.0f);
  for (int j = 0; j < 16; ++j) q4[2 + j] = uint8_t(j | ((15 - j) << 4));
  ggml::dequantize_row(ggml_type::Q4_0, q4, 32, y);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], (j - 8) * 2.0f);
    EXPECT_EQ(y[j + 16], (7 - j) * 2.0f);
  }
  // Q5_0: the 5th bit of element j is bit j of qh, of element j+16 bit j+16.
  uint8_t q5[22] = {};
  put_half(q5, 1.0f);
  const uint32_t qh = (1u << 3) | (1u << 20);
  std::memcpy(q5 + 2, &qh, 4);
  for (int j = 0; j < 16; ++j) q5[6 + j] = uint8_t(j | (j << 4));
  ggml::dequantize_row(ggml_type::Q5_0, q5, 32, y);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], float(j + (j == 3 ? 16 : 0) - 16));
    EXPECT_EQ(y[j + 16], float(j + (j == 4 ? 16 : 0) - 16));
  }
  // Q4_K: sub-block 0 scale 3, min 1 (6-bit packed), quants all 5: y = d*3*5 - dmin*1.
  uint8_t q4k[144] = {};
  put_half(q4k, 1.0f);
  put_half(q4k + 2, 0.5f);
  q4k[4] = 3, q4k[8] = 1;
  std::memset(q4k + 16, 0x55, 128);
  ggml::dequantize_row(ggml_type::Q4_K, q4k, 256, y);
  for (int l = 0; l < 32; ++l) EXPECT_EQ(y[l], 15.0f - 0.5f);
  EXPECT_EQ(y[32], 0.0f);  // sub-block 1 has scale 0, min 0
  // Q6_K: ql = 0, qh = 0 -> q = -32; scales[0] = 2, d = 0.25: y[0..15] = 0.25 * 2 * -32.
  uint8_t q6k[210] = {};
  q6k[192] = 2;
  put_half(q6k + 208, 0.25f);
  ggml::dequantize_row(ggml_type::Q6_K, q6k, 256, y);
  for (int l = 0; l < 16; ++l) EXPECT_EQ(y[l], -16.0f);
  EXPECT_EQ(y[16], 0.0f);
}

TEST(GgufConvert, WriterReaderRoundTripMetadataAndTensors) {
  mxtest::TempDir d;
  GgufWriter w(64);
  w.add_string("a.s", "hello");
  w.add_u32("a.u", 7);
  w.add_i32("a.i", -3);
  w.add_f32("a.f", 1.5f);
  w.add_bool("a.b", true);
  w.add_string_array("a.sa", {"x", "", "yz"});
  w.add_i32_array("a.ia", {1, -2, 3});
  w.add_f32_array("a.fa", {0.5f, -1.0f});
  EXPECT_THROW(w.add_u32("a.u", 1), Error);
  std::vector<float> v(96);
  for (int i = 0; i < 96; ++i) v[i] = float(i) * 0.5f;
  w.add_tensor("t.f32", ggml_type::F32, {32, 3}, [&](std::vector<uint8_t>& b) {
    b.insert(b.end(), reinterpret_cast<uint8_t*>(v.data()), reinterpret_cast<uint8_t*>(v.data() + 96));
  });
  w.add_tensor("t.one", ggml_type::F32, {5}, [&](std::vector<uint8_t>& b) { b.resize(b.size() + 20, 1); });
  EXPECT_THROW(w.add_tensor("t.bad", ggml_type::Q8_0, {31}, [](std::vector<uint8_t>&) {}), Error);
  w.write(d / "x.gguf");
  GgufFile g(d / "x.gguf");
  EXPECT_EQ(g.alignment(), 64u);
  EXPECT_EQ(g.get_string("a.s"), "hello");
  EXPECT_EQ(g.get_u32("a.u"), 7u);
  EXPECT_EQ(g.get_i64("a.i"), -3);
  EXPECT_EQ(g.get_f64("a.f"), 1.5);
  EXPECT_TRUE(g.get_bool("a.b"));
  EXPECT_EQ(g.get_string_array("a.sa"), (std::vector<std::string_view>{"x", "", "yz"}));
  EXPECT_EQ(g.get_i32_array("a.ia"), (std::vector<int32_t>{1, -2, 3}));
  EXPECT_EQ(g.get_f32_array("a.fa"), (std::vector<float>{0.5f, -1.0f}));
  const GgufTensorInfo& t = g.tensor("t.f32");
  EXPECT_EQ(t.dims, (std::vector<int64_t>{32, 3}));
  EXPECT_EQ(std::memcmp(t.data, v.data(), 96 * 4), 0);
  EXPECT_EQ((t.data - g.tensor("t.one").data) % 64, 0);
  // A producer that returns the wrong number of bytes is an error, and no file is left.
  GgufWriter bad;
  bad.add_tensor("t", ggml_type::F32, {4}, [](std::vector<uint8_t>& b) { b.resize(8); });
  EXPECT_THROW(bad.write(d / "bad.gguf"), Error);
  EXPECT_FALSE(std::filesystem::exists(d / "bad.gguf"));
}

TEST(GgufConvert, CorruptOrUnsupportedFilesAreClearErrors) {
  mxtest::TempDir d;
  const std::string src = make_model(d, "qwen3", DType::BF16);
  const std::string gguf = convert(src, d / "q.gguf", GgufOutType::BF16);
  auto error_of = [](const std::string& p) -> std::string {
    try {
      load_model(p);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  // Truncated: the reader's offset validation names the file.
  const std::string data = mxtest::slurp(gguf);
  mxtest::spit(d / "trunc.gguf", data.substr(0, data.size() / 2));
  EXPECT_NE(error_of(d / "trunc.gguf").find("trunc.gguf"), std::string::npos);
  // Unknown architecture / unmapped tensor / missing tensor.
  // dims: GGUF order (ne[0] first).
  auto one_tensor = [&](const std::string& arch, const std::string& tname, std::vector<int64_t> dims = {64}) {
    GgufWriter w;
    w.add_string("general.architecture", arch);
    for (const char* k : {"block_count", "embedding_length", "feed_forward_length"}) w.add_u32(arch + "." + k, 64);
    w.add_u32(arch + ".attention.head_count", 4);
    w.add_tensor("token_embd.weight", ggml_type::F32, {64, 8}, [](std::vector<uint8_t>& b) { b.resize(b.size() + 64 * 8 * 4); });
    int64_t n = 1;
    for (int64_t x : dims) n *= x;
    w.add_tensor(tname, ggml_type::F32, dims, [n](std::vector<uint8_t>& b) { b.resize(b.size() + n * 4); });
    const std::string p = d / (arch + tname + std::to_string(dims.size()) + ".gguf");
    w.write(p);
    return error_of(p);
  };
  EXPECT_NE(one_tensor("mamba", "output_norm.weight").find("architecture 'mamba' is not supported"), std::string::npos);
  EXPECT_NE(one_tensor("qwen3", "blk.0.ssm_a").find("blk.0.ssm_a has no mxserve equivalent"), std::string::npos);
  EXPECT_NE(one_tensor("qwen3", "output_norm.weight").find("missing tensors"), std::string::npos);
  // Shapes the reader would have divided by zero on, indexed past, or dropped (each crashed or
  // loaded a model without the tensor): a llama Q with fewer rows than heads, or rows that do not
  // split into heads; a 0-D tensor; an expert stack in a dense model.
  EXPECT_NE(one_tensor("llama", "blk.0.attn_q.weight", {64, 1}).find("do not split into 4 heads"), std::string::npos);
  EXPECT_NE(one_tensor("llama", "blk.0.attn_q.weight", {64, 18}).find("do not split into 4 heads"), std::string::npos);
  EXPECT_NE(one_tensor("llama", "blk.0.attn_q.bias", {18}).find("do not split into 4 heads"), std::string::npos);
  // A bias of whole heads is permuted as rows of one value, as convert_hf_to_gguf.py does.
  EXPECT_NE(one_tensor("llama", "blk.0.attn_q.bias", {64}).find("missing tensors"), std::string::npos);
  EXPECT_TRUE(RowOrder::llama_permutable(std::vector<int64_t>{64}, 4));
  EXPECT_FALSE(RowOrder::llama_permutable(std::vector<int64_t>{64, 8, 2}, 4));
  {
    // A 0-D tensor, which our writer refuses to write: written 1-D, its n_dims and dim (12 bytes)
    // replaced by n_dims 0 (4 bytes), and a padding string 8 bytes longer, so every offset holds.
    GgufWriter w;
    w.add_string("general.architecture", "qwen3");
    for (const char* k : {"block_count", "embedding_length", "feed_forward_length"}) w.add_u32(std::string("qwen3.") + k, 64);
    w.add_u32("qwen3.attention.head_count", 4);
    w.add_string("mxtest.pad", "");
    w.add_tensor("token_embd.weight", ggml_type::F32, {64, 8}, [](std::vector<uint8_t>& b) { b.resize(b.size() + 64 * 8 * 4); });
    w.add_tensor("output_norm.weight", ggml_type::F32, {1}, [](std::vector<uint8_t>& b) { b.resize(b.size() + 4); });
    w.write(d / "zero_d.gguf");
    std::string f = mxtest::slurp(d / "zero_d.gguf");
    const size_t t = f.find("output_norm.weight") + 18, pad = f.find("mxtest.pad") + 10 + 4;
    ASSERT_EQ(f.substr(t, 12), std::string("\x01\0\0\0\x01\0\0\0\0\0\0\0", 12));
    f.replace(t, 12, std::string(4, '\0'));
    f[pad] = 8;
    f.insert(pad + 8, "12345678");
    mxtest::spit(d / "zero_d.gguf", f);
    EXPECT_NE(error_of(d / "zero_d.gguf").find("output_norm.weight has no dimensions"), std::string::npos)
        << error_of(d / "zero_d.gguf");
  }
  EXPECT_NE(one_tensor("qwen3", "blk.0.ffn_gate_exps.weight", {4, 4, 2}).find("the model has no routed experts"),
            std::string::npos);
}

// Convert binds the checkpoint first: what the loader refuses is refused, before the export
// reads a tensor (a one-row Q divided by zero, an expert past the model's crashed or was dropped).
TEST(GgufConvert, ConvertRefusesWhatTheLoaderRefuses) {
  mxtest::TempDir d;
  const std::string src = make_model(d, "qwen3", DType::F32);
  auto error_of = [&](auto edit) -> std::string {
    Checkpoint ck = load_checkpoint(src);
    edit(*ck.tensors);
    try {
      write_gguf_checkpoint(ck, d / "x.gguf", GgufOutType::F32);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(error_of([](TensorStore&) {}), "");
  const std::string extra = error_of([](TensorStore& s) {
    s.add_owned("model.layers.0.mlp.experts.5.gate_proj.weight", OwnedTensor::make(DType::F32, {4, 4}), "test");
  });
  EXPECT_NE(extra.find("unused tensors"), std::string::npos) << extra;
  EXPECT_NE(extra.find("model.layers.0.mlp.experts.5.gate_proj.weight"), std::string::npos) << extra;
  OwnedTensor one_row;
  const std::string q = error_of([&one_row](TensorStore& s) {
    const int64_t cols = s.get("model.layers.0.self_attn.q_proj.weight").dim(1);
    one_row = OwnedTensor::make(DType::F32, {1, cols});
    s.replace("model.layers.0.self_attn.q_proj.weight", one_row.t, "test");
  });
  EXPECT_NE(q.find("model.layers.0.self_attn.q_proj.weight: expected"), std::string::npos) << q;
}

TEST(GgufConvert, TokenizerWrittenFromTokenizerJsonEncodesTheSame) {
  mxtest::TempDir d;
  for (const char* arch : {"llama", "qwen3", "glm4_moe"}) {
    const std::string src = make_model(d, arch, DType::BF16);
    const std::string gguf = convert(src, d / (std::string(arch) + ".gguf"), GgufOutType::BF16);
    auto hf = load_tokenizer_hf(src + "/tokenizer.json");
    auto gg = load_tokenizer_gguf(GgufFile(gguf));
    for (const char* text : {"Hello world, this is a test.", "  numbers 12345 and\nnew lines\t tabs", "ünïcödé 日本語"}) {
      EXPECT_EQ(hf->encode(text, false), gg->encode(text, false)) << arch << ": " << text;
      const auto ids = hf->encode(text, false);
      EXPECT_EQ(gg->decode(ids), text) << arch;
    }
  }
}
