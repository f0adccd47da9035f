// Events: points in a stream for ordering and timing. CUDA events are created with timing; a
// CPU event records the host's steady clock, since CPU work has finished when a call returns.
#include <chrono>

#include "core/runtime/context.hpp"
#include "core/runtime/cuda/cuda_api.hpp"
#include "core/runtime/error.hpp"
#include "core/runtime/handle.hpp"
#include "kernel_fusion/runtime.h"

extern "C" {

kf_result_t kf_event_create(kf_context_t* ctx, kf_event_t** out) {
  return kf::api_call([&] {
    kf::checked(ctx, "ctx");
    KF_REQUIRE_ARG(out != nullptr, "out is NULL");
    auto e = std::make_unique<kf_event_t>();
    e->ctx = ctx;
    if (ctx->is_cuda()) {
      kf::activate(ctx);
      e->native = kf::cuda::event_create(true);
    }
    try {
      std::lock_guard<std::mutex> lock(ctx->mutex);
      ctx->events.insert(e.get());
      try {
        kf::register_handle(e.get(), kf::HandleKind::event);
      } catch (...) {
        ctx->events.erase(e.get());
        throw;
      }
    } catch (...) {
      kf::cuda::event_destroy(e->native);
      throw;
    }
    *out = e.release();
  });
}

kf_result_t kf_event_record(kf_event_t* e, kf_stream_t* s) {
  return kf::api_call([&] {
    kf::checked(e, "e");
    kf_stream_t* stream = kf::resolve_stream(e->ctx, s, "s");
    if (e->ctx->is_cuda()) {
      kf::activate(e->ctx);
      kf::cuda::event_record(e->native, stream->native);
    } else {
      e->host_time.store(std::chrono::steady_clock::now().time_since_epoch().count(),
                         std::memory_order_relaxed);
    }
    e->recorded.store(true, std::memory_order_release);
  });
}

kf_result_t kf_event_synchronize(kf_event_t* e) {
  return kf::api_call([&] {
    kf::checked(e, "e");
    if (!e->ctx->is_cuda() || !e->recorded) return;
    kf::activate(e->ctx);
    kf::cuda::event_synchronize(e->native);
  });
}

kf_result_t kf_event_query(kf_event_t* e, int32_t* complete) {
  return kf::api_call([&] {
    kf::checked(e, "e");
    KF_REQUIRE_ARG(complete != nullptr, "complete is NULL");
    bool done = true;
    if (e->ctx->is_cuda() && e->recorded) {
      kf::activate(e->ctx);
      done = kf::cuda::event_query(e->native);
    }
    *complete = done ? 1 : 0;
  });
}

kf_result_t kf_event_elapsed_ms(kf_event_t* start, kf_event_t* end, float* ms) {
  return kf::api_call([&] {
    kf::checked(start, "start");
    kf::checked(end, "end");
    KF_REQUIRE_ARG(ms != nullptr, "ms is NULL");
    KF_REQUIRE(start->ctx == end->ctx, KF_ERROR_DEVICE_MISMATCH,
               "events 'start' and 'end' belong to different contexts");
    KF_REQUIRE_ARG(start->recorded, "event 'start' was never recorded");
    KF_REQUIRE_ARG(end->recorded, "event 'end' was never recorded");
    float value = 0.0f;
    if (start->ctx->is_cuda()) {
      kf::activate(start->ctx);
      // Timing needs both events complete; wait rather than fail with "not ready".
      kf::cuda::event_synchronize(start->native);
      kf::cuda::event_synchronize(end->native);
      value = kf::cuda::event_elapsed_ms(start->native, end->native);
    } else {
      const std::chrono::steady_clock::duration ticks(end->host_time.load() -
                                                      start->host_time.load());
      value = std::chrono::duration<float, std::milli>(ticks).count();
    }
    *ms = value;
  });
}

kf_result_t kf_event_destroy(kf_event_t* e) {
  return kf::api_call([&] {
    kf::checked(e, "e");
    kf::activate(e->ctx);
    {
      std::lock_guard<std::mutex> lock(e->ctx->mutex);
      // Gone meanwhile: another thread's destroy of it, or of its context, took it first.
      KF_REQUIRE(e->ctx->events.erase(e) == 1, KF_ERROR_INVALID_HANDLE,
                 "e is not a live event (another thread destroyed it, or its context)");
    }
    kf::unregister_handle(e);
    kf::cuda::event_destroy(e->native);
    kf::destroy_handle_object(e);
  });
}

}  // extern "C"
