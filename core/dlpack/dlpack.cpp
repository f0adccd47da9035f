// DLPack exchange: zero-copy import of DLManagedTensor[Versioned] as a borrowed kf tensor, and
// export of a kf tensor whose storage the consumer keeps alive until it calls the deleter.
//
// Device rules (the context decides what memory its backend may touch):
//   CPU context:  kDLCPU and kDLCUDAHost (pinned host memory is ordinary host-addressable
//                 memory); the device_id of host memory is not meaningful and is ignored.
//   CUDA context: kDLCUDA and kDLCUDAManaged with the context's device id. Pinned host memory is
//                 refused: kernels would read it over PCIe and copies would take the wrong path.
// Everything else is KF_ERROR_DEVICE_MISMATCH naming both devices.
#include <cinttypes>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>

#include "core/runtime/context.hpp"
#include "core/runtime/error.hpp"
#include "core/runtime/handle.hpp"
#include "core/runtime/tensor.hpp"
#include "kernel_fusion/dlpack.h"
#include "kernel_fusion/runtime.h"

namespace kf {
namespace {

// ---------------------------------------------------------------- devices and dtypes

// The device type as a plain integer. Producers (C code, newer specs) may store values this
// enum does not list, and loading such a value as the C++ enum type is undefined behaviour.
int device_type_of(const DLDevice& device) {
  std::underlying_type<DLDeviceType>::type value;
  static_assert(sizeof value == sizeof device.device_type, "DLDeviceType has an unexpected size");
  std::memcpy(&value, &device.device_type, sizeof value);
  return static_cast<int>(value);
}

std::string dlpack_device_name(const DLDevice& device) {
  switch (device_type_of(device)) {
    case kDLCPU: return "cpu";
    case kDLCUDA: return format("cuda:%d", device.device_id);
    case kDLCUDAHost: return "cuda_host (pinned host memory)";
    case kDLCUDAManaged: return format("cuda_managed:%d", device.device_id);
    case kDLROCM: return format("rocm:%d", device.device_id);
    case kDLROCMHost: return "rocm_host";
    case kDLOpenCL: return format("opencl:%d", device.device_id);
    case kDLVulkan: return format("vulkan:%d", device.device_id);
    case kDLMetal: return format("metal:%d", device.device_id);
    case kDLOneAPI: return format("oneapi:%d", device.device_id);
    default: return format("DLPack device type %d:%d", device_type_of(device), device.device_id);
  }
}

std::string context_device_name(const kf_context_t* ctx) {
  return ctx->is_cuda() ? format("cuda:%d", ctx->device_id) : std::string("cpu");
}

void check_device(const kf_context_t* ctx, const DLDevice& device) {
  const int type = device_type_of(device);
  bool ok = false;
  if (ctx->is_cuda()) {
    ok = (type == kDLCUDA || type == kDLCUDAManaged) && device.device_id == ctx->device_id;
  } else {
    ok = type == kDLCPU || type == kDLCUDAHost;
  }
  if (!ok) {
    fail(KF_ERROR_DEVICE_MISMATCH, "DLPack tensor is on %s but the context is on %s%s",
         dlpack_device_name(device).c_str(), context_device_name(ctx).c_str(),
         ctx->is_cuda() ? " (accepted: cuda or cuda_managed memory of the same device)"
                        : " (accepted: cpu or cuda_host memory)");
  }
}

const char* dlpack_code_name(uint8_t code) {
  switch (code) {
    case kDLInt: return "int";
    case kDLUInt: return "uint";
    case kDLFloat: return "float";
    case kDLOpaqueHandle: return "opaque handle";
    case kDLBfloat: return "bfloat";
    case kDLComplex: return "complex";
    case kDLBool: return "bool";
    default: return "unknown";
  }
}

kf_dtype_t dtype_from_dlpack(DLDataType t) {
  if (t.lanes == 1) {
    switch (t.code) {
      case kDLFloat:
        if (t.bits == 16) return KF_DTYPE_FLOAT16;
        if (t.bits == 32) return KF_DTYPE_FLOAT32;
        if (t.bits == 64) return KF_DTYPE_FLOAT64;
        break;
      case kDLBfloat:
        if (t.bits == 16) return KF_DTYPE_BFLOAT16;
        break;
      case kDLInt:
        if (t.bits == 8) return KF_DTYPE_INT8;
        if (t.bits == 32) return KF_DTYPE_INT32;
        if (t.bits == 64) return KF_DTYPE_INT64;
        break;
      case kDLUInt:
        if (t.bits == 8) return KF_DTYPE_UINT8;
        break;
      default: break;
    }
  }
  fail(KF_ERROR_DTYPE_MISMATCH,
       "DLPack dtype (code %u = %s, bits %u, lanes %u) is not supported; supported are "
       "float16/32/64, "
       "bfloat16, int8/32/64 and uint8 with lanes 1",
       static_cast<unsigned>(t.code), dlpack_code_name(t.code), static_cast<unsigned>(t.bits),
       static_cast<unsigned>(t.lanes));
}

DLDataType dtype_to_dlpack(kf_dtype_t dtype) {
  switch (dtype) {
    case KF_DTYPE_FLOAT32: return {kDLFloat, 32, 1};
    case KF_DTYPE_FLOAT16: return {kDLFloat, 16, 1};
    case KF_DTYPE_BFLOAT16: return {kDLBfloat, 16, 1};
    case KF_DTYPE_FLOAT64: return {kDLFloat, 64, 1};
    case KF_DTYPE_INT8: return {kDLInt, 8, 1};
    case KF_DTYPE_UINT8: return {kDLUInt, 8, 1};
    case KF_DTYPE_INT32: return {kDLInt, 32, 1};
    case KF_DTYPE_INT64: return {kDLInt, 64, 1};
  }
  fail(KF_ERROR_INTERNAL, "tensor has an unknown dtype %d", static_cast<int>(dtype));
}

// ---------------------------------------------------------------- import

// A DLTensor checked and translated: the kf descriptor, the first element and the bytes it spans.
struct ImportedLayout {
  kf_tensor_desc_t desc{};
  void* first = nullptr;
  size_t span_bytes = 0;
};

ImportedLayout translate(const kf_context_t* ctx, const DLTensor& dl) {
  check_device(ctx, dl.device);
  KF_REQUIRE_ARG(dl.ndim >= 0 && dl.ndim <= KF_MAX_DIMS,
                 "DLPack tensor has ndim %d; supported are 0 to %d", dl.ndim, KF_MAX_DIMS);
  KF_REQUIRE_ARG(dl.ndim == 0 || dl.shape != nullptr, "DLPack tensor has ndim %d but a NULL shape",
                 dl.ndim);

  ImportedLayout out;
  out.desc.ndim = dl.ndim;
  out.desc.dtype = dtype_from_dlpack(dl.dtype);
  bool empty = false;
  for (int32_t i = 0; i < dl.ndim; ++i) {
    KF_REQUIRE_ARG(dl.shape[i] >= 0, "DLPack tensor has a negative dimension: shape[%d] = %" PRId64,
                   i, dl.shape[i]);
    if (dl.strides != nullptr && dl.shape[i] > 1) {  // other dims' strides are never used
      KF_REQUIRE_ARG(dl.strides[i] >= 0,
                     "DLPack tensor has a negative stride: strides[%d] = %" PRId64
                     " (negative strides are not supported; make the array contiguous first)",
                     i, dl.strides[i]);
    }
    out.desc.shape[i] = dl.shape[i];
    empty = empty || dl.shape[i] == 0;
  }

  const size_t elem = dtype_size(out.desc.dtype);
  int64_t count = 1;
  for (int32_t i = 0; i < dl.ndim; ++i) {
    KF_REQUIRE_ARG(!__builtin_mul_overflow(count, dl.shape[i], &count),
                   "DLPack tensor's element count overflows");
  }
  int64_t last = count - 1;  // offset of the furthest element, in elements
  if (dl.strides != nullptr && !empty) {
    // The stride of a size-1 dimension is never used, so producers put anything there (PyTorch
    // uses 1 or 0). Use the compact stride instead: kf reads all-zero strides as "contiguous".
    int64_t compact = 1;  // cannot overflow: bounded by count
    bool any_nonzero = false;
    last = 0;
    for (int32_t i = dl.ndim - 1; i >= 0; --i) {
      int64_t stride = dl.shape[i] == 1 ? compact : dl.strides[i];
      out.desc.strides[i] = stride;
      any_nonzero = any_nonzero || stride != 0;
      int64_t reach = 0;
      KF_REQUIRE_ARG(!__builtin_mul_overflow(dl.shape[i] - 1, stride, &reach) &&
                         !__builtin_add_overflow(last, reach, &last),
                     "DLPack tensor's strides reach past the addressable range");
      compact *= dl.shape[i];
    }
    if (!any_nonzero && dl.ndim > 0) {
      fail(KF_ERROR_NOT_SUPPORTED,
           "DLPack tensor is fully broadcast (every stride is zero); kf tensors need at least one "
           "non-zero stride, so materialise the array first");
    }
  }

  size_t span = 0;
  if (!empty) {
    KF_REQUIRE_ARG(!__builtin_mul_overflow(static_cast<size_t>(last) + 1, elem, &span),
                   "DLPack tensor's byte size overflows");
    KF_REQUIRE_ARG(dl.data != nullptr, "DLPack tensor has NULL data but %s elements",
                   dl.ndim == 0 ? "a scalar's" : "a non-empty shape's");
  }
  out.span_bytes = span;

  if (dl.data != nullptr) {
    uintptr_t first = 0;
    KF_REQUIRE_ARG(
        !__builtin_add_overflow(reinterpret_cast<uintptr_t>(dl.data), dl.byte_offset, &first),
        "DLPack tensor's byte_offset %" PRIu64 " overflows the address space", dl.byte_offset);
    KF_REQUIRE_ARG(first % elem == 0,
                   "DLPack tensor's first element (data %p + byte_offset %" PRIu64
                   ") is not aligned to its %zu-byte element size",
                   dl.data, dl.byte_offset, elem);
    out.first = reinterpret_cast<void*>(first);
  }
  return out;
}

template <class Managed>
void release_managed(void* /*data*/, void* managed) {
  auto* m = static_cast<Managed*>(managed);
  m->deleter(m);
}

// Wraps the producer's memory through kf_tensor_wrap_async (home stream s, NULL for the default
// stream), so an imported tensor is created, shared with views and released exactly like any
// other borrowed tensor. On failure nothing is kept and the deleter is not called, so ownership
// stays with the caller.
template <class Managed>
kf_tensor_t* import_managed(kf_context_t* ctx, Managed* managed, bool read_only, kf_stream_t* s) {
  ImportedLayout layout = translate(ctx, managed->dl_tensor);
  kf_deleter_fn deleter = managed->deleter != nullptr ? &release_managed<Managed> : nullptr;
  kf_tensor_t* t = nullptr;
  kf_result_t r = kf_tensor_wrap_async(ctx, &layout.desc, layout.first, layout.span_bytes, deleter,
                                       managed, s, &t);
  if (r != KF_SUCCESS) {
    fail(r, "DLPack import: %s", kf_get_last_error_message());
  }
  t->read_only = read_only;
  return t;
}

// ---------------------------------------------------------------- export

// Everything an exported tensor owns; freed by its deleter. The storage reference keeps the
// memory valid after the source tensor (or its context) is destroyed.
template <class Managed>
struct Export {
  Managed managed{};
  std::shared_ptr<Storage> storage;
  int64_t shape[KF_MAX_DIMS] = {};
  int64_t strides[KF_MAX_DIMS] = {};

  static void deleter(Managed* self) { delete static_cast<Export*>(self->manager_ctx); }
};

template <class Managed>
Managed* export_tensor(const kf_tensor_t* t) {
  auto holder = std::make_unique<Export<Managed>>();
  holder->storage = t->storage;
  if (t->storage != nullptr) t->storage->exported.store(true, std::memory_order_release);
  for (int32_t i = 0; i < t->desc.ndim; ++i) {
    holder->shape[i] = t->desc.shape[i];
    holder->strides[i] = t->desc.strides[i];
  }
  DLTensor& dl = holder->managed.dl_tensor;
  dl.data = t->data;
  dl.byte_offset = 0;
  dl.device = t->ctx->is_cuda() ? DLDevice{kDLCUDA, t->ctx->device_id} : DLDevice{kDLCPU, 0};
  dl.ndim = t->desc.ndim;
  dl.dtype = dtype_to_dlpack(t->desc.dtype);
  dl.shape = holder->shape;
  dl.strides = holder->strides;
  holder->managed.manager_ctx = holder.get();
  holder->managed.deleter = &Export<Managed>::deleter;
  return &holder.release()->managed;
}

}  // namespace
}  // namespace kf

extern "C" {

kf_result_t kf_tensor_from_dlpack(kf_context_t* ctx, DLManagedTensorVersioned* managed,
                                  kf_tensor_t** out) {
  return kf_tensor_from_dlpack_async(ctx, managed, nullptr, out);
}

kf_result_t kf_tensor_from_dlpack_async(kf_context_t* ctx, DLManagedTensorVersioned* managed,
                                        kf_stream_t* s, kf_tensor_t** out) {
  return kf::api_call([&] {
    kf_context_t* c = kf::checked_context(ctx, "ctx");
    KF_REQUIRE_ARG(managed != nullptr, "managed is NULL");
    KF_REQUIRE_ARG(out != nullptr, "out is NULL");
    KF_REQUIRE(managed->version.major == DLPACK_MAJOR_VERSION, KF_ERROR_VERSION_MISMATCH,
               "DLPack tensor has version %u.%u; this library reads DLPack %d.x",
               managed->version.major, managed->version.minor, DLPACK_MAJOR_VERSION);
    bool read_only = (managed->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0;
    *out = kf::import_managed(c, managed, read_only, s);
  });
}

kf_result_t kf_tensor_from_dlpack_legacy(kf_context_t* ctx, DLManagedTensor* managed,
                                         kf_tensor_t** out) {
  return kf_tensor_from_dlpack_legacy_async(ctx, managed, nullptr, out);
}

kf_result_t kf_tensor_from_dlpack_legacy_async(kf_context_t* ctx, DLManagedTensor* managed,
                                               kf_stream_t* s, kf_tensor_t** out) {
  return kf::api_call([&] {
    kf_context_t* c = kf::checked_context(ctx, "ctx");
    KF_REQUIRE_ARG(managed != nullptr, "managed is NULL");
    KF_REQUIRE_ARG(out != nullptr, "out is NULL");
    *out = kf::import_managed(c, managed, false, s);
  });
}

kf_result_t kf_tensor_to_dlpack(const kf_tensor_t* t, DLManagedTensorVersioned** out) {
  return kf::api_call([&] {
    kf::checked(t, "t");
    KF_REQUIRE_ARG(out != nullptr, "out is NULL");
    DLManagedTensorVersioned* m = kf::export_tensor<DLManagedTensorVersioned>(t);
    m->version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
    m->flags = t->read_only ? DLPACK_FLAG_BITMASK_READ_ONLY : 0;
    *out = m;
  });
}

kf_result_t kf_tensor_to_dlpack_legacy(const kf_tensor_t* t, DLManagedTensor** out) {
  return kf::api_call([&] {
    kf::checked(t, "t");
    KF_REQUIRE_ARG(out != nullptr, "out is NULL");
    *out = kf::export_tensor<DLManagedTensor>(t);
  });
}

}  // extern "C"
