// Per-context memory pools. The host pool caches 64-byte aligned blocks by size class; the device
// pool is a CUDA stream-ordered memory pool (cudaMemPool_t). Both keep statistics and enforce the
// context's limit (the host pool on reserved bytes, the device pool on bytes in use), failing
// with KF_ERROR_OUT_OF_MEMORY instead of growing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernel_fusion/types.h"

namespace kf {

// deallocate's native_stream when nothing orders the release (the last owner of a block was not
// a tensor, e.g. a DLPack export outliving its context): the device pool waits for the device
// first. nullptr is the legacy default stream, a stream like any other (a wrapped native stream
// 0, PyTorch's default), whose releases are ordered on it without a device-wide wait.
inline void* const kUnorderedRelease = reinterpret_cast<void*>(~uintptr_t{0});

class MemoryPool {
 public:
  virtual ~MemoryPool() = default;
  // Stream-ordered on native_stream (a cudaStream_t; ignored by the host pool). Throws kf::Error
  // (KF_ERROR_OUT_OF_MEMORY with the requested size and the limit in the message) on failure.
  virtual void* allocate(size_t bytes, void* native_stream) = 0;
  virtual void deallocate(void* ptr, size_t bytes, void* native_stream) noexcept = 0;
  // The release of a block that a CUDA graph held (cuda::hold_until_graph_done), when the graph
  // lets it go: ordered after `event` (a cudaEvent_t recorded when the last owner let go, behind
  // the eager work on the block), or after all work on the device when event is nullptr. The
  // caller keeps the event. The host pool ignores both.
  virtual void deallocate_after_event(void* ptr, size_t bytes, void* /*event*/) noexcept {
    deallocate(ptr, bytes, nullptr);
  }
  virtual void stats(kf_memory_stats_t* out) const = 0;  // fills every field but struct_size
  virtual void reset_peak() = 0;
  virtual void trim(uint64_t keep_bytes) = 0;
};

std::shared_ptr<MemoryPool> make_host_pool(uint64_t limit_bytes);
// Throws KF_ERROR_NOT_SUPPORTED in a CPU-only build.
std::shared_ptr<MemoryPool> make_device_pool(int32_t device_id, uint64_t limit_bytes);

// Alignment of every host pool block: a cache line, and enough for any vector load.
constexpr size_t kHostAlignment = 64;

}  // namespace kf
