// exp, erf and tanh as the activations call them: exp_of, erf_of, tanh_of, overloaded for float
// and double so that the float overload never promotes to double.
//
// Device code (nvcc device pass, NVRTC) calls CUDA's own functions. Host float code uses the
// branch-free polynomial versions below instead of libm: libm's expf/erff/tanhf are opaque scalar
// calls, so a loop that calls them never vectorises and the CPU activations ran at 8-15 ns per
// element; these are plain arithmetic and selects that GCC vectorises (measured against double
// libm over every float: see host_float below). Host double keeps libm,
// which f64 needs for its ~1e-12 relative accuracy.
#pragma once

#include "core/math/host_device.hpp"
#include "core/math/numeric.hpp"

#ifndef __CUDACC_RTC__
#include <math.h>
#endif

namespace kf {
namespace math {
namespace host_float {

// c ? a : b, written as a bit blend. Written as ?: (or as a clamp to a constant), GCC threads the
// constant's path through the rest of the function (exp(89) folds to a constant), the loop body
// gets branches, and the loop no longer vectorises except with AVX-512 masks.
KF_HOST_DEVICE float select(bool c, float a, float b) {
  const unsigned int mask = 0u - static_cast<unsigned int>(c);
  return float_from_bits((float_bits(a) & mask) | (float_bits(b) & ~mask));
}

// e^x: x = k ln2 + r with |r| <= ln2/2 (Cody-Waite split of ln2), e^r by Cephes' expf
// polynomial, times 2^k built in the exponent bits. 2^k is applied as two normal halves so that
// results in the subnormal range come out right; above ~88.72 the product overflows to +inf,
// below ~-103.3 it rounds to 0, and NaN propagates through the polynomial.
KF_HOST_DEVICE float exp(float x) {
  x = select(x > 89.0f, 89.0f, x);  // comparisons are false for NaN: NaN passes through
  x = select(x < -104.0f, -104.0f, x);
  // Adding 1.5 * 2^23 rounds x / ln2 to the nearest integer k and leaves k in the low mantissa
  // bits, so k needs no float-to-int conversion. k + 150 is in [0, 279] for the clamped range.
  const float shifter = 12582912.0f;
  const float shifted = x * 1.44269504088896341f + shifter;
  const float k = shifted - shifter;
  const unsigned int k_biased = float_bits(shifted) - float_bits(shifter) + 150u;
  const float r = (x - k * 0.693359375f) - k * -2.12194440e-4f;
  const float r2 = r * r;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r2 + r + 1.0f;
  // 2^k = 2^(k1 - 75) * 2^(k2 - 75) with k1 + k2 = k + 150; float exponent field = k_i - 75 + 127.
  const unsigned int k1 = k_biased >> 1;
  const unsigned int k2 = k_biased - k1;
  return p * float_from_bits((k1 + 52u) << 23) * float_from_bits((k2 + 52u) << 23);
}

// erf(x) = x P(x^2) / Q(x^2) on [-4, 4] (the rational approximation XLA and Eigen use for float);
// |erf(x)| rounds to 1 in float beyond 4 (1 - erf(4) = 1.5e-8). NaN propagates.
template <class Divide>
KF_HOST_DEVICE float erf_rational(float x, Divide divide) {
  x = select(x > 4.0f, 4.0f, x);
  x = select(x < -4.0f, -4.0f, x);
  const float x2 = x * x;
  float p = -2.72614225801306e-10f;
  p = p * x2 + 2.77068142495902e-08f;
  p = p * x2 + -2.10102402082508e-06f;
  p = p * x2 + -5.69250639462346e-05f;
  p = p * x2 + -7.34990630326855e-04f;
  p = p * x2 + -2.95459980854025e-03f;
  p = p * x2 + -1.60960333262415e-02f;
  float q = -1.45660718464996e-05f;
  q = q * x2 + -2.13374055278905e-04f;
  q = q * x2 + -1.68282697438203e-03f;
  q = q * x2 + -7.37332916720468e-03f;
  q = q * x2 + -1.42647390514189e-02f;
  return x * divide(p, q);  // p / q first: x * p would underflow for subnormal x
}

struct IeeeDivide {
  KF_HOST_DEVICE float operator()(float a, float b) const { return a / b; }
};

KF_HOST_DEVICE float erf(float x) { return erf_rational(x, IeeeDivide{}); }

// tanh(x) = x P(x^2) / Q(x^2) on [-7.9053, 7.9053] (the rational approximation XLA, Eigen and
// MLAS use for float), +-1 beyond. One division and no exp: half the cost of 1 - 2 / (e^2x + 1),
// and odd, so small x keeps its relative accuracy. NaN propagates.
// The form ends at 1 - 3e-7 (tanh(7.9053) = 1 - 2.7e-7; tanh rounds to 1 in float from 9.01), so
// past the edge it is replaced by +-1 rather than held there: held, 1 + tanh(u) in GELU's tanh
// form stayed at 3e-7 for every u below -7.9, and GELU of -1e30 came out -1.6e23, not -0.
template <class Divide>
KF_HOST_DEVICE float tanh_rational(float x, Divide divide) {
  constexpr float kEdge = 7.90531110763549805f;
  const float c = select(x > kEdge, kEdge, select(x < -kEdge, -kEdge, x));
  const float x2 = c * c;
  float p = -2.76076847742355e-16f;
  p = p * x2 + 2.00018790482477e-13f;
  p = p * x2 + -8.60467152213735e-11f;
  p = p * x2 + 5.12229709037114e-08f;
  p = p * x2 + 1.48572235717979e-05f;
  p = p * x2 + 6.37261928875436e-04f;
  p = p * x2 + 4.89352455891786e-03f;
  float q = 1.19825839466702e-06f;
  q = q * x2 + 1.18534705686654e-04f;
  q = q * x2 + 2.26843463243900e-03f;
  q = q * x2 + 4.89352518554385e-03f;
  const float t = c * divide(p, q);  // p / q first: c * p would underflow for subnormal c
  return select(x > kEdge, 1.0f, select(x < -kEdge, -1.0f, t));
}

KF_HOST_DEVICE float tanh(float x) { return tanh_rational(x, IeeeDivide{}); }

}  // namespace host_float

#if KF_DEVICE_CODE
KF_HOST_DEVICE float exp_of(float x) { return ::expf(x); }
KF_HOST_DEVICE float erf_of(float x) { return ::erff(x); }
KF_HOST_DEVICE float tanh_of(float x) { return ::tanhf(x); }
#else
KF_HOST_DEVICE float exp_of(float x) { return host_float::exp(x); }
KF_HOST_DEVICE float erf_of(float x) { return host_float::erf(x); }
KF_HOST_DEVICE float tanh_of(float x) { return host_float::tanh(x); }
#endif
KF_HOST_DEVICE double exp_of(double x) { return ::exp(x); }
KF_HOST_DEVICE double erf_of(double x) { return ::erf(x); }
KF_HOST_DEVICE double tanh_of(double x) { return ::tanh(x); }

// The primitive sets an activation formula is evaluated with (the formulas themselves are written
// once, in activation.hpp).
//
// Precise: the functions above, for f32 and f64 results.
struct Precise {
  template <class T>
  static KF_HOST_DEVICE T exp(T x) {
    return exp_of(x);
  }
  // erf(x / sqrt 2), GELU's term.
  template <class T>
  static KF_HOST_DEVICE T erf_over_sqrt2(T x) {
    return erf_of(x * T(0.70710678118654752440));
  }
  // h (1 + erf(x / sqrt 2)) for h = c x with c > 0 (GELU is this with c = 1/2).
  template <class T>
  static KF_HOST_DEVICE T times_one_plus_erf(T h, T x) {
    return h + h * erf_over_sqrt2(x);
  }
  template <class T>
  static KF_HOST_DEVICE T tanh(T x) {
    return tanh_of(x);
  }
  template <class T>
  static KF_HOST_DEVICE T divide(T a, T b) {
    return a / b;
  }
};

#if KF_DEVICE_CODE
// The hardware's approximate 2^x and 1/x (MUFU.EX2, MUFU.RCP) in their flush-to-zero forms
// (also the starting points of the fusion engine's exact division sequences, fusion_ops.hpp).
// __expf and __fdividef use the forms that keep subnormals, for which the compiler wraps each
// MUFU instruction in a test, a select and two rescaling multiplies: four instructions around
// one. Flushing changes only results below 2^-126 (2^x for x < -126, 1/x for |x| > 2^126), which
// the primitive set below turns into zeros that a 16-bit result cannot tell apart from the exact
// value's rounding (f16's smallest subnormal is 2^-24; bf16 loses its own subnormals, which lie
// below 2^-126 and carry at most 2^-126 of absolute error).
namespace hw {
KF_HOST_DEVICE float exp2_approx_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
KF_HOST_DEVICE float rcp_approx_ftz(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// 1/sqrt(x) (MUFU.RSQ): the start of the fusion engine's exact square-root sequences.
KF_HOST_DEVICE float rsqrt_approx_ftz(float x) {
  float y;
  asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
}  // namespace hw
#endif

// For results rounded to f16 or bf16 (relative precision 4.9e-4 and 3.9e-3): on the device, a
// short erf (absolute error 1.5e-7), the rational tanh above, and exp and division through the
// hardware's approximate exponential and reciprocal (hw:: above: a few ulp of float, invisible
// after rounding), about a third of the instructions of CUDA's full-precision erff/expf and IEEE
// division. The 16-bit GELU and SiLU kernels are limited by instruction issue, not memory, with
// the precise set. Host code is memory-bound already and keeps the precise functions.
struct HalfStorage {
#if KF_DEVICE_CODE
  struct FastDivide {
    KF_HOST_DEVICE float operator()(float a, float b) const { return a * hw::rcp_approx_ftz(b); }
  };
  // e^x = 2^(x log2 e): NaN stays NaN, -inf gives +0, results below 2^-126 flush to 0.
  static KF_HOST_DEVICE float exp(float x) { return hw::exp2_approx_ftz(x * 1.44269504088896341f); }
  static KF_HOST_DEVICE float exp2(float x) { return hw::exp2_approx_ftz(x); }
  // |erf(x / sqrt 2)| by Abramowitz & Stegun 7.1.26: erf|z| = 1 - t (a1 + t (a2 + ... a5 t))
  // e^(-z^2) with t = 1 / (1 + p|z|), absolute error <= 1.5e-7, about 13 instructions against 22
  // for the rational form (no clamps: t -> 0 and e^(-z^2) -> 0 do it). The 1 / sqrt 2 is folded
  // into p and into the exponent's constant, so z itself is never formed; the last step is one
  // fused multiply-add. NaN propagates.
  static KF_HOST_DEVICE float abs_erf_over_sqrt2(float x) {
    constexpr float kP = 0.3275911f * 0.70710678118654752f;     // p / sqrt 2
    constexpr float kHalfLog2e = -0.5f * 1.44269504088896341f;  // -log2(e) / 2
    const float t = hw::rcp_approx_ftz(1.0f + kP * fabsf(x));
    float p = 1.061405429f;
    p = p * t + -1.453152027f;
    p = p * t + 1.421413741f;
    p = p * t + -0.284496736f;
    p = p * t + 0.254829592f;
    const float e = hw::exp2_approx_ftz(x * (x * kHalfLog2e));  // e^(-x^2 / 2)
    return fmaf(-(p * t), e, 1.0f);
  }
  static KF_HOST_DEVICE float erf_over_sqrt2(float x) {
    return copysignf(abs_erf_over_sqrt2(x), x);
  }
  // h (1 + erf(x / sqrt 2)) for h = c x with c > 0: h has x's sign, so h erf(x / sqrt 2) is
  // |h| |erf(x / sqrt 2)|, one fused multiply-add without the sign's copy.
  static KF_HOST_DEVICE float times_one_plus_erf(float h, float x) {
    return fmaf(fabsf(h), abs_erf_over_sqrt2(x), h);
  }
  static KF_HOST_DEVICE float tanh(float x) { return host_float::tanh_rational(x, FastDivide{}); }
  static KF_HOST_DEVICE float divide(float a, float b) { return FastDivide{}(a, b); }
#else
  static KF_HOST_DEVICE float exp(float x) { return exp_of(x); }
  static KF_HOST_DEVICE float exp2(float x) { return ::exp2f(x); }
  static KF_HOST_DEVICE float erf_over_sqrt2(float x) { return erf_of(x * 0.70710678118654752f); }
  static KF_HOST_DEVICE float times_one_plus_erf(float h, float x) {
    return h + h * erf_over_sqrt2(x);
  }
  static KF_HOST_DEVICE float tanh(float x) { return tanh_of(x); }
  static KF_HOST_DEVICE float divide(float a, float b) { return a / b; }
#endif
};

// The primitive set for a storage type.
template <class S>
struct PrimitivesFor {
  using type = Precise;
};
template <>
struct PrimitivesFor<half_t> {
  using type = HalfStorage;
};
template <>
struct PrimitivesFor<bfloat16_t> {
  using type = HalfStorage;
};

}  // namespace math
}  // namespace kf
