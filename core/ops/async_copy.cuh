// 16-byte cp.async copies from global to shared memory (sm_80 and later) for the CUDA kernels,
// spelled once, and the loop that keeps a thread's next items in flight while it works on the
// current one. Include only from .cu files.
#pragma once

#include <cuda_runtime.h>

namespace kf::async_copy {

// Alignment of the dynamic shared arrays that these copies fill. A 16-byte alignment let an array
// start 16 bytes past a 32-byte boundary (batch-norm training's: after 784 bytes of static shared
// memory), and then each 32-byte sector of the source landed across two 32-byte pieces of shared
// memory and was read from L2 twice: Nsight Compute, H100, that kernel on f32 42 x 256 x 56 x 56,
// 8,429,568 L2 read sectors from the SMs for x's 4,214,784, and 4,222,661 with the array aligned
// to 128. kf-bench, H100 (2026-12-06, 07:31Z before, 08:46Z after, two machines), % of copy f32 /
// f16 / bf16: batch-norm training 82.2 / 80.1 / 79.3 -> 88.0 / 87.2 / 86.9, the layer norm's rows
// of 262144 84.1 / 82.4 / 82.4 -> 87.5 / 85.0 / 85.3. That kernel's static block was already
// counted as 896 bytes, so the alignment cost it no shared memory and no block an SM
// (docs/performance.md, "Session of 08:27Z").
constexpr int kSharedAlign = 128;

// Copies 16 bytes from global `from` to shared `to` (both 16-byte aligned), asynchronously
// (cp.async.cg: cached in L2 only). The copy belongs to the thread's next commit() group.
__device__ __forceinline__ void copy16(void* to, const void* from) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(to));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(address), "l"(from) : "memory");
}

// The same when `inside`, nothing otherwise (a predicated copy: `from` is not read).
__device__ __forceinline__ void copy16_if(void* to, const void* from, bool inside) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(to));
  asm volatile(
      "{ .reg .pred p; setp.ne.b32 p, %2, 0; @p cp.async.cg.shared.global [%0], [%1], 16; }" ::"r"(
          address),
      "l"(from), "r"(static_cast<int>(inside))
      : "memory");
}

// Closes the thread's current group of copies (an empty group is allowed).
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

// Waits until every group of the thread's copies but the newest kPending has landed. The
// copies are visible to the thread that issued them; other threads need a barrier as well.
template <int kPending>
__device__ __forceinline__ void wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

// Runs body(i, slot) for i = first, first + step, ... while i < end, each once this thread's
// copies of item i have landed in stage `slot` of a kStages-stage shared-memory buffer.
// fetch(at, slot) issues the thread's copies of item `at` into stage `slot` (copy16_if with
// at < end: the loop fetches kStages - 1 items ahead, past the end too); the items ahead stay in
// flight while body works. body may read only the slots its own thread copied (no barrier).
template <int kStages, class Index, class Fetch, class Body>
__device__ __forceinline__ void pipelined(Index first, Index end, Index step, Fetch fetch,
                                          Body body) {
  static_assert(kStages >= 2, "at least one item in flight");
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    fetch(first + static_cast<Index>(s) * step, s);
    commit();
  }
  for (int slot = 0; first < end; first += step, slot = slot == kStages - 1 ? 0 : slot + 1) {
    fetch(first + static_cast<Index>(kStages - 1) * step, slot == 0 ? kStages - 1 : slot - 1);
    commit();
    wait<kStages - 1>();
    body(first, slot);
  }
}

}  // namespace kf::async_copy
