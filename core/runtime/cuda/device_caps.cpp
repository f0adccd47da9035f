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

double issue_per_byte(int32_t device) {
  static std::atomic<double> cache[64];  // negative: queried, unknown
  const bool cacheable = device >= 0 && device < 64;
  if (cacheable) {
    const double known = cache[device].load(std::memory_order_relaxed);
    if (known != 0) return known > 0 ? known : 0;
  }
  int sms = 0, clock_khz = 0, memory_khz = 0, bus_bits = 0;
  double ratio = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) == cudaSuccess &&
      cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device) == cudaSuccess &&
      cudaDeviceGetAttribute(&memory_khz, cudaDevAttrMemoryClockRate, device) == cudaSuccess &&
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device) == cudaSuccess) {
    const double issue = 128.0 * sms * clock_khz;
    const double bytes = 2.0 * memory_khz * (bus_bits / 8.0);
    if (issue > 0 && bytes > 0) ratio = issue / bytes;
  } else {
    cudaGetLastError();  // an unreported clock is not an error of the caller
  }
  if (cacheable) cache[device].store(ratio > 0 ? ratio : -1, std::memory_order_relaxed);
  return ratio;
}

}  // namespace cuda
}  // namespace kf

#endif  // KF_WITH_CUDA
