// Copies between tensors (possibly strided) and packed row-major host memory. The CPU backend
// walks the strides directly; CUDA contexts go through core/runtime/cuda/tensor_copy.cpp.
#include <cinttypes>
#include <cstring>

#include "core/runtime/context.hpp"
#include "core/runtime/cuda/tensor_copy.hpp"
#include "core/runtime/error.hpp"
#include "core/runtime/handle.hpp"
#include "core/runtime/tensor.hpp"
#include "kernel_fusion/runtime.h"

namespace kf {
namespace {

template <class T>
void copy_row(char* strided, int64_t stride, char* packed, int64_t n, bool to_packed) {
  T* s = reinterpret_cast<T*>(strided);
  T* p = reinterpret_cast<T*>(packed);
  if (to_packed) {
    for (int64_t i = 0; i < n; ++i) std::memcpy(p + i, s + i * stride, sizeof(T));
  } else {
    for (int64_t i = 0; i < n; ++i) std::memcpy(s + i * stride, p + i, sizeof(T));
  }
}

// Checks the byte count against the tensor and returns it.
size_t expected_bytes(const kf_tensor_t* t, size_t bytes, const char* name) {
  int64_t n = element_count(t->desc);
  size_t want = 0;
  KF_REQUIRE(!__builtin_mul_overflow(static_cast<size_t>(n), dtype_size(t->desc.dtype), &want),
             KF_ERROR_INTERNAL, "tensor '%s' has %" PRId64 " elements, past a byte size", name, n);
  KF_REQUIRE_ARG(bytes == want,
                 "tensor '%s' has %" PRId64 " elements (%zu bytes) but %zu bytes were given", name,
                 n, want, bytes);
  return want;
}

}  // namespace

void strided_copy_host(const kf_tensor_desc_t& desc, void* strided, void* packed,
                       bool to_packed) noexcept {
  int64_t n = element_count(desc);
  if (n == 0) return;
  size_t elem = dtype_size(desc.dtype);
  if (is_contiguous(desc)) {
    if (to_packed) {
      std::memcpy(packed, strided, static_cast<size_t>(n) * elem);
    } else {
      std::memcpy(strided, packed, static_cast<size_t>(n) * elem);
    }
    return;
  }
  // Rows along the last dimension; an odometer over the others.
  int32_t nd = desc.ndim;
  int64_t row = desc.shape[nd - 1];
  int64_t row_stride = desc.strides[nd - 1];
  int64_t index[KF_MAX_DIMS] = {};
  char* packed_pos = static_cast<char*>(packed);
  for (int64_t done = 0; done < n; done += row) {
    int64_t offset = 0;
    for (int32_t i = 0; i < nd - 1; ++i) offset += index[i] * desc.strides[i];
    char* s = static_cast<char*>(strided) + offset * static_cast<int64_t>(elem);
    if (row_stride == 1) {
      if (to_packed) {
        std::memcpy(packed_pos, s, static_cast<size_t>(row) * elem);
      } else {
        std::memcpy(s, packed_pos, static_cast<size_t>(row) * elem);
      }
    } else {
      switch (elem) {
        case 1: copy_row<uint8_t>(s, row_stride, packed_pos, row, to_packed); break;
        case 2: copy_row<uint16_t>(s, row_stride, packed_pos, row, to_packed); break;
        case 4: copy_row<uint32_t>(s, row_stride, packed_pos, row, to_packed); break;
        default: copy_row<uint64_t>(s, row_stride, packed_pos, row, to_packed); break;
      }
    }
    packed_pos += static_cast<size_t>(row) * elem;
    for (int32_t i = nd - 2; i >= 0; --i) {
      if (++index[i] < desc.shape[i]) break;
      index[i] = 0;
    }
  }
}

}  // namespace kf

extern "C" {

kf_result_t kf_tensor_copy_from_host(kf_tensor_t* dst, const void* src, size_t bytes,
                                     kf_stream_t* s) {
  return kf::api_call([&] {
    kf::checked_output(dst, nullptr, "dst");
    kf_stream_t* stream = kf::resolve_stream(dst->ctx, s, "s");
    kf::expected_bytes(dst, bytes, "dst");
    KF_REQUIRE_ARG(src != nullptr || bytes == 0, "src is NULL but %zu bytes were given", bytes);
    if (bytes == 0) return;
    if (dst->ctx->is_cuda()) {
      kf::activate(dst->ctx);
      kf::cuda::copy_from_host(dst, src, bytes, stream);
    } else {
      kf::strided_copy_host(dst->desc, dst->data, const_cast<void*>(src), false);
    }
  });
}

kf_result_t kf_tensor_copy_to_host(const kf_tensor_t* src, void* dst, size_t bytes,
                                   kf_stream_t* s) {
  return kf::api_call([&] {
    kf::checked(src, "src");
    kf_stream_t* stream = kf::resolve_stream(src->ctx, s, "s");
    kf::expected_bytes(src, bytes, "src");
    KF_REQUIRE_ARG(dst != nullptr || bytes == 0, "dst is NULL but %zu bytes were given", bytes);
    if (bytes == 0) return;
    if (src->ctx->is_cuda()) {
      kf::activate(src->ctx);
      kf::cuda::copy_to_host(src, dst, bytes, stream);
    } else {
      kf::strided_copy_host(src->desc, src->data, dst, true);
    }
  });
}

}  // extern "C"
