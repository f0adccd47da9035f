// Host <-> device copies of CUDA tensors, contiguous or strided. Both block the host until the
// copy has finished. Without KF_WITH_CUDA they throw KF_ERROR_NOT_SUPPORTED.
#pragma once

#include <cstddef>

#include "kernel_fusion/types.h"

namespace kf {
namespace cuda {

void copy_from_host(kf_tensor_t* dst, const void* src, size_t bytes, kf_stream_t* s);
void copy_to_host(const kf_tensor_t* src, void* dst, size_t bytes, kf_stream_t* s);

}  // namespace cuda
}  // namespace kf
