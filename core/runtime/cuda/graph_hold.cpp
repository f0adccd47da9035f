// Releases held by CUDA graphs (see graph_hold.hpp).
#include "core/runtime/cuda/graph_hold.hpp"

#include <atomic>
#include <mutex>
#include <utility>
#include <vector>

#if KF_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace kf {
namespace cuda {
namespace {

struct Released {
  std::mutex mutex;
  std::vector<std::function<void()>*> ready;  // let go by CUDA, not run yet
  std::atomic<bool> any{false};
};

// Never destroyed: CUDA may drop a user object while the process exits.
Released& released() {
  static Released* const r = new Released;
  return *r;
}

#if KF_WITH_CUDA
// The user object's destructor, on CUDA's thread: no CUDA call, no waiting beyond a short lock.
void on_graph_done(void* payload) {
  auto* release = static_cast<std::function<void()>*>(payload);
  Released& r = released();
  std::lock_guard<std::mutex> lock(r.mutex);
  try {
    r.ready.push_back(release);
  } catch (...) {
    // Out of memory: the release is dropped and its memory stays reserved. It is not destroyed
    // here either, since destroying it may make CUDA calls (a fused program's module unload).
    return;
  }
  r.any.store(true, std::memory_order_release);
}
#endif

}  // namespace

bool hold_until_graph_done(void* capturing_stream, std::function<void()> release) noexcept {
#if KF_WITH_CUDA
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  cudaGraph_t graph = nullptr;
  if (cudaStreamGetCaptureInfo(static_cast<cudaStream_t>(capturing_stream), &status, &id, &graph) !=
      cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  if (status != cudaStreamCaptureStatusActive || graph == nullptr) return false;
  std::function<void()>* payload = nullptr;
  try {
    payload = new std::function<void()>(std::move(release));
  } catch (...) {
    return true;  // dropped: the memory stays reserved
  }
  // While a capture is in progress, the graph it builds may be given references (every
  // operation but destruction and node removal is allowed on it). The object's one reference
  // moves to the graph; each executable graph instantiated from it takes its own.
  cudaUserObject_t object = nullptr;
  if (cudaUserObjectCreate(&object, payload, &on_graph_done, 1, cudaUserObjectNoDestructorSync) !=
      cudaSuccess) {
    cudaGetLastError();
    delete payload;  // dropped: the memory stays reserved
    return true;
  }
  if (cudaGraphRetainUserObject(graph, object, 1, cudaGraphUserObjectMove) != cudaSuccess) {
    cudaGetLastError();
    // The reference stays with this thread and is never released: the release never runs, and
    // the memory stays reserved rather than freed while the graph may read it.
    return true;
  }
  return true;
#else
  (void)capturing_stream;
  (void)release;
  return false;
#endif
}

void run_graph_releases() noexcept {
  Released& r = released();
  if (!r.any.load(std::memory_order_acquire)) return;
  std::vector<std::function<void()>*> ready;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    ready.swap(r.ready);
    r.any.store(false, std::memory_order_relaxed);
  }
#if KF_WITH_CUDA
  // The releases select their own device; the caller's current device is kept.
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    device = -1;
  }
#endif
  for (std::function<void()>* release : ready) {
    try {
      (*release)();
    } catch (...) {
    }
    delete release;
  }
#if KF_WITH_CUDA
  if (device >= 0 && cudaSetDevice(device) != cudaSuccess) cudaGetLastError();
#endif
}

}  // namespace cuda
}  // namespace kf
