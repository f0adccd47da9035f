// Registry of live handles. A handle is valid only while it is registered under its kind, so a
// destroyed or foreign pointer is rejected without ever being dereferenced.
#pragma once

#include <initializer_list>
#include <type_traits>

#include "core/runtime/error.hpp"
#include "kernel_fusion/graph.h"
#include "kernel_fusion/types.h"

namespace kf {

enum class HandleKind : unsigned char { context, stream, event, tensor, graph, fused_kernel };

const char* handle_kind_name(HandleKind kind) noexcept;

void register_handle(const void* handle, HandleKind kind);
void unregister_handle(const void* handle) noexcept;
bool is_live_handle(const void* handle, HandleKind kind) noexcept;

// Frees the memory of a destroyed handle's object, made by plain new, once kRetiredHandles more
// handles have been destroyed, not at once. malloc hands a freed block straight to the next
// allocation of its size, so a new handle took a destroyed one's address, and the stale handle (a
// second destroy, a call after destroy) passed for the new one: kf_tensor_destroy called twice
// destroyed the tensor created in between. A handle stays dead for the next kRetiredHandles
// destroys at least (the C API cannot tell a handle from a new one at its address after that).
inline constexpr int kRetiredHandles = 1024;
void retire_handle_memory(void* memory) noexcept;

// Runs *object's destructor now and frees its memory later (retire_handle_memory): how every
// object behind a handle is deleted.
template <class T>
void destroy_handle_object(T* object) noexcept {
  static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__, "made by plain operator new");
  if (object == nullptr) return;
  object->~T();
  retire_handle_memory(object);
}

template <class T>
struct HandleTraits;
template <>
struct HandleTraits<kf_context_t> {
  static constexpr HandleKind kind = HandleKind::context;
};
template <>
struct HandleTraits<kf_stream_t> {
  static constexpr HandleKind kind = HandleKind::stream;
};
template <>
struct HandleTraits<kf_event_t> {
  static constexpr HandleKind kind = HandleKind::event;
};
template <>
struct HandleTraits<kf_tensor_t> {
  static constexpr HandleKind kind = HandleKind::tensor;
};
template <>
struct HandleTraits<kf_graph_t> {
  static constexpr HandleKind kind = HandleKind::graph;
};
template <>
struct HandleTraits<kf_fused_kernel_t> {
  static constexpr HandleKind kind = HandleKind::fused_kernel;
};

// Throws KF_ERROR_INVALID_HANDLE naming the parameter unless h is a live handle of T's kind.
void check_handle(const void* handle, HandleKind kind, const char* param_name);

// One handle parameter of a call, for check_handles.
struct HandleCheck {
  const void* handle;
  HandleKind kind;
  const char* param_name;
};

// check_handle on each in turn (the same errors, the first failure thrown), with the thread's
// cache of recently checked handles looked up once for all of them: the path of the calls whose
// host cost is measured.
void check_handles(std::initializer_list<HandleCheck> checks);

template <class T>
T* checked(T* handle, const char* param_name) {
  check_handle(handle, HandleTraits<typename std::remove_const<T>::type>::kind, param_name);
  return handle;
}

}  // namespace kf
