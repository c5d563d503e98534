// matmul dispatcher, the MXFP4 activation quantizer, and the scalar (portable)
// kernels. Accumulation scheme and the batch-invariance argument: matmul_impl.h.
#include "backends/cpu/matmul.h"

#include <emmintrin.h>  // SSE2: part of baseline x86-64

#include <cmath>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "core/error.h"
#include "backends/cpu/matmul_impl.h"
#include "backends/registry.h"
#include "quant/mxfp4.h"

namespace mx {
namespace matmul_detail {
namespace {

// Scalar path: 8 lanes in an array, lane l takes the elements i == l (mod 8) in
// increasing order; then the same pairwise tree as the AVX2 hsum. wv(i) is the
// weight value W[o, i] as f32.
template <class WV>
float dot8(WV wv, const float* x, int64_t in) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= in; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += wv(i + l) * x[i + l];
  for (int l = 0; i + l < in; ++l) acc[l] += wv(i + l) * x[i + l];
  const float s0 = acc[0] + acc[4], s1 = acc[1] + acc[5], s2 = acc[2] + acc[6],
              s3 = acc[3] + acc[7];
  return (s0 + s2) + (s1 + s3);
}

template <class T>
void scalar_rows(const Args& a, int64_t r0, int64_t r1) {
  const T* w = static_cast<const T*>(a.w);
  // Row outer, tokens inner: one weight row stays in L1 while all tokens use it.
  for (int64_t o = r0; o < r1; ++o) {
    const T* wr = w + o * a.in;
    auto wv = [wr](int64_t i) {
      if constexpr (sizeof(T) == 2) return bf16_to_f32(wr[i]);
      else return wr[i];
    };
    for (int64_t t = 0; t < a.n_tokens; ++t) a.y[t * a.out + o] = dot8(wv, a.x + t * a.in, a.in);
  }
}

struct Fp8Table {
  float v[256];
  Fp8Table() {
    for (int i = 0; i < 256; ++i) v[i] = fp8e4m3_to_f32(uint8_t(i));
  }
};
const Fp8Table& fp8_table() {
  static const Fp8Table t;
  return t;
}

// F8_E4M3: each weight is formed as fp8 * block scale (one rounding, as
// dequantize_f32 does), then the F32 scheme above.
void scalar_fp8_rows(const Args& a, int64_t r0, int64_t r1) {
  const uint8_t* w = static_cast<const uint8_t*>(a.w);
  const float* tab = fp8_table().v;
  const float* sc = static_cast<const float*>(a.scales);
  for (int64_t o = r0; o < r1; ++o) {
    const uint8_t* wr = w + o * a.in;
    const float* srow = sc ? sc + (o / 128) * a.scale_cols : nullptr;
    auto wv = [&](int64_t i) { return srow ? tab[wr[i]] * srow[i >> 7] : tab[wr[i]]; };
    for (int64_t t = 0; t < a.n_tokens; ++t) a.y[t * a.out + o] = dot8(wv, a.x + t * a.in, a.in);
  }
}

// E2M1 code -> 2 * value.
constexpr int8_t kE2M1x2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// MXFP4: the 16-lane block scheme of matmul_impl.h, lanes in natural order.
void scalar_mxfp4_rows(const Args& a, int64_t r0, int64_t r1) {
  const uint8_t* w = static_cast<const uint8_t*>(a.w);
  const uint8_t* sc = static_cast<const uint8_t*>(a.scales);
  const QuantAct& qa = *a.qa;
  const int64_t nb = a.in / 32;
  for (int64_t o = r0; o < r1; ++o) {
    const uint8_t* wr = w + o * (a.in / 2);
    const uint8_t* sr = sc + o * nb;
    for (int64_t t = 0; t < a.n_tokens; ++t) {
      const int8_t* q = qa.q + t * qa.q_stride;
      const float* s = qa.s + t * qa.nbp;
      float acc[16] = {};
      for (int64_t b = 0; b < nb; ++b) {
        const int8_t* ev = q + (b >> 2) * 128 + (b & 3) * 16;
        const int8_t* od = ev + 64;
        const uint8_t* wb = wr + b * 16;
        int32_t d = 0;
        for (int j = 0; j < 16; ++j)
          d += kE2M1x2[wb[j] & 15] * ev[j] + kE2M1x2[wb[j] >> 4] * od[j];
        acc[b & 15] = std::fma(float(d) * mx_scale(sr[b]), s[b], acc[b & 15]);
      }
      float s8[8], s4[4];
      for (int l = 0; l < 8; ++l) s8[l] = acc[l] + acc[l + 8];
      for (int l = 0; l < 4; ++l) s4[l] = s8[l] + s8[l + 4];
      a.y[t * a.out + o] = (s4[0] + s4[2]) + (s4[1] + s4[3]);
    }
  }
}

// --- MXFP4 activation quantizer (shared by every ISA; SSE2 only) ---------------

inline float hmax4(__m128 v) {
  v = _mm_max_ps(v, _mm_movehl_ps(v, v));
  v = _mm_max_ss(v, _mm_shuffle_ps(v, v, 1));
  return _mm_cvtss_f32(v);
}

// One token row: see QuantAct (matmul_impl.h) for the layout. inv_order[b] is the
// lane position of block b within its 16-block group.
void quantize_row_mx(const float* x, int64_t in, int64_t nbp, const uint8_t* inv_order,
                     int8_t* q, float* s, int32_t* sum12) {
  const int64_t nb = in / 32;
  const __m128 absmask = _mm_castsi128_ps(_mm_set1_epi32(0x7fffffff));
  const __m128 fmax = _mm_set1_ps(3.40282347e38f);
  for (int64_t b = 0; b < nbp; ++b) {
    const int64_t pos = (b & ~int64_t(15)) + inv_order[b & 15];
    int8_t* ev = q + (b >> 2) * 128 + (b & 3) * 16;
    int8_t* od = ev + 64;
    if (b >= nb) {
      std::memset(ev, 0, 16);
      std::memset(od, 0, 16);
      s[pos] = 0.0f;
      sum12[pos] = 0;
      continue;
    }
    const float* xb = x + b * 32;
    __m128 m = _mm_setzero_ps(), bad = _mm_setzero_ps();
    for (int k = 0; k < 32; k += 4) {
      const __m128 v = _mm_and_ps(_mm_loadu_ps(xb + k), absmask);
      m = _mm_max_ps(m, v);
      bad = _mm_or_ps(bad, _mm_cmpnle_ps(v, fmax));  // inf or NaN
    }
    const float amax = hmax4(m);
    if (_mm_movemask_ps(bad) || amax == 0.0f) {
      std::memset(ev, 0, 16);
      std::memset(od, 0, 16);
      s[pos] = _mm_movemask_ps(bad) ? __builtin_nanf("") : 0.0f;
      sum12[pos] = 0;
      continue;
    }
    const float inv = 127.0f / amax;
    s[pos] = amax / 127.0f * 0.5f;
    const __m128 vinv = _mm_set1_ps(inv);
    __m128i qe[4], qo[4], tot = _mm_setzero_si128();
    for (int k = 0; k < 4; ++k) {
      const __m128 a0 = _mm_loadu_ps(xb + 8 * k), a1 = _mm_loadu_ps(xb + 8 * k + 4);
      // Round to nearest even (the default MXCSR mode), as std::nearbyint.
      qe[k] = _mm_cvtps_epi32(_mm_mul_ps(_mm_shuffle_ps(a0, a1, _MM_SHUFFLE(2, 0, 2, 0)), vinv));
      qo[k] = _mm_cvtps_epi32(_mm_mul_ps(_mm_shuffle_ps(a0, a1, _MM_SHUFFLE(3, 1, 3, 1)), vinv));
      tot = _mm_add_epi32(tot, _mm_add_epi32(qe[k], qo[k]));
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(ev),
                     _mm_packs_epi16(_mm_packs_epi32(qe[0], qe[1]), _mm_packs_epi32(qe[2], qe[3])));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(od),
                     _mm_packs_epi16(_mm_packs_epi32(qo[0], qo[1]), _mm_packs_epi32(qo[2], qo[3])));
    alignas(16) int32_t t4[4];
    _mm_store_si128(reinterpret_cast<__m128i*>(t4), tot);
    sum12[pos] = 12 * (t4[0] + t4[1] + t4[2] + t4[3]);
  }
}

// Grow-only per-thread storage for the quantized activations: no allocation per
// call in steady state.
struct ActScratch {
  Buffer buf;
  void* get(size_t bytes) {
    if (buf.size() < bytes) buf = Buffer(std::max(bytes, buf.size() * 3 / 2));
    return buf.data();
  }
};
thread_local ActScratch t_act;

constexpr size_t align64(size_t n) { return (n + 63) & ~size_t(63); }

// Calls row(t) for each activation row t < n (each `in` elements), split
// between the pool's threads when there is enough work. Rows are independent:
// splitting them cannot change any value.
template <class F>
void for_each_row(int64_t n, int64_t in, ThreadPool& pool, F&& row) {
  auto rows = [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) row(t);
  };
  if (n > 1 && n * in >= (int64_t(1) << 16)) pool.parallel_for(n, rows);
  else rows(0, n);
}

QuantAct quantize_activations(const float* x, int64_t n, int64_t in, const DtypeKernels& dk, ThreadPool& pool) {
  MxQuantRowFn quant = dk.mx_quant;
  const uint8_t* order = dk.mx_order;
  if (!quant) quant = quantize_row_mx;
  static const uint8_t kNatural[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  if (!order) order = kNatural;
  QuantAct qa;
  qa.nbp = (in / 32 + 15) / 16 * 16;
  qa.q_stride = qa.nbp * 32;
  const size_t qb = align64(size_t(n * qa.q_stride)), sb = align64(size_t(n * qa.nbp) * 4);
  const bool regroup = dk.mx_regroup && n >= kMinRegroupTokens;
  char* p = static_cast<char*>(t_act.get(qb * (regroup ? 2 : 1) + 2 * sb + 64));
  int8_t* q = reinterpret_cast<int8_t*>(p);
  float* s = reinterpret_cast<float*>(p + qb);
  int32_t* sum = reinterpret_cast<int32_t*>(p + qb + sb);
  int8_t* qg = regroup ? reinterpret_cast<int8_t*>(p + qb + 2 * sb) : nullptr;
  uint8_t inv_order[16];
  for (int i = 0; i < 16; ++i) inv_order[order[i]] = uint8_t(i);
  for_each_row(n, in, pool, [&](int64_t t) {
    quant(x + t * in, in, qa.nbp, inv_order, q + t * qa.q_stride, s + t * qa.nbp, sum + t * qa.nbp);
    if (qg) dk.mx_regroup(q + t * qa.q_stride, qa.nbp, qg + t * qa.q_stride);
  });
  qa.qg = qg;
  qa.q = q;
  qa.s = s;
  qa.sum12 = sum;
  return qa;
}

// BF16 activations, rounded once per call (DtypeKernels::bf16_act; matmul_impl.h).
const uint16_t* bf16_activations(const float* x, int64_t n, int64_t in, int64_t stride, Bf16RowFn round,
                                 ThreadPool& pool) {
  uint16_t* dst = static_cast<uint16_t*>(t_act.get(size_t(n * stride) * 2 + 64));
  for_each_row(n, in, pool, [&](int64_t t) { round(x + t * in, in, stride, dst + t * stride); });
  return dst;
}

// The same rows widened to f32 for the FMA tiles (Args::xw), in storage of their own:
// the bf16 rows stay valid beside them. It grows to the largest call's n x stride f32
// (as large as the call's f32 activations) and stays, as t_act does.
thread_local ActScratch t_widened;
const float* widened_activations(const uint16_t* xb, int64_t n, int64_t stride, Bf16WidenFn widen,
                                 ThreadPool& pool) {
  float* dst = static_cast<float*>(t_widened.get(size_t(n * stride) * 4 + 64));
  for_each_row(n, stride, pool, [&](int64_t t) { widen(xb + t * stride, stride, dst + t * stride); });
  return dst;
}

// The AMX kernel's activations (Args::xp), packed per group of kAmxGroup tokens.
const uint32_t* amx_activations(const float* x, int64_t n, int64_t in, AmxPackFn pack, ThreadPool& pool) {
  const int64_t groups = amx_groups(n), per_group = amx_chunks(in) * kAmxBlockDwords;
  uint32_t* dst = static_cast<uint32_t*>(t_act.get(size_t(groups * per_group) * 4 + 64));
  for_each_row(groups, per_group, pool, [&](int64_t g) { amx_pack_group(pack, x, n, in, g, dst); });
  return dst;
}

}  // namespace

Kernels scalar_kernels() {
  Kernels k;
  k.f32.rows = scalar_rows<float>;
  k.bf16.rows = scalar_rows<uint16_t>;
  k.fp8.rows = scalar_fp8_rows;
  k.mxfp4.rows = scalar_mxfp4_rows;
  return k;
}

static std::atomic<bool>& fp8_vbmi_setting() {
  static std::atomic<bool> on{cpu_features().avx512vbmi};
  return on;
}
bool fp8_vbmi_lookup() { return fp8_vbmi_setting().load(std::memory_order_relaxed); }
bool set_fp8_vbmi_lookup(bool on) { return fp8_vbmi_setting().exchange(on && cpu_features().avx512vbmi); }

namespace {

const Kernels& kernels(Isa isa) {
  // Each ISA's set built only where the CPU runs it: the builders are compiled for their
  // ISA, and the compiler may use its instructions in them too.
  static const Kernels k[3] = {scalar_kernels(),
                               isa_supported(Isa::Avx2) ? avx2_kernels(cpu_features().avx_vnni) : Kernels{},
                               isa_supported(Isa::Avx512) ? avx512_kernels() : Kernels{}};
  return k[int(isa)];
}

std::atomic<bool>& bf16_activations_setting() {
  static std::atomic<bool> on = [] {
    const char* e = std::getenv("MXSERVE_BF16_ACTIVATIONS");
    return !(e && std::string_view(e) == "0");
  }();
  return on;
}

}  // namespace

// Here, not in the AMX file: that one is compiled for AVX-512, and this runs on every CPU.
AmxMode amx_mode() {
  static const AmxMode mode = [] {
    const char* e = std::getenv("MXSERVE_AMX");
    const std::string_view v = e ? e : "";
    if (v.empty() || v == "1") return AmxMode::On;
    if (v == "0") return AmxMode::Off;
    if (v == "emulate") return AmxMode::Emulate;
    std::fprintf(stderr, "mxserve: warning: MXSERVE_AMX=%s is not 0, 1 or emulate; AMX stays on where offered\n", e);
    return AmxMode::On;
  }();
  return mode;
}

namespace {

std::atomic<bool>& amx_setting() {
  static std::atomic<bool> on{amx_mode() != AmxMode::Off};
  return on;
}

const DtypeKernels* dtype_kernels(const Kernels& k, DType dt, bool bf16_act = false) {
  // BF16 and F8_E4M3: with bf16 activations the AMX kernels where offered and on, else
  // the bf16-activation ones where the CPU has them; else the f32-activation ones.
  auto pick = [&](const DtypeKernels& amx, const DtypeKernels& dot, const DtypeKernels& f32_act) {
    if (bf16_act && amx.ok() && amx_setting()) return &amx;
    return bf16_act && dot.ok() ? &dot : &f32_act;
  };
  switch (dt) {
    case DType::F32: return &k.f32;
    case DType::BF16: return pick(k.bf16_amx, k.bf16_dot, k.bf16);
    case DType::MXFP4: return &k.mxfp4;
    case DType::F8_E4M3: return pick(k.fp8_amx, k.fp8_dot, k.fp8);
    default: return nullptr;
  }
}

// Below this many multiply-adds handing work to the pool costs more than it saves.
constexpr int64_t kMinParallelMacs = 1 << 15;
// A matmul's rows go to the pool in this many pieces per thread (run_prepared).
constexpr int64_t kPiecesPerThread = 4;

}  // namespace

namespace {

// One matmul made ready to run any rows [b, e): its kernels, arguments, tiles and the
// split's grain. Holds the quantized activations a.qa points at, so it stays put.
struct Prepared {
  const DtypeKernels* dk = nullptr;
  Args a{};
  Plan p{};
  QuantAct qa;
  // The activations widened for the FMA tiles, by this prepare or an earlier one of the
  // same matmul_many (null: none needed them yet); a.xw points at them where this call's
  // tiles read them.
  const float* widened = nullptr;
  int64_t grain = 1;  // the thread split aligns to it
  bool empty = true;  // nothing to compute (no tokens, no rows)

  Prepared() = default;
  Prepared(const Prepared&) = delete;
  Prepared& operator=(const Prepared&) = delete;
  void rows(int64_t b, int64_t e) const {
    if (dk->rows) dk->rows(a, b, e);
    else drive_rows(a, p, b, e);
  }
  int64_t macs() const { return a.out * a.in * a.n_tokens; }
};

// Checks w and prepares y = x W^T in r. The activations are rounded to bf16 or quantized
// for MXFP4 here, and widened to f32 where this call's FMA tiles read them, unless
// `shared` holds them already for the same x, dtype and width (matmul_many: q, k and v
// read one x; the widened ones, once any prepare before needed them).
void prepare(Prepared& r, const Kernels& k, Isa isa, float* y, const float* x, const Tensor& w, int64_t n_tokens,
             ThreadPool& pool, const KernelConfig* cfg, bool bf16_act, const Prepared* shared) {
  MX_CHECK(w.ndim == 2, "matmul: weight must be 2-D, got {}", w.shape_str());
  MX_CHECK(n_tokens >= 0, "matmul: n_tokens = {}", n_tokens);
  const DtypeKernels* dk = dtype_kernels(k, w.dtype, bf16_act);
  MX_CHECK(dk && dk->ok(), "matmul: no kernel for {} weights", dtype_name(w.dtype));
  Args& a = r.a;
  a = Args{y, x, w.data, n_tokens, w.shape[0], w.shape[1]};
  if (w.dtype == DType::MXFP4) {
    MX_CHECK(a.in % 32 == 0, "matmul: MXFP4 weight {} has in = {}, not a multiple of 32",
             w.shape_str(), a.in);
    MX_CHECK(w.scales, "matmul: MXFP4 weight {} without scales", w.shape_str());
  }
  r.dk = dk;
  r.empty = n_tokens == 0 || a.out == 0;
  if (r.empty) return;
  const KernelConfig& c = cfg ? *cfg : kernel_config("matmul", w.dtype, a.out, a.in, isa);
  a.scales = w.scales;
  a.prefetch = c.prefetch;
  a.x_row_bytes = a.in * 4;
  if (w.dtype == DType::MXFP4) {
    r.qa = shared ? shared->qa : quantize_activations(x, n_tokens, a.in, *dk, pool);
    a.qa = &r.qa;
    a.x_row_bytes = r.qa.q_stride + r.qa.nbp * 8;
  }
  if (w.dtype == DType::F8_E4M3) a.scale_cols = (a.in + 127) / 128;
  a.chunk_bytes = int64_t(std::max(c.chunk_kib, 1)) << 10;
  a.rowblock_bytes = int64_t(std::max(c.rowblock_kib, 0)) << 10;
  a.w_row_bytes = w.dtype == DType::MXFP4 ? a.in / 2 + a.in / 32 : int64_t(dtype_bytes(w.dtype, a.in));
  if (dk->amx_pack) {
    a.xp = shared ? shared->a.xp : amx_activations(x, n_tokens, a.in, dk->amx_pack, pool);
    r.grain = dk->amx_grain;
  }
  if (dk->rows) return;
  r.p = make_plan(*dk, c);
  // Split by output row only, at tile boundaries; never inside a dot product. A
  // decode step's GEMV only needs its own tile's rows, which halves a small
  // matrix evenly (k / v 128 x 896: 64 + 64 rows, not 72 + 56).
  r.grain = streams(r.p, n_tokens) ? r.p.gemv->rows : r.p.row_block;
  if (dk->bf16_act) {
    a.xb_stride = (a.in + 31) / 32 * 32;
    a.xb = shared ? shared->a.xb : bf16_activations(x, n_tokens, a.in, a.xb_stride, dk->bf16_act, pool);
    a.x_row_bytes = a.xb_stride * 2;
    r.widened = shared ? shared->widened : nullptr;
    // Only the FMA tiles read them: a GEMM (not streaming) with at least one full tile of
    // rows (else the rows left over run on vdpbf16ps tiles, on xb) not split in column blocks.
    if (dk->bf16_widen && r.p.gemm->fma && !streams(r.p, n_tokens) && a.out >= r.p.gemm->rows &&
        a.in <= dk->bf16_widen_max_in) {
      if (!r.widened) r.widened = widened_activations(a.xb, n_tokens, a.xb_stride, dk->bf16_widen, pool);
      a.xw = r.widened;
      a.x_row_bytes = a.xb_stride * 4;
    }
  }
}

// Runs n <= kMatmulManyMax prepared matmuls: each one's tiles (grains of rows) in one
// index space, claimed by the pool in pieces (ThreadPool::claim_each), or on this
// thread when all together are too small to split.
void run_prepared(const Prepared* r, int n, ThreadPool& pool) {
  MX_CHECK(n >= 0 && n <= kMatmulManyMax, "matmul: {} matmuls in one region", n);
  int64_t first_unit[kMatmulManyMax + 1] = {0}, macs = 0;
  for (int i = 0; i < n; ++i) {
    first_unit[i + 1] = first_unit[i] + (r[i].empty ? 0 : (r[i].a.out + r[i].grain - 1) / r[i].grain);
    macs += r[i].empty ? 0 : r[i].macs();
  }
  auto units = [&](int64_t b, int64_t e) {
    for (int i = 0; i < n; ++i) {
      const int64_t lo = std::max(b, first_unit[i]), hi = std::min(e, first_unit[i + 1]);
      if (lo < hi)
        r[i].rows((lo - first_unit[i]) * r[i].grain, std::min(r[i].a.out, (hi - first_unit[i]) * r[i].grain));
    }
  };
  const int64_t total = first_unit[n];
  // Small, or inline anyway (a nested call, e.g. an MoE expert on its worker): one
  // pass, since pieces run one after another would each re-read the activations.
  if (macs < kMinParallelMacs || pool.runs_inline()) return units(0, total);
  // Pieces of the index space, claimed by threads as they free up: kPiecesPerThread
  // per thread, so one slowed thread hands the others its last pieces.
  const int64_t pieces = std::min(total, int64_t(pool.size()) * kPiecesPerThread);
  pool.claim_each(pieces, [&](int64_t i, int) { units(total * i / pieces, total * (i + 1) / pieces); });
}

}  // namespace

void run_kernels(const Kernels& k, Isa isa, float* y, const float* x, const Tensor& w,
                 int64_t n_tokens, ThreadPool& pool, const KernelConfig* cfg, bool bf16_act) {
  Prepared r;
  prepare(r, k, isa, y, x, w, n_tokens, pool, cfg, bf16_act, nullptr);
  run_prepared(&r, 1, pool);
}

}  // namespace matmul_detail

using namespace matmul_detail;

void matmul(float* y, const float* x, const Tensor& w, int64_t n_tokens, ThreadPool& pool, Bf16Act act) {
  static const Isa isa = best_isa();  // resolved once per process
  static const Kernels& k = kernels(isa);
  run_kernels(k, isa, y, x, w, n_tokens, pool, nullptr, act == Bf16Act::Auto && bf16_activations_setting());
}

void matmul_many(float* const* ys, const float* x, const Tensor* const* ws, int n, int64_t n_tokens,
                 ThreadPool& pool) {
  static const Isa isa = best_isa();
  static const Kernels& k = kernels(isa);
  const bool bf16_act = bf16_activations_setting();
  constexpr int kMax = kMatmulManyMax;
  bool together = n <= kMax;
  for (int i = 0; i < n && together; ++i)
    together = ws[i]->ndim == 2 && ws[i]->dtype == ws[0]->dtype && ws[i]->shape[1] == ws[0]->shape[1];
  if (!together) {
    for (int i = 0; i < n; ++i) run_kernels(k, isa, ys[i], x, *ws[i], n_tokens, pool, nullptr, bf16_act);
    return;
  }
  Prepared r[kMax];
  const Prepared* shared = nullptr;
  for (int i = 0; i < n; ++i) {
    prepare(r[i], k, isa, ys[i], x, *ws[i], n_tokens, pool, nullptr, bf16_act, shared);
    // The latest: it carries what every one before it made (the widened activations
    // from the first that needed them on).
    if (!r[i].empty) shared = &r[i];
  }
  run_prepared(r, n, pool);
}

void matmul_isa(Isa isa, float* y, const float* x, const Tensor& w, int64_t n_tokens,
                ThreadPool& pool) {
  MX_CHECK(isa_supported(isa), "matmul: ISA {} is not supported by this CPU", isa_name(isa));
  run_kernels(kernels(isa), isa, y, x, w, n_tokens, pool, nullptr, bf16_activations_setting());
}

void matmul_with_config(Isa isa, const KernelConfig& cfg, float* y, const float* x,
                        const Tensor& w, int64_t n_tokens, ThreadPool& pool, Bf16Act act) {
  MX_CHECK(isa_supported(isa), "matmul: ISA {} is not supported by this CPU", isa_name(isa));
  run_kernels(kernels(isa), isa, y, x, w, n_tokens, pool, &cfg, act == Bf16Act::Auto && bf16_activations_setting());
}

bool matmul_bf16_activations(Isa isa) {
  return isa_supported(isa) && kernels(isa).bf16_dot.ok() && bf16_activations_setting();
}

bool set_matmul_bf16_activations(bool on) { return bf16_activations_setting().exchange(on); }

bool matmul_amx(Isa isa) {
  return matmul_bf16_activations(isa) && kernels(isa).bf16_amx.ok() && amx_setting();
}

bool set_matmul_amx(bool on) { return amx_setting().exchange(on); }

std::string matmul_amx_status() {
  if (!amx_setting())
    return amx_mode() == AmxMode::Off ? "off: switched off (MXSERVE_AMX=0)" : "off: switched off (set_matmul_amx)";
  // (Not a step into the AMX file, compiled for AVX-512, on a CPU without it.)
  if (!cpu_features().avx512bf16) return "off: this CPU has no AVX512-BF16, nor AMX";
  const std::string& s = amx_status();
  if (s.rfind("on", 0) == 0 && !matmul_bf16_activations(best_isa()))
    return "off: BF16 weights multiply f32 activations (MXSERVE_BF16_ACTIVATIONS=0)";
  return s;
}

const char* matmul_amx_name(Isa isa) {
  if (!matmul_amx(isa)) return "";
  return amx_emulated() ? "amx-emulated" : "amx";
}

std::string matmul_isa_label(Isa isa) {
  const std::string amx = matmul_amx_name(isa);
  return std::string(isa_name(isa)) + (amx.empty() ? "" : " + " + amx);
}

std::vector<KernelConfig> matmul_candidates(Isa isa, DType dtype) {
  std::vector<KernelConfig> v;
  if (!isa_supported(isa)) return v;
  const DtypeKernels* dk = dtype_kernels(kernels(isa), dtype, bf16_activations_setting());
  if (!dk || !dk->ok()) return v;
  if (dk->rows) return {default_kernel_config("matmul", dtype, isa)};
  // The SIMD GEMV tiles prefetch in software (AVX2's default none: its generic entries
  // were measured without it).
  const std::vector<int> pfs = isa == Isa::Avx512 ? std::vector<int>{1024, 0, 512, 2048}
                               : isa == Isa::Avx2 ? std::vector<int>{0, 512, 1024, 2048}
                                                  : std::vector<int>{0};
  // GEMM blocking {chunk_kib, rowblock_kib}: activations in L2 with every row streaming
  // past, or an L1-sized chunk against L2-sized row blocks. The float tiles default to
  // the first. The FMA tiles of bf16 activations widen a tile's rows once per chunk,
  // so they also try a larger one (1024 KiB: 896 x 4864 1.24x on Intel Xeon). The
  // MXFP4 GEMMs (the regrouping ones) unpack a tile's rows once per chunk of tokens, so
  // an L2-sized chunk against L2-sized row blocks (an L1-sized chunk is 4 tokens of
  // 4864-wide rows); AVX2's first try 128 KiB (best of 32, 128 and 256 on Intel Xeon
  // for its 4 x 1 tile, BENCHMARKS.md). A kernel set without the
  // regrouping GEMM starts from the L1-sized chunk.
  std::vector<std::pair<int, int>> blk = {{256, 0}, {32, 512}};
  if (dtype == DType::MXFP4) {
    blk = dk->mx_regroup ? std::vector<std::pair<int, int>>{{256, 256}, {32, 256}, {256, 0}}
                         : std::vector<std::pair<int, int>>{{32, 256}, {256, 0}};
    if (isa == Isa::Avx2 && dk->mx_regroup) blk.insert(blk.begin(), {128, 256});
  } else if (isa == Isa::Avx2) {
    // AVX2's float tiles also try smaller row blocks (CPUs with 512 KiB of L2, AMD Zen 3:
    // 896 x 4864 bf16, 64 tokens, 8.8-9.2 ms against 9.9 at 32 / 512).
    blk.insert(blk.end(), {{24, 256}, {24, 128}});
  }
  std::vector<std::pair<int, int>> fma_blk = blk;  // the float tiles', a larger chunk first
  fma_blk.insert(fma_blk.begin(), {1024, 0});
  for (int pf : pfs)
    for (const Gemv& g : dk->gemv)
      for (const Gemm& m : dk->gemm)
        for (auto [ck, rb] : m.fma ? fma_blk : blk) v.push_back({g.rows, m.tokens, m.rows, pf, ck, rb, m.fma});
  return v;
}

}  // namespace mx
