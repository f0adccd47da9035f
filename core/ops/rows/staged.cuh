// Shared-memory staged rows for the row-wise CUDA kernels (norms, softmax), for dense rows whose
// starts are 16-byte aligned and whose length fills whole 16-byte vectors (and, in the families'
// shifted forms, long rows staged from each row's first 16-byte boundary: head_columns,
// stage_row, for_each_unstaged). A block copies a tile
// of rows, or its slice of one long row, into shared memory with 16-byte cp.async copies, all
// issued before the first wait, and stages the next tile while it computes the current one (two
// buffers): the bytes in flight per SM are then bounded by shared memory instead of by the
// registers a row cache can spare. The statistics passes read shared memory and the output is
// written once, so each input is read from DRAM once.
// Regimes, chosen on the host by plan_staging (each family decides where staging is used):
//  - rows of up to 6 KiB: a tile of ~16 KiB of rows per buffer, 1..32 lanes per row;
//  - rows of up to 64 KiB: the whole block per row, a tile of one or more rows; rows of one
//    operand past 32 KiB in one buffer, rolling as below (StagedPolicy::rolling_row_bytes);
//  - longer rows: a thread-block cluster per row (sm_90), each block staging a 64 KiB (or
//    128 KiB) slice, one buffer; the row's statistics are combined through distributed shared
//    memory. The clusters stay resident and walk the rows; each thread stages its own slots of
//    the next row as soon as the current row's output pass has read them (rolling), so the next
//    row's loads are in flight while this row's stores drain. A family may keep a per-column
//    operand (the RMS norm's weight) resident: each block stages its slice of it once, beside
//    its slice of the row, in twice the blocks.
// The tuning numbers live in StagedPolicy (staging_plan.hpp, with the host's plan), apart from
// the families' math.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/ops/async_copy.cuh"
#include "core/ops/rows/reduce.cuh"
#include "core/ops/rows/rows.hpp"
#include "core/ops/rows/staging_plan.hpp"
#include "core/runtime/cuda/cluster_launch.hpp"
#include "core/runtime/cuda/cuda_check.hpp"
#include "core/runtime/cuda/device_caps.hpp"

namespace kf::rows {

// Issues cp.async copies of `count` 16-byte vectors per row for `rows` rows: row r's vectors go
// from src(r) (global, 16-byte aligned) to dst + r * dst_stride (shared). Rows of at least a
// block's worth of vectors are taken one at a time, their source found once (thread t copies
// vectors t, t + blockDim.x, ... of each: the rolling path relies on this); shorter rows are
// flattened, so that they still keep every thread busy.
template <class S, class Src>
__device__ __forceinline__ void stage_rows(S* dst, int64_t dst_stride, int rows, int count,
                                           Src src) {
  constexpr int vec = 16 / sizeof(S);
  if (count >= static_cast<int>(blockDim.x)) {
    for (int r = 0; r < rows; ++r) {
      const S* from = src(r);
      S* to = dst + r * dst_stride;
      for (int v = threadIdx.x; v < count; v += blockDim.x)
        async_copy::copy16(to + v * vec, from + v * vec);
    }
    return;
  }
  const int total = rows * count;
  for (int i = threadIdx.x; i < total; i += blockDim.x) {
    const int r = i / count, v = i - r * count;
    async_copy::copy16(dst + r * dst_stride + v * vec, src(r) + v * vec);
  }
}

// Columns of a row of S before its first 16-byte boundary (0 when it starts on one): the shifted
// staged forms stage a row from that boundary, so its staged slot c holds column head + c.
template <class S>
__device__ __forceinline__ int head_columns(const S* row) {
  return static_cast<int>(((16u - (reinterpret_cast<uintptr_t>(row) & 15u)) & 15u) / sizeof(S));
}

// Issues the cp.async copy of the vector at column c (a multiple of 16 / sizeof(S)) of a staged
// row of `cols` elements from src (global, 16-byte aligned) to slots (shared), if the vector is
// whole: the few columns of a partial last vector are left to the kernel, which reads them from
// global memory (a 16-byte copy would read past the row, and past its allocation on the last
// row: compute-sanitizer's memcheck flags that even for a cp.async told to read fewer bytes).
template <class S>
__device__ __forceinline__ void stage_vector(S* slots, const S* src, int c, int cols) {
  if (c + static_cast<int>(16 / sizeof(S)) <= cols) async_copy::copy16(slots + c, src + c);
}

// Issues cp.async copies of the whole 16-byte vectors of one staged row of `cols` elements (any
// count) from src (global, 16-byte aligned) to dst (shared), a vector at a time (stage_vector).
// Thread t copies vectors t, t + blockDim.x, ..., as stage_rows does a long row (the rolling
// path relies on this).
template <class S>
__device__ __forceinline__ void stage_row(S* dst, int cols, const S* src) {
  constexpr int vec = 16 / sizeof(S);
  const int step = static_cast<int>(blockDim.x) * vec;
  for (int c = static_cast<int>(threadIdx.x) * vec; c < cols; c += step)
    stage_vector(dst, src, c, cols);
}

// The staged columns of a block's slice (from column first_col, at most `slice` of them) of a row
// of n columns with `head` columns before its first 16-byte boundary (head_columns), staged from
// that boundary: 0 for a slice past the row's end.
__device__ __forceinline__ int shifted_slice_columns(int64_t n, int head, int64_t first_col,
                                                     int64_t slice) {
  const int64_t left = n - head - first_col;
  return static_cast<int>(left <= 0 ? 0 : left < slice ? left : slice);
}

// Calls fn(at, value) for one thread's columns of a shifted staged row outside its whole staged
// vectors: `part` columns of the partial vector after the `seen` staged ones (values part_v, at
// seen + e) and `head_here` columns before the row's first 16-byte boundary (values head_v, at
// e - head), `at` being a column's offset from the block's first staged column.
// kBranch: only the one or two threads of a row that take such columns enter the loops; the
// others, and every warp without such a thread, branch past them, where the unrolled loops'
// predicated bodies are otherwise issued by every warp in every pass. kf-bench, H200 2026-12-02
// 15:30Z, same call, two passes, % of copy, rows of 20001 / 30522 / 50257, without -> with:
// softmax f32 72.9 / 76.0-76.1 / 72.6-72.7 -> 73.9-74.0 / 76.7 / 73.7, f16 63.2-63.6 / 66.1-66.5
// / 64.5-64.6 -> 65.4-69.1 / 67.2-68.3 / 66.0, bf16 60.6-64.0 / 63.8-64.4 / 61.7-61.9 -> 64.4 /
// 64.8-66.3 / 64.5-64.6; RMS norm f16 59.1-59.2 / 56.7 / 56.3 -> 62.2-62.7 / 58.2-59.2 /
// 58.5-58.6, bf16 60.1 / 56.3-56.4 / 56.0-56.1 -> 63.0-63.5 / 57.7-58.4 / 57.8-57.9. The
// norm's f32 kernel, shared by the layer norm, does without (layer norm f32 50.9 / 54.3 / 48.9
// -> 49.2-49.4 / 46.5 / 46.2, though the RMS norm's gained a point).
template <bool kBranch = true, int V, class T, class Fn>
__device__ __forceinline__ void for_each_unstaged(int seen, int part, const T (&part_v)[V],
                                                  int head, int head_here, const T (&head_v)[V],
                                                  Fn&& fn) {
  if (!kBranch || part > 0) {
#pragma unroll
    for (int e = 0; e < V; ++e)
      if (e < part) fn(seen + e, part_v[e]);
  }
  if (!kBranch || head_here > 0) {
#pragma unroll
    for (int e = 0; e < V; ++e)
      if (e < head_here) fn(e - head, head_v[e]);
  }
}

// Runs compute(tile, buffer, next) over this block's tiles (the same ones for every block of a
// cluster), each staged first by stage(tile, buffer), which issues cp.async copies. With two
// buffers the next tile's copies are in flight while the current tile is computed (next is -1).
// Rolling (one row per tile, the block's threads over it): the next tile is staged into the same
// buffer, with no barrier between. That needs compute to read, in every pass, only the slots its
// thread staged (stage_rows gives thread t the vectors t, t + threads, ...): each thread then
// overwrites only its own slots, once it is done with them. kInPass: compute stages tile `next`
// (-1: none) itself, slot by slot, as its last pass leaves each slot (async_copy::copy16), and the
// slots that pass does not reach after it; else the next tile is staged after compute returns (next
// is then -1). In the pass, the next row's loads are in flight while this row's output is computed
// and stored. kf-bench, f32 rows of 262144, % of copy before -> after (same call, two passes):
// H200 (2026-11-26 22:10Z) softmax 65.2 / 65.9 -> 70.1 / 70.6, layer norm 48.0 -> 51.4 / 50.5,
// RMS norm 56.2 / 55.6 -> 58.6 / 58.3; H100 (22:16Z) 80.3 / 78.9 -> 81.8 / 81.5, 58.7 / 58.5 ->
// 60.4, 65.5 / 65.2 -> 67.8 / 67.7. 16-bit rows lost on the H200 (layer norm f16 57.7 -> 50.1,
// bf16 53.5 -> 50.3), so they stage after the pass (their kernels are unchanged).
template <bool kInPass, class Stage, class Compute>
__device__ __forceinline__ void for_each_tile(const Staging& g, int64_t tiles, Stage stage,
                                              Compute compute) {
  const int64_t stride = gridDim.x / g.cluster;
  int64_t tile = blockIdx.x / g.cluster;
  if (g.rolling) {
    if (tile < tiles) stage(tile, 0);
    async_copy::commit();
    for (; tile < tiles; tile += stride) {
      async_copy::wait<0>();  // this thread's copies of the tile have landed
      if constexpr (kInPass) {
        compute(tile, 0, tile + stride < tiles ? tile + stride : int64_t{-1});
      } else {
        compute(tile, 0, int64_t{-1});
        if (tile + stride < tiles) stage(tile + stride, 0);
      }
      async_copy::commit();
    }
    return;
  }
  if (g.buffers == 1) {
    for (; tile < tiles; tile += stride) {
      __syncthreads();  // the last tile's passes are done with shared memory
      stage(tile, 0);
      async_copy::commit();
      async_copy::wait<0>();
      __syncthreads();
      compute(tile, 0, int64_t{-1});
    }
    return;
  }
  if (tile < tiles) stage(tile, 0);
  async_copy::commit();
  for (int buffer = 0; tile < tiles; tile += stride, buffer ^= 1) {
    if (tile + stride < tiles) stage(tile + stride, buffer ^ 1);
    async_copy::commit();
    async_copy::wait<1>();  // all but the newest group: the current tile has landed
    __syncthreads();
    compute(tile, buffer, int64_t{-1});
    __syncthreads();  // the current buffer is free for the tile after next
  }
}

// Rank of this block in its row's cluster (1-D clusters of consecutive blocks).
__device__ __forceinline__ int slice_rank(const Staging& g) {
  return g.cluster > 1 ? static_cast<int>(blockIdx.x % static_cast<unsigned>(g.cluster)) : 0;
}

// ---- host side ----------------------------------------------------------------------------

// Prepares kKernel<kClustered> on `device` once (the dynamic shared memory it may take and, for
// the clustered kernel, non-portable cluster sizes) and returns the largest cluster it may use:
// 1 without clusters (before sm_90, or the tile kernel), 16 when the device can hold a
// 16-block cluster of 64 KiB slices, else 8.
template <auto kKernel, bool kClustered>
int prepare_staged_kernel(int32_t device) {
  static std::atomic<int> kept[cuda::kKeptDevices];
  return cuda::once_per_device(kept, device, [device] {
    using P = StagedPolicy;
    int limit = 1;
    cuda::check(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(P::large_slice_bytes)),
                "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
    // The clustered kernel takes the largest carveout: left to the driver, its 64 KiB slices got
    // a 135 KiB configuration, two blocks per SM. (The tile kernel's 32 KiB leave room for L1.)
    if (kClustered)
      cuda::check(cudaFuncSetAttribute(kKernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                       cudaSharedmemCarveoutMaxShared),
                  "cudaFuncSetAttribute(PreferredSharedMemoryCarveout)");
    if (kClustered && cuda::compute_major(device) >= 9) {
      limit = P::max_portable_cluster;
      if (cudaFuncSetAttribute(kKernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) ==
              cudaSuccess &&
          cuda::max_active_clusters(kKernel, P::threads, static_cast<size_t>(P::slice_bytes),
                                    P::max_cluster) > 0)
        limit = P::max_cluster;
      cudaGetLastError();  // a refused non-portable size is not an error of the op
    }
    return limit;
  });
}

// The largest cluster of 128 KiB slices (StagedPolicy::large_slice_bytes) that kKernel, prepared
// by prepare_staged_kernel<kKernel, true> with `max_cluster` as its answer, may use on `device`:
// max_cluster where the device holds one such cluster at once, else the portable size.
template <auto kKernel>
int large_cluster_limit(int32_t device, int max_cluster) {
  using P = StagedPolicy;
  if (max_cluster <= P::max_portable_cluster) return max_cluster;
  static std::atomic<int> kept[cuda::kKeptDevices];
  return cuda::once_per_device(kept, device, [max_cluster] {
    return cuda::max_active_clusters(kKernel, P::threads, static_cast<size_t>(P::large_slice_bytes),
                                     max_cluster) > 0
               ? max_cluster
               : P::max_portable_cluster;
  });
}

// Blocks of `kernel` (threads and smem bytes each, in clusters of `cluster`) that fit on `device`
// at once, a whole number of clusters; 0 when the runtime cannot tell. The answer depends on
// nothing else, so each thread keeps its last few rather than query the runtime at every launch.
template <class... Params>
int64_t resident_blocks(void (*kernel)(Params...), int threads, size_t smem, int cluster,
                        int32_t device) {
  struct Answer {
    void (*kernel)(Params...);
    int threads;
    size_t smem;
    int cluster;
    int32_t device;
    int64_t resident;
  };
  constexpr unsigned kKept = 8;
  thread_local Answer kept[kKept] = {};
  thread_local unsigned next = 0;
  for (const Answer& a : kept)
    if (a.kernel == kernel && a.threads == threads && a.smem == smem && a.cluster == cluster &&
        a.device == device)
      return a.resident;
  int64_t resident = 0;
  if (cluster > 1) {
    resident = int64_t{cuda::max_active_clusters(kernel, threads, smem, cluster)} * cluster;
  } else {
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem) ==
        cudaSuccess)
      resident = int64_t{per_sm} * cuda::sm_count(device);
  }
  cudaGetLastError();  // a failed query is not an error of the op
  if (resident > 0) kept[next++ % kKept] = Answer{kernel, threads, smem, cluster, device, resident};
  return resident;
}

// Launches kernel(plan, g) with g's block, shared memory and cluster size. The grid is capped at
// the blocks (rolling: the clusters) that fit on the device at once, so that each block works
// through several tiles and overlaps their loads with its compute and stores.
template <class Plan>
void launch_staged(void (*kernel)(Plan, Staging), const Plan& plan, Staging g, int32_t device,
                   cudaStream_t stream, const char* what) {
  if (g.rolling || g.cluster == 1) {
    const int64_t resident =
        resident_blocks(kernel, StagedPolicy::threads, g.smem, g.cluster, device);
    if (resident > 0 && g.grid > resident) g.grid = static_cast<unsigned>(resident);
  }
  cuda::launch_clustered_dependent(kernel, device, dim3(g.grid), dim3(StagedPolicy::threads),
                                   g.smem, g.cluster, stream, what, plan, g);
}

// Plans and launches a family's staged kernels (kTiled without clusters, kClustered with, or
// kResident where plan_staging keeps `resident` per-column operands in shared memory) over
// plan's rows; false when they cannot be staged (the caller takes another path). With
// `large_clusters`, rows of 128 KiB slices may take clusters past the portable size where the
// device holds them (large_cluster_limit); a family asks for it where such rows have no better
// path.
template <auto kTiled, auto kClustered, auto kResident = kClustered, class Plan>
bool stage_and_launch(const Plan& plan, const Walk& w, int element_bytes, int inputs,
                      int32_t device, cudaStream_t stream, const char* what, int resident = 0,
                      bool large_clusters = false) {
  const int max_cluster = prepare_staged_kernel<kClustered, true>(device);
  prepare_staged_kernel<kTiled, false>(device);
  if (resident > 0) prepare_staged_kernel<kResident, true>(device);
  const int max_large_cluster = large_clusters
                                    ? large_cluster_limit<kClustered>(device, max_cluster)
                                    : StagedPolicy::max_portable_cluster;
  Staging g;
  if (!plan_staging(w.rows, w.row_length, element_bytes, inputs, max_cluster, &g, resident,
                    max_large_cluster))
    return false;
  launch_staged(g.cluster > 1 ? (g.resident > 0 ? kResident : kClustered) : kTiled, plan, g, device,
                stream, what);
  return true;
}

}  // namespace kf::rows
