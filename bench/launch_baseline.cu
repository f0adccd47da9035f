// The floor under the host cost of an op call: the host time of launching an empty kernel,
// measured the same way as the library call (time inside a batch of launches, then the stream
// drained so the queue never fills), through each launch path the library could use. The caller
// interleaves these batches with the library's, so that all of them see the same machine.
#include <cuda.h>
#include <cuda_runtime.h>

#include "bench/timing.hpp"

namespace kf_bench {
namespace {

__global__ void empty_kernel(float* out) {
  if (out != nullptr && threadIdx.x == 1024) out[0] = 0.0f;  // never true: keeps the parameter
}

// The same for a dependent launch: it waits for the kernel before it, as such kernels must.
__global__ void empty_dependent_kernel(float* out) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  if (out != nullptr && threadIdx.x == 1024) out[0] = 0.0f;
}

// The driver's launch functions, reached through the runtime (no link to libcuda).
using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, unsigned, CUstream, void**, void**);
using LaunchExFn = CUresult (*)(const CUlaunchConfig*, CUfunction, void**, void**);

template <class Fn>
bool driver_function(const char* name, Fn* fn) {
  cudaDriverEntryPointQueryResult found;
  return cudaGetDriverEntryPointByVersion(name, reinterpret_cast<void**>(fn), 12000,
                                          cudaEnableDefault, &found) == cudaSuccess &&
         found == cudaDriverEntryPointSuccess && *fn != nullptr;
}

}  // namespace

double empty_launch_batch_us(void* native_stream, int64_t launches, LaunchPath path) {
  auto stream = static_cast<cudaStream_t>(native_stream);
  static LaunchFn launch = nullptr;
  static LaunchExFn launch_ex = nullptr;
  static cudaFunction_t function = nullptr, dependent_function = nullptr;
  if (path == LaunchPath::driver && launch == nullptr) {
    if (!driver_function("cuLaunchKernel", &launch) ||
        cudaGetFuncBySymbol(&function, reinterpret_cast<const void*>(&empty_kernel)) !=
            cudaSuccess) {
      launch = nullptr;
      return -1.0;
    }
  }
  if (path == LaunchPath::driver_dependent && launch_ex == nullptr) {
    int device = 0, major = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        major < 9 || !driver_function("cuLaunchKernelEx", &launch_ex) ||
        cudaGetFuncBySymbol(&dependent_function, reinterpret_cast<const void*>(
                                                     &empty_dependent_kernel)) != cudaSuccess) {
      cudaGetLastError();
      launch_ex = nullptr;
      return -1.0;
    }
  }
  float* no_output = nullptr;
  void* params[] = {&no_output};
  const double start = now_us();
  switch (path) {
    case LaunchPath::runtime:
      for (int64_t i = 0; i < launches; ++i) empty_kernel<<<1, 256, 0, stream>>>(no_output);
      break;
    case LaunchPath::driver:
      for (int64_t i = 0; i < launches; ++i)
        launch(reinterpret_cast<CUfunction>(function), 1, 1, 1, 256, 1, 1, 0,
               reinterpret_cast<CUstream>(stream), params, nullptr);
      break;
    case LaunchPath::driver_dependent:
      for (int64_t i = 0; i < launches; ++i) {
        CUlaunchAttribute attribute{};
        attribute.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attribute.value.programmaticStreamSerializationAllowed = 1;
        CUlaunchConfig config{};
        config.gridDimX = config.gridDimY = config.gridDimZ = 1;
        config.blockDimX = 256;
        config.blockDimY = config.blockDimZ = 1;
        config.hStream = reinterpret_cast<CUstream>(stream);
        config.attrs = &attribute;
        config.numAttrs = 1;
        launch_ex(&config, reinterpret_cast<CUfunction>(dependent_function), params, nullptr);
      }
      break;
  }
  const double per_launch = (now_us() - start) / static_cast<double>(launches);
  if (cudaStreamSynchronize(stream) != cudaSuccess || cudaGetLastError() != cudaSuccess)
    return -1.0;
  return per_launch;
}

}  // namespace kf_bench
