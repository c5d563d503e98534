#pragma once
// Instruction sets available at run time. Kernels are compiled for several ISAs
// and one is chosen per process; MXSERVE_ISA=scalar|avx2|avx512 forces a lower one
// (tests use it to compare paths).
#include <optional>
#include <string>
#include <string_view>

namespace mx {

// CPU ISAs, then the GPU architectures the GPU backend is compiled for (the
// tuned-kernel registry keys GPU kernels by them too; backends/backend.h).
enum class Isa { Scalar = 0, Avx2 = 1, Avx512 = 2, Sm80 = 3, Sm90 = 4, Gfx90a = 5, Gfx940 = 6, Gfx1030 = 7 };
inline bool is_gpu_isa(Isa i) { return int(i) >= int(Isa::Sm80); }

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512vnni = false, avx512bf16 = false;
  bool avx512vbmi = false;  // vpermb / vpermt2b: Ice Lake, Sapphire Rapids, Zen 4 and later (not Cooper Lake)
  bool avx_vnni = false;
  // AMX: the CPU has it and XCR0 enables the tile state; a process must still ask Linux
  // for it (arch_prctl ARCH_REQ_XCOMP_PERM) before its first tile instruction.
  bool amx_tile = false, amx_bf16 = false, amx_int8 = false;
};

const CpuFeatures& cpu_features();
Isa best_isa();            // highest usable ISA, honouring MXSERVE_ISA
// Whether this CPU runs the kernels of a CPU ISA (AVX2 means AVX2 + FMA; AVX-512
// means F + BW + VL); false for the GPU architectures.
bool isa_supported(Isa isa);
const char* isa_name(Isa);
// "scalar", "avx2", "avx512", "sm80", "sm90", "gfx90a", "gfx940", "gfx1030"
std::optional<Isa> isa_from_name(std::string_view name);
std::string cpu_features_string();

// The machine, for keying tuned kernel configs (backends/registry.h): vendor,
// family and model from CPUID leaf 1 (display family and model, extended fields
// included, as the Intel SDM and AMD's CPUID specification define them), e.g.
// "amd-f26-m2" (Zen 5) or "intel-f6-m143" (Sapphire Rapids). MXSERVE_CPU_KEY
// overrides it (tests; a machine that should use another one's table).
const std::string& cpu_key();
// The CPUID brand string, e.g. "AMD EPYC 9R45" (what lscpu calls Model name).
const std::string& cpu_model_name();

}  // namespace mx
