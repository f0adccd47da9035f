// Tensor lifetime: pool-allocated tensors, borrowed memory, views, and destruction in stream
// order; plus the read-only queries.
#include <cinttypes>
#include <cstring>

#include "core/runtime/context.hpp"
#include "core/runtime/cuda/cuda_api.hpp"
#include "core/runtime/cuda/graph_hold.hpp"
#include "core/runtime/error.hpp"
#include "core/runtime/handle.hpp"
#include "core/runtime/tensor.hpp"
#include "kernel_fusion/runtime.h"

namespace kf {

kf_tensor_t* adopt_tensor(std::unique_ptr<kf_tensor_t> t, const kf_tensor_t* home_of) {
  kf_context_t* ctx = t->ctx;
  std::lock_guard<std::mutex> lock(ctx->mutex);
  if (home_of != nullptr) t->home.store(home_of->home.load(std::memory_order_relaxed));
  ctx->tensors.insert(t.get());
  try {
    register_handle(t.get(), HandleKind::tensor);
  } catch (...) {
    ctx->tensors.erase(t.get());
    throw;
  }
  if (t->storage != nullptr) t->storage->tensors.fetch_add(1, std::memory_order_relaxed);
  return t.release();
}

void delete_tensor(kf_tensor_t* t) noexcept {
  kf_stream_t* home = t->home.load(std::memory_order_relaxed);
  Storage* storage = t->storage.get();
  // The last tensor of the storage orders its release (acq_rel: after every other tensor's work
  // was enqueued, each having enqueued it before its own destroy). An exported storage is
  // ordered only once no export holds it (its consumers' work is on streams the context does
  // not know); else its release waits for the device.
  const bool last_tensor =
      storage != nullptr && storage->tensors.fetch_sub(1, std::memory_order_acq_rel) == 1;
  const bool no_exports = last_tensor && (!storage->exported.load(std::memory_order_acquire) ||
                                          t->storage.use_count() == 1);
  if (no_exports && t->ctx->is_cuda() && home != nullptr) {
    try {
      activate(t->ctx);
      const ReleaseOrder order = order_release(t->ctx, home, storage->ready_capture);
      storage->release_stream = order.stream;
      storage->release_capturing = order.capturing;
    } catch (...) {
      // Without the ordering, the release falls back to waiting for the device.
    }
  }
  destroy_handle_object(t);
}

namespace {

// An event recorded on the release stream of `s` (after the eager work on its block), or nullptr
// where the release is unordered or the event cannot be had (the release then waits for the
// device).
void* release_marker(const Storage& s) noexcept {
  if (s.release_stream == kUnorderedRelease) return nullptr;
  void* marker = nullptr;
  try {
    marker = cuda::event_create(false);
    cuda::event_record(marker, s.release_stream);
    return marker;
  } catch (...) {
    cuda::event_destroy(marker);
    return nullptr;
  }
}

kf_tensor_t* create_tensor(kf_context_t* ctx, const kf_tensor_desc_t* desc, kf_stream_t* s) {
  cuda::run_graph_releases();
  int64_t span = 0;
  kf_tensor_desc_t d = normalize_desc(desc, "desc", &span);
  kf_stream_t* home = resolve_stream(ctx, s, "s");
  size_t bytes = static_cast<size_t>(span) * dtype_size(d.dtype);
  activate(ctx);

  auto storage = std::make_shared<Storage>();
  storage->device_type = ctx->device_type;
  storage->device_id = ctx->device_id;
  std::shared_ptr<MemoryPool> pool = ctx->pool;
  Storage* self = storage.get();
  std::function<void()> release = [pool, self] {
    if (self->device_type == KF_DEVICE_CUDA) {
      try {
        cuda::set_device(self->device_id);
      } catch (...) {
      }
    }
    bool held = false;
    if (self->release_capturing != nullptr) {
      // Let go during a capture that did not allocate the block: the graph reads it at every
      // replay, so it holds the block, freed once the graph is done, after the eager work.
      void* const marker = release_marker(*self);
      void* const base = self->base;
      const size_t bytes = self->bytes;
      held = cuda::hold_until_graph_done(self->release_capturing, [pool, base, bytes, marker] {
        pool->deallocate_after_event(base, bytes, marker);
        cuda::event_destroy(marker);
      });
      if (!held) cuda::event_destroy(marker);  // the capture has ended since
    }
    if (!held) pool->deallocate(self->base, self->bytes, self->release_stream);
    cuda::event_destroy(self->ready_event);
  };
  storage->base = ctx->pool->allocate(bytes, home->native);
  storage->bytes = bytes;
  storage->release = std::move(release);  // from here on the storage frees the block
  if (ctx->is_cuda()) {
    storage->ready_capture = cuda::capture_id(home->native);
    storage->ready_event = cuda::event_create(false);
    cuda::event_record(storage->ready_event, home->native);
  }

  auto t = std::make_unique<kf_tensor_t>();
  t->ctx = ctx;
  t->desc = d;
  t->data = storage->base;
  t->ready_event = storage->ready_event;
  t->home = home;
  t->storage = std::move(storage);
  return adopt_tensor(std::move(t));
}

}  // namespace
}  // namespace kf

extern "C" {

kf_result_t kf_tensor_create(kf_context_t* ctx, const kf_tensor_desc_t* desc, kf_tensor_t** out) {
  return kf::api_call([&] {
    kf::checked(ctx, "ctx");
    KF_REQUIRE_ARG(out != nullptr, "out is NULL");
    *out = kf::create_tensor(ctx, desc, nullptr);
  });
}

kf_result_t kf_tensor_create_async(kf_context_t* ctx, const kf_tensor_desc_t* desc, kf_stream_t* s,
                                   kf_tensor_t** out) {
  return kf::api_call([&] {
    kf::checked(ctx, "ctx");
    KF_REQUIRE_ARG(out != nullptr, "out is NULL");
    *out = kf::create_tensor(ctx, desc, s);
  });
}

kf_result_t kf_tensor_wrap(kf_context_t* ctx, const kf_tensor_desc_t* desc, void* data,
                           size_t capacity_bytes, kf_deleter_fn deleter, void* user_data,
                           kf_tensor_t** out) {
  return kf_tensor_wrap_async(ctx, desc, data, capacity_bytes, deleter, user_data, nullptr, out);
}

kf_result_t kf_tensor_wrap_async(kf_context_t* ctx, const kf_tensor_desc_t* desc, void* data,
                                 size_t capacity_bytes, kf_deleter_fn deleter, void* user_data,
                                 kf_stream_t* s, kf_tensor_t** out) {
  return kf::api_call([&] {
    kf::cuda::run_graph_releases();
    kf::checked(ctx, "ctx");
    KF_REQUIRE_ARG(out != nullptr, "out is NULL");
    // (NULL: the default stream, as kf_tensor_wrap, and no ready event below.)
    kf_stream_t* const home = kf::resolve_stream(ctx, s, "s");
    int64_t span = 0;
    kf_tensor_desc_t d = kf::normalize_desc(desc, "desc", &span);
    size_t elem = kf::dtype_size(d.dtype);
    size_t reach = static_cast<size_t>(span) * elem;
    KF_REQUIRE_ARG(span == 0 || data != nullptr, "data is NULL but desc (shape %s) has elements",
                   kf::shape_string(d).c_str());
    // (Views of the tensor are bounded by capacity_bytes: NULL memory has none.)
    KF_REQUIRE_ARG(data != nullptr || capacity_bytes == 0,
                   "data is NULL but capacity_bytes is %zu, not 0", capacity_bytes);
    KF_REQUIRE_ARG(
        reach <= capacity_bytes,
        "desc (shape %s, strides %s, %s) reaches %zu bytes from data but capacity_bytes is %zu",
        kf::shape_string(d).c_str(), kf::strides_string(d).c_str(), kf::dtype_name(d.dtype), reach,
        capacity_bytes);
    KF_REQUIRE_ARG(reinterpret_cast<uintptr_t>(data) % elem == 0,
                   "data (%p) is not aligned to the %zu-byte %s element", data, elem,
                   kf::dtype_name(d.dtype));
    if (ctx->is_cuda() && span > 0) {
      kf::activate(ctx);
      kf::cuda::check_device_pointer(data, ctx->device_id, "data");
    }

    auto storage = std::make_shared<kf::Storage>();
    storage->base = data;
    storage->bytes = capacity_bytes;
    storage->device_type = ctx->device_type;
    storage->device_id = ctx->device_id;
    // Given a home stream, the contents are ready in its order as of now: an event marks that
    // point, so that a use on another stream waits for it (prepare_for_stream), as for memory
    // the pool allocated on that stream. Made before anything that must be undone.
    // Until the storage's release owns the event, a failure below destroys it here.
    struct EventGuard {
      void** event;
      ~EventGuard() {
        if (event != nullptr) kf::cuda::event_destroy(*event);
      }
    } guard{nullptr};
    if (s != nullptr && ctx->is_cuda()) {
      kf::activate(ctx);
      storage->ready_capture = kf::cuda::capture_id(home->native);
      storage->ready_event = kf::cuda::event_create(false);
      guard.event = &storage->ready_event;
      kf::cuda::event_record(storage->ready_event, home->native);
    }
    std::function<void()> release;
    if (deleter == nullptr && storage->ready_event != nullptr) {
      kf::Storage* self = storage.get();
      release = [self] {
        try {
          kf::cuda::set_device(self->device_id);
        } catch (...) {
        }
        kf::cuda::event_destroy(self->ready_event);
      };
    } else if (deleter != nullptr) {
      kf::Storage* self = storage.get();
      release = [self, deleter, data, user_data] {
        if (self->device_type == KF_DEVICE_CUDA) {
          // The owner may free or reuse the memory at once: let enqueued work finish first.
          try {
            kf::cuda::set_device(self->device_id);
          } catch (...) {
          }
          kf::cuda::event_destroy(self->ready_event);  // (the home stream's mark; may be none)
          if (self->release_capturing != nullptr) {
            // Let go during a capture: the graph reads the memory at every replay, so the
            // deleter runs once the graph is done with it (from a later call of the library),
            // after the eager work.
            void* const marker = kf::release_marker(*self);
            const bool held = kf::cuda::hold_until_graph_done(
                self->release_capturing, [deleter, data, user_data, marker] {
                  {
                    const kf::cuda::RelaxedCaptureMode relaxed;
                    if (marker != nullptr) {
                      try {
                        kf::cuda::event_synchronize(marker);
                      } catch (...) {
                        kf::cuda::synchronize_quietly(nullptr);
                      }
                    } else {
                      kf::cuda::synchronize_quietly(nullptr);
                    }
                  }
                  kf::cuda::event_destroy(marker);
                  deleter(data, user_data);
                });
            if (held) return;
            kf::cuda::event_destroy(marker);  // the capture has ended since
          }
          // (nullptr: the device, also for a release ordered on the legacy stream.) Relaxed: the
          // stream waited for is eager, and another thread's capture in the global mode would
          // refuse the wait and be invalidated by it.
          const kf::cuda::RelaxedCaptureMode relaxed;
          kf::cuda::synchronize_quietly(
              self->release_stream == kf::kUnorderedRelease ? nullptr : self->release_stream);
        }
        deleter(data, user_data);
      };
    }
    auto t = std::make_unique<kf_tensor_t>();
    t->ctx = ctx;
    t->desc = d;
    t->data = data;
    t->ready_event = storage->ready_event;
    t->home = home;
    t->storage = storage;
    kf_tensor_t* handle = kf::adopt_tensor(std::move(t));
    storage->release = std::move(release);  // only now: a failed wrap never calls the deleter
    guard.event = nullptr;
    *out = handle;
  });
}

kf_result_t kf_tensor_create_view(const kf_tensor_t* base, const kf_tensor_desc_t* desc,
                                  int64_t offset_elements, kf_tensor_t** out) {
  return kf::api_call([&] {
    kf::checked(base, "base");
    KF_REQUIRE_ARG(out != nullptr, "out is NULL");
    int64_t span = 0;
    kf_tensor_desc_t d = kf::normalize_desc(desc, "desc", &span);
    KF_REQUIRE(d.dtype == base->desc.dtype, KF_ERROR_DTYPE_MISMATCH,
               "desc->dtype is %s but base is %s", kf::dtype_name(d.dtype),
               kf::dtype_name(base->desc.dtype));
    KF_REQUIRE_ARG(offset_elements >= 0, "offset_elements is %" PRId64 "; it must be non-negative",
                   offset_elements);
    const kf::Storage& storage = *base->storage;
    size_t elem = kf::dtype_size(d.dtype);
    uint64_t base_offset = base->data == nullptr
                               ? 0
                               : static_cast<uint64_t>(static_cast<const char*>(base->data) -
                                                       static_cast<const char*>(storage.base));
    uint64_t end = 0;  // bytes from the storage's start to the end of the view
    bool overflow = __builtin_add_overflow(static_cast<uint64_t>(offset_elements),
                                           static_cast<uint64_t>(span), &end) ||
                    __builtin_mul_overflow(end, static_cast<uint64_t>(elem), &end) ||
                    __builtin_add_overflow(end, base_offset, &end);
    KF_REQUIRE_ARG(!overflow,
                   "the view (shape %s, strides %s, offset %" PRId64
                   " elements) reaches past any memory: its extent in bytes overflows",
                   kf::shape_string(d).c_str(), kf::strides_string(d).c_str(), offset_elements);
    KF_REQUIRE_ARG(end <= storage.bytes,
                   "the view (shape %s, strides %s, offset %" PRId64
                   " elements) reaches %llu bytes into base's memory, which holds %zu bytes",
                   kf::shape_string(d).c_str(), kf::strides_string(d).c_str(), offset_elements,
                   static_cast<unsigned long long>(end), storage.bytes);
    auto t = std::make_unique<kf_tensor_t>();
    t->ctx = base->ctx;
    t->desc = d;
    t->data = base->data == nullptr && offset_elements == 0
                  ? nullptr
                  : static_cast<char*>(storage.base) + base_offset +
                        static_cast<uint64_t>(offset_elements) * elem;
    t->storage = base->storage;
    t->read_only = base->read_only;
    t->ready_event = base->ready_event;
    *out = kf::adopt_tensor(std::move(t), base);
  });
}

kf_result_t kf_tensor_destroy(kf_tensor_t* t) {
  return kf::api_call([&] {
    kf::cuda::run_graph_releases();
    if (t == nullptr) return;
    kf::checked(t, "t");
    {
      std::lock_guard<std::mutex> lock(t->ctx->mutex);
      // Gone meanwhile: another thread's destroy of it, or of its context, took it first.
      KF_REQUIRE(t->ctx->tensors.erase(t) == 1, KF_ERROR_INVALID_HANDLE,
                 "t is not a live tensor (another thread destroyed it, or its context)");
    }
    kf::unregister_handle(t);
    kf::delete_tensor(t);
  });
}

kf_result_t kf_tensor_get_desc(const kf_tensor_t* t, kf_tensor_desc_t* out) {
  return kf::api_call([&] {
    kf::checked(t, "t");
    KF_REQUIRE_ARG(out != nullptr, "out is NULL");
    *out = t->desc;
  });
}

kf_result_t kf_tensor_get_data(const kf_tensor_t* t, void** out) {
  return kf::api_call([&] {
    kf::checked(t, "t");
    KF_REQUIRE_ARG(out != nullptr, "out is NULL");
    *out = t->data;
  });
}

kf_result_t kf_tensor_get_device(const kf_tensor_t* t, kf_device_type_t* type, int32_t* device_id) {
  return kf::api_call([&] {
    kf::checked(t, "t");
    if (type != nullptr) *type = t->ctx->device_type;
    if (device_id != nullptr) *device_id = t->ctx->device_id;
  });
}

kf_result_t kf_tensor_get_context(const kf_tensor_t* t, kf_context_t** out) {
  return kf::api_call([&] {
    kf::checked(t, "t");
    KF_REQUIRE_ARG(out != nullptr, "out is NULL");
    *out = t->ctx;
  });
}

}  // extern "C"
