// The softmax family's staged rows (see core/ops/softmax/cuda.cuh for when they run): rows copied
// to shared memory a block or a thread-block cluster a row (core/ops/rows/staged.cuh), the
// shifted form for rows off 16-byte vectors, and their launches, which hand the longest rows to
// the grid-group kernel (cuda_grid.cuh).
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "core/math/elementary.hpp"
#include "core/math/numeric.hpp"
#include "core/math/row_stats.hpp"
#include "core/ops/async_copy.cuh"
#include "core/ops/rows/reduce.cuh"
#include "core/ops/rows/staged.cuh"
#include "core/ops/softmax/cuda_grid.cuh"
#include "core/ops/softmax/cuda_row_exp.cuh"
#include "core/ops/softmax/cuda_storage.hpp"
#include "core/ops/softmax/softmax.hpp"
#include "core/runtime/cuda/grid_dependency.cuh"

namespace kf::softmax {
namespace {

// The row's maximum and sum of exp from its blocks' own (rows::ClusterReducer::exchange): the
// maximum by a butterfly over lanes that hold a block's values each, then each block's sum
// rescaled to it (exp(block max - max), nothing from a block that saw only -inf) and added by a
// second butterfly. A row with nothing but -inf keeps max = -inf and sum = 0.
template <class Prim, class T>
struct MergeMaxSums {
  template <class Value>
  __device__ math::stats::MaxSum<T> operator()(unsigned blocks, Value value) const {
    const T minus_inf = math::stats::negative_infinity<T>();
    const math::stats::MaxSum<T> mine =
        rows::cluster_value_of_lane(blocks, value, math::stats::MaxSum<T>{minus_inf, T(0)});
    const T max = rows::lanes_reduce(mine.max, rows::Larger{}, rows::kMaxClusterBlocks);
    const T term =
        mine.max == minus_inf ? T(0) : mine.sum * RowExp<Prim, T>::between(mine.max, max);
    return {max, rows::lanes_reduce(term, rows::Plus{}, rows::kMaxClusterBlocks)};
  }
};

// Staged rows (core/ops/rows/staged.cuh): x is copied to shared memory; pass 1 takes the row's
// maximum, pass 2 its sum of exp, pass 3 writes (the same exact two-pass statistics as the
// register-cached kernel). In a cluster, passes 1 and 2 take the block's own maximum and sum,
// and one exchange combines them (MergeMaxSums): H200 A/B (2026-11-27 03:31Z, kf-bench, same
// call, two passes), % of copy at rows of 262144, f32 / f16 / bf16: 70.7 / 68.8 / 64.4 with an
// exchange for each, 72.9 / 70.4 / 67.0 with one. The mask, when present, is read from global
// memory in each pass: it is usually broadcast over rows, so it stays in L1/L2. Three blocks per
// SM: Nsight Compute on an H200 (2026-11-26) showed the clustered kernel of f32 rows of 262144 at
// two resident blocks (106 registers, and a 135 KiB shared-memory carveout), 3.8 warps per
// scheduler and 27 % of DRAM bandwidth; with this bound (80 registers, 8-40 bytes of spill) and the
// carveout raised (prepare_staged_kernel), those rows went from 34.8 to 41.0 % of copy (f32) and
// from 30 to 33 % (f16, bf16). Nsight Compute then (H200, 14:32Z) counted 82 instructions per f32
// element, issue-bound: the staging divided and found the row's offset per 16-byte vector (~90
// instructions each), and every pass tested the mask and the causal rule in 64 bits. The
// staging now finds a long row's source once, the passes count in 32 bits, and kMasked (a mask
// or the causal rule applies) is a separate instantiation: ~32 instructions per element, and
// rows of 262144 went from 42 / 37 / 35 to 56 / 63 / 62 % of copy (H200, 14:37Z, same call).
// kInPass: whether the clustered form restages the next row inside the output pass
// (rows::for_each_tile; launch_staged picks it for 16-bit rows).
// kShifted: the form for dense rows without a mask whose x and out start equally far from a
// 16-byte boundary, row by row, but not on one, or whose length fills no whole 16-byte vectors
// (vocabulary rows of 30522 or 50257; launch_shifted), one row a tile. Each row's whole 16-byte
// vectors are staged from its first 16-byte boundary (rows::head_columns: slot c of a block's
// slice holds column head + first_col + c). The few columns before that boundary (the head,
// in the first block) and after the last whole vector (in the last block) are read from global
// memory, each by one thread, before the first pass and used after it, so that their loads are
// in flight during it. x is read once, where the streaming kernel's vector form reads it twice.
template <class S, bool kClustered, bool kMasked,
          bool kInPass = (kClustered && rows::StagedPolicy::restages_in_pass<S>()),
          bool kShifted = false>
__global__ void __launch_bounds__(rows::StagedPolicy::threads, 3)
    staged_kernel(const __grid_constant__ Plan p, const rows::Staging g) {
  cuda::wait_prior_grid();  // a dependent launch: nothing global is touched before this
  cuda::allow_next_grid();
  using T = math::compute_t<S>;
  using Traits = math::StorageTraits<S>;
  using Prim = typename math::PrimitivesFor<S>::type;
  namespace st = math::stats;
  constexpr int V = 16 / sizeof(S);
  using Vec = rows::Pack<S, V>;
  extern __shared__ __align__(async_copy::kSharedAlign) unsigned char staged_bytes[];
  __shared__ T scratch[32];
  __shared__ rows::ClusterMailbox mailbox;  // the clustered form's maximum and sum of exp
  const rows::Walk& w = p.walk;
  const int64_t n = w.row_length;
  const T scale = static_cast<T>(p.scale), minus_inf = st::negative_infinity<T>();
  constexpr bool kFoldScale = std::is_same_v<Prim, math::HalfStorage> && !kMasked;
  const T scale_factor = RowExp<Prim, T>::factor(scale);  // (kFoldScale's exps)
  rows::ClusterReducer cluster(mailbox, kClustered);
  const int rank = rows::slice_rank(g);
  const int64_t first_col = rank * g.slice;
  const int64_t cols = n - first_col < g.slice ? n - first_col : g.slice;
  S* const staged = reinterpret_cast<S*>(staged_bytes);
  const int lane = threadIdx.x % g.group, slot = threadIdx.x / g.group;
  const int groups = blockDim.x / g.group;
  const int64_t tiles = (w.rows + g.rows_per_tile - 1) / g.rows_per_tile;
  static_assert(kClustered || !kInPass);
  static_assert(!(kShifted && kMasked));
  const auto rows_in = [&](int64_t tile) {
    const int64_t left = w.rows - tile * g.rows_per_tile;
    return static_cast<int>(left < g.rows_per_tile ? left : g.rows_per_tile);
  };
  const auto row_x = [&](int64_t row) {
    return static_cast<const S*>(p.x.data) + rows::row_offset_cold(w, p.x, row);
  };
  // kShifted: the staged columns of this block's slice of a row of `head` head columns.
  const auto staged_cols = [&](int head) {
    return rows::shifted_slice_columns(n, head, first_col, g.slice);
  };
  // Columns of this block's slice of `row` left visible by the causal rule, in whole vectors (the
  // whole slice without it): the hidden ones, about half of a causal row, are neither staged nor
  // read, and their outputs are written directly. Tiles of one row only (the clustered form's).
  const auto visible = [&](int64_t row) -> int {
    if (!(kMasked && p.causal) || g.rows_per_tile != 1) return static_cast<int>(cols);
    const int64_t seen = row % p.query_rows + p.diagonal + 1 - first_col;
    if (seen <= 0) return 0;
    const int64_t vectors = (seen + V - 1) / V * V;
    return static_cast<int>(vectors < cols ? vectors : cols);
  };
  const auto stage = [&](int64_t tile, int buffer) {
    const int64_t row0 = tile * g.rows_per_tile;
    if constexpr (kShifted) {
      const S* x = row_x(row0);
      const int head = rows::head_columns(x);
      rows::stage_row(staged + buffer * g.buffer_elems, staged_cols(head), x + head + first_col);
      return;
    }
    rows::stage_rows(staged + buffer * g.buffer_elems, g.slice, rows_in(tile), visible(row0) / V,
                     [&](int r) {
                       return static_cast<const S*>(p.x.data) +
                              rows::row_offset_cold(w, p.x, row0 + r) + first_col;
                     });
  };
  const auto compute = [&](int64_t tile, int buffer, int64_t next) {
    const int64_t row0 = tile * g.rows_per_tile;
    const int tile_rows = rows_in(tile);
    // Rolling, kInPass (rows::for_each_tile): the next row's vectors of this thread's slots,
    // staged as the output pass leaves each slot.
    S* const slots = staged + buffer * g.buffer_elems;
    const S* next_x = nullptr;
    int next_seen = 0;
    if (kInPass && next >= 0) {
      next_x = row_x(next);
      const int head = kShifted ? rows::head_columns(next_x) : 0;
      next_x += head + first_col;
      next_seen = kShifted ? staged_cols(head) : visible(next);
    }
    const auto restage = [&](int c) {
      if constexpr (kShifted) {
        if (kInPass) rows::stage_vector(slots, next_x, c, next_seen);  // next_seen 0: none
      } else if (kInPass && c < next_seen) {
        async_copy::copy16(slots + c, next_x + c);
      }
    };
    for (int base = 0; base < tile_rows; base += groups) {
      // Lanes past the tile's rows still take part in their group's shuffles.
      const int r = base + slot;
      const int length = r < tile_rows ? static_cast<int>(cols) : 0;  // cols <= a slice
      const int64_t row = row0 + (r < tile_rows ? r : 0);
      int seen = length < visible(row) ? length : visible(row);  // the staged columns
      const S* x_row = staged + buffer * g.buffer_elems + (r < tile_rows ? r : 0) * g.slice;
      // kShifted: `seen` is the staged columns in whole vectors. This thread's columns of the
      // partial vector after them (`part`, for the thread that would stage it, else 0) and of the
      // head (`head_here`, for one thread of the first block, else 0) have their logits in
      // part_v and head_v, loaded from global memory.
      const S* x_start = nullptr;
      int head = 0, part = 0, head_here = 0;
      T part_v[V], head_v[V];
      if constexpr (kShifted) {
        x_start = row_x(row);
        head = rows::head_columns(x_start);
        const int staged_here = staged_cols(head);
        seen = staged_here / V * V;
        if (lane == (seen / V) % g.group) part = staged_here - seen;
        if (rank == 0 && lane == g.group - 1) head_here = head;
        if (part > 0 || head_here > 0) {  // one or two threads of the row (for_each_unstaged)
#pragma unroll
          for (int e = 0; e < V; ++e) {
            if (e < part)
              part_v[e] = scale * Traits::to_compute(x_start[head + first_col + seen + e]);
            if (e < head_here) head_v[e] = scale * Traits::to_compute(x_start[e]);
          }
        }
      }
      // Calls fn(at, logit) for each of this thread's columns of the partial vector and the
      // head, `at` its offset from the slice's first staged column.
      const auto for_each_extra = [&](auto&& fn) {
        if constexpr (kShifted)
          rows::for_each_unstaged(seen, part, part_v, head, head_here, head_v, fn);
      };
      const S* mask = kMasked && p.mask.data ? static_cast<const S*>(p.mask.data) +
                                                   rows::row_offset_cold(w, p.mask, row) + first_col
                                             : nullptr;
      const int64_t query = kMasked ? row % p.query_rows : 0;
      // The logits of one vector: scale * x + mask, -inf where the causal mask hides them.
      const auto logits = [&](int c, T(&v)[V]) {
        const Vec xv = *reinterpret_cast<const Vec*>(x_row + c);
        Vec mv;
        if (kMasked && mask) mv = *reinterpret_cast<const Vec*>(mask + c);
#pragma unroll
        for (int e = 0; e < V; ++e) {
          v[e] = scale * Traits::to_compute(xv.v[e]);
          if (kMasked && mask) v[e] += Traits::to_compute(mv.v[e]);
          if (kMasked && p.causal && st::causal_hidden(query, first_col + c + e, p.diagonal))
            v[e] = minus_inf;
        }
      };
      T max = minus_inf;
      for (int c = lane * V; c < seen; c += g.group * V) {
        T v[V];
        logits(c, v);
#pragma unroll
        for (int e = 0; e < V; ++e) max = st::larger_or_nan(max, v[e]);
      }
      for_each_extra([&](int, T v) { max = st::larger_or_nan(max, v); });
      max = rows::group_reduce<rows::StagedPolicy::threads>(max, rows::Larger{}, g.group, scratch);
      // Calls fn(e, exp of element e's logit about a maximum (`about`)) for one vector. 16-bit
      // rows without a mask take them from x itself, the scale folded into the exponent's FFMA
      // (RowExp::of_scaled).
      const auto for_each_exp = [&](int c, const RowExp<Prim, T>& about, auto&& fn) {
        if constexpr (kFoldScale) {
          const Vec xv = *reinterpret_cast<const Vec*>(x_row + c);
#pragma unroll
          for (int e = 0; e < V; ++e)
            fn(e, about.of_scaled(Traits::to_compute(xv.v[e]), scale_factor));
        } else {
          T v[V];
          logits(c, v);
#pragma unroll
          for (int e = 0; e < V; ++e) fn(e, about(v[e]));  // exp(-inf) = 0
        }
      };
      T sum = 0;
      if (max != minus_inf) {
        const RowExp<Prim, T> about(max);
        for (int c = lane * V; c < seen; c += g.group * V)
          for_each_exp(c, about, [&](int, T y) { sum += y; });
        for_each_extra([&](int, T v) { sum += about(v); });
      }
      sum = rows::group_reduce<rows::StagedPolicy::threads>(sum, rows::Plus{}, g.group, scratch);
      if constexpr (kClustered) {
        // One exchange a row: each block's maximum and its sum of exp relative to it.
        const st::MaxSum<T> merged =
            cluster.exchange(st::MaxSum<T>{max, sum}, MergeMaxSums<Prim, T>{});
        max = merged.max;
        sum = merged.sum;
      }
      S* out =
          static_cast<S*>(p.out.data) + rows::row_offset_cold(w, p.out, row) + head + first_col;
      // kShifted: stores value(logit) for this thread's columns of the partial vector and the
      // head (rank 0, whose `out` is head columns past the row's start).
      const auto store_extras = [&](auto&& value) {
        for_each_extra([&](int at, T v) { out[at] = Traits::from_compute(value(v)); });
      };
      // Hidden columns (and every column of a fully masked row) give 0 (log-softmax: -inf).
      const auto write_hidden = [&](int from) {
        Vec yv;
#pragma unroll
        for (int e = 0; e < V; ++e) yv.v[e] = Traits::from_compute(p.log ? minus_inf : T(0));
        for (int c = from + lane * V; c < (kShifted ? seen : length); c += g.group * V)
          *reinterpret_cast<Vec*>(out + c) = yv;
      };
      int c = lane * V;        // the output pass's column: where restaging goes on after it
      if (max == minus_inf) {  // a fully masked row gives 0 (log-softmax: -inf), not NaN
        write_hidden(0);
        store_extras([&](T) { return p.log ? minus_inf : T(0); });
      } else if (p.log) {
        const RowExp<Prim, T> about(max);
        const T log_factor = about.log_factor(sum);
        for (; c < seen; c += g.group * V) {
          T v[V];
          logits(c, v);
          Vec yv;
#pragma unroll
          for (int e = 0; e < V; ++e)
            yv.v[e] = Traits::from_compute(about.log_softmax(v[e], log_factor));
          *reinterpret_cast<Vec*>(out + c) = yv;
          restage(c);
        }
        store_extras([&](T v) { return about.log_softmax(v, log_factor); });
        write_hidden(seen);
      } else {
        const T inv_sum = T(1) / sum;
        const RowExp<Prim, T> about(max);
        for (; c < seen; c += g.group * V) {
          Vec yv;
          for_each_exp(c, about, [&](int e, T y) { yv.v[e] = Traits::from_compute(y * inv_sum); });
          *reinterpret_cast<Vec*>(out + c) = yv;
          restage(c);
        }
        store_extras([&](T v) { return about(v) * inv_sum; });
        write_hidden(seen);
      }
      if (kInPass)
        for (; c < next_seen; c += g.group * V) restage(c);  // slots the output pass left alone
    }
  };
  rows::for_each_tile<kInPass>(g, tiles, stage, compute);
  if constexpr (kClustered) cluster.done();
}

// Whether the grid-group kernel (cuda_grid.cuh) takes dense rows without a mask or the causal rule
// before the clusters: 16-bit rows of 64 KiB to 1 MiB and f32 rows of 256 to 512 KiB, on
// devices that are not rows::tile_issue_lean (the H100), where it was measured faster. It had
// lost to the clusters at every length they hold (H200, 2026-11-30 and 2026-12-04, see
// grid_softmax_kernel), but then its 272 static bytes put its dynamic array 16 bytes past a
// 32-byte boundary, as batch-norm training's did (async_copy::kSharedAlign), until 70e6081.
// H100 A/B (2026-12-06 10:32Z, kf-bench `--suite ops --filter softmax,log_softmax --lengths
// 65536,131072,262144,524288 --no-check`, one library choosing by an environment variable, same
// call, two passes), % of copy, softmax, clusters -> grid: f32 rows of 65536 / 131072 / 262144
// 84.2-84.5 / 83.7-84.0 / 85.5-85.7 -> 86.8-87.0 / 86.1-86.6 / 84.5-85.0; f16 rows of 65536 /
// 131072 / 262144 / 524288 82.6-82.7 / 83.4-83.5 / 82.7 / 84.4-84.5 -> 84.7-85.7 / 86.0-86.3 /
// 86.2-86.7 / 84.6-85.3; bf16 81.1-81.4 / 82.1-82.3 / 82.8-82.9 / 84.8-85.6 -> 86.2-86.7 /
// 86.7-87.0 / 86.4-86.8 / 85.0-85.4. Log-softmax: f32 85.9 / 85.5-85.9 / 85.8-86.5 -> 87.2-87.5
// / 86.6-87.0 / 84.8-85.6; f16 85.4-85.5 / 85.1 / 84.3-84.9 / 84.7-85.5 -> 86.1-86.2 / 86.5-86.9
// / 86.8-87.5 / 85.1-86.1; bf16 83.7-83.8 / 83.6-83.7 / 82.7-83.2 / 84.4-84.6 -> 86.7-87.2 /
// 87.5-87.6 / 87.2-87.3 / 85.7-86.5. The f32 rows of 262144 stay with the clusters.
// Rows of 32768 (H100 A/B, 2026-12-06 12:21Z, measured as above with `--lengths 32768,...`,
// clusters -> grid): 16-bit rows (64 KiB, two shares) softmax f16 83.1-83.5 -> 85.8-85.9, bf16
// 82.3-82.7 -> 85.9-86.0, log-softmax f16 86.5-86.9 -> 86.2-86.4, bf16 84.8-85.4 -> 86.6-86.7,
// so they take it; f32 rows (128 KiB) softmax 85.1-85.3 -> 85.8-86.2, log-softmax 87.1-87.4 ->
// 86.3-86.6, no clear winner, so they keep the clusters. The 16-bit rows of 96 KiB (49152, three
// shares) go with their neighbours: H100 A/B (2026-12-06 14:59Z, as above, grid -> clusters)
// softmax f16 83.5-84.1 -> 83.4-83.6, bf16 83.6-84.5 -> 82.0-82.4, log-softmax f16 84.6 -> 85.2,
// bf16 84.4-85.9 -> 84.0-84.3. The H200 was not timed against it and keeps the clusters.
template <class S>
bool grid_before_clusters(int64_t row_length, int32_t device) {
  if (rows::tile_issue_lean(device)) return false;
  const int64_t bytes = row_length * int64_t{sizeof(S)};
  if constexpr (sizeof(S) == 2)
    return bytes >= 64 * 1024 && bytes <= 1024 * 1024;
  else
    return bytes >= 256 * 1024 && bytes <= 512 * 1024;
}

// Runs the staged kernel when the rows fit it (16-bit and 32-bit types); false otherwise.
template <class S>
bool launch_staged(const Plan& p, int32_t device, cudaStream_t stream) {
  if constexpr (sizeof(S) > 4) {
    return false;
  } else {
    if (p.walk.rows >= rows::kMaxColdRows) return false;  // row offsets in 32 bits (rows.hpp)
    // Only rows past 64 KiB are staged (the cluster path: 5..7x over streaming on an H200,
    // 2026-11-26): for shorter rows the register-cached kernel was faster in the same run at
    // every length measured (f32 and bf16, 64..16384: by 15..55 %).
    // Rows the register-cached kernel holds (16384 elements: 64 KiB of f32, 32 KiB of 16-bit
    // data) are not staged; 16-bit rows of 16385..32768 are, one block a row in one
    // rolling buffer (rows::StagedPolicy::rolling_row_bytes; they fell to the
    // streaming kernel before: H200 sweep, 2026-11-29 21:58Z, bf16 rows of 20000 at 12.7 % of
    // copy).
    if (p.walk.row_length <= rows::kMaxTileRow) return false;
    if (p.mask.data || p.causal)
      return rows::stage_and_launch<staged_kernel<S, false, true>, staged_kernel<S, true, true>>(
          p, p.walk, sizeof(S), 1, device, stream, "softmax kernel launch");
    if (grid_before_clusters<S>(p.walk.row_length, device) &&
        launch_grid_rows<S>(p, device, stream))
      return true;
    // 16-bit rows without a mask restage the next row inside the output pass where the SMs are
    // not rows::tile_issue_lean. H100 A/B (2026-11-27 17:00Z, kf-bench, same call, three
    // passes), rows of 262144, % of copy, after the pass -> in it: f16 82.6 / 80.3 / 82.5 ->
    // 84.0 / 81.3 / 83.5, bf16 82.1 / 79.6 / 81.5 -> 83.8 / 80.6 / 83.4 (the H200 keeps the
    // order it was measured with; the masked form was not timed).
    // Rows longer than the clusters hold (f32 rows of 524288, 16-bit rows of 1048576) take the
    // grid-group kernel instead of the streaming one; of the rows the clusters hold, it takes
    // those of grid_before_clusters (above).
    if constexpr (sizeof(S) == 2) {
      if (!rows::tile_issue_lean(device))
        return rows::stage_and_launch<staged_kernel<S, false, false>,
                                      staged_kernel<S, true, false, true>>(
                   p, p.walk, sizeof(S), 1, device, stream, "softmax kernel launch") ||
               launch_grid_rows<S>(p, device, stream);
    }
    return rows::stage_and_launch<staged_kernel<S, false, false>, staged_kernel<S, true, false>>(
               p, p.walk, sizeof(S), 1, device, stream, "softmax kernel launch") ||
           launch_grid_rows<S>(p, device, stream);
  }
}

// Runs the shifted staged kernel (staged_kernel's kShifted) for rows the staged kernel takes
// but for their 16-byte vectors: dense rows longer than rows::kMaxTileRow without a mask or the
// causal rule, whose x and out launch has found in phase (rows::rows_in_phase), in the staged
// kernel's order (16-bit rows restage in the output pass where the SMs are not
// rows::tile_issue_lean); false otherwise. The rows are planned as rows of the length rounded up
// to whole vectors: a row staged from its first 16-byte boundary fills no more of them.
template <class S>
bool launch_shifted(const Plan& p, int32_t device, cudaStream_t stream) {
  if constexpr (sizeof(S) > 4) {
    return false;
  } else {
    if (p.mask.data || p.causal || p.walk.rows >= rows::kMaxColdRows) return false;
    if (p.walk.row_length <= rows::kMaxTileRow) return false;
    constexpr int64_t V = 16 / sizeof(S);
    rows::Walk whole = p.walk;
    whole.row_length = (whole.row_length + V - 1) / V * V;
    constexpr bool kInPass = rows::StagedPolicy::restages_in_pass<S>();
    if constexpr (sizeof(S) == 2) {
      if (!rows::tile_issue_lean(device))
        return rows::stage_and_launch<staged_kernel<S, false, false, false, true>,
                                      staged_kernel<S, true, false, true, true>>(
            p, whole, sizeof(S), 1, device, stream, "softmax kernel launch");
    }
    return rows::stage_and_launch<staged_kernel<S, false, false, false, true>,
                                  staged_kernel<S, true, false, kInPass, true>>(
        p, whole, sizeof(S), 1, device, stream, "softmax kernel launch");
  }
}

}  // namespace
}  // namespace kf::softmax
