#include "core/cpu_features.h"

#include <cpuid.h>

#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace mx {

namespace {
uint64_t xgetbv0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (uint64_t(edx) << 32) | eax;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  bool osxsave = c & (1u << 27);
  bool fma = c & (1u << 12), f16c = c & (1u << 29);
  if (!osxsave) return f;
  uint64_t xcr0 = xgetbv0();
  bool os_avx = (xcr0 & 0x6) == 0x6;
  bool os_avx512 = (xcr0 & 0xe6) == 0xe6;
  bool os_amx = (xcr0 & (3ull << 17)) == (3ull << 17);
  if (!os_avx) return f;
  f.fma = fma;
  f.f16c = f16c;
  __cpuid_count(7, 0, a, b, c, d);
  f.avx2 = (b & (1u << 5)) && fma;
  if (os_avx512) {
    f.avx512f = b & (1u << 16);
    f.avx512bw = b & (1u << 30);
    f.avx512vl = b & (1u << 31);
    f.avx512vnni = c & (1u << 11);
    f.avx512vbmi = c & (1u << 1);
  }
  if (os_amx) {
    f.amx_tile = d & (1u << 24);
    f.amx_bf16 = f.amx_tile && (d & (1u << 22));
    f.amx_int8 = f.amx_tile && (d & (1u << 25));
  }
  __cpuid_count(7, 1, a, b, c, d);
  f.avx_vnni = a & (1u << 4);
  if (os_avx512) f.avx512bf16 = a & (1u << 5);
  return f;
}
}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

std::optional<Isa> isa_from_name(std::string_view name) {
  for (int i = 0; i <= int(Isa::Gfx1030); ++i)
    if (name == isa_name(Isa(i))) return Isa(i);
  return std::nullopt;
}

const char* isa_name(Isa i) {
  switch (i) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
    case Isa::Sm80: return "sm80";
    case Isa::Sm90: return "sm90";
    case Isa::Gfx90a: return "gfx90a";
    case Isa::Gfx940: return "gfx940";
    case Isa::Gfx1030: return "gfx1030";
  }
  return "?";
}

bool isa_supported(Isa isa) {
  const CpuFeatures& f = cpu_features();
  switch (isa) {
    case Isa::Scalar: return true;
    case Isa::Avx2: return f.avx2 && f.fma;
    case Isa::Avx512: return f.avx512f && f.avx512bw && f.avx512vl;
    default: return false;  // GPU architectures: backends/backend.h
  }
}

Isa best_isa() {
  static const Isa isa = [] {
    Isa hw = Isa::Scalar;
    if (isa_supported(Isa::Avx2)) hw = Isa::Avx2;
    if (isa_supported(Isa::Avx512)) hw = Isa::Avx512;
    if (const char* env = std::getenv("MXSERVE_ISA")) {
      const std::optional<Isa> parsed = isa_from_name(env);
      if (!parsed || is_gpu_isa(*parsed)) fail("MXSERVE_ISA={} is not one of scalar, avx2, avx512", env);
      const Isa want = *parsed;
      MX_CHECK(int(want) <= int(hw), "MXSERVE_ISA={} but this CPU supports at most {}", env,
               isa_name(hw));
      return want;
    }
    return hw;
  }();
  return isa;
}

const std::string& cpu_key() {
  static const std::string key = [] {
    if (const char* e = std::getenv("MXSERVE_CPU_KEY")) return std::string(e);
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return std::string("unknown");
    char vendor[13] = {};
    std::memcpy(vendor, &b, 4);
    std::memcpy(vendor + 4, &d, 4);
    std::memcpy(vendor + 8, &c, 4);
    const std::string v = !std::strcmp(vendor, "AuthenticAMD") ? "amd"
                          : !std::strcmp(vendor, "GenuineIntel") ? "intel"
                                                                 : "other";
    __get_cpuid(1, &a, &b, &c, &d);
    const unsigned base_family = (a >> 8) & 0xF, base_model = (a >> 4) & 0xF;
    const unsigned family = base_family == 0xF ? base_family + ((a >> 20) & 0xFF) : base_family;
    const unsigned model =
        base_family == 0x6 || base_family == 0xF ? (((a >> 16) & 0xF) << 4) + base_model : base_model;
    return v + "-f" + std::to_string(family) + "-m" + std::to_string(model);
  }();
  return key;
}

const std::string& cpu_model_name() {
  static const std::string name = [] {
    unsigned r[12] = {};
    unsigned a, b, c, d;
    if (!__get_cpuid(0x80000000, &a, &b, &c, &d) || a < 0x80000004) return std::string("unknown");
    for (unsigned i = 0; i < 3; ++i) __get_cpuid(0x80000002 + i, &r[4 * i], &r[4 * i + 1], &r[4 * i + 2], &r[4 * i + 3]);
    std::string s(reinterpret_cast<const char*>(r), 48);
    s = s.c_str();  // up to the first NUL
    const size_t first = s.find_first_not_of(' '), last = s.find_last_not_of(' ');
    return first == std::string::npos ? std::string("unknown") : s.substr(first, last - first + 1);
  }();
  return name;
}

std::string cpu_features_string() {
  const auto& f = cpu_features();
  std::string s;
  auto add = [&](bool on, const char* n) {
    if (on) s += (s.empty() ? "" : " ") + std::string(n);
  };
  add(f.avx2, "avx2");
  add(f.fma, "fma");
  add(f.f16c, "f16c");
  add(f.avx512f, "avx512f");
  add(f.avx512bw, "avx512bw");
  add(f.avx512vl, "avx512vl");
  add(f.avx512vnni, "avx512vnni");
  add(f.avx512bf16, "avx512bf16");
  add(f.avx512vbmi, "avx512vbmi");
  add(f.avx_vnni, "avxvnni");
  add(f.amx_bf16, "amx-bf16");
  add(f.amx_int8, "amx-int8");
  return s.empty() ? "none" : s;
}

}  // namespace mx
