// Small launch helpers of the reduction and batch norm CUDA kernels: division by a run-time
// constant without a divide instruction, and the number of blocks of a kernel that fit on the
// device at once (so that a grid can be one full wave).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/ops/fast_divmod.cuh"
#include "core/runtime/cuda/cluster_launch.hpp"
#include "core/runtime/cuda/device_caps.hpp"

namespace kf::reduce {

using kf::FastDivmod;  // core/ops/fast_divmod.cuh

// Blocks of `kernel` that are resident on `device` at once (at least one per SM), for blocks of
// `threads` threads and at most `smem` bytes of dynamic shared memory each (every launch of the
// kernel passes the same two numbers: the answer is queried once per device).
template <auto kKernel>
int64_t resident_blocks(int32_t device, int threads, size_t smem) {
  static std::atomic<int> per_sm_cache[64];
  const bool cacheable = device >= 0 && device < 64;
  int per_sm = cacheable ? per_sm_cache[device].load(std::memory_order_relaxed) : 0;
  if (per_sm == 0) {
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kKernel, threads, smem) !=
            cudaSuccess ||
        per_sm < 1) {
      cudaGetLastError();  // a failed query is not an error of the op: assume one block per SM
      per_sm = 1;
    }
    if (cacheable) per_sm_cache[device].store(per_sm, std::memory_order_relaxed);
  }
  return int64_t{per_sm} * cuda::sm_count(device);
}

// Clusters of `cluster` blocks (2, 4 or 8; `threads` threads and `smem` bytes of dynamic shared
// memory each) of `kernel` that are resident on `device` at once, 0 where the runtime cannot
// tell; queried once per device and size. Fewer can fit than the blocks an SM allow: a cluster's
// blocks share one GPC (H200, the 16-bit columns kernel at four blocks an SM: 124 clusters of 4).
template <auto kKernel>
int64_t resident_clusters(int32_t device, int threads, size_t smem, int cluster) {
  static std::atomic<int> cache[64][3];  // sizes 2, 4, 8; -1: the runtime could not tell
  const int size_index = cluster == 2 ? 0 : cluster == 4 ? 1 : cluster == 8 ? 2 : -1;
  if (size_index < 0) return 0;
  const bool cacheable = device >= 0 && device < 64;
  int n = cacheable ? cache[device][size_index].load(std::memory_order_relaxed) : 0;
  if (n == 0) {
    n = cuda::max_active_clusters(kKernel, threads, smem, cluster);
    if (n <= 0) n = -1;
    if (cacheable) cache[device][size_index].store(n, std::memory_order_relaxed);
  }
  return n > 0 ? n : 0;
}

}  // namespace kf::reduce
