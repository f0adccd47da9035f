// Small launch helpers of the reduction and batch norm CUDA kernels: division by a run-time
// constant without a divide instruction, and the number of blocks of a kernel that fit on the
// device at once (so that a grid can be one full wave).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/ops/fast_divmod.cuh"
#include "core/runtime/cuda/device_caps.hpp"

namespace kf::reduce {

using kf::FastDivmod;  // core/ops/fast_divmod.cuh

// Blocks of `kernel` that are resident on `device` at once (at least one per SM), for blocks of
// `threads` threads and at most `smem` bytes of dynamic shared memory each (every launch of the
// kernel passes the same two numbers: the answer is queried once per device).
template <auto kKernel>
int64_t resident_blocks(int32_t device, int threads, size_t smem) {
  static std::atomic<int> per_sm_kept[cuda::kKeptDevices];
  const int per_sm = cuda::once_per_device(per_sm_kept, device, [threads, smem] {
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kKernel, threads, smem) != cudaSuccess ||
        n < 1) {
      cudaGetLastError();  // a failed query is not an error of the op: assume one block per SM
      n = 1;
    }
    return n;
  });
  return int64_t{per_sm} * cuda::sm_count(device);
}

}  // namespace kf::reduce
