#include "core/fusion/kernel_cache.hpp"

#include "core/runtime/context.hpp"

namespace kf {
namespace fusion {

KernelCache::Entries::iterator KernelCache::find(const std::shared_ptr<const StructureKey>& key) {
  auto range = entries_.equal_range(key->hash);
  for (auto it = range.first; it != range.second; ++it) {
    const std::shared_ptr<const StructureKey>& k = it->second->key;
    if (k == key || k->bytes == key->bytes) return it;
  }
  return entries_.end();
}

std::shared_ptr<const Program> KernelCache::get_or_build(
    const std::shared_ptr<const StructureKey>& key, const Builder& build,
    kf_kernel_origin_t* origin) {
  std::shared_ptr<Entry> entry;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    auto it = find(key);
    if (it != entries_.end()) {
      entry = it->second;
      // Another thread is building this key: wait for its outcome instead of building twice.
      built_.wait(lock, [&] { return entry->done; });
      if (entry->error) std::rethrow_exception(entry->error);
      if (origin != nullptr) *origin = KF_KERNEL_MEMORY_CACHE;
      return entry->program;
    }
    entry = std::make_shared<Entry>(key);
    entries_.emplace(key->hash, entry);
  }

  // Build outside the lock: other keys proceed meanwhile.
  kf_kernel_origin_t built_origin = KF_KERNEL_COMPILED;
  std::shared_ptr<const Program> program;
  std::exception_ptr error;
  try {
    program = build(&built_origin);
  } catch (...) {
    error = std::current_exception();
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    entry->done = true;
    if (error || program == nullptr) {
      entry->error =
          error ? error
                : std::make_exception_ptr(std::runtime_error("fused kernel build gave no program"));
      auto range = entries_.equal_range(key->hash);  // not cached: the next request builds again
      for (auto it = range.first; it != range.second; ++it) {
        if (it->second == entry) {
          entries_.erase(it);
          break;
        }
      }
    } else {
      entry->program = program;
    }
  }
  built_.notify_all();
  if (entry->error) std::rethrow_exception(entry->error);
  if (origin != nullptr) *origin = built_origin;
  return program;
}

size_t KernelCache::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

KernelCache& kernel_cache(kf_context_t* ctx) {
  std::lock_guard<std::mutex> lock(ctx->mutex);
  if (!ctx->kernel_cache) ctx->kernel_cache = std::make_shared<KernelCache>();
  return *ctx->kernel_cache;
}

}  // namespace fusion
}  // namespace kf
