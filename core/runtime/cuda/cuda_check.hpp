// Checking CUDA runtime calls: a failure becomes kf::Error(KF_ERROR_CUDA) with the CUDA error's
// name and text and what the library was doing. Include only where KF_WITH_CUDA is set.
#pragma once

#include <cuda_runtime_api.h>

#include "core/runtime/error.hpp"

namespace kf {
namespace cuda {

[[noreturn]] inline void fail_cuda(cudaError_t err, const char* what) {
  cudaGetLastError();  // clear a non-sticky error so the next call starts clean
  if (err == cudaErrorMemoryAllocation) {
    fail(KF_ERROR_OUT_OF_MEMORY, "%s: the device is out of memory (%s)", what,
         cudaGetErrorString(err));
  }
  fail(KF_ERROR_CUDA, "%s failed: %s (%s)", what, cudaGetErrorString(err), cudaGetErrorName(err));
}

inline void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) fail_cuda(err, what);
}

}  // namespace cuda
}  // namespace kf
