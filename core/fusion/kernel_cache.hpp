// The in-memory cache of compiled programs of one context, keyed by the graph's structure key
// (Graph::structure_key) and its hash. Thread-safe: concurrent requests for one key build once and
// all get the same program; a failed build is not cached (the next request builds again).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>

#include "core/fusion/graph.hpp"
#include "core/fusion/program.hpp"
#include "kernel_fusion/graph.h"

struct kf_context_t;

namespace kf {
namespace fusion {

class KernelCache {
 public:
  using Builder = std::function<std::shared_ptr<const Program>(kf_kernel_origin_t*)>;

  // The program cached under key, or the one `build` returns (cached, unless it throws: then
  // the exception reaches this caller and every caller waiting on the same build). origin
  // (nullable) receives KF_KERNEL_MEMORY_CACHE for a cached program or one another thread
  // built meanwhile, else what `build` reported. Entries are found by the key's hash, then
  // compared whole (unless it is the very key object that made the entry: the same graph
  // handle compiled again), so a hit never hashes the key again.
  std::shared_ptr<const Program> get_or_build(const std::shared_ptr<const StructureKey>& key,
                                              const Builder& build, kf_kernel_origin_t* origin);

  size_t size() const;

 private:
  struct Entry {
    explicit Entry(std::shared_ptr<const StructureKey> k) : key(std::move(k)) {}
    const std::shared_ptr<const StructureKey> key;
    std::shared_ptr<const Program> program;  // set once built
    std::exception_ptr error;                // set when the build failed
    bool done = false;
  };
  struct Identity {  // the hash is already well mixed
    size_t operator()(uint64_t h) const noexcept { return static_cast<size_t>(h); }
  };
  using Entries = std::unordered_multimap<uint64_t, std::shared_ptr<Entry>, Identity>;

  Entries::iterator find(const std::shared_ptr<const StructureKey>& key);  // under mutex_

  mutable std::mutex mutex_;
  std::condition_variable built_;
  Entries entries_;
};

// The context's cache, created on first use.
KernelCache& kernel_cache(kf_context_t* ctx);

}  // namespace fusion
}  // namespace kf
