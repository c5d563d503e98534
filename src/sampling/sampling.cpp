// Bit-exact results need a*b+c to stay two roundings even where the target has FMA,
// and IEEE semantics (rounding tricks, NaN tests) throughout.
#if defined(__FAST_MATH__)
#error "sampling/sampling.cpp must not be compiled with -ffast-math"
#endif
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "sampling/sampling.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#if defined(__SSE2__) && !defined(MX_SAMPLING_NO_SIMD)
#define MX_SAMPLING_SSE2 1
#include <emmintrin.h>
#endif

#include "core/error.h"

namespace mx {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kGreedyTemperature = 1e-5f;  // below this: greedy (vLLM's _SAMPLING_EPS)
constexpr size_t kBlock = 256;               // dense mode: tokens per partial sum
constexpr int kHeapTopK = 256;               // top-k up to this uses a bounded heap
constexpr size_t kProbe = 1024;              // larger top-k: logits sampled for a cut-off

// exp((z - m) * inv_t) for z <= m: Cephes expf (Cody-Waite reduction + degree-6
// polynomial; checked on every float in [-87, 0]: <= 1.4 ulp, monotone), exactly 1 at
// z = m, 0 below e^-87 (~1.6e-38, negligible next to the max's 1), for -inf and for NaN.
// Only IEEE + and *, so every libm and every platform gets the same bits; the SSE2 path
// does the very same operations 4 at a time.
constexpr float kExpLo = -87.0f;
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: (t + kRound) - kRound rounds t
constexpr float kLn2Hi = 0.693359375f;
constexpr float kLn2Lo = -2.12194440e-4f;
constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f,
                kP3 = 4.1665795894e-2f, kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;

inline float exp_shifted(float z, float m, float inv_t) {
  const float d = (z - m) * inv_t;
  const float x = d > kExpLo ? d : kExpLo;  // NaN -> kExpLo, like maxps
  const float t = x * kLog2e;
  const float n = (t + kRound) - kRound;
  float r = x - n * kLn2Hi;
  r = r - n * kLn2Lo;
  const float r2 = r * r;
  float p = kP0;
  p = p * r + kP1;
  p = p * r + kP2;
  p = p * r + kP3;
  p = p * r + kP4;
  p = p * r + kP5;
  const float y = p * r2 + r + 1.0f;
  const float scale = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return d >= kExpLo ? y * scale : 0.0f;
}

void exp_all(const float* z, float* e, int64_t n, float m, float inv_t) {
  int64_t i = 0;
#if defined(MX_SAMPLING_SSE2)
  const __m128 vm = _mm_set1_ps(m), vt = _mm_set1_ps(inv_t), lo = _mm_set1_ps(kExpLo);
  for (; i + 4 <= n; i += 4) {
    const __m128 d = _mm_mul_ps(_mm_sub_ps(_mm_loadu_ps(z + i), vm), vt);
    const __m128 ok = _mm_cmpge_ps(d, lo);
    const __m128 x = _mm_max_ps(d, lo);
    const __m128 t = _mm_mul_ps(x, _mm_set1_ps(kLog2e));
    const __m128 nn = _mm_sub_ps(_mm_add_ps(t, _mm_set1_ps(kRound)), _mm_set1_ps(kRound));
    __m128 r = _mm_sub_ps(x, _mm_mul_ps(nn, _mm_set1_ps(kLn2Hi)));
    r = _mm_sub_ps(r, _mm_mul_ps(nn, _mm_set1_ps(kLn2Lo)));
    const __m128 r2 = _mm_mul_ps(r, r);
    __m128 p = _mm_set1_ps(kP0);
    p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(kP1));
    p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(kP2));
    p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(kP3));
    p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(kP4));
    p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(kP5));
    const __m128 y = _mm_add_ps(_mm_add_ps(_mm_mul_ps(p, r2), r), _mm_set1_ps(1.0f));
    const __m128i bits =
        _mm_slli_epi32(_mm_add_epi32(_mm_cvttps_epi32(nn), _mm_set1_epi32(127)), 23);
    _mm_storeu_ps(e + i, _mm_and_ps(_mm_mul_ps(y, _mm_castsi128_ps(bits)), ok));
  }
#endif
  for (; i < n; ++i) e[i] = exp_shifted(z[i], m, inv_t);
}

// Largest non-NaN value (-inf if none). Lanes keep the compiler free to vectorise.
float max_value(const float* x, int64_t n) {
  constexpr int L = 16;
  float acc[L];
  for (float& a : acc) a = -kInf;
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    for (int j = 0; j < L; ++j) acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
  }
  float m = -kInf;
  for (float a : acc) m = a > m ? a : m;
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

// Sum in a fixed order: lane j of 8 double accumulators takes elements i = j (mod 8),
// lanes are added 0..7, then the tail. The SSE2 path computes exactly the same sums.
double sum_floats(const float* e, size_t n) {
  constexpr size_t L = 8;
  double acc[L] = {};
  size_t i = 0;
#if defined(MX_SAMPLING_SSE2)
  __m128d a0 = _mm_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
  for (; i + L <= n; i += L) {
    const __m128 lo = _mm_loadu_ps(e + i), hi = _mm_loadu_ps(e + i + 4);
    a0 = _mm_add_pd(a0, _mm_cvtps_pd(lo));
    a1 = _mm_add_pd(a1, _mm_cvtps_pd(_mm_movehl_ps(lo, lo)));
    a2 = _mm_add_pd(a2, _mm_cvtps_pd(hi));
    a3 = _mm_add_pd(a3, _mm_cvtps_pd(_mm_movehl_ps(hi, hi)));
  }
  _mm_storeu_pd(acc + 0, a0);
  _mm_storeu_pd(acc + 2, a1);
  _mm_storeu_pd(acc + 4, a2);
  _mm_storeu_pd(acc + 6, a3);
#else
  for (; i + L <= n; i += L) {
    for (size_t j = 0; j < L; ++j) acc[j] += e[i + j];
  }
#endif
  double s = 0;
  for (double a : acc) s += a;
  for (; i < n; ++i) s += e[i];
  return s;
}

// Total order of candidates: higher logit first, lower id on ties.
constexpr auto better = [](const auto& a, const auto& b) {
  return a.z > b.z || (a.z == b.z && a.id < b.id);
};

// Reorders c[0, n) so that c[0, r) holds the r best candidates (any order), r being the
// smallest count whose weights reach `target` (n if they never do). Weighted quickselect
// with our own partition, so the outcome does not depend on the standard library.
template <class Cand, class Weight>
size_t select_prefix(Cand* c, size_t n, double target, Weight weight) {
  size_t lo = 0, hi = n;  // c[0, lo) chosen, c[hi, n) rejected
  double need = target;
  for (int rounds = 0; hi - lo > 24 && rounds < 64; ++rounds) {
    const size_t mid = lo + (hi - lo) / 2;
    if (better(c[mid], c[lo])) std::swap(c[mid], c[lo]);
    if (better(c[hi - 1], c[mid])) {
      std::swap(c[hi - 1], c[mid]);
      if (better(c[mid], c[lo])) std::swap(c[mid], c[lo]);
    }
    std::swap(c[mid], c[hi - 1]);  // median of three as the pivot, parked at the end
    const Cand pv = c[hi - 1];
    size_t i = lo;
    double w = 0;
    for (size_t j = lo; j + 1 < hi; ++j) {  // branch-free Lomuto
      const Cand x = c[j];
      const bool b = (x.z > pv.z) | ((x.z == pv.z) & (x.id < pv.id));
      w += weight(x) * static_cast<double>(b);
      c[j] = c[i];
      c[i] = x;
      i += b;
    }
    std::swap(c[i], c[hi - 1]);
    if (w >= need) {
      hi = i;
    } else if (w + weight(pv) >= need) {
      return i + 1;
    } else {
      need -= w + weight(pv);
      lo = i + 1;
    }
  }
  std::sort(c + lo, c + hi, better);  // unique result: `better` is a total order
  double acc = 0;
  for (size_t j = lo; j < hi; ++j) {
    acc += weight(c[j]);
    if (acc >= need) return j + 1;
  }
  return hi;
}

inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

// ---------------------------------------------------------------- params

void SamplingParams::validate() const {
  MX_CHECK(std::isfinite(temperature) && temperature >= 0.0f,
           "sampling: temperature must be a finite number >= 0 (0 = greedy), got {}",
           temperature);
  MX_CHECK(top_k >= 0, "sampling: top_k must be >= 0 (0 = off), got {}", top_k);
  MX_CHECK(top_p > 0.0f && top_p <= 1.0f, "sampling: top_p must be in (0, 1], got {}", top_p);
  MX_CHECK(min_p >= 0.0f && min_p <= 1.0f, "sampling: min_p must be in [0, 1], got {}", min_p);
  MX_CHECK(presence_penalty >= -2.0f && presence_penalty <= 2.0f,
           "sampling: presence_penalty must be in [-2, 2], got {}", presence_penalty);
  MX_CHECK(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f,
           "sampling: frequency_penalty must be in [-2, 2], got {}", frequency_penalty);
  MX_CHECK(std::isfinite(repetition_penalty) && repetition_penalty > 0.0f,
           "sampling: repetition_penalty must be a finite number > 0 (1 = off), got {}",
           repetition_penalty);
}

bool SamplingParams::greedy() const { return temperature < kGreedyTemperature; }

// ---------------------------------------------------------------- rng

void Rng::reseed(uint64_t seed) {
  uint64_t x = seed;
  for (auto& s : s_) {  // splitmix64
    uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    s = z ^ (z >> 31);
  }
}

uint64_t Rng::next_u64() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

// ---------------------------------------------------------------- free functions

int32_t argmax(const float* x, int64_t n) {
  MX_CHECK(n > 0, "argmax: empty input");
  const float m = max_value(x, n);
  int64_t i = 0;
  if (m == -kInf) {  // only -inf and NaN: the first -inf, or 0 if all NaN
    while (i < n && std::isnan(x[i])) ++i;
    return i == n ? 0 : static_cast<int32_t>(i);
  }
  while (x[i] != m) ++i;
  return static_cast<int32_t>(i);
}

int32_t sample_categorical(std::span<const float> weights, float u) {
  double total = 0;
  for (float w : weights) {
    MX_CHECK(w >= 0.0f && w <= std::numeric_limits<float>::max(),
             "sample_categorical: weights must be finite and >= 0, got {}", w);
    total += w;
  }
  MX_CHECK(total > 0, "sample_categorical: weights sum to 0");
  const double target = static_cast<double>(u) * total;
  double cum = 0;
  int64_t last = -1;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (weights[i] <= 0.0f) continue;
    cum += weights[i];
    last = static_cast<int64_t>(i);
    if (cum > target) return static_cast<int32_t>(i);
  }
  return static_cast<int32_t>(last);  // only reachable through rounding
}

// ---------------------------------------------------------------- sampler

Sampler::Sampler(const SamplingParams& params, int64_t vocab_size)
    : params_(params), vocab_(vocab_size), rng_(params.seed) {
  params_.validate();
  MX_CHECK(vocab_size > 0 && vocab_size <= std::numeric_limits<int32_t>::max(),
           "sampling: vocab_size must be in [1, 2^31), got {}", vocab_size);
  greedy_ = params_.greedy();
  penalize_ = params_.repetition_penalty != 1.0f || params_.frequency_penalty != 0.0f ||
              params_.presence_penalty != 0.0f;
  const auto v = static_cast<size_t>(vocab_size);
  if (penalize_) {
    work_.resize(v);
    counts_.assign(v, 0);
  }
  if (!greedy_) {
    e_.resize(v);
    const bool filtered = (params_.top_k > 0 && params_.top_k < vocab_size) ||
                          params_.top_p < 1.0f || params_.min_p > 0.0f;
    if (filtered) {
      cand_.resize(v);
      if (params_.top_k > kHeapTopK && params_.top_k < vocab_size) probe_.resize(kProbe);
    } else {
      blocks_.resize((v + kBlock - 1) / kBlock);
    }
  }
}

const float* Sampler::apply_penalties(const float* logits, std::span<const int32_t> history) {
  if (!penalize_ || history.empty()) return logits;
  for (int32_t t : history) {
    MX_CHECK(t >= 0 && t < vocab_, "sampling: history token {} out of range [0, {})", t,
             vocab_);
  }
  std::memcpy(work_.data(), logits, static_cast<size_t>(vocab_) * sizeof(float));
  for (int32_t t : history) ++counts_[static_cast<size_t>(t)];
  const float rp = params_.repetition_penalty;
  const float freq = params_.frequency_penalty;
  const float pres = params_.presence_penalty;
  for (int32_t t : history) {
    const auto k = static_cast<size_t>(t);
    const int32_t c = counts_[k];
    if (c == 0) continue;  // a repeated id, already handled
    counts_[k] = 0;
    float l = work_[k];
    if (rp != 1.0f) l = l < 0.0f ? l * rp : l / rp;
    l -= static_cast<float>(c) * freq + pres;
    work_[k] = l;
  }
  return work_.data();
}

int32_t Sampler::greedy_pick(const float* z) const {
  const int32_t best = argmax(z, vocab_);
  MX_CHECK(z[best] > -kInf, "sampling: every logit is -inf or NaN");
  return best;
}

void Sampler::build(const float* z) {
  const int64_t V = vocab_;
  const auto nv = static_cast<size_t>(V);
  const SamplingParams& p = params_;
  const bool topk = p.top_k > 0 && p.top_k < V;
  const bool topp = p.top_p < 1.0f;
  const bool minp = p.min_p > 0.0f;
  float* e = e_.data();

  const float m = max_value(z, V);
  MX_CHECK(m > -kInf, "sampling: every logit is -inf or NaN");
  if (m == kInf) {  // +inf logits share all the mass
    for (size_t i = 0; i < nv; ++i) e[i] = z[i] == kInf ? 1.0f : 0.0f;
  } else {
    exp_all(z, e, V, m, 1.0f / p.temperature);
  }
  // Sum over the whole vocabulary, block by block (also the dense mode's index).
  auto total_mass = [&](double* blocks) {
    double total = 0;
    for (size_t b = 0, i = 0; i < nv; ++b, i += kBlock) {
      const double s = sum_floats(e + i, std::min(kBlock, nv - i));
      if (blocks) blocks[b] = s;
      total += s;
    }
    return total;
  };

  if (!topk && !topp && !minp) {
    dense_ = true;
    mass_ = total_mass(blocks_.data());
    return;
  }
  dense_ = false;
  Cand* c = cand_.data();
  size_t n = 0;
  const auto k = static_cast<size_t>(p.top_k);

  if (topk && p.top_k <= kHeapTopK) {
    // Bounded heap; `better` as the heap's "less" keeps the worst kept token on top.
    size_t i = 0;
    for (; i < nv && n < k; ++i) {
      if (e[i] > 0.0f) {
        c[n++] = {z[i], e[i], static_cast<int32_t>(i)};
        std::push_heap(c, c + n, better);
      }
    }
    if (n == k) {
      for (; i < nv; ++i) {
        if (z[i] > c[0].z) {  // ids ascend, so an equal logit never beats the top
          std::pop_heap(c, c + n, better);
          c[n - 1] = {z[i], e[i], static_cast<int32_t>(i)};
          std::push_heap(c, c + n, better);
        }
      }
    }
    std::sort(c, c + n, better);
    if (topp) {
      double mass = 0;
      for (size_t j = 0; j < n; ++j) mass += c[j].e;
      const double goal = static_cast<double>(p.top_p) * mass;
      double cum = 0;
      for (size_t j = 0; j < n; ++j) {
        cum += c[j].e;
        if (cum >= goal) {
          n = j + 1;
          break;
        }
      }
    }
    while (minp && c[n - 1].e < p.min_p) --n;  // sorted: min-p cuts a suffix; c[0].e == 1
  } else {
    // Pre-filter: min-p keeps an upper set, so it can go first unless top-p needs the full
    // top-k mass; top-p never reaches tokens below thr (together they weigh less than
    // (1 - top_p) / 2 of the mass).
    float floor = std::numeric_limits<float>::denorm_min();  // i.e. e > 0
    double total = 0;
    if (minp && !(topk && topp)) floor = std::max(floor, p.min_p);
    if (topp && !topk) {
      total = total_mass(nullptr);
      floor = std::max(floor, static_cast<float>(0.5 * (1.0 - p.top_p) * total / V));
    }
    // Large top-k: a cut-off logit from a strided sample of the vocabulary, chosen so
    // that about 1.5 k tokens (comfortably >= k) are above it; checked below.
    float cut = -kInf;
    if (topk) {
      const size_t stride = (nv + kProbe - 1) / kProbe;  // <= kProbe slots
      size_t slots = 0, live = 0;
      for (size_t i = 0; i < nv; i += stride, ++slots) {
        if (e[i] >= floor) probe_[live++] = z[i];
      }
      const size_t rank = (3 * k * slots) / (2 * nv) + 8;  // 1-based rank in the sample
      if (rank <= live) {
        float* q = probe_.data();
        std::nth_element(q, q + (rank - 1), q + live, std::greater<float>());
        cut = q[rank - 1];  // the value is unique, whatever the algorithm
      }
    }
    auto compact = [&] {
      n = 0;
      for (size_t i = 0; i < nv; ++i) {  // branch-free
        c[n] = {z[i], e[i], static_cast<int32_t>(i)};
        n += (e[i] >= floor) & (z[i] >= cut);
      }
    };
    compact();
    if (n < k && cut > -kInf) {  // the sample misled us: take every live token
      cut = -kInf;
      compact();
    }
    if (topk && n > k) {
      n = select_prefix(c, n, static_cast<double>(k), [](const Cand&) { return 1.0; });
    }
    if (topp) {
      double mass = total;
      if (topk) {
        mass = 0;
        for (size_t j = 0; j < n; ++j) mass += c[j].e;
        float f = static_cast<float>(0.5 * (1.0 - p.top_p) * mass / static_cast<double>(n));
        if (minp) f = std::max(f, p.min_p);
        size_t w = 0;
        for (size_t j = 0; j < n; ++j) {
          if (c[j].e >= f) c[w++] = c[j];
        }
        n = w;
      }
      n = select_prefix(c, n, static_cast<double>(p.top_p) * mass,
                        [](const Cand& x) { return static_cast<double>(x.e); });
    }  // (min-p without top-p went into the pre-filter)
  }
  double mass = 0;
  for (size_t j = 0; j < n; ++j) mass += c[j].e;
  n_ = n;
  mass_ = mass;
}

int32_t Sampler::sample(const float* logits, std::span<const int32_t> history) {
  const float* z = apply_penalties(logits, history);
  if (greedy_) return greedy_pick(z);
  build(z);
  const double target = static_cast<double>(rng_.uniform()) * mass_;
  double cum = 0;
  if (!dense_) {
    for (size_t j = 0; j < n_; ++j) {
      cum += cand_[j].e;
      if (cum > target) return cand_[j].id;
    }
    return cand_[n_ - 1].id;  // only reachable through rounding
  }
  // Dense: find the block, then the token inside it.
  const float* e = e_.data();
  const size_t nv = static_cast<size_t>(vocab_);
  size_t b = 0;
  for (; b + 1 < blocks_.size() && cum + blocks_[b] <= target; ++b) cum += blocks_[b];
  const size_t lo = b * kBlock, hi = std::min(nv, lo + kBlock);
  size_t last = lo;
  for (size_t i = lo; i < hi; ++i) {
    if (e[i] <= 0.0f) continue;
    cum += e[i];
    last = i;
    if (cum > target) return static_cast<int32_t>(i);
  }
  if (e[last] > 0.0f) return static_cast<int32_t>(last);  // rounding inside the block
  for (size_t i = nv; i-- > 0;) {  // rounding at the very end: the last live token
    if (e[i] > 0.0f) return static_cast<int32_t>(i);
  }
  return 0;  // unreachable: build() checked that some token is live
}

void Sampler::probs(const float* logits, std::span<const int32_t> history, float* out) {
  const float* z = apply_penalties(logits, history);
  if (greedy_) {
    const int32_t best = greedy_pick(z);
    std::fill(out, out + vocab_, 0.0f);
    out[best] = 1.0f;
    return;
  }
  build(z);
  if (dense_) {
    const float* e = e_.data();
    for (int64_t i = 0; i < vocab_; ++i) {
      out[i] = static_cast<float>(static_cast<double>(e[i]) / mass_);
    }
    return;
  }
  std::fill(out, out + vocab_, 0.0f);
  for (size_t j = 0; j < n_; ++j) {
    out[cand_[j].id] = static_cast<float>(static_cast<double>(cand_[j].e) / mass_);
  }
}

}  // namespace mx
