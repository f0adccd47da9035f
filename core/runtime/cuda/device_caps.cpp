#if KF_WITH_CUDA

#include "core/runtime/cuda/device_caps.hpp"

#include <cuda_runtime_api.h>

#include <atomic>

#include "core/runtime/cuda/cuda_check.hpp"

namespace kf {
namespace cuda {
namespace {

// One attribute of a device, queried once (devices past the cache are queried every time).
int cached_attribute(std::atomic<int> (&cache)[64], cudaDeviceAttr attribute, int32_t device) {
  const bool cacheable = device >= 0 && device < 64;
  if (cacheable) {
    if (const int n = cache[device].load(std::memory_order_relaxed)) return n;
  }
  int n = 0;
  check(cudaDeviceGetAttribute(&n, attribute, device), "cudaDeviceGetAttribute");
  if (cacheable) cache[device].store(n, std::memory_order_relaxed);
  return n;
}

}  // namespace

int sm_count(int32_t device) {
  static std::atomic<int> cache[64];
  return cached_attribute(cache, cudaDevAttrMultiProcessorCount, device);
}

int compute_major(int32_t device) {
  static std::atomic<int> cache[64];
  return cached_attribute(cache, cudaDevAttrComputeCapabilityMajor, device);
}

}  // namespace cuda
}  // namespace kf

#endif  // KF_WITH_CUDA
