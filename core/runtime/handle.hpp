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
