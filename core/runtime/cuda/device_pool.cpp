// The device memory pool of CUDA contexts: a cudaMemPool_t of the context's own (not the
// device's default pool, which other libraries share), used with stream-ordered allocation.
// CUDA caches freed blocks up to the release threshold; statistics and the limit are kept here.
#include <algorithm>
#include <mutex>
#include <unordered_map>

#include "core/runtime/error.hpp"
#include "core/runtime/memory_pool.hpp"

#if KF_WITH_CUDA
#include <cuda_runtime_api.h>

#include "core/runtime/cuda/cuda_api.hpp"
#include "core/runtime/cuda/cuda_check.hpp"

namespace kf {
namespace {

class DevicePool final : public MemoryPool {
 public:
  DevicePool(int32_t device, uint64_t limit) : device_(device), limit_(limit) {
    cuda::check(cudaSetDevice(device), "selecting the CUDA device (cudaSetDevice)");
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    cuda::check(cudaMemPoolCreate(&pool_, &props),
                "creating the context's memory pool (cudaMemPoolCreate)");
    // Keep freed memory cached (up to the limit) instead of returning it at every synchronisation.
    uint64_t threshold = limit != 0 ? limit : UINT64_MAX;
    cudaError_t err = cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &threshold);
    if (err == cudaSuccess) err = cudaStreamCreateWithFlags(&late_, cudaStreamNonBlocking);
    if (err != cudaSuccess) {
      cudaMemPoolDestroy(pool_);
      cuda::fail_cuda(err, "setting up the context's memory pool");
    }
  }

  ~DevicePool() override {
    // Outstanding allocations or pending frees make CUDA release the pool once they are done.
    cudaSetDevice(device_);
    if (cudaStreamDestroy(late_) != cudaSuccess) cudaGetLastError();
    if (cudaMemPoolDestroy(pool_) != cudaSuccess) cudaGetLastError();
  }

  void* allocate(size_t bytes, void* native_stream) override {
    if (bytes == 0) return nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (limit_ != 0 && (bytes > limit_ || in_use_ + bytes > limit_)) {
        fail(KF_ERROR_OUT_OF_MEMORY,
             "cannot allocate %zu bytes: the context's memory limit is %llu bytes and %llu bytes "
             "are in use",
             bytes, static_cast<unsigned long long>(limit_),
             static_cast<unsigned long long>(in_use_));
      }
      in_use_ += bytes;  // claimed now so that concurrent requests see it against the limit
    }
    cuda::check(cudaSetDevice(device_), "selecting the CUDA device (cudaSetDevice)");
    if (limit_ != 0 && reserved() + bytes > limit_) {
      cudaMemPoolTrimTo(pool_,
                        limit_ - bytes);  // give back cached blocks before growing past the limit
    }
    void* p = nullptr;
    cudaError_t err =
        cudaMallocFromPoolAsync(&p, bytes, pool_, static_cast<cudaStream_t>(native_stream));
    std::lock_guard<std::mutex> lock(mutex_);
    if (err != cudaSuccess) {
      in_use_ -= bytes;
      cudaGetLastError();
      fail(err == cudaErrorMemoryAllocation ? KF_ERROR_OUT_OF_MEMORY : KF_ERROR_CUDA,
           "cannot allocate %zu bytes of device memory from the context's pool: %s (%llu bytes in "
           "use)",
           bytes, cudaGetErrorString(err), static_cast<unsigned long long>(in_use_));
    }
    try {
      live_.emplace(p, bytes);
    } catch (...) {
      cudaFreeAsync(p, static_cast<cudaStream_t>(native_stream));
      in_use_ -= bytes;
      throw;
    }
    peak_ = std::max(peak_, in_use_);
    return p;
  }

  void deallocate(void* ptr, size_t /*bytes*/, void* native_stream) noexcept override {
    const size_t bytes = forget(ptr);
    if (bytes == 0) return;  // not ours
    cudaStream_t stream = static_cast<cudaStream_t>(native_stream);
    if (native_stream == kUnorderedRelease) {
      // No stream to order on (the last owner was not a tensor, e.g. a DLPack export after its
      // context was destroyed): wait for the device so no pending work can still read the block.
      // If the wait fails (a stream of the device is being captured, or a kernel faulted), work
      // may still use the block: it is left to CUDA's pool, never handed out again.
      stream = nullptr;
      if (cudaDeviceSynchronize() != cudaSuccess) {
        cudaGetLastError();
        std::lock_guard<std::mutex> lock(mutex_);
        in_use_ -= bytes;
        return;
      }
    }
    {
      // Released while a stream of the process is captured (global mode): a stream-ordered free
      // on an eager stream is one of the calls CUDA then refuses, invalidating the capture, unless
      // this thread's mode is relaxed (cuda_api.hpp). On a stream in the same capture as the
      // allocation, the free is a node of the graph either way.
      const cuda::RelaxedCaptureMode relaxed;
      if (cudaFreeAsync(ptr, stream) != cudaSuccess) cudaGetLastError();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    in_use_ -= bytes;
  }

  void deallocate_after_event(void* ptr, size_t /*bytes*/, void* event) noexcept override {
    const size_t bytes = forget(ptr);
    if (bytes == 0) return;  // not ours
    // On the pool's own stream, which no capture ever records: it may be used whatever the
    // caller's streams are doing. Relaxed: the free and the wait touch no capture in progress.
    const cuda::RelaxedCaptureMode relaxed;
    const cudaError_t ordered = event != nullptr
                                    ? cudaStreamWaitEvent(late_, static_cast<cudaEvent_t>(event), 0)
                                    : cudaDeviceSynchronize();
    if (ordered != cudaSuccess || cudaFreeAsync(ptr, late_) != cudaSuccess) {
      // Unordered, the block is left to CUDA's pool and never handed out again.
      cudaGetLastError();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    in_use_ -= bytes;
  }

  void stats(kf_memory_stats_t* out) const override {
    uint64_t reserved_now = reserved();
    std::lock_guard<std::mutex> lock(mutex_);
    out->in_use_bytes = in_use_;
    out->reserved_bytes = std::max(reserved_now, in_use_);
    out->peak_in_use_bytes = peak_;
    out->limit_bytes = limit_;
    out->allocation_count = live_.size();
  }

  void reset_peak() override {
    std::lock_guard<std::mutex> lock(mutex_);
    peak_ = in_use_;
  }

  // The caller synchronises the context's streams first so pending frees have completed.
  void trim(uint64_t keep_bytes) override {
    uint64_t in_use;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      in_use = in_use_;
    }
    uint64_t keep = in_use + keep_bytes < in_use ? UINT64_MAX : in_use + keep_bytes;
    cuda::check(cudaSetDevice(device_), "selecting the CUDA device (cudaSetDevice)");
    cuda::check(cudaMemPoolTrimTo(pool_, static_cast<size_t>(keep)),
                "trimming the memory pool (cudaMemPoolTrimTo)");
  }

 private:
  // Takes ptr out of the live blocks and returns its size (0 when it is not one of them), with
  // this pool's device made current for the release that follows.
  size_t forget(void* ptr) noexcept {
    if (ptr == nullptr) return 0;
    size_t bytes = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = live_.find(ptr);
      if (it == live_.end()) return 0;
      bytes = it->second;
      live_.erase(it);
    }
    cudaSetDevice(device_);
    return bytes;
  }

  uint64_t reserved() const {
    uint64_t value = 0;
    if (cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemCurrent, &value) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return value;
  }

  const int32_t device_;
  const uint64_t limit_;
  cudaMemPool_t pool_ = nullptr;
  cudaStream_t late_ = nullptr;  // the releases that graphs held (deallocate_after_event)
  mutable std::mutex mutex_;
  std::unordered_map<void*, size_t> live_;
  uint64_t in_use_ = 0;
  uint64_t peak_ = 0;
};

}  // namespace

std::shared_ptr<MemoryPool> make_device_pool(int32_t device_id, uint64_t limit_bytes) {
  return std::make_shared<DevicePool>(device_id, limit_bytes);
}

}  // namespace kf

#else  // CPU-only build

namespace kf {

std::shared_ptr<MemoryPool> make_device_pool(int32_t, uint64_t) {
  fail(KF_ERROR_NOT_SUPPORTED,
       "this build of kernel_fusion has no CUDA backend (built with KF_ENABLE_CUDA=OFF)");
}

}  // namespace kf

#endif
