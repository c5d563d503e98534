#include "quant/quant_config.h"

#include <nlohmann/json.hpp>
#include <cctype>
#include <regex>

#include "core/error.h"
#include "core/json_fields.h"

using json = nlohmann::json;

namespace mx {

namespace {

std::string glob_to_regex(const std::string& g) {
  std::string r;
  for (char ch : g) {
    switch (ch) {
      case '*': r += ".*"; break;
      case '?': r += "."; break;
      case '[': r += "["; break;
      case ']': r += "]"; break;
      case '.': case '(': case ')': case '+': case '^': case '$': case '|': case '{': case '}':
      case '\\': r += '\\'; r += ch; break;
      default: r += ch;
    }
  }
  return r + "$";
}

void check_weight_spec(const json& w, const char* where) {
  auto field = [&](const char* k) -> std::string {
    if (!w.contains(k) || w[k].is_null()) return "";
    return w[k].is_string() ? w[k].get<std::string>() : w[k].dump();
  };
  if (field("dtype") != "fp4")
    fail("quantization_config.{}.weight.dtype '{}' is not supported (fp4)", where, field("dtype"));
  if (field("qscheme") != "per_group" || field("group_size") != "32" || field("scale_format") != "e8m0")
    fail("quantization_config.{}.weight must be per_group, group_size 32, scale_format e8m0 (OCP MX), got "
         "qscheme '{}', group_size {}, scale_format '{}'",
         where, field("qscheme"), field("group_size"), field("scale_format"));
}

}  // namespace

namespace {

// An entry's regex; std::regex_error becomes an mx::Error naming the pattern.
// Patterns come from config.json files of any origin: libstdc++'s default
// backtracking matcher takes exponential time on nested quantifiers (found by
// fuzz/quant_exclude), its polynomial (breadth-first) one does not and gives the
// same yes/no answer; it refuses backreferences, which layer names never need.
std::regex compile_entry(const std::string& regex, const std::string& pattern) {
  constexpr size_t kMaxPattern = 1024;
  if (pattern.size() > kMaxPattern)
    fail("exclude pattern '{}...' is {} bytes, over the limit of {}", pattern.substr(0, 64), pattern.size(), kMaxPattern);
  // libstdc++ reads backreference numbers and {m,n} counts into a long without
  // an overflow check (undefined behaviour on 20 digits; found by fuzz/quant_exclude).
  for (size_t i = 0; i < regex.size(); ++i) {
    if (regex[i] == '\\' && i + 1 < regex.size()) {
      if (regex[i + 1] >= '1' && regex[i + 1] <= '9')
        fail("exclude pattern '{}': backreferences are not supported", pattern);
      ++i;
    } else if (regex[i] == '{' || (regex[i] == ',' && i > 0 && std::isdigit((unsigned char)regex[i - 1]))) {
      size_t d = 0;
      while (i + 1 + d < regex.size() && std::isdigit((unsigned char)regex[i + 1 + d])) ++d;
      if (d > 4) fail("exclude pattern '{}': a repetition count over 9999", pattern);
    }
  }
  try {
#ifdef __GLIBCXX__
    return std::regex(regex, std::regex::ECMAScript | std::regex_constants::__polynomial);
#else
    return std::regex(regex);
#endif
  } catch (const std::regex_error& e) {
    fail("exclude pattern '{}' is not a valid {}: {}", pattern, pattern.rfind("re:", 0) == 0 ? "regex" : "glob",
         e.what());
  }
}

}  // namespace

bool exclude_matches(const std::string& entry, const std::string& name) {
  if (entry.rfind("re:", 0) == 0) {
    const std::regex re = compile_entry(entry.substr(3), entry);
    std::smatch m;
    return std::regex_search(name, m, re, std::regex_constants::match_continuous);
  }
  return entry == name;
}

bool QuantConfig::quantized(const std::string& layer) const {
  if (method == QuantMethod::None) return false;
  for (const auto& e : exclude)
    if (exclude_matches(e, layer)) return false;
  return true;
}

const char* QuantConfig::method_name() const {
  switch (method) {
    case QuantMethod::None: return "none";
    case QuantMethod::Mxfp4: return "mxfp4 (quark)";
    case QuantMethod::Fp8Block: return "fp8 (128x128 blocks)";
  }
  return "?";
}

std::string exclude_entry(const std::string& p) {
  if (p.rfind("re:", 0) == 0) {
    compile_entry(p.substr(3), p);
    return p;
  }
  if (p.find_first_of("*?[") != std::string::npos) {
    // A glob's brackets pass through: "[9-0]" is as invalid here as in the regex.
    const std::string re = glob_to_regex(p);
    compile_entry(re, p);
    return "re:" + re;
  }
  return p;
}

QuantConfig parse_quant_config(const json& config) {
  QuantConfig q;
  if (!config.contains("quantization_config") || config["quantization_config"].is_null()) return q;
  const json& qc = config["quantization_config"];
  MX_CHECK(qc.is_object(), "quantization_config must be an object");
  const JsonFields fields(qc, "config.json: quantization_config");
  const std::string method = fields.opt_str("quant_method", "");
  auto read_list = [&](const char* key) {
    if (!qc.contains(key) || qc[key].is_null()) return;
    MX_CHECK(qc[key].is_array(), "quantization_config.{} must be a list of names", key);
    for (const auto& e : qc[key]) {
      MX_CHECK(e.is_string(), "quantization_config.{} entries must be strings", key);
      q.exclude.push_back(exclude_entry(e.get<std::string>()));
    }
  };
  if (method == "quark") {
    q.method = QuantMethod::Mxfp4;
    MX_CHECK(qc.contains("export"), "quantization_config (quark) lacks 'export' (vLLM requires it)");
    MX_CHECK(qc.contains("global_quant_config") && qc["global_quant_config"].is_object() &&
                 qc["global_quant_config"].contains("weight"),
             "quantization_config.global_quant_config.weight is missing");
    check_weight_spec(qc["global_quant_config"]["weight"], "global_quant_config");
    if (qc.contains("layer_quant_config") && qc["layer_quant_config"].is_object() &&
        !qc["layer_quant_config"].empty())
      fail("quantization_config.layer_quant_config (per-layer schemes) is not supported yet");
    read_list("exclude");
  } else if (method == "fp8") {
    q.method = QuantMethod::Fp8Block;
    MX_CHECK(fields.opt_str("fmt", "e4m3") == "e4m3", "quantization_config.fmt must be e4m3");
    MX_CHECK(qc.contains("weight_block_size") && qc["weight_block_size"] == json::array({128, 128}),
             "quantization_config.weight_block_size must be [128, 128]");
    read_list("modules_to_not_convert");
    read_list("ignored_layers");
  } else {
    fail("quantization_config.quant_method '{}' is not supported (quark, fp8)", method);
  }
  return q;
}

json quant_config_json(const QuantConfig& q) {
  if (q.method == QuantMethod::Fp8Block)
    return {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"},
            {"weight_block_size", {128, 128}}, {"modules_to_not_convert", q.exclude}};
  MX_CHECK(q.method == QuantMethod::Mxfp4, "no quantization to describe");
  auto spec = [](bool dynamic) {
    return json{{"dtype", "fp4"}, {"is_dynamic", dynamic}, {"qscheme", "per_group"}, {"ch_axis", -1},
                {"group_size", 32}, {"block_size", nullptr}, {"symmetric", nullptr},
                {"round_method", "half_even"}, {"scale_type", "float"}, {"scale_format", "e8m0"},
                {"scale_calculation_mode", "even"}, {"mx_element_dtype", nullptr},
                {"observer_cls", "PerBlockMXObserver"}, {"is_scale_quant", false}};
  };
  return {{"quant_method", "quark"},
          {"quant_mode", "eager_mode"},
          {"version", "mxserve"},
          {"global_quant_config",
           {{"weight", spec(false)}, {"input_tensors", spec(true)}, {"output_tensors", nullptr},
            {"bias", nullptr}, {"target_device", nullptr}}},
          {"layer_quant_config", json::object()},
          {"layer_type_quant_config", json::object()},
          {"exclude", q.exclude},
          {"kv_cache_quant_config", json::object()},
          {"kv_cache_post_rope", false},
          {"algo_config", nullptr},
          {"softmax_quant_spec", nullptr},
          {"export",
           {{"kv_cache_group", json::array()}, {"min_kv_scale", 0.0}, {"pack_method", "reorder"},
            {"weight_format", "real_quantized"}, {"weight_merge_groups", nullptr}}}};
}

std::vector<std::string> default_excludes(int num_hidden_layers, int num_mtp_layers) {
  std::vector<std::string> v = {"lm_head", R"(re:.*\.mlp\.gate$)"};
  for (int i = 0; i < num_mtp_layers; ++i)
    v.push_back(fmt::format(R"(re:model\.layers\.{}\.)", num_hidden_layers + i));
  return v;
}

}  // namespace mx
