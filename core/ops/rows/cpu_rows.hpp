// The CPU backends of the row-wise families (layer/RMS norm, softmax, batch-norm training) share
// one shape of work: a row (or a channel) is gathered once into a buffer of its compute type,
// its statistics come from that buffer, and the result is written back through the operand's
// strides. The loops over the buffers are plain index loops that GCC vectorises, built for
// AVX-512, AVX2 and baseline x86-64 (KF_CPU_CLONES); the gathers walk a row as runs of its
// innermost dim, so a dense row is one widening copy and a strided one pays its index arithmetic
// once per run rather than once per element.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/math/numeric.hpp"
#include "core/math/row_stats.hpp"
#include "core/ops/cpu_runs.hpp"
#include "core/ops/rows/rows.hpp"
#include "core/runtime/cpu_clones.hpp"

namespace kf::rows::cpu {

// Rows are summed in blocks of this many elements, each block over kLanes independent partial
// sums: the rounding error grows with the square root of the block count (rows of 40K+ f32
// elements stay within 1e-6), and the partial sums are what the vector units add in parallel.
constexpr int64_t kSumBlock = 256;
constexpr int kLanes = 16;

// Calls f(offset, first, length, stride) for each run of the row's innermost dim that meets the
// row's elements [begin, end), in row order: the run holds the row's elements [first, first +
// length), the first of them at element `offset` of the row in operand t, the next ones `stride`
// elements apart.
template <class F>
void for_each_run(const Walk& w, const Operand& t, int64_t begin, int64_t end, F&& f) {
  const int32_t nd = w.inner_ndim;
  if (nd <= 1) {
    const int64_t stride = nd == 0 ? 1 : t.inner[0];
    if (begin < end) f(begin * stride, begin, end - begin, stride);
    return;
  }
  const int64_t length = w.inner_shape[nd - 1];
  const int64_t stride = t.inner[nd - 1];
  // An odometer over the dims [0, nd - 1), set to the run that holds `begin`.
  int64_t index[KF_MAX_DIMS] = {};
  int64_t offset = 0, rest = begin / length, within = begin % length;
  for (int32_t d = nd - 2; d >= 0; --d) {
    index[d] = rest % w.inner_shape[d];
    rest /= w.inner_shape[d];
    offset += index[d] * t.inner[d];
  }
  for (int64_t first = begin; first < end;) {
    const int64_t n = std::min(length - within, end - first);
    f(offset + within * stride, first, n, stride);
    first += n;
    within = 0;
    for (int32_t d = nd - 2; d >= 0; --d) {
      offset += t.inner[d];
      if (++index[d] < w.inner_shape[d]) break;
      offset -= t.inner[d] * w.inner_shape[d];
      index[d] = 0;
    }
  }
}

// dst[0, end - begin) = elements [begin, end) of the row of t whose first element is element
// `base` of t, widened.
template <class S>
void gather(const Walk& w, const Operand& t, int64_t base, int64_t begin, int64_t end,
            math::compute_t<S>* dst) {
  const S* src = static_cast<const S*>(t.data) + base;
  for_each_run(w, t, begin, end,
               [&](int64_t offset, int64_t first, int64_t length, int64_t stride) {
                 widen_run(src + offset, stride, dst + (first - begin), length);
               });
}

// dst[0, row_length) = the whole row.
template <class S>
void gather(const Walk& w, const Operand& t, int64_t base, math::compute_t<S>* dst) {
  gather<S>(w, t, base, 0, w.row_length, dst);
}

// The row of t at element `base` = src[0, row_length), rounded to the storage type.
template <class S>
void scatter(const Walk& w, const Operand& t, int64_t base, const math::compute_t<S>* src) {
  S* dst = static_cast<S*>(t.data) + base;
  for_each_run(w, t, 0, w.row_length,
               [&](int64_t offset, int64_t first, int64_t length, int64_t stride) {
                 narrow_run(src + first, dst + offset, stride, length);
               });
}

// Sum of f(i) over [0, n), in blocks of kSumBlock over kLanes partial sums.
template <class C, class F>
KF_CPU_CLONES C lane_sum(int64_t n, F f) {
  C total = 0;
  for (int64_t start = 0; start < n; start += kSumBlock) {
    const int64_t stop = std::min(n, start + kSumBlock);
    C lane[kLanes] = {};
    int64_t i = start;
    for (; i + kLanes <= stop; i += kLanes)
      for (int j = 0; j < kLanes; ++j) lane[j] += f(i + j);
    for (int j = 0; i < stop; ++i, ++j) lane[j] += f(i);
    for (int width = kLanes / 2; width > 0; width /= 2)
      for (int j = 0; j < width; ++j) lane[j] += lane[j + width];
    total += lane[0];
  }
  return total;
}

template <class C>
C sum(const C* v, int64_t n) {
  return lane_sum<C>(n, [v](int64_t i) { return v[i]; });
}

template <class C>
C sum_of_squares(const C* v, int64_t n) {
  return lane_sum<C>(n, [v](int64_t i) { return v[i] * v[i]; });
}

// Sums of d = v - shift and of d^2 (the shifted two-pass statistics, core/math/row_stats.hpp).
template <class C>
void shifted_sums(const C* v, int64_t n, C shift, C* sum_d, C* sum_d2) {
  *sum_d = lane_sum<C>(n, [v, shift](int64_t i) { return v[i] - shift; });
  *sum_d2 = lane_sum<C>(n, [v, shift](int64_t i) {
    const C d = v[i] - shift;
    return d * d;
  });
}

// The largest of v[0, n), NaN when one is (math::stats::larger_or_nan); -inf when there is
// nothing else.
template <class C>
KF_CPU_CLONES C max_of(const C* v, int64_t n) {
  C lane[kLanes];
  for (int j = 0; j < kLanes; ++j) lane[j] = -C(HUGE_VAL);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) lane[j] = math::stats::larger_or_nan(lane[j], v[i + j]);
  for (int j = 0; i < n; ++i, ++j) lane[j] = math::stats::larger_or_nan(lane[j], v[i]);
  for (int width = kLanes / 2; width > 0; width /= 2)
    for (int j = 0; j < width; ++j) lane[j] = math::stats::larger_or_nan(lane[j], lane[j + width]);
  return lane[0];
}

}  // namespace kf::rows::cpu
