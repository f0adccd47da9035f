// The norm family's staged rows (see core/ops/norm/cuda.cuh for when they run): rows copied to
// shared memory a block or a thread-block cluster a row (core/ops/rows/staged.cuh), the shifted
// form for rows off 16-byte vectors, and their launches, which hand the longest rows to the
// grid-group kernel (cuda_grid.cuh).
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "core/math/activation.hpp"
#include "core/math/numeric.hpp"
#include "core/math/row_stats.hpp"
#include "core/ops/async_copy.cuh"
#include "core/ops/norm/cuda_grid.cuh"
#include "core/ops/norm/cuda_storage.hpp"
#include "core/ops/norm/norm.hpp"
#include "core/ops/rows/reduce.cuh"
#include "core/ops/rows/staged.cuh"
#include "core/runtime/cuda/grid_dependency.cuh"

namespace kf::norm {
namespace {

using math::with_activation;
using rows::AddSums;
using rows::Sums;

// A block's layer-norm sums for the clustered kernel's one exchange a row: its own mean as the
// shift, and the sums of d = h - shift and of d^2 over its slice.
template <class T>
struct ShiftedSums {
  T shift, d, d2, unused;  // 16 bytes: one slot of rows::ClusterMailbox
};

// The row's statistics from its blocks' ShiftedSums (rows::ClusterReducer::exchange), about
// block 0's shift: each block's mean offset from it, e = (shift_b - shift_0) + d_b / n_b (the
// first difference exact for nearby shifts), and its sum of squares about its own mean,
// m2 = d2_b - d_b^2 / n_b; then the row's offset c = sum(n_b e) / n and its sum of squares
// about the mean, sum(m2 + n_b (e - c)^2) (the parallel form of Chan, Golub and LeVeque). Each
// sum is one butterfly over lanes that hold a block each. Returns {shift_0, n c, that sum}, so
// that the mean is shift_0 + c: a row with mean 1e4 and std 1e-2 keeps its variance.
// kShifted (the shifted staged kernel's): block 0 also takes the `head` columns before its slice,
// and each slice starts `head` columns later.
template <class T, bool kShifted = false>
struct MergeShiftedSums {
  int64_t n;         // the row's length
  int64_t slice;     // a block's columns (the last block's may be fewer)
  int64_t head = 0;  // kShifted: the row's columns before block 0's slice
  template <class Value>
  __device__ ShiftedSums<T> operator()(unsigned blocks, Value value) const {
    const T base = value(0).shift;
    const ShiftedSums<T> mine =
        rows::cluster_value_of_lane(blocks, value, ShiftedSums<T>{base, T(0), T(0), T(0)});
    const int64_t block = threadIdx.x % rows::kMaxClusterBlocks;
    T count;
    if constexpr (kShifted) {
      const int64_t first = block * slice + head;
      count = static_cast<T>((first < n ? (n - first < slice ? n - first : slice) : 0) +
                             (block == 0 ? head : 0));
    } else {
      const int64_t first = block * slice;
      count = first < n ? static_cast<T>(n - first < slice ? n - first : slice) : T(0);
    }
    const T q = count > T(0) ? mine.d / count : T(0);
    const T e = (mine.shift - base) + q;
    const T offset = rows::lanes_reduce(count * e, rows::Plus{}, rows::kMaxClusterBlocks);
    const T c = offset / static_cast<T>(n);
    const T m2 = (mine.d2 - mine.d * q) + count * (e - c) * (e - c);
    return {base, offset, rows::lanes_reduce(m2, rows::Plus{}, rows::kMaxClusterBlocks), T(0)};
  }
};

// Staged rows (core/ops/rows/staged.cuh): x (and the residual) are copied to shared memory, then
// the passes read them there: h (= x + residual, written back over the staged x), the mean,
// the sums of differences from it, and the output. In a cluster the layer norm's first two
// passes take the block's own mean and sums, combined in one exchange (MergeShiftedSums)
// instead of one for the mean and one for the sums: H200 A/B (2026-11-27 03:31Z, kf-bench, same
// call, two passes), % of copy at rows of 262144, f32 / f16 / bf16: 50.6 / 57.8 / 54.2 -> 51.7 /
// 59.2 / 56.4. Each thread touches the same columns in
// every pass, so a thread only reads back what it wrote itself.
// Three blocks per SM, as softmax's staged kernel (see there): on an H200 (2026-11-26T11:18Z)
// 16-bit rows of 262144 went from 35-43 to 41-49 % of copy with it, f32 rows were unchanged.
// kInPass: whether the clustered form restages the next row inside the output pass
// (rows::for_each_tile; launch_staged picks it for the RMS norm's 16-bit rows).
// kShifted: the form for dense rows whose row operands start equally far from a 16-byte
// boundary, row by row, but not on one, or whose length fills no whole 16-byte vectors
// (launch_shifted), one row a tile, as the softmax's (see there): each row's whole 16-byte
// vectors are staged from its first 16-byte boundary; the few columns before that boundary and
// after the last whole vector are read from global memory, each by one thread, which keeps their
// values in shared memory for the row's passes. The weight and bias, which start on the row's
// column 0, are then read an element at a time.
template <class S, bool kClustered, bool kResident = false,
          bool kInPass = (kClustered && rows::StagedPolicy::restages_in_pass<S>()),
          bool kShifted = false>
__global__ void __launch_bounds__(rows::StagedPolicy::threads, 3)
    staged_kernel(const __grid_constant__ Plan p, const rows::Staging g) {
  cuda::wait_prior_grid();  // a dependent launch: nothing global is touched before this
  cuda::allow_next_grid();
  using T = math::compute_t<S>;
  using Traits = math::StorageTraits<S>;
  constexpr int V = 16 / sizeof(S);
  using Vec = rows::Pack<S, V>;
  extern __shared__ __align__(async_copy::kSharedAlign) unsigned char staged_bytes[];
  using Prim = typename math::PrimitivesFor<S>::type;
  __shared__ T scratch[32];
  __shared__ Sums<T> pair_scratch[32];
  __shared__ rows::ClusterMailbox mailbox;  // the clustered form's row statistics
  rows::ClusterReducer cluster(mailbox, kClustered);
  // kShifted: h of the columns outside a row's whole staged vectors (the partial vector's, the
  // head's), each written and read by the one thread that takes them; alternate rows take
  // alternate halves (a block takes one row at a time: its group is the block), since the next
  // row's thread for them may write before this row's has read. Held in registers instead, they
  // made the 16-bit kernels spill 32-44 bytes a thread (ptxas, sm_90; 0-4 bytes here). kf-bench,
  // H200 2026-12-02 10:58Z, same call, two passes each, % of copy, rows of 20001 / 30522 / 50257:
  // layer norm f16 42.1 / 41.2 / 38.4 -> 44.3 / 42.1 / 40.9, bf16 40.8 / 42.2 / 37.9 -> 43.1 /
  // 43.0 / 41.0; RMS norm f16 56.4 / 55.9 / 52.4 -> 58.4 / 56.2 / 56.1, bf16 55.8 / 54.4 / 51.4
  // -> 60.0 / 57.0 / 55.6; f32 within a point.
  __shared__ T unstaged[2][2][kShifted ? V : 1];
  // For kShifted rows, whether only the threads that take head or tail columns run those
  // columns' loops (rows::for_each_unstaged's kBranch): in the 16-bit kernels, not in f32's.
  constexpr bool kBranchExtra = sizeof(S) == 2;
  unsigned parity = 0;
  const rows::Walk& w = p.walk;
  const int64_t n = w.row_length;
  const T count = static_cast<T>(n), eps = static_cast<T>(p.eps);
  const int rank = rows::slice_rank(g);
  const int64_t first_col = rank * g.slice;
  const int64_t cols = n - first_col < g.slice ? n - first_col : g.slice;
  S* const staged = reinterpret_cast<S*>(staged_bytes);
  const int lane = threadIdx.x % g.group, slot = threadIdx.x / g.group;
  const int groups = blockDim.x / g.group;
  const S* weight = p.weight.data ? static_cast<const S*>(p.weight.data) + first_col : nullptr;
  const S* bias = p.bias.data ? static_cast<const S*>(p.bias.data) + first_col : nullptr;
  const int vectors = static_cast<int>(cols / V);
  // kResident (RMS norm, clustered; see launch_staged): the block's slice of the weight is staged
  // once, after the buffers, each thread its own slots in the first row's copy group, and the
  // output pass reads it there rather than from L2 for every row.
  S* const weight_slice = staged + g.buffer_elems * g.buffers;
  if constexpr (kResident)
    rows::stage_rows(weight_slice, g.slice, 1, vectors, [&](int) { return weight; });
  const auto reduce = [&](T v) {
    v = rows::group_reduce<rows::StagedPolicy::threads>(v, rows::Plus{}, g.group, scratch);
    if constexpr (kClustered) v = cluster.reduce(v, rows::Plus{});
    return v;
  };
  const int64_t tiles = (w.rows + g.rows_per_tile - 1) / g.rows_per_tile;
  static_assert(kClustered || !kInPass);
  static_assert(!kResident || (kClustered && sizeof(S) == 2));
  static_assert(!(kShifted && kResident));
  const auto rows_in = [&](int64_t tile) {
    const int64_t left = w.rows - tile * g.rows_per_tile;
    return static_cast<int>(left < g.rows_per_tile ? left : g.rows_per_tile);
  };
  const auto row_of = [&](const rows::Operand& t, int64_t row) {
    return static_cast<const S*>(t.data) + rows::row_offset_cold(w, t, row);
  };
  // kShifted: the staged columns of this block's slice of a row of `head` head columns.
  const auto staged_cols = [&](int head) {
    return rows::shifted_slice_columns(n, head, first_col, g.slice);
  };
  const auto stage = [&](int64_t tile, int buffer) {
    const int64_t row0 = tile * g.rows_per_tile;
    S* xs = staged + buffer * g.buffer_elems;
    if constexpr (kShifted) {
      const S* x = row_of(p.x, row0);
      const int head = rows::head_columns(x);
      const int here = staged_cols(head);
      rows::stage_row(xs, here, x + head + first_col);
      if (p.residual.data)
        rows::stage_row(xs + g.slice, here, row_of(p.residual, row0) + head + first_col);
      return;
    }
    rows::stage_rows(xs, g.slice, rows_in(tile), vectors, [&](int r) {
      return static_cast<const S*>(p.x.data) + rows::row_offset_cold(w, p.x, row0 + r) + first_col;
    });
    if (p.residual.data)
      rows::stage_rows(xs + g.rows_per_tile * g.slice, g.slice, rows_in(tile), vectors, [&](int r) {
        return static_cast<const S*>(p.residual.data) +
               rows::row_offset_cold(w, p.residual, row0 + r) + first_col;
      });
  };
  const auto compute = [&](int64_t tile, int buffer, int64_t next) {
    const int64_t row0 = tile * g.rows_per_tile;
    const int tile_rows = rows_in(tile);
    S* xs = staged + buffer * g.buffer_elems;
    S* rs = xs + g.rows_per_tile * g.slice;
    // Rolling, kInPass (rows::for_each_tile): the next row's vectors of this thread's slots,
    // staged as the last pass to read each slot leaves it: the residual's after the first pass,
    // x's after the output pass.
    const S* next_x = nullptr;
    const S* next_residual = nullptr;
    int next_cols = 0;  // kShifted: the next row's staged columns in this block
    if (kInPass && next >= 0) {
      next_x = row_of(p.x, next);
      const int head = kShifted ? rows::head_columns(next_x) : 0;
      next_x += head + first_col;
      if (p.residual.data) next_residual = row_of(p.residual, next) + head + first_col;
      if (kShifted) next_cols = staged_cols(head);
    }
    const auto restage = [&](S* slots, const S* from, int c) {
      if constexpr (kShifted) {
        if (kInPass && from != nullptr) rows::stage_vector(slots, from, c, next_cols);
      } else if (kInPass && from != nullptr) {
        async_copy::copy16(slots + c, from + c);
      }
    };
    for (int base = 0; base < tile_rows; base += groups) {
      // Lanes past the tile's rows still take part in their group's shuffles.
      const int r = base + slot;
      int length = r < tile_rows ? static_cast<int>(cols) : 0;  // cols <= a slice
      const int64_t row = row0 + (r < tile_rows ? r : 0);
      S* h_row = xs + (r < tile_rows ? r : 0) * g.slice;
      const int step = g.group * V;
      // kShifted: `length` is the block's staged columns in whole vectors, block_cols all its
      // columns. This thread's columns of the partial vector after them (`part`, where it staged
      // that vector) and of the head (`head_here`, one thread of the first block) have their h
      // in `extra`, loaded from global memory and the residual added (and written to
      // residual_out) here; `at` in for_each_extra is a column's offset from the block's first
      // staged column.
      int head = 0, part = 0, head_here = 0, block_cols = length;
      // kShifted: their h in shared memory (`unstaged`), not in registers, which the kernel has
      // none to spare for (there the 16-bit kernels spilled): extra[0] the partial vector's,
      // extra[1] the head's.
      auto& extra = unstaged[parity];
      parity ^= 1;
      if constexpr (kShifted) {
        const S* x_start = row_of(p.x, row);
        head = rows::head_columns(x_start);
        const int here = staged_cols(head);
        length = here / V * V;
        if (lane == (length / V) % g.group) part = here - length;
        if (rank == 0 && lane == g.group - 1) head_here = head;
        block_cols = here + (rank == 0 ? head : 0);
        const S* r_start = p.residual.data ? row_of(p.residual, row) : nullptr;
        S* h_start = p.residual_out.data ? static_cast<S*>(p.residual_out.data) +
                                               rows::row_offset_cold(w, p.residual_out, row)
                                         : nullptr;
        // h of a column, from its x and residual values, written to residual_out at `to`.
        const auto take = [&](S x_value, const S* residual_value, int64_t to) {
          if (r_start) {
            x_value = Traits::from_compute(Traits::to_compute(x_value) +
                                           Traits::to_compute(*residual_value));
            if (h_start) h_start[to] = x_value;
          }
          return Traits::to_compute(x_value);
        };
        const int64_t part_at = head + first_col + length;  // the partial vector's first column
        // (kBranchExtra: one or two threads of the row; see for_each_unstaged.)
        if (!kBranchExtra || part > 0 || head_here > 0) {
#pragma unroll
          for (int e = 0; e < V; ++e) {
            if (e < part)
              extra[0][e] = take(x_start[part_at + e], r_start ? r_start + part_at + e : nullptr,
                                 part_at + e);
            if (e < head_here) extra[1][e] = take(x_start[e], r_start ? r_start + e : nullptr, e);
          }
        }
      }
      const auto for_each_extra = [&](auto&& fn) {
        if constexpr (kShifted)
          rows::for_each_unstaged<kBranchExtra>(length, part, extra[0], head, head_here, extra[1],
                                                fn);
      };
      // kShifted, after a pass's restaging up to `length`: the slots of the next row past this
      // row's whole vectors (the next row may have more of them).
      const auto restage_tail = [&](S* slots, const S* from) {
        if constexpr (kShifted && kInPass) {
          int c = lane * V;
          while (c < length) c += step;
          for (; c < next_cols; c += step) restage(slots, from, c);
        }
      };
      T sum = 0;
      if (p.residual.data) {
        const S* r_row = rs + (r < tile_rows ? r : 0) * g.slice;
        S* h_out = p.residual_out.data
                       ? static_cast<S*>(p.residual_out.data) +
                             rows::row_offset_cold(w, p.residual_out, row) + head + first_col
                       : nullptr;
        for (int c = lane * V; c < length; c += g.group * V) {
          Vec hv = *reinterpret_cast<const Vec*>(h_row + c);
          const Vec rv = *reinterpret_cast<const Vec*>(r_row + c);
#pragma unroll
          for (int e = 0; e < V; ++e) {
            hv.v[e] =
                Traits::from_compute(Traits::to_compute(hv.v[e]) + Traits::to_compute(rv.v[e]));
            sum += p.kind == Kind::layer
                       ? Traits::to_compute(hv.v[e])
                       : Traits::to_compute(hv.v[e]) * Traits::to_compute(hv.v[e]);
          }
          *reinterpret_cast<Vec*>(h_row + c) = hv;
          if (h_out) *reinterpret_cast<Vec*>(h_out + c) = hv;
          restage(rs, next_residual, c);
        }
        restage_tail(rs, next_residual);
      } else {
        for (int c = lane * V; c < length; c += g.group * V) {
          const Vec hv = *reinterpret_cast<const Vec*>(h_row + c);
#pragma unroll
          for (int e = 0; e < V; ++e) {
            const T h = Traits::to_compute(hv.v[e]);
            sum += p.kind == Kind::layer ? h : h * h;
          }
        }
      }
      for_each_extra([&](int, T h) { sum += p.kind == Kind::layer ? h : h * h; });
      T shift = 0, center = 0, rstd;
      if (p.kind == Kind::layer) {
        // Clustered: each block's own mean is the shift of its sums, and the blocks' shifts and
        // sums meet in one exchange (ShiftedSums); else the row's mean is the shift. (A shifted
        // row's last block may have no columns: its shift is then 0.)
        if constexpr (kClustered) {
          shift =
              rows::group_reduce<rows::StagedPolicy::threads>(sum, rows::Plus{}, g.group, scratch);
          if constexpr (kShifted)
            shift = block_cols > 0 ? shift / static_cast<T>(block_cols) : T(0);
          else
            shift = shift / static_cast<T>(length);
        } else {
          shift = reduce(sum) / count;
        }
        Sums<T> sums{0, 0};
        for (int c = lane * V; c < length; c += g.group * V) {
          const Vec hv = *reinterpret_cast<const Vec*>(h_row + c);
#pragma unroll
          for (int e = 0; e < V; ++e) {
            const T d = Traits::to_compute(hv.v[e]) - shift;
            sums.d += d;
            sums.d2 += d * d;
          }
        }
        for_each_extra([&](int, T h) {
          const T d = h - shift;
          sums.d += d;
          sums.d2 += d * d;
        });
        sums =
            rows::group_reduce<rows::StagedPolicy::threads>(sums, AddSums{}, g.group, pair_scratch);
        if constexpr (kClustered) {
          const ShiftedSums<T> merged =
              cluster.exchange(ShiftedSums<T>{shift, sums.d, sums.d2, T(0)},
                               MergeShiftedSums<T, kShifted>{n, g.slice, head});
          shift = merged.shift;
          center = merged.d / count;
          // merged.d2 is the sum of squares about the mean: no centre to take off.
          rstd = math::stats::layer_norm_stats<T>(T(0), merged.d2, count, eps).rstd;
        } else {
          const auto s = math::stats::layer_norm_stats<T>(sums.d, sums.d2, count, eps);
          center = s.center;
          rstd = s.rstd;
        }
        if (lane == 0 && rank == 0 && length > 0) {
          if (p.mean.data)
            static_cast<T*>(p.mean.data)[rows::row_offset_cold(w, p.mean, row)] = shift + center;
          if (p.rstd.data)
            static_cast<T*>(p.rstd.data)[rows::row_offset_cold(w, p.rstd, row)] = rstd;
        }
      } else {
        rstd = math::stats::rms_rstd<T>(reduce(sum), count, eps);
      }
      S* out =
          static_cast<S*>(p.out.data) + rows::row_offset_cold(w, p.out, row) + head + first_col;
      const T scaled_center = center * rstd;  // y = (h - shift) * rstd - scaled_center
      // f32 rows: the weight and bias vectors (from L2 after the first rows) of kLoads slots
      // are loaded before any of them is stored (the compiler cannot move a load above a store
      // to `out`). H200 A/B (2026-11-27 07:36Z, kf-bench, same call, two passes), % of copy
      // at rows of 262144: f32 layer norm 52.9 -> 62.6, RMS norm 59.0 -> 69.6. 16-bit rows
      // lost with two (about 07:25Z, same call: layer norm bf16 55.9 -> 51.0, RMS norm 65.0 ->
      // 60.9; four spilled) and keep one.
      constexpr int kLoads = sizeof(S) == 4 ? 4 : 1;
      // y for element e of slot vectors h, w, b.
      const auto output = [&](auto act, const Vec& hv, const Vec& wv, const Vec& bv, int e) {
        T y = (Traits::to_compute(hv.v[e]) - shift) * rstd - scaled_center;
        if (weight) y *= Traits::to_compute(wv.v[e]);
        if (bias) y += Traits::to_compute(bv.v[e]);
        return Traits::from_compute(act(y, Prim{}));
      };
      with_activation(p.act, [&](auto act) {
        if constexpr (kShifted) {
          // The weight and bias start on column 0, `head` columns before the staged ones: an
          // element at a time. (Read instead as the aligned vectors a staged vector spans,
          // realigned in registers by a word select and a byte permute, they spilled 20-104
          // bytes a thread and moved the rows both ways, f32 down by up to 12 points: H200,
          // 2026-12-02 10:35Z and 10:58Z; docs/performance.md, "Session of 10:11Z".)
          const S* w_at = weight ? weight + head : nullptr;
          const S* b_at = bias ? bias + head : nullptr;
          const auto y_of = [&](T h, int at) {
            T y = (h - shift) * rstd - scaled_center;
            if (w_at) y *= Traits::to_compute(w_at[at]);
            if (b_at) y += Traits::to_compute(b_at[at]);
            return Traits::from_compute(act(y, Prim{}));
          };
          for (int c = lane * V; c < length; c += step) {
            const Vec hv = *reinterpret_cast<const Vec*>(h_row + c);
            Vec yv;
#pragma unroll
            for (int e = 0; e < V; ++e) yv.v[e] = y_of(Traits::to_compute(hv.v[e]), c + e);
            *reinterpret_cast<Vec*>(out + c) = yv;
            restage(xs, next_x, c);
          }
          for_each_extra([&](int at, T h) { out[at] = y_of(h, at); });
          restage_tail(xs, next_x);
        } else if constexpr (kLoads == 1) {
          for (int c = lane * V; c < length; c += g.group * V) {
            const Vec hv = *reinterpret_cast<const Vec*>(h_row + c);
            Vec wv, bv, yv;
            if constexpr (kResident)
              wv = *reinterpret_cast<const Vec*>(weight_slice + c);
            else if (weight)
              wv = *reinterpret_cast<const Vec*>(weight + c);
            if (bias) bv = *reinterpret_cast<const Vec*>(bias + c);
#pragma unroll
            for (int e = 0; e < V; ++e) yv.v[e] = output(act, hv, wv, bv, e);
            *reinterpret_cast<Vec*>(out + c) = yv;
            // (The clustered form has one row a tile: this pass covers all the thread's slots.)
            restage(xs, next_x, c);
          }
        } else {
          for (int c0 = lane * V; c0 < length; c0 += kLoads * step) {
            Vec wv[kLoads], bv[kLoads];
#pragma unroll
            for (int j = 0; j < kLoads; ++j) {
              const int c = c0 + j * step;
              if (c >= length) break;
              if (weight) wv[j] = *reinterpret_cast<const Vec*>(weight + c);
              if (bias) bv[j] = *reinterpret_cast<const Vec*>(bias + c);
            }
#pragma unroll
            for (int j = 0; j < kLoads; ++j) {
              const int c = c0 + j * step;
              if (c >= length) break;
              const Vec hv = *reinterpret_cast<const Vec*>(h_row + c);
              Vec yv;
#pragma unroll
              for (int e = 0; e < V; ++e) yv.v[e] = output(act, hv, wv[j], bv[j], e);
              *reinterpret_cast<Vec*>(out + c) = yv;
              restage(xs, next_x, c);
            }
          }
        }
      });
    }
  };
  rows::for_each_tile<kInPass>(g, tiles, stage, compute);
  if constexpr (kClustered) cluster.done();
}

// The clustered kernel that keeps the weight's slice resident (16-bit types only; the f32
// clustered kernel otherwise), restaging the next row inside the output pass or after it.
template <class S, bool kInPass>
constexpr auto resident_kernel() {
  if constexpr (sizeof(S) == 2) {
    return &staged_kernel<S, true, true, kInPass>;
  } else {
    return &staged_kernel<S, true>;
  }
}

// Runs the staged kernel when the rows fit it (16-bit and 32-bit types); false otherwise.
template <class S>
bool launch_staged(const Plan& p, int32_t device, cudaStream_t stream) {
  if constexpr (sizeof(S) > 4) {
    return false;
  } else {
    if (p.walk.rows >= rows::kMaxColdRows) return false;  // row offsets in 32 bits (rows.hpp)
    // Where staging pays, measured against the register-cached kernel on an H200 (2026-11-26,
    // kf-bench, same run): rows of 2..32 KiB (bf16 1024..16384, f32 4096; before the cached
    // kernel prefetched) and rows with a residual gained 15..45 %; rows of <= 1 KiB and 64 KiB
    // rows without a residual lost 5..45 % (64 KiB leaves a block per SM); rows past 64 KiB need
    // the cluster path (5..7x over streaming). Later runs moved rows back to the cached kernel:
    // 16-bit rows up to 32 KiB, for which it now prefetches the next row (rows::tile_prefetches):
    // f16 / bf16 rows of 1024, 4096 and 16384 went from 68 / 56 / 69 % of copy to 88 / 76 / 83 %
    // (RMS norm) and from 50 / 40 / 53 % to 77 / 57 / 60 % (layer norm), and 16-bit rows with a
    // residual up to 16 KiB (past that the cached kernel then spilled): RMS norm with a residual,
    // rows of 4096, from 73 / 70 % to 86 / 86 % (10:45Z); and f32 rows up to 4 KiB
    // without a residual (10:39Z): rows of 1024 went from 67 to 90 % (RMS) and from 65 to 87 %
    // (layer norm), the 32x512x768 seed from 66 to 74 and from 59 to 68 %. f32 rows of 4096
    // stayed 1-2 points faster staged while the cached kernel spilled; without the spills
    // (rows::row_offset_cold) f32 rows up to 16 KiB, with or without a residual, run cached
    // (H200, 12:37Z, same call): rows of 4096 from 67 to 78 % (layer norm), 77 to 87 % (RMS) and
    // 85 to 89 % (RMS with a residual), the 2048x2048 seed from 35 to 40 % (layer norm).
    // The staged kernel holds one block of rows with a residual an SM (12.5 % occupancy; Nsight
    // Compute, 2026-12-03 08:05Z: DRAM 48 %, no warp eligible in 53 % of cycles). Now that the
    // cached form with a residual fits (ptxas sm_90, 512 threads a row: 16-bit 120 / 128
    // registers, no spills; f32 rows of 16384 spill 32 bytes), 16-bit rows with a residual up to
    // 32 KiB and f32 ones up to 64 KiB run cached. H200 A/B (2026-12-03 09:30Z, kf-bench, same
    // call, two passes), RMS norm with a residual, % of copy: rows of 12288 / 16384, f16 81.3 /
    // 67.0 -> 86.3 / 85.9, bf16 80.6 / 67.9 -> 86.6 / 85.1; f32 rows of 8192 / 12288 / 16384
    // 75.6 / 82.5 / 80.9 -> 89.9 / 90.6 / 89.3. f32 rows of 16..32 KiB without a residual stay
    // staged: cached in the same call they lost (rows of 8192: layer norm 82.1 -> 58.6, RMS norm
    // 85.6 -> 66.6).
    const int64_t row_bytes = p.walk.row_length * int64_t{sizeof(S)};
    if (row_bytes <= 1024) return false;
    if (sizeof(S) == 4 && row_bytes <= (p.residual.data ? 64 : 16) * 1024) return false;
    if (sizeof(S) == 2 && row_bytes <= 32 * 1024) return false;
    // f32 rows of 8193..16384 without a residual run cached (512 threads a row). 16-bit rows of
    // the same bytes (16385..32768 elements) are longer than any cached policy holds and are
    // staged, one block a row (in one rolling buffer: rows::StagedPolicy::rolling_row_bytes):
    // left out here they fell to the streaming kernel (H200 sweep,
    // 2026-11-29 21:58Z, bf16 rows of 20000: layer norm 9.3 %, RMS norm 11.7 % of copy).
    if (sizeof(S) == 4 && !p.residual.data && row_bytes > 32 * 1024 &&
        row_bytes <= rows::StagedPolicy::slice_bytes)
      return false;
    // The rows left here of 64 KiB and more that are whole grid-group shares (16-bit rows from
    // 64 KiB, f32 rows past 64 KiB, which run cached up to there) take the grid-group kernel.
    // Before, 16-bit rows of 64 KiB ran one block a row (staged) and longer rows in clusters of
    // 64 KiB slices, below the grid-group kernel's rate, which holds at every length. H200 A/B
    // (2026-12-03 15:02Z, kf-bench, same call, two passes), % of copy, before -> after; f32 rows
    // of 24576 / 32768 / 49152 (rows of 65536 took the kernel already), 16-bit rows of 32768 /
    // 49152 / 65536: layer norm (weight, bias, ReLU) f32 71.3-71.5 / 70.6-71.0 / 68.9-69.0 ->
    // 74.0-75.2 / 74.0-75.2 / 73.1-74.5, f16 69.0-69.4 / 64.9 / 64.3-64.4 -> 72.9-73.5 /
    // 72.4-73.2 / 72.4-73.1, bf16 67.7-67.9 / 59.3-59.6 / 60.2-60.3 -> 72.0-72.1 / 71.3 / 71.3;
    // RMS norm f32 78.0-78.3 / 76.6-76.7 / 76.2-76.4 -> 80.5-80.6 / 80.9-81.3 / 81.5-82.3, f16
    // 65.3-67.9 / 73.6-73.9 / 75.1 -> 81.2 / 80.6-80.9 / 81.1-81.4, bf16 65.1-68.7 / 70.2-71.0 /
    // 70.1-70.3 -> 82.1-82.2 / 81.3-81.8 / 82.5-82.8; with a residual f32 80.7 / 81.0-81.1 /
    // 80.5-80.8 -> 82.1-82.9 / 82.2-83.2 / 82.5-83.7, f16 77.8-78.1 / 75.0 / 75.1-75.2 ->
    // 81.6-82.1 / 81.7-82.6 / 82.7-82.8, bf16 77.8-77.9 / 74.9-75.0 / 75.1-75.3 -> 81.8-81.9 /
    // 82.4-82.6 / 82.6-83.6. The cached rows stay cached: with the kernel from 32 KiB (a trial,
    // 14:41Z) they lost, f32 rows of 16384 layer norm 86.1-86.3 -> 75.0-75.3, RMS norm 86.3-87.3
    // -> 81.8-82.0, with a residual 89.4-89.5 -> 82.8-83.0; f16 rows of 16384 84.7 / 88.0 /
    // 85.8-86.2 -> 74.9-75.0 / 80.8-81.1 / 81.7-82.0; and so did the f32 rows of 8192 staged
    // (32 KiB), 82.2-82.6 / 85.4 -> 75.9-76.4 / 81.6-81.9.
    // That A/B ran the clusters with their dynamic array 16 bytes past a 32-byte boundary (912 to
    // 1040 static bytes, before 70e6081). Again with it aligned (H100, 2026-12-06 12:21Z, one
    // library skipping this call by an environment variable, rows of 32768..524288, same call,
    // two passes), the grid-group kernel still led at every length but one: the f32 RMS norm's
    // rows of 65536, 89.4-89.7 against the clusters' 90.7. The widest gaps, clusters -> grid:
    // 16-bit layer norm rows of 262144 65.7-70.3 -> 84.8-85.6, RMS norm with a residual f32 rows
    // of 262144 79.4-79.5 -> 93.0.
    if (launch_grid_rows<S>(p, device, stream)) return true;
    // The RMS norm's weight (without a residual) stays resident in the clustered kernel, for rows
    // past 64 KiB that fit 16 blocks of 64 KiB with it (x's slice and the weight's: twice the
    // blocks): f16 rows everywhere, bf16 rows where the SMs are not rows::tile_issue_lean.
    // kf-bench, RMS norm, 256 rows of 262144 (the one length measured), % of copy,
    // weight from L2 -> resident (same calls, 2026-11-27): H100 (16:15Z, two passes) f16 69.3 /
    // 69.3 -> 82.6 / 82.5, bf16 72.8 / 74.6 -> 80.4 / 80.1; H200 (16:27Z, three passes) f16
    // 60.8 / 60.9 / 63.0 -> 70.4 / 69.7 / 69.9, bf16 64.4 / 66.3 / 63.2 -> 62.0 / 61.4 / 62.1.
    // Not the layer norm: its weight and bias both resident took 96 KiB blocks, two per SM
    // (H100: f16 69.8 -> 66.3, bf16 69.9 -> 62.3), and the weight alone, the bias from L2, lost
    // on the H200 (f16 59.6 -> 51.6, bf16 55.6 -> 50.3).
    // Where the SMs are not issue-lean, that kernel also restages the next row inside the output
    // pass (rows::for_each_tile). H100 A/B (2026-11-27 17:00Z, kf-bench, same call, three
    // passes), RMS norm, rows of 262144, % of copy, after the pass -> in it: f16 81.9 / 82.1 /
    // 81.8 -> 83.6 / 83.6 / 83.5, bf16 80.4 / 80.8 / 80.5 -> 82.7 / 82.9 / 83.1; the layer norm
    // lost with it (f16 71.5 / 69.2 / 70.5 -> 67.3 / 67.6 / 67.7) and keeps the order it has.
    const bool lean = rows::tile_issue_lean(device);
    const bool resident = sizeof(S) == 2 && p.kind == Kind::rms && p.weight.data && !p.bias.data &&
                          !p.residual.data && (std::is_same_v<S, math::half_t> || !lean);
    const int inputs = p.residual.data ? 2 : 1;
    // Rows with a residual past what portable clusters of 128 KiB slices hold (f32 rows past
    // 131072, 16-bit past 262144) and that the grid-group kernel leaves (launch_grid_rows: since
    // its partial shares, only where it cannot launch) take clusters of up to 16 such slices where
    // the device holds one (rows::large_cluster_limit); else the streaming kernel runs them, a
    // block a row. H200
    // A/B (2026-12-03 10:32Z, before the grid-group kernel took any residual; kf-bench, same call,
    // two passes), RMS norm with a residual, % of copy, streaming -> clusters: f32 rows of 200000 /
    // 262144 26.7 / 21.5-21.6 -> 62.1-62.4 / 65.8-69.0 (13 and 16 blocks), f16 / bf16 rows of
    // 524288 12.4-12.5 -> 45.3-48.6 / 44.4-47.7; every other row within 2 points.
    const bool large = p.residual.data != nullptr;
    if constexpr (std::is_same_v<S, math::half_t>) {
      if (lean)
        return rows::stage_and_launch<staged_kernel<S, false>, staged_kernel<S, true>,
                                      resident_kernel<S, false>()>(
            p, p.walk, sizeof(S), inputs, device, stream, "norm kernel launch", resident ? 1 : 0,
            large);
    }
    return rows::stage_and_launch<staged_kernel<S, false>, staged_kernel<S, true>,
                                  resident_kernel<S, true>()>(p, p.walk, sizeof(S), inputs, device,
                                                              stream, "norm kernel launch",
                                                              resident ? 1 : 0, large);
  }
}

// Runs the shifted staged kernel (staged_kernel's kShifted) for rows that launch_staged would
// stage but for their 16-byte vectors, whose row operands launch has found in phase with x
// (rows::rows_in_phase), in the staged kernel's order (no weight kept resident); false
// otherwise, and for the rows that launch_staged leaves to the register-cached kernel, which
// takes rows of any alignment. The rows are planned as rows of the length rounded up to whole
// vectors: a row staged from its first 16-byte boundary fills no more of them.
template <class S>
bool launch_shifted(const Plan& p, int32_t device, cudaStream_t stream) {
  if constexpr (sizeof(S) > 4) {
    return false;
  } else {
    if (p.walk.rows >= rows::kMaxColdRows || p.walk.row_length <= rows::kMaxTileRow) return false;
    constexpr int64_t V = 16 / sizeof(S);
    rows::Walk whole = p.walk;
    whole.row_length = (whole.row_length + V - 1) / V * V;
    // Every row here is longer than 16384 elements (kMaxTileRow), so that a 16-bit row of one
    // operand is staged in one rolling buffer (rows::StagedPolicy::rolling_row_bytes) and longer
    // ones by clusters. The layer norm's 16-bit rows of up to 56 KiB had kept the streaming
    // kernel, which had beaten two buffers (H200, 2026-12-02 02:16Z: rows of 20001 / 30522 /
    // 32001, f16 36.3 / 32.5 / 34.4 -> 35.2 / 28.0 / 29.3). One rolling buffer beats both:
    // kf-bench, H200, 07:52Z, the streaming kernel -> the shifted staged kernel in the same call
    // (two passes each), % of copy, rows of 20001 / 24001 / 27001, f16 36.3 / 34.4 / 34.8 ->
    // 42.1 / 42.4 / 43.2, bf16 30.5 / 29.6 / 29.4 -> 40.8 / 42.1 / 42.6.
    const int inputs = p.residual.data ? 2 : 1;
    return rows::stage_and_launch<
        staged_kernel<S, false, false, false, true>,
        staged_kernel<S, true, false, rows::StagedPolicy::restages_in_pass<S>(), true>>(
        p, whole, sizeof(S), inputs, device, stream, "norm kernel launch");
  }
}

}  // namespace
}  // namespace kf::norm
