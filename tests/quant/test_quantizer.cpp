// mxserve quantize: Quark-layout output, exclude semantics, and the loader's
// refusal of any mismatch between quantization_config and the stored tensors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/generate.h"
#include "formats/safetensors.h"
#include "models/model.h"
#include "devtools/synthetic.h"
#include "convert/quality.h"
#include "convert/quantizer.h"
#include "test_util.h"

using namespace mx;
using nlohmann::json;

namespace {

struct Quantized {
  mxtest::TempDir src, dst;
  QuantizeReport report;
  explicit Quantized(const char* arch = "glm4_moe", QuantizeOptions o = {}) {
    SyntheticSpec s;
    s.arch = arch;
    s.dtype = DType::BF16;
    write_synthetic_model(src.path().string(), s);
    report = quantize_checkpoint(src.path().string(), dst.path().string(), o);
  }
  json config() const { return json::parse(mxtest::slurp(dst / "config.json")); }
  void set_config(const json& j) const { mxtest::spit(dst / "config.json", j.dump()); }
};

std::string load_error(const std::string& dir) {
  try {
    load_model(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Quantizer, WritesQuarkLayoutAndKeepsDefaultExclusionsInBf16) {
  Quantized q;
  TensorStore s = load_safetensors(q.dst.path().string());
  // A quantized expert projection: packed nibbles + e8m0 scales.
  const Tensor& w = s.get("model.layers.1.mlp.experts.0.gate_proj.weight");
  EXPECT_EQ(w.dtype, DType::U8);
  EXPECT_EQ(w.dims(), (std::vector<int64_t>{32, 32}));  // [moe_inter, hidden / 2]
  EXPECT_EQ(s.get("model.layers.1.mlp.experts.0.gate_proj.weight_scale").dims(), (std::vector<int64_t>{32, 2}));
  // Router, lm_head and the whole MTP layer (index 3) stay bf16; the router's bias stays f32.
  EXPECT_EQ(s.get("model.layers.1.mlp.gate.weight").dtype, DType::BF16);
  EXPECT_EQ(s.get("model.layers.1.mlp.gate.e_score_correction_bias").dtype, DType::F32);
  EXPECT_EQ(s.get("lm_head.weight").dtype, DType::BF16);
  EXPECT_EQ(s.get("model.layers.3.eh_proj.weight").dtype, DType::BF16);
  EXPECT_EQ(s.get("model.layers.3.mlp.experts.0.up_proj.weight").dtype, DType::BF16);
  EXPECT_FALSE(s.contains("model.layers.3.mlp.experts.0.up_proj.weight_scale"));
  EXPECT_EQ(s.get("model.embed_tokens.weight").dtype, DType::BF16);

  json qc = q.config()["quantization_config"];
  EXPECT_EQ(qc["quant_method"], "quark");
  EXPECT_EQ(qc["global_quant_config"]["weight"]["dtype"], "fp4");
  EXPECT_EQ(qc["global_quant_config"]["weight"]["group_size"], 32);
  EXPECT_EQ(qc["global_quant_config"]["weight"]["scale_format"], "e8m0");
  EXPECT_TRUE(qc.contains("export"));
  EXPECT_GT(q.report.quantized, 0);
  EXPECT_LT(q.report.bytes_out, q.report.bytes_in);

  auto m = load_model(q.dst.path().string());
  int mx = 0;
  for (const auto& b : m->weight_map()) mx += b.dtype == DType::MXFP4;
  EXPECT_EQ(mx, q.report.quantized);
}

TEST(Quantizer, MtpLayerStoredBf16ButConfigSaysQuantizedIsAnErrorNamingIt) {
  // The deployment failure this guards against: quantizer and engine disagree
  // about the MTP layer. Drop the MTP exclusion from the config.
  Quantized q;
  json c = q.config();
  json& ex = c["quantization_config"]["exclude"];
  json kept = json::array();
  for (const auto& e : ex)
    if (e.get<std::string>().find("layers\\.3") == std::string::npos) kept.push_back(e);
  ex = kept;
  q.set_config(c);
  std::string e = load_error(q.dst.path().string());
  EXPECT_NE(e.find("quantization mismatch"), std::string::npos) << e;
  EXPECT_NE(e.find("model.layers.3.eh_proj: the quantization_config (mxfp4 (quark)) says it is quantized, but it is "
                   "stored unquantized (BF16)"),
            std::string::npos)
      << e;
}

TEST(Quantizer, QuantizedTensorThatConfigExcludesIsAnError) {
  Quantized q;
  json c = q.config();
  c["quantization_config"]["exclude"].push_back("model.layers.1.mlp.experts.5.down_proj");
  q.set_config(c);
  std::string e = load_error(q.dst.path().string());
  EXPECT_NE(e.find("model.layers.1.mlp.experts.5.down_proj: stored quantized, but the quantization_config excludes it"),
            std::string::npos)
      << e;
}

TEST(Quantizer, QuantizedTensorsWithoutQuantizationConfigAreAnError) {
  Quantized q;
  json c = q.config();
  c.erase("quantization_config");
  q.set_config(c);
  std::string e = load_error(q.dst.path().string());
  EXPECT_NE(e.find("stored quantized, but config.json has no quantization_config"), std::string::npos) << e;
}

TEST(Quantizer, ExcludePatternsExactGlobAndRegex) {
  QuantizeOptions o;
  o.exclude = {"model.layers.0.mlp.down_proj", "model.layers.*.self_attn.q_proj", R"(re:.*experts\.7\.)"};
  Quantized q("glm4_moe", o);
  TensorStore s = load_safetensors(q.dst.path().string());
  EXPECT_EQ(s.get("model.layers.0.mlp.down_proj.weight").dtype, DType::BF16);
  EXPECT_EQ(s.get("model.layers.2.self_attn.q_proj.weight").dtype, DType::BF16);
  EXPECT_EQ(s.get("model.layers.2.self_attn.k_proj.weight").dtype, DType::U8);
  EXPECT_EQ(s.get("model.layers.2.mlp.experts.7.up_proj.weight").dtype, DType::BF16);
  EXPECT_EQ(s.get("model.layers.2.mlp.experts.6.up_proj.weight").dtype, DType::U8);
  EXPECT_TRUE(q.report.warnings.empty());
  EXPECT_NO_THROW(load_model(q.dst.path().string()));
}

// Found by fuzz/quant_exclude: a glob's invalid bracket range escaped as a bare std::regex_error.
TEST(Quantizer, InvalidGlobOrRegexIsAnErrorNamingThePattern) {
  for (const std::string p : {"model.layers.[9-0].*", "re:model.(layers", "re:.\\33333333333333333333",
                              "re:a{99999999999999999999}"}) {
    try {
      (void)exclude_entry(p);
      ADD_FAILURE() << p;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
    EXPECT_THROW((void)exclude_matches("re:[9-0]", "x"), Error);
  }
}

TEST(Quantizer, PatternMatchingNothingWarnsOrFailsUnderStrict) {
  QuantizeOptions o;
  o.exclude = {"model.layers.9.nothing"};
  Quantized q("qwen3_moe", o);
  ASSERT_EQ(q.report.warnings.size(), 1u);
  EXPECT_NE(q.report.warnings[0].find("model.layers.9.nothing"), std::string::npos);
  o.strict = true;
  EXPECT_THROW(Quantized("qwen3_moe", o), Error);
}

TEST(Quantizer, Fp8BlockFormat) {
  QuantizeOptions o;
  o.method = QuantMethod::Fp8Block;
  Quantized q("deepseek_v3", o);
  TensorStore s = load_safetensors(q.dst.path().string());
  EXPECT_EQ(s.get("model.layers.1.mlp.experts.0.gate_proj.weight").dtype, DType::F8_E4M3);
  EXPECT_EQ(s.get("model.layers.1.mlp.experts.0.gate_proj.weight_scale_inv").dims(), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(q.config()["quantization_config"]["quant_method"], "fp8");
  EXPECT_NO_THROW(load_model(q.dst.path().string()));
}

TEST(Quantizer, RejectsAlreadyQuantizedInputAndNonMultipleOf32) {
  Quantized q;
  EXPECT_THROW(quantize_checkpoint(q.dst.path().string(), (q.src / "again"), {}), Error);
  // stories260K's down_proj has in_features 172: not MXFP4-able unless excluded.
  const std::string stories = (mxtest::stories260k() / "stories260K.bin").string();
  mxtest::TempDir d;
  try {
    quantize_checkpoint(stories, d.path().string(), {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("down_proj: in_features 172 is not a multiple of 32"), std::string::npos)
        << e.what();
  }
  QuantizeOptions o;
  o.exclude = {"re:.*down_proj"};
  EXPECT_NO_THROW(quantize_checkpoint(stories, d.path().string(), o));
  EXPECT_NO_THROW(load_model(d.path().string()));
}

namespace {
struct ArchFormat {
  const char* arch;
  QuantMethod method;
};
void PrintTo(const ArchFormat& a, std::ostream* os) {
  *os << a.arch << (a.method == QuantMethod::Mxfp4 ? "/mxfp4" : "/fp8");
}
class QuantizeEveryArch : public ::testing::TestWithParam<ArchFormat> {};
}  // namespace

TEST_P(QuantizeEveryArch, QuantizeLoadGenerate) {
  QuantizeOptions o;
  o.method = GetParam().method;
  Quantized q(GetParam().arch, o);
  EXPECT_GT(q.report.quantized, 0);
  auto m = load_model(q.dst.path().string());
  GenerateOptions g;
  g.max_tokens = 8;
  g.sampling.temperature = 0;
  g.ignore_eos = true;
  auto r = generate(*m, {1, 5, 9, 13}, g);
  ASSERT_EQ(r.tokens.size(), 8u);
  for (int32_t t : r.tokens) EXPECT_TRUE(t >= 0 && t < m->config().vocab_size);
  // The MTP head runs on quantized weights too (it stays bf16 by default).
  if (m->num_mtp_layers() > 0) {
    auto ref = load_model(q.src.path().string());
    EXPECT_EQ(m->num_mtp_layers(), ref->num_mtp_layers());
  }
}

INSTANTIATE_TEST_SUITE_P(
    All, QuantizeEveryArch,
    ::testing::Values(ArchFormat{"llama", QuantMethod::Mxfp4}, ArchFormat{"qwen2", QuantMethod::Mxfp4},
                      ArchFormat{"qwen3", QuantMethod::Mxfp4}, ArchFormat{"glm4_moe", QuantMethod::Mxfp4},
                      ArchFormat{"deepseek_v3", QuantMethod::Mxfp4}, ArchFormat{"qwen3_moe", QuantMethod::Mxfp4},
                      ArchFormat{"llama", QuantMethod::Fp8Block}, ArchFormat{"glm4_moe", QuantMethod::Fp8Block},
                      ArchFormat{"deepseek_v3", QuantMethod::Fp8Block}, ArchFormat{"qwen3_moe", QuantMethod::Fp8Block}),
    [](const auto& i) {
      return std::string(i.param.arch) + (i.param.method == QuantMethod::Mxfp4 ? "_mxfp4" : "_fp8");
    });

// eval / quantize --measure read the quantized weight as one of the reference's shape: a model that
// is not a quantized copy of the reference is an error naming the layer (a larger reference read
// past the model's weights: a segfault).
TEST(Quantizer, WeightErrorsOfAnotherModelAreAnErrorNamingTheLayer) {
  Quantized q("qwen3");
  auto ref = load_model(q.src.path().string()), quant = load_model(q.dst.path().string());
  EXPECT_FALSE(weight_errors(*ref, *quant).empty());
  mxtest::TempDir other;
  SyntheticSpec s;
  s.arch = "qwen3";
  s.preset = "small";
  s.dtype = DType::BF16;
  write_synthetic_model(other.path().string(), s);
  auto big = load_model(other.path().string());
  try {
    weight_errors(*big, *quant);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a quantized copy of the reference"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("model.layers.0."), std::string::npos) << e.what();
  }
}
