// Element-wise and row-wise ops, plain C++ (compiled for baseline x86-64; the
// loops are written so the compiler can vectorize them without reassociating).
// Every reduction has a fixed order that depends only on the length, so results
// are the same whatever the batch, thread count or ISA of the matmul kernels.
#include "backends/cpu/ops.h"

#include <cmath>
#include <limits>

#include "core/error.h"
#include "backends/cpu/activation.h"

namespace mx {

namespace {

// Reads element i of a F32 or BF16 vector parameter (norm weight, bias).
class ParamVec {
 public:
  ParamVec(const Tensor& t, int64_t n, const char* what) : t_(t) {
    MX_CHECK(t.dtype == DType::F32 || t.dtype == DType::BF16, "{}: {} weights are not supported",
             what, dtype_name(t.dtype));
    MX_CHECK(t.numel() == n, "{}: weight has {} elements, expected {}", what, t.numel(), n);
  }
  // Calls f(float getter) with the dtype resolved outside the hot loop.
  template <class F>
  void visit(F&& f) const {
    if (t_.dtype == DType::F32) {
      const float* p = t_.as<float>();
      f([p](int64_t i) { return p[i]; });
    } else {
      const uint16_t* p = t_.as<uint16_t>();
      f([p](int64_t i) { return bf16_to_f32(p[i]); });
    }
  }

 private:
  const Tensor& t_;
};

// Sum of squares in double with 4 interleaved partials (element i goes to partial
// i % 4), combined as (p0 + p1) + (p2 + p3). Double keeps the norm accurate for long
// rows; the partials break the add-latency chain.
double sum_squares(const float* x, int64_t n) {
  double p[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int l = 0; l < 4; ++l) p[l] += double(x[i + l]) * double(x[i + l]);
  for (int l = 0; i + l < n; ++l) p[l] += double(x[i + l]) * double(x[i + l]);
  return (p[0] + p[1]) + (p[2] + p[3]);
}

}  // namespace

void rmsnorm(float* y, const float* x, const Tensor& w, int64_t rows, int64_t dim, float eps) {
  ParamVec(w, dim, "rmsnorm").visit([&](auto wv) {
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * dim;
      float* yr = y + r * dim;  // may alias xr: the sum is taken before any write
      const float inv = float(1.0 / std::sqrt(sum_squares(xr, dim) / double(dim) + double(eps)));
      for (int64_t i = 0; i < dim; ++i) yr[i] = (xr[i] * inv) * wv(i);
    }
  });
}

void add_bias(float* x, const Tensor& b, int64_t rows, int64_t dim) {
  ParamVec(b, dim, "add_bias").visit([&](auto bv) {
    for (int64_t r = 0; r < rows; ++r) {
      float* xr = x + r * dim;
      for (int64_t i = 0; i < dim; ++i) xr[i] += bv(i);
    }
  });
}

void silu_mul(float* y, const float* g, const float* u, int64_t n) { silu_mul_isa(best_isa(), y, g, u, n); }

void silu_mul_isa(Isa isa, float* y, const float* g, const float* u, int64_t n) {
  MX_CHECK(isa_supported(isa), "silu_mul: ISA {} is not supported by this CPU", isa_name(isa));
  static const activation_detail::SiluMulFn avx512 =
      isa_supported(Isa::Avx512) ? activation_detail::avx512_silu_mul() : nullptr;
  static const activation_detail::SiluMulFn avx2 =
      isa_supported(Isa::Avx2) ? activation_detail::avx2_silu_mul() : nullptr;
  if (isa == Isa::Avx512) return avx512(y, g, u, n);
  if (isa == Isa::Avx2) return avx2(y, g, u, n);
  for (int64_t i = 0; i < n; ++i) y[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

void add_inplace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

// Entries equal to -inf get probability 0. If every entry is -inf there is nothing
// to normalise over and the result is all zeros (rather than NaN).
void softmax_inplace(float* x, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  if (m == -std::numeric_limits<float>::infinity()) {
    for (int64_t i = 0; i < n; ++i) x[i] = 0.0f;
    return;
  }
  double sum = 0;  // sequential, in double: long contexts do not lose the tail mass
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - m);
    sum += x[i];
  }
  const float inv = float(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

// 16 interleaved partials (element i goes to partial i % 16, in increasing i), a
// separate multiply and add per element (no FMA in the baseline ISA), then a fixed
// pairwise tree 16 -> 8 -> 4 -> 2 -> 1 (partial l with l + half).
float dot_f32(const float* a, const float* b, int64_t n) {
  float p[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; ++l) p[l] += a[i + l] * b[i + l];
  for (int l = 0; i + l < n; ++l) p[l] += a[i + l] * b[i + l];
  for (int half = 8; half >= 1; half /= 2)
    for (int l = 0; l < half; ++l) p[l] += p[l + half];
  return p[0];
}

void axpy_f32(float* y, float a, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void rope_rotate(float* x, int n_heads, int stride, int pos, int rotary_dim, bool interleaved, float mscale,
                 const float* inv_freq) {
  const int half = rotary_dim / 2;
  // Angles in double: positions reach 1e5+ and float angle products lose digits.
  float cs[512], sn[512];
  for (int i = 0; i < half; ++i) {
    double a = double(pos) * double(inv_freq[i]);
    cs[i] = float(std::cos(a)) * mscale;
    sn[i] = float(std::sin(a)) * mscale;
  }
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + size_t(h) * stride;
    for (int i = 0; i < half; ++i) {
      float* p0 = interleaved ? v + 2 * i : v + i;
      float* p1 = interleaved ? v + 2 * i + 1 : v + i + half;
      const float a = *p0, b = *p1;
      *p0 = a * cs[i] - b * sn[i];
      *p1 = b * cs[i] + a * sn[i];
    }
  }
}

}  // namespace mx
