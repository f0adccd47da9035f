// Grid-group rows: each row is spread over a group of blocks of a cooperative grid (every block
// resident at once), and the blocks of a group exchange their partial statistics of a row through
// global memory. A partial is one 64-bit word, the float value in the low half and the launch's
// tag in the high half, stored with st.relaxed.gpu: one store publishes it, so no fence and no
// counter are needed, and a reader polls with ld.relaxed.gpu until every word of the row carries
// the tag. Every block of a group reads the same words and folds them in the same order, so the
// statistics are the same bits everywhere. Include only from .cu files.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>

#include "core/ops/async_copy.cuh"
#include "core/ops/bf16_pairs.cuh"
#include "core/ops/rows/reduce.cuh"
#include "core/ops/rows/staged.cuh"
#include "core/runtime/cuda/cluster_launch.hpp"
#include "core/runtime/cuda/cuda_check.hpp"
#include "core/runtime/cuda/device_caps.hpp"
#include "core/runtime/grid_scratch.hpp"
#include "core/runtime/memory_pool.hpp"

namespace kf::rows {

// Words a lane of the reading warp holds: up to 32 * kLanesWords blocks a group.
inline constexpr int kLanesWords = 4;

// The grid-group kernels' shape (norm/cuda_grid.cuh, softmax/cuda_grid.cuh): 512-thread blocks, two
// an SM, each owning `vectors` 16-byte vectors a thread of every row of its group (32 KiB a block a
// row), with a ring of `slots` shared-memory slots, `ahead` rows staged ahead of the one being
// reduced.
struct GridPolicy {
  static constexpr int threads = 512;
  static constexpr int vectors = 4;  // 16-byte vectors a thread a row
  static constexpr int ahead = 2;    // rows staged ahead of the one being reduced
  static constexpr int slots = 3;    // ahead + the row being written
  // Two shares. The norms take rows from here where their cached kernel does not hold them
  // (norm/cuda_staged.cuh, launch_staged), the softmax rows its clusters do not hold and, on
  // the H100, some that they do (softmax/cuda_staged.cuh, grid_before_clusters).
  static constexpr int64_t min_row_bytes = 64 * 1024;
  static constexpr int64_t share_bytes = int64_t{vectors} * threads * 16;  // a block's, a row
  static constexpr size_t smem = size_t{slots} * vectors * threads * 16;   // 96 KiB
};

// The blocks a row of `row_length` elements of `element_bytes` each takes in a grid-group kernel:
// 0 where the rows are shorter than GridPolicy::min_row_bytes, not a whole number of the blocks'
// shares (with `partial`: not whole 16-byte vectors), or more than max_blocks shares. With
// `partial` the row's vectors are dealt evenly to as few blocks as hold them (grid_share_vectors).
inline int64_t grid_blocks_a_row(int64_t row_length, int64_t element_bytes, int64_t max_blocks,
                                 bool partial = false) {
  const int64_t bytes = row_length * element_bytes;
  if (bytes < GridPolicy::min_row_bytes || bytes % (partial ? 16 : GridPolicy::share_bytes) != 0)
    return 0;
  const int64_t blocks = (bytes + GridPolicy::share_bytes - 1) / GridPolicy::share_bytes;
  return blocks <= max_blocks ? blocks : 0;
}

// The 16-byte vectors of a row each of `blocks` blocks owns (the last block the rest, at least
// one vector: blocks is grid_blocks_a_row's): a whole share where the row is whole shares.
__host__ __device__ inline int grid_share_vectors(int64_t row_bytes, int64_t blocks) {
  const int64_t vectors = row_bytes / 16;
  return static_cast<int>((vectors + blocks - 1) / blocks);
}

// A launch's groups: `blocks` blocks a row, `groups` groups (group q takes rows q, q + groups,
// ...), and `words`, a word per row and block ([row][block]), whose high halves are not `tag` when
// the launch starts.
struct GridGroups {
  int blocks = 0;
  int groups = 0;
  unsigned long long* words = nullptr;
  unsigned tag = 0;
};

// Publishes one block's partial of a row.
__device__ __forceinline__ void publish(unsigned long long* word, float value, unsigned tag) {
  const unsigned long long w =
      (static_cast<unsigned long long>(tag) << 32) | __float_as_uint(value);
  asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(word), "l"(w) : "memory");
}

__device__ __forceinline__ unsigned long long load_published(const unsigned long long* word) {
  unsigned long long w;
  asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(w) : "l"(word) : "memory");
  return w;
}

// A row's published words, as a warp holds them: lane l reads the words of blocks l, l + 32, ...
// (Q words a lane: up to 32 * Q blocks a group)
// fetch() issues the loads (early: they are in flight while the block works on another row);
// sum() waits until each word carries the tag, then folds them, the same bits in every lane;
// wait() and value() leave the folding to the caller.
template <int Q = kLanesWords>
struct PublishedRow {
  static_assert(Q >= 1 && Q <= kLanesWords);
  unsigned long long w[Q];

  __device__ __forceinline__ void fetch(const unsigned long long* row, int blocks) {
    const int lane = static_cast<int>(threadIdx.x % 32);
#pragma unroll
    for (int q = 0; q < Q; ++q)
      if (lane + 32 * q < blocks) w[q] = load_published(row + lane + 32 * q);
  }

  // Waits until each of this lane's words carries the tag; value(q) then reads them.
  __device__ __forceinline__ void wait(const unsigned long long* row, int blocks, unsigned tag) {
    const int lane = static_cast<int>(threadIdx.x % 32);
#pragma unroll
    for (int q = 0; q < Q; ++q)
      if (lane + 32 * q < blocks)
        while (static_cast<unsigned>(w[q] >> 32) != tag) w[q] = load_published(row + lane + 32 * q);
  }
  __device__ __forceinline__ float value(int q) const {
    return __uint_as_float(static_cast<unsigned>(w[q]));
  }

  __device__ __forceinline__ float sum(const unsigned long long* row, int blocks, unsigned tag) {
    const int lane = static_cast<int>(threadIdx.x % 32);
    float s = 0.f;
#pragma unroll
    for (int q = 0; q < Q; ++q)
      if (lane + 32 * q < blocks) {
        while (static_cast<unsigned>(w[q] >> 32) != tag) w[q] = load_published(row + lane + 32 * q);
        s += __uint_as_float(static_cast<unsigned>(w[q]));
      }
    return lanes_reduce(s, Plus{}, 32);
  }
};

// cp.async of 16 bytes into a shared-memory slot that this thread has just read into `read`,
// without a "memory" clobber (which would also order the copy after every memory access before
// it, the global stores among them). The read's four words are inputs of the asm, so the
// compiler cannot move the read past the copy that overwrites its slot.
__device__ __forceinline__ void copy16_after_read(void* to, const void* from, const uint4& read) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(to));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(address), "l"(from), "r"(read.x),
               "r"(read.y), "r"(read.z), "r"(read.w));
}

// A block's ring of staged rows (GridPolicy), over 16-byte vectors of S: row i's share in slot
// i % slots, of kOperands operands (x, and the RMS norm's residual after it). Each thread copies
// and reads back only its own vectors (k * threads + t of each operand), so the ring needs no
// barrier.
template <class S, class Vec, int kOperands = 1>
struct GridRing {
  static_assert(sizeof(Vec) == 16, "16-byte vectors");
  static_assert(kOperands == 1 || kOperands == 2, "x, or x and a residual");
  static constexpr int V = 16 / sizeof(S);
  static constexpr int kShare = GridPolicy::vectors * GridPolicy::threads;  // vectors an operand
  Vec* ring;
  int t;  // this thread

  // Row i's slot: its x share (vector k of thread t at k * threads + t), then the second
  // operand's (kShare vectors on).
  __device__ __forceinline__ Vec* slot(int64_t i) const {
    return ring + (i % GridPolicy::slots) * (kOperands * kShare);
  }
  // Copies this thread's first n vectors of the shares at `from` (and, with two operands,
  // `second`) (cp.async) into row i's slot.
  __device__ __forceinline__ void stage(int64_t i, const S* from, const S* second = nullptr,
                                        int n = GridPolicy::vectors) const {
    Vec* to = slot(i);
    const S* const operands[2] = {from, second};
#pragma unroll
    for (int o = 0; o < kOperands; ++o)
#pragma unroll
      for (int k = 0; k < GridPolicy::vectors; ++k)
        if (k < n)
          async_copy::copy16(to + o * kShare + k * GridPolicy::threads + t,
                             operands[o] + (k * GridPolicy::threads + t) * V);
  }
  // Streams `bits` to this thread's vector k of the output share `out`, then, with `restage`,
  // copies the slot's vector k again from the share at `next` (`read`: that vector, just read)
  // and, with two operands, the second operand's vector k from `next_second` (read in an earlier
  // pass, before a barrier).
  __device__ __forceinline__ void write(Vec* slot, int k, S* out, uint4 bits, bool restage,
                                        const S* next, const Vec& read,
                                        const S* next_second = nullptr) const {
    __stcs(reinterpret_cast<uint4*>(out + (k * GridPolicy::threads + t) * V), bits);  // streamed
    if (restage) {
      uint4 words;
      memcpy(&words, &read, sizeof words);
      copy16_after_read(slot + k * GridPolicy::threads + t,
                        next + (k * GridPolicy::threads + t) * V, words);
      if constexpr (kOperands == 2)
        async_copy::copy16(slot + kShare + k * GridPolicy::threads + t,
                           next_second + (k * GridPolicy::threads + t) * V);
    }
  }
};

// A 16-byte load through the read-only path, kept in program order with the other volatile asm
// statements (the restaging copies above among them): the compiler neither hoists nor sinks it.
template <class Vec>
__device__ __forceinline__ Vec load_in_order(const void* from) {
  static_assert(sizeof(Vec) == 16, "a 16-byte vector");
  uint4 v;
  asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(from));
  Vec out;
  memcpy(&out, &v, sizeof out);
  return out;
}

// Calls launch(words, tag) with `bytes` of words whose high halves are not `tag`, for a launch
// on `stream`, and returns what it returns: the stream's scratch (core/runtime/grid_scratch.hpp),
// grown from `pool` and zeroed when too small or when its tags wrap, under its lock so that the
// tags enter the stream in order. While the stream is being captured the graph may be replayed any
// number of times and on any stream, so the launch gets words of its own instead: allocated, zeroed
// and freed in the graph around it, tag 1.
template <class Launch>
auto with_grid_words(GridScratch& scratch, MemoryPool& pool, size_t bytes, cudaStream_t stream,
                     Launch launch) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  cuda::check(cudaStreamIsCapturing(stream, &capture), "cudaStreamIsCapturing");
  if (capture != cudaStreamCaptureStatusNone) {
    struct Words {  // freed on the stream after the launch, even when it throws
      MemoryPool& pool;
      size_t bytes;
      cudaStream_t stream;
      void* ptr = pool.allocate(bytes, stream);
      ~Words() { pool.deallocate(ptr, bytes, stream); }
    } words{pool, bytes, stream};
    cuda::check(cudaMemsetAsync(words.ptr, 0, bytes, stream), "grid words memset");
    return launch(static_cast<unsigned long long*>(words.ptr), 1u);
  }
  std::lock_guard<std::mutex> lock(scratch.mutex);
  if (scratch.bytes < bytes || scratch.tag == UINT32_MAX) {
    if (scratch.bytes < bytes) {
      constexpr size_t kGranule = 64 * 1024;
      const size_t grown = (bytes + kGranule - 1) / kGranule * kGranule;
      void* fresh = pool.allocate(grown, stream);  // throws with the old words kept
      if (scratch.words != nullptr) pool.deallocate(scratch.words, scratch.bytes, stream);
      scratch.words = fresh;
      scratch.bytes = grown;
    }
    scratch.tag = UINT32_MAX;  // until the memset is enqueued: a failed one is retried
    cuda::check(cudaMemsetAsync(scratch.words, 0, scratch.bytes, stream), "grid words memset");
    scratch.tag = 0;
  }
  return launch(static_cast<unsigned long long*>(scratch.words), ++scratch.tag);
}

// Launches kKernel(plan, GridGroups) as a cooperative dependent launch of kThreads-thread blocks
// with kSmem bytes of dynamic shared memory, `blocks` blocks a row and as many groups as the
// device holds at once (up to a group a row), with `words` words a block a row from the plan's
// scratch (Plan::grid, Plan::pool). The shared-memory attributes are set once a device. False,
// for the caller's other kernels to take the rows, where the rows have no grid form (blocks ==
// 0: grid_blocks_a_row), the plan carries no scratch, the device is older than sm_90 (where the
// kernels were measured), a group does not fit on the device, or the grid turns out not to fit
// at launch.
template <auto kKernel, int kThreads, size_t kSmem, class Plan>
bool launch_grid_groups(const Plan& plan, int64_t blocks, int words, int32_t device,
                        cudaStream_t stream, const char* what) {
  static std::atomic<bool> prepared[cuda::kKeptDevices];
  if (blocks <= 0 || plan.pool == nullptr || plan.grid == nullptr) return false;
  if (device < 0 || cuda::compute_major(device) < 9) return false;
  cuda::once_per_device(prepared, device, [] {
    cuda::check(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(kSmem)),
                "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
    cuda::check(cudaFuncSetAttribute(kKernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                     cudaSharedmemCarveoutMaxShared),
                "cudaFuncSetAttribute(PreferredSharedMemoryCarveout)");
    return true;
  });
  const int64_t groups =
      std::min(resident_blocks(kKernel, kThreads, kSmem, 1, device) / blocks, plan.walk.rows);
  if (groups < 1) return false;
  const size_t bytes =
      static_cast<size_t>(plan.walk.rows * blocks) * words * sizeof(unsigned long long);
  return with_grid_words(
      *plan.grid, *plan.pool, bytes, stream, [&](unsigned long long* scratch, unsigned tag) {
        const GridGroups q{static_cast<int>(blocks), static_cast<int>(groups), scratch, tag};
        return cuda::launch_cooperative_dependent(kKernel, device,
                                                  dim3(static_cast<unsigned>(blocks * groups)),
                                                  dim3(kThreads), kSmem, stream, what, plan, q);
      });
}

}  // namespace kf::rows
