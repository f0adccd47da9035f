// The softmax family's exponentials about a row's maximum (RowExp), as its register-cached,
// staged and grid-group kernels take them.
#pragma once

#include <cuda_runtime.h>

#include "core/math/elementary.hpp"
#include "core/math/numeric.hpp"
#include "core/math/row_stats.hpp"

namespace kf::softmax {
namespace {

// e^(v - m) for the values v of a row about a maximum m of theirs, as the row kernels take it.
// f32 and f64 (math::Precise): e^(v - m). 16-bit rows (math::HalfStorage, MUFU.EX2): 2^(v log2 e
// - s) with s = m log2 e rounded once (`shift`), one FFMA and the MUFU a value where e^(v - m)
// took an FADD, an FMUL and the MUFU. The rounding of s scales every exp about m alike, so it
// cancels in a softmax; log_factor takes it out of the log-softmax's log of the sum (the FFMA's
// residual m log2 e - s is exact), and between() rescales a part's sum from its own maximum to
// another through the same rounded shifts, so parts merged from blocks or warps are scaled as
// exps taken about the merged maximum's own shift would be. of_scaled(x, factor(scale)) is
// e^(x scale - m) (the 16-bit form folds the scale into the FFMA: 2^(x (scale log2 e) - s)).
// The log-softmax of v is log_softmax(v, log_factor(sum)), and of x scaled log_softmax_scaled(x,
// scale, log_factor(sum)). f32 and f64 take (v - m) - log sum, the difference first, as the CPU
// backend and math::stats::softmax_value do: v - (m + log sum) rounds m + log sum at m's
// magnitude, up to ulp(2000) / 2 = 6e-5 in every f32 output for logits near 2000 (the test
// LogitsFarFromZero), where v - m is exact for v within a factor of two of m and otherwise
// rounds at the output's magnitude. The 16-bit rows keep v - (m + log sum), one FADD (or FFMA)
// a value: its rounding (up to 6e-5 about 2000, where a 16-bit logit's own ulp is 1 or 8) is
// under half an ulp of the 16-bit output for log-probabilities of magnitude 1/8 and more (f16)
// or 1/64 and more (bf16), and above it only nearer 0. (H200, 2026-12-04 08:07Z, kf-bench
// log_softmax, best of two alternating passes: the 16-bit rows of 16384 and 65536 lost 0.8-1.4 %
// with the difference first; the f32 rows of 1024 to 262144 ran 0.5 % slower to 1.9 % faster.)
// A/B on an H200 (2026-12-04, kf-bench softmax, best of two alternating passes, us): f16 rows of
// 65536 88.27 -> 86.30, of 262144 96.98 -> 88.93, of 1048576 107.09 -> 104.83; bf16 rows of
// 65536 92.08 -> 89.02; f32 and the rest within +-0.7 % (bf16 rows of 262144 96.93 -> 98.46, a
// pair whose first-pass times were 101.98 and 98.46).
template <class Prim, class T>
struct RowExp {
  T max;
  __device__ __forceinline__ explicit RowExp(T m) : max(m) {}
  __device__ __forceinline__ T operator()(T v) const { return Prim::exp(v - max); }
  __device__ __forceinline__ static T factor(T scale) { return scale; }
  __device__ __forceinline__ T of_scaled(T x, T scale) const {
    return Prim::exp(fma(x, scale, -max));
  }
  __device__ __forceinline__ T log_factor(T sum) const { return math::stats::log_of(sum); }
  __device__ __forceinline__ T log_softmax(T v, T log_factor) const {
    return (v - max) - log_factor;
  }
  __device__ __forceinline__ T log_softmax_scaled(T x, T scale, T log_factor) const {
    return fma(x, scale, -max) - log_factor;
  }
  // e^(m_part - m_row), for a sum of exp about m_part (callers leave out parts of -inf).
  __device__ __forceinline__ static T between(T m_part, T m_row) {
    return Prim::exp(m_part - m_row);
  }
};

template <>
struct RowExp<math::HalfStorage, float> {
  static constexpr float kLog2e = 1.44269504088896341f, kLn2 = 0.693147180559945309f;
  float max, shift;
  __device__ __forceinline__ static float shift_of(float m) { return __fmul_rn(m, kLog2e); }
  __device__ __forceinline__ explicit RowExp(float m) : max(m), shift(shift_of(m)) {}
  __device__ __forceinline__ float operator()(float v) const {
    return math::HalfStorage::exp2(fmaf(v, kLog2e, -shift));
  }
  __device__ __forceinline__ static float factor(float scale) { return scale * kLog2e; }
  __device__ __forceinline__ float of_scaled(float x, float factor) const {
    return math::HalfStorage::exp2(fmaf(x, factor, -shift));
  }
  __device__ __forceinline__ float log_factor(float sum) const {
    return max + (math::stats::log_of(sum) - fmaf(max, kLog2e, -shift) * kLn2);
  }
  __device__ __forceinline__ float log_softmax(float v, float log_factor) const {
    return v - log_factor;
  }
  __device__ __forceinline__ float log_softmax_scaled(float x, float scale,
                                                      float log_factor) const {
    return fmaf(x, scale, -log_factor);
  }
  __device__ __forceinline__ static float between(float m_part, float m_row) {
    return math::HalfStorage::exp2(shift_of(m_part) - shift_of(m_row));
  }
};

}  // namespace
}  // namespace kf::softmax
