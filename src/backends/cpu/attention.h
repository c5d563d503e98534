#pragma once
// Paged attention on the CPU (Backend::paged_attention's contract, backends/backend.h):
// query token t (n_heads x head_dim at q + t * q_stride) of sequence seq[t]
// attends causally to positions 0..pos[t] of that sequence's paged cache.
//
// The SIMD kernels (attention_impl.h, AVX-512 and AVX2) are tiled: the
// (query, head) rows that share a KV head, for a run of consecutive positions of
// one sequence, go through the cache together, a block of keys at a time, with an
// online softmax (the running max / running sum rescaling of FlashAttention,
// Dao et al. 2022, and its loop order of FlashAttention-2, Dao 2023, section 3.1:
// queries outer, keys inner, one rescale of the output per key block). Q.K^T and
// P.V are small GEMM tiles with the rows of the tile in the vector lanes, so one
// key or value element, broadcast, serves a vector of rows; the K and V of a key
// block are read once for every row of the GQA group and of the query run.
//
// Decode: a token's rows are its GQA group (7 for Qwen3's 14 heads over 2), a
// tile's first vector or less. A tile whose rows fit half a vector takes its
// exps two keys at a time, and its bf16 products two keys (Q.K^T) or two value
// dims (P.V) per vdpbf16ps (attention_bf16_avx512.cpp): lane for lane the same
// operations. A step with fewer work items than the pool has workers (one
// sequence over few KV heads; MLA's single latent head) splits its rows into
// items of a multiple of half a vector, the size whose deal ends soonest. The
// next key block's rows are prefetched a line per iteration of the products'
// loops while a block computes: a long context's cache comes from DRAM, where the
// hardware prefetchers alone were 2-4x slower and a burst of prefetches stalled
// the core (BENCHMARKS.md).
//
// Batch invariance (the contract of backends/cpu/matmul.h, carried over): a row's
// output is bitwise the same whether its query is computed alone (decode), in a
// chunk of any size, next to any other rows, or on any number of threads. Each
// row (a query token and head) performs exactly this sequence of IEEE operations,
// which depends only on its own query, its position p and the cache contents at
// positions 0..p:
//   s_j   = (fma chain over d = 0..head_dim-1 in increasing d, from +0, of q[d] k_j[d]) * scale
//   for key blocks b = 0 .. p / kAttnKeyBlock (absolute positions
//   [b * kAttnKeyBlock, (b + 1) * kAttnKeyBlock), whatever the query blocking):
//     m'    = max(m, max of s_j over the block's positions <= p)      (m starts at -inf)
//     alpha = exp(m - m'), P_j = exp(s_j - m')    (exp: the ISA's vector exp, simd_exp.h)
//     l     = l * alpha, then l += P_j for each position j <= p in increasing j
//     o[d]  = o[d] * alpha, then o[d] = fma(P_j, v_j[d], o[d]) for j <= p in increasing j
//   out[d] = o[d] / l
// A tile also passes keys beyond a row's own position (another row of the tile
// needs them) and whole blocks past it; for that row they are exact identities:
// a masked score is -inf (a select, not arithmetic, so garbage or inf in K
// cannot leak), its weight exp(-inf) = +0 adds nothing to l >= +0, the output
// update is a masked FMA (inf or NaN in V cannot leak either), and a block with
// no key of the row has m' = m, alpha = exp(0) = 1 exactly.
// Results differ between ISAs (as the matmul's do): the scalar ISA keeps the
// plain per-(token, head) loop below, the same for every batch.
//
// AttnProducts::Bf16 (AVX512-BF16 only, attention_bf16_avx512.cpp states its
// sequence): the same tiles, blocks and online softmax, with q, k, v and the
// weights P rounded to bf16 and both products on vdpbf16ps, which does two
// multiply-adds per lane where an FMA does one. The contract above holds as
// stated (batch invariance; later inf / NaN cannot leak); what changes is the
// value, by the roundings: as llama.cpp's CPU flash attention multiplies f16 Q
// and K and FlashAttention-2 multiplies P in the inputs' 16-bit type.
// attention_products() picks it for BF16 and FP8 caches (whose keys and values
// are bf16-exact already: the roundings left are q's and P's) where the bf16
// matmuls are on (matmul.h, MXSERVE_BF16_ACTIVATIONS), unless
// MXSERVE_BF16_ATTENTION=0. An F32 cache keeps f32 products: a model served in
// f32 stays f32 end to end.
//
// Caches, with f32 products: F32 rows are read in place; BF16 and F8_E4M3 rows
// of a key block are widened to f32 once per work item (exactly, both formats
// fit in f32), so attention over a bf16 / fp8 cache equals attention over an
// f32 cache holding the rounded values, bit for bit. The bf16 products read
// every cache's rows in place.
//
// The bf16 products on FMAs (attention_bf16_avx512.cpp, Bf16Products<true>): where
// this CPU's vdpbf16ps is exactly two f32 FMAs (bf16_fma_avx512.h, fma_exact), the
// wide tiles (prefill) may do each vdpbf16ps as those two FMAs: the same bits, a
// different speed (on an Intel Xeon vdpbf16ps issues at a quarter of the FMA's
// rate). Chosen per machine by the kernel table: an entry of op "attention",
// dtype BF16, out = in = 0, ISA avx512 with "fma": true for this CPU (cpu_key();
// `mxserve tune` measures both), applied to BF16 and F8_E4M3 caches alike.
#include <cstdint>
#include <vector>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "backends/backend.h"

namespace mx {

// Keys per block of the online softmax (absolute positions: part of the
// numerical contract above, not a tunable).
constexpr int kAttnKeyBlock = 64;

namespace attn_detail {

// A run of consecutive tokens t0..t0+n_q-1 of one sequence at positions
// pos0..pos0+n_q-1; its rows for KV head g are r = i * group + h' (query i,
// head g * group + h'), and an item takes rows [r0, r1) of them.
struct Item {
  int64_t t0 = 0;
  int n_q = 0, pos0 = 0, g = 0, r0 = 0, r1 = 0;
  const int32_t* table = nullptr;  // the sequence's block table
};

struct Call {
  float* out;
  const float* q;
  int q_stride;
  PagedKV kv;
  AttnArgs a;
};

// Floats of per-worker scratch an item of the ISA's kernel needs.
using ScratchFn = int64_t (*)(const AttnArgs& a);
// Rows per item (a multiple of the kernel's row tile).
using RunItemFn = void (*)(const Call& c, const Item& it, float* scratch);

struct Kernel {
  int item_rows = 0;  // at most
  int min_item_rows = 0;  // step of the sizes tried when items are fewer than workers (half a vector)
  ScratchFn scratch_floats = nullptr;
  RunItemFn run = nullptr;
};

Kernel avx512_attention_kernel();
Kernel avx512_bf16_attention_kernel();
Kernel avx512_bf16fma_attention_kernel();  // the same, wide tiles on FMAs (attention.h)
// Whether vdpbf16ps is two FMAs on this CPU (bf16_fma_avx512.h); call only where
// attention_bf16_supported(Isa::Avx512).
bool bf16_attention_fma_exact();
Kernel avx2_attention_kernel();

}  // namespace attn_detail

// The caller's reusable buffers: a decode step calls attention once per layer,
// and none of it allocates once these have grown to the batch's size.
struct AttnScratch {
  std::vector<float> floats;  // per-worker kernel scratch
  std::vector<attn_detail::Item> items;
  std::vector<int> order;
  std::vector<int64_t> load;
};

// The precision of Q.K^T and P.V (above).
enum class AttnProducts { F32, Bf16 };

// Whether `isa` runs bf16 products here: AVX-512 on a CPU with AVX512-BF16.
bool attention_bf16_supported(Isa isa);

// Bf16 for a BF16 or F8_E4M3 cache where `isa` is AVX-512 on a CPU with
// AVX512-BF16, matmul_bf16_activations(isa) holds and attention's own switch is
// on (MXSERVE_BF16_ATTENTION, default on; set_attention_bf16 for tests); F32
// otherwise.
AttnProducts attention_products(Isa isa, DType cache);
// Returns the previous setting. Process-wide; change it only while no attention runs.
bool set_attention_bf16(bool on);

// Whether the bf16 products can run on FMAs here (AVX512-BF16, and vdpbf16ps is
// exactly two FMAs), and whether they do: the kernel table's choice for this CPU
// (above) unless set_attention_bf16_fma changed it; never where unsupported. The
// setter returns the previous setting; process-wide, as set_attention_bf16.
bool attention_bf16_fma_supported();
bool attention_bf16_fma();
bool set_attention_bf16_fma(bool on);

// The whole op: validates the arguments (clear errors for bad head counts,
// negative positions), splits the batch into work items (runs of consecutive
// positions of one sequence x KV head x up to a few row tiles), runs them on
// the pool's workers longest first, each claimed by the first one free, with the
// ISA's kernel. Bf16 products on an ISA or CPU without them are an error.
void cpu_paged_attention(Isa isa, AttnProducts products, float* out, const float* q, int q_stride, const PagedKV& kv,
                         const AttnArgs& a, const int32_t* block_tables, int max_blocks, const int32_t* seq,
                         const int32_t* pos, int64_t n_tokens, ThreadPool& pool, AttnScratch& scratch);

}  // namespace mx
