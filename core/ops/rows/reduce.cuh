// Block-wide reductions for the row-wise CUDA kernels (one block per row).
#pragma once

namespace kf::rows {

// Sum of v over the block (every thread gets the result). `scratch` holds 32 values; the block
// size is a multiple of 32. Ends with a barrier so scratch may be reused.
template <class T>
__device__ __forceinline__ T block_sum(T v, T* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T total = lane < warps ? scratch[lane] : T(0);
  for (int o = 16; o > 0; o >>= 1) total += __shfl_xor_sync(0xffffffffu, total, o);
  __syncthreads();
  return total;
}

}  // namespace kf::rows
