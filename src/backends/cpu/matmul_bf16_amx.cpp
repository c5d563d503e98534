// BF16 weights (and F8_E4M3 ones dequantized to bf16) times bf16 activations on AMX
// tiles (TDPBF16PS: 16 x 16 outputs of 32 products each per instruction). The
// accumulation scheme, and why it keeps batch invariance: matmul_impl.h ("BF16 and
// F8_E4M3 weights on AMX tiles"). Intel SDM, TDPBF16PS,
// TILELOADD, LDTILECFG; Linux Documentation/arch/x86/xstate.rst (the tile state is
// granted per process on request).
//
// The weights are the A operand, read straight from the row-major [out, in] tensor:
// a tile is 16 rows x 32 columns, one 64-byte line of each row (no repacking, so a
// mapped checkpoint is used as it is, for decode as for prefill). The activations
// are the B operand, packed once per call (pack_group): per 16 tokens and 32 columns
// a 16 x 16 block of bf16 pairs, transposed so that tile row p holds every token's
// pair p. A block of 32 rows times 32 tokens keeps four C tiles; each chunk of 32
// columns loads two A and two B tiles and issues four TDPBF16PS. The C tiles hold
// outputs x tokens, transposed into y on the way out.
//
// Written once over the tile operations (amx_tiles.h): HwTiles on the hardware,
// EmuTiles in software, which the tests run on every AVX512-BF16 CPU and which the
// hardware must match, bit for bit, before the kernels are offered (availability()).
#include <cpuid.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "backends/cpu/amx_tiles.h"
#include "backends/cpu/avx512_common.h"
#include "backends/cpu/matmul_impl.h"

namespace mx::matmul_detail {
namespace {

using amx::kTileRows;
using avx512::first_n;

constexpr int64_t kChunk = kAmxChunk;  // columns per tile step (16 bf16 pairs)
constexpr int64_t kGroup = kAmxGroup;  // tokens per B tile
constexpr int64_t kChunkDwords = kAmxBlockDwords;
constexpr int kBlockRows = 32;  // rows per block: two A tiles
// Packed activations kept in L2 while every row block of a thread's range passes: about
// this many bytes, and at least two token groups (so more bytes on rows past 8192 columns).
// A guess, unmeasured on AMX hardware.
constexpr int64_t kTokenChunkBytes = 512 << 10;

// 16 x 16 dwords transposed in registers: lane j of r[i] goes to lane i of r[j].
MX_INLINE void transpose16(__m512i (&r)[16]) {
  __m512i t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  // u[4i + j], 128-bit lane L: rows 4i .. 4i+3 of column 4L + j
  __m512i u[16];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const __m512i v0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x44), v1 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x44);
    const __m512i v2 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xEE), v3 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xEE);
    r[j] = _mm512_shuffle_i32x4(v0, v1, 0x88);
    r[4 + j] = _mm512_shuffle_i32x4(v0, v1, 0xDD);
    r[8 + j] = _mm512_shuffle_i32x4(v2, v3, 0x88);
    r[12 + j] = _mm512_shuffle_i32x4(v2, v3, 0xDD);
  }
}

// AmxPackFn: each token's 32 columns rounded to bf16 as every bf16-activation kernel
// rounds them (vcvtne2ps2bf16, matmul_bf16dot_avx512.cpp), then transposed.
void pack_group(const float* x, int64_t n, int64_t in, int64_t kc, uint32_t* dst) {
  for (int64_t c = 0; c < kc; ++c) {
    const int64_t i = c * kChunk;
    const __mmask16 lo = first_n(in - i), hi = first_n(in - i - 16);
    __m512i r[16];
#pragma GCC unroll 16
    for (int t = 0; t < kGroup; ++t) {
      if (t >= n) {
        r[t] = _mm512_setzero_si512();
        continue;
      }
      const float* xt = x + t * in + i;
      r[t] = __m512i(_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, xt + 16), _mm512_maskz_loadu_ps(lo, xt)));
    }
    transpose16(r);
#pragma GCC unroll 16
    for (int p = 0; p < 16; ++p) _mm512_storeu_si512(dst + c * kChunkDwords + p * 16, r[p]);
  }
}

// Grow-only per-thread copies of weight rows a block cannot load in place.
thread_local PrepBuffer t_padded;  // a partial block: [32][kc * 32] bf16, +0 past the rows and the columns
thread_local PrepBuffer t_tail;   // the last, partial chunk of a full block: [32][32] bf16

// A block's weights as the tiles read them: rows r0 .. r0+31 at `w`, `stride` bytes
// apart, chunks [0, kfull) in place and chunk kfull (if kfull < kc) from `tail`.
struct BlockRows {
  const char* w;
  int64_t stride;
  const char* tail;
  int64_t kfull;
};

// C tiles of one block: rows x 16 tokens (group g) and rows x 16 tokens (group g + 1).
template <class Tiles, bool TwoA, bool TwoB>
void block(BlockRows b, const uint32_t* xg, int64_t kc, int64_t pf, float (&c)[4][kTileRows][16]) {
  Tiles::template zero<0>();
  if constexpr (TwoB) Tiles::template zero<1>();
  if constexpr (TwoA) Tiles::template zero<2>();
  if constexpr (TwoA && TwoB) Tiles::template zero<3>();
  for (int64_t k = 0; k < kc; ++k) {
    const bool in_place = k < b.kfull;
    const char* a = in_place ? b.w + k * kChunk * 2 : b.tail;
    const int64_t as = in_place ? b.stride : kChunk * 2;
    // Decode streams each weight line once: fetch the rows' lines pf bytes ahead.
    if (pf > 0 && in_place)
      for (int r = 0; r < (TwoA ? 2 : 1) * kTileRows; ++r) _mm_prefetch(a + r * as + pf, _MM_HINT_T0);
    Tiles::template load<4>(a, as);
    if constexpr (TwoA) Tiles::template load<5>(a + kTileRows * as, as);
    Tiles::template load<6>(xg + k * kChunkDwords, 64);
    if constexpr (TwoB) Tiles::template load<7>(xg + (kc + k) * kChunkDwords, 64);
    Tiles::template dp<0, 4, 6>();
    if constexpr (TwoB) Tiles::template dp<1, 4, 7>();
    if constexpr (TwoA) Tiles::template dp<2, 5, 6>();
    if constexpr (TwoA && TwoB) Tiles::template dp<3, 5, 7>();
  }
  Tiles::template store<0>(c[0], 64);
  if constexpr (TwoB) Tiles::template store<1>(c[1], 64);
  if constexpr (TwoA) Tiles::template store<2>(c[2], 64);
  if constexpr (TwoA && TwoB) Tiles::template store<3>(c[3], 64);
}

// RowsFn: rows [r0, r1) for every token. Fp8: a.w is F8_E4M3, each block's rows
// dequantized to bf16 (fp8_rows_to_bf16) once per chunk of tokens.
template <class Tiles, bool Fp8>
void amx_rows(const Args& a, int64_t r0, int64_t r1) {
  const int64_t in = a.in, kc = amx_chunks(in), n = a.n_tokens;
  if (kc == 0) {  // no columns: every output is the accumulator's +0
    for (int64_t t = 0; t < n; ++t) std::fill(a.y + t * a.out + r0, a.y + t * a.out + r1, 0.0f);
    return;
  }
  // The tile configuration for this call only, released at its end: the thread holds
  // no tile state between matmuls (nothing to save at each context switch), and a
  // configuration left behind by anything else on this thread is replaced. (Not an RAII
  // guard: the check's siglongjmp would skip its destructor; nothing here throws.)
  Tiles::configure();
  const int64_t groups = amx_groups(n);
  const int64_t per_chunk = std::max<int64_t>(2, kTokenChunkBytes / (kc * kChunkDwords * 4)) & ~int64_t(1);
  const char* w = static_cast<const char*>(a.w);
  const int64_t row_bytes = in * (Fp8 ? 1 : 2);
  const int64_t pf = groups == 1 ? a.prefetch : 0;
  alignas(64) float c[4][kTileRows][16];
  for (int64_t g0 = 0; g0 < groups; g0 += per_chunk) {
    const int64_t g1 = std::min(groups, g0 + per_chunk);
    for (int64_t r = r0; r < r1; r += kBlockRows) {
      const int64_t rows = std::min<int64_t>(kBlockRows, r1 - r);
      BlockRows b{w + r * row_bytes, row_bytes, nullptr, in / kChunk};
      if (Fp8 || rows < kBlockRows) {
        // Copied (dequantized) with +0 past the last row and column: every chunk from the copy.
        const int64_t stride = kc * kChunk * 2;
        char* p = static_cast<char*>(t_padded.get(size_t(kBlockRows * stride)));
        if constexpr (Fp8) fp8_rows_to_bf16(a, r, rows, reinterpret_cast<uint16_t*>(p), stride / 2);
        else
          for (int64_t i = 0; i < rows; ++i) std::memcpy(p + i * stride, b.w + i * row_bytes, size_t(in * 2));
        if (in * 2 < stride)
          for (int64_t i = 0; i < rows; ++i) std::memset(p + i * stride + in * 2, 0, size_t(stride - in * 2));
        std::memset(p + rows * stride, 0, size_t((kBlockRows - rows) * stride));
        b = {p, stride, nullptr, kc};
      } else if (b.kfull < kc) {
        char* p = static_cast<char*>(t_tail.get(kBlockRows * kChunk * 2));
        const int64_t tail = in - b.kfull * kChunk;
        std::memset(p, 0, kBlockRows * kChunk * 2);
        for (int i = 0; i < kBlockRows; ++i)
          std::memcpy(p + i * kChunk * 2, b.w + i * row_bytes + b.kfull * kChunk * 2, size_t(tail * 2));
        b.tail = p;
      }
      for (int64_t g = g0; g < g1; g += 2) {
        const uint32_t* xg = a.xp + g * kc * kChunkDwords;
        const bool two_b = g + 1 < g1;
        if (rows > kTileRows) {
          if (two_b) block<Tiles, true, true>(b, xg, kc, pf, c);
          else block<Tiles, true, false>(b, xg, kc, pf, c);
        } else {
          if (two_b) block<Tiles, false, true>(b, xg, kc, pf, c);
          else block<Tiles, false, false>(b, xg, kc, pf, c);
        }
        // C tile q: rows 16 (q / 2) .. +15, tokens 16 (g + q % 2) .. +15; row-major
        // outputs x tokens, so y takes it transposed.
        for (int q = 0; q < 4; ++q) {
          const int64_t o0 = (q / 2) * kTileRows, t0 = (g + q % 2) * kGroup;
          if (o0 >= rows || (q % 2 && !two_b)) continue;
          const int64_t no = std::min<int64_t>(kTileRows, rows - o0), nt = std::min<int64_t>(kGroup, n - t0);
          for (int64_t t = 0; t < nt; ++t)
            for (int64_t o = 0; o < no; ++o) a.y[(t0 + t) * a.out + r + o0 + o] = c[q][o][t];
        }
      }
    }
  }
  Tiles::release();
}

template <class Tiles, bool Fp8>
DtypeKernels kernels_on() {
  DtypeKernels k;
  k.rows = amx_rows<Tiles, Fp8>;
  k.amx_pack = pack_group;
  k.amx_grain = kBlockRows;
  return k;
}

// --- Whether the hardware may run them ------------------------------------------

// CPUID leaf 0x1D (palette 1: 8 tiles of up to 16 rows of 64 bytes) and 0x1E (TMUL: 16
// rows of K, 64 bytes of N): the shapes the kernel configures (Intel SDM, "CPUID",
// leaves 1DH and 1EH), as Sapphire Rapids through Granite Rapids report them.
bool tile_shapes_fit() {
  unsigned a, b, c, d;
  if (__get_cpuid_max(0, nullptr) < 0x1E) return false;
  __cpuid_count(0x1D, 0, a, b, c, d);
  if (a < 1) return false;  // max palette
  __cpuid_count(0x1D, 1, a, b, c, d);
  const unsigned bytes_per_row = b & 0xFFFF, names = b >> 16, max_rows = c & 0xFFFF;
  __cpuid_count(0x1E, 0, a, b, c, d);
  const unsigned tmul_maxk = b & 0xFF, tmul_maxn = (b >> 8) & 0xFFFF;
  return bytes_per_row >= amx::kTileBytes && names >= 8 && max_rows >= unsigned(kTileRows) &&
         tmul_maxk >= unsigned(kTileRows) && tmul_maxn >= unsigned(amx::kTileBytes);
}

// Linux hands out the tile state (8 KiB per thread) only to a process that asks
// (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA); without it the first tile
// instruction faults.
bool os_grants_tiles() {
  constexpr long kReqXcompPerm = 0x1023, kGetXcompPerm = 0x1022, kXtiledata = 18;
  if (syscall(SYS_arch_prctl, kReqXcompPerm, kXtiledata) != 0) return false;
  unsigned long mask = 0;
  return syscall(SYS_arch_prctl, kGetXcompPerm, &mask) == 0 && (mask >> kXtiledata & 1);
}

sigjmp_buf g_probe_jump;
void on_sigill(int) { siglongjmp(g_probe_jump, 1); }

std::string bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", u);
  return buf;
}

// Runs the hardware and the emulated kernel on one matmul and returns "" if every
// output has the same bits (any NaN matches any NaN, as matmul_impl.h allows), else
// what differed. 45 x 107 x 37: a partial row block and chunk, a pair of token groups
// and a partial one alone (the blocks decode runs). Rows 0-31 and the first 35 tokens
// are N(0, 1)-like (the sums where the order of additions shows); the rest mix in
// denormal, tiny (products below 2^-126) and huge (sums past 2^127) values. A SIGILL
// (a CPU or hypervisor that advertises AMX but does not run it) is caught: the
// handler is the process's for the duration, so this runs once, from the first
// matmul's kernel set-up, before any tile instruction elsewhere.
std::string hardware_matches_emulation() {
  constexpr int64_t kOut = 45, kIn = 107, kN = 37, kPlainRows = 32;
  std::mt19937 rng(2026);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> exp_d(-40, 40), bits16(0, 65535);
  std::vector<uint16_t> w(kOut * kIn);
  std::vector<float> x(kN * kIn);
  for (int64_t i = 0; i < kOut * kIn; ++i) {
    const int b = bits16(rng);
    const int e = b % 16 == 0 ? -126 - b % 7 : b % 16 == 1 ? -70 : b % 16 == 2 ? 66 : exp_d(rng);
    const float v = std::ldexp((b & 1 ? -1.0f : 1.0f) * (1.0f + float(b >> 9) / 128), e);
    w[size_t(i)] = f32_to_bf16(i / kIn < kPlainRows ? nd(rng) : v);
  }
  for (int64_t i = 0; i < kN * kIn; ++i) {
    const int b = bits16(rng);
    const int e = b % 16 == 0 ? -70 : b % 16 == 1 ? 64 : exp_d(rng);
    x[size_t(i)] = i / kIn < kN - 2 ? nd(rng) : std::ldexp((b & 1 ? -1.0f : 1.0f) * (1.0f + float(b >> 4) / 4096), e);
  }
  std::vector<uint32_t> xp(size_t(amx_groups(kN) * amx_chunks(kIn) * kChunkDwords));
  for (int64_t g = 0; g < amx_groups(kN); ++g) amx_pack_group(pack_group, x.data(), kN, kIn, g, xp.data());
  std::vector<float> hw(kOut * kN, 0.0f), emu(kOut * kN, 1.0f);
  Args a{hw.data(), x.data(), w.data(), kN, kOut, kIn};
  a.xp = xp.data();
  struct sigaction sa {}, old{};
  sa.sa_handler = on_sigill;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGILL, &sa, &old);
  volatile bool faulted = false;
  if (sigsetjmp(g_probe_jump, 1) == 0) amx_rows<amx::HwTiles, false>(a, 0, kOut);
  else faulted = true;
  sigaction(SIGILL, &old, nullptr);
  if (faulted) return "a tile instruction raised SIGILL";
  a.y = emu.data();
  amx_rows<amx::EmuTiles, false>(a, 0, kOut);
  for (size_t i = 0; i < hw.size(); ++i)
    if (std::memcmp(&hw[i], &emu[i], 4) != 0 && !(hw[i] != hw[i] && emu[i] != emu[i]))
      return "TDPBF16PS differs from the SDM's operations: output " + std::to_string(i % kOut) + " of token " +
             std::to_string(i / kOut) + " is " + bits(hw[i]) + ", emulated " + bits(emu[i]);
  return "";
}

enum class Tiles { None, Hardware, Emulated };
struct Availability {
  Tiles tiles = Tiles::None;  // None: not offered
  std::string status;
};

const Availability& availability() {
  static const Availability av = [] {
    const CpuFeatures& f = cpu_features();
    switch (amx_mode()) {
      case AmxMode::Off: return Availability{Tiles::None, "off: switched off (MXSERVE_AMX=0)"};
      case AmxMode::Emulate:
        // The whole scheme in software, on any AVX512-BF16 CPU: slow; for running the
        // suite or a model as an AMX machine would, where there is none.
        if (!f.avx512bf16) return Availability{Tiles::None, "off: MXSERVE_AMX=emulate needs AVX512-BF16"};
        return Availability{Tiles::Emulated, "on: emulated in software (MXSERVE_AMX=emulate; slow, for tests)"};
      case AmxMode::On: break;
    }
    if (!f.amx_bf16 || !f.avx512bf16)
      return Availability{Tiles::None, "off: this CPU has no AMX-BF16 (or the OS does not enable its tile state)"};
    if (!tile_shapes_fit())
      return Availability{Tiles::None, "off: the CPU's AMX tiles or TMUL are smaller than the kernel's (CPUID 1DH / 1EH)"};
    if (!os_grants_tiles()) return Availability{Tiles::None, "off: Linux did not grant this process the AMX tile state"};
    const std::string diff = hardware_matches_emulation();
    if (!diff.empty()) return Availability{Tiles::None, "off: " + diff};
    return Availability{Tiles::Hardware, "on: AMX-BF16 tiles for BF16 and F8_E4M3 weights"};
  }();
  return av;
}

template <bool Fp8>
DtypeKernels offered() {
  switch (availability().tiles) {
    case Tiles::Hardware: return kernels_on<amx::HwTiles, Fp8>();
    case Tiles::Emulated: return kernels_on<amx::EmuTiles, Fp8>();
    case Tiles::None: break;
  }
  return {};
}

}  // namespace

DtypeKernels amx_bf16_kernels() { return offered<false>(); }
DtypeKernels amx_fp8_kernels() { return offered<true>(); }
DtypeKernels amx_bf16_kernels_emulated() { return kernels_on<amx::EmuTiles, false>(); }
DtypeKernels amx_fp8_kernels_emulated() { return kernels_on<amx::EmuTiles, true>(); }
const std::string& amx_status() { return availability().status; }
bool amx_emulated() { return availability().tiles == Tiles::Emulated; }

}  // namespace mx::matmul_detail
