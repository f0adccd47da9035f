#if KF_WITH_CUDA

#include "core/runtime/cuda/device_caps.hpp"

#include <cuda_runtime_api.h>

#include <atomic>

#include "core/runtime/cuda/cuda_check.hpp"

namespace kf {
namespace cuda {
namespace {

// One attribute of a device, queried once.
int cached_attribute(std::atomic<int> (&cache)[kKeptDevices], cudaDeviceAttr attribute,
                     int32_t device) {
  return once_per_device(cache, device, [&] {
    int n = 0;
    check(cudaDeviceGetAttribute(&n, attribute, device), "cudaDeviceGetAttribute");
    return n;
  });
}

}  // namespace

int sm_count(int32_t device) {
  static std::atomic<int> cache[kKeptDevices];
  return cached_attribute(cache, cudaDevAttrMultiProcessorCount, device);
}

int compute_major(int32_t device) {
  static std::atomic<int> cache[kKeptDevices];
  return cached_attribute(cache, cudaDevAttrComputeCapabilityMajor, device);
}

double issue_per_byte(int32_t device) {
  static std::atomic<double> cache[kKeptDevices];  // negative: queried, unknown
  const double ratio = once_per_device(cache, device, [&] {
    int sms = 0, clock_khz = 0, memory_khz = 0, bus_bits = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) == cudaSuccess &&
        cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device) == cudaSuccess &&
        cudaDeviceGetAttribute(&memory_khz, cudaDevAttrMemoryClockRate, device) == cudaSuccess &&
        cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device) == cudaSuccess) {
      const double issue = 128.0 * sms * clock_khz;
      const double bytes = 2.0 * memory_khz * (bus_bits / 8.0);
      if (issue > 0 && bytes > 0) return issue / bytes;
    } else {
      cudaGetLastError();  // an unreported clock is not an error of the caller
    }
    return -1.0;
  });
  return ratio > 0 ? ratio : 0;
}

}  // namespace cuda
}  // namespace kf

#endif  // KF_WITH_CUDA
