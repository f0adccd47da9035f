// Contexts: creation from a (possibly older) config, teardown of every child, synchronisation,
// memory statistics, and the helpers that resolve streams and order work across them.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/runtime/context.hpp"
#include "core/runtime/cuda/cuda_api.hpp"
#include "core/runtime/cuda/graph_hold.hpp"
#include "core/runtime/error.hpp"
#include "core/runtime/handle.hpp"
#include "core/runtime/tensor.hpp"
#include "kernel_fusion/runtime.h"

namespace kf {
namespace {

#if KF_WITH_CUDA
constexpr bool kBuiltWithCuda = true;
#else
constexpr bool kBuiltWithCuda = false;
#endif

// The oldest config layout served ends after device_id; later fields default when absent.
constexpr size_t kMinContextConfigSize = offsetof(kf_context_config_t, device_id) + sizeof(int32_t);
static_assert(sizeof(kf_memory_stats_t) == sizeof(size_t) + 5 * sizeof(uint64_t),
              "kf_context_get_memory_stats copies the fields as a run of uint64_t");
constexpr size_t kMinMemoryStatsSize = offsetof(kf_memory_stats_t, in_use_bytes) + sizeof(uint64_t);

kf_context_config_t read_config(const kf_context_config_t* config) {
  kf_context_config_t c = KF_CONTEXT_CONFIG_INIT;
  if (config == nullptr) {
    c.device_type = cuda::device_count() > 0 ? KF_DEVICE_CUDA : KF_DEVICE_CPU;
    return c;
  }
  KF_REQUIRE(
      config->struct_size >= kMinContextConfigSize, KF_ERROR_VERSION_MISMATCH,
      "config->struct_size is %zu; the smallest kf_context_config_t layout served is %zu bytes "
      "(initialise the config with KF_CONTEXT_CONFIG_INIT)",
      config->struct_size, kMinContextConfigSize);
  require_unknown_tail_zero(config, config->struct_size, sizeof(kf_context_config_t), "config");
  // Read only what the caller's layout holds; fields it lacks keep their defaults.
  std::memcpy(&c, config, std::min(config->struct_size, sizeof(c)));
  c.struct_size = sizeof(c);
  if (config->struct_size < offsetof(kf_context_config_t, memory_limit_bytes) + sizeof(uint64_t)) {
    c.memory_limit_bytes = 0;
  }
  if (config->struct_size < offsetof(kf_context_config_t, cpu_threads) + sizeof(int32_t))
    c.cpu_threads = 0;
  return c;
}

void check_config(const kf_context_config_t& c) {
  int device_type = raw_enum(c.device_type);
  if (device_type == KF_DEVICE_CPU) {
    KF_REQUIRE_ARG(c.device_id == 0, "config->device_id is %d; the CPU device is 0", c.device_id);
    KF_REQUIRE_ARG(c.cpu_threads >= 0 && c.cpu_threads <= 4096,
                   "config->cpu_threads is %d; use 0 (one per core) to 4096", c.cpu_threads);
    return;
  }
  KF_REQUIRE_ARG(device_type == KF_DEVICE_CUDA, "config->device_type %d is not a kf_device_type_t",
                 device_type);
  KF_REQUIRE(kBuiltWithCuda, KF_ERROR_NO_DEVICE,
             "a CUDA context was requested but this build of kernel_fusion has no CUDA backend "
             "(built with KF_ENABLE_CUDA=OFF)");
  int32_t count = cuda::device_count();
  KF_REQUIRE(count > 0, KF_ERROR_NO_DEVICE,
             "a CUDA context was requested but no usable CUDA device was found (no NVIDIA driver, "
             "no GPU, or CUDA_VISIBLE_DEVICES hides them); use KF_DEVICE_CPU instead");
  KF_REQUIRE_ARG(c.device_id >= 0 && c.device_id < count,
                 "config->device_id is %d but there %s %d CUDA device%s", c.device_id,
                 count == 1 ? "is" : "are", count, count == 1 ? "" : "s");
}

// Tears down a context object: children first, then the pool reference and the workers.
void destroy_context_object(kf_context_t* ctx) noexcept {
  std::unordered_set<kf_tensor_t*> tensors;
  std::unordered_set<kf_event_t*> events;
  std::unordered_set<kf_stream_t*> streams;
  std::unordered_set<kf_graph_t*> graphs;
  std::unordered_set<kf_fused_kernel_t*> fused_kernels;
  {
    std::lock_guard<std::mutex> lock(ctx->mutex);
    tensors.swap(ctx->tensors);
    events.swap(ctx->events);
    streams.swap(ctx->streams);
    graphs.swap(ctx->graphs);
    fused_kernels.swap(ctx->fused_kernels);
  }
  // Every child dies as a handle before any is deleted: a tensor's deleter may call back into
  // the library (destroying a tensor it kept alive), and must then find it gone, not delete it
  // a second time.
  for (kf_graph_t* g : graphs) unregister_handle(g);
  for (kf_fused_kernel_t* k : fused_kernels) unregister_handle(k);
  for (kf_tensor_t* t : tensors) unregister_handle(t);
  for (kf_event_t* e : events) unregister_handle(e);
  for (kf_stream_t* s : streams)
    if (s != ctx->default_stream) unregister_handle(s);
  for (kf_graph_t* g : graphs) delete_graph(g);
  // Compiled programs (CUDA modules) go before the streams they ran on.
  for (kf_fused_kernel_t* k : fused_kernels) delete_fused_kernel(k);
  ctx->kernel_cache.reset();
  for (kf_tensor_t* t : tensors) delete_tensor(t);
  for (kf_event_t* e : events) {
    cuda::event_destroy(e->native);
    destroy_handle_object(e);
  }
  for (kf_stream_t* s : streams)
    if (s != ctx->default_stream) delete_stream(s);
  delete_stream(ctx->default_stream);
  ctx->default_stream = nullptr;
  ctx->pool.reset();  // storages still exported (DLPack) keep it alive
  ctx->threads.reset();
  destroy_handle_object(ctx);
}

}  // namespace

kf_context_t* checked_context(const kf_context_t* ctx, const char* param_name) {
  return const_cast<kf_context_t*>(checked(ctx, param_name));
}

kf_stream_t* resolve_stream(kf_context_t* ctx, kf_stream_t* s, const char* param_name) {
  if (s == nullptr) return ctx->default_stream;
  checked(s, param_name);
  return resolve_checked_stream(ctx, s, param_name);
}

kf_stream_t* resolve_checked_stream(kf_context_t* ctx, kf_stream_t* s, const char* param_name) {
  if (s == nullptr) return ctx->default_stream;
  KF_REQUIRE(s->ctx == ctx, KF_ERROR_DEVICE_MISMATCH, "stream '%s' belongs to another context",
             param_name);
  if (!s->enqueued.load(std::memory_order_relaxed))
    s->enqueued.store(true, std::memory_order_relaxed);
  return s;
}

void activate(const kf_context_t* ctx) {
  if (ctx->is_cuda()) cuda::set_device(ctx->device_id);
}

// Waits for every stream of a CUDA context. (A CPU context's streams have no native handle:
// cudaStreamSynchronize(nullptr) would wait for the legacy default stream and, first, initialise
// the CUDA runtime and the device's primary context in a process that may never use the GPU.)
//
// A stream being captured into a CUDA graph is skipped: its work runs when the graph is launched,
// and synchronising it would invalidate the capture. A cudaStreamPerThread wrapper through which
// work was enqueued, reached from a thread other than its owner, is waited for with the device
// (that thread's stream cannot be named from here). Every stream is waited for even when one
// fails; the first failure is then reported.
void synchronize_locked(kf_context_t* ctx) {
  if (!ctx->is_cuda()) return;
  // Relaxed: the streams waited for are eager, and a capture in the global mode on any thread
  // (one of these streams' included) would otherwise refuse the waits and be invalidated by them.
  const cuda::RelaxedCaptureMode relaxed;
  std::exception_ptr failed;
  bool whole_device = false;
  for (kf_stream_t* s : ctx->streams) {
    try {
      if (!reachable_here(s)) {
        whole_device = whole_device || s->enqueued.load(std::memory_order_relaxed);
      } else if (cuda::capture_id(s->native) == 0) {
        cuda::stream_synchronize(s->native);
      }
    } catch (const Error&) {
      if (!failed) failed = std::current_exception();
    }
  }
  if (whole_device) {
    try {
      cuda::device_synchronize();
    } catch (const Error&) {
      if (!failed) failed = std::current_exception();
    }
  }
  if (failed) std::rethrow_exception(failed);
}

namespace {

// Enqueues on `home` a wait for the work already enqueued on every stream of the context in the
// same capture state as home (home_capture: 0 for eager), and returns home's native stream, or
// kUnorderedRelease where a stream with work cannot be named from this thread. The caller holds
// ctx->mutex.
void* order_after_streams_locked(kf_context_t* ctx, kf_stream_t* home, uint64_t home_capture) {
  bool unordered = false;
  for (kf_stream_t* s : ctx->streams) {
    if (s == home) continue;
    if (!reachable_here(s)) {
      unordered = unordered || s->enqueued.load(std::memory_order_relaxed);
      continue;
    }
    // Only between streams in the same state: both running eagerly, or both in one capture
    // sequence. A record on a capturing stream waited for by an eager one would pull the eager
    // stream into the capture, and a capturing stream may not wait for work outside its capture.
    // (What a graph enqueues when it is replayed, the user orders before destroying a tensor it
    // uses.)
    if (cuda::capture_id(s->native) != home_capture || home_capture == cuda::kCaptureUnknown)
      continue;
    // A shared event per stream is enough: waiting on a later record of it still orders after
    // everything enqueued before this call.
    cuda::event_record(s->order_event, s->native);
    // Another thread may have begun a capture on s since its state was read: the record then
    // went into that capture, and waiting on it would pull home into the capture too.
    if (cuda::capture_id(s->native) != home_capture) continue;
    cuda::stream_wait_event(home->native, s->order_event);
  }
  return unordered ? kUnorderedRelease : home->native;
}

}  // namespace

ReleaseOrder order_release(kf_context_t* ctx, kf_stream_t* home, uint64_t allocated_in) {
  if (!ctx->is_cuda()) return {};
  std::lock_guard<std::mutex> lock(ctx->mutex);
  if (ctx->streams.count(home) == 0) home = ctx->default_stream;
  // A cudaStreamPerThread wrapper of another thread cannot be named from here: a home of that
  // kind, or one such stream with work of the library's, leaves the release to wait for the
  // device (kUnorderedRelease).
  if (!reachable_here(home)) return {kUnorderedRelease, nullptr};
  const uint64_t home_capture = cuda::capture_id(home->native);
  // A capture already invalidated, or the legacy stream while a blocking stream is captured:
  // nothing can be ordered on home, so the release waits for the device (and where that wait is
  // refused, the block is left to CUDA's pool, never handed out again).
  if (home_capture == cuda::kCaptureUnknown) return {kUnorderedRelease, nullptr};
  // Eager, or the capture that allocated the block: the free is ordered on home (in a capture,
  // it is a node of the graph, after the captured work that uses the block).
  if (home_capture == 0 || home_capture == allocated_in)
    return {order_after_streams_locked(ctx, home, home_capture), nullptr};
  // Home is being captured, and the block was allocated outside that capture. CUDA takes a free
  // in a capture as a free node, which must name one of the graph's own allocations, so the
  // free is ordered on an eager stream of the context instead, after every eager stream's work;
  // and while the capture lives, the graph, whose replays still read the block, holds it
  // (MemoryPool::release_after_capture).
  kf_stream_t* eager = nullptr;
  if (reachable_here(ctx->default_stream) && cuda::capture_id(ctx->default_stream->native) == 0) {
    eager = ctx->default_stream;
  } else {
    for (kf_stream_t* s : ctx->streams) {
      if (reachable_here(s) && cuda::capture_id(s->native) == 0) {
        eager = s;
        break;
      }
    }
  }
  if (eager == nullptr) return {kUnorderedRelease, home->native};
  return {order_after_streams_locked(ctx, eager, 0), home->native};
}

}  // namespace kf

extern "C" {

kf_result_t kf_context_create(const kf_context_config_t* config, kf_context_t** out) {
  return kf::api_call([&] {
    KF_REQUIRE_ARG(out != nullptr, "out is NULL");
    kf_context_config_t c = kf::read_config(config);
    kf::check_config(c);
    auto ctx = std::make_unique<kf_context_t>();
    ctx->device_type = c.device_type;
    ctx->device_id = c.device_id;
    ctx->memory_limit_bytes = c.memory_limit_bytes;
    if (ctx->is_cuda()) {
      kf::cuda::priority_range(c.device_id, &ctx->priority_least, &ctx->priority_greatest);
      ctx->pool = kf::make_device_pool(c.device_id, c.memory_limit_bytes);
    } else {
      ctx->pool = kf::make_host_pool(c.memory_limit_bytes);
      ctx->threads = std::make_unique<kf::ThreadPool>(c.cpu_threads);
    }
    kf_stream_t* default_stream = kf::new_stream(ctx.get(), 0, KF_STREAM_NON_BLOCKING);
    try {
      ctx->streams.insert(default_stream);
      ctx->default_stream = default_stream;
      kf::register_handle(ctx.get(), kf::HandleKind::context);
    } catch (...) {
      kf::delete_stream(default_stream);
      throw;
    }
    *out = ctx.release();
  });
}

kf_result_t kf_context_destroy(kf_context_t* ctx) {
  return kf::api_call([&] {
    kf::cuda::run_graph_releases();
    if (ctx == nullptr) return;
    kf::checked(ctx, "ctx");
    kf::unregister_handle(ctx);  // from here on, other calls with ctx fail cleanly
    try {
      kf::activate(ctx);  // both no-ops for a CPU context, which never touches the CUDA runtime
      std::lock_guard<std::mutex> lock(ctx->mutex);
      kf::synchronize_locked(ctx);
    } catch (const kf::Error&) {
      // A failed kernel must not keep the context alive: tear down anyway, report nothing more.
    }
    kf::destroy_context_object(ctx);
  });
}

kf_result_t kf_context_get_device(const kf_context_t* ctx, kf_device_type_t* type,
                                  int32_t* device_id) {
  return kf::api_call([&] {
    kf::checked(ctx, "ctx");
    if (type != nullptr) *type = ctx->device_type;
    if (device_id != nullptr) *device_id = ctx->device_id;
  });
}

kf_result_t kf_context_synchronize(kf_context_t* ctx) {
  return kf::api_call([&] {
    kf::cuda::run_graph_releases();
    kf::checked(ctx, "ctx");
    if (!ctx->is_cuda()) return;
    kf::activate(ctx);
    // The lock keeps streams alive while waiting; other threads' child creation waits with us.
    std::lock_guard<std::mutex> lock(ctx->mutex);
    kf::synchronize_locked(ctx);
  });
}

kf_result_t kf_context_get_stream_priority_range(const kf_context_t* ctx, int32_t* least,
                                                 int32_t* greatest) {
  return kf::api_call([&] {
    kf::checked(ctx, "ctx");
    if (least != nullptr) *least = ctx->priority_least;
    if (greatest != nullptr) *greatest = ctx->priority_greatest;
  });
}

kf_result_t kf_context_get_memory_stats(const kf_context_t* ctx, kf_memory_stats_t* stats) {
  return kf::api_call([&] {
    kf::cuda::run_graph_releases();  // blocks that graphs have let go are counted free
    kf::checked(ctx, "ctx");
    KF_REQUIRE_ARG(stats != nullptr, "stats is NULL");
    KF_REQUIRE_ARG(stats->struct_size >= kf::kMinMemoryStatsSize,
                   "stats->struct_size is %zu; set it to sizeof(kf_memory_stats_t) (at least %zu)",
                   stats->struct_size, kf::kMinMemoryStatsSize);
    kf_memory_stats_t full{};
    ctx->pool->stats(&full);
    // Every field after struct_size is a uint64_t: copy those the caller's layout holds.
    size_t fits = std::min(stats->struct_size, sizeof(full)) - sizeof(size_t);
    fits -= fits % sizeof(uint64_t);
    std::memcpy(reinterpret_cast<char*>(stats) + sizeof(size_t),
                reinterpret_cast<const char*>(&full) + sizeof(size_t), fits);
  });
}

kf_result_t kf_context_reset_peak_memory(kf_context_t* ctx) {
  return kf::api_call([&] {
    kf::checked(ctx, "ctx");
    ctx->pool->reset_peak();
  });
}

kf_result_t kf_context_trim_memory(kf_context_t* ctx, uint64_t keep_bytes) {
  return kf::api_call([&] {
    kf::cuda::run_graph_releases();
    kf::checked(ctx, "ctx");
    if (ctx->is_cuda()) {
      kf::activate(ctx);
      std::lock_guard<std::mutex> lock(ctx->mutex);
      kf::synchronize_locked(ctx);  // pending frees must complete before their blocks can go
    }
    ctx->pool->trim(keep_bytes);
  });
}

}  // extern "C"
