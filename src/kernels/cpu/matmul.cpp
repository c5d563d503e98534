// matmul dispatcher and the scalar (portable) kernels. Accumulation scheme and the
// batch-invariance argument: matmul_impl.h.
#include "kernels/cpu/matmul.h"

#include "core/error.h"
#include "kernels/cpu/matmul_impl.h"

namespace mx {
namespace matmul_detail {
namespace {

// Scalar path: 8 lanes in an array, lane l takes the elements i == l (mod 8) in
// increasing order; then the same pairwise tree as the AVX2 hsum.
template <class T>
float dot8(const T* w, const float* x, int64_t in) {
  auto f = [](T v) {
    if constexpr (sizeof(T) == 2) return bf16_to_f32(v);
    else return v;
  };
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= in; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += f(w[i + l]) * x[i + l];
  for (int l = 0; i + l < in; ++l) acc[l] += f(w[i + l]) * x[i + l];
  const float s0 = acc[0] + acc[4], s1 = acc[1] + acc[5], s2 = acc[2] + acc[6],
              s3 = acc[3] + acc[7];
  return (s0 + s2) + (s1 + s3);
}

template <class T>
void scalar_rows(const Args& a, int64_t r0, int64_t r1) {
  const T* w = static_cast<const T*>(a.w);
  // Row outer, tokens inner: one weight row stays in L1 while all tokens use it.
  for (int64_t o = r0; o < r1; ++o)
    for (int64_t t = 0; t < a.n_tokens; ++t)
      a.y[t * a.out + o] = dot8(w + o * a.in, a.x + t * a.in, a.in);
}

}  // namespace

Kernels scalar_kernels() { return {scalar_rows<float>, scalar_rows<uint16_t>, 1}; }

}  // namespace matmul_detail

namespace {
using namespace matmul_detail;

bool isa_supported(Isa isa) {
  const CpuFeatures& f = cpu_features();
  switch (isa) {
    case Isa::Scalar: return true;
    case Isa::Avx2: return f.avx2 && f.fma;
    case Isa::Avx512: return f.avx512f && f.avx512bw && f.avx512vl;
  }
  return false;
}

const Kernels& kernels(Isa isa) {
  static const Kernels k[3] = {scalar_kernels(), avx2_kernels(), avx512_kernels()};
  return k[int(isa)];
}

// Below this many multiply-adds a parallel_for costs more than it saves.
constexpr int64_t kMinParallelMacs = 1 << 15;

void run(const Kernels& k, float* y, const float* x, const Tensor& w, int64_t n_tokens,
         ThreadPool& pool) {
  MX_CHECK(w.ndim == 2, "matmul: weight must be 2-D, got {}", w.shape_str());
  MX_CHECK(n_tokens >= 0, "matmul: n_tokens = {}", n_tokens);
  RowsFn fn = w.dtype == DType::F32 ? k.f32 : w.dtype == DType::BF16 ? k.bf16 : nullptr;
  MX_CHECK(fn, "matmul: no kernel for {} weights", dtype_name(w.dtype));
  const Args a{y, x, w.data, n_tokens, w.shape[0], w.shape[1]};
  if (n_tokens == 0 || a.out == 0) return;
  if (a.out * a.in * n_tokens < kMinParallelMacs) {
    fn(a, 0, a.out);
    return;
  }
  // Split by output row only, at tile boundaries; never inside a dot product.
  pool.parallel_for(a.out, [&](int64_t b, int64_t e) { fn(a, b, e); }, k.row_block);
}

}  // namespace

void matmul(float* y, const float* x, const Tensor& w, int64_t n_tokens, ThreadPool& pool) {
  static const Kernels& k = kernels(best_isa());  // resolved once per process
  run(k, y, x, w, n_tokens, pool);
}

void matmul_isa(Isa isa, float* y, const float* x, const Tensor& w, int64_t n_tokens,
                ThreadPool& pool) {
  MX_CHECK(isa_supported(isa), "matmul: ISA {} is not supported by this CPU", isa_name(isa));
  run(kernels(isa), y, x, w, n_tokens, pool);
}

}  // namespace mx
