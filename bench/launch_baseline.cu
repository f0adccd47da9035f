// The floor under the host cost of an op call: the host time of launching an empty kernel with
// the CUDA runtime, measured the same way as the library call (time inside the launches, the
// stream drained every `sync_every` launches so the queue never fills; the median over batches).
#include <cuda.h>
#include <cuda_runtime.h>

#include <vector>

#include "bench/timing.hpp"

namespace kf_bench {
namespace {

__global__ void empty_kernel(float* out) {
  if (out != nullptr && threadIdx.x == 1024) out[0] = 0.0f;  // never true: keeps the parameter
}

}  // namespace

double empty_launch_host_us(void* native_stream, int64_t calls, int sync_every, bool driver_api) {
  auto stream = static_cast<cudaStream_t>(native_stream);
  // The driver's cuLaunchKernel, reached through the runtime (no link to libcuda).
  using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                unsigned, unsigned, CUstream, void**, void**);
  LaunchFn launch = nullptr;
  cudaFunction_t function = nullptr;
  if (driver_api) {
    cudaDriverEntryPointQueryResult found;
    if (cudaGetDriverEntryPointByVersion("cuLaunchKernel", reinterpret_cast<void**>(&launch), 12000,
                                         cudaEnableDefault, &found) != cudaSuccess ||
        launch == nullptr ||
        cudaGetFuncBySymbol(&function, reinterpret_cast<const void*>(&empty_kernel)) != cudaSuccess)
      return -1.0;
  }
  float* no_output = nullptr;
  void* params[] = {&no_output};
  // Host time per launch inside each batch (the drains excluded), one entry per batch.
  auto run = [&](int64_t n, std::vector<double>* per_launch) {
    for (int64_t done = 0; done < n; done += sync_every) {
      const int64_t batch = n - done < sync_every ? n - done : sync_every;
      const double start = now_us();
      if (driver_api) {
        for (int64_t i = 0; i < batch; ++i)
          launch(reinterpret_cast<CUfunction>(function), 1, 1, 1, 256, 1, 1, 0,
                 reinterpret_cast<CUstream>(stream), params, nullptr);
      } else {
        for (int64_t i = 0; i < batch; ++i) empty_kernel<<<1, 256, 0, stream>>>(no_output);
      }
      per_launch->push_back((now_us() - start) / static_cast<double>(batch));
      if (cudaStreamSynchronize(stream) != cudaSuccess) return false;
    }
    return true;
  };
  std::vector<double> warmup, per_launch;
  if (calls <= 0 || !run(calls < 1000 ? calls : 1000, &warmup) || !run(calls, &per_launch) ||
      cudaGetLastError() != cudaSuccess)
    return -1.0;
  return median(per_launch);
}

}  // namespace kf_bench
