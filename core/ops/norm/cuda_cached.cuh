// The norm family's register-cached kernel (see core/ops/norm/cuda.cuh for when it runs): rows of
// up to 16384 elements held in registers (core/ops/rows/tile.cuh), a few lanes, a warp or a block
// a row; its builds and launches are in cuda.cuh.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "core/math/activation.hpp"
#include "core/math/numeric.hpp"
#include "core/math/row_stats.hpp"
#include "core/ops/async_copy.cuh"
#include "core/ops/norm/cuda_storage.hpp"
#include "core/ops/norm/norm.hpp"
#include "core/ops/rows/reduce.cuh"
#include "core/ops/rows/tile.cuh"
#include "core/runtime/cuda/grid_dependency.cuh"

namespace kf::norm {
namespace {

// The output loops take their activation from math::with_activation: none and ReLU get their
// own copy of the loop, the transcendental ones share one. 16-bit outputs use math::HalfStorage's
// fast primitives, as the elementwise kernels do.
using math::with_activation;

using rows::AddSums;
using rows::Sums;

// Register-cached rows (see the top of cuda.cuh). The layer norm shift is the row mean, taken
// from the cached row first, so sum_d and sum_d2 are of exact small differences, as on the CPU.
// Written for few instructions per element (a 16-bit row has about 25 issue slots per element at
// H200 bandwidth, and the layer norm took 32 before kClamped below: Nsight Compute, bf16 rows of
// 16384, 2026-11-26): unpredicated loads, sums masked a chunk at a time, both sums of differences
// in one reduction, the statistics without divisions, one multiply-add for weight and bias, the
// activation chosen outside the output loop.
// kResidual: the form with a residual has its own instantiation, so the common form does not
// pay for the second row's registers.
// kStage = false: the form without the shared-memory staging below, for devices that lose with
// it (rows::tile_stages_rows).
// kBlocks: the resident blocks per SM it is compiled for (0: rows::tile_min_blocks; see
// residual_takes_three_blocks).
// kWordPairs: bf16 row, weight and bias widened a 32-bit word of two elements at a time
// (rows::widen_bf16_pairs; see LayerPairs).
// kAffinePairs: only the weight and bias so widened, the row element by element (see
// layer_takes_affine_pairs).
// kSharedAffine: the layer norm's weight and bias are copied into shared memory once a launch and
// read from there for every row (see LayerSharedAffine); the plan has both.
// kStageNext: the next row is staged in shared memory as in the kShared form below for a policy
// that rows::tile_prefetches_shared does not name (f32 rows of 1537..2048 in launch_cached); the
// launch gives the kernel one row's slots (rows::tile_shared_bytes<P, S, 1>).
template <class P, class S, bool kResidual, bool kStage = true, int kBlocks = 0,
          bool kWordPairs = false, bool kAffinePairs = false, bool kSharedAffine = false,
          bool kStageNext = false>
__global__ void __launch_bounds__(P::threads, kBlocks > 0 ? kBlocks : rows::tile_min_blocks<P, S>())
    cached_kernel(const __grid_constant__ Plan p) {
  cuda::wait_prior_grid();  // a dependent launch: nothing global is touched before this
  cuda::allow_next_grid();
  using T = math::compute_t<S>;
  using Traits = math::StorageTraits<S>;
  using Prim = typename math::PrimitivesFor<S>::type;
  using Vec = rows::Pack<S, P::vec>;
  // The block reductions alternate between scratch arrays (rows::block_reduce's kReuse = false:
  // one barrier each instead of two): the layer norm's two a row take scratch[0] and
  // pair_scratch, the RMS norm's one takes scratch[0] and scratch[1] on alternate rows.
  __shared__ T scratch[2][32];
  __shared__ Sums<T> pair_scratch[32];
  unsigned parity = 0;
  const rows::Walk& w = p.walk;
  const int n = static_cast<int>(w.row_length);  // at most P::capacity (rows::tile_col)
  const T count = static_cast<T>(n), eps = static_cast<T>(p.eps);
  const int lane = threadIdx.x % P::group, slot = threadIdx.x / P::group;
  // With prefetching (rows::tile_prefetches: 16-bit rows) the grid is resident and the next
  // row's loads are issued before the current row is worked on.
  constexpr bool kPrefetch = rows::tile_prefetches<P, S>();
  struct Raw {
    rows::TileRaw<P, S> x, residual;
  };
  // Rows of 16-byte vectors in f32/f16/bf16 (kClamped) load every chunk (rows::tile_load_col:
  // past the row's end, its last vector again), so no load is predicated and no value is
  // padded, and take the per-row forms with fewer instructions below; the sums leave the chunks
  // past the end out. Scalar rows and f64, whose kernels sit at their register limit (that form
  // spilled there), load only their columns, pad with 0 and keep the element-wise forms.
  // H200, same call (2026-11-27 00:11Z, a row-op timer, two passes), GB/s change: layer norm
  // f16 / bf16 rows of 64, 1024, 4096, 16384 +15 .. +29 %, f32 -2 .. +5 %; RMS norm -3 .. +7 %.
  constexpr bool kClamped = P::vec > 1 && sizeof(T) == 4;
  // The block reductions see the block size fixed (rows::block_reduce), but for the form with a
  // residual: H200 A/B (2026-11-27 05:44Z, kf-bench, same call, two passes), % of copy, the f16
  // RMS norm with a residual over rows of 4096 went from 86.5 to 82.0 with it (bf16 86.3 / 86.1,
  // f32 89.4 / 89.6), while the common form gained: layer norm f16 / bf16 rows of 4096 75.1 /
  // 72.8 -> 79.2 / 77.5 and of 16384 75.0 / 67.7 -> 78.7 / 72.0, f32 rows of 4096 80.8 -> 82.3;
  // RMS norm f16 rows of 4096 84.3 -> 84.9, bf16 82.6 -> 83.8.
  constexpr int kReduceThreads = kResidual ? 0 : P::threads;
  // A row past the last loads nothing: its values feed only results that are dropped (its
  // group's sums, stores of length 0).
  auto fetch = [&](int64_t first, Raw& raw) {
    const int64_t row = first + slot;
    if (row >= w.rows) return;
    const auto fetch_row = [&](const rows::Operand& o, rows::TileRaw<P, S>& to) {
      const S* from = static_cast<const S*>(o.data) + rows::row_offset_cold(w, o, row);
      if constexpr (kClamped)
        rows::tile_fetch_clamped<P>(from, n, lane, to);
      else
        rows::tile_fetch<P>(from, n, lane, to);
    };
    fetch_row(p.x, raw.x);
    if constexpr (kResidual) fetch_row(p.residual, raw.residual);
  };
  constexpr bool kPairs = kWordPairs && !kResidual && rows::pairs_widen<P, S>();
  // kPackedSum: 16-bit rows of 16-byte vectors add the residual two elements an instruction and
  // store residual_out as summed (rows::packed_sum: the same bits as the element-wise sum
  // rounded to S, which input() and the staged kernel take). H100 A/B (2026-11-27 23:31Z,
  // kf-bench, same call, four passes), RMS norm with a residual over 8192 rows of 4096, % of
  // copy: bf16 86.9 / 87.1 / 86.9 / 86.9 -> 87.9 / 88.5 / 88.4 / 88.2, f16 90.2-90.5 ->
  // 90.0-90.4; the RMS norm's other rows within noise.
  constexpr bool kPackedSum =
      kResidual && kClamped && sizeof(S) == 2 && rows::packed_sum_available<S>();
  auto convert = [&](const rows::TileRaw<P, S>& from, int length, T(&to)[P::items]) {
    if constexpr (kClamped)
      rows::tile_convert<P, S, kPairs>(from, to);
    else
      rows::tile_unpack<P, S, kPairs>(from, length, lane, to, T(0));
  };
  // kClamped rows scale by 1 / n and take rsqrt (math::stats::*_scaled: no range checks or slow
  // paths in the per-row work); the others keep the divisions.
  const T inv_count = T(1) / count;
  const auto mean_of = [&](T total) { return kClamped ? total * inv_count : total / count; };
  // kShared (rows::tile_prefetches_shared: f32 rows of 32 elements a thread and the layer norm's
  // 16-bit rows of 40 or 48, without a residual): the next row is staged in shared memory while
  // this one is worked on.
  constexpr bool kShared =
      (rows::tile_prefetches_shared<P, S>() || kStageNext) && !kResidual && kStage;
  using Slot = rows::Pack<S, P::vec>;
  const auto stage = [&](int64_t first) {
    const int64_t row = first + slot;
    if constexpr (kShared) {
      if (row >= w.rows) return;
      Slot* const slots = rows::tile_slots<P, S>();
      rows::tile_stage<P, kClamped>(
          static_cast<const S*>(p.x.data) + rows::row_offset_cold(w, p.x, row), n, lane, slots);
    }
  };
  // kSharedAffine: past the staged row (kShared), chunks * threads slots of the weight's vectors
  // and as many of the bias's, thread t's chunk k at k * threads + t: the columns its output pass
  // reads (tile_load_col, the same for every row). Each thread reads back only the slots it
  // copied, so no barrier is needed. The copies join the first staged row's group (kShared) or
  // commit a group of their own, waited for before the first row's output pass.
  static_assert(!kSharedAffine ||
                    (kClamped && !kResidual && P::group == P::threads && P::vec * sizeof(S) == 16),
                "the shared affine is for rows of 16-byte vectors over a block");
  [[maybe_unused]] Slot* const affine = rows::tile_slots<P, S>(kShared ? 1 : 0);
  if constexpr (kSharedAffine) {
    const S* weight = static_cast<const S*>(p.weight.data);
    const S* bias = static_cast<const S*>(p.bias.data);
#pragma unroll
    for (int k = 0; k < P::chunks; ++k) {
      const int c = rows::tile_load_col<P>(lane, k, n);
      async_copy::copy16(affine + k * P::threads + threadIdx.x, weight + c);
      async_copy::copy16(affine + (P::chunks + k) * P::threads + threadIdx.x, bias + c);
    }
    if constexpr (!kShared) async_copy::commit();
  }
  Raw raw;
  if constexpr (kPrefetch) fetch(int64_t{blockIdx.x} * P::rows_per_block, raw);
  if constexpr (kShared) {
    stage(int64_t{blockIdx.x} * P::rows_per_block);
    async_copy::commit();
  }
  for (int64_t first = int64_t{blockIdx.x} * P::rows_per_block; first < w.rows;
       first += int64_t{gridDim.x} * P::rows_per_block) {
    const int64_t row = first + slot;
    const int length = row < w.rows ? n : 0;  // rows past the end store nothing
    const int64_t r = row < w.rows ? row : 0;
    // Whether chunk k is inside the row.
    const auto inside = [&](int k) { return rows::tile_col<P>(lane, k) < length; };
    T h[P::items];
    T add[kResidual && !kPackedSum ? P::items : 1];
    // kPackedSum: h = x + residual, in S.
    std::conditional_t<kPackedSum, rows::TileWords<P, S>, char> summed;
    // h (and add) from a fetched row: x and the residual widened, or their packed sum.
    const auto take = [&](const Raw& from) {
      if constexpr (kPackedSum) {
        rows::tile_sum_words(from.x, from.residual, summed);
        rows::tile_convert<P, S>(summed, h);
      } else {
        convert(from.x, length, h);
        if constexpr (kResidual) convert(from.residual, length, add);
      }
    };
    if constexpr (kPrefetch) {
      Raw next;
      fetch(first + int64_t{gridDim.x} * P::rows_per_block, next);
      take(raw);
      raw = next;
    } else if constexpr (kShared) {
      async_copy::wait<0>();  // this thread's copies of the row have landed
      const Slot* const slots = rows::tile_slots<P, S>();
      Raw now;
      if (row < w.rows) rows::tile_read_staged<P, kClamped>(slots, n, lane, now.x);
      stage(first + int64_t{gridDim.x} * P::rows_per_block);  // into the slots just read
      async_copy::commit();
      convert(now.x, length, h);
    } else if constexpr (kClamped) {
      Raw now;
      fetch(first, now);
      take(now);
    } else {
      rows::tile_load<P>(static_cast<const S*>(p.x.data) + rows::row_offset_cold(w, p.x, r), length,
                         lane, h, T(0));
      if constexpr (kResidual)
        rows::tile_load<P>(
            static_cast<const S*>(p.residual.data) + rows::row_offset_cold(w, p.residual, r),
            length, lane, add, T(0));
    }
    if constexpr (kPackedSum) {
      if (p.residual_out.data)
        rows::tile_store_words<P>(
            static_cast<S*>(p.residual_out.data) + rows::row_offset_cold(w, p.residual_out, r),
            length, lane, summed);
    } else if constexpr (kResidual) {
#pragma unroll
      for (int i = 0; i < P::items; ++i)
        h[i] = Traits::to_compute(Traits::from_compute(h[i] + add[i]));
      if (p.residual_out.data)
        rows::tile_store<P>(
            static_cast<S*>(p.residual_out.data) + rows::row_offset_cold(w, p.residual_out, r),
            length, lane, h);
    }
    T shift = 0, scaled_center = 0, rstd;  // y = (h - shift) * rstd - scaled_center
    if (p.kind == Kind::layer) {
      // kClamped rows sum a chunk at a time and leave the chunks past the end out; the others
      // (padded with 0) sum element by element.
      T sum = 0;
      if constexpr (kClamped) {
#pragma unroll
        for (int k = 0; k < P::chunks; ++k) {
          T part = h[k * P::vec];
#pragma unroll
          for (int e = 1; e < P::vec; ++e) part += h[k * P::vec + e];
          if (inside(k)) sum += part;
        }
      } else {
#pragma unroll
        for (int i = 0; i < P::items; ++i) sum += h[i];  // padding is 0
      }
      shift = mean_of(
          rows::group_reduce<kReduceThreads, false>(sum, rows::Plus{}, P::group, scratch[0]));
      Sums<T> sums{0, 0};
#pragma unroll
      for (int k = 0; k < P::chunks; ++k) {
        if constexpr (kClamped) {
          const T d0 = h[k * P::vec] - shift;
          Sums<T> part{d0, d0 * d0};
#pragma unroll
          for (int e = 1; e < P::vec; ++e) {
            const T d = h[k * P::vec + e] - shift;
            part.d += d;
            part.d2 += d * d;
          }
          if (inside(k)) sums = AddSums{}(sums, part);
        } else {
#pragma unroll
          for (int e = 0; e < P::vec; ++e) {
            const T d = inside(k) ? h[k * P::vec + e] - shift : T(0);
            sums.d += d;
            sums.d2 += d * d;
          }
        }
      }
      sums = rows::group_reduce<kReduceThreads, false>(sums, AddSums{}, P::group, pair_scratch);
      const auto s = kClamped
                         ? math::stats::layer_norm_stats_scaled<T>(sums.d, sums.d2, inv_count, eps)
                         : math::stats::layer_norm_stats<T>(sums.d, sums.d2, count, eps);
      rstd = s.rstd;
      scaled_center = s.center * rstd;  // small: x - shift is the exact difference
      if (lane == 0 && length > 0) {
        if (p.mean.data)
          static_cast<T*>(p.mean.data)[rows::row_offset_cold(w, p.mean, r)] = shift + s.center;
        if (p.rstd.data) static_cast<T*>(p.rstd.data)[rows::row_offset_cold(w, p.rstd, r)] = rstd;
      }
    } else {
      T squares = 0;
      if constexpr (kClamped) {
#pragma unroll
        for (int k = 0; k < P::chunks; ++k) {
          T part = h[k * P::vec] * h[k * P::vec];
#pragma unroll
          for (int e = 1; e < P::vec; ++e) part += h[k * P::vec + e] * h[k * P::vec + e];
          if (inside(k)) squares += part;
        }
      } else {
#pragma unroll
        for (int i = 0; i < P::items; ++i) squares += h[i] * h[i];
      }
      const T total = rows::group_reduce<kReduceThreads, false>(squares, rows::Plus{}, P::group,
                                                                scratch[parity]);
      parity ^= 1;
      rstd = kClamped ? math::stats::rms_rstd_scaled<T>(total, inv_count, eps)
                      : math::stats::rms_rstd<T>(total, count, eps);
    }
    // y = (h - shift) * rstd - scaled_center. 16-bit rows take it as one multiply-add,
    // h * rstd - (shift * rstd + scaled_center): the offset's rounding (2^-24 of |shift| * rstd)
    // is 2^-13 of the rounding a 16-bit x already carries at that magnitude.
    const T offset = shift * rstd + scaled_center;
    const auto normalized = [&](T v) {
      if constexpr (sizeof(S) == 2 && kClamped)
        return v * rstd - offset;
      else
        return (v - shift) * rstd - scaled_center;
    };
    // Weight and bias are read a chunk at a time (from L1/L2: every row shares them; holding them
    // in registers across rows cost more registers than it saved; kSharedAffine: from shared
    // memory). The activation runs over the finished row in its own short loop, so its
    // temporaries are not live beside w and b.
    const S* weight = static_cast<const S*>(p.weight.data);
    const S* bias = static_cast<const S*>(p.bias.data);
    if (kClamped && weight && bias) {  // layer norm's usual case: unpredicated loads
      // (kShared's wait at the top of the row covers the shared affine's copies.)
      if constexpr (kSharedAffine && !kShared) async_copy::wait<0>();
#pragma unroll
      for (int k = 0; k < P::chunks; ++k) {
        Vec wk, bk;
        if constexpr (kSharedAffine) {
          wk = affine[k * P::threads + threadIdx.x];
          bk = affine[(P::chunks + k) * P::threads + threadIdx.x];
        } else {
          const int c = rows::tile_load_col<P>(lane, k, n);
          wk = *reinterpret_cast<const Vec*>(weight + c);
          bk = *reinterpret_cast<const Vec*>(bias + c);
        }
        if constexpr (kPairs || (kAffinePairs && rows::pairs_widen<P, S>())) {
          T wf[P::vec], bf[P::vec];
          rows::widen_bf16_pairs(wk, wf);
          rows::widen_bf16_pairs(bk, bf);
#pragma unroll
          for (int e = 0; e < P::vec; ++e)
            h[k * P::vec + e] = normalized(h[k * P::vec + e]) * wf[e] + bf[e];
        } else {
#pragma unroll
          for (int e = 0; e < P::vec; ++e)
            h[k * P::vec + e] = normalized(h[k * P::vec + e]) * Traits::to_compute(wk.v[e]) +
                                Traits::to_compute(bk.v[e]);
        }
      }
    } else if (!kWordPairs && kClamped && weight) {
      // The RMS norm's usual case, a weight without a bias: unpredicated loads, where the loop
      // below loads under a predicate (16-bit vectors then split a PRMT an element) and issues the
      // absent bias's instructions predicated off. A/B, kf-bench, same call, b041fc2's library
      // against this one (with packed_sum and cached_max_blocks), RMS norm, % of copy: H100
      // (2026-11-27 23:50Z, two passes) f32 rows of 1024 92.8 / 93.0 -> 95.2 / 95.0 and of 16384
      // 92.1 / 92.3 -> 94.7 / 94.8, bf16 rows of 1024 89.6 / 90.5 -> 92.0 / 92.1 and of 16384
      // 86.7 / 86.7 -> 88.3 / 88.6, with a residual over bf16 rows of 4096 87.0 / 86.5 -> 90.3 /
      // 90.3, the f32 32x512x768 seed 82.8 / 83.0 -> 86.2 / 86.5, f16 rows of 4096 93.1 / 92.9 ->
      // 91.4 / 92.1; H200 (2026-11-28 00:05Z, three passes against two) bf16 rows of 4096 83.9 /
      // 83.6 / 83.6 -> 87.3 / 87.2 and of 16384 83.2 / 83.3 / 83.2 -> 86.2 / 86.2, f32 rows of
      // 1024 90.1 / 89.8 / 89.8 -> 92.8 / 92.7. Not in the LayerPairs build (kWordPairs): with it
      // there the layer norm's bf16 rows of 64 fell from 86.9 to 74.4 on the H200 (same call), so
      // those kernels stay as they were measured (their sm_90 SASS is b041fc2's).
#pragma unroll
      for (int k = 0; k < P::chunks; ++k) {
        const Vec wk = *reinterpret_cast<const Vec*>(weight + rows::tile_load_col<P>(lane, k, n));
#pragma unroll
        for (int e = 0; e < P::vec; ++e)
          h[k * P::vec + e] = normalized(h[k * P::vec + e]) * Traits::to_compute(wk.v[e]);
      }
    } else {
#pragma unroll
      for (int k = 0; k < P::chunks; ++k) {
        const int c = rows::tile_col<P>(lane, k);
        Vec wk, bk;
        if (weight && c < n) wk = *reinterpret_cast<const Vec*>(weight + c);
        if (bias && c < n) bk = *reinterpret_cast<const Vec*>(bias + c);
        if constexpr (kPairs) {
          T wf[P::vec], bf[P::vec];
          if (weight) rows::widen_bf16_pairs(wk, wf);
          if (bias) rows::widen_bf16_pairs(bk, bf);
#pragma unroll
          for (int e = 0; e < P::vec; ++e) {
            T y = normalized(h[k * P::vec + e]);
            if (weight) y *= wf[e];
            if (bias) y += bf[e];
            h[k * P::vec + e] = y;
          }
        } else {
#pragma unroll
          for (int e = 0; e < P::vec; ++e) {
            T y = normalized(h[k * P::vec + e]);
            if (weight) y *= Traits::to_compute(wk.v[e]);
            if (bias) y += Traits::to_compute(bk.v[e]);
            h[k * P::vec + e] = y;
          }
        }
      }
    }
    with_activation(p.act, [&](auto act) {
#pragma unroll
      for (int i = 0; i < P::items; ++i) h[i] = act(h[i], Prim{});
    });
    rows::tile_store<P, rows::tile_streams_output<P, S>(kShared)>(
        static_cast<S*>(p.out.data) + rows::row_offset_cold(w, p.out, r), length, lane, h);
  }
}

}  // namespace
}  // namespace kf::norm
