// CUDA runtime calls of the runtime layer (see cuda_api.hpp); stubs in a CPU-only build.
#include "core/runtime/cuda/cuda_api.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "core/runtime/error.hpp"

#if KF_WITH_CUDA
#include <cuda.h>

#include "core/runtime/cuda/cuda_check.hpp"

namespace kf {
namespace cuda {

namespace {
cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }
cudaEvent_t as_event(void* e) { return static_cast<cudaEvent_t>(e); }
}  // namespace

int32_t device_count() noexcept {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // no driver or no GPU: not an error for the caller, just no devices
    return 0;
  }
  return count;
}

void get_properties(int32_t device, kf_device_properties_t* props) {
  cudaDeviceProp p;
  check(cudaGetDeviceProperties(&p, device),
        "reading the CUDA device's properties (cudaGetDeviceProperties)");
  std::memset(props->name, 0, sizeof(props->name));
  std::memcpy(props->name, p.name,
              strnlen(p.name, std::min(sizeof(p.name), sizeof(props->name) - 1)));
  props->device_type = KF_DEVICE_CUDA;
  props->device_id = device;
  props->compute_capability_major = p.major;
  props->compute_capability_minor = p.minor;
  props->multiprocessor_count = p.multiProcessorCount;
  props->total_memory_bytes = p.totalGlobalMem;
  props->l2_cache_bytes = p.l2CacheSize > 0 ? static_cast<uint64_t>(p.l2CacheSize) : 0;
  priority_range(device, &props->stream_priority_least, &props->stream_priority_greatest);
}

namespace {

using CtxGetCurrentFn = CUresult (*)(CUcontext*);

// The driver's cuCtxGetCurrent (a thread-local read), reached through the runtime: the library
// never links libcuda. Null when the driver does not provide it.
CtxGetCurrentFn ctx_get_current() {
  static const CtxGetCurrentFn fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &f, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return CtxGetCurrentFn{nullptr};
    }
    return reinterpret_cast<CtxGetCurrentFn>(f);
  }();
  return fn;
}

constexpr int kMaxDevices = 64;
// The primary context of each device, as the driver reported it current right after
// cudaSetDevice; null until then.
std::atomic<CUcontext> primary_context[kMaxDevices];

}  // namespace

void set_device(int32_t device) {
  // Every entry point calls this. Fast path: the thread's current driver context is already the
  // device's primary context (one thread-local read in the driver, about a third of the cost of
  // cudaGetDevice on an H200 host).
  CtxGetCurrentFn get_current = ctx_get_current();
  const bool known = device >= 0 && device < kMaxDevices;
  CUcontext current = nullptr;
  if (known && get_current != nullptr && get_current(&current) == CUDA_SUCCESS &&
      current != nullptr && current == primary_context[device].load(std::memory_order_acquire))
    return;
  int runtime_device = -1;
  const bool first = known && primary_context[device].load(std::memory_order_acquire) == nullptr;
  if (!first && cudaGetDevice(&runtime_device) == cudaSuccess && runtime_device == device) return;
  check(cudaSetDevice(device), "selecting the CUDA device (cudaSetDevice)");
  // cudaSetDevice made the device's primary context current: remember it for the fast path.
  if (known && get_current != nullptr && get_current(&current) == CUDA_SUCCESS &&
      current != nullptr)
    primary_context[device].store(current, std::memory_order_release);
}

void priority_range(int32_t device, int32_t* least, int32_t* greatest) {
  set_device(device);
  int lo = 0, hi = 0;
  check(cudaDeviceGetStreamPriorityRange(&lo, &hi), "reading the stream priority range");
  *least = lo;
  *greatest = hi;
}

void* stream_create(int32_t priority, bool non_blocking) {
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithPriority(&s, non_blocking ? cudaStreamNonBlocking : cudaStreamDefault,
                                     priority),
        "creating a CUDA stream (cudaStreamCreateWithPriority)");
  return s;
}

void stream_destroy(void* stream) noexcept {
  if (stream != nullptr && cudaStreamDestroy(as_stream(stream)) != cudaSuccess) cudaGetLastError();
}

void stream_synchronize(void* stream) {
  check(cudaStreamSynchronize(as_stream(stream)), "waiting for the stream (cudaStreamSynchronize)");
}

void device_synchronize() {
  check(cudaDeviceSynchronize(), "waiting for the device (cudaDeviceSynchronize)");
}

void synchronize_quietly(void* stream) noexcept {
  cudaError_t err =
      stream != nullptr ? cudaStreamSynchronize(as_stream(stream)) : cudaDeviceSynchronize();
  if (err != cudaSuccess) cudaGetLastError();
}

int32_t stream_priority(void* stream) {
  int p = 0;
  check(cudaStreamGetPriority(as_stream(stream), &p), "reading the stream's priority");
  return p;
}

int32_t stream_device(void* stream) {
#if CUDART_VERSION >= 12080
  int device = -1;
  check(cudaStreamGetDevice(as_stream(stream), &device),
        "reading the stream's device (cudaStreamGetDevice)");
  return device;
#else
  (void)stream;
  return -1;
#endif
}

uint64_t capture_id(void* stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  const cudaError_t err = cudaStreamGetCaptureInfo(as_stream(stream), &status, &id);
  if (err == cudaErrorStreamCaptureImplicit) {
    cudaGetLastError();
    return kCaptureUnknown;
  }
  check(err, "reading the stream's capture state (cudaStreamGetCaptureInfo)");
  if (status == cudaStreamCaptureStatusNone) return 0;
  return status == cudaStreamCaptureStatusActive && id != 0 ? id : kCaptureUnknown;
}

RelaxedCaptureMode::RelaxedCaptureMode() noexcept {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  exchanged_ = cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess;
  if (exchanged_) {
    previous_ = static_cast<int>(mode);
  } else {
    cudaGetLastError();
  }
}

RelaxedCaptureMode::~RelaxedCaptureMode() {
  if (!exchanged_) return;
  cudaStreamCaptureMode mode = static_cast<cudaStreamCaptureMode>(previous_);
  if (cudaThreadExchangeStreamCaptureMode(&mode) != cudaSuccess) cudaGetLastError();
}

void* event_create(bool timing) {
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming),
        "creating a CUDA event (cudaEventCreateWithFlags)");
  return e;
}

void event_destroy(void* event) noexcept {
  if (event == nullptr) return;
  const RelaxedCaptureMode relaxed;  // a tensor's release may come while a stream is captured
  if (cudaEventDestroy(as_event(event)) != cudaSuccess) cudaGetLastError();
}

void event_record(void* event, void* stream) {
  check(cudaEventRecord(as_event(event), as_stream(stream)),
        "recording an event (cudaEventRecord)");
}

void stream_wait_event(void* stream, void* event) {
  check(cudaStreamWaitEvent(as_stream(stream), as_event(event), 0),
        "making a stream wait for an event (cudaStreamWaitEvent)");
}

void event_synchronize(void* event) {
  check(cudaEventSynchronize(as_event(event)), "waiting for an event (cudaEventSynchronize)");
}

bool event_query(void* event) {
  cudaError_t err = cudaEventQuery(as_event(event));
  if (err == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  check(err, "querying an event (cudaEventQuery)");
  return true;
}

float event_elapsed_ms(void* start, void* end) {
  float ms = 0.0f;
  check(cudaEventElapsedTime(&ms, as_event(start), as_event(end)),
        "timing two events (cudaEventElapsedTime)");
  return ms;
}

void copy_host_to_device(void* dst, const void* src, size_t bytes, void* stream) {
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, as_stream(stream)),
        "copying host memory to the device (cudaMemcpyAsync)");
}

void copy_device_to_host(void* dst, const void* src, size_t bytes, void* stream) {
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, as_stream(stream)),
        "copying device memory to the host (cudaMemcpyAsync)");
}

void check_device_pointer(const void* ptr, int32_t device, const char* param_name) {
  cudaPointerAttributes attr;
  cudaError_t err = cudaPointerGetAttributes(&attr, ptr);
  if (err != cudaSuccess) {
    cudaGetLastError();
    fail(KF_ERROR_INVALID_ARGUMENT, "%s (%p) is not memory the CUDA runtime knows: %s", param_name,
         ptr, cudaGetErrorString(err));
  }
  if (attr.type == cudaMemoryTypeManaged) return;
  if (attr.type != cudaMemoryTypeDevice) {
    fail(KF_ERROR_INVALID_ARGUMENT,
         "%s (%p) is %s memory, but a CUDA context needs device or managed memory", param_name, ptr,
         attr.type == cudaMemoryTypeHost ? "pinned host" : "unregistered host");
  }
  if (attr.device != device) {
    fail(KF_ERROR_DEVICE_MISMATCH,
         "%s (%p) is memory of CUDA device %d, but the context is on device %d", param_name, ptr,
         attr.device, device);
  }
}

}  // namespace cuda
}  // namespace kf

#else  // CPU-only build

namespace kf {
namespace cuda {

namespace {
[[noreturn]] void no_cuda() {
  fail(KF_ERROR_NOT_SUPPORTED,
       "this build of kernel_fusion has no CUDA backend (built with KF_ENABLE_CUDA=OFF)");
}
}  // namespace

int32_t device_count() noexcept { return 0; }
void get_properties(int32_t, kf_device_properties_t*) { no_cuda(); }
void set_device(int32_t) { no_cuda(); }
void priority_range(int32_t, int32_t*, int32_t*) { no_cuda(); }
void* stream_create(int32_t, bool) { no_cuda(); }
void stream_destroy(void*) noexcept {}
void stream_synchronize(void*) { no_cuda(); }
void device_synchronize() { no_cuda(); }
void synchronize_quietly(void*) noexcept {}
int32_t stream_priority(void*) { no_cuda(); }
int32_t stream_device(void*) { no_cuda(); }
uint64_t capture_id(void*) { no_cuda(); }
RelaxedCaptureMode::RelaxedCaptureMode() noexcept {}
RelaxedCaptureMode::~RelaxedCaptureMode() {
  (void)previous_;
  (void)exchanged_;
}
void* event_create(bool) { no_cuda(); }
void event_destroy(void*) noexcept {}
void event_record(void*, void*) { no_cuda(); }
void stream_wait_event(void*, void*) { no_cuda(); }
void event_synchronize(void*) { no_cuda(); }
bool event_query(void*) { no_cuda(); }
float event_elapsed_ms(void*, void*) { no_cuda(); }
void copy_host_to_device(void*, const void*, size_t, void*) { no_cuda(); }
void copy_device_to_host(void*, const void*, size_t, void*) { no_cuda(); }
void check_device_pointer(const void*, int32_t, const char*) { no_cuda(); }

}  // namespace cuda
}  // namespace kf

#endif
