// CUDA backend of the norm family: the entry, which hands the plan to the launches of its
// storage type (cuda.cuh, instantiated once per type in cuda_f32.cu .. cuda_f64.cu).
#include <cuda_runtime.h>

#include "core/ops/norm/cuda_storage.hpp"
#include "core/ops/norm/norm.hpp"
#include "core/ops/rows/dispatch.cuh"

namespace kf::norm {

void run_cuda(const Plan& plan, int32_t device_id, void* native_stream) {
  cudaStream_t stream = static_cast<cudaStream_t>(native_stream);
  rows::with_float_storage(plan.dtype,
                           [&](auto storage) { run_cuda_as(storage, plan, device_id, stream); });
}

}  // namespace kf::norm
