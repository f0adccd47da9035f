// The registry of live handles. Checks look a pointer up without dereferencing it, so destroyed,
// foreign and wrong-kind handles are rejected safely.
#include "core/runtime/handle.hpp"

#include <mutex>
#include <shared_mutex>
#include <unordered_map>

namespace kf {
namespace {

struct Registry {
  std::shared_mutex mutex;
  std::unordered_map<const void*, HandleKind> live;
};

// Leaked on purpose: handles may be destroyed from static destructors after this unit's own.
Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

}  // namespace

const char* handle_kind_name(HandleKind kind) noexcept {
  switch (kind) {
    case HandleKind::context: return "context";
    case HandleKind::stream: return "stream";
    case HandleKind::event: return "event";
    case HandleKind::tensor: return "tensor";
  }
  return "handle";
}

void register_handle(const void* handle, HandleKind kind) {
  Registry& r = registry();
  std::unique_lock<std::shared_mutex> lock(r.mutex);
  r.live[handle] = kind;
}

void unregister_handle(const void* handle) noexcept {
  Registry& r = registry();
  std::unique_lock<std::shared_mutex> lock(r.mutex);
  r.live.erase(handle);
}

bool is_live_handle(const void* handle, HandleKind kind) noexcept {
  if (handle == nullptr) return false;
  Registry& r = registry();
  std::shared_lock<std::shared_mutex> lock(r.mutex);
  auto it = r.live.find(handle);
  return it != r.live.end() && it->second == kind;
}

void check_handle(const void* handle, HandleKind kind, const char* param_name) {
  if (handle == nullptr)
    fail(KF_ERROR_INVALID_HANDLE, "%s is NULL; expected a %s", param_name, handle_kind_name(kind));
  Registry& r = registry();
  std::shared_lock<std::shared_mutex> lock(r.mutex);
  auto it = r.live.find(handle);
  if (it == r.live.end()) {
    lock.unlock();
    fail(KF_ERROR_INVALID_HANDLE,
         "%s (%p) is not a live %s: it was destroyed or never created by this library", param_name,
         handle, handle_kind_name(kind));
  }
  if (it->second != kind) {
    HandleKind actual = it->second;
    lock.unlock();
    fail(KF_ERROR_INVALID_HANDLE, "%s (%p) is a %s, not a %s", param_name, handle,
         handle_kind_name(actual), handle_kind_name(kind));
  }
}

}  // namespace kf
