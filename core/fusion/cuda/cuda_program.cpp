// A generated kernel loaded for a context's device, and its launches.
//
// Loading goes through the CUDA runtime's library management API (cudaLibraryLoadData,
// cudaLibraryGetKernel): no libcuda link. Launches go through the driver's cuLaunchKernel, or on
// sm_90 cuLaunchKernelEx as programmatic dependent launches (reached via
// cudaGetDriverEntryPointByVersion, core/runtime/cuda/launch.cpp), with the whole parameter
// block as one __grid_constant__ parameter (up to 32764 bytes on sm_70+).
//
// When the item table does not fit the parameter (large capacities: 1000 crops per launch), it is
// written into a pinned staging slot, copied stream-ordered into a block of the context's device
// pool (cudaMemcpyAsync; freed stream-ordered after the kernel), and the parameter carries its
// address. A staging slot is reused once the event recorded after its kernel has completed, so
// the host never waits for the device unless more than kMaxStagingSlots launches are in flight.
// A launch on a stream being captured writes its table with kernels instead (table_upload.hpp),
// so that the graph owns it.
#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "core/fusion/cuda_program.hpp"
#include "core/fusion/kernel_params.hpp"
#include "core/runtime/context.hpp"
#include "core/runtime/error.hpp"

#if KF_WITH_CUDA
#include <cuda_runtime_api.h>

#include "core/fusion/cuda/table_upload.hpp"
#include "core/runtime/cuda/cuda_api.hpp"
#include "core/runtime/cuda/cuda_check.hpp"
#include "core/runtime/cuda/device_caps.hpp"
#include "core/runtime/cuda/launch.hpp"

namespace kf {
namespace fusion {
namespace {

constexpr size_t kMaxStagingSlots = 64;

// Pinned host buffers for item tables, each reusable once its event has completed.
class StagingSlots {
 public:
  struct Slot {
    void* host = nullptr;
    size_t bytes = 0;
    cudaEvent_t done = nullptr;  // recorded after the kernel that read the copy
    bool busy = false;           // between acquire() and release()
    bool recorded = false;
  };

  ~StagingSlots() {
    const cuda::RelaxedCaptureMode relaxed;
    for (Slot& s : slots_) {
      if (s.done != nullptr) {
        cudaEventSynchronize(s.done);
        cudaEventDestroy(s.done);
      }
      if (s.host != nullptr) cudaFreeHost(s.host);
    }
    cudaGetLastError();
  }

  // Runs only for launches on a stream that is not being captured; another thread's capture in
  // the global mode would still refuse the event queries, waits and pinned allocations below (and
  // be invalidated by them) but for the relaxed mode (cuda_api.hpp): they touch no capture.
  Slot* acquire(size_t bytes) {
    const cuda::RelaxedCaptureMode relaxed;
    std::lock_guard<std::mutex> lock(mutex_);
    for (Slot& s : slots_) {
      if (s.busy || s.bytes < bytes) continue;
      if (s.recorded && cudaEventQuery(s.done) != cudaSuccess) continue;
      s.busy = true;
      return &s;
    }
    if (slots_.size() >= kMaxStagingSlots) {
      // Too many launches in flight: wait for the oldest slot big enough (back-pressure).
      for (Slot& s : slots_) {
        if (s.busy || s.bytes < bytes) continue;
        cuda::check(cudaEventSynchronize(s.done), "waiting for a staging buffer");
        s.busy = true;
        return &s;
      }
    }
    slots_.emplace_back();
    Slot& s = slots_.back();
    s.bytes = std::max<size_t>(bytes, 64 * 1024);
    cuda::check(cudaMallocHost(&s.host, s.bytes), "allocating a pinned staging buffer");
    cuda::check(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming),
                "creating a staging event");
    s.busy = true;
    return &s;
  }

  // After the launch (recorded: the event now guards the slot) or after a failure. `retire`: a
  // copy from the slot was queued and no event was recorded after it (the launch or the record
  // failed), so nothing tells when the copy has read the slot: it is never handed out again (a
  // kernel that did launch would otherwise read a table a later launch had overwritten). It is
  // freed with the others.
  void release(Slot* s, bool recorded, bool retire = false) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (retire) return;  // stays busy
    s->busy = false;
    s->recorded = s->recorded || recorded;
  }

 private:
  std::mutex mutex_;
  std::deque<Slot> slots_;  // a deque: growing it keeps the Slot* other launches hold valid
};

class CudaProgram final : public Program {
 public:
  CudaProgram(kf_context_t* ctx, ParamLayout layout, cudaLibrary_t library, cudaKernel_t kernel)
      : device_(ctx->device_id),
        pool_(ctx->pool),
        layout_(std::move(layout)),
        library_(library),
        kernel_(kernel),
        function_(cuda::library_kernel_function(kernel)),
        dependent_(cuda::compute_major(ctx->device_id) >= 9) {
    int sms = 0, threads_per_sm = 0;
    cuda::check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device_),
                "reading the multiprocessor count");
    cuda::check(
        cudaDeviceGetAttribute(&threads_per_sm, cudaDevAttrMaxThreadsPerMultiProcessor, device_),
        "reading the threads per multiprocessor");
    // The blocks that are resident at once, from the kernel's own register use: a grid-stride
    // grid sized for full occupancy by a kernel that cannot reach it runs a partial second wave
    // (measured on H200: a 38-register chain kernel at 6 blocks per SM given 8 per SM's worth of
    // blocks reached 87.7 % of copy).
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &per_sm, reinterpret_cast<const void*>(kernel_), static_cast<int>(kBlockThreads), 0) !=
            cudaSuccess ||
        per_sm < 1) {
      cudaGetLastError();
      per_sm = std::max(1, threads_per_sm / static_cast<int>(kBlockThreads));
    }
    max_blocks_ = std::max(1, sms) * per_sm;
    if (!layout_.inline_items) staging_ = std::make_unique<StagingSlots>();
  }

  ~CudaProgram() override {
    staging_.reset();
    cudaSetDevice(device_);
    if (cudaLibraryUnload(library_) != cudaSuccess) cudaGetLastError();
  }

  void launch(kf_context_t* ctx, const LaunchPlan& plan, kf_stream_t* s) const override {
    activate(ctx);
    cudaStream_t stream = static_cast<cudaStream_t>(s->native);
    if (plan.uniform_items > 0 && layout_.compact) {
      launch_uniform(plan, stream);
      return;
    }
    launch_items(plan, stream);
  }

 private:
  // The grid for items of at most max_h x max_w output pixels (image graphs) or max_units
  // threads' worth of work (tensor graphs).
  void grid_for(size_t n_items, int64_t max_units, int64_t max_h, int64_t max_w, dim3* grid,
                dim3* threads) const {
    if (layout_.image) {
      *threads = dim3(32, kBlockThreads / 32, 1);
      const int64_t columns = std::max<int64_t>(1, (max_w + 31) / 32);
      const int64_t items = static_cast<int64_t>(std::min<size_t>(n_items, 65535));
      // Rows per thread: enough blocks for about four waves, and no fewer rows per block than
      // needed: every thread then walks several rows of its column, the item's set-up (its
      // table entry, geometry, column samples) paid once per column instead of once per pixel.
      int64_t row_blocks = std::max<int64_t>(1, (max_h + threads->y - 1) / threads->y);
      const int64_t wanted = 4 * static_cast<int64_t>(max_blocks_);
      row_blocks = std::min<int64_t>(row_blocks, std::max<int64_t>(1, wanted / (columns * items)));
      *grid = dim3(static_cast<unsigned>(columns),
                   static_cast<unsigned>(std::min<int64_t>(65535, row_blocks)),
                   static_cast<unsigned>(items));
    } else {
      *threads = dim3(kBlockThreads, 1, 1);
      // Heavy graphs (layout_.persistent): four waves of the resident blocks, each block looping
      // over its share; light ones: one pass. With a single wave the warps that the schedulers
      // favour finish early and the SMs run the end of the kernel short of warps (Nsight
      // Compute, H100, bf16 chain of 16 ops: 54.5 % achieved occupancy against 75 %); with
      // four the hardware hands the later blocks to the SMs that free up first, and a thread's
      // set-up is still paid over a quarter of its share. A/B on 8192x8192 chains (2026-11-26,
      // kf-bench, two passes each), bf16 N = 16, % of copy: H100 (16:29Z) 87.8 / 87.7 with one
      // wave, 89.3 / 89.3 with two, 90.2 / 89.9 with four, 89.8 / 89.7 with eight; H200 (16:28Z)
      // 65.6 / 65.7 with one, 70.5 / 70.6 with four (f32 N = 16 92.5 -> 92.0, bf16 N = 11 86.0
      // -> 85.6 there).
      constexpr int64_t kWaves = 4;
      const int64_t blocks = (max_units + kBlockThreads - 1) / kBlockThreads;
      const int64_t cap = layout_.persistent ? kWaves * max_blocks_ : int64_t{0x7fffffff};
      *grid = dim3(static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(blocks, cap))),
                   static_cast<unsigned>(std::min<size_t>(n_items, 65535)), 1);
    }
  }

  // The launch values, as doubles and rounded to float (kernel_params.hpp).
  void write_values(const LaunchPlan& plan, int64_t* block) const {
    std::copy(plan.values.begin(), plan.values.end(), reinterpret_cast<double*>(block));
    float* f32 = reinterpret_cast<float*>(block + layout_.f32_values_slot());
    for (size_t i = 0; i < plan.values.size(); ++i) f32[i] = static_cast<float>(plan.values[i]);
  }

  // A uniform image launch through the compact block: item 0 as `common`, the rectangles copied
  // as they are (kf_rect_t is x, y, width, height in int32, as the kernel's int[4]).
  void launch_uniform(const LaunchPlan& plan, cudaStream_t stream) const {
    static_assert(sizeof(kf_rect_t) == 16, "kf_rect_t is four int32");
    thread_local std::vector<int64_t> block;
    const size_t total_slots = layout_.param_bytes / sizeof(int64_t);
    if (block.size() < total_slots) block.resize(total_slots);
    const size_t n_items = static_cast<size_t>(plan.uniform_items);
    write_values(plan, block.data());
    block[layout_.n_items_slot()] = static_cast<int64_t>(n_items);
    block[layout_.n_items_slot() + 1] = 0;  // items: null, the uniform form
    for (size_t o = 0; o < plan.output_steps.size(); ++o)
      block[layout_.out_step_slot() + o] = plan.output_steps[o];
    const Item& item = plan.items[0];
    int64_t* common = block.data() + layout_.common_slot();
    encode_item(layout_, item, common);
    kf_rect_t* crops = reinterpret_cast<kf_rect_t*>(block.data() + layout_.crops_slot());
    if (plan.crops != nullptr) {
      std::memcpy(crops, plan.crops, n_items * sizeof(kf_rect_t));
    } else {
      std::fill(crops, crops + n_items, item.crop);
    }
    dim3 grid, threads;
    grid_for(n_items, 0, common[0], common[1], &grid, &threads);
    void* params[] = {block.data()};
    cuda::launch_library_kernel(function_, grid, threads, 0, stream, params, "fused kernel",
                                dependent_);
  }

  // Every item encoded (a uniform plan's items written out one by one).
  void launch_items(const LaunchPlan& plan, cudaStream_t stream) const {
    const size_t n_items = plan_size(plan);
    // The block is rebuilt for every launch in a per-thread buffer (no allocation once grown).
    thread_local std::vector<int64_t> block;
    const size_t header = layout_.header_slots;
    const size_t item_slots = layout_.item_slots;
    const size_t total_slots =
        std::max(header + n_items * item_slots, layout_.param_bytes / sizeof(int64_t));
    if (block.size() < total_slots) block.resize(total_slots);
    write_values(plan, block.data());
    block[layout_.n_items_slot()] = static_cast<int64_t>(n_items);
    block[layout_.n_items_slot() + 1] = 0;

    int64_t* items = block.data() + header;
    int64_t max_units = 0, max_h = 0, max_w = 0;
    for (size_t i = 0; i < n_items; ++i) {
      int64_t* dst = items + i * item_slots;
      if (plan.uniform_items > 0 && i > 0) {
        // Item 0's slots with this item's crop and output offsets.
        encode_uniform_item(layout_, items, plan.crops ? plan.crops[i] : plan.items[0].crop,
                            static_cast<int64_t>(i), plan.output_steps, dst);
      } else {
        encode_item(layout_, plan.items[i], dst);
      }
      if (layout_.image) {
        max_h = std::max(max_h, dst[0]);
        max_w = std::max(max_w, dst[1]);
      } else {
        // Vector mode: a thread takes kVector * kUnroll elements per step (the tail element by
        // element).
        const int64_t numel = dst[0];
        const int64_t per_thread = static_cast<int64_t>(layout_.vector_elements) * layout_.unroll;
        const int64_t units = dst[1] == kVector ? numel / per_thread + numel % per_thread : numel;
        max_units = std::max(max_units, units);
      }
    }

    dim3 grid, threads;
    grid_for(n_items, max_units, max_h, max_w, &grid, &threads);

    if (layout_.inline_items) {
      void* params[] = {block.data()};
      cuda::launch_library_kernel(function_, grid, threads, 0, stream, params, "fused kernel",
                                  dependent_);
      return;
    }
    launch_with_table(block.data(), n_items, grid, threads, stream);
  }

  void launch_with_table(int64_t* block, size_t n_items, dim3 grid, dim3 threads,
                         cudaStream_t stream) const {
    const size_t bytes = n_items * layout_.item_bytes();
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    cuda::check(cudaStreamIsCapturing(stream, &capture), "querying the stream's capture");
    if (capture != cudaStreamCaptureStatusNone) {
      launch_captured_table(block, bytes, grid, threads, stream);
      return;
    }
    StagingSlots::Slot* slot = staging_->acquire(bytes);
    bool queued = false, recorded = false;
    void* table = nullptr;
    try {
      std::memcpy(slot->host, block + layout_.header_slots, bytes);
      table = pool_->allocate(bytes, stream);
      cuda::check(cudaMemcpyAsync(table, slot->host, bytes, cudaMemcpyHostToDevice, stream),
                  "copying the item table to the device");
      queued = true;
      std::memcpy(&block[layout_.n_items_slot() + 1], &table, sizeof table);
      void* params[] = {block};
      cuda::launch_library_kernel(function_, grid, threads, 0, stream, params, "fused kernel",
                                  dependent_);
      cuda::check(cudaEventRecord(slot->done, stream), "recording a staging event");
      recorded = true;
    } catch (...) {
      if (table != nullptr) pool_->deallocate(table, bytes, stream);
      // A failed launch leaves the queued copy to run: an event recorded after it guards the
      // slot as after a launch. Where that record fails too, the slot is retired.
      if (queued && !recorded) {
        recorded = cudaEventRecord(slot->done, stream) == cudaSuccess;
        if (!recorded) cudaGetLastError();
      }
      staging_->release(slot, recorded, queued && !recorded);
      throw;
    }
    pool_->deallocate(table, bytes, stream);  // stream-ordered: after the kernel
    staging_->release(slot, recorded);
  }

  // Under stream capture the graph may be replayed any number of times, long after this call,
  // while eager launches reuse the staging slots, and neither an event query nor a pinned
  // allocation belongs in a capture. The table goes into the graph instead: allocated from the
  // pool in the graph, written by kernels whose parameters carry it (their nodes hold the bytes),
  // and freed in the graph after the fused kernel.
  void launch_captured_table(int64_t* block, size_t bytes, dim3 grid, dim3 threads,
                             cudaStream_t stream) const {
    void* table = pool_->allocate(bytes, stream);
    try {
      upload_through_parameters(table, block + layout_.header_slots, bytes, stream);
      std::memcpy(&block[layout_.n_items_slot() + 1], &table, sizeof table);
      void* params[] = {block};
      cuda::launch_library_kernel(function_, grid, threads, 0, stream, params, "fused kernel",
                                  dependent_);
    } catch (...) {
      pool_->deallocate(table, bytes, stream);
      throw;
    }
    pool_->deallocate(table, bytes, stream);  // in the graph, after the kernel
  }

  const int32_t device_;
  const std::shared_ptr<MemoryPool> pool_;
  const ParamLayout layout_;
  cudaLibrary_t library_;
  cudaKernel_t kernel_;
  // What launches pass to cuLaunchKernel: the kernel's function in this device's context
  // (cuda::library_kernel_function), so the driver does not look it up at every launch.
  void* const function_;
  // Compiled for this device's architecture (compile_for_arch): from sm_90 on, the kernel begins
  // with griddepcontrol.wait (codegen.cpp) and is launched as a programmatic dependent launch,
  // which costs the host less per launch and lets it start while the kernel before it finishes.
  const bool dependent_;
  int max_blocks_ = 1;
  std::unique_ptr<StagingSlots> staging_;
};

cudaLibrary_t load_library(const std::vector<char>& cubin) {
  cudaLibrary_t library = nullptr;
  const cudaError_t err =
      cudaLibraryLoadData(&library, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return library;
}

}  // namespace

DeviceBalance device_balance(const kf_context_t* ctx) {
  DeviceBalance b;
  if (ctx == nullptr || !ctx->is_cuda()) return b;
  b.issue_per_byte = cuda::issue_per_byte(ctx->device_id);  // 0: unknown, the layout's default
  return b;
}

std::shared_ptr<const Program> make_cuda_program(kf_context_t* ctx, const Graph& g,
                                                 const kf_compile_options_t& o,
                                                 const DeviceBalance& balance,
                                                 const std::string& source,
                                                 kf_kernel_origin_t* origin) {
  activate(ctx);
  ParamLayout layout = param_layout(g, o, balance);
  int major = 0, minor = 0;
  cuda::check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ctx->device_id),
              "reading the compute capability");
  cuda::check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, ctx->device_id),
              "reading the compute capability");
  const int sm = major * 10 + minor;
  const bool use_disk_cache = (o.flags & KF_COMPILE_NO_DISK_CACHE) == 0;
  kf_kernel_origin_t got = KF_KERNEL_COMPILED;
  std::vector<char> cubin = compile_for_arch(source, sm, use_disk_cache, &got);
  cudaLibrary_t library = load_library(cubin);
  if (library == nullptr && got == KF_KERNEL_DISK_CACHE) {
    // The cached machine code passed its checksum but the driver refuses it: compile afresh
    // (the entry stays; it is never trusted past this check).
    cubin = compile_for_arch(source, sm, false, &got);
    library = load_library(cubin);
  }
  if (library == nullptr) {
    cuda::check(
        cudaLibraryLoadData(&library, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
        "loading the compiled fused kernel (cudaLibraryLoadData)");
  }
  cudaKernel_t kernel = nullptr;
  const cudaError_t err = cudaLibraryGetKernel(&kernel, library, "kf_fused_kernel");
  if (err != cudaSuccess) {
    cudaLibraryUnload(library);
    cuda::fail_cuda(err, "finding the fused kernel in its library (cudaLibraryGetKernel)");
  }
  std::shared_ptr<const Program> program;
  try {
    program = std::make_shared<CudaProgram>(ctx, std::move(layout), library, kernel);
  } catch (...) {
    cudaLibraryUnload(library);
    throw;
  }
  if (origin != nullptr) *origin = got;
  return program;
}

}  // namespace fusion
}  // namespace kf

#else  // CPU-only build

namespace kf {
namespace fusion {

DeviceBalance device_balance(const kf_context_t*) { return DeviceBalance(); }

std::shared_ptr<const Program> make_cuda_program(kf_context_t*, const Graph&,
                                                 const kf_compile_options_t&, const DeviceBalance&,
                                                 const std::string&, kf_kernel_origin_t*) {
  fail(KF_ERROR_NOT_SUPPORTED, "this build has no CUDA backend (built with KF_ENABLE_CUDA=OFF)");
}

}  // namespace fusion
}  // namespace kf

#endif
