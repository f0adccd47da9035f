// Worker threads of the CPU backend. parallel_for splits [0, count) into contiguous chunks run by
// every worker and the calling thread; it returns when all chunks are done. Calls from several
// threads at once are serialised on the pool (each call still uses every core).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

namespace kf {

class ThreadPool {
 public:
  explicit ThreadPool(int32_t threads);  // threads <= 0: one per core
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int32_t size() const noexcept;  // workers + the caller
  // body(begin, end) is called for disjoint ranges covering [0, count), each at least min_grain
  // long (except the last), from up to size() threads.
  void parallel_for(int64_t count, int64_t min_grain,
                    const std::function<void(int64_t, int64_t)>& body);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kf
