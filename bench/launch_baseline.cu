// The floor under the host cost of an op call: the host time of launching an empty kernel with
// the CUDA runtime, measured the same way as the library call (time inside a batch of launches,
// then the stream drained so the queue never fills). The caller interleaves these batches with
// the library's, so that both see the same machine.
#include <cuda.h>
#include <cuda_runtime.h>

#include "bench/timing.hpp"

namespace kf_bench {
namespace {

__global__ void empty_kernel(float* out) {
  if (out != nullptr && threadIdx.x == 1024) out[0] = 0.0f;  // never true: keeps the parameter
}

}  // namespace

double empty_launch_batch_us(void* native_stream, int64_t launches, bool driver_api) {
  auto stream = static_cast<cudaStream_t>(native_stream);
  // The driver's cuLaunchKernel, reached through the runtime (no link to libcuda).
  using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                unsigned, unsigned, CUstream, void**, void**);
  static LaunchFn launch = nullptr;
  static cudaFunction_t function = nullptr;
  if (driver_api && launch == nullptr) {
    cudaDriverEntryPointQueryResult found;
    if (cudaGetDriverEntryPointByVersion("cuLaunchKernel", reinterpret_cast<void**>(&launch), 12000,
                                         cudaEnableDefault, &found) != cudaSuccess ||
        launch == nullptr ||
        cudaGetFuncBySymbol(&function, reinterpret_cast<const void*>(&empty_kernel)) !=
            cudaSuccess) {
      launch = nullptr;
      return -1.0;
    }
  }
  float* no_output = nullptr;
  void* params[] = {&no_output};
  const double start = now_us();
  if (driver_api) {
    for (int64_t i = 0; i < launches; ++i)
      launch(reinterpret_cast<CUfunction>(function), 1, 1, 1, 256, 1, 1, 0,
             reinterpret_cast<CUstream>(stream), params, nullptr);
  } else {
    for (int64_t i = 0; i < launches; ++i) empty_kernel<<<1, 256, 0, stream>>>(no_output);
  }
  const double per_launch = (now_us() - start) / static_cast<double>(launches);
  if (cudaStreamSynchronize(stream) != cudaSuccess || cudaGetLastError() != cudaSuccess)
    return -1.0;
  return per_launch;
}

}  // namespace kf_bench
