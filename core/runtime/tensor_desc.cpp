// Tensor descriptors: dtypes, validation and normalisation of shapes and strides, and the
// checks every entry point applies to the tensors it is given.
#include <cinttypes>
#include <cstdint>
#include <string>

#include "core/runtime/context.hpp"
#include "core/runtime/cuda/cuda_api.hpp"
#include "core/runtime/error.hpp"
#include "core/runtime/handle.hpp"
#include "core/runtime/tensor.hpp"
#include "kernel_fusion/runtime.h"

namespace kf {

size_t dtype_size(kf_dtype_t dtype) noexcept {
  switch (dtype) {
    case KF_DTYPE_FLOAT32: return 4;
    case KF_DTYPE_FLOAT16: return 2;
    case KF_DTYPE_BFLOAT16: return 2;
    case KF_DTYPE_FLOAT64: return 8;
    case KF_DTYPE_INT8: return 1;
    case KF_DTYPE_UINT8: return 1;
    case KF_DTYPE_INT32: return 4;
    case KF_DTYPE_INT64: return 8;
  }
  return 0;
}

const char* dtype_name(kf_dtype_t dtype) noexcept {
  switch (dtype) {
    case KF_DTYPE_FLOAT32: return "float32";
    case KF_DTYPE_FLOAT16: return "float16";
    case KF_DTYPE_BFLOAT16: return "bfloat16";
    case KF_DTYPE_FLOAT64: return "float64";
    case KF_DTYPE_INT8: return "int8";
    case KF_DTYPE_UINT8: return "uint8";
    case KF_DTYPE_INT32: return "int32";
    case KF_DTYPE_INT64: return "int64";
  }
  return "unknown dtype";
}

bool is_floating(kf_dtype_t dtype) noexcept {
  return dtype == KF_DTYPE_FLOAT32 || dtype == KF_DTYPE_FLOAT16 || dtype == KF_DTYPE_BFLOAT16 ||
         dtype == KF_DTYPE_FLOAT64;
}

int64_t element_count(const kf_tensor_desc_t& desc) noexcept {
  int64_t n = 1;
  for (int32_t i = 0; i < desc.ndim; ++i) n *= desc.shape[i];
  return n;
}

bool is_contiguous(const kf_tensor_desc_t& desc) noexcept {
  if (element_count(desc) == 0) return true;
  int64_t expected = 1;
  for (int32_t i = desc.ndim - 1; i >= 0; --i) {
    if (desc.shape[i] != 1 && desc.strides[i] != expected) return false;
    expected *= desc.shape[i];
  }
  return true;
}

namespace {
std::string list_string(const int64_t* values, int32_t n) {
  std::string s = "[";
  for (int32_t i = 0; i < n; ++i) {
    if (i > 0) s += ",";
    s += std::to_string(values[i]);
  }
  return s + "]";
}
}  // namespace

std::string shape_string(const kf_tensor_desc_t& desc) {
  return list_string(desc.shape, desc.ndim);
}
std::string strides_string(const kf_tensor_desc_t& desc) {
  return list_string(desc.strides, desc.ndim);
}

kf_tensor_desc_t normalize_desc(const kf_tensor_desc_t* desc, const char* name,
                                int64_t* span_elements) {
  KF_REQUIRE_ARG(desc != nullptr, "%s is NULL", name);
  KF_REQUIRE_ARG(desc->ndim >= 0 && desc->ndim <= KF_MAX_DIMS, "%s->ndim is %d; it must be 0 to %d",
                 name, desc->ndim, KF_MAX_DIMS);
  int raw_dtype = raw_enum(desc->dtype);
  KF_REQUIRE_ARG(raw_dtype >= KF_DTYPE_FLOAT32 && raw_dtype <= KF_DTYPE_INT64,
                 "%s->dtype %d is not a kf_dtype_t", name, raw_dtype);
  size_t elem = dtype_size(desc->dtype);
  kf_tensor_desc_t out{};
  out.ndim = desc->ndim;
  out.dtype = desc->dtype;
  bool all_zero = true;
  bool empty = false;
  for (int32_t i = 0; i < desc->ndim; ++i) {
    KF_REQUIRE_ARG(desc->shape[i] >= 0,
                   "%s->shape[%d] is %" PRId64 "; dimensions must be non-negative", name, i,
                   desc->shape[i]);
    KF_REQUIRE_ARG(desc->strides[i] >= 0,
                   "%s->strides[%d] is %" PRId64 "; strides must be non-negative", name, i,
                   desc->strides[i]);
    out.shape[i] = desc->shape[i];
    all_zero = all_zero && desc->strides[i] == 0;
    empty = empty || desc->shape[i] == 0;
  }
  if (all_zero) {
    // Row-major; an empty dimension counts as 1 so that strides stay meaningful.
    int64_t stride = 1;
    for (int32_t i = desc->ndim - 1; i >= 0; --i) {
      out.strides[i] = stride;
      int64_t dim = desc->shape[i] > 0 ? desc->shape[i] : 1;
      KF_REQUIRE_ARG(!__builtin_mul_overflow(stride, dim, &stride),
                     "%s has shape %s whose element count overflows", name,
                     shape_string(out).c_str());
    }
  } else {
    for (int32_t i = 0; i < desc->ndim; ++i) out.strides[i] = desc->strides[i];
  }
  int64_t span = 0;
  if (!empty) {
    int64_t count = 1, last = 0;
    for (int32_t i = 0; i < desc->ndim; ++i) {
      int64_t reach = 0;
      KF_REQUIRE_ARG(!__builtin_mul_overflow(count, out.shape[i], &count),
                     "%s has shape %s whose element count overflows", name,
                     shape_string(out).c_str());
      KF_REQUIRE_ARG(!__builtin_mul_overflow(out.shape[i] - 1, out.strides[i], &reach) &&
                         !__builtin_add_overflow(last, reach, &last),
                     "%s has shape %s and strides %s whose extent overflows", name,
                     shape_string(out).c_str(), strides_string(out).c_str());
    }
    span = last + 1;
    // Both the memory the strides reach and the elements packed (a broadcast view reaches
    // little memory but copies to and from the host packed) must have a byte size.
    int64_t bytes = 0, packed_bytes = 0;
    KF_REQUIRE_ARG(span > 0 && !__builtin_mul_overflow(span, static_cast<int64_t>(elem), &bytes) &&
                       !__builtin_mul_overflow(count, static_cast<int64_t>(elem), &packed_bytes) &&
                       static_cast<uint64_t>(bytes) <= SIZE_MAX &&
                       static_cast<uint64_t>(packed_bytes) <= SIZE_MAX,
                   "%s (shape %s, strides %s, %s) needs a byte size that overflows", name,
                   shape_string(out).c_str(), strides_string(out).c_str(), dtype_name(out.dtype));
  }
  if (span_elements != nullptr) *span_elements = span;
  return out;
}

void require_in_context(const kf_tensor_t* t, const kf_context_t* ctx, const char* name) {
  KF_REQUIRE(ctx == nullptr || t->ctx == ctx, KF_ERROR_DEVICE_MISMATCH,
             "tensor '%s' belongs to another context", name);
}

const kf_tensor_t* checked_tensor(const kf_tensor_t* t, const kf_context_t* ctx, const char* name) {
  checked(t, name);
  require_in_context(t, ctx, name);
  return t;
}

kf_tensor_t* checked_output(kf_tensor_t* t, const kf_context_t* ctx, const char* name) {
  checked_tensor(t, ctx, name);
  require_writable(t, name);
  return t;
}

void require_writable(const kf_tensor_t* t, const char* name) {
  KF_REQUIRE_ARG(!t->read_only, "tensor '%s' is read-only and cannot be written", name);
  for (int32_t i = 0; i < t->desc.ndim; ++i) {
    KF_REQUIRE_ARG(t->desc.strides[i] != 0 || t->desc.shape[i] <= 1,
                   "tensor '%s' has stride 0 on dimension %d (size %" PRId64
                   "): a broadcast view cannot be written",
                   name, i, t->desc.shape[i]);
  }
  KF_REQUIRE_ARG(writes_each_element_once(t->desc),
                 "tensor '%s' has overlapping elements (shape %s, strides %s): an output must not "
                 "write one element twice",
                 name, shape_string(t->desc).c_str(), strides_string(t->desc).c_str());
}

bool writes_each_element_once(const kf_tensor_desc_t& d) noexcept {
  int32_t order[KF_MAX_DIMS];
  int32_t n = 0;
  for (int32_t i = 0; i < d.ndim; ++i) {
    if (d.shape[i] == 0) return true;
    if (d.shape[i] > 1) order[n++] = i;
  }
  for (int32_t i = 1; i < n; ++i)  // insertion sort by stride (n <= 8)
    for (int32_t k = i; k > 0 && d.strides[order[k]] < d.strides[order[k - 1]]; --k)
      std::swap(order[k], order[k - 1]);
  int64_t reach = 0;  // furthest offset of the dims inside
  for (int32_t k = 0; k < n; ++k) {
    const int64_t stride = d.strides[order[k]];
    if (stride <= reach) return false;
    reach += (d.shape[order[k]] - 1) * stride;
  }
  return true;
}

void prepare_for_stream(const kf_tensor_t* t, kf_stream_t* s) {
  if (t->ready_event == nullptr || s == t->home.load(std::memory_order_relaxed) ||
      t->ready_done.load(std::memory_order_acquire))
    return;
  const uint64_t allocated_in = t->storage != nullptr ? t->storage->ready_capture : 0;
  if (allocated_in != 0) {
    // Allocated by a graph being captured: a stream in the same capture waits for the allocation
    // node; anywhere else the memory exists only as the graph's replays make it, which the caller
    // orders (and the event may not be queried).
    if (cuda::capture_id(s->native) == allocated_in)
      cuda::stream_wait_event(s->native, t->ready_event);
    return;
  }
  // Once the allocation has completed no stream needs to wait for it again; until then each use
  // on a foreign stream enqueues a wait. The event was recorded outside every capture, so the
  // query and the host wait below touch no capture: in the relaxed mode they neither fail nor
  // invalidate one in progress (a global-mode capture refuses them otherwise, this one included).
  const cuda::RelaxedCaptureMode relaxed;
  if (cuda::event_query(t->ready_event)) {
    t->ready_done.store(true, std::memory_order_release);
    return;
  }
  if (cuda::capture_id(s->native) != 0) {
    // A capturing stream may not wait for work outside its capture (cudaErrorStreamCapture-
    // Isolation): the host waits for the allocation instead, once.
    cuda::event_synchronize(t->ready_event);
    t->ready_done.store(true, std::memory_order_release);
    return;
  }
  cuda::stream_wait_event(s->native, t->ready_event);
}

void byte_range(const kf_tensor_t* t, uintptr_t* first, uintptr_t* end) noexcept {
  *first = reinterpret_cast<uintptr_t>(t->data);
  *end = *first;
  if (element_count(t->desc) == 0) return;
  uint64_t last = 0;
  for (int32_t i = 0; i < t->desc.ndim; ++i)
    last += static_cast<uint64_t>(t->desc.shape[i] - 1) * t->desc.strides[i];
  *end = *first + (last + 1) * dtype_size(t->desc.dtype);
}

bool may_overlap(const kf_tensor_t* x, const kf_tensor_t* y) noexcept {
  uintptr_t x0, x1, y0, y1;
  byte_range(x, &x0, &x1);
  byte_range(y, &y0, &y1);
  return x0 < x1 && y0 < y1 && x0 < y1 && y0 < x1;
}

bool same_view(const kf_tensor_t* x, const kf_tensor_t* y) noexcept {
  if (x->data != y->data || x->desc.ndim != y->desc.ndim || x->desc.dtype != y->desc.dtype)
    return false;
  for (int32_t i = 0; i < x->desc.ndim; ++i) {
    if (x->desc.shape[i] != y->desc.shape[i]) return false;
    if (x->desc.shape[i] > 1 && x->desc.strides[i] != y->desc.strides[i]) return false;
  }
  return true;
}

}  // namespace kf

extern "C" size_t kf_dtype_size(kf_dtype_t dtype) {
  int raw = kf::raw_enum(dtype);
  return raw >= KF_DTYPE_FLOAT32 && raw <= KF_DTYPE_INT64 ? kf::dtype_size(dtype) : 0;
}
