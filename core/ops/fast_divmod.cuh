// Division by a run-time constant for the CUDA kernels: a multiply-high and a shift
// (Granlund-Montgomery, the form PyTorch's IntDivider uses), exact for dividends and divisors
// below 2^31. Three instructions where a 32-bit division takes about twenty.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace kf {

struct FastDivmod {
  uint32_t divisor = 1, multiplier = 1, shift = 0;
  FastDivmod() = default;
  explicit FastDivmod(uint32_t d) : divisor(d) {
    while (shift < 32 && (uint32_t{1} << shift) < d) ++shift;
    multiplier =
        static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift) - d)) / d + 1);
  }
  __device__ __forceinline__ uint32_t div(uint32_t n) const {
    return (__umulhi(n, multiplier) + n) >> shift;
  }
  __device__ __forceinline__ uint32_t mod(uint32_t n) const { return n - div(n) * divisor; }
};

}  // namespace kf
