// The CUDA side of the measurement: the device-to-device copy ceiling and version strings.
// Built only with the CUDA backend; it talks to the CUDA runtime directly so the ceiling does
// not depend on any kernel of the library.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

#include "bench/timing.hpp"

namespace kf_bench {
namespace {

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Failure(std::string(what) + ": " + cudaGetErrorString(e));
}

std::string version_text(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

// Frees what it holds even when a measurement throws half way.
struct CopyResources {
  std::vector<void*> src, dst;
  cudaStream_t stream = nullptr;
  std::vector<cudaEvent_t> events;
  ~CopyResources() {
    for (cudaEvent_t e : events) cudaEventDestroy(e);
    if (stream != nullptr) cudaStreamDestroy(stream);
    for (void* p : dst) cudaFree(p);
    for (void* p : src) cudaFree(p);
  }
};

}  // namespace

CopyCeiling measure_device_copy(int device_id, size_t bytes, int warmup, int runs, int sets) {
  cuda_check(cudaSetDevice(device_id), "cudaSetDevice");
  CopyResources r;
  sets = sets < 1 ? 1 : sets;
  r.src.assign(static_cast<size_t>(sets), nullptr);
  r.dst.assign(static_cast<size_t>(sets), nullptr);
  for (int s = 0; s < sets; ++s) {
    cuda_check(cudaMalloc(&r.src[static_cast<size_t>(s)], bytes), "cudaMalloc");
    cuda_check(cudaMalloc(&r.dst[static_cast<size_t>(s)], bytes), "cudaMalloc");
    cuda_check(cudaMemset(r.src[static_cast<size_t>(s)], 0x5a, bytes), "cudaMemset");
    cuda_check(cudaMemset(r.dst[static_cast<size_t>(s)], 0, bytes), "cudaMemset");
  }
  cuda_check(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking),
             "cudaStreamCreateWithFlags");
  r.events.resize(static_cast<size_t>(runs) + 1, nullptr);
  for (cudaEvent_t& e : r.events) cuda_check(cudaEventCreate(&e), "cudaEventCreate");
  auto copy = [&](int i) {
    const size_t s = static_cast<size_t>(i % sets);
    cuda_check(cudaMemcpyAsync(r.dst[s], r.src[s], bytes, cudaMemcpyDeviceToDevice, r.stream),
               "cudaMemcpyAsync");
  };

  for (int i = 0; i < std::max(warmup, sets); ++i) copy(i);
  cuda_check(cudaEventRecord(r.events[0], r.stream), "cudaEventRecord");
  for (int i = 0; i < runs; ++i) {
    copy(i);
    cuda_check(cudaEventRecord(r.events[static_cast<size_t>(i) + 1], r.stream), "cudaEventRecord");
  }
  cuda_check(cudaStreamSynchronize(r.stream), "cudaStreamSynchronize");
  std::vector<double> us;
  for (int i = 0; i < runs; ++i) {
    float ms = 0;
    cuda_check(cudaEventElapsedTime(&ms, r.events[static_cast<size_t>(i)],
                                    r.events[static_cast<size_t>(i) + 1]),
               "cudaEventElapsedTime");
    us.push_back(1000.0 * ms);
  }
  CopyCeiling c;
  c.method = "cudaMemcpyAsync device-to-device";
  c.bytes = bytes;
  c.median_us = median(us);
  c.gbps = c.median_us > 0 ? 2.0 * static_cast<double>(bytes) / (c.median_us * 1e3) : 0.0;
  return c;
}

std::string cuda_version_string() {
  int runtime = 0;
  int driver = 0;
  cudaRuntimeGetVersion(&runtime);
  const std::string text = "CUDA runtime " + version_text(runtime);
  if (cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0) return text + ", no driver";
  return text + ", driver supports CUDA " + version_text(driver);
}

}  // namespace kf_bench
