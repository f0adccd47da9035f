// Gather/scatter kernels between strided device tensors and packed buffers; they let copies of
// non-contiguous tensors go through one contiguous host transfer.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/runtime/cuda/cuda_check.hpp"
#include "core/runtime/cuda/strided_copy.hpp"
#include "core/runtime/tensor.hpp"

namespace kf {
namespace cuda {
namespace {

struct StridedLayout {
  int32_t ndim;
  int64_t shape[KF_MAX_DIMS];
  int64_t strides[KF_MAX_DIMS];
};

template <class T>
__global__ void strided_copy_kernel(StridedLayout layout, T* strided, T* packed, int64_t count,
                                    bool to_packed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t rest = i;
    int64_t offset = 0;
    for (int32_t d = layout.ndim - 1; d >= 0; --d) {
      offset += (rest % layout.shape[d]) * layout.strides[d];
      rest /= layout.shape[d];
    }
    if (to_packed) {
      packed[i] = strided[offset];
    } else {
      strided[offset] = packed[i];
    }
  }
}

template <class T>
void launch(const StridedLayout& layout, void* strided, void* packed, int64_t count, bool to_packed,
            cudaStream_t stream) {
  constexpr int kThreads = 256;
  int64_t blocks = (count + kThreads - 1) / kThreads;
  if (blocks > 65536) blocks = 65536;  // grid-stride loop covers the rest
  strided_copy_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      layout, static_cast<T*>(strided), static_cast<T*>(packed), count, to_packed);
  check(cudaGetLastError(), "launching the strided copy kernel");
}

}  // namespace

void launch_strided_copy(const kf_tensor_desc_t& desc, void* strided, void* packed, bool to_packed,
                         void* stream) {
  int64_t count = element_count(desc);
  if (count == 0) return;
  StridedLayout layout{};
  layout.ndim = desc.ndim;
  for (int32_t d = 0; d < desc.ndim; ++d) {
    layout.shape[d] = desc.shape[d];
    layout.strides[d] = desc.strides[d];
  }
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (dtype_size(desc.dtype)) {
    case 1: launch<uint8_t>(layout, strided, packed, count, to_packed, s); break;
    case 2: launch<uint16_t>(layout, strided, packed, count, to_packed, s); break;
    case 4: launch<uint32_t>(layout, strided, packed, count, to_packed, s); break;
    case 8: launch<uint64_t>(layout, strided, packed, count, to_packed, s); break;
    default: fail(KF_ERROR_INTERNAL, "strided copy of %zu-byte elements", dtype_size(desc.dtype));
  }
}

}  // namespace cuda
}  // namespace kf
