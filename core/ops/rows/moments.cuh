// Mean and variance of a row in one group reduction (rows::group_reduce): each thread summarises
// its own elements as a count, a mean and M2 (the sum of squared differences from that mean, taken
// over its registers or its staged elements), and the reduction merges the summaries with the
// parallel formula of Chan, Golub and LeVeque. Every term of the merged M2 is non-negative, so the
// variance keeps its precision for rows whose mean dwarfs their spread, without a first pass for
// the mean. The values are differences from a shift the row's threads share (layer norm: the row's
// first element), which keeps them small and exact for such rows.
// Each merge is written to give both lanes of a shuffle the same bits, whichever side is `a`, as
// rows::block_reduce requires.
#pragma once

#include "core/ops/rows/reduce.cuh"

namespace kf::rows {

// 1 / x for the merges' weights (float: the fast reciprocal, within 2 ulp for the counts here).
__device__ __forceinline__ float reciprocal(float x) { return __fdividef(1.0f, x); }
__device__ __forceinline__ double reciprocal(double x) { return 1.0 / x; }

// A summary of any number of values (count 0: mean and m2 are 0).
template <class T>
struct Moments {
  T count, mean, m2;
};
template <class T>
__device__ __forceinline__ Moments<T> shuffle_xor(Moments<T> v, int offset) {
  return {shuffle_xor(v.count, offset), shuffle_xor(v.mean, offset), shuffle_xor(v.m2, offset)};
}

// Chan's merge: mean = (na ma + nb mb) / n, m2 = m2a + m2b + (mb - ma)^2 na nb / n. The mean is
// taken as (ma + mb) / 2 + (nb - na) / (2 n) * (mb - ma): its rounding is then that of a mean of
// two values plus a term of the size of mb - ma, however far the means are from 0, and swapping
// a and b negates both factors of the product exactly. One reciprocal per merge, none per
// element.
struct MergeMoments {
  template <class T>
  __device__ __forceinline__ Moments<T> operator()(Moments<T> a, Moments<T> b) const {
    const T count = a.count + b.count;
    const T inverse = reciprocal(count > T(1) ? count : T(1));  // two empty summaries stay empty
    const T delta = b.mean - a.mean;
    const T mean = fma((b.count - a.count) * (inverse * T(0.5)), delta, (a.mean + b.mean) * T(0.5));
    return {count, mean, fma(delta * delta, a.count * b.count * inverse, a.m2 + b.m2)};
  }
};

// A summary of a set whose merges all pair sets of the same size: threads that hold equally many
// elements, merged by a butterfly (rows::lanes_reduce, and rows::block_reduce given kWarps). The
// count then cancels: variance is m2 / count.
template <class T>
struct EqualMoments {
  T mean, variance;
};
template <class T>
__device__ __forceinline__ EqualMoments<T> shuffle_xor(EqualMoments<T> v, int offset) {
  return {shuffle_xor(v.mean, offset), shuffle_xor(v.variance, offset)};
}

struct MergeEqualMoments {
  template <class T>
  __device__ __forceinline__ EqualMoments<T> operator()(EqualMoments<T> a,
                                                        EqualMoments<T> b) const {
    const T half_delta = (b.mean - a.mean) * T(0.5);
    return {(a.mean + b.mean) * T(0.5),
            fma(half_delta, half_delta, (a.variance + b.variance) * T(0.5))};
  }
};

}  // namespace kf::rows
