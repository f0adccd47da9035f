// CUDA backend of the reductions. Three kernels, one per plan layout:
//  - rows (reduce-last): a warp per row for rows shorter than RowsPolicy::block_row_bytes, else a
//    block per row; 16-byte vector loads when rows allow them, `unroll` vectors in flight;
//  - columns (reduce-non-last): a block owns a tile of tile_x * V adjacent columns of one outer
//    index and the whole reduced range; its threads split the reduced rows (threadIdx.y), each
//    loading 16 bytes (V columns) of `unroll` rows before using any, and the partial columns are
//    combined through shared memory in a fixed tree. Consecutive threads read consecutive 16-byte
//    pieces of a row, so every load is coalesced; no scratch memory, no atomics;
//  - strided (anything else): a warp per output, each lane decomposing its reduced indices.
// Every result is combined in an order fixed by the launch shape, which depends only on the plan
// and the device, so results are deterministic. Accumulators fold into groups every few elements,
// and groups into totals (blocked summation), to keep f32 sums of millions of elements accurate.
// On sm_90 the columns kernel splits the rows of each tile over a cluster of blocks when tiles
// are too few to fill the GPU. Known limit: the rows kernel never splits one output over several
// blocks, so a single output over a huge extent (a full reduction) runs on one SM.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#include <cooperative_groups.h>
#endif

#include "core/ops/bf16_pairs.cuh"
#include "core/ops/reduce/launch_util.cuh"
#include "core/ops/reduce/reduce.hpp"
#include "core/ops/rows/staged.cuh"
#include "core/runtime/cuda/cluster_launch.hpp"
#include "core/runtime/cuda/device_caps.hpp"
#include "core/runtime/cuda/grid_dependency.cuh"
#include "core/runtime/cuda/launch.hpp"
#include "core/runtime/error.hpp"

namespace kf::reduce {
namespace {

// ---- tuning (kept apart from the math) -------------------------------------------------------

struct RowsPolicy {
  static constexpr int threads = 256;
  static constexpr int unroll = 4;  // vectors in flight per thread
  // Rows of at least this many bytes get a whole block; shorter rows a warp each, which needs
  // no barrier and keeps `unroll` vectors in flight per lane (a block over an 8 KiB row gives
  // each thread two vectors between two barriers).
  static constexpr int64_t block_row_bytes = 16 * 1024;
  static constexpr int waves = 8;    // grid cap, in blocks per SM
  static constexpr int groups = 64;  // loop steps a thread folds into a group before its total
};

struct ColumnsPolicy {
  static constexpr int threads = 256;
  // Rows in flight per thread: 8 x 16 bytes for f32, f16 and bf16; 4 for f64.
  template <class S>
  static constexpr int unroll() {
    return sizeof(S) == 8 ? 4 : 8;
  }
  static constexpr int max_tile_x = 32;  // threads across a tile's columns
  static constexpr int min_tile_x = 8;   // below this a warp's row segments get too short
  // Clusters that split a tile's rows (sm_90): up to max_split blocks (a power of two), while
  // every cluster of the grid is resident at once and each block keeps min_split_steps loop
  // steps. Mean |x| over dim 0 of 8192 x 8192 f16 on an H200: two waves of short blocks that
  // each ended in a serial cluster combine, 53 % of copy bandwidth; one wave (2 blocks per tile,
  // 256 blocks), 8 rows in flight and the parallel combine of cluster_finish, 84 %; since the
  // 16-bit loop lost its per-row address arithmetic, f16 85.5-86.4 % and bf16 83.5-83.8 %
  // (2026-12-02 21:09-21:12Z). Clusters of 3 or 4 (384 or 512 blocks) measured 62-80 %: at
  // four blocks an SM, 124 clusters of 4 fit where 128 were due (Nsight Compute, 2026-12-02),
  // hence the runtime's count in launch_columns. More rows in flight at two blocks an SM moved
  // the 16-bit rows within a point (12 or 16 rows a thread, 2026-11-29 12:42Z;
  // docs/performance.md).
  static constexpr int max_split = 8;
  static constexpr int min_split_steps = 4;
};

struct StridedPolicy {
  static constexpr int threads = 256;
  static constexpr int fold = 32 * 64;  // elements per warp between folds into a group
  static constexpr int groups = 64;     // folds per group, between folds into the total
  static constexpr int waves = 8;
};

// ---- device helpers ---------------------------------------------------------------------------

template <class S, int V>
struct alignas(sizeof(S) * V) Pack {
  S v[V];
};

// V elements from p (16-byte aligned when V * sizeof(S) == 16).
template <class S, int V>
__device__ __forceinline__ Pack<S, V> load_pack(const S* p) {
  Pack<S, V> r;
  if constexpr (sizeof(S) * V == 16) {
    *reinterpret_cast<uint4*>(&r) = __ldg(reinterpret_cast<const uint4*>(p));
  } else {
#pragma unroll
    for (int e = 0; e < V; ++e) r.v[e] = p[e];
  }
  return r;
}

template <class R, class S>
__device__ __forceinline__ math::compute_t<S> mapped(S v) {
  return R::map(math::StorageTraits<S>::to_compute(v));
}

// R::map of a pack's V elements. bf16 is widened a 32-bit word at a time (bf16_pairs.cuh): one
// IMAD and one LOP3 a word, where element by element the high half took a byte permute and a
// shift (sm_90 SASS), a fifth more instructions in the columns kernel.
template <class R, class S, int V>
__device__ __forceinline__ void mapped_pack(const Pack<S, V>& p, math::compute_t<S> (&out)[V]) {
  if constexpr (std::is_same_v<S, math::bfloat16_t> && V % 2 == 0) {
    unsigned int words[V / 2];
    memcpy(words, p.v, sizeof(words));
    bf16::widen_pairs<V / 2>(words, out);
#pragma unroll
    for (int e = 0; e < V; ++e) out[e] = R::map(out[e]);
  } else {
#pragma unroll
    for (int e = 0; e < V; ++e) out[e] = mapped<R>(p.v[e]);
  }
}

// Combines v over the warp in a fixed butterfly; every lane gets the result.
template <class R, class T>
__device__ __forceinline__ T warp_combine(T v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = R::combine(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

template <class R, class S>
__device__ __forceinline__ S finished(math::compute_t<S> acc, math::compute_t<S> n) {
  return math::StorageTraits<S>::from_compute(R::finish(acc, n));
}

// ---- rows: reduce-last ------------------------------------------------------------------------

template <class S>
struct RowsArgs {
  const S* x;
  S* out;
  int64_t rows, length, row_stride, out_stride;
};

// Group threads reduce one row (32: a warp per row; RowsPolicy::threads: the block).
template <class R, class S, int V, int Group>
__global__ void __launch_bounds__(RowsPolicy::threads) rows_kernel(RowsArgs<S> a) {
  cuda::wait_prior_grid();  // a dependent launch: nothing global is touched before this
  cuda::allow_next_grid();
  using T = math::compute_t<S>;
  constexpr int kUnroll = RowsPolicy::unroll;
  constexpr int kRowsPerBlock = RowsPolicy::threads / Group;
  constexpr int64_t kStep = int64_t{Group} * V;
  __shared__ T scratch[RowsPolicy::threads / 32];
  const int lane = threadIdx.x % Group;
  const T n = static_cast<T>(a.length);
  for (int64_t row = int64_t{blockIdx.x} * kRowsPerBlock + threadIdx.x / Group; row < a.rows;
       row += int64_t{gridDim.x} * kRowsPerBlock) {
    const S* x = a.x + row * a.row_stride;
    // Three levels, as the strided kernel's: a step's kUnroll * V elements into a part, up to
    // RowsPolicy::groups parts into a group, the groups into the total (a thread of a block
    // over a row of 2^24 f32 elements adds 64 groups to its total, not 4096 parts).
    constexpr int64_t kPass = kStep * kUnroll;  // the row's elements one step covers
    T total = R::template identity<T>();
    for (int64_t group = int64_t{lane} * V; group < a.length; group += kPass * RowsPolicy::groups) {
      const int64_t group_end = group + kPass * RowsPolicy::groups;
      T sum = R::template identity<T>();
      for (int64_t base = group; base < a.length && base < group_end; base += kPass) {
        Pack<S, V> p[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
          if (base + u * kStep < a.length) p[u] = load_pack<S, V>(x + base + u * kStep);
        T part = R::template identity<T>();
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
          if (base + u * kStep < a.length) {
#pragma unroll
            for (int e = 0; e < V; ++e) part = R::combine(part, mapped<R>(p[u].v[e]));
          }
        sum = R::combine(sum, part);
      }
      total = R::combine(total, sum);
    }
    total = warp_combine<R>(total);
    if constexpr (Group > 32) {
      const int warp = threadIdx.x / 32;
      if (threadIdx.x % 32 == 0) scratch[warp] = total;
      __syncthreads();
      if (warp == 0) {
        T v = threadIdx.x < Group / 32 ? scratch[threadIdx.x] : R::template identity<T>();
        v = warp_combine<R>(v);
        if (threadIdx.x == 0) a.out[row * a.out_stride] = finished<R, S>(v, n);
      }
      __syncthreads();  // scratch is reused by the next row
    } else {
      if (lane == 0) a.out[row * a.out_stride] = finished<R, S>(total, n);
    }
  }
}

// ---- columns: reduce-non-last -----------------------------------------------------------------

__device__ __forceinline__ void cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cooperative_groups::this_cluster().sync();
#else
  __trap();  // splits are launched on sm_90 and later only
#endif
}

// Finishes a tile whose rows were split over the cluster: block `rank` takes its share of the
// tile's `width` columns and combines the blocks' partial columns (row 0 of each block's tile)
// in rank order, so results stay deterministic; every thread of the block takes part, and every
// block's loads are in flight at once. Writes out[c * out_stride] for column c of the tile
// (first_col + c < inner).
template <class R, class S, class T>
__device__ __forceinline__ void cluster_finish(T* tile, int width, int split, int rank,
                                               int64_t first_col, int64_t inner, S* out,
                                               int64_t out_stride, T n) {
  cluster_sync();  // every block's partial columns are final
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  const int share = (width + split - 1) / split;
  const int t = threadIdx.y * blockDim.x + threadIdx.x;
  const int c = rank * share + t;
  if (t < share && c < width && first_col + c < inner) {
    T part[ColumnsPolicy::max_split];
#pragma unroll
    for (int r = 0; r < ColumnsPolicy::max_split; ++r)
      if (r < split) part[r] = cluster.map_shared_rank(tile, r)[c];
    T total = part[0];
#pragma unroll
    for (int r = 1; r < ColumnsPolicy::max_split; ++r)
      if (r < split) total = R::combine(total, part[r]);
    out[(first_col + c) * out_stride] = finished<R, S>(total, n);
  }
#endif
  cluster_sync();  // no block leaves (or reuses its tile) while another reads it
}

// total[e] combined with the first `rows` packs of a step (rows >= 1), summed among themselves
// first: the same grouping in the whole and the partial steps.
template <class R, class S, int V, int kUnroll>
__device__ __forceinline__ void fold_step(const Pack<S, V> (&p)[kUnroll], int rows,
                                          math::compute_t<S> (&total)[V]) {
  using T = math::compute_t<S>;
  T part[V];
  mapped_pack<R>(p[0], part);
#pragma unroll
  for (int u = 1; u < kUnroll; ++u) {
    if (u < rows) {
      T m[V];
      mapped_pack<R>(p[u], m);
#pragma unroll
      for (int e = 0; e < V; ++e) part[e] = R::combine(part[e], m[e]);
    }
  }
#pragma unroll
  for (int e = 0; e < V; ++e) total[e] = R::combine(total[e], part[e]);
}

template <class S>
struct ColumnsArgs {
  const S* x;
  S* out;
  int64_t outer, reduced, inner, row_stride, outer_stride, out_stride, out_outer;
  int split;  // blocks sharing a column tile (a cluster, sm_90), each over a part of the rows
};

// Block (tile_x, tile_y): tile_x * V columns, tile_y threads over the reduced rows (powers of 2).
// With a split, the `split` consecutive blocks of a cluster share a column tile and each reduces
// its own contiguous part of the rows; the first block combines the others' partial columns from
// their shared memory in rank order, so results stay deterministic.
template <class R, class S, int V>
__global__ void __launch_bounds__(ColumnsPolicy::threads) columns_kernel(ColumnsArgs<S> a) {
  cuda::wait_prior_grid();  // a dependent launch: nothing global is touched before this
  cuda::allow_next_grid();
  using T = math::compute_t<S>;
  constexpr int kUnroll = ColumnsPolicy::unroll<S>();
  __shared__ T tile[ColumnsPolicy::threads * V];  // [threadIdx.y][threadIdx.x * V + e]
  const int tile_x = blockDim.x, tile_y = blockDim.y;
  const int width = tile_x * V;
  const int slot = threadIdx.x * V;
  const int rank = static_cast<int>(blockIdx.x % static_cast<unsigned>(a.split));
  const int64_t col = (int64_t{blockIdx.x / a.split} * tile_x + threadIdx.x) * V;
  const bool active = col < a.inner;  // V > 1 only when inner % V == 0: whole packs
  const int64_t step = int64_t{tile_y} * kUnroll;
  const int64_t part_rows = (a.reduced + a.split - 1) / a.split;
  const int64_t first = rank * part_rows;
  const int64_t end = a.reduced < first + part_rows ? a.reduced : first + part_rows;
  const T n = static_cast<T>(a.reduced);
  for (int64_t o = blockIdx.y; o < a.outer; o += gridDim.y) {
    const S* x = a.x + o * a.outer_stride + col;
    T total[V];
#pragma unroll
    for (int e = 0; e < V; ++e) total[e] = R::template identity<T>();
    if (active) {
      int64_t r0 = first + threadIdx.y;
      if constexpr (sizeof(S) == 2) {
        // Whole steps, kUnroll rows a thread and none past the end, addressed from one pointer:
        // the 16-bit kernels spent more instructions on a 64-bit multiply and a clamp a row than
        // on their conversions and adds (H200, mean |x| over dim 0 of 8192 x 8192, with the bf16
        // words below: f16 82.7-82.9 % of copy -> 85.6-86.4 %, bf16 81.6-81.8 -> 83.5-83.6). The
        // f64 kernel lost with it (103 -> 91 %; fewer instructions, the same blocks an SM, not
        // explained), so 4- and 8-byte data keep the clamped form below for every step.
        const int64_t y_stride = int64_t{tile_y} * a.row_stride;  // a thread's rows of a step
        for (; r0 + (kUnroll - 1) * int64_t{tile_y} < end; r0 += step) {
          const S* row = x + r0 * a.row_stride;
          Pack<S, V> p[kUnroll];
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) p[u] = load_pack<S, V>(row + u * y_stride);
          fold_step<R, S, V, kUnroll>(p, kUnroll, total);
        }
      }
      for (; r0 < end; r0 += step) {
        Pack<S, V> p[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          // Rows past the end re-read row r0 (cached, then ignored): unconditional loads keep
          // every pack in registers.
          const int64_t r = r0 + int64_t{u} * tile_y;
          p[u] = load_pack<S, V>(x + (r < end ? r : r0) * a.row_stride);
        }
        int rows = 1;
#pragma unroll
        for (int u = 1; u < kUnroll; ++u) rows += r0 + int64_t{u} * tile_y < end;
        fold_step<R, S, V, kUnroll>(p, rows, total);
      }
    }
#pragma unroll
    for (int e = 0; e < V; ++e) tile[threadIdx.y * width + slot + e] = total[e];
    __syncthreads();
    for (int half = tile_y / 2; half > 0; half /= 2) {
      if (threadIdx.y < half) {
#pragma unroll
        for (int e = 0; e < V; ++e) {
          T& mine = tile[threadIdx.y * width + slot + e];
          mine = R::combine(mine, tile[(threadIdx.y + half) * width + slot + e]);
        }
      }
      __syncthreads();
    }
    S* out = a.out + o * a.out_outer;
    if (a.split > 1) {
      cluster_finish<R>(tile, width, a.split, rank, col - slot, a.inner, out, a.out_stride, n);
    } else if (threadIdx.y == 0 && active) {
#pragma unroll
      for (int e = 0; e < V; ++e) out[(col + e) * a.out_stride] = finished<R, S>(tile[slot + e], n);
    }
    __syncthreads();  // the tile is reused by the next outer index
  }
}

// ---- strided: anything else -------------------------------------------------------------------

template <class R, class S>
__global__ void __launch_bounds__(StridedPolicy::threads)
    strided_kernel(const __grid_constant__ Plan p) {
  cuda::wait_prior_grid();  // a dependent launch: nothing global is touched before this
  cuda::allow_next_grid();
  using T = math::compute_t<S>;
  constexpr int kWarps = StridedPolicy::threads / 32;
  const int lane = threadIdx.x % 32;
  const T n = static_cast<T>(p.reduced);
  for (int64_t o = int64_t{blockIdx.x} * kWarps + threadIdx.x / 32; o < p.outputs;
       o += int64_t{gridDim.x} * kWarps) {
    int64_t xo, oo;
    output_offsets(p, o, &xo, &oo);
    const S* x = static_cast<const S*>(p.x) + xo;
    // Three levels: 64 elements a lane into a part, 64 parts into a group, the groups into the
    // total. With the parts added straight into the total, a lane's 2^21 / 32 elements of one
    // value leaned one way at each of 1024 additions: the f32 sum of squares of 2^21 tenths was
    // 1.4e-5 off (H100, 2026-12-05); grouped, 16 additions reach the total.
    constexpr int64_t kGroup = int64_t{StridedPolicy::fold} * StridedPolicy::groups;
    T total = R::template identity<T>();
    for (int64_t group = 0; group < p.reduced; group += kGroup) {
      const int64_t group_end = p.reduced < group + kGroup ? p.reduced : group + kGroup;
      T sum = R::template identity<T>();
      for (int64_t base = group; base < group_end; base += StridedPolicy::fold) {
        const int64_t end =
            group_end < base + StridedPolicy::fold ? group_end : base + StridedPolicy::fold;
        T part = R::template identity<T>();
        for (int64_t r = base + lane; r < end; r += 32)
          part = R::combine(part, mapped<R>(x[reduced_offset(p, r)]));
        sum = R::combine(sum, part);
      }
      total = R::combine(total, sum);
    }
    total = warp_combine<R>(total);
    if (lane == 0) static_cast<S*>(p.out)[oo] = finished<R, S>(total, n);
  }
}

// ---- host side --------------------------------------------------------------------------------

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <class R, class S, int V>
void launch_rows(const Plan& p, int32_t device, int sms, cudaStream_t stream) {
  RowsArgs<S> a{static_cast<const S*>(p.x),
                static_cast<S*>(p.out),
                p.outputs,
                p.reduced,
                p.row_stride,
                p.out_stride};
  const int64_t cap = int64_t{sms} * RowsPolicy::waves;
  if (p.reduced * static_cast<int64_t>(sizeof(S)) >= RowsPolicy::block_row_bytes) {
    const int64_t grid = std::min(p.outputs, cap);
    cuda::launch_dependent(rows_kernel<R, S, V, RowsPolicy::threads>, device,
                           static_cast<unsigned>(grid), RowsPolicy::threads, stream,
                           "reduction kernel launch", a);
  } else {
    const int64_t grid = std::min(ceil_div(p.outputs, RowsPolicy::threads / 32), cap);
    cuda::launch_dependent(rows_kernel<R, S, V, 32>, device, static_cast<unsigned>(grid),
                           RowsPolicy::threads, stream, "reduction kernel launch", a);
  }
}

template <class R, class S, int V>
void launch_columns(const Plan& p, int32_t device, bool clusters, cudaStream_t stream) {
  ColumnsArgs<S> a{static_cast<const S*>(p.x),
                   static_cast<S*>(p.out),
                   p.outer,
                   p.reduced,
                   p.inner,
                   p.row_stride,
                   p.outer_stride,
                   p.out_stride,
                   p.out_outer,
                   1};
  const int64_t grid_y = std::min<int64_t>(p.outer, 65535);
  const int64_t resident =
      resident_blocks<columns_kernel<R, S, V>>(device, ColumnsPolicy::threads, 0);
  int tile_x = ColumnsPolicy::max_tile_x;
  while (tile_x > 1 && int64_t{tile_x / 2} * V >= p.inner) tile_x /= 2;  // no idle columns
  while (tile_x > ColumnsPolicy::min_tile_x &&
         ceil_div(p.inner, int64_t{tile_x} * V) * grid_y < resident)
    tile_x /= 2;  // more, narrower tiles, so that every SM has work
  int tile_y = ColumnsPolicy::threads / tile_x;
  while (tile_y > 1 && tile_y / 2 >= p.reduced) tile_y /= 2;  // no idle rows
  const int64_t grid_x = ceil_div(p.inner, int64_t{tile_x} * V);
  // Too few tiles to fill the device (a wide tensor reduced over dim 0): split the rows of each
  // tile over a cluster of blocks, as far as one wave of clusters holds. The clusters that fit
  // are asked of the runtime: one that must wait for a second wave costs a whole block's time
  // (8192 x 8192 16-bit at four blocks an SM: 128 clusters of 4 where 124 fit, 66-76 % of copy
  // against 83-87 % for clusters of 2; docs/performance.md, 2026-12-02).
  const int64_t tiles = grid_x * grid_y;
  const int64_t step_rows = int64_t{tile_y} * ColumnsPolicy::unroll<S>();
  while (clusters && a.split < ColumnsPolicy::max_split && tiles * a.split * 2 <= resident &&
         p.reduced / (a.split * 2) >= step_rows * ColumnsPolicy::min_split_steps) {
    const int64_t fit = rows::resident_blocks(columns_kernel<R, S, V>, ColumnsPolicy::threads, 0,
                                              a.split * 2, device);  // whole clusters; 0: unknown
    if (fit > 0 && tiles * a.split * 2 > fit) break;
    a.split *= 2;
  }
  cuda::launch_clustered_dependent(
      columns_kernel<R, S, V>, device,
      dim3(static_cast<unsigned>(grid_x * a.split), static_cast<unsigned>(grid_y)),
      dim3(tile_x, tile_y), 0, a.split, stream, "reduction kernel launch", a);
}

template <class R, class S>
void launch_strided(const Plan& p, int32_t device, int sms, cudaStream_t stream) {
  constexpr int kWarps = StridedPolicy::threads / 32;
  const int64_t grid = std::min(ceil_div(p.outputs, kWarps), int64_t{sms} * StridedPolicy::waves);
  cuda::launch_dependent(strided_kernel<R, S>, device, static_cast<unsigned>(grid),
                         StridedPolicy::threads, stream, "reduction kernel launch", p);
}

template <class R, class S>
void run_typed(const Plan& p, int32_t device, int sms, bool clusters, cudaStream_t stream) {
  constexpr int kWidth = static_cast<int>(16 / sizeof(S));
  switch (p.layout) {
    case Layout::rows:
      if (p.reduced % kWidth == 0 && p.row_stride % kWidth == 0 && aligned16(p.x))
        return launch_rows<R, S, kWidth>(p, device, sms, stream);
      return launch_rows<R, S, 1>(p, device, sms, stream);
    case Layout::columns:
      if (p.inner % kWidth == 0 && p.row_stride % kWidth == 0 && p.outer_stride % kWidth == 0 &&
          aligned16(p.x))
        return launch_columns<R, S, kWidth>(p, device, clusters, stream);
      return launch_columns<R, S, 1>(p, device, clusters, stream);
    case Layout::strided: return launch_strided<R, S>(p, device, sms, stream);
  }
}

}  // namespace

// The entry has made device_id current (kf::activate).
void run_cuda(const Plan& plan, int32_t device_id, void* native_stream) {
  const int sms = cuda::sm_count(device_id);
  const bool clusters = cuda::compute_major(device_id) >= 9;
  cudaStream_t stream = static_cast<cudaStream_t>(native_stream);
  dispatch_dtype(plan.dtype, [&](auto storage) {
    math::reduction::dispatch(plan.op, [&](auto op) {
      run_typed<decltype(op), decltype(storage)>(plan, device_id, sms, clusters, stream);
    });
  });
}

}  // namespace kf::reduce
