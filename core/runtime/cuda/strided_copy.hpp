// Gather/scatter between a strided device tensor and a packed device buffer (strided_copy.cu).
#pragma once

#include "kernel_fusion/types.h"

namespace kf {
namespace cuda {

// Enqueues on stream (a cudaStream_t) a copy of every element of desc between `strided` (laid
// out by desc's strides) and `packed` (row-major). Element sizes 1, 2, 4 and 8 bytes.
void launch_strided_copy(const kf_tensor_desc_t& desc, void* strided, void* packed, bool to_packed,
                         void* stream);

}  // namespace cuda
}  // namespace kf
