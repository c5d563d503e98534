#pragma once
// e^x over a SIMD traits class S (simd_avx2.h, simd_avx512.h), written once: x =
// n ln2 + r (Cody-Waite, ln2 in two parts), e^r by Cephes' expf polynomial (S.
// Moshier, Cephes Math Library, expf.c: relative error ~1 ulp on [-ln2/2,
// ln2/2]), then S::times_pow2 scales by 2^n. x is first clamped to [S::kExpMin,
// S::kExpMax]. exp(0) = 1 and exp(-inf) = +0 exactly (the online softmax's
// identities); NaN stays NaN (S::min / S::max return their second operand on NaN).
namespace mx::simd {

template <class S>
inline typename S::F cephes_exp(typename S::F x0) {
  using F = typename S::F;
  F x = S::min(S::set1(S::kExpMax), x0);
  x = S::max(S::set1(S::kExpMin), x);
  const F n = S::round(S::mul(x, S::set1(1.44269504088896341f)));
  F r = S::fnma(n, S::set1(0.693359375f), x);
  r = S::fnma(n, S::set1(-2.12194440e-4f), r);
  const F z = S::mul(r, r);
  F y = S::set1(1.9875691500E-4f);
  y = S::fma(y, r, S::set1(1.3981999507E-3f));
  y = S::fma(y, r, S::set1(8.3334519073E-3f));
  y = S::fma(y, r, S::set1(4.1665795894E-2f));
  y = S::fma(y, r, S::set1(1.6666665459E-1f));
  y = S::fma(y, r, S::set1(5.0000001201E-1f));
  y = S::fma(y, z, r);
  y = S::add(y, S::set1(1.0f));
  return S::times_pow2(y, n, x0);
}

}  // namespace mx::simd
