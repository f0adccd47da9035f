#if KF_WITH_CUDA

#include "core/runtime/cuda/launch.hpp"

#include <cuda.h>

#include <cstdint>
#include <unordered_map>

#include "core/runtime/cuda/cuda_check.hpp"

namespace kf {
namespace cuda {
namespace {

using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, unsigned, CUstream, void**, void**);
using ErrorNameFn = CUresult (*)(CUresult, const char**);
using KernelFunctionFn = CUresult (*)(CUfunction*, CUkernel);

struct DriverEntryPoints {
  LaunchFn launch = nullptr;
  ErrorNameFn error_name = nullptr;
  KernelFunctionFn kernel_function = nullptr;  // cuKernelGetFunction (CUDA 12.0)
};

const DriverEntryPoints& driver() {
  static const DriverEntryPoints entry = [] {
    DriverEntryPoints e;
    cudaDriverEntryPointQueryResult found{};
    check(cudaGetDriverEntryPointByVersion("cuLaunchKernel", reinterpret_cast<void**>(&e.launch),
                                           12000, cudaEnableDefault, &found),
          "finding the driver's cuLaunchKernel");
    if (found != cudaDriverEntryPointSuccess || e.launch == nullptr)
      fail(KF_ERROR_CUDA, "the CUDA driver does not provide cuLaunchKernel");
    if (cudaGetDriverEntryPointByVersion("cuGetErrorName", reinterpret_cast<void**>(&e.error_name),
                                         12000, cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      e.error_name = nullptr;  // messages then carry the number only
    if (cudaGetDriverEntryPointByVersion("cuKernelGetFunction",
                                         reinterpret_cast<void**>(&e.kernel_function), 12000,
                                         cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      e.kernel_function = nullptr;  // launches then pass the CUkernel itself
    return e;
  }();
  return entry;
}

// cudaFunction_t of a kernel on `device` (the current one), cached per thread: no lock on the
// hot path. A small direct-mapped table answers repeated launches of the same kernels; the map
// behind it holds every kernel this thread has launched.
cudaFunction_t function_of(const void* kernel, int device) {
  struct Key {
    const void* kernel;
    int device;
    bool operator==(const Key& o) const { return kernel == o.kernel && device == o.device; }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return std::hash<const void*>()(k.kernel) ^ (static_cast<size_t>(k.device) << 1);
    }
  };
  struct Recent {
    Key key{nullptr, -1};
    cudaFunction_t function = nullptr;
  };
  constexpr size_t kRecent = 32;  // a power of two
  thread_local Recent recent[kRecent];
  thread_local std::unordered_map<Key, cudaFunction_t, KeyHash> cache;
  const Key key{kernel, device};
  // Kernel entry points are at least 16 bytes apart; mixing in higher bits spreads templates
  // that the linker placed at regular strides.
  const uintptr_t bits = reinterpret_cast<uintptr_t>(kernel);
  Recent& slot =
      recent[((bits >> 4) ^ (bits >> 11) ^ static_cast<uintptr_t>(device)) & (kRecent - 1)];
  if (slot.key == key) return slot.function;
  auto it = cache.find(key);
  cudaFunction_t f = nullptr;
  if (it != cache.end()) {
    f = it->second;
  } else {
    check(cudaGetFuncBySymbol(&f, kernel), "looking up a kernel (cudaGetFuncBySymbol)");
    cache.emplace(key, f);
  }
  slot.key = key;
  slot.function = f;
  return f;
}

void launch_function(CUfunction function, dim3 grid, dim3 block, size_t shared_bytes,
                     cudaStream_t stream, void** params, const char* what) {
  const DriverEntryPoints& d = driver();
  const CUresult r = d.launch(function, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                              static_cast<unsigned>(shared_bytes),
                              reinterpret_cast<CUstream>(stream), params, nullptr);
  if (r != CUDA_SUCCESS) {
    const char* name = nullptr;
    if (d.error_name == nullptr || d.error_name(r, &name) != CUDA_SUCCESS) name = nullptr;
    fail(KF_ERROR_CUDA, "%s: cuLaunchKernel failed with %s (%d)", what,
         name != nullptr ? name : "an unknown driver error", static_cast<int>(r));
  }
}

}  // namespace

void launch_kernel(const void* kernel, int device, dim3 grid, dim3 block, size_t shared_bytes,
                   cudaStream_t stream, void** params, const char* what) {
  launch_function(reinterpret_cast<CUfunction>(function_of(kernel, device)), grid, block,
                  shared_bytes, stream, params, what);
}

void* library_kernel_function(void* kernel) {
  const DriverEntryPoints& d = driver();
  CUfunction function = nullptr;
  if (d.kernel_function == nullptr ||
      d.kernel_function(&function, reinterpret_cast<CUkernel>(kernel)) != CUDA_SUCCESS ||
      function == nullptr)
    return kernel;
  return reinterpret_cast<void*>(function);
}

void launch_library_kernel(void* kernel, dim3 grid, dim3 block, size_t shared_bytes,
                           cudaStream_t stream, void** params, const char* what) {
  launch_function(reinterpret_cast<CUfunction>(kernel), grid, block, shared_bytes, stream, params,
                  what);
}

}  // namespace cuda
}  // namespace kf

#endif  // KF_WITH_CUDA
