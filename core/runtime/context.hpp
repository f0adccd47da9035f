// The internal layout of the opaque handles, and the helpers every C entry uses to validate them.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "core/runtime/grid_scratch.hpp"
#include "core/runtime/memory_pool.hpp"
#include "core/runtime/thread_pool.hpp"
#include "kernel_fusion/graph.h"
#include "kernel_fusion/types.h"

namespace kf {
namespace fusion {
class KernelCache;
}  // namespace fusion
}  // namespace kf

struct kf_context_t {
  kf_device_type_t device_type = KF_DEVICE_CPU;
  int32_t device_id = 0;
  uint64_t memory_limit_bytes = 0;
  int32_t priority_least = 0;     // numerically largest
  int32_t priority_greatest = 0;  // numerically smallest
  std::shared_ptr<kf::MemoryPool> pool;
  std::unique_ptr<kf::ThreadPool> threads;  // CPU contexts only
  kf_stream_t* default_stream = nullptr;    // owned; not in the handle registry's user-visible set

  // Children still alive, destroyed with the context. Guarded by mutex.
  mutable std::mutex mutex;
  std::unordered_set<kf_stream_t*> streams;  // includes default_stream
  std::unordered_set<kf_event_t*> events;
  std::unordered_set<kf_tensor_t*> tensors;
  std::unordered_set<kf_graph_t*> graphs;
  std::unordered_set<kf_fused_kernel_t*> fused_kernels;
  // Compiled fusion-engine programs of this context, keyed by structure (core/fusion/).
  std::shared_ptr<kf::fusion::KernelCache> kernel_cache;

  bool is_cuda() const noexcept { return device_type == KF_DEVICE_CUDA; }
};

struct kf_stream_t {
  kf_context_t* ctx = nullptr;
  void* native = nullptr;  // cudaStream_t; nullptr on the CPU
  bool owns_native = false;
  int32_t priority = 0;
  void* order_event = nullptr;  // cudaEvent_t (no timing) for order_after_all_streams; owned
  kf::GridScratch grid;         // CUDA: the grid-group kernels' words, from ctx->pool; owned
  // An op, copy, allocation or event record was enqueued through it (resolve_checked_stream):
  // its destroy must then order the context's later releases after that work.
  std::atomic<bool> enqueued{false};
  // A wrapper of cudaStreamPerThread: that handle names the calling thread's own default stream,
  // so only `owner` (the thread that wrapped it, which runtime.h asks to use it) reaches the
  // stream it stands for; the library never records, waits or synchronises on it from another.
  bool per_thread = false;
  std::thread::id owner;
};

namespace kf {
// False for a cudaStreamPerThread wrapper on any thread but its owner.
inline bool reachable_here(const kf_stream_t* s) {
  return !s->per_thread || s->owner == std::this_thread::get_id();
}
}  // namespace kf

// An event may be recorded by one thread while others wait on it, query it or time it (CUDA's
// events allow that, timing perhaps finding it not ready): what the library keeps is atomic.
struct kf_event_t {
  kf_context_t* ctx = nullptr;
  void* native = nullptr;  // cudaEvent_t with timing; nullptr on the CPU
  std::atomic<bool> recorded{false};
  // CPU backend: when it was last recorded (steady_clock ticks).
  std::atomic<std::chrono::steady_clock::rep> host_time{0};
};

namespace kf {

// Throws INVALID_HANDLE unless ctx is live.
kf_context_t* checked_context(const kf_context_t* ctx, const char* param_name);
// NULL -> the context's default stream; otherwise checks that s is live and belongs to ctx
// (DEVICE_MISMATCH otherwise).
kf_stream_t* resolve_stream(kf_context_t* ctx, kf_stream_t* s, const char* param_name);
// The same for a stream whose handle the caller has checked (check_handles), or NULL.
kf_stream_t* resolve_checked_stream(kf_context_t* ctx, kf_stream_t* s, const char* param_name);

// Waits for every stream of a CUDA context but those being captured (a cudaStreamPerThread
// wrapper of another thread with work: for the device), each even when another fails, then
// throws the first failure. The caller holds ctx->mutex and has activated ctx.
void synchronize_locked(kf_context_t* ctx);

// Where the release of a block goes (MemoryPool::deallocate and release_after_capture).
struct ReleaseOrder {
  // The stream the free is ordered on, behind every stream of the context it can be ordered
  // after; kUnorderedRelease when the release must wait for the device instead.
  void* stream = nullptr;
  // Set when the last owner let go while its home stream was being captured and the block was
  // not allocated in that capture: that capturing stream, whose graph must hold the block until
  // the graph and its replays are done with it. nullptr otherwise.
  void* capturing = nullptr;
};
// Orders the release of a block allocated in capture sequence `allocated_in` (0: eagerly), whose
// last tensor's home is `home`: on home, after a wait for the work already enqueued on every
// stream of the context in home's capture state; or, where home is being captured by another
// sequence than the block's, on an eager stream of the context after every eager stream's work,
// with home named as the capturing stream. A home destroyed meanwhile (by another thread, whose
// kf_stream_destroy ordered the default stream after it) is replaced by the default stream.
ReleaseOrder order_release(kf_context_t* ctx, kf_stream_t* home, uint64_t allocated_in);

// Makes the context's device current on this thread (CUDA contexts; no-op on the CPU). Every
// entry point that issues CUDA work calls it, since the calling thread may differ between calls.
void activate(const kf_context_t* ctx);

// Creates a stream object with its native stream (not registered, not in ctx->streams), and
// frees one (destroying the native stream only when owned).
kf_stream_t* new_stream(kf_context_t* ctx, int32_t priority, uint32_t flags);
void delete_stream(kf_stream_t* s) noexcept;

// Free a graph / compiled kernel object that is no longer registered (core/fusion/).
void delete_graph(kf_graph_t* g) noexcept;
void delete_fused_kernel(kf_fused_kernel_t* k) noexcept;

}  // namespace kf
