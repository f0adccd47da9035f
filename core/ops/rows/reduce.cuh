// Reductions shared by the CUDA kernels of the row-wise families (norms, softmax, batch norm):
// over a few lanes, a warp, a block, or (sm_90) a thread-block cluster. Every participating
// thread gets the same result, combined in the same order, so blocks that share a row agree bit
// for bit on its statistics. A type reduced here needs a shuffle_xor overload (found by ADL).
#pragma once

#include <cstring>

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

struct Larger {  // NaN never wins, as on the CPU backend (v > max ? v : max)
  template <class T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return b > a ? b : a;
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
template <class T, class Op>
__device__ __forceinline__ T block_reduce(T v, Op op, T* scratch) {
  v = lanes_reduce(v, op, 32);
  const int warp = threadIdx.x / 32, warps = blockDim.x / 32;
  if (threadIdx.x % 32 == 0) scratch[warp] = v;
  __syncthreads();
  if ((warps & (warps - 1)) == 0) {
    v = lanes_reduce(scratch[(threadIdx.x % 32) & (warps - 1)], op, warps);
  } else {
    v = scratch[0];
    for (int i = 1; i < warps; ++i) v = op(v, scratch[i]);
  }
  __syncthreads();
  return v;
}

// Combines v over a row's group of threads: `group` lanes of a warp (a power of two up to 32) or
// the whole block (group == blockDim.x).
template <class T, class Op>
__device__ __forceinline__ T group_reduce(T v, Op op, int group, T* scratch) {
  return group <= 32 ? lanes_reduce(v, op, group) : block_reduce(v, op, scratch);
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
// exchange stalled on the previous row's output stores. H200 A/B (2026-11-26 19:54Z, kf-bench,
// same call), % of copy f32 / f16 / bf16, rows of 262144: softmax 55.5 / 62.7 / 62 -> 67.3 /
// 69.5 / 66.8, layer norm 41 / 50 / 51 -> 49 / 44 / 53.5, RMS norm 51.5 / 57.7 / 57.2 -> 55.9 /
// 51.5 / 59; batch norm training 55 / 49 / 48.5 -> 59 / 51 / 49. (The f16 norms are the
// exception, not explained: Nsight Compute timed the f16 layer norm kernel alike, 144.7 against
// 144.0 us, and the RMS norm one 118.9 against 131.2 us.)
// Protocol: an inbox is rewritten two exchanges after its last use. Exchange e begins with a
// block barrier (so this block has read exchange e - 2's values), and a block can send exchange e
// only after it has received exchange e - 1 from every block, each of which sent it after
// receiving exchange e - 2: so no value lands in an inbox before its previous contents are read,
// and an mbarrier's phase never sees the bytes of two exchanges. A phase may see bytes before its
// own arrive.expect_tx; its tx-count then runs negative, which the mbarrier allows.
// Every thread of every block of the cluster constructs the reducer (it initialises the mailbox
// and passes a cluster barrier, so that no block sends to an uninitialised one), calls reduce()
// the same number of times, and calls done() before exiting. Constructed with clustered = false
// (a launch without clusters), it does nothing and reduce() returns its argument.
class ClusterReducer {
 public:
  __device__ ClusterReducer(ClusterMailbox& box, bool clustered) : box_(box) {
    if (!clustered) return;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    active_ = true;
    asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank_));
    asm("mov.u32 %0, %%cluster_nctarank;" : "=r"(blocks_));
    if (threadIdx.x == 0) {
      for (int i = 0; i < 2; ++i)
        asm volatile(
            "mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(&box_.arrived[i]))
            : "memory");
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    cooperative_groups::this_cluster().sync();
#else
    __trap();  // clusters are launched on sm_90 and later only
#endif
  }

  // Returns op folded over the cluster's values of v (v must be the same in every thread of a
  // block), in rank order. Every thread of the block must call it.
  template <class T, class Op>
  __device__ T reduce(T v, Op op) {
    static_assert(sizeof(T) == 4 || sizeof(T) == 8 || sizeof(T) == 16, "one to four words");
    if (!active_) return v;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const unsigned inbox = round_ & 1, parity = (round_ >> 1) & 1;
    ++round_;
    __syncthreads();  // this block has read what the inbox held two exchanges ago
    const unsigned barrier = shared_address(&box_.arrived[inbox]);
    if (threadIdx.x == 0)
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(barrier),
                   "r"(static_cast<unsigned>(blocks_ * sizeof(T)))
                   : "memory");
    if (threadIdx.x < blocks_) {
      unsigned words[4];
      memcpy(words, &v, sizeof(T));
      const unsigned to_slot = map_to(shared_address(box_.slot[inbox][rank_]), threadIdx.x);
      const unsigned to_barrier = map_to(barrier, threadIdx.x);
      if constexpr (sizeof(T) == 4)
        asm volatile(
            "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(
                to_slot),
            "r"(words[0]), "r"(to_barrier)
            : "memory");
      else if constexpr (sizeof(T) == 8)
        asm volatile(
            "st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32 [%0], {%1, %2}, "
            "[%3];" ::"r"(to_slot),
            "r"(words[0]), "r"(words[1]), "r"(to_barrier)
            : "memory");
      else
        asm volatile(
            "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, "
            "%4}, [%5];" ::"r"(to_slot),
            "r"(words[0]), "r"(words[1]), "r"(words[2]), "r"(words[3]), "r"(to_barrier)
            : "memory");
    }
    unsigned landed = 0;
    do {
      asm volatile(
          "{\n .reg .pred p;\n"
          " mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
          " selp.u32 %0, 1, 0, p;\n}"
          : "=r"(landed)
          : "r"(barrier), "r"(parity)
          : "memory");
    } while (!landed);
    T total = value<T>(inbox, 0);
    for (unsigned r = 1; r < blocks_; ++r) total = op(total, value<T>(inbox, r));
    return total;
#else
    (void)op;
    __trap();
    return v;
#endif
  }

  // A last cluster barrier: no block leaves while a value it sent may still be in flight.
  __device__ void done() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (active_) cooperative_groups::this_cluster().sync();
#endif
  }

 private:
  __device__ static unsigned shared_address(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
  }
  __device__ static unsigned map_to(unsigned address, unsigned rank) {
    unsigned mapped;
    asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(mapped) : "r"(address), "r"(rank));
    return mapped;
  }
  template <class T>
  __device__ T value(unsigned inbox, unsigned r) const {
    T v;
    memcpy(&v, box_.slot[inbox][r], sizeof(T));
    return v;
  }

  ClusterMailbox& box_;
  bool active_ = false;
  unsigned rank_ = 0, blocks_ = 1, round_ = 0;
};

}  // namespace kf::rows
