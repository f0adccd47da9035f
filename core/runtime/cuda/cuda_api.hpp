// The CUDA runtime calls the runtime layer needs, behind functions free of CUDA types, so the
// context, stream, event and tensor code compiles unchanged in a CPU-only build. Without
// KF_WITH_CUDA, device_count() is 0 and everything else throws KF_ERROR_NOT_SUPPORTED.
// Every failure throws kf::Error(KF_ERROR_CUDA) naming the CUDA error and what was being done.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernel_fusion/types.h"

namespace kf {
namespace cuda {

// Usable devices; 0 when the build has no CUDA, or there is no driver or GPU.
int32_t device_count() noexcept;
void get_properties(int32_t device, kf_device_properties_t* props);  // fills the whole struct
// Makes device current on the calling thread (each entry point calls it: threads differ).
void set_device(int32_t device);
void priority_range(int32_t device, int32_t* least, int32_t* greatest);

void* stream_create(int32_t priority, bool non_blocking);  // on the current device
void stream_destroy(void* stream) noexcept;
void stream_synchronize(void* stream);
void device_synchronize();  // the current device
// cudaStreamPerThread: names the default stream of whichever thread passes it.
inline void* const kPerThreadStream = reinterpret_cast<void*>(uintptr_t{2});
// Waits for a stream, or for the whole current device when stream is nullptr; errors are
// ignored (for teardown paths that cannot report them).
void synchronize_quietly(void* stream) noexcept;
int32_t stream_priority(void* stream);
// The device a stream belongs to, or -1 when this runtime cannot tell.
int32_t stream_device(void* stream);
// 0 when `stream` is not being captured into a CUDA graph; else the id of its capture sequence
// (unique in the process), or kCaptureUnknown for a capture already invalidated and for the
// legacy stream while a blocking stream is capturing (nothing may be ordered against it then).
constexpr uint64_t kCaptureUnknown = UINT64_MAX;
uint64_t capture_id(void* stream);

// For its lifetime, the calling thread's stream-capture interaction mode is relaxed
// (cudaThreadExchangeStreamCaptureMode), then restored. While a capture began in the global mode
// is in progress on any thread, or one in the thread-local mode on this thread, CUDA refuses the
// calls it counts as potentially unsafe (an event query or host wait, a pinned allocation) and
// invalidates the capture. The library makes such calls on its own behalf for work outside every
// capture (the wait for an eagerly allocated tensor, the release of an eager block, the item
// table's staging slots); under this guard they run, and the capture is left alone. Only for calls
// that touch nothing a capture records.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() noexcept;
  ~RelaxedCaptureMode();
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  int previous_ = 0;
  bool exchanged_ = false;
};

void* event_create(bool timing);
void event_destroy(void* event) noexcept;
void event_record(void* event, void* stream);
void stream_wait_event(void* stream, void* event);
void event_synchronize(void* event);
bool event_query(void* event);  // true when complete
float event_elapsed_ms(void* start, void* end);

// Stream-ordered copies; the caller synchronises when it needs the host to wait.
void copy_host_to_device(void* dst, const void* src, size_t bytes, void* stream);
void copy_device_to_host(void* dst, const void* src, size_t bytes, void* stream);

// Throws unless ptr is device (or managed) memory usable on device; param names it in messages.
void check_device_pointer(const void* ptr, int32_t device, const char* param_name);

}  // namespace cuda
}  // namespace kf
