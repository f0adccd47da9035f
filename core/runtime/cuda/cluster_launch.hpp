// Launches with a thread-block cluster (sm_90): the blocks of a cluster are co-scheduled and can
// read each other's shared memory, which lets the op kernels split one reduction over several
// blocks without scratch memory. Include only from .cu files where KF_WITH_CUDA is set.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "core/runtime/cuda/cuda_check.hpp"

namespace kf {
namespace cuda {

// Launches kernel(args...) on `stream` with clusters of `cluster` consecutive blocks along x
// (grid.x a multiple of it; 1: a plain launch). Throws kf::Error(KF_ERROR_CUDA) naming `what`.
template <class... Params, class... Args>
void launch_clustered(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
                      int cluster, cudaStream_t stream, const char* what, const Args&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = static_cast<unsigned>(cluster);
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = cluster > 1 ? &attribute : nullptr;
  config.numAttrs = cluster > 1 ? 1 : 0;
  check(cudaLaunchKernelEx(&config, kernel, args...), what);
}

}  // namespace cuda
}  // namespace kf
