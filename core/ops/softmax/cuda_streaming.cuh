// The softmax family's streaming kernels (see core/ops/softmax/cuda.cuh for when they run): a
// block per row over global memory, x (and the mask) read twice, for strided or row-broadcast
// operands and for longer rows off 16-byte vectors.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "core/math/elementary.hpp"
#include "core/math/numeric.hpp"
#include "core/math/row_stats.hpp"
#include "core/ops/rows/reduce.cuh"
#include "core/ops/rows/rows.hpp"
#include "core/ops/softmax/cuda_storage.hpp"
#include "core/ops/softmax/softmax.hpp"
#include "core/runtime/cuda/grid_dependency.cuh"

namespace kf::softmax {
namespace {

// The streaming kernel's block, and the columns each thread loads before it works on any of them
// (as the norms' streaming kernel, norm/cuda_streaming.cuh): for dense rows 32 bytes of f32 and f64
// data and 32 of 16-bit data (no spills at 64 registers, sm_90, nvcc 13); for strided rows four
// columns, two of f64 (four spilled 80 bytes a thread).
template <class S, bool kDense>
struct StreamPolicy {
  static constexpr int threads = 256;
  static constexpr int unroll =
      kDense ? (sizeof(S) >= 4 ? 32 / sizeof(S) : 16) : (sizeof(S) == 8 ? 2 : 4);
};

// The logit of column col, from x's and the mask's elements there (mask_value unused without a
// mask): -inf where the causal rule hides the column.
template <class S>
__device__ __forceinline__ math::compute_t<S> logit(const Plan& p, S x_value, S mask_value,
                                                    int64_t query, int64_t col) {
  using T = math::compute_t<S>;
  using Traits = math::StorageTraits<S>;
  if (p.causal && math::stats::causal_hidden(query, col, p.diagonal))
    return math::stats::negative_infinity<T>();
  T v = static_cast<T>(p.scale) * Traits::to_compute(x_value);
  if (p.mask.data) v += Traits::to_compute(mask_value);
  return v;
}

// The max and sum of a block's partial (max, sum) pairs, for every thread of the block (kThreads
// of them, a multiple of 32); scratch_max and scratch_sum hold 32 values each and are free again
// on return.
template <int kThreads, class T>
__device__ __forceinline__ math::stats::MaxSum<T> block_max_sum(math::stats::MaxSum<T> s,
                                                                T* scratch_max, T* scratch_sum) {
  namespace st = math::stats;
  for (int o = 16; o > 0; o >>= 1) {
    const st::MaxSum<T> other{__shfl_xor_sync(0xffffffffu, s.max, o),
                              __shfl_xor_sync(0xffffffffu, s.sum, o)};
    s = st::max_sum_merge(s, other);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    scratch_max[warp] = s.max;
    scratch_sum[warp] = s.sum;
  }
  __syncthreads();
  s = st::max_sum_empty<T>();
  for (int k = 0; k < kThreads / 32; ++k)
    s = st::max_sum_merge(s, st::MaxSum<T>{scratch_max[k], scratch_sum[k]});
  __syncthreads();
  return s;
}

// The streaming kernel: a block per row, over global memory, reading x (and the mask) twice. Each
// thread loads Policy::unroll columns of the row before it works on any of them, every load
// unconditional (a column past the row's end loads the thread's first column of the step
// instead, and is left out where values combine), so that the loads are in flight together; a
// thread reads and stores only its own columns, so out may be x.
// kDense: x, out and the mask have dense rows (Plan::dense).
template <class Policy, class S, bool kDense>
__global__ void __launch_bounds__(Policy::threads, 4)
    streaming_kernel(const __grid_constant__ Plan p) {
  cuda::wait_prior_grid();  // a dependent launch: nothing global is touched before this
  cuda::allow_next_grid();
  using T = math::compute_t<S>;
  namespace st = math::stats;
  constexpr int U = Policy::unroll;
  constexpr int64_t kStep = int64_t{Policy::threads} * U;
  __shared__ T scratch_max[32];
  __shared__ T scratch_sum[32];
  const rows::Walk& w = p.walk;
  const int64_t n = w.row_length;
  const S* x = static_cast<const S*>(p.x.data);
  const S* mask = static_cast<const S*>(p.mask.data);
  for (int64_t row = blockIdx.x; row < w.rows; row += gridDim.x) {
    const int64_t query = row % p.query_rows;
    const int64_t xb = rows::row_offset(w, p.x, row);
    const int64_t mb = mask ? rows::row_offset(w, p.mask, row) : 0;
    // Loads this thread's U columns from c0 (x's, and the mask's where there is one).
    // A step that lies inside the row loads at fixed offsets from its first column; the row's
    // last step clamps its columns.
    auto fetch = [&](int64_t c0, S(&xs)[U], S(&ms)[U]) {
      if (c0 + (U - 1) * Policy::threads < n) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
          xs[u] = x[xb + rows::col_offset_as<kDense>(w, p.x, c0 + u * Policy::threads)];
          if (mask)
            ms[u] = mask[mb + rows::col_offset_as<kDense>(w, p.mask, c0 + u * Policy::threads)];
        }
      } else {
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int64_t c = c0 + u * Policy::threads < n ? c0 + u * Policy::threads : c0;
          xs[u] = x[xb + rows::col_offset_as<kDense>(w, p.x, c)];
          if (mask) ms[u] = mask[mb + rows::col_offset_as<kDense>(w, p.mask, c)];
        }
      }
    };
    // Calls fn(column, logit) for this thread's columns, a step of loads at a time.
    auto for_each_logit = [&](auto&& fn) {
      for (int64_t c0 = threadIdx.x; c0 < n; c0 += kStep) {
        S xs[U], ms[U] = {};
        fetch(c0, xs, ms);
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int64_t c = c0 + u * Policy::threads;
          if (c >= n) break;
          fn(c, logit(p, xs[u], ms[u], query, c));
        }
      }
    };
    st::MaxSum<T> s = st::max_sum_empty<T>();
    for_each_logit([&](int64_t, T v) { s = st::max_sum_add(s, v); });
    s = block_max_sum<Policy::threads>(s, scratch_max, scratch_sum);
    const T inv_sum = T(1) / s.sum, log_sum = st::log_of(s.sum);
    const int64_t ob = rows::row_offset(w, p.out, row);
    S* out = static_cast<S*>(p.out.data);
    for_each_logit([&](int64_t c, T v) {
      out[ob + rows::col_offset_as<kDense>(w, p.out, c)] = math::StorageTraits<S>::from_compute(
          st::softmax_value(v, s.max, inv_sum, log_sum, p.log));
    });
  }
}

// The streaming kernel's form for dense rows without a mask (the rows the register-cached and
// staged kernels do not take: longer than 16384 elements and not filling 16-byte vectors, such
// as vocabulary rows of 30522, 32001 or 50257) whose x and out start equally far from a 16-byte
// boundary, row by row (launch checks rows::rows_in_phase): each row in 16-byte vectors from its
// first 16-byte boundary, the few columns before that boundary and after the last whole vector
// one at a time. (A row whose x and out were out of phase would take one element a load
// throughout; the kernel checks, though launch sends it none.) Each thread loads `unroll` vectors
// before it works on any of them (the row's last step clamped to the thread's own vector), and
// reads and stores only its own columns, so out may be x.
template <class S>
struct StreamVectorPolicy {
  static constexpr int threads = 256;
  static constexpr int vec = 16 / sizeof(S);
  // f64 spills 8 bytes a thread around its exp at one or two vectors, 16 at four (ptxas, sm_90).
  static constexpr int unroll = sizeof(S) == 8 ? 2 : 4;
};

template <class Policy, class S>
__global__ void __launch_bounds__(Policy::threads, 4)
    streaming_vector_kernel(const __grid_constant__ Plan p) {
  cuda::wait_prior_grid();  // a dependent launch: nothing global is touched before this
  cuda::allow_next_grid();
  using T = math::compute_t<S>;
  using Traits = math::StorageTraits<S>;
  using Pack = rows::Pack<S, Policy::vec>;
  using Prim = typename math::PrimitivesFor<S>::type;
  namespace st = math::stats;
  constexpr int V = Policy::vec, U = Policy::unroll;
  constexpr int64_t kStep = int64_t{Policy::threads} * U;
  __shared__ T scratch_max[32];
  __shared__ T scratch_sum[32];
  const rows::Walk& w = p.walk;
  const int64_t n = w.row_length;
  const T minus_inf = st::negative_infinity<T>();
  for (int64_t row = blockIdx.x; row < w.rows; row += gridDim.x) {
    const int64_t query = row % p.query_rows;
    const S* x = static_cast<const S*>(p.x.data) + rows::row_offset(w, p.x, row);
    S* out = static_cast<S*>(p.out.data) + rows::row_offset(w, p.out, row);
    const uintptr_t xa = reinterpret_cast<uintptr_t>(x), oa = reinterpret_cast<uintptr_t>(out);
    // Columns [0, head) and [head + vectors * V, n) one at a time; vector k at head + k * V.
    int64_t head = n;
    if (((xa ^ oa) & 15) == 0 && xa % sizeof(S) == 0) {
      head = static_cast<int64_t>((16 - (xa & 15)) & 15) / int64_t{sizeof(S)};
      if (head > n) head = n;
    }
    const int64_t vectors = (n - head) / V, tail = head + vectors * V;
    const Pack* xv = reinterpret_cast<const Pack*>(x + head);
    Pack* ov = reinterpret_cast<Pack*>(out + head);
    // Calls fn(column, storage value) for this thread's columns outside the vectors.
    auto for_each_single = [&](auto&& fn) {
      for (int64_t c = threadIdx.x; c < head; c += Policy::threads) fn(c, x[c]);
      for (int64_t c = tail + threadIdx.x; c < n; c += Policy::threads) fn(c, x[c]);
    };
    // Calls fn(k, vector k) for this thread's vectors, a step of U loads at a time (the row's
    // last step clamped to the thread's own vector).
    auto for_each_vector = [&](auto&& fn) {
      for (int64_t k0 = threadIdx.x; k0 < vectors; k0 += kStep) {
        const bool inside = k0 + (U - 1) * Policy::threads < vectors;
        Pack packs[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int64_t k = k0 + u * Policy::threads;
          packs[u] = xv[inside || k < vectors ? k : k0];
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int64_t k = k0 + u * Policy::threads;
          if (k >= vectors) break;
          fn(k, packs[u]);
        }
      }
    };
    st::MaxSum<T> s = st::max_sum_empty<T>();
    for_each_single([&](int64_t c, S v) { s = st::max_sum_add(s, logit(p, v, S{}, query, c)); });
    for_each_vector([&](int64_t k, const Pack& pack) {
      // The vector's logits join s a vector at a time: their max first (a NaN among them makes it
      // NaN, which then reaches every output), one rescale at most, an exp each. A NaN maximum
      // stays: a later vector of -inf alone must not replace it, or the thread's pair would read
      // as a fully hidden row's and be dropped when the block merges.
      T v[V], m = minus_inf;
#pragma unroll
      for (int e = 0; e < V; ++e) {
        v[e] = logit(p, pack.v[e], S{}, query, head + k * V + e);
        m = st::larger_or_nan(m, v[e]);
      }
      m = st::larger_or_nan(s.max, m);
      if (!(m == s.max)) {  // a larger maximum, or a NaN (NaN == NaN is false)
        s.sum = s.max == minus_inf ? T(0) : s.sum * Prim::exp(s.max - m);
        s.max = m;
      }
      if (s.max != minus_inf) {
#pragma unroll
        for (int e = 0; e < V; ++e) s.sum += Prim::exp(v[e] - s.max);  // exp(-inf) = 0
      }
    });
    s = block_max_sum<Policy::threads>(s, scratch_max, scratch_sum);
    const T inv_sum = T(1) / s.sum, log_sum = st::log_of(s.sum);
    // st::softmax_value with the storage type's exponential (math::PrimitivesFor).
    auto value = [&](int64_t c, S x_value) {
      const T v = logit(p, x_value, S{}, query, c);
      if (s.max == minus_inf) return Traits::from_compute(p.log ? minus_inf : T(0));
      return Traits::from_compute(p.log ? v - s.max - log_sum : Prim::exp(v - s.max) * inv_sum);
    };
    for_each_single([&](int64_t c, S v) { out[c] = value(c, v); });
    for_each_vector([&](int64_t k, const Pack& pack) {
      Pack o;
#pragma unroll
      for (int e = 0; e < V; ++e) o.v[e] = value(head + k * V + e, pack.v[e]);
      ov[k] = o;
    });
  }
}

}  // namespace
}  // namespace kf::softmax
