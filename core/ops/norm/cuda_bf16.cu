// The norm family's CUDA launches for bf16 storage (cuda.cuh), in a translation unit of their own.
#include "core/ops/norm/cuda.cuh"
#include "core/ops/norm/cuda_storage.hpp"

namespace kf::norm {

void run_cuda_as(math::bfloat16_t, const Plan& plan, int32_t device_id, cudaStream_t stream) {
  launch<math::bfloat16_t>(plan, device_id, stream);
}

}  // namespace kf::norm
