// The softmax family's grid-group rows (see core/ops/softmax/cuda.cuh for when they run): rows
// past what its clusters hold, without a mask, each over a group of blocks of a cooperative grid,
// and their launch.
#pragma once

#include <cuda_runtime.h>

#include <cstring>
#include <type_traits>

#include "core/math/elementary.hpp"
#include "core/math/numeric.hpp"
#include "core/math/row_stats.hpp"
#include "core/ops/async_copy.cuh"
#include "core/ops/rows/grid_group.cuh"
#include "core/ops/rows/reduce.cuh"
#include "core/ops/softmax/cuda_row_exp.cuh"
#include "core/ops/softmax/cuda_storage.hpp"
#include "core/ops/softmax/softmax.hpp"
#include "core/runtime/cuda/grid_dependency.cuh"

namespace kf::softmax {
namespace {

// ---- grid-group rows (rows::GridGroups): softmax rows past the clusters, without a mask -------
//
// The norms' grid-group form (norm/cuda_grid.cuh, grid_norm_kernel) for the softmax and log-softmax
// without a mask or the causal rule: each row over a group of 512-thread blocks of a cooperative
// grid, two an SM, each block owning GridPolicy::vectors * threads 16-byte vectors of every row
// of its group. A block stages row i + 2 into a ring of three shared-memory slots, publishes row
// i's (maximum, sum of exp about it) as two tagged words, and writes row i - 1 once the group's
// pairs of that row are in; every block of the group merges them in the same order (the same
// bits everywhere). The thread's values are folded as (maximum, sum) pairs (merge_max_sum), so
// the block needs one reduction a row, as in bench/probes/grid_rows.cu (f32 rows of 262144 at
// 78-80 % of copy there, in 256-thread blocks of 32 KiB shares). Taken only for the rows the
// clusters do not hold: against the clustered kernel (kf-bench, H200 2026-11-30 10:00Z-10:04Z, the
// kernel taken for every row of 256 KiB and more, two passes each, % of copy) it lost at every
// length they hold, f32 rows of 65536 / 131072 / 262144 77.3-77.5 / 77.2 / 72.9-73.1 -> 61.3-61.4
// / 58.3-58.5 / 57.4-58.1, f16 / bf16 rows of 262144 70.1 / 67.4 -> 57.6-57.7 / 57.5-57.8 and of
// 524288 62.7-63.1 / 60.4-60.7 -> 57.1 / 57.0-57.1; where they do not (f32 rows of 524288, which
// fell to the streaming kernel) it took 19.7 -> 54.1-54.5. Why this form runs so far below the
// probe's was not found.
// Since 2026-12-04 each warp takes its maximum first and every exp about it once, so that its
// sums meet in a butterfly of adds (the pairs' butterfly took two exps a step), and the output
// pass's form (a row of -inf, log-softmax, softmax) is chosen once a row: Nsight Compute (H200,
// 2026-12-03 23:52Z, f16 rows of 262144, the kernel forced onto them) had counted 65.4 M warp
// instructions, about 31 a value, each value's exp in a branch region of its own (BSSY, BRA,
// BSYNC and predicated arithmetic). H200 A/B (2026-12-04 00:24Z-00:32Z, kf-bench, same call),
// % of copy, the kernel forced onto every row: f32 rows of 65536 / 131072 / 262144 61.1 /
// 58.5-58.8 / 57.8-58.1 -> 71.3 / 68.8 / 66.8, f16 61.6-61.8 / 61.5-61.6 / 57.8-58.3 -> 71.8 /
// 70.6 / 67.6, bf16 61.5-61.6 / 61.1 / 57.6-58.1 -> 71.8 / 70.7 / 67.7; still under the
// clusters there (f32 77.3 / 74.0-77.2 / 72.8-73.3), so they keep those rows. The rows it takes,
// f32 rows of 524288: 54.0-54.2 -> 57.2.
// Both of those runs had the dynamic array (after 272 static bytes) 16 bytes past a 32-byte
// boundary, which read every L2 sector of x twice in batch-norm training (async_copy::
// kSharedAlign); aligned since 70e6081, on the H100 the kernel beats the clusters at some of the
// rows they hold, and takes them (cuda_staged.cuh, grid_before_clusters).
using rows::GridPolicy;

// (m, s) <- the pair of (m, s) and (om, os), each a maximum and a sum of exp about it: the larger
// maximum, each sum rescaled to it (nothing from a side that saw only -inf). Commutative to the
// bit (max and a sum of two terms), so a butterfly leaves the same bits in every lane.
template <class Prim, class T>
__device__ __forceinline__ void merge_max_sum(T& m, T& s, T om, T os) {
  const T minus_inf = math::stats::negative_infinity<T>();
  const T mx = m > om ? m : om;
  if (mx == minus_inf) return;  // both sides empty: (-inf, 0)
  const T a = m == minus_inf ? T(0) : s * RowExp<Prim, T>::between(m, mx);
  const T b = om == minus_inf ? T(0) : os * RowExp<Prim, T>::between(om, mx);
  s = a + b;
  m = mx;
}

template <class S>
__global__ void __launch_bounds__(GridPolicy::threads, 2)
    grid_softmax_kernel(const __grid_constant__ Plan p, const rows::GridGroups q) {
  cuda::wait_prior_grid();  // a dependent launch: nothing global is touched before this
  cuda::allow_next_grid();
  using G = GridPolicy;
  using T = math::compute_t<S>;
  using Traits = math::StorageTraits<S>;
  using Prim = typename math::PrimitivesFor<S>::type;
  namespace st = math::stats;
  constexpr int V = 16 / sizeof(S);
  constexpr int kWarps = G::threads / 32;
  using Vec = rows::Pack<S, V>;
  static_assert(sizeof(Vec) == sizeof(uint4), "a vector is 16 bytes");
  extern __shared__ __align__(async_copy::kSharedAlign) unsigned char grid_bytes[];
  __shared__ T warp_max[2][kWarps], warp_sum[2][kWarps];
  __shared__ T row_max[2], row_factor[2];  // the maximum; 1 / sum (log-softmax: RowExp::log_factor)
  const int group = static_cast<int>(blockIdx.x) / q.blocks;
  const int rank = static_cast<int>(blockIdx.x) % q.blocks;
  if (group >= q.groups) return;
  const rows::Walk& w = p.walk;
  const int t = static_cast<int>(threadIdx.x), lane = t % 32, warp = t / 32;
  const rows::GridRing<S, Vec> ring{reinterpret_cast<Vec*>(grid_bytes), t};
  const int64_t my_rows = (w.rows - group + q.groups - 1) / q.groups;
  const int64_t first = int64_t{rank} * G::vectors * G::threads * V;  // the block's first column
  const T scale = static_cast<T>(p.scale), minus_inf = st::negative_infinity<T>();
  const T scale_factor = RowExp<Prim, T>::factor(scale);  // (RowExp::of_scaled)
  const auto row_of = [&](int64_t i) { return group + i * q.groups; };
  const auto x_row = [&](int64_t i) {  // the block's share of row i
    return static_cast<const S*>(p.x.data) + rows::row_offset_cold(w, p.x, row_of(i)) + first;
  };
  const auto stage = [&](int64_t i) { ring.stage(i, x_row(i)); };
  // Two words a block a row: [row][maximum, sum][block].
  const auto words_of = [&](int64_t i) { return q.words + row_of(i) * 2 * q.blocks; };
  constexpr bool kPairs = std::is_same_v<S, math::bfloat16_t>;  // as grid_norm_kernel
  const auto widen = [&](const Vec& v, T(&f)[V]) {
    if constexpr (kPairs) {
      rows::widen_bf16_pairs(v, f);
    } else {
#pragma unroll
      for (int e = 0; e < V; ++e) f[e] = Traits::to_compute(v.v[e]);
    }
  };
#pragma unroll
  for (int i = 0; i < G::ahead; ++i) {
    if (i < my_rows) stage(i);
    async_copy::commit();
  }
  rows::PublishedRow<> maxes, sums;
  for (int64_t i = 0; i <= my_rows; ++i) {
    const int64_t j = i - 1;  // the row written this iteration, once the group's pairs are in
    // The first warp's loads of row j's words are in flight while the block reduces row i.
    if (j >= 0 && warp == 0) {
      maxes.fetch(words_of(j), q.blocks);
      sums.fetch(words_of(j) + q.blocks, q.blocks);
    }
    if (i < my_rows) {                   // row i: this block's (maximum, sum of exp), published
      async_copy::wait<G::ahead - 1>();  // this thread's copies of row i have landed
      const Vec* s = ring.slot(i);
      T x[G::vectors][V];  // the values; their logits are x scale
      T m = minus_inf;
#pragma unroll
      for (int k = 0; k < G::vectors; ++k) {
        widen(s[k * G::threads + t], x[k]);
#pragma unroll
        for (int e = 0; e < V; ++e) m = st::larger_or_nan(m, x[k][e] * scale);  // NaN wins
      }
      // The warp's maximum first, so that each exp is taken about it once, and the warp's sums
      // meet in one butterfly of adds (no rescaling exps in the butterfly).
      m = rows::lanes_reduce(
          m, [](T a, T b) { return st::larger_or_nan(a, b); }, 32);
      T sum = 0;
      if (m != minus_inf) {  // the same in every lane
        const RowExp<Prim, T> about(m);
#pragma unroll
        for (int k = 0; k < G::vectors; ++k)
#pragma unroll
          for (int e = 0; e < V; ++e) sum += about.of_scaled(x[k][e], scale_factor);
      }
      sum = rows::lanes_reduce(sum, rows::Plus{}, 32);
      if (lane == 0) {
        warp_max[i & 1][warp] = m;
        warp_sum[i & 1][warp] = sum;
      }
      __syncthreads();
      if (warp == 1) {
        m = warp_max[i & 1][lane % kWarps];
        sum = warp_sum[i & 1][lane % kWarps];
#pragma unroll
        for (int o = kWarps / 2; o > 0; o >>= 1)
          merge_max_sum<Prim>(m, sum, rows::shuffle_xor(m, o), rows::shuffle_xor(sum, o));
        if (lane == 0) {
          rows::publish(words_of(i) + rank, m, q.tag);
          rows::publish(words_of(i) + q.blocks + rank, sum, q.tag);
        }
      }
    }
    if (j >= 0) {
      if (warp == 0) {
        maxes.wait(words_of(j), q.blocks, q.tag);
        sums.wait(words_of(j) + q.blocks, q.blocks, q.tag);
        T m = minus_inf, sum = 0;
#pragma unroll
        for (int k = 0; k < rows::kLanesWords; ++k)
          if (lane + 32 * k < q.blocks) merge_max_sum<Prim>(m, sum, maxes.value(k), sums.value(k));
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
          merge_max_sum<Prim>(m, sum, rows::shuffle_xor(m, o), rows::shuffle_xor(sum, o));
        if (lane == 0) {
          row_max[j & 1] = m;
          row_factor[j & 1] = p.log ? RowExp<Prim, T>(m).log_factor(sum) : T(1) / sum;
        }
      }
      __syncthreads();
      const T m = row_max[j & 1], factor = row_factor[j & 1];
      Vec* s = ring.slot(j);
      S* out = static_cast<S*>(p.out.data) + rows::row_offset_cold(w, p.out, row_of(j)) + first;
      const bool restage = i + G::ahead < my_rows;  // row i + 2 takes row j's slot
      const S* next = restage ? x_row(i + G::ahead) : nullptr;
      // The output pass, its form chosen once a row (the same in every thread): a row of nothing
      // but -inf gives 0 (log-softmax: -inf), not NaN; otherwise y = exp(x scale - m) / sum, or
      // x scale - m - log sum (RowExp::log_softmax_scaled, the scaled logit in a multiply-add).
      const RowExp<Prim, T> about(m);
      const auto output_pass = [&](auto form) {
        constexpr int kForm = decltype(form)::value;  // 0: empty row, 1: log-softmax, 2: softmax
#pragma unroll
        for (int k = 0; k < G::vectors; ++k) {
          const Vec xv = s[k * G::threads + t];
          T y[V];
          widen(xv, y);  // the scale is applied below
#pragma unroll
          for (int e = 0; e < V; ++e) {
            if constexpr (kForm == 0)
              y[e] = p.log ? minus_inf : T(0);
            else if constexpr (kForm == 1)
              y[e] = about.log_softmax_scaled(y[e], scale, factor);
            else
              y[e] = about.of_scaled(y[e], scale_factor) * factor;
          }
          uint4 bits;
          if constexpr (kPairs) {
            bits = bf16::narrow_pairs(y);
          } else {
            Vec yv;
#pragma unroll
            for (int e = 0; e < V; ++e) yv.v[e] = Traits::from_compute(y[e]);
            memcpy(&bits, &yv, sizeof bits);
          }
          ring.write(s, k, out, bits, restage, next, xv);
        }
      };
      if (m == minus_inf)
        output_pass(std::integral_constant<int, 0>{});
      else if (p.log)
        output_pass(std::integral_constant<int, 1>{});
      else
        output_pass(std::integral_constant<int, 2>{});
    } else if (i + G::ahead < my_rows) {
      stage(i + G::ahead);
    }
    async_copy::commit();
  }
}

// grid_softmax_kernel for rows without a mask or the causal rule, on the terms of the norms'
// grid-group rows (norm/cuda_grid.cuh, launch_grid_rows; up to 32 * rows::kLanesWords blocks a
// row). False where it does not take them.
template <class S>
bool launch_grid_rows(const Plan& p, int32_t device, cudaStream_t stream) {
  using G = GridPolicy;
  if (p.mask.data || p.causal || !p.dense) return false;
  const int64_t blocks =
      rows::grid_blocks_a_row(p.walk.row_length, sizeof(S), 32 * rows::kLanesWords);
  return rows::launch_grid_groups<&grid_softmax_kernel<S>, G::threads, G::smem>(
      p, blocks, 2, device, stream, "softmax kernel launch");
}

}  // namespace
}  // namespace kf::softmax
