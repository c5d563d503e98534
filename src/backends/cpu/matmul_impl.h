#pragma once
// Private interface between the matmul dispatcher (matmul.cpp) and the per-ISA
// kernels (matmul.cpp scalar, matmul_avx2.cpp, matmul_avx512.cpp).
//
// Accumulation scheme (the batch-invariance argument; see matmul.h):
//
// F32 / BF16 / F8_E4M3 weights:
//   Each ISA has a vector width V (scalar 8 "lanes" in an array, AVX2 8, AVX-512 16).
//   Every output y[t,o] owns exactly ONE V-lane accumulator, starting at +0.
//   For k = 0, 1, ... over the full V-element chunks of the row, in increasing k:
//       acc = fma(W[o, kV .. kV+V), x[t, kV .. kV+V), acc)
//   The final partial chunk (in % V elements) is loaded zero-padded (masked load or
//   a padded copy) and applied with one more identical FMA; padded lanes add
//   0*0 = +0, which leaves any accumulator that is reachable from +0 unchanged.
//   The accumulator is then reduced to a float by one fixed pairwise tree per ISA
//   (hsum in each kernel file: lane l + lane l + V/2, recursively).
//   Scalar: acc[l] += w * x (separate multiply and add: the baseline ISA has no FMA),
//   the partial chunk just skips the missing lanes, and the tree is AVX2's.
//   F8_E4M3: W[o, i] is formed in f32 as fp8_to_f32(w) * scale[o/128][i/128], one
//   rounding, exactly as quant/dequantize.cpp does (the block scale is applied to
//   each 128-column block of weights, once per weight vector, before the FMAs), so
//   an FP8 matmul is bitwise the F32 matmul of the dequantized weight on each ISA
//   (with f32 activations; with bf16 ones, below).
//
// BF16 and F8_E4M3 weights with bf16 activations (AVX512-BF16 CPUs, when the call
// asks for them: matmul.h, Bf16Act; matmul_bf16dot_avx512.cpp). An F8_E4M3 weight
// is first formed in f32 as above, then rounded to bf16 (vcvtne2ps2bf16: to
// nearest even, f32 denormals to zero), so an FP8 matmul is bitwise the BF16
// matmul of its dequantized weight rounded to bf16; the GEMV converts on the fly,
// a GEMM tile converts its rows once per chunk of tokens, with the same
// operations. Then, for either dtype:
//   The activations are rounded to bf16 once per call, per token row (round to
//   nearest even, as vcvtne2ps2bf16 does: denormals flushed to zero), zero-padded
//   to a multiple of 32. Every output owns one 16-lane accumulator starting at +0;
//   for each 32-element chunk k of the row, in increasing k, one vdpbf16ps adds to
//   lane l W[o, 32k + 2l + 1] * x[32k + 2l + 1], then W[o, 32k + 2l] * x[32k + 2l]
//   (the instruction's own fixed rounding: DAZ, FTZ, round to nearest even; the
//   products of two bf16 are exact in f32). The last partial chunk loads the
//   weights masked (zeros) against the zero padding. Then the AVX-512 tree, under
//   the caller's MXCSR. The GEMV and GEMM tiles issue exactly this sequence per
//   output, so the contract holds. The GEMM's FMA tiles (KernelConfig::fma) issue
//   each vdpbf16ps as those two FMAs under DAZ | FTZ; they are offered only where
//   this CPU's vdpbf16ps was found to be exactly that. Which NaN an output holds,
//   when it is NaN, is not part of the contract. What changes against the
//   f32-activation kernels is the value of the product (x rounded to 8 significant
//   bits), which matmul_bf16_activations() reports so callers and tests know which
//   product they get.
//
// BF16 and F8_E4M3 weights on AMX tiles (matmul_bf16_amx.cpp): a scheme of its own,
// taken by every BF16 and F8_E4M3 matmul with bf16 activations of the process where
// matmul_amx() is on (one token or many, so the contract holds; the bits differ from
// the vdpbf16ps scheme above). An F8_E4M3 weight is first dequantized to bf16 exactly
// as above (so an FP8 matmul is still bitwise the BF16 matmul of its dequantized
// weight rounded to bf16). The activations are rounded to bf16 as above, zero-padded
// to kc = ceil(in / 32) chunks of 32. Every output y[t, o] owns ONE f32 accumulator
// starting at +0; for each chunk c, in increasing c, one TDPBF16PS step: two partial
// sums s_even and s_odd start at +0, and for p = 0 .. 15 in increasing p
//     s_even = fma(W[o, 32c + 2p], x[32c + 2p], s_even)
//     s_odd  = fma(W[o, 32c + 2p + 1], x[32c + 2p + 1], s_odd)
// then acc = acc + (s_even + s_odd); every operation with DAZ, FTZ and round to
// nearest even (Intel SDM, TDPBF16PS; MXCSR is not read). Past the row's end the
// weights and the activations are +0. No tree: the accumulator is the output (+0
// for in = 0). amx_tiles.h's EmuTiles performs exactly these operations in software;
// the hardware's tiles are offered only where they gave EmuTiles' bits on a check
// matmul run once per process.
//
// MXFP4 weights (int8 dot products, identical bits on every ISA):
//   Activations are quantized per token row, per 32-block b: s_b = amax_b / 127,
//   q_i = round_nearest_even(x_i * (127 / amax_b)) (int8, |q| <= 127); all-zero
//   block: s = 0, q = 0; a block holding inf/NaN: s = NaN, q = 0.
//   Weights: E2M1 code -> 2 * value as an integer (0, +-1, +-2, +-3, +-4, +-6, +-8,
//   +-12), scale byte e -> 2^(e - 127) (NaN for 0xFF; 0, i.e. 2^-127, is flushed to 0:
//   see mx_scale), so the block's factor is 2^(e-127) * (s_b / 2) = 2^(e-128) * s_b.
//   d_b = sum_i (2 w_i) q_i is an exact integer (|d_b| <= 32 * 12 * 127), so the
//   lane layout of the integer dot product cannot matter. Each output owns 16 f32
//   lanes starting at +0; block b goes to lane b % 16, in increasing b:
//       acc[b % 16] = fma(float(d_b) * 2^(e_b - 127), s_b / 2, acc[b % 16])
//   (float(d_b) * 2^k is exact), then the 16 lanes are reduced by the AVX-512 tree
//   (l + l+8, l + l+4, l + l+2, l + l+1). Scalar, AVX2 and AVX-512 all perform
//   exactly these IEEE operations (the SIMD kernels hold the lanes permuted within
//   each 16-block group and undo the permutation before the tree), and the
//   activation quantizer is shared, so MXFP4 results are bitwise identical across
//   ISAs. Blocks past the end of a row (the row is padded to 16 blocks) add +0.
//
// Tiles: a kernel tile computes several outputs at once (several rows and/or
//   tokens), but each output still sees exactly its own sequence of operations, so
//   the tile shape (the KernelConfig the registry picks), the tile an output lands
//   in, n_tokens and the thread split (always by output row) cannot change its
//   bits. Only explicit intrinsics are used for the float math in the SIMD files,
//   so compiler FMA contraction cannot make one code path differ from another.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>

#include "core/dtype.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "backends/registry.h"

namespace mx::matmul_detail {

// MXFP4 activations, quantized once per matmul call (see above). Per token:
// q holds 32 int8 per block, grouped by 4 blocks: [evens of blocks 4g..4g+3 (16 each)
// | odds of those 4 blocks], matching the weights' low/high nibbles; blocks are
// padded to a multiple of 16 (q = 0, s = 0, sum12 = 0). s (= s_b / 2) and sum12
// (= 12 * sum q over the block) are stored per 16-block group in the kernel's lane
// order: position p of group G holds block 16 G + order[p] (DtypeKernels::mx_order).
struct QuantAct {
  const int8_t* q = nullptr;   // [n_tokens][q_stride]
  const float* s = nullptr;    // [n_tokens][nbp]
  const int32_t* sum12 = nullptr;  // [n_tokens][nbp]
  int64_t nbp = 0;             // blocks per row, padded to a multiple of 16
  int64_t q_stride = 0;        // bytes per token row of q (nbp * 32)
  // q in the kernel's regrouped layout (DtypeKernels::mx_regroup; same stride), which
  // its GEMM and its tiles of kMinRegroupTokens or more tokens read (a tile or GEMM of
  // TT tokens runs only on calls of TT or more); made for calls of at least
  // kMinRegroupTokens tokens, else null.
  const int8_t* qg = nullptr;
};

struct Args {
  float* y;        // [n_tokens, out]
  const float* x;  // [n_tokens, in]
  const void* w;   // [out, in]: F32, BF16, F8_E4M3 bytes, or MXFP4 packed [out, in/2]
  int64_t n_tokens, out, in;
  const void* scales = nullptr;  // MXFP4: E8M0 [out, in/32]; F8_E4M3: f32 blocks or null
  int64_t scale_cols = 0;        // F8_E4M3: ceil(in / 128)
  const QuantAct* qa = nullptr;  // MXFP4 activations
  int64_t x_row_bytes = 0;       // bytes of one token's activations as the kernel reads them
  int64_t chunk_bytes = 256 << 10;  // GEMM: activations kept in cache per chunk of tokens
  int64_t rowblock_bytes = 0;       // GEMM: weights kept in L2 per block of rows (0: all)
  int64_t w_row_bytes = 0;          // bytes of one weight row, scales included
  int prefetch = 0;              // GEMV prefetch distance in bytes (KernelConfig::prefetch)
  const uint16_t* xb = nullptr;  // bf16 activations [n_tokens][xb_stride] (DtypeKernels::bf16_act)
  int64_t xb_stride = 0;         // elements per token row: `in` rounded up to 32, zero-padded
  // The same activations widened to f32 for the GEMM's FMA tiles (Gemm::fma), per
  // 32 columns the 16 odd elements, then the 16 even ones (DtypeKernels::bf16_widen):
  // [n_tokens][xb_stride]; null where the call runs no FMA tile or its rows are longer
  // than DtypeKernels::bf16_widen_max_in (then the tiles widen xb themselves). Where set,
  // x_row_bytes counts these f32 rows, as the tiles read them.
  const float* xw = nullptr;
  // The AMX kernel's activations (DtypeKernels::amx_pack), per group of 16 tokens and per
  // 32-column chunk a 16 x 16 block of dwords, row p holding each token's bf16 pair p:
  // [ceil(n_tokens / 16)][ceil(in / 32)][16][16].
  const uint32_t* xp = nullptr;
};

// Where an MXFP4 kernel reads rows r0..: row r's packed bytes at w + r * rb and its
// E8M0 scale bytes at sc + r * nb (the tiles, and the GEMMs' prep of their rows).
struct MxRowOperands {
  int64_t nb, rb;
  const uint8_t* w;
  const uint8_t* sc;
  MxRowOperands(const Args& a, int64_t r0)
      : nb(a.in / 32), rb(a.in / 2), w(static_cast<const uint8_t*>(a.w) + r0 * rb),
        sc(static_cast<const uint8_t*>(a.scales) + r0 * nb) {}
};

// An MXFP4 tile at tokens t0.., rows r0..: its rows (MxRowOperands) and its tokens'
// quantized activations (QuantAct's q, s and sum12 rows).
struct MxTileOperands : MxRowOperands {
  const int8_t* xq;
  const float* xs;
  const int32_t* xsum;
  MxTileOperands(const Args& a, int64_t t0, int64_t r0)
      : MxRowOperands(a, r0), xq(a.qa->q + t0 * a.qa->q_stride), xs(a.qa->s + t0 * a.qa->nbp),
        xsum(a.qa->sum12 + t0 * a.qa->nbp) {}
};

// Computes y[t, o] for all t and o in [r0, r1).
using RowsFn = void (*)(const Args& a, int64_t r0, int64_t r1);
// Computes one tile, starting at token t0 and row r0.
using TileFn = void (*)(const Args& a, int64_t t0, int64_t r0);

struct Gemv {
  int rows;
  TileFn fn;  // 1 token x `rows` rows
  // Small batches (speculative verification, a few sequences decoding): 2 or 4
  // tokens x `rows` rows, streaming each weight row once for all of them (null:
  // the smaller tiles). Each output sees the 1-token tile's operations.
  TileFn fn2 = nullptr, fn4 = nullptr;
};

// Tokens up to which a call streams its weights through the GEMV tiles (fn4 / fn2
// / fn; 8 tokens as two fn4, the second on rows still in L1) rather than the GEMM's
// cache blocking: what a decode step of a few sequences, or a verification of a few
// drafted tokens, has.
constexpr int64_t kSmallBatch = 8;

// The GEMV tiles' software prefetch (KernelConfig::prefetch). prefetch_target: the
// address `ahead` elements past column i of a tile's first row (rows `in` elements
// apart, R of them; row r's is this + r * in), or, near the end of the rows, the start
// of the next tile's rows instead (row r + R is R - 1 rows past row r + 1): +40% GB/s
// on 896-wide bf16 rows (AVX-512). prefetch_rows: once per 64 bytes of weights, that
// line of each of the R rows (prefetcht0; no arithmetic, so no output changes).
// AVX2's float GEMV uses these only while `ahead` is under a row; from a row up it
// prefetches the next tile in address order instead (matmul_avx2.cpp, dot_tile).
template <class T>
inline const T* prefetch_target(const T* w, int64_t i, int64_t ahead, int64_t in, int R) {
  return w + i + ahead + (i + ahead < in ? 0 : (R - 1) * in);
}
template <int R, class T>
inline __attribute__((always_inline)) void prefetch_rows(const T* w, int64_t i, int64_t ahead, int64_t in) {
  if (ahead <= 0 || ((i * int64_t(sizeof(T))) & 63)) return;
  const T* pf = prefetch_target(w, i, ahead, in, R);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) __builtin_prefetch(pf + r * in, 0, 3);
}

// Every 64-byte line of the `bytes` bytes at p (prefetcht0), for the kernels that
// prefetch a run of lines rather than one line per row.
inline __attribute__((always_inline)) void prefetch_lines(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(c + off, 0, 3);
}

// The MXFP4 GEMV tiles': the next tile's block scales (R rows of nb bytes after this
// tile's, at sc), every 64-byte line of them, at the start of a tile: small, and a
// stream apart from the weights'.
template <int R>
inline __attribute__((always_inline)) void prefetch_next_scales(const uint8_t* sc, int64_t nb) {
  prefetch_lines(sc + R * nb, R * nb);
}

// ROWS rows as ROWS / RS sub-tiles of RS rows (fewer accumulators than registers):
// the sub-tile's rows are consecutive, so its "next tile" prefetch runs into the
// next sub-tile.
template <TileFn Sub, int RS, int ROWS>
void in_subtiles(const Args& a, int64_t t0, int64_t r0) {
  static_assert(ROWS % RS == 0);
  for (int r = 0; r < ROWS; r += RS) Sub(a, t0, r0 + r);
}
struct Gemm {
  int tokens, rows;
  TileFn full, tok1, row1, one;  // tokens x rows, 1 x rows, tokens x 1, 1 x 1
  // Optional: called on the calling thread before full / tok1 run over a block of
  // `rows` rows starting at r0 (for a chunk of tokens), e.g. to unpack those rows once.
  TileFn prep = nullptr;
  // Optional: computes rows [r0, r0 + rows) for tokens [c0, c1) in place of the
  // full / tok1 loop (after prep), e.g. blocking the columns of long rows.
  void (*chunk)(const Args& a, int64_t c0, int64_t c1, int64_t r0) = nullptr;
  // The bf16-activation products on f32 FMAs (KernelConfig::fma), bitwise vdpbf16ps's.
  bool fma = false;
};

// A GEMM's per-thread buffer for the rows its Gemm::prep prepares: it grows, never shrinks.
struct PrepBuffer {
  Buffer buf;
  void* get(size_t bytes) {
    if (buf.size() < bytes) buf = Buffer(std::max(bytes, buf.size() * 3 / 2));
    return buf.data();
  }
};
// The MXFP4 GEMMs' prepared rows in a PrepBuffer: wbytes of unpacked, regrouped
// weights (w), then the blocks' scales (ws, n_scales floats).
struct MxRows {
  uint8_t* w = nullptr;
  float* ws = nullptr;
  void place(PrepBuffer& b, size_t wbytes, size_t n_scales) {
    w = static_cast<uint8_t*>(b.get(wbytes + n_scales * sizeof(float)));
    ws = reinterpret_cast<float*>(w + wbytes);
  }
};

// Quantizes one token row of activations for the MXFP4 kernels (QuantAct layout);
// inv_order[b] is block b's lane position within its 16-block group. Every ISA's
// version performs the same IEEE operations (matmul_impl.h), so the same bits.
using MxQuantRowFn = void (*)(const float* x, int64_t in, int64_t nbp, const uint8_t* inv_order,
                              int8_t* q, float* s, int32_t* sum12);
// Rewrites one token row of q (QuantAct) in a kernel's regrouped layout (QuantAct::qg).
using MxRegroupFn = void (*)(const int8_t* q, int64_t nbp, int8_t* qg);
// The fewest tokens a tile that reads QuantAct::qg computes at once.
constexpr int64_t kMinRegroupTokens = 4;
// Rounds one token row of activations to bf16 into dst[stride] (zero-padded past in).
using Bf16RowFn = void (*)(const float* x, int64_t in, int64_t stride, uint16_t* dst);
// Rounds the activations of up to 16 tokens (n rows of `in` floats from x) to bf16 into
// the AMX tiles' layout (Args::xp) at dst: kc chunks of 16 x 16 dwords; tokens past n
// and columns past `in` are +0.
using AmxPackFn = void (*)(const float* x, int64_t n, int64_t in, int64_t kc, uint32_t* dst);
// That layout's group of tokens, chunk of columns, and dwords per (group, chunk) block.
constexpr int64_t kAmxGroup = 16, kAmxChunk = 32, kAmxBlockDwords = 16 * 16;
constexpr int64_t amx_chunks(int64_t in) { return (in + kAmxChunk - 1) / kAmxChunk; }
constexpr int64_t amx_groups(int64_t n_tokens) { return (n_tokens + kAmxGroup - 1) / kAmxGroup; }
// Packs token group g of x (n_tokens rows of `in` floats) into its place in the layout
// at xp (amx_groups(n_tokens) x amx_chunks(in) blocks of kAmxBlockDwords).
inline void amx_pack_group(AmxPackFn pack, const float* x, int64_t n_tokens, int64_t in, int64_t g, uint32_t* xp) {
  const int64_t kc = amx_chunks(in);
  pack(x + g * kAmxGroup * in, std::min(kAmxGroup, n_tokens - g * kAmxGroup), in, kc, xp + g * kc * kAmxBlockDwords);
}
// Widens one bf16 token row (stride elements, a multiple of 32) to f32 in the FMA
// tiles' order (Args::xw).
using Bf16WidenFn = void (*)(const uint16_t* xb, int64_t stride, float* dst);

// The kernels of one weight dtype on one ISA: either a plain RowsFn (scalar, no
// tunables) or tile variants a KernelConfig chooses between. Element 0 of each
// list is the kernel's own default.
struct DtypeKernels {
  RowsFn rows = nullptr;
  std::span<const Gemv> gemv;
  std::span<const Gemm> gemm;
  // MXFP4 only: lane position p of a 16-block group holds block order[p] (null:
  // natural order); the activation quantizer stores s and sum12 in this order.
  const uint8_t* mx_order = nullptr;
  MxQuantRowFn mx_quant = nullptr;  // MXFP4 only; null: the portable (SSE2) quantizer
  MxRegroupFn mx_regroup = nullptr;  // MXFP4 only; null: every tile reads q
  // BF16 and F8_E4M3 on the bf16-dot kernels: they read bf16 activations (Args::xb),
  // made by this per row.
  Bf16RowFn bf16_act = nullptr;
  // For the gemm list's FMA tiles (Gemm::fma; null: none): their activations (Args::xw),
  // made by this per row for rows of at most bf16_widen_max_in columns (longer ones,
  // the tiles widen the bf16 activations themselves).
  Bf16WidenFn bf16_widen = nullptr;
  int64_t bf16_widen_max_in = 0;
  // BF16 / F8_E4M3 on AMX: rows computes every token at once (no tiles to choose) on the
  // activations this packs (Args::xp); the thread split aligns to amx_grain rows.
  AmxPackFn amx_pack = nullptr;
  int amx_grain = 0;
  bool ok() const { return rows || (!gemv.empty() && !gemm.empty()); }
};

struct Kernels {
  DtypeKernels f32, bf16, mxfp4, fp8;
  // BF16 / F8_E4M3 weights x bf16 activations; !ok() where the CPU has none.
  DtypeKernels bf16_dot, fp8_dot;
  // BF16 / F8_E4M3 weights x bf16 activations on AMX tiles; !ok() where not offered
  // (amx_status()).
  DtypeKernels bf16_amx, fp8_amx;
};

// Tiles chosen for one call.
struct Plan {
  const Gemv* gemv;
  const Gemm* gemm;
  int64_t row_block;  // the thread split aligns to it (a GEMV's to gemv->rows alone)
};

inline Plan make_plan(const DtypeKernels& k, const KernelConfig& c) {
  Plan p{&k.gemv[0], &k.gemm[0], 1};
  for (const Gemv& g : k.gemv)
    if (g.rows == c.gemv_rows) p.gemv = &g;
  // The config's tile; where its FMA variant is not offered (matmul_bf16dot_avx512.cpp)
  // or the dtype has none, the same shape.
  const Gemm* shape = nullptr;
  for (const Gemm& g : k.gemm)
    if (g.tokens == c.tile_tokens && g.rows == c.tile_rows && (g.fma == c.fma || !shape)) shape = &g;
  if (shape) p.gemm = shape;
  p.row_block = std::lcm<int64_t>(p.gemv->rows, p.gemm->rows);
  return p;
}

// Whether a call of n tokens streams its weights through the GEMV tiles (else the
// GEMM's cache blocking).
inline bool streams(const Plan& p, int64_t n) { return n < p.gemm->tokens || (n <= kSmallBatch && p.gemv->fn4); }

// The loop nest shared by the SIMD kernels, over rows [r0, r1) and all tokens.
// Tiles only group outputs (see above), so the loop order is free to follow the caches.
inline void drive_rows(const Args& a, const Plan& p, int64_t r0, int64_t r1) {
  const int64_t n = a.n_tokens;
  const Gemm& g = *p.gemm;
  int64_t r = r0;
  const Gemv& v = *p.gemv;
  if (streams(p, n)) {
    // Decode: stream each block of weight rows once, for up to 4 tokens at a time;
    // it stays in L1/L2 across the rest.
    for (; r + v.rows <= r1; r += v.rows) {
      int64_t t = 0;
      if (v.fn4)
        for (; t + 4 <= n; t += 4) v.fn4(a, t, r);
      if (v.fn2)
        for (; t + 2 <= n; t += 2) v.fn2(a, t, r);
      for (; t < n; ++t) v.fn(a, t, r);
    }
  } else {
    // Prefill: tokens in chunks whose activations (a.chunk_bytes) stay in cache
    // while every row block of this range streams past them; without this, long
    // batches re-read x from DRAM once per row block (measured: 2x slower at 1024
    // tokens x 4864). A multiple of g.tokens, so only the last chunk has a partial tile.
    const int64_t chunk = std::max<int64_t>(
        g.tokens, a.chunk_bytes / std::max<int64_t>(a.x_row_bytes, 1) / g.tokens * g.tokens);
    const int64_t r_full = r0 + (r1 - r0) / g.rows * g.rows;
    // With an L1-sized token chunk, rows go in blocks of ~a.rowblock_bytes of weights
    // that stay in L2 while every chunk passes (else each chunk re-reads all of this
    // range's weights from L3 or DRAM).
    const int64_t rows_blk =
        a.rowblock_bytes > 0
            ? std::max<int64_t>(g.rows, a.rowblock_bytes / std::max<int64_t>(a.w_row_bytes, 1) / g.rows * g.rows)
            : std::max<int64_t>(r_full - r0, 1);
    for (int64_t b0 = r0; b0 < r_full; b0 += rows_blk) {
      const int64_t b1 = std::min(r_full, b0 + rows_blk);
      for (int64_t c0 = 0; c0 < n; c0 += chunk) {
        const int64_t c1 = std::min(n, c0 + chunk);
        for (r = b0; r < b1; r += g.rows) {
          if (g.prep) g.prep(a, c0, r);
          if (g.chunk) {
            g.chunk(a, c0, c1, r);
            continue;
          }
          int64_t t = c0;
          for (; t + g.tokens <= c1; t += g.tokens) g.full(a, t, r);
          for (; t < c1; ++t) g.tok1(a, t, r);
        }
      }
    }
    r = r_full;
  }
  // Rows left over by the block shape: one row at a time.
  for (; r < r1; ++r) {
    int64_t t = 0;
    for (; t + g.tokens <= n; t += g.tokens) g.row1(a, t, r);
    for (; t < n; ++t) g.one(a, t, r);
  }
}

// Gemm entry of a policy P with P::template tile<TT, R>(a, t0, r0).
template <class P, int TT, int R>
constexpr Gemm gemm_of() {
  return {TT, R, &P::template tile<TT, R>, &P::template tile<1, R>, &P::template tile<TT, 1>,
          &P::template tile<1, 1>};
}

Kernels scalar_kernels();
Kernels avx2_kernels(bool avx_vnni);  // avx_vnni: use AVX-VNNI for the MXFP4 int8 dots
Kernels avx512_kernels();  // MXFP4 needs AVX512-VNNI, else it takes AVX2's
// The BF16 and F8_E4M3 kernels over bf16 activations (need AVX512-BF16).
DtypeKernels avx512_bf16dot_kernels();
DtypeKernels avx512_fp8dot_kernels();
// Whether the FP8 GEMV tiles look their codes up 64 at a time with vpermt2b (CPUs with
// AVX512-VBMI; the same table and so the same bits as the 32-code vpermt2w lookup, which
// every other FP8 path takes): on by default where the CPU has it. Tests switch it off
// to run the other path; the setter returns the previous setting.
bool fp8_vbmi_lookup();
bool set_fp8_vbmi_lookup(bool on);
// F8_E4M3 rows [r0, r0 + rows) of a.w (its scales: a.scales, a.scale_cols) as bf16,
// with the bf16-activation kernels' operations (matmul_bf16dot_avx512.cpp, Fp8Src):
// row i's a.in values at dst + i * stride; nothing past them is written.
void fp8_rows_to_bf16(const Args& a, int64_t r0, int64_t rows, uint16_t* dst, int64_t stride);

// MXSERVE_AMX, read once: unset or "1" on, "0" off (the hardware is not even probed),
// "emulate" the software tiles; anything else warns and counts as on.
enum class AmxMode { On, Off, Emulate };
AmxMode amx_mode();
// The AMX kernels (matmul_bf16_amx.cpp) for BF16 weights, and for F8_E4M3 ones
// dequantized to bf16 per block of rows (fp8_rows_to_bf16). Offered: on the tile
// registers where this CPU has AMX-BF16 with the tile shapes the kernel uses, Linux
// grants the tile state and a check matmul gives EmuTiles' bits; on EmuTiles under
// MXSERVE_AMX=emulate; else !ok(), and amx_status() says why. _emulated: EmuTiles
// always (tests; any CPU with AVX512-BF16).
DtypeKernels amx_bf16_kernels();
DtypeKernels amx_fp8_kernels();
DtypeKernels amx_bf16_kernels_emulated();
DtypeKernels amx_fp8_kernels_emulated();
// "on: ..." or "off: why"; and whether what is offered is EmuTiles.
const std::string& amx_status();
bool amx_emulated();
// (The six functions above are compiled for AVX-512: call them only where
// cpu_features().avx512bf16; amx_mode() lives in matmul.cpp and runs anywhere.)

// MXFP4 weight scale byte -> 2^(e-127), 0xFF -> NaN, and 0 (2^-127, a subnormal) -> 0:
// the scalar form of what every kernel computes. Flushing costs nothing numerically
// (such a block's values are below 2^-124) and keeps subnormal operands, which take
// a slow path on some CPUs (measured 2x here), out of the kernels: scale bytes past a
// row's end are 0 as well.
inline float mx_scale(uint8_t e) {
  const uint32_t bits = e == 0 ? 0u : e == 0xFF ? 0x7FC00000u : uint32_t(e) << 23;
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}

// Runs one matmul with explicit kernels and config (the dispatcher's core; tests
// use it to reach kernel variants the dispatcher would not pick on this CPU).
// bf16_act: BF16 / F8_E4M3 weights take k.bf16_dot / k.fp8_dot (bf16 activations)
// where they exist.
void run_kernels(const Kernels& k, Isa isa, float* y, const float* x, const Tensor& w,
                 int64_t n_tokens, ThreadPool& pool, const KernelConfig* cfg, bool bf16_act = false);

}  // namespace mx::matmul_detail
