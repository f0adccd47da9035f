// Reductions shared by the CUDA kernels of the row-wise families (norms, softmax, batch norm):
// over a few lanes, a warp, a block, or (sm_90) a thread-block cluster. Every participating
// thread gets the same result, combined in the same order, so blocks that share a row agree bit
// for bit on its statistics. A type reduced here needs a shuffle_xor overload (found by ADL).
#pragma once

#include <cstddef>
#include <cstring>

#include "core/math/row_stats.hpp"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#include <cooperative_groups.h>
#endif

namespace kf::rows {

__device__ __forceinline__ float shuffle_xor(float v, int offset) {
  return __shfl_xor_sync(0xffffffffu, v, offset);
}
__device__ __forceinline__ double shuffle_xor(double v, int offset) {
  return __shfl_xor_sync(0xffffffffu, v, offset);
}

struct Plus {
  template <class T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return a + b;
  }
};

struct Larger {  // NaN wins, as on the CPU backend (math::stats::larger_or_nan)
  template <class T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return math::stats::larger_or_nan(a, b);
  }
};

// A pair of sums reduced together (one shuffle tree, one block barrier pair, one cluster
// exchange).
template <class T>
struct Sums {
  T d, d2;
};
template <class T>
__device__ __forceinline__ Sums<T> shuffle_xor(Sums<T> v, int offset) {
  return {shuffle_xor(v.d, offset), shuffle_xor(v.d2, offset)};
}
struct AddSums {
  template <class T>
  __device__ __forceinline__ Sums<T> operator()(Sums<T> a, Sums<T> b) const {
    return {a.d + b.d, a.d2 + b.d2};
  }
};

// Combines v over aligned runs of `lanes` lanes (a power of two up to 32). Every lane of the warp
// must call it, with the same `lanes`.
template <class T, class Op>
__device__ __forceinline__ T lanes_reduce(T v, Op op, int lanes) {
  for (int o = lanes / 2; o > 0; o >>= 1) v = op(v, shuffle_xor(v, o));
  return v;
}

// Combines v over the block (a multiple of 32 threads). `scratch` holds 32 values; ends with a
// barrier, so scratch may be reused at once; every thread of the block must call it. With a
// power-of-two number of warps, each warp combines the partials with a butterfly of shuffles
// (lane l starts from partial l mod warps, so every aligned run of `warps` lanes holds each
// partial once and no identity element is needed); a butterfly gives every lane the same bits,
// since each step adds the same two values. Other block sizes fold the partials one by one.
// kThreads: the block size where the kernel fixes it (its launch bounds), 0 to read blockDim.x.
// A fixed size leaves the compiler one unrolled path (the run-time warp count cost each
// reduction a loop and the untaken folding path, and registers): for the register-cached kernels
// that take a block a row, H200 A/B (2026-11-27 05:53Z, kf-bench, same call, two passes), % of
// copy, softmax f32 rows of 4096 84.0 -> 86.9, f16 / bf16 rows of 16384 79.7 / 78.3 -> 83.9 /
// 81.2, causal [16, 2048, 2048] f16 / bf16 59.4 / 55.3 -> 63.6 / 59.8 (the norms: norm/cuda.cuh).
// kReuse = false leaves the trailing barrier out, for callers that alternate between two scratch
// arrays, one reduction to the next: a warp writes the array of reduction k + 2 only after the
// barrier of reduction k + 1, which no warp passes before it has read reduction k's values.
// For the register-cached norm and softmax kernels, H200 A/B (2026-11-27 09:15Z, kf-bench, same
// call, two passes): 0 to +0.8 points of copy over rows of 4096 and 16384 (layer norm f32 rows
// of 4096 82.3 -> 82.9, softmax f16 / bf16 rows of 16384 83.9 / 81.7 -> 84.6 / 82.4), the
// other rows within noise.
template <int kThreads = 0, bool kReuse = true, class T, class Op>
__device__ __forceinline__ T block_reduce(T v, Op op, T* scratch) {
  static_assert(kThreads % 32 == 0, "a block of whole warps");
  v = lanes_reduce(v, op, 32);
  const int warp = threadIdx.x / 32;
  const int warps = kThreads > 0 ? kThreads / 32 : static_cast<int>(blockDim.x / 32);
  if (threadIdx.x % 32 == 0) scratch[warp] = v;
  __syncthreads();
  if ((warps & (warps - 1)) == 0) {
    v = lanes_reduce(scratch[(threadIdx.x % 32) & (warps - 1)], op, warps);
  } else {
    v = scratch[0];
    for (int i = 1; i < warps; ++i) v = op(v, scratch[i]);
  }
  if constexpr (kReuse) __syncthreads();
  return v;
}

// Combines v over a row's group of threads: `group` lanes of a warp (a power of two up to 32) or
// the whole block (group == blockDim.x; kThreads and kReuse as for block_reduce).
template <int kThreads = 0, bool kReuse = true, class T, class Op>
__device__ __forceinline__ T group_reduce(T v, Op op, int group, T* scratch) {
  return group <= 32 ? lanes_reduce(v, op, group) : block_reduce<kThreads, kReuse>(v, op, scratch);
}

// Sum over the block (kept for the kernels that only add).
template <class T>
__device__ __forceinline__ T block_sum(T v, T* scratch) {
  return block_reduce(v, Plus{}, scratch);
}

// Most blocks a cluster may have here (the non-portable limit of sm_90).
inline constexpr int kMaxClusterBlocks = 16;

// A block's shared state for ClusterReducer: two inboxes, used by alternate exchanges, each with
// a slot per block of the cluster (16 bytes, so any value up to four words fits) and the
// mbarrier that counts their bytes in.
struct ClusterMailbox {
  alignas(16) unsigned slot[2][kMaxClusterBlocks][4];
  unsigned long long arrived[2];
};

// Combines block-uniform values over the blocks of a thread-block cluster (sm_90). Each exchange,
// warp 0's lane r stores the block's value into block r's inbox with st.async, whose bytes
// complete on block r's mbarrier; each block waits on its own mbarrier and folds the cluster's
// values in rank order, so every block gets the same bits. No cluster barrier is passed: a
// barrier.cluster arrive with release semantics compiles to MEMBAR.ALL.GPU (SASS, sm_90, CUDA
// 13.0), which waits until every global store the thread has issued is acknowledged, so each
// exchange stalled on the previous row's output stores. H200 A/B (2026-11-26 20:36Z, kf-bench,
// same call), % of copy f32 / f16 / bf16, rows of 262144: softmax 54.2 / 61.6 / 61.3 -> 66.9 /
// 68.9 / 66.5, layer norm 41.3 / 51.3 / 50.9 -> 49.2 / 58.4 / 54.8, RMS norm 54.2 / 57.2 / 62.8
// -> 56.2 / 61.2 / 66.2; batch norm training 54.9 / 48.7 / 48.3 -> 60.0 / 51.5 / 50.1.
// Protocol: an inbox is rewritten two exchanges after its last use. Each exchange begins with a
// block barrier, which every thread passes after reading the previous exchange's values and
// after its own wait on that exchange's phase. A block sends exchange e only after receiving
// exchange e - 1 from every block, and each block sent that only after its barrier of exchange
// e - 1, that is, after it had finished with exchange e - 2 (the same inbox and mbarrier). So no
// value lands in an inbox before its previous contents are read, and an mbarrier's phase never
// sees the bytes of two exchanges. A phase may see bytes before its own arrive.expect_tx; its
// tx-count then runs negative, which the mbarrier allows.
// Every thread of every block of the cluster constructs the reducer (it initialises the mailbox
// and passes a cluster barrier, so that no block sends to an uninitialised one), calls reduce()
// the same number of times, and calls done() before exiting. Constructed with clustered = false
// (a launch without clusters), it does nothing and reduce() returns its argument.
class ClusterReducer {
 public:
  __device__ ClusterReducer(ClusterMailbox& box, bool clustered)
      : box_(static_cast<unsigned>(__cvta_generic_to_shared(&box))) {
    if (!clustered) return;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (threadIdx.x == 0) {
      for (unsigned i = 0; i < 2; ++i)
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(barrier(i)) : "memory");
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    cooperative_groups::this_cluster().sync();
#else
    __trap();  // clusters are launched on sm_90 and later only
#endif
  }

  // Returns op folded over the cluster's values of v (v must be the same in every thread of a
  // block), in rank order; v itself without a cluster. Every thread of the block must call it.
  template <class T, class Op>
  __device__ T reduce(T v, Op op) {
    return exchange(v, [&](unsigned blocks, auto value) {
      T total = value(0);
      for (unsigned r = 1; r < blocks; ++r) total = op(total, value(r));
      return total;
    });
  }

  // Sends v (the same in every thread of a block) to every block of the cluster and returns
  // combine(blocks, value), where value(r) is block r's v (r < blocks); without a cluster,
  // combine(1, value) with value(0) = v. combine must give every block the same bits (it sees
  // the same values in every block). Every thread of the block must call it.
  template <class T, class Combine>
  __device__ auto exchange(T v, Combine combine) {
    static_assert(sizeof(T) == 4 || sizeof(T) == 8 || sizeof(T) == 16, "one to four words");
    const auto own = [&](unsigned) { return v; };
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // The cluster's shape is read when needed rather than kept: the kernels using this run at
    // their register bound (a first version that kept it spilled the f16 clustered norm kernel).
    const unsigned blocks = cluster_blocks();
    if (blocks == 1) return combine(1u, own);
    const unsigned inbox = round_ & 1, parity = (round_ >> 1) & 1;
    ++round_;
    __syncthreads();  // this block has read what the inbox held two exchanges ago
    if (threadIdx.x == 0)
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(barrier(inbox)),
                   "r"(static_cast<unsigned>(blocks * sizeof(T)))
                   : "memory");
    if (threadIdx.x < blocks) {
      unsigned rank;
      asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
      unsigned w[4];
      memcpy(w, &v, sizeof(T));
      const unsigned to_slot = map_to(slot(inbox, rank), threadIdx.x);
      const unsigned to_barrier = map_to(barrier(inbox), threadIdx.x);
      if constexpr (sizeof(T) == 4)
        asm volatile(
            "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(
                to_slot),
            "r"(w[0]), "r"(to_barrier)
            : "memory");
      else if constexpr (sizeof(T) == 8)
        asm volatile(
            "st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32 [%0], {%1, %2}, "
            "[%3];" ::"r"(to_slot),
            "r"(w[0]), "r"(w[1]), "r"(to_barrier)
            : "memory");
      else
        asm volatile(
            "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, "
            "%4}, [%5];" ::"r"(to_slot),
            "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3]), "r"(to_barrier)
            : "memory");
    }
    unsigned landed = 0;
    do {
      asm volatile(
          "{\n .reg .pred p;\n"
          " mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
          " selp.u32 %0, 1, 0, p;\n}"
          : "=r"(landed)
          : "r"(barrier(inbox)), "r"(parity)
          : "memory");
    } while (!landed);
    return combine(blocks, [&](unsigned r) { return value<T>(inbox, r); });
#else
    return combine(1u, own);
#endif
  }

  // A last cluster barrier: no block leaves while a value it sent may still be in flight.
  __device__ void done() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (cluster_blocks() > 1) cooperative_groups::this_cluster().sync();
#endif
  }

 private:
  __device__ static unsigned cluster_blocks() {
    unsigned n = 1;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
#endif
    return n;
  }
  // Shared-memory addresses of an inbox's slot for block r, and of its mbarrier.
  __device__ unsigned slot(unsigned inbox, unsigned r) const {
    return box_ + static_cast<unsigned>(offsetof(ClusterMailbox, slot)) +
           (inbox * kMaxClusterBlocks + r) * 16;
  }
  __device__ unsigned barrier(unsigned inbox) const {
    return box_ + static_cast<unsigned>(offsetof(ClusterMailbox, arrived)) + inbox * 8;
  }
  __device__ static unsigned map_to(unsigned address, unsigned rank) {
    unsigned mapped;
    asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(mapped) : "r"(address), "r"(rank));
    return mapped;
  }
  template <class T>
  __device__ T value(unsigned inbox, unsigned r) const {
    unsigned w[4];
    const unsigned from = slot(inbox, r);
    if constexpr (sizeof(T) == 4)
      asm volatile("ld.shared.b32 %0, [%1];" : "=r"(w[0]) : "r"(from));
    else if constexpr (sizeof(T) == 8)
      asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];" : "=r"(w[0]), "=r"(w[1]) : "r"(from));
    else
      asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
                   : "r"(from));
    T v;
    memcpy(&v, w, sizeof(T));
    return v;
  }

  unsigned box_;        // the mailbox's shared-memory address
  unsigned round_ = 0;  // exchanges so far
};

// For ClusterReducer::exchange's combine: block r's value in lanes r and r + 16 of every warp,
// `identity` in the lanes of ranks past the cluster, so that lanes_reduce(..., 16) folds the
// cluster's values in one butterfly (the same bits in every lane, warp and block).
template <class T, class Value>
__device__ __forceinline__ T cluster_value_of_lane(unsigned blocks, Value value, T identity) {
  const unsigned r = threadIdx.x % kMaxClusterBlocks;
  return r < blocks ? value(r) : identity;
}

}  // namespace kf::rows
