// The tuned-config table's JSON form and the table in effect (backends/registry.h).
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "core/error.h"
#include "backends/registry.h"

namespace mx {

extern const char kTunedConfigsJson[];  // generated from backends/cpu/tuned_configs.json (CMakeLists.txt)

namespace {

auto sort_key(const TunedEntry& e) { return std::make_tuple(e.op, int(e.isa), int(e.dtype), e.out, e.in, e.cpu); }

std::mutex g_mu;
std::vector<std::string> g_files;
bool g_built = false;

}  // namespace

std::optional<DType> kernel_dtype_from_name(std::string_view s) {
  if (s == dtype_name(DType::MXFP4)) return DType::MXFP4;
  return dtype_from_name(s);
}

std::vector<TunedEntry> load_kernel_configs(const std::string& path, std::string* about) {
  std::ifstream f(path, std::ios::binary);
  MX_CHECK(f.good(), "kernel configs: cannot read {}", path);
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_kernel_configs(ss.str(), path, about);
}

std::vector<TunedEntry> parse_kernel_configs(std::string_view text, const std::string& origin, std::string* about) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON: {}", origin, e.what());
  }
  MX_CHECK(j.is_object() && j.contains("format") && j["format"] == "mxserve-kernel-configs",
           "{}: not an mxserve kernel config file (\"format\": \"mxserve-kernel-configs\" missing)", origin);
  MX_CHECK(j.contains("version") && j["version"] == 1, "{}: unsupported version {}", origin,
           j.contains("version") ? j["version"].dump() : "(none)");
  MX_CHECK(j.contains("entries") && j["entries"].is_array(), "{}: \"entries\" must be an array", origin);
  if (about && j.contains("about") && j["about"].is_string()) *about = j["about"].get<std::string>();
  std::vector<TunedEntry> out;
  for (size_t i = 0; i < j["entries"].size(); ++i) {
    const auto& e = j["entries"][i];
    const std::string where = fmt::format("{}: entry {}", origin, i);
    try {
      TunedEntry t;
      t.op = e.at("op").get<std::string>();
      const std::string dt = e.at("dtype").get<std::string>(), isa = e.at("isa").get<std::string>();
      const auto dtype = kernel_dtype_from_name(dt);
      MX_CHECK(dtype, "{}: unknown dtype '{}'", where, dt);
      t.dtype = *dtype;
      t.out = e.at("out").get<int64_t>();
      t.in = e.at("in").get<int64_t>();
      const auto parsed_isa = isa_from_name(isa);
      MX_CHECK(parsed_isa, "{}: unknown isa '{}' (scalar, avx2, avx512, sm80, sm90, gfx90a, gfx940, gfx1030)", where, isa);
      t.isa = *parsed_isa;
      KernelConfig& c = t.cfg;
      // An integer field as written: 3.9, true or 4294967304 (wrapped to 8) were taken as others.
      auto integer = [&](const char* k) {
        const auto& v = e.at(k);
        const int64_t x = v.is_number_integer() ? v.get<int64_t>() : int64_t(INT32_MAX) + 1;
        MX_CHECK(x >= INT32_MIN && x <= INT32_MAX, "{}: '{}' must be an integer, got {}", where, k, v.dump());
        return int(x);
      };
      if (t.op != "attention") {  // attention's entry only says where its bf16 products run ("fma")
        c.gemv_rows = integer("gemv_rows");
        c.tile_tokens = integer("tile_tokens");
        c.tile_rows = integer("tile_rows");
        c.prefetch = integer("prefetch");
        c.chunk_kib = integer("chunk_kib");
        c.rowblock_kib = integer("rowblock_kib");
      }
      if (e.contains("fma")) c.fma = e.at("fma").get<bool>();
      if (e.contains("note")) t.note = e.at("note").get<std::string>();
      if (e.contains("cpu")) t.cpu = e.at("cpu").get<std::string>();
      MX_CHECK(!t.op.empty() && t.out >= 0 && t.in >= 0 && (t.out == 0) == (t.in == 0), "{}: bad op or shape",
               where);
      MX_CHECK(t.op != "attention" || t.out == 0, "{}: an attention entry has no shape (out = in = 0)", where);
      MX_CHECK(c.gemv_rows >= 1 && c.gemv_rows <= 64 && c.tile_tokens >= 1 && c.tile_tokens <= 16 &&
                   c.tile_rows >= 1 && c.tile_rows <= 16 && c.prefetch >= 0 && c.prefetch <= (1 << 20) &&
                   c.chunk_kib >= 1 && c.chunk_kib <= (1 << 20) && c.rowblock_kib >= 0 &&
                   c.rowblock_kib <= (1 << 20),
               "{}: config values out of range", where);
      out.push_back(std::move(t));
    } catch (const nlohmann::json::exception& ex) {
      fail("{}: {}", where, ex.what());
    }
  }
  return out;
}

std::string write_kernel_configs(const std::vector<TunedEntry>& entries, const std::string& about) {
  std::string o = "{\n  \"format\": \"mxserve-kernel-configs\",\n  \"version\": 1,\n";
  o += fmt::format("  \"about\": {},\n  \"entries\": [\n", nlohmann::json(about).dump());
  for (size_t i = 0; i < entries.size(); ++i) {
    const TunedEntry& e = entries[i];
    const KernelConfig& c = e.cfg;
    o += fmt::format("    {{\"op\": {}, \"dtype\": \"{}\", \"out\": {}, \"in\": {}, \"isa\": \"{}\"",
                     nlohmann::json(e.op).dump(), dtype_name(e.dtype), e.out, e.in, isa_name(e.isa));
    if (e.op != "attention")
      o += fmt::format(
          ", \"gemv_rows\": {}, \"tile_tokens\": {}, \"tile_rows\": {}, \"prefetch\": {}, \"chunk_kib\": {}, "
          "\"rowblock_kib\": {}",
                       c.gemv_rows, c.tile_tokens, c.tile_rows, c.prefetch, c.chunk_kib, c.rowblock_kib);
    if (c.fma) o += ", \"fma\": true";
    if (!e.cpu.empty()) o += fmt::format(", \"cpu\": {}", nlohmann::json(e.cpu).dump());
    if (!e.note.empty()) o += fmt::format(", \"note\": {}", nlohmann::json(e.note).dump());
    o += i + 1 < entries.size() ? "},\n" : "}\n";
  }
  return o + "  ]\n}\n";
}

std::vector<TunedEntry> merge_kernel_configs(std::vector<TunedEntry> base, const std::vector<TunedEntry>& over) {
  for (const TunedEntry& e : over) {
    auto it = std::find_if(base.begin(), base.end(), [&](const TunedEntry& b) { return sort_key(b) == sort_key(e); });
    if (it != base.end())
      *it = e;
    else
      base.push_back(e);
  }
  std::sort(base.begin(), base.end(), [](const TunedEntry& a, const TunedEntry& b) { return sort_key(a) < sort_key(b); });
  return base;
}

void set_kernel_config_files(std::vector<std::string> paths) {
  std::lock_guard<std::mutex> lk(g_mu);
  MX_CHECK(!g_built, "kernel configs: files must be set before the first kernel runs");
  g_files = std::move(paths);
}

std::span<const TunedEntry> tuned_table() {
  static const std::vector<TunedEntry> table = [] {
    std::vector<TunedEntry> t = parse_kernel_configs(kTunedConfigsJson, "backends/cpu/tuned_configs.json (built in)");
    std::vector<std::string> files;
    {
      std::lock_guard<std::mutex> lk(g_mu);
      g_built = true;
      files = g_files;
    }
    if (const char* env = std::getenv("MXSERVE_KERNEL_CONFIGS")) {
      std::stringstream ss(env);
      for (std::string p; std::getline(ss, p, ':');)
        if (!p.empty()) files.push_back(p);
    }
    for (const std::string& f : files) t = merge_kernel_configs(std::move(t), load_kernel_configs(f));
    return t;
  }();
  return table;
}

}  // namespace mx
