// Persistent workers for the CPU backend. One job runs at a time; the caller takes part, chunks
// are claimed through an atomic counter, and the first exception is rethrown in the caller.
#include "core/runtime/thread_pool.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "core/runtime/error.hpp"

namespace kf {
namespace {
// Set on pool workers and on a caller inside parallel_for: nested calls run inline instead of
// waiting for a pool that is busy with their parent.
thread_local bool in_parallel_region = false;
}  // namespace

struct ThreadPool::Impl {
  std::vector<std::thread> workers;
  std::mutex job_mutex;  // serialises parallel_for callers

  std::mutex mutex;  // guards the job fields below
  std::condition_variable wake;
  std::condition_variable done;
  uint64_t generation = 0;
  bool stopping = false;
  const std::function<void(int64_t, int64_t)>* body = nullptr;
  int64_t count = 0;
  int64_t chunk = 0;
  int64_t chunks = 0;
  std::atomic<int64_t> next_chunk{0};
  int32_t busy_workers = 0;
  std::exception_ptr error;

  void run_chunks() {
    for (;;) {
      int64_t c = next_chunk.fetch_add(1, std::memory_order_relaxed);
      if (c >= chunks) return;
      int64_t begin = c * chunk;
      int64_t end = std::min(count, begin + chunk);
      try {
        (*body)(begin, end);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!error) error = std::current_exception();
        next_chunk.store(chunks, std::memory_order_relaxed);  // stop handing out work
      }
    }
  }

  void stop_workers() noexcept {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    wake.notify_all();
    for (std::thread& t : workers) {
      if (t.joinable()) t.join();
    }
    workers.clear();
  }

  void worker_loop() {
    in_parallel_region = true;
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      wake.wait(lock, [&] { return stopping || generation != seen; });
      if (stopping) return;
      seen = generation;
      lock.unlock();
      run_chunks();
      lock.lock();
      if (--busy_workers == 0) done.notify_all();
    }
  }
};

ThreadPool::ThreadPool(int32_t threads) : impl_(new Impl) {
  if (threads <= 0)
    threads = static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
  impl_->workers.reserve(static_cast<size_t>(threads - 1));
  try {
    for (int32_t i = 1; i < threads; ++i)
      impl_->workers.emplace_back([this] { impl_->worker_loop(); });
  } catch (const std::system_error& e) {
    // The system refused a thread (EAGAIN: its thread, memory or address-space limits): a
    // resource the caller can free or ask less of, not a fault of the library.
    const size_t started = impl_->workers.size() + 1;
    impl_->stop_workers();  // joins whatever started
    // Formatted here, not by kf::fail: thread_pool_test builds this file without the library.
    char message[320];
    std::snprintf(message, sizeof message,
                  "could not start the CPU backend's %d threads: the system refused thread %zu "
                  "(%s); ask for fewer (kf_context_config_t.cpu_threads) or raise the process's "
                  "limits",
                  threads, started, e.what());
    throw Error(KF_ERROR_OUT_OF_MEMORY, message);
  } catch (...) {
    impl_->stop_workers();
    throw;
  }
}

ThreadPool::~ThreadPool() { impl_->stop_workers(); }

int32_t ThreadPool::size() const noexcept {
  return static_cast<int32_t>(impl_->workers.size()) + 1;
}

void ThreadPool::parallel_for(int64_t count, int64_t min_grain,
                              const std::function<void(int64_t, int64_t)>& body) {
  if (count <= 0) return;
  min_grain = std::max<int64_t>(1, min_grain);
  int64_t max_chunks = std::min<int64_t>(size(), (count + min_grain - 1) / min_grain);
  if (max_chunks <= 1 || impl_->workers.empty() || in_parallel_region) {
    body(0, count);
    return;
  }
  Impl& p = *impl_;
  std::lock_guard<std::mutex> job(p.job_mutex);
  {
    std::lock_guard<std::mutex> lock(p.mutex);
    p.body = &body;
    p.count = count;
    p.chunk = std::max(min_grain, (count + max_chunks - 1) / max_chunks);
    p.chunks = (count + p.chunk - 1) / p.chunk;
    p.next_chunk.store(0, std::memory_order_relaxed);
    p.busy_workers = static_cast<int32_t>(p.workers.size());
    p.error = nullptr;
    ++p.generation;
  }
  p.wake.notify_all();
  in_parallel_region = true;
  p.run_chunks();
  in_parallel_region = false;
  std::unique_lock<std::mutex> lock(p.mutex);
  p.done.wait(lock, [&] { return p.busy_workers == 0; });
  p.body = nullptr;
  if (p.error) {
    std::exception_ptr e = p.error;
    p.error = nullptr;
    std::rethrow_exception(e);
  }
}

}  // namespace kf
