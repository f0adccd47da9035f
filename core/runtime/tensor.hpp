// Tensors: a descriptor (strides always explicit), a pointer to the first element and a shared
// storage block that owns the memory (pool block or borrowed memory with its deleter).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/runtime/context.hpp"
#include "kernel_fusion/types.h"

namespace kf {

// A block of memory shared by a tensor and its views (and DLPack exports). Its release function
// runs exactly once, when the last owner lets go. It keeps the pool alive, never the context.
struct Storage {
  void* base = nullptr;
  size_t bytes = 0;
  kf_device_type_t device_type = KF_DEVICE_CPU;
  int32_t device_id = 0;
  std::function<void()> release;
  // cudaEvent_t recorded after the allocation on the home stream; owned (destroyed by release).
  void* ready_event = nullptr;
  // The capture sequence (cuda::capture_id) the home stream was in when ready_event was recorded:
  // 0 for an eager allocation. An allocation made in a capture belongs to the graph, and CUDA
  // refuses queries of an event recorded in a capture (cudaErrorCapturedEvent).
  uint64_t ready_capture = 0;
  // cudaStream_t the release is ordered on. Set by the last tensor that lets go, after ordering
  // that stream behind every stream of the context; kUnorderedRelease when the last owner is not
  // a tensor (e.g. a DLPack export), in which case the release waits for the device instead.
  void* release_stream = kUnorderedRelease;
  // The capturing cudaStream_t whose graph holds the block until it is done with it, where the
  // last tensor let go during a capture the block was not allocated in (ReleaseOrder::capturing);
  // nullptr otherwise.
  void* release_capturing = nullptr;
  // Tensors sharing this storage (a tensor and its views): the one that takes the count to zero
  // orders the release, also when two are destroyed at once by two threads (both had seen two
  // owners in the shared_ptr's count, and neither ordered it).
  std::atomic<int64_t> tensors{0};
  // Set for good by the first DLPack export: its consumer's work is not ordered on any stream of
  // the context, so such a storage is released ordered only when no export holds it any more.
  std::atomic<bool> exported{false};
  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() {
    if (release) release();
  }
};

}  // namespace kf

struct kf_tensor_t {
  kf_context_t* ctx = nullptr;
  kf_tensor_desc_t desc{};  // strides explicit, in elements
  void* data = nullptr;     // first element
  std::shared_ptr<kf::Storage> storage;
  bool read_only = false;
  // cudaEvent_t recorded after allocation on the home stream, or nullptr.
  void* ready_event = nullptr;
  // Set once ready_event is known to have completed: later uses on other streams skip the wait.
  mutable std::atomic<bool> ready_done{false};
  // The stream the allocation is ordered on. Atomic: kf_stream_destroy moves the tensors of the
  // stream it destroys to the default stream (under the context's mutex) while other threads may
  // be reading it for their calls with the tensor.
  std::atomic<kf_stream_t*> home{nullptr};
};

namespace kf {

size_t dtype_size(kf_dtype_t dtype) noexcept;  // 0 for an unknown dtype
const char* dtype_name(kf_dtype_t dtype) noexcept;
bool is_floating(kf_dtype_t dtype) noexcept;

int64_t element_count(const kf_tensor_desc_t& desc) noexcept;
bool is_contiguous(const kf_tensor_desc_t& desc) noexcept;  // strides explicit
// "[3,4]" for messages.
std::string shape_string(const kf_tensor_desc_t& desc);

// "[12,1]" for messages (the explicit strides).
std::string strides_string(const kf_tensor_desc_t& desc);

// Validates ndim, dims, dtype and strides; returns a copy with explicit strides. Throws
// INVALID_ARGUMENT naming param_name. Sets *span_elements to 1 + the furthest element offset
// (0 for an empty tensor); throws if the byte span overflows size_t.
kf_tensor_desc_t normalize_desc(const kf_tensor_desc_t* desc, const char* param_name,
                                int64_t* span_elements);

// Adds a new tensor to its context and the handle registry and returns it; on failure the
// tensor is freed and the exception propagates.
// `home_of` (nullable): a view's base, whose home stream the view takes under the context's mutex,
// so that a concurrent kf_stream_destroy of that stream moves both or neither.
kf_tensor_t* adopt_tensor(std::unique_ptr<kf_tensor_t> t, const kf_tensor_t* home_of = nullptr);
// Frees a tensor object that is no longer registered. When it holds the last reference to its
// storage, the release is ordered on its home stream after all work of every context stream.
void delete_tensor(kf_tensor_t* t) noexcept;

// Copies between a strided tensor layout and packed row-major host memory, both host-addressable.
void strided_copy_host(const kf_tensor_desc_t& desc, void* strided, void* packed,
                       bool to_packed) noexcept;

// Throws INVALID_HANDLE unless t is live, and DEVICE_MISMATCH unless it belongs to ctx (no
// context check when ctx is nullptr).
const kf_tensor_t* checked_tensor(const kf_tensor_t* t, const kf_context_t* ctx,
                                  const char* param_name);
// Same, and INVALID_ARGUMENT for read-only tensors, zero-stride dims larger than one, or any
// other layout that would write one element twice (writes_each_element_once).
kf_tensor_t* checked_output(kf_tensor_t* t, const kf_context_t* ctx, const char* param_name);
// The parts of those two after the handle check, for callers that checked the handles of a call
// together (check_handles): t must be live.
void require_in_context(const kf_tensor_t* t, const kf_context_t* ctx, const char* param_name);
void require_writable(const kf_tensor_t* t, const char* param_name);
// Whether no two index tuples of desc address one element: with dims sorted by stride, each
// stride steps past everything the dims inside it reach (true of every dense or sliced view; a
// few interleaved layouts without a repeated element are refused too).
bool writes_each_element_once(const kf_tensor_desc_t& desc) noexcept;

// Before a tensor is used on stream s: makes s wait for the tensor's allocation when s is not
// its home stream. Cheap no-op on the CPU and on the home stream.
void prepare_for_stream(const kf_tensor_t* t, kf_stream_t* s);

// [first, end) bytes reached by a tensor; empty (first == end) for a tensor without elements.
void byte_range(const kf_tensor_t* t, uintptr_t* first, uintptr_t* end) noexcept;
// True when the byte ranges [first, last] spanned by two tensors intersect.
bool may_overlap(const kf_tensor_t* x, const kf_tensor_t* y) noexcept;
// True when x and y describe exactly the same elements (same data pointer, shape and strides).
bool same_view(const kf_tensor_t* x, const kf_tensor_t* y) noexcept;

}  // namespace kf
