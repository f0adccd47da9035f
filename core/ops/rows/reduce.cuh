// Reductions shared by the CUDA kernels of the row-wise families (norms, softmax, batch norm):
// over a few lanes, a warp, a block, or (sm_90) a thread-block cluster. Every participating
// thread gets the same result, combined in the same order, so blocks that share a row agree bit
// for bit on its statistics. A type reduced here needs a shuffle_xor overload (found by ADL).
#pragma once

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

// Combines a block-uniform v over the blocks of the cluster through distributed shared memory.
// `slot` is this exchange's own __shared__ value: a later exchange must use another slot, and a
// slot may be reused only after a later exchange (its cluster barrier orders the reads before).
// Before exiting, a block must pass a cluster barrier (cluster_done), so that no block reads the
// shared memory of one that has gone.
template <class T, class Op>
__device__ __forceinline__ T cluster_reduce(T v, Op op, T* slot) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  if (threadIdx.x == 0) *slot = v;
  cluster.sync();
  T total = *cluster.map_shared_rank(slot, 0);
  for (unsigned r = 1; r < cluster.num_blocks(); ++r)
    total = op(total, *cluster.map_shared_rank(slot, r));
  return total;
#else
  __trap();  // clusters are launched on sm_90 and later only
  return v;
#endif
}

__device__ __forceinline__ void cluster_done() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cooperative_groups::this_cluster().sync();
#endif
}

}  // namespace kf::rows
