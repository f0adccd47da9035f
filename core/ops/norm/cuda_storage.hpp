// The norm family's CUDA entry for each storage type, one translation unit each
// (cuda_f32.cu, cuda_f16.cu, cuda_bf16.cu, cuda_f64.cu), overloaded on a value of the type so
// that rows::with_float_storage picks one. Include only from the family's .cu files.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/math/numeric.hpp"
#include "core/ops/norm/norm.hpp"

namespace kf::norm {

void run_cuda_as(float, const Plan& plan, int32_t device_id, cudaStream_t stream);
void run_cuda_as(math::half_t, const Plan& plan, int32_t device_id, cudaStream_t stream);
void run_cuda_as(math::bfloat16_t, const Plan& plan, int32_t device_id, cudaStream_t stream);
void run_cuda_as(double, const Plan& plan, int32_t device_id, cudaStream_t stream);

// The register-cached launchers of 16-bit rows narrower than 16-byte vectors
// (rows::narrow_cached_launcher), built in cuda_f16_narrow.cu and cuda_bf16_narrow.cu.
using NarrowLauncher = bool (*)(const Plan&, int32_t device_id, cudaStream_t stream);
NarrowLauncher narrow_cached_launcher(math::half_t, int bytes);
NarrowLauncher narrow_cached_launcher(math::bfloat16_t, int bytes);

}  // namespace kf::norm
