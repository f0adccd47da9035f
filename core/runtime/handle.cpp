// The registry of live handles. Checks look a pointer up without dereferencing it, so destroyed,
// foreign and wrong-kind handles are rejected safely.
#include "core/runtime/handle.hpp"

#include <atomic>
#include <cstdint>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <unordered_map>

namespace kf {
namespace {

constexpr int kHandleKinds = static_cast<int>(HandleKind::fused_kernel) + 1;

struct Registry {
  std::shared_mutex mutex;
  std::unordered_map<const void*, HandleKind> live;
};

// Per kind, bumped (under the registry's lock) whenever a handle of that kind is unregistered.
// While the count of kind K stays the same, a handle once seen live as a K is still live, which
// lets each thread skip the lock for handles it has just checked (an op call checks four or
// five). Counting per kind keeps destroying one kind of handle (a fused kernel compiled and
// destroyed per call) from sending the next checks of every other kind back to the lock. At
// namespace scope (constant-initialised, never destroyed) so that the fast path of a check reads
// it without going through registry()'s guard.
std::atomic<uint64_t> removals_of_kind[kHandleKinds] = {};

// Handles this thread found live, each valid while the registry's removal count of its kind
// equals the count read before the lookup that found it.
struct RecentlyChecked {
  static constexpr int kSlots = 8;
  const void* handle[kSlots] = {};
  HandleKind kind[kSlots] = {};
  uint64_t removals[kSlots] = {};
  int next = 0;

  bool contains(const void* h, HandleKind k, uint64_t now) const {
    for (int i = 0; i < kSlots; ++i)
      if (handle[i] == h && kind[i] == k) return removals[i] == now;
    return false;
  }
  void remember(const void* h, HandleKind k, uint64_t now) {
    for (int i = 0; i < kSlots; ++i) {
      if (handle[i] == h && kind[i] == k) {  // a stale entry of the same handle: refresh it
        removals[i] = now;
        return;
      }
    }
    handle[next] = h;
    kind[next] = k;
    removals[next] = now;
    next = (next + 1) % kSlots;
  }
};

thread_local RecentlyChecked recently_checked;

// Leaked on purpose: handles may be destroyed from static destructors after this unit's own.
Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

// The memory of the last kRetiredHandles destroyed handles' objects, oldest at `next`. Leaked,
// as the registry.
struct Retired {
  std::mutex mutex;
  void* memory[kRetiredHandles] = {};
  int next = 0;
};

Retired* retired() noexcept {
  static Retired* r = new (std::nothrow) Retired();
  return r;
}

}  // namespace

void retire_handle_memory(void* memory) noexcept {
  Retired* r = retired();
  void* oldest = memory;  // without the ring (out of memory at its creation): freed at once
  if (r != nullptr) {
    std::lock_guard<std::mutex> lock(r->mutex);
    oldest = r->memory[r->next];
    r->memory[r->next] = memory;
    r->next = (r->next + 1) % kRetiredHandles;
  }
  ::operator delete(oldest);
}

const char* handle_kind_name(HandleKind kind) noexcept {
  switch (kind) {
    case HandleKind::context: return "context";
    case HandleKind::stream: return "stream";
    case HandleKind::event: return "event";
    case HandleKind::tensor: return "tensor";
    case HandleKind::graph: return "graph";
    case HandleKind::fused_kernel: return "fused kernel";
  }
  return "handle";
}

// "a" or "an", for a message's "is an event".
static const char* article(HandleKind kind) noexcept {
  return kind == HandleKind::event ? "an" : "a";
}

void register_handle(const void* handle, HandleKind kind) {
  Registry& r = registry();
  std::unique_lock<std::shared_mutex> lock(r.mutex);
  r.live[handle] = kind;
}

void unregister_handle(const void* handle) noexcept {
  Registry& r = registry();
  std::unique_lock<std::shared_mutex> lock(r.mutex);
  auto it = r.live.find(handle);
  if (it == r.live.end()) return;
  const int kind = static_cast<int>(it->second);
  r.live.erase(it);
  removals_of_kind[kind].fetch_add(1, std::memory_order_release);
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
    fail(KF_ERROR_INVALID_HANDLE, "%s is NULL; expected %s %s", param_name, article(kind),
         handle_kind_name(kind));
  const uint64_t removals =
      removals_of_kind[static_cast<int>(kind)].load(std::memory_order_acquire);
  if (recently_checked.contains(handle, kind, removals)) return;
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
    fail(KF_ERROR_INVALID_HANDLE, "%s (%p) is %s %s, not %s %s", param_name, handle,
         article(actual), handle_kind_name(actual), article(kind), handle_kind_name(kind));
  }
  // The count read before the lookup: a removal since then makes this entry stale at once.
  recently_checked.remember(handle, kind, removals);
}

void check_handles(std::initializer_list<HandleCheck> checks) {
  const RecentlyChecked& recent = recently_checked;
  for (const HandleCheck& c : checks) {
    if (c.handle != nullptr &&
        recent.contains(c.handle, c.kind,
                        removals_of_kind[static_cast<int>(c.kind)].load(std::memory_order_acquire)))
      continue;
    check_handle(c.handle, c.kind, c.param_name);  // the lookup under the lock, and the errors
  }
}

}  // namespace kf
