#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/model_config.h"

using namespace mx;
using nlohmann::json;

namespace {
json llama() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "vocab_size": 128256, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0, "tie_word_embeddings": false, "eos_token_id": [128001, 128008, 128009],
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"}})");
}
void expect_error(const json& j, const char* fragment) {
  try {
    parse_hf_config(j);
    ADD_FAILURE() << "no error, expected: " << fragment;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}
}  // namespace

TEST(Config, ParsesLlama31) {
  ModelConfig c = parse_hf_config(llama());
  EXPECT_EQ(c.arch, Arch::Llama);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.kv_dim(), 1024);
  EXPECT_EQ(c.eos_token_ids.size(), 3u);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_FALSE(c.qk_norm);
  EXPECT_FALSE(c.attention_bias);
}

TEST(Config, Llama3RopeScalingMatchesTransformersFormula) {
  ModelConfig c = parse_hf_config(llama());
  auto inv = rope_inv_freq(c, 128);
  ASSERT_EQ(inv.size(), 64u);
  EXPECT_FLOAT_EQ(inv[0], 1.0f);  // high frequency: wavelength 2pi < 8192/4, unchanged
  // Lowest frequency: wavelength > 8192, divided by the factor.
  double raw = 1.0 / std::pow(500000.0, 126.0 / 128.0);
  EXPECT_NEAR(inv[63], raw / 8.0, raw * 1e-6);
  // A medium frequency is smoothed between the two.
  for (int i = 0; i < 64; ++i) {
    double r = 1.0 / std::pow(500000.0, 2.0 * i / 128.0);
    EXPECT_LE(inv[i], r * (1 + 1e-6));
    EXPECT_GE(inv[i], r / 8.0 * (1 - 1e-6));
  }
}

TEST(Config, QwenFamilies) {
  json q2 = llama();
  q2["architectures"] = {"Qwen2ForCausalLM"};
  q2.erase("rope_scaling");
  q2["use_sliding_window"] = false;
  ModelConfig c2 = parse_hf_config(q2);
  EXPECT_TRUE(c2.attention_bias);
  EXPECT_FALSE(c2.qk_norm);
  json q3 = q2;
  q3["architectures"] = {"Qwen3ForCausalLM"};
  q3["head_dim"] = 256;
  ModelConfig c3 = parse_hf_config(q3);
  EXPECT_TRUE(c3.qk_norm);
  EXPECT_FALSE(c3.attention_bias);
  EXPECT_EQ(c3.head_dim, 256);
}

TEST(Config, RejectsWhatItCannotRunWithoutGuessing) {
  json j = llama();
  j["architectures"] = {"MambaForCausalLM"};
  expect_error(j, "MambaForCausalLM");
  j = llama();
  j.erase("hidden_size");
  expect_error(j, "'hidden_size' is missing");
  j = llama();
  j["num_key_value_heads"] = 5;
  expect_error(j, "multiple");
  j = llama();
  j["rope_scaling"]["rope_type"] = "longrope";
  expect_error(j, "longrope");
  j = llama();
  j["hidden_size"] = "big";
  expect_error(j, "'hidden_size' must be an integer");
  j = llama();
  j["hidden_act"] = "gelu";
  expect_error(j, "gelu");
  j = llama();
  j["architectures"] = {"Qwen2ForCausalLM"};
  j["use_sliding_window"] = true;
  expect_error(j, "sliding");
  j = llama();
  j["rms_norm_eps"] = -1;
  expect_error(j, "rms_norm_eps");
  j = llama();
  j["vocab_size"] = -3;
  expect_error(j, "out of range");
  // Token ids read whole and inside the vocabulary: 2^40 was cut down to token 0 (an EOS at every 0).
  j = llama();
  j["eos_token_id"] = int64_t(1) << 40;
  expect_error(j, "eos_token_id 1099511627776 is not a token id");
  j = llama();
  j["eos_token_id"] = {128001, -7};
  expect_error(j, "eos_token_id -7 is not a token id");
  j = llama();
  j["eos_token_id"] = 128256;
  expect_error(j, "eos_token_id 128256 is not a token of the 128256-token vocabulary");
  j = llama();
  j["bos_token_id"] = 200000;
  expect_error(j, "bos_token_id 200000 is not a token");
}

// Absurd sizes are refused before anything is sized from them (issue 21,
// finding 7: 1e7 layers grew to 11 GB; a 2^30 context ended in std::bad_alloc).
TEST(Config, AbsurdSizesAreAClearErrorNamingTheField) {
  for (const auto& [key, value] : std::vector<std::pair<std::string, int64_t>>{
           {"num_hidden_layers", 10000000},
           {"num_hidden_layers", int64_t(1) << 30},
           {"max_position_embeddings", int64_t(1) << 30},
           {"hidden_size", int64_t(1) << 20},
           {"vocab_size", int64_t(1) << 30},
           {"intermediate_size", int64_t(1) << 28}}) {
    json j = llama();
    j[key] = value;
    expect_error(j, (key + " = ").c_str());
  }
  json j = llama();
  j["architectures"] = {"Qwen3MoeForCausalLM"};
  j["num_experts"] = 100000;
  j["num_experts_per_tok"] = 8;
  j["moe_intermediate_size"] = 768;
  expect_error(j, "routed experts");
  // The largest released shapes still load.
  j = llama();
  j["num_hidden_layers"] = 126;
  j["hidden_size"] = 16384;
  j["num_attention_heads"] = 128;
  j["max_position_embeddings"] = 10485760;
  EXPECT_NO_THROW(parse_hf_config(j));
}
