// Launches with a thread-block cluster (sm_90): the blocks of a cluster are co-scheduled and can
// read each other's shared memory, which lets the op kernels split one reduction over several
// blocks without scratch memory. Include only from .cu files where KF_WITH_CUDA is set.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "core/runtime/cuda/cuda_check.hpp"
#include "core/runtime/cuda/launch.hpp"

namespace kf {
namespace cuda {

// A launch configuration with clusters of `cluster` consecutive blocks along x (1: none), for
// cudaLaunchKernelEx and the cluster occupancy queries. The cluster attribute lives in the
// object, so get() stays valid as long as the object does (hence no copies).
// dependent: also a programmatic dependent launch (see grid_dependency.cuh); cooperative: every
// block resident at once, or the launch fails.
class ClusterConfig {
 public:
  ClusterConfig(dim3 grid, dim3 block, size_t shared_bytes, int cluster,
                cudaStream_t stream = nullptr, bool dependent = false, bool cooperative = false) {
    unsigned n = 0;
    if (cooperative) {
      attributes_[n].id = cudaLaunchAttributeCooperative;
      attributes_[n].val.cooperative = 1;
      ++n;
    }
    if (cluster > 1) {
      attributes_[n].id = cudaLaunchAttributeClusterDimension;
      attributes_[n].val.clusterDim.x = static_cast<unsigned>(cluster);
      attributes_[n].val.clusterDim.y = 1;
      attributes_[n].val.clusterDim.z = 1;
      ++n;
    }
    if (dependent) {
      attributes_[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attributes_[n].val.programmaticStreamSerializationAllowed = 1;
      ++n;
    }
    config_.gridDim = grid;
    config_.blockDim = block;
    config_.dynamicSmemBytes = shared_bytes;
    config_.stream = stream;
    config_.attrs = n > 0 ? attributes_ : nullptr;
    config_.numAttrs = n;
  }
  ClusterConfig(const ClusterConfig&) = delete;
  ClusterConfig& operator=(const ClusterConfig&) = delete;

  const cudaLaunchConfig_t* get() const { return &config_; }

 private:
  cudaLaunchAttribute attributes_[3] = {};
  cudaLaunchConfig_t config_{};
};

// Clusters of `cluster` blocks (threads and shared_bytes each) of `kernel` that fit on the
// current device at once; 0 when the runtime cannot tell (the query's error is cleared).
template <class... Params>
int max_active_clusters(void (*kernel)(Params...), int threads, size_t shared_bytes, int cluster) {
  const ClusterConfig config(dim3(static_cast<unsigned>(cluster)),
                             dim3(static_cast<unsigned>(threads)), shared_bytes, cluster);
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, config.get()) != cudaSuccess) {
    cudaGetLastError();
    clusters = 0;
  }
  return clusters;
}

// Launches kernel(args...) on `stream` with clusters of `cluster` consecutive blocks along x
// (grid.x a multiple of it; 1: no clusters), as a programmatic dependent launch on `device` (the
// current one) where the device and the kernel's code allow it (dependent_launch_supported),
// else an ordinary one: `kernel` must begin with cuda::wait_prior_grid(), before any global
// memory access. Throws kf::Error(KF_ERROR_CUDA) naming `what`.
template <class... Params, class... Args>
void launch_clustered_dependent(void (*kernel)(Params...), int device, dim3 grid, dim3 block,
                                size_t shared_bytes, int cluster, cudaStream_t stream,
                                const char* what, const Args&... args) {
  const bool dependent = dependent_launch_supported(reinterpret_cast<const void*>(kernel), device);
  const ClusterConfig config(grid, block, shared_bytes, cluster, stream, dependent);
  check(cudaLaunchKernelEx(config.get(), kernel, args...), what);
}

// Launches kernel(args...) as a cooperative grid (every block resident at once), as
// launch_clustered_dependent does otherwise (no clusters); false, with nothing launched, where
// the grid cannot be resident at once (cudaErrorCooperativeLaunchTooLarge: fewer SMs than the
// occupancy query counted, as in a partition of the device), so that the caller can take another
// kernel. The two attributes combine, on a stream and under stream capture (H200, 2026-11-30
// 07:03Z: docs/performance.md, "Session of 05:45Z"). Throws kf::Error(KF_ERROR_CUDA) naming
// `what` on any other failure.
template <class... Params, class... Args>
[[nodiscard]] bool launch_cooperative_dependent(void (*kernel)(Params...), int device, dim3 grid,
                                                dim3 block, size_t shared_bytes,
                                                cudaStream_t stream, const char* what,
                                                const Args&... args) {
  const bool dependent = dependent_launch_supported(reinterpret_cast<const void*>(kernel), device);
  const ClusterConfig config(grid, block, shared_bytes, 1, stream, dependent, true);
  const cudaError_t error = cudaLaunchKernelEx(config.get(), kernel, args...);
  if (error == cudaErrorCooperativeLaunchTooLarge) {
    cudaGetLastError();  // not sticky: cleared, and the caller runs another kernel
    return false;
  }
  check(error, what);
  return true;
}

}  // namespace cuda
}  // namespace kf
