// The host memory pool of CPU contexts: 64-byte aligned blocks cached by size class, so tensors
// created and destroyed in a loop do not return to the system allocator each time.
#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/runtime/error.hpp"
#include "core/runtime/memory_pool.hpp"

namespace kf {
namespace {

// Multiples of 64 B up to 1 KiB, then four classes per power of two (at most 25 % slack).
size_t size_class(size_t bytes) {
  if (bytes <= 1024) return (bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
  int log2 = 63 - __builtin_clzll(static_cast<unsigned long long>(bytes - 1));  // 2^log2 < bytes
  size_t step = size_t{1} << (log2 - 2);
  size_t rounded = (bytes + step - 1) / step * step;
  return rounded < bytes ? bytes : rounded;  // guards wrap-around near SIZE_MAX
}

class HostPool final : public MemoryPool {
 public:
  explicit HostPool(uint64_t limit) : limit_(limit) {}
  ~HostPool() override {
    for (auto& entry : cached_) {
      for (void* p : entry.second) std::free(p);
    }
    for (auto& entry : live_) std::free(entry.first);
  }

  void* allocate(size_t bytes, void* /*native_stream*/) override {
    if (bytes == 0) return nullptr;
    std::lock_guard<std::mutex> lock(mutex_);
    size_t exact = (bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
    KF_REQUIRE(exact >= bytes, KF_ERROR_OUT_OF_MEMORY, "cannot allocate %zu bytes: size overflows",
               bytes);
    // Under a limit, blocks are the request rounded up to the alignment only: a size class's
    // slack (up to 25 %) would count against the limit, and tensors whose sizes add up to less
    // than it would not fit.
    const size_t block = limit_ != 0 ? exact : size_class(bytes);
    void* p = take_cached(block);
    if (p == nullptr) {
      if (limit_ != 0 && reserved_ + block > limit_) {
        release_cached(limit_ - std::min<uint64_t>(limit_, in_use_blocks_ + block));
      }
      if (limit_ != 0 && reserved_ + block > limit_) {
        fail(KF_ERROR_OUT_OF_MEMORY,
             "cannot allocate %zu bytes (a block of %zu, 64-byte aligned): the context's memory "
             "limit is %llu bytes and live tensors hold %llu bytes in blocks of %llu",
             bytes, block, static_cast<unsigned long long>(limit_),
             static_cast<unsigned long long>(in_use_),
             static_cast<unsigned long long>(in_use_blocks_));
      }
      p = std::aligned_alloc(kHostAlignment, block);
      if (p == nullptr) {
        release_cached(0);
        p = std::aligned_alloc(kHostAlignment, block);
      }
      KF_REQUIRE(p != nullptr, KF_ERROR_OUT_OF_MEMORY,
                 "cannot allocate %zu bytes of host memory: the system allocator failed", bytes);
      reserved_ += block;
    }
    live_.emplace(p, Live{block, bytes});
    in_use_ += bytes;
    in_use_blocks_ += block;
    peak_ = std::max(peak_, in_use_);
    return p;
  }

  void deallocate(void* ptr, size_t /*bytes*/, void* /*native_stream*/) noexcept override {
    if (ptr == nullptr) return;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(ptr);
    if (it == live_.end()) return;  // not ours: never free what we did not allocate
    Live l = it->second;
    live_.erase(it);
    in_use_ -= l.requested;
    in_use_blocks_ -= l.block;
    try {
      cached_[l.block].push_back(ptr);
    } catch (...) {
      std::free(ptr);
      reserved_ -= l.block;
    }
  }

  void stats(kf_memory_stats_t* out) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    out->in_use_bytes = in_use_;
    out->reserved_bytes = reserved_;
    out->peak_in_use_bytes = peak_;
    out->limit_bytes = limit_;
    out->allocation_count = live_.size();
  }

  void reset_peak() override {
    std::lock_guard<std::mutex> lock(mutex_);
    peak_ = in_use_;
  }

  void trim(uint64_t keep_bytes) override {
    std::lock_guard<std::mutex> lock(mutex_);
    release_cached(keep_bytes);
  }

 private:
  struct Live {
    size_t block;
    size_t requested;
  };

  void* take_cached(size_t block) {
    auto it = cached_.find(block);
    if (it == cached_.end() || it->second.empty()) return nullptr;
    void* p = it->second.back();
    it->second.pop_back();
    return p;
  }

  // Frees cached blocks, largest first, until at most keep_cached bytes stay cached.
  void release_cached(uint64_t keep_cached) {
    std::vector<size_t> classes;
    for (auto& entry : cached_) classes.push_back(entry.first);
    std::sort(classes.rbegin(), classes.rend());
    for (size_t block : classes) {
      std::vector<void*>& list = cached_[block];
      while (!list.empty() && reserved_ - in_use_blocks_ > keep_cached) {
        std::free(list.back());
        list.pop_back();
        reserved_ -= block;
      }
      if (list.empty()) cached_.erase(block);
    }
  }

  const uint64_t limit_;
  mutable std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> cached_;
  std::unordered_map<void*, Live> live_;
  uint64_t in_use_ = 0;         // requested bytes of live blocks
  uint64_t in_use_blocks_ = 0;  // class bytes of live blocks
  uint64_t reserved_ = 0;       // class bytes of live and cached blocks
  uint64_t peak_ = 0;
};

}  // namespace

std::shared_ptr<MemoryPool> make_host_pool(uint64_t limit_bytes) {
  return std::make_shared<HostPool>(limit_bytes);
}

}  // namespace kf
