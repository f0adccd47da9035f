// Row statistics shared by the CPU backend and the CUDA kernels of the row-wise ops (layer norm,
// RMS norm, softmax): the numerically careful pieces are written once here. T is the compute
// type (float, or double for f64 data).
#pragma once

#include "core/math/host_device.hpp"

#ifndef __CUDACC_RTC__
#include <math.h>
#endif

namespace kf {
namespace math {
namespace stats {

KF_HOST_DEVICE float sqrt_of(float x) { return ::sqrtf(x); }
KF_HOST_DEVICE double sqrt_of(double x) { return ::sqrt(x); }
KF_HOST_DEVICE float log_of(float x) { return ::logf(x); }
KF_HOST_DEVICE double log_of(double x) { return ::log(x); }
KF_HOST_DEVICE float exp_of(float x) { return ::expf(x); }
KF_HOST_DEVICE double exp_of(double x) { return ::exp(x); }

template <class T>
KF_HOST_DEVICE T negative_infinity() {
  return -T(HUGE_VAL);
}

// Layer norm from sums of d = x - shift over a row of n elements. The shift is a first estimate
// of the mean (or any element of the row): the differences are then small and exact, so the
// variance keeps full precision for rows whose mean dwarfs their spread (mean 1e4, std 1), where
// E[x^2] - E[x]^2 in f32 would lose every digit.
template <class T>
struct LayerNormStats {
  T center;  // d - center = x - mean
  T rstd;    // 1 / sqrt(var + eps), biased variance; the mean is shift + center
};

template <class T>
KF_HOST_DEVICE LayerNormStats<T> layer_norm_stats(T sum_d, T sum_d2, T n, T eps) {
  LayerNormStats<T> s;
  s.center = sum_d / n;
  T variance = sum_d2 / n - s.center * s.center;
  if (variance < T(0)) variance = T(0);
  s.rstd = T(1) / sqrt_of(variance + eps);
  return s;
}

template <class T>
KF_HOST_DEVICE T rms_rstd(T sum_squares, T n, T eps) {
  return T(1) / sqrt_of(sum_squares / n + eps);
}

// 1 / sqrt(x): on the device in one approximate step (rsqrtf, within 2 ulp; rsqrt for double,
// within 1 ulp), on the host as 1 / sqrt(x).
KF_HOST_DEVICE float rsqrt_of(float x) {
#if KF_DEVICE_CODE
  return ::rsqrtf(x);
#else
  return 1.0f / ::sqrtf(x);
#endif
}
KF_HOST_DEVICE double rsqrt_of(double x) {
#if KF_DEVICE_CODE
  return ::rsqrt(x);
#else
  return 1.0 / ::sqrt(x);
#endif
}

// layer_norm_stats and rms_rstd for kernels whose per-row work weighs on a short row: the sums
// are scaled by inv_n = 1 / n (prepared once) instead of divided by n, and rstd is rsqrt_of. The
// correctly rounded division and square root cost a range check and a branch to a slow path
// each; these differ from them by a few ulp.
template <class T>
KF_HOST_DEVICE LayerNormStats<T> layer_norm_stats_scaled(T sum_d, T sum_d2, T inv_n, T eps) {
  LayerNormStats<T> s;
  s.center = sum_d * inv_n;
  T variance = sum_d2 * inv_n - s.center * s.center;
  if (variance < T(0)) variance = T(0);
  s.rstd = rsqrt_of(variance + eps);
  return s;
}

template <class T>
KF_HOST_DEVICE T rms_rstd_scaled(T sum_squares, T inv_n, T eps) {
  return rsqrt_of(sum_squares * inv_n + eps);
}

// The larger of a and b, NaN when either is: a row's maximum for the softmax, where a NaN logit
// must reach every output, even in a row whose other logits are all -inf (hidden), which would
// otherwise give 0. (max.NaN.f32 on sm_80 and later: one instruction, as fmaxf.)
KF_HOST_DEVICE float larger_or_nan(float a, float b) {
#if KF_DEVICE_CODE && __CUDA_ARCH__ >= 800
  float d;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
  return d;
#else
  return b > a || b != b ? b : a;  // a NaN a stays: NaN > b and b > NaN are both false
#endif
}
KF_HOST_DEVICE double larger_or_nan(double a, double b) { return b > a || b != b ? b : a; }

// Running softmax statistics: the row maximum and the sum of exp(v - max). -inf entries (masked)
// add nothing; a row with nothing but -inf keeps max = -inf and sum = 0. A NaN becomes the
// maximum for good (larger_or_nan), and with it every output.
template <class T>
struct MaxSum {
  T max;
  T sum;
};

template <class T>
KF_HOST_DEVICE MaxSum<T> max_sum_empty() {
  return MaxSum<T>{negative_infinity<T>(), T(0)};
}

template <class T>
KF_HOST_DEVICE MaxSum<T> max_sum_add(MaxSum<T> s, T v) {
  if (v == negative_infinity<T>()) return s;
  if (v > s.max || v != v) {
    s.sum = s.sum * exp_of(s.max - v) + T(1);  // exp(-inf) = 0 for the first finite v
    s.max = v;
  } else {
    s.sum += exp_of(v - s.max);  // after a NaN max, NaN
  }
  return s;
}

template <class T>
KF_HOST_DEVICE MaxSum<T> max_sum_merge(MaxSum<T> a, MaxSum<T> b) {
  if (b.max == negative_infinity<T>()) return a;
  if (a.max == negative_infinity<T>()) return b;
  const T m = a.max > b.max ? a.max : b.max;
  return MaxSum<T>{m, a.sum * exp_of(a.max - m) + b.sum * exp_of(b.max - m)};
}

// The output of one element: softmax (or log-softmax) of v given the row's statistics. A fully
// masked row (max = -inf) gives 0 (log: -inf), not NaN.
template <class T>
KF_HOST_DEVICE T softmax_value(T v, T max, T inv_sum, T log_sum, bool log) {
  if (max == negative_infinity<T>()) return log ? negative_infinity<T>() : T(0);
  return log ? v - max - log_sum : exp_of(v - max) * inv_sum;
}

// Causal masking of x [..., Lq, Lk]: (i, j) is hidden when j > i + (Lk - Lq) = i + diagonal, so
// the last query row sees every key.
KF_HOST_DEVICE bool causal_hidden(long long row_in_query, long long col, long long diagonal) {
  return col > row_in_query + diagonal;
}

}  // namespace stats
}  // namespace math
}  // namespace kf
