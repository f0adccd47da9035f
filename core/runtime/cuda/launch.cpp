#if KF_WITH_CUDA

#include "core/runtime/cuda/launch.hpp"

#include <cuda.h>

#include <cstdint>
#include <unordered_map>

#include "core/runtime/cuda/cuda_check.hpp"
#include "core/runtime/cuda/device_caps.hpp"

namespace kf {
namespace cuda {
namespace {

using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, unsigned, CUstream, void**, void**);
using ErrorNameFn = CUresult (*)(CUresult, const char**);
using KernelFunctionFn = CUresult (*)(CUfunction*, CUkernel);
using LaunchExFn = CUresult (*)(const CUlaunchConfig*, CUfunction, void**, void**);

struct DriverEntryPoints {
  LaunchFn launch = nullptr;
  LaunchExFn launch_ex = nullptr;  // cuLaunchKernelEx (CUDA 12.0): dependent launches
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
    if (cudaGetDriverEntryPointByVersion("cuLaunchKernelEx", reinterpret_cast<void**>(&e.launch_ex),
                                         12000, cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      e.launch_ex = nullptr;  // dependent launches then run as ordinary ones
    return e;
  }();
  return entry;
}

// A kernel's handle on one device, and whether it may be launched as a dependent launch there:
// the device is sm_90 or later and the code it runs was compiled from PTX 9.0 or later, so that
// its wait_prior_grid() is the griddepcontrol.wait instruction and not the older targets' no-op.
struct KernelEntry {
  cudaFunction_t function = nullptr;
  bool dependent = false;
};

KernelEntry entry_of(const void* kernel, int device) {
  KernelEntry e;
  check(cudaGetFuncBySymbol(&e.function, kernel), "looking up a kernel (cudaGetFuncBySymbol)");
  cudaFuncAttributes attributes{};
  if (cudaFuncGetAttributes(&attributes, kernel) == cudaSuccess)
    e.dependent = attributes.ptxVersion >= 90 && compute_major(device) >= 9;
  else
    cudaGetLastError();  // unknown: launch the ordinary way
  return e;
}

// The KernelEntry of a kernel on `device` (the current one), cached per thread: no lock on the
// hot path. A small direct-mapped table answers repeated launches of the same kernels; the map
// behind it holds every kernel this thread has launched.
KernelEntry function_of(const void* kernel, int device) {
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
    KernelEntry entry;
  };
  constexpr size_t kRecent = 32;  // a power of two
  thread_local Recent recent[kRecent];
  thread_local std::unordered_map<Key, KernelEntry, KeyHash> cache;
  const Key key{kernel, device};
  // Kernel entry points are at least 16 bytes apart; mixing in higher bits spreads templates
  // that the linker placed at regular strides.
  const uintptr_t bits = reinterpret_cast<uintptr_t>(kernel);
  Recent& slot =
      recent[((bits >> 4) ^ (bits >> 11) ^ static_cast<uintptr_t>(device)) & (kRecent - 1)];
  if (slot.key == key) return slot.entry;
  auto it = cache.find(key);
  KernelEntry e;
  if (it != cache.end()) {
    e = it->second;
  } else {
    e = entry_of(kernel, device);
    cache.emplace(key, e);
  }
  slot.key = key;
  slot.entry = e;
  return e;
}

[[noreturn]] void launch_failed(CUresult r, const char* function_name, const char* what) {
  const DriverEntryPoints& d = driver();
  const char* name = nullptr;
  if (d.error_name == nullptr || d.error_name(r, &name) != CUDA_SUCCESS) name = nullptr;
  fail(KF_ERROR_CUDA, "%s: %s failed with %s (%d)", what, function_name,
       name != nullptr ? name : "an unknown driver error", static_cast<int>(r));
}

void launch_function(CUfunction function, dim3 grid, dim3 block, size_t shared_bytes,
                     cudaStream_t stream, void** params, const char* what) {
  const DriverEntryPoints& d = driver();
  const CUresult r = d.launch(function, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                              static_cast<unsigned>(shared_bytes),
                              reinterpret_cast<CUstream>(stream), params, nullptr);
  if (r != CUDA_SUCCESS) launch_failed(r, "cuLaunchKernel", what);
}

// cuLaunchKernelEx with programmatic stream serialization: the kernel may begin before the
// previous kernel in the stream completes (it waits in griddepcontrol.wait).
void launch_dependent_function(CUfunction function, dim3 grid, dim3 block, size_t shared_bytes,
                               cudaStream_t stream, void** params, const char* what) {
  CUlaunchAttribute attribute{};
  attribute.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  attribute.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig config{};
  config.gridDimX = grid.x;
  config.gridDimY = grid.y;
  config.gridDimZ = grid.z;
  config.blockDimX = block.x;
  config.blockDimY = block.y;
  config.blockDimZ = block.z;
  config.sharedMemBytes = static_cast<unsigned>(shared_bytes);
  config.hStream = reinterpret_cast<CUstream>(stream);
  config.attrs = &attribute;
  config.numAttrs = 1;
  const CUresult r = driver().launch_ex(&config, function, params, nullptr);
  if (r != CUDA_SUCCESS) launch_failed(r, "cuLaunchKernelEx", what);
}

}  // namespace

void launch_kernel(const void* kernel, int device, dim3 grid, dim3 block, size_t shared_bytes,
                   cudaStream_t stream, void** params, const char* what, bool dependent) {
  const KernelEntry e = function_of(kernel, device);
  const auto function = reinterpret_cast<CUfunction>(e.function);
  if (dependent && e.dependent && driver().launch_ex != nullptr)
    launch_dependent_function(function, grid, block, shared_bytes, stream, params, what);
  else
    launch_function(function, grid, block, shared_bytes, stream, params, what);
}

bool dependent_launch_supported(const void* kernel, int device) {
  return function_of(kernel, device).dependent;
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
                           cudaStream_t stream, void** params, const char* what, bool dependent) {
  const auto function = reinterpret_cast<CUfunction>(kernel);
  if (dependent && driver().launch_ex != nullptr)
    launch_dependent_function(function, grid, block, shared_bytes, stream, params, what);
  else
    launch_function(function, grid, block, shared_bytes, stream, params, what);
}

}  // namespace cuda
}  // namespace kf

#endif  // KF_WITH_CUDA
