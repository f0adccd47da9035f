// Streams: priority streams created by the library, wrappers of native streams owned by another
// runtime, synchronisation and cross-stream waits. On the CPU work runs inside each call, so a
// stream only keeps its priority and the waits are no-ops.
#include <algorithm>
#include <vector>

#include "core/runtime/context.hpp"
#include "core/runtime/cuda/cuda_api.hpp"
#include "core/runtime/error.hpp"
#include "core/runtime/handle.hpp"
#include "core/runtime/tensor.hpp"
#include "kernel_fusion/runtime.h"

namespace kf {
namespace {

constexpr size_t kMinStreamConfigSize = offsetof(kf_stream_config_t, priority) + sizeof(int32_t);
constexpr uint32_t kKnownStreamFlags = KF_STREAM_NON_BLOCKING;

// Adds a stream to its context and the registry, or frees it if that fails.
kf_stream_t* adopt_stream(kf_stream_t* s) {
  kf_context_t* ctx = s->ctx;
  try {
    std::lock_guard<std::mutex> lock(ctx->mutex);
    ctx->streams.insert(s);
    try {
      register_handle(s, HandleKind::stream);
    } catch (...) {
      ctx->streams.erase(s);
      throw;
    }
  } catch (...) {
    delete_stream(s);
    throw;
  }
  return s;
}

}  // namespace

kf_stream_t* new_stream(kf_context_t* ctx, int32_t priority, uint32_t flags) {
  auto s = std::make_unique<kf_stream_t>();
  s->ctx = ctx;
  // CUDA convention: greatest (most urgent) is the numerically smallest.
  s->priority = std::min(std::max(priority, ctx->priority_greatest), ctx->priority_least);
  if (ctx->is_cuda()) {
    activate(ctx);
    s->native = cuda::stream_create(s->priority, (flags & KF_STREAM_NON_BLOCKING) != 0);
    s->owns_native = true;
    try {
      s->order_event = cuda::event_create(false);
    } catch (...) {
      cuda::stream_destroy(s->native);
      throw;
    }
  }
  return s.release();
}

void delete_stream(kf_stream_t* s) noexcept {
  if (s == nullptr) return;
  // Freed on the stream, after its last launch that used them (the context's pool outlives it).
  if (s->grid.words != nullptr) s->ctx->pool->deallocate(s->grid.words, s->grid.bytes, s->native);
  cuda::event_destroy(s->order_event);
  if (s->owns_native) cuda::stream_destroy(s->native);  // pending work still completes
  destroy_handle_object(s);
}

}  // namespace kf

extern "C" {

kf_result_t kf_stream_create(kf_context_t* ctx, const kf_stream_config_t* config,
                             kf_stream_t** out) {
  return kf::api_call([&] {
    kf::checked(ctx, "ctx");
    KF_REQUIRE_ARG(out != nullptr, "out is NULL");
    kf_stream_config_t c = KF_STREAM_CONFIG_INIT;
    if (config != nullptr) {
      KF_REQUIRE(
          config->struct_size >= kf::kMinStreamConfigSize, KF_ERROR_VERSION_MISMATCH,
          "config->struct_size is %zu; the smallest kf_stream_config_t layout served is %zu bytes "
          "(initialise the config with KF_STREAM_CONFIG_INIT)",
          config->struct_size, kf::kMinStreamConfigSize);
      kf::require_unknown_tail_zero(config, config->struct_size, sizeof(kf_stream_config_t),
                                    "config");
      c.priority = config->priority;
      if (config->struct_size >= offsetof(kf_stream_config_t, flags) + sizeof(uint32_t))
        c.flags = config->flags;
    }
    KF_REQUIRE_ARG((c.flags & ~kf::kKnownStreamFlags) == 0,
                   "config->flags 0x%x has unknown bits (known: 0x%x)", c.flags,
                   kf::kKnownStreamFlags);
    *out = kf::adopt_stream(kf::new_stream(ctx, c.priority, c.flags));
  });
}

kf_result_t kf_stream_wrap_native(kf_context_t* ctx, void* native_stream, kf_stream_t** out) {
  return kf::api_call([&] {
    kf::checked(ctx, "ctx");
    KF_REQUIRE_ARG(out != nullptr, "out is NULL");
    KF_REQUIRE(ctx->is_cuda(), KF_ERROR_NOT_SUPPORTED,
               "kf_stream_wrap_native needs a CUDA context; ctx is a CPU context");
    kf::activate(ctx);
    if (native_stream != nullptr) {
      int32_t device = kf::cuda::stream_device(native_stream);
      KF_REQUIRE(device < 0 || device == ctx->device_id, KF_ERROR_DEVICE_MISMATCH,
                 "native_stream belongs to CUDA device %d but the context is on device %d", device,
                 ctx->device_id);
    }
    auto s = std::make_unique<kf_stream_t>();
    s->ctx = ctx;
    s->native = native_stream;
    s->owns_native = false;
    s->per_thread = native_stream == kf::cuda::kPerThreadStream;
    s->owner = std::this_thread::get_id();
    s->priority = kf::cuda::stream_priority(native_stream);
    s->order_event = kf::cuda::event_create(false);
    *out = kf::adopt_stream(s.release());
  });
}

kf_result_t kf_stream_get_native(const kf_stream_t* s, void** out) {
  return kf::api_call([&] {
    kf::checked(s, "s");
    KF_REQUIRE_ARG(out != nullptr, "out is NULL");
    *out = s->native;
  });
}

kf_result_t kf_stream_get_priority(const kf_stream_t* s, int32_t* priority) {
  return kf::api_call([&] {
    kf::checked(s, "s");
    KF_REQUIRE_ARG(priority != nullptr, "priority is NULL");
    *priority = s->priority;
  });
}

kf_result_t kf_stream_destroy(kf_stream_t* s) {
  return kf::api_call([&] {
    kf::checked(s, "s");
    kf_context_t* ctx = s->ctx;
    kf::activate(ctx);
    {
      std::lock_guard<std::mutex> lock(ctx->mutex);
      // Gone meanwhile: another thread's destroy of it, or of its context, took it first.
      KF_REQUIRE(ctx->streams.count(s) == 1, KF_ERROR_INVALID_HANDLE,
                 "s is not a live stream (another thread destroyed it, or its context)");
      // The default stream first waits for this stream's work, so that what is ordered after
      // every stream of the context (a tensor's release, kf_tensor_destroy) stays ordered after
      // it too: a release ordered only after the streams still open would hand memory this
      // stream's kernels may still be writing to the next allocation. (Only where the library
      // enqueued work on it: a wrapper only waited on, as the Python frontend's DLPack exports
      // make, ties nothing of the caller's stream to the default one.) Tensors whose memory is
      // ordered on this stream move to the default stream.
      if (ctx->is_cuda() && s->enqueued.load() && !kf::reachable_here(s)) {
        // A cudaStreamPerThread wrapper destroyed by another thread than its own: its stream
        // cannot be named from here.
        kf::cuda::synchronize_quietly(nullptr);
      } else if (ctx->is_cuda() && s->enqueued.load()) {
        try {
          kf::cuda::event_record(s->order_event, s->native);
          kf::cuda::stream_wait_event(ctx->default_stream->native, s->order_event);
        } catch (const kf::Error&) {
          kf::cuda::synchronize_quietly(nullptr);  // no ordering to be had: wait for the device
        }
      }
      for (kf_tensor_t* t : ctx->tensors) {
        if (t->home.load(std::memory_order_relaxed) == s)
          t->home.store(ctx->default_stream, std::memory_order_relaxed);
      }
      ctx->streams.erase(s);
    }
    kf::unregister_handle(s);
    kf::delete_stream(s);
  });
}

kf_result_t kf_stream_synchronize(kf_stream_t* s) {
  return kf::api_call([&] {
    kf::checked(s, "s");
    if (!s->ctx->is_cuda()) return;
    kf::activate(s->ctx);
    kf::cuda::stream_synchronize(s->native);
  });
}

kf_result_t kf_stream_wait_event(kf_stream_t* s, kf_event_t* e) {
  return kf::api_call([&] {
    kf::checked(s, "s");
    kf::checked(e, "e");
    KF_REQUIRE(s->ctx == e->ctx, KF_ERROR_DEVICE_MISMATCH,
               "stream 's' and event 'e' belong to different contexts");
    if (!s->ctx->is_cuda() || !e->recorded) return;  // an unrecorded event is already complete
    kf::activate(s->ctx);
    kf::cuda::stream_wait_event(s->native, e->native);
  });
}

}  // extern "C"
