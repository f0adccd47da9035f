// The norm family's grid-group rows (see core/ops/norm/cuda.cuh for when they run): rows of 64 KiB
// and more, each over a group of blocks of a cooperative grid, and their launch.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "core/math/activation.hpp"
#include "core/math/numeric.hpp"
#include "core/math/row_stats.hpp"
#include "core/ops/async_copy.cuh"
#include "core/ops/norm/cuda_storage.hpp"
#include "core/ops/norm/norm.hpp"
#include "core/ops/rows/grid_group.cuh"
#include "core/ops/rows/reduce.cuh"
#include "core/runtime/cuda/grid_dependency.cuh"

namespace kf::norm {
namespace {

// ---- grid-group rows (rows::GridGroups): the norms' rows of 64 KiB and more -------------------
//
// Each row is spread over a group of blocks, each block owning GridPolicy::vectors * threads
// 16-byte vectors, the same columns of every row of the group, on a cooperative grid of two
// 512-thread blocks an SM. A block stages row i + 2 into a ring of three shared-memory slots
// (cp.async; each thread reads back only its own slots, and restages each slot as the output pass
// leaves it), publishes row i's partial statistics, and writes row i - 1 once the group's partials
// of that row are in; the first warp's loads of those partials are issued before the block
// reduces row i, and polled after. The form of bench/probes/grid_rows.cu (docs/performance.md,
// "Session of 05:45Z" and "Session of 07:55Z").
// RMS norm: a sum of squares a block a row; the weight is read once a launch, into registers.
// kf-bench, H200 2026-11-30 08:09Z-08:19Z, % of copy, against the clustered kernel in the same
// calls: f32 / f16 / bf16 rows of 262144 68.5-71.6 / 70.0-70.8 / 64.7-67.1 -> 81.3-82.0 /
// 78.3-79.1 / 77.1-77.6; rows of 524288 10.9 / 55.0-57.1 / 61.0-61.7 -> 80.9-81.1 / 79.2-79.3 /
// 77.4-77.5; f32 rows of 131072 74.3-74.8 -> 80.9-81.6. Rows of 256 KiB (taken since 08:19Z):
// f32 65536 76.0 -> 79.8-80.1, f16 / bf16 131072 74.4 / 68.0 -> 76.9-77.1 / 75.7-75.8.
// Layer norm: three words a block a row (Moments), so that the block still needs one barrier a
// row: each warp takes its own mean as the shift of its sums, and the warps' and then the blocks'
// parts meet by Chan's parallel formula (merge_moments); the weight and bias are read from L2
// in the output pass. kf-bench, H200 2026-11-30 10:18Z-10:24Z, layer norm (weight, bias, ReLU),
// % of copy, against the clustered kernel in the same calls (two passes each): f32 rows of
// 65536 / 131072 / 262144 / 524288 68.4 / 65.0-66.9 / 60.9-61.6 / 10.2 -> 74.2-74.7 / 73.6-73.9 /
// 72.7-73.0 / 70.2-70.9; f16 rows of 131072 / 262144 / 524288 62.4-62.5 / 58.3-59.9 / 50.1-50.3 ->
// 69.4-70.0 / 67.5-67.9 / 66.5-66.7; bf16 58.5-58.6 / 53.3-56.9 / 52.4-52.6 -> 68.9-69.0 /
// 66.9-67.1 / 66.4-67.3. The RMS norm's rows, whose kernel became this template's other half
// (its output pass reshaped with the layer norm's; which change mattered was not isolated),
// gained in the same runs against 75da9e1's: f32 rows of 131072 / 262144 / 524288 81.0-81.9 /
// 81.7-81.8 / 81.5-81.7 -> 84.4-85.0 / 84.7-85.7 / 84.8-85.2, f16 77.3-77.4 / 79.0-79.1 /
// 79.0-79.1 -> 79.9-80.2 / 82.0-82.2 / 82.3-82.9, bf16 78.9-79.2 / 80.0-80.1 / 80.9 -> 82.2 /
// 82.9-83.1 / 84.7-84.8.
// The 16-bit layer norm takes its statistics in one pass (each thread's values about its first
// one, the lanes merged by Chan's formula) and, with both a weight and a bias, an output pass
// specialised for them (kBoth). Nsight Compute (H200, 2026-12-03 03:26Z, f16 rows of 262144, the
// form before) had the kernel at 54.2 M warp instructions against the RMS norm's 27.3 M, at 121.5
// against 74.8 us, its stall samples led by issue (not selected, selected, math: 41 %) where the
// RMS norm's were led by its barrier and memory. H200 A/B (kf-bench `--filter layer_norm
// --lengths 131072,262144,524288`, one call, two passes each; 03:37Z and 03:48Z), % of copy, f16
// rows of 131072 / 262144 / 524288: before 70.0-70.5 / 66.6-68.0 / 66.7-67.2; kBoth alone
// 70.2-70.8 / 69.2-69.4 / 68.3-69.0; both changes 72.8 / 70.6-70.7 / 69.4-69.6. bf16: 68.8-69.5
// / 65.7-66.8 / 66.2-66.8; 69.4-70.1 / 68.9-69.1 / 68.2-68.9; 72.0 / 70.3-70.4 / 69.3-69.5. f32
// keeps the form before: with kBoth it lost 1.3-2.3 points (73.8-74.5 / 73.0-73.6 / 70.9-71.5
// -> 72.2-72.6 / 70.5-71.6 / 69.3-69.5), with the one-pass statistics alone 2.0-3.3 at rows of
// 524288 (70.9-71.5 -> 68.2-68.9) and nothing at the shorter rows.
using math::with_activation;
using rows::GridPolicy;

// A part of a row for the layer norm: values whose mean is shift + d / (their count) and whose
// sum of squared differences from that mean is m2.
template <class T>
struct Moments {
  T shift, d, m2;
};

// Chan, Golub and LeVeque's parallel form over parts, K a lane of the first `lanes` lanes
// (part(k, m, n) sets m and its count n and returns true where lane's k-th part exists and holds
// values; every aligned run of `lanes` lanes holds each part once), about `base` (the first
// part's shift, the same in every lane): each part's mean offset from base, e = (shift - base) +
// d / n (the difference exact for nearby shifts), the row's offset c = sum(n e) / total (total:
// the parts' counts summed) and its sum of squares about the mean, sum(m2 + n (e - c)^2). Returns
// {base, total c, that sum}, the same bits in every lane (butterflies), so that a row with mean
// 1e4 and std 1e-2 keeps its variance.
template <int K, class T, class Part>
__device__ __forceinline__ Moments<T> merge_moments(T base, T total, int lanes, Part part_of) {
  T offset = 0;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    Moments<T> m;
    T n;
    if (part_of(k, m, n)) offset += n * (m.shift - base) + m.d;
  }
  offset = rows::lanes_reduce(offset, rows::Plus{}, lanes);
  const T c = offset / total;
  T m2 = 0;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    Moments<T> m;
    T n;
    if (part_of(k, m, n)) {
      const T e = (m.shift - base) + m.d / n;
      m2 += m.m2 + n * (e - c) * (e - c);
    }
  }
  return {base, offset, rows::lanes_reduce(m2, rows::Plus{}, lanes)};
}

// merge_moments where each lane holds one part, `mine`, of `part` values (none where part is 0).
template <class T>
__device__ __forceinline__ Moments<T> merge_lane_moments(T base, T part, T total, int lanes,
                                                         const Moments<T>& mine) {
  return merge_moments<1>(base, total, lanes, [&](int, Moments<T>& m, T& n) {
    m = mine;
    n = part;
    return part > T(0);
  });
}

// The layer norm's partials take 3 words a block: up to 64 blocks a row (two words a lane),
// where four spilled (launch_grid_rows).
inline constexpr int kLayerLaneWords = 2;

// kLaneWords: the published words a lane of the first warp holds, up to 32 * kLaneWords blocks
// a row (the layer norm's kLayerLaneWords; for the RMS norm rows::kLanesWords, or 1 where a row
// takes at most 32 blocks: launch_grid_rows).
// kResidual (the RMS norm): each slot holds the block's shares of x and of the residual (192 KiB
// a block, one block an SM); the statistics pass writes h = x + residual, rounded to S, over the
// staged x and to residual_out, and the output pass reads h there.
// kPartial: rows that are not a whole number of shares, dealt evenly to the blocks
// (rows::grid_share_vectors: `share` vectors a block, the last block the rest). A thread owns its
// first `owned` vectors of the share and its loops stop there; the statistics count the values
// each thread, warp and block holds. Without kPartial every count is a constant.
template <class S, bool kLayer, int kLaneWords, bool kResidual = false, bool kPartial = false>
__global__ void __launch_bounds__(GridPolicy::threads, kResidual ? 1 : 2)
    grid_norm_kernel(const __grid_constant__ Plan p, const rows::GridGroups q) {
  static_assert(!(kLayer && kResidual), "the layer norm takes no residual");
  cuda::wait_prior_grid();  // a dependent launch: nothing global is touched before this
  cuda::allow_next_grid();
  using G = GridPolicy;
  using T = math::compute_t<S>;
  using Traits = math::StorageTraits<S>;
  using Prim = typename math::PrimitivesFor<S>::type;
  constexpr int V = 16 / sizeof(S);
  constexpr int kWarps = G::threads / 32;
  constexpr int kWords = kLayer ? 3 : 1;  // words a block a row: Moments, or a sum of squares
  using Vec = rows::Pack<S, V>;
  static_assert(sizeof(Vec) == sizeof(uint4), "a vector is 16 bytes");
  extern __shared__ __align__(async_copy::kSharedAlign) unsigned char grid_bytes[];
  __shared__ T warp_sums[2][kWords][kWarps];
  __shared__ T row_stats[2][3];  // rstd; the layer norm's shift and center * rstd
  const int group = static_cast<int>(blockIdx.x) / q.blocks;
  const int rank = static_cast<int>(blockIdx.x) % q.blocks;
  if (group >= q.groups) return;
  const rows::Walk& w = p.walk;
  const int t = static_cast<int>(threadIdx.x), lane = t % 32, warp = t / 32;
  const rows::GridRing<S, Vec, kResidual ? 2 : 1> ring{reinterpret_cast<Vec*>(grid_bytes), t};
  const int64_t my_rows = (w.rows - group + q.groups - 1) / q.groups;
  constexpr int kShare = G::vectors * G::threads;  // a whole share's vectors
  const int share =
      kPartial ? rows::grid_share_vectors(w.row_length * int64_t{sizeof(S)}, q.blocks) : kShare;
  const int64_t first = int64_t{rank} * share * V;  // the block's first column
  // The vectors of a row block b owns, and this thread's: vector k at k * threads + t, k < owned.
  const int64_t row_vectors = w.row_length / V;
  const auto block_vectors = [&](int64_t b) {
    return kPartial ? static_cast<int>(std::min<int64_t>(share, row_vectors - b * share)) : kShare;
  };
  const int my_vectors = block_vectors(rank);
  const int owned = kPartial ? std::min(std::max(my_vectors - t + G::threads - 1, 0) / G::threads,
                                        int{G::vectors})
                             : G::vectors;
  const T count = static_cast<T>(w.row_length), eps = static_cast<T>(p.eps);
  const auto row_of = [&](int64_t i) { return group + i * q.groups; };
  const auto x_row = [&](int64_t i) {  // the block's share of row i
    return static_cast<const S*>(p.x.data) + rows::row_offset_cold(w, p.x, row_of(i)) + first;
  };
  const auto residual_row = [&](int64_t i) {  // the block's share of row i of the residual
    return static_cast<const S*>(p.residual.data) +
           rows::row_offset_cold(w, p.residual, row_of(i)) + first;
  };
  const auto stage = [&](int64_t i) {
    if constexpr (kResidual)
      ring.stage(i, x_row(i), residual_row(i), owned);
    else
      ring.stage(i, x_row(i), nullptr, owned);
  };
  // [row][word][block]
  const auto words_of = [&](int64_t i) { return q.words + row_of(i) * kWords * q.blocks; };
  // bf16 vectors widened a word at a time on the FMA pipe (rows::widen_bf16_pairs) and narrowed
  // a pair an instruction (cvt.rn.bf16x2.f32). H200 A/B (2026-11-30 08:39Z, kf-bench, same call,
  // two passes), % of copy, bf16 rows of 131072 / 262144 / 524288: 76.2-76.3 / 77.7-77.9 / 77.6
  // -> 79.0-79.9 / 80.8-81.3 / 81.2-81.5. The same for f16 (per-element widening, cvt.rn.f16x2
  // narrowing) lost 3.5-4 points (77.8 / 79.3-79.5 / 79.4-79.7 -> 74.0-74.3 / 75.5-75.8 /
  // 75.4-75.7): f16 and f32 keep the per-element conversions.
  constexpr bool kPairs = std::is_same_v<S, math::bfloat16_t>;
  const auto widen = [](const Vec& v, T(&f)[V]) {
    if constexpr (kPairs) {
      rows::widen_bf16_pairs(v, f);
    } else {
#pragma unroll
      for (int e = 0; e < V; ++e) f[e] = Traits::to_compute(v.v[e]);
    }
  };
  const S* const weight_share =
      p.weight.data ? static_cast<const S*>(p.weight.data) + first : nullptr;
  const S* const bias_share = p.bias.data ? static_cast<const S*>(p.bias.data) + first : nullptr;
  // The RMS norm's weight, held in registers for the launch.
  Vec weight[kLayer ? 1 : G::vectors];
  if constexpr (!kLayer) {
    if (weight_share) {
#pragma unroll
      for (int k = 0; k < G::vectors; ++k)
        if (!kPartial || k < owned)
          weight[k] = *reinterpret_cast<const Vec*>(weight_share + (k * G::threads + t) * V);
    }
  }
#pragma unroll
  for (int i = 0; i < G::ahead; ++i) {
    if (i < my_rows) stage(i);
    async_copy::commit();
  }
  // The values a thread, a warp (warp w's: warp_values(w)) and a block hold of a row (the layer
  // norm's parts).
  constexpr T kWholeThread = T(G::vectors * V), kWholeWarp = 32 * kWholeThread;
  const auto warp_values = [&](int w) {
    if constexpr (!kPartial) return kWholeWarp;
    int n = 0;
#pragma unroll
    for (int k = 0; k < G::vectors; ++k)  // warp w's threads' vectors k
      n += std::min(std::max(my_vectors - k * G::threads - w * 32, 0), 32);
    return T(n * V);
  };
  const T thread_values = kPartial ? T(owned * V) : kWholeThread;
  rows::PublishedRow<kLaneWords> published[kWords];
  for (int64_t i = 0; i <= my_rows; ++i) {
    const int64_t j = i - 1;  // the row written this iteration, once the group's partials are in
    // The first warp's loads of row j's words are in flight while the block reduces row i.
    if (j >= 0 && warp == 0) {
#pragma unroll
      for (int c = 0; c < kWords; ++c) published[c].fetch(words_of(j) + c * q.blocks, q.blocks);
    }
    if (i < my_rows) {                   // row i: this block's partial, published
      async_copy::wait<G::ahead - 1>();  // this thread's copies of row i have landed
      Vec* const s = ring.slot(i);
      if constexpr (kLayer && sizeof(S) == 2) {
        // One pass over the thread's values, about its first one (h0): their sums of differences
        // d and of squares d2, so the thread's part is {h0, d, d2 - d * d / n}. The lanes' parts
        // meet by Chan's formula (merge_moments) about lane 0's mean, so that rows with a large
        // mean keep their variance. Not about lane 0's h0: a row whose first value lies far out
        // then has its offsets from it summed, and its mean lost their low bits (bf16 rows of
        // 16384, the first value 250 over values in +-3, taken by this kernel in a trial at
        // 14:41Z: a saved mean of 0.0015869 for 0.0015766, FirstElementFarFromTheRest).
        T h0 = 0, d = 0, d2 = 0;
#pragma unroll
        for (int k = 0; k < G::vectors; ++k) {
          if constexpr (kPartial) {
            if (k >= owned) break;
          }
          T h[V];
          widen(s[k * G::threads + t], h);
          if (k == 0) h0 = h[0];
#pragma unroll
          for (int e = 0; e < V; ++e) {
            const T x = h[e] - h0;
            d += x;
            d2 += x * x;
          }
        }
        // (A thread, or a warp, that owns no vectors has a part of no values, left out.)
        const Moments<T> mine{h0, d, d2 - d * (d / thread_values)};
        const T base = __shfl_sync(0xffffffffu, h0 + d / thread_values, 0);
        const Moments<T> warp_part =
            merge_lane_moments(base, thread_values, warp_values(warp), 32, mine);
        if (lane == 0) {
          warp_sums[i & 1][0][warp] = warp_part.shift;
          warp_sums[i & 1][1][warp] = warp_part.d;
          warp_sums[i & 1][2][warp] = warp_part.m2;
        }
      } else {
        T sum = 0;
        // kResidual: h = x + residual, as residual_out holds it (combine), over the staged x.
        [[maybe_unused]] S* const h_out =
            kResidual && p.residual_out.data
                ? static_cast<S*>(p.residual_out.data) +
                      rows::row_offset_cold(w, p.residual_out, row_of(i)) + first
                : nullptr;
#pragma unroll
        for (int k = 0; k < G::vectors; ++k) {
          if constexpr (kPartial) {
            if (k >= owned) break;
          }
          T h[V];
          if constexpr (kResidual) {
            Vec hv = s[k * G::threads + t];
            T r[V];
            widen(hv, h);
            widen(s[ring.kShare + k * G::threads + t], r);
#pragma unroll
            for (int e = 0; e < V; ++e) {
              hv.v[e] = Traits::from_compute(h[e] + r[e]);
              h[e] = Traits::to_compute(hv.v[e]);
            }
            s[k * G::threads + t] = hv;
            if (h_out) {
              uint4 bits;
              memcpy(&bits, &hv, sizeof bits);
              __stcs(reinterpret_cast<uint4*>(h_out + (k * G::threads + t) * V), bits);
            }
          } else {
            widen(s[k * G::threads + t], h);
          }
#pragma unroll
          for (int e = 0; e < V; ++e) sum += kLayer ? h[e] : h[e] * h[e];
        }
        sum = rows::lanes_reduce(sum, rows::Plus{}, 32);
        if constexpr (kLayer) {
          // The warp's mean is the shift of its sums of differences (read from the slot again).
          const T shift = sum / warp_values(warp);
          T d = 0, d2 = 0;
#pragma unroll
          for (int k = 0; k < G::vectors; ++k) {
            if constexpr (kPartial) {
              if (k >= owned) break;
            }
            T h[V];
            widen(s[k * G::threads + t], h);
#pragma unroll
            for (int e = 0; e < V; ++e) {
              const T x = h[e] - shift;
              d += x;
              d2 += x * x;
            }
          }
          d = rows::lanes_reduce(d, rows::Plus{}, 32);
          d2 = rows::lanes_reduce(d2, rows::Plus{}, 32);
          if (lane == 0) {
            warp_sums[i & 1][0][warp] = shift;
            warp_sums[i & 1][1][warp] = d;
            warp_sums[i & 1][2][warp] = d2 - d * (d / warp_values(warp));
          }
        } else if (lane == 0) {
          warp_sums[i & 1][0][warp] = sum;
        }
      }
      __syncthreads();
      if (warp == 1) {
        if constexpr (kLayer) {
          const int from = lane % kWarps;
          const Moments<T> mine{warp_sums[i & 1][0][from], warp_sums[i & 1][1][from],
                                warp_sums[i & 1][2][from]};
          const Moments<T> block = merge_lane_moments(warp_sums[i & 1][0][0], warp_values(from),
                                                      T(my_vectors * V), kWarps, mine);
          if (lane == 0) {
            unsigned long long* to = words_of(i) + rank;
            rows::publish(to, block.shift, q.tag);
            rows::publish(to + q.blocks, block.d, q.tag);
            rows::publish(to + 2 * q.blocks, block.m2, q.tag);
          }
        } else {
          const T sum =
              rows::lanes_reduce(warp_sums[i & 1][0][lane % kWarps], rows::Plus{}, kWarps);
          if (lane == 0) rows::publish(words_of(i) + rank, sum, q.tag);
        }
      }
    }
    if (j >= 0) {
      if (warp == 0) {
        if constexpr (kLayer) {
#pragma unroll
          for (int c = 0; c < kWords; ++c)
            published[c].wait(words_of(j) + c * q.blocks, q.blocks, q.tag);
          const T base = __shfl_sync(0xffffffffu, published[0].value(0), 0);  // block 0's shift
          const Moments<T> row =
              merge_moments<kLaneWords>(base, count, 32, [&](int k, Moments<T>& m, T& n) {
                const int b = lane + 32 * k;
                if (b >= q.blocks) return false;
                m = {published[0].value(k), published[1].value(k), published[2].value(k)};
                n = T(block_vectors(b) * V);
                return true;
              });
          const T center = row.d / count;
          // row.m2 is the sum of squares about the mean: no centre to take off.
          const T rstd = math::stats::layer_norm_stats<T>(T(0), row.m2, count, eps).rstd;
          if (lane == 0) {
            row_stats[j & 1][0] = rstd;
            row_stats[j & 1][1] = base;
            if (rank == 0) {
              const int64_t r = row_of(j);
              if (p.mean.data)
                static_cast<T*>(p.mean.data)[rows::row_offset_cold(w, p.mean, r)] = base + center;
              if (p.rstd.data)
                static_cast<T*>(p.rstd.data)[rows::row_offset_cold(w, p.rstd, r)] = rstd;
            }
          }
          if (lane == 1) row_stats[j & 1][2] = center * rstd;
        } else {
          const T total = published[0].sum(words_of(j), q.blocks, q.tag);
          if (lane == 0) row_stats[j & 1][0] = math::stats::rms_rstd<T>(total, count, eps);
        }
      }
      __syncthreads();
      const T rstd = row_stats[j & 1][0];
      Vec* s = ring.slot(j);
      S* out = static_cast<S*>(p.out.data) + rows::row_offset_cold(w, p.out, row_of(j)) + first;
      const bool restage = i + G::ahead < my_rows;  // row i + 2 takes row j's slot
      const S* next = restage ? x_row(i + G::ahead) : nullptr;
      // Row j's residual share was read in its statistics pass, before this row's barriers.
      [[maybe_unused]] const S* next_residual = nullptr;
      if constexpr (kResidual) next_residual = restage ? residual_row(i + G::ahead) : nullptr;
      // The output pass; kBoth (16-bit layer norm with a weight and a bias): the operands loaded
      // unconditionally and applied by one FMA. With their presence known only at run time the
      // f16 kernel spent two byte permutes an element merging predicated loads and a multiply and
      // an add apart (SASS, sm_90): 825 instructions a thread a row against the RMS norm's 416.
      const auto output_pass = [&](auto act, auto both) {
        constexpr bool kBoth = decltype(both)::value;
        const bool has_weight = kBoth || weight_share, has_bias = kBoth || bias_share;
        // The layer norm's y = (h - shift) * rstd - center * rstd, then the affine.
        const T shift = kLayer ? row_stats[j & 1][1] : T(0);
        const T scaled_center = kLayer ? row_stats[j & 1][2] : T(0);
        // The layer norm's weight and bias vectors, kAffine slots at a time, loaded from L2 in
        // program order (rows::load_in_order): hoisting all of them spilled.
        constexpr int kAffine = sizeof(S) == 4 ? 2 : 1;
        [[maybe_unused]] Vec affine[kLayer ? 2 : 1][kAffine];
#pragma unroll
        for (int k = 0; k < G::vectors; ++k) {
          if constexpr (kPartial) {
            if (k >= owned) break;
          }
          const Vec hv = s[k * G::threads + t];
          Vec wv, bv;
          if constexpr (kLayer) {
            if (k % kAffine == 0) {
#pragma unroll
              for (int a = 0; a < kAffine; ++a) {
                if constexpr (kPartial) {
                  if (k + a >= owned) break;
                }
                const int64_t at = ((k + a) * G::threads + t) * V;
                if (has_weight) affine[0][a] = rows::load_in_order<Vec>(weight_share + at);
                if (has_bias) affine[1][a] = rows::load_in_order<Vec>(bias_share + at);
              }
            }
            wv = affine[0][k % kAffine];
            bv = affine[1][k % kAffine];
          } else {
            wv = weight[k];
          }
          uint4 bits;
          if constexpr (kPairs) {
            T y[V];
            widen(hv, y);
#pragma unroll
            for (int e = 0; e < V; ++e)
              y[e] = kLayer ? (y[e] - shift) * rstd - scaled_center : y[e] * rstd;
            if constexpr (kBoth) {
              T wk[V], bk[V];
              widen(wv, wk);
              widen(bv, bk);
#pragma unroll
              for (int e = 0; e < V; ++e) y[e] = fmaf(y[e], wk[e], bk[e]);
            } else {
              if (has_weight) {
                T wk[V];
                widen(wv, wk);
#pragma unroll
                for (int e = 0; e < V; ++e) y[e] *= wk[e];
              }
              if (kLayer && has_bias) {
                T bk[V];
                widen(bv, bk);
#pragma unroll
                for (int e = 0; e < V; ++e) y[e] += bk[e];
              }
            }
#pragma unroll
            for (int e = 0; e < V; ++e) y[e] = act(y[e], Prim{});
            bits = bf16::narrow_pairs(y);
          } else {
            Vec yv;
#pragma unroll
            for (int e = 0; e < V; ++e) {
              const T h = Traits::to_compute(hv.v[e]);
              T y = kLayer ? (h - shift) * rstd - scaled_center : h * rstd;
              if constexpr (kBoth) {
                y = y * Traits::to_compute(wv.v[e]) + Traits::to_compute(bv.v[e]);  // one FMA
              } else {
                if (has_weight) y *= Traits::to_compute(wv.v[e]);
                if (kLayer && has_bias) y += Traits::to_compute(bv.v[e]);
              }
              yv.v[e] = Traits::from_compute(act(y, Prim{}));
            }
            memcpy(&bits, &yv, sizeof bits);
          }
          ring.write(s, k, out, bits, restage, next, hv, next_residual);
        }
      };
      with_activation(p.act, [&](auto act) {
        if constexpr (kLayer && sizeof(S) == 2) {
          if (weight_share && bias_share) return output_pass(act, std::true_type{});
        }
        output_pass(act, std::false_type{});
      });
    } else if (i + G::ahead < my_rows) {
      stage(i + G::ahead);
    }
    async_copy::commit();
  }
}

// launch_grid_rows's launch of `blocks` blocks a row (kPartial: rows that are not a whole number
// of shares).
template <class S, bool kPartial>
bool launch_grid_kernel(const Plan& p, int64_t blocks, int32_t device, cudaStream_t stream) {
  using G = GridPolicy;
  // Three words a block a row for the layer norm (Moments), one for the RMS norm.
  // The RMS norm's rows of up to 32 blocks (16-bit rows of 262144, f32 rows of up to 262144)
  // take the instance that holds one word a lane. H200 A/B (2026-11-30 16:15Z, kf-bench
  // `--filter rms_norm,layer_norm --lengths 65536,131072,262144`, same call, two passes each), %
  // of copy, rows of 262144: RMS norm f16 82.5 / 82.0 -> 83.8 / 83.8, bf16 83.9 / 84.1 -> 84.2 /
  // 83.7, f32 85.5 / 84.5 -> 84.6 / 84.9; the shorter rows within 2.2 either way. The layer
  // norm's instance with one word a lane lost 4 % (f16) and 7 % (bf16) over the same rows, so it
  // keeps kLayerLaneWords.
  const char* const what = "norm kernel launch";
  if (p.kind == Kind::layer) {
    if constexpr (kPartial && sizeof(S) == 2) {
      return false;  // not taken (launch_grid_rows), so not built
    } else {
      return rows::launch_grid_groups<&grid_norm_kernel<S, true, kLayerLaneWords, false, kPartial>,
                                      G::threads, G::smem>(p, blocks, 3, device, stream, what);
    }
  }
  if (p.residual.data) {
    constexpr size_t kSmem = 2 * G::smem;  // x's and the residual's shares a slot
    if (blocks <= 32)
      return rows::launch_grid_groups<&grid_norm_kernel<S, false, 1, true, kPartial>, G::threads,
                                      kSmem>(p, blocks, 1, device, stream, what);
    return rows::launch_grid_groups<&grid_norm_kernel<S, false, rows::kLanesWords, true, kPartial>,
                                    G::threads, kSmem>(p, blocks, 1, device, stream, what);
  }
  if (blocks <= 32)
    return rows::launch_grid_groups<&grid_norm_kernel<S, false, 1, false, kPartial>, G::threads,
                                    G::smem>(p, blocks, 1, device, stream, what);
  return rows::launch_grid_groups<&grid_norm_kernel<S, false, rows::kLanesWords, false, kPartial>,
                                  G::threads, G::smem>(p, blocks, 1, device, stream, what);
}

// Runs the grid-group kernel where it takes the rows: the layer norm, and the RMS norm without a
// bias (with a residual or without), f32 and 16-bit rows of at least GridPolicy::min_row_bytes
// in whole 16-byte vectors, up to 32 * rows::kLanesWords blocks' shares (the layer norm's up to
// 32 * kLayerLaneWords), on sm_90 (where it was measured), when a group fits on the device at
// once and the plan carries the scratch (Plan::pool, Plan::grid); false otherwise. Rows that are
// not a whole number of shares take the kPartial instances. The caller has checked that the rows
// are dense and 16-byte aligned and that rows < kMaxColdRows.
template <class S>
bool launch_grid_rows(const Plan& p, int32_t device, cudaStream_t stream) {
  using G = GridPolicy;
  if ((p.kind == Kind::rms && p.bias.data) || !p.dense) return false;
  const int64_t row_bytes = p.walk.row_length * int64_t{sizeof(S)};
  // Rows that are not whole shares (kPartial), where they measured faster than the kernels they
  // had. H200 A/B (2026-12-03 16:31Z, kf-bench, same call, two passes), % of copy, before ->
  // kPartial: RMS norm f32 rows of 20000 / 40000 / 100000 / 200000 74 / 72 / 69 / 67 -> 77 / 81
  // / 81 / 82, f16 and bf16 rows of 40000 / 100000 / 200000 75 / 67 / 64 and 67 / 68 / 63 -> 76
  // / 79 / 81 and 76 / 79 / 80; with a residual f32 rows of 40000 / 100000 / 200000 80 / 73 / 62
  // -> 84 / 83 / 84, 16-bit rows of 100000 / 200000 71-72 / 65-67 -> 80 / 82-83; the f32 layer
  // norm's rows of 40000 / 100000 / 200000 63 / 59 / 57 -> 70 / 68 / 69. Left out: the 16-bit
  // layer norm's (f16 rows of 40000 / 100000 61 / 62 -> 53 / 55, bf16 57 / 58 -> 55 / 56), and
  // the f32 layer norm's and RMS norm's with a residual under three shares (rows of 20000: 65 ->
  // 63 and 81 -> 77; rows of 24000 gained about 1 point).
  const bool partial = row_bytes % G::share_bytes != 0;
  if (partial) {
    if (p.kind == Kind::layer && sizeof(S) == 2) return false;
    if (sizeof(S) == 4 && (p.kind == Kind::layer || p.residual.data) &&
        row_bytes < 3 * G::share_bytes)
      return false;
  }
  const int64_t blocks = rows::grid_blocks_a_row(
      p.walk.row_length, sizeof(S),
      32 * (p.kind == Kind::layer ? kLayerLaneWords : rows::kLanesWords), true);
  if (blocks == 0) return false;
  return partial ? launch_grid_kernel<S, true>(p, blocks, device, stream)
                 : launch_grid_kernel<S, false>(p, blocks, device, stream);
}

}  // namespace
}  // namespace kf::norm
