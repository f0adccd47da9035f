// Division by a run-time constant for the CUDA kernels: the divisor with its multiply-high
// constants (core/ops/div_magic.hpp), exact for dividends and divisors below 2^31.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/ops/div_magic.hpp"

namespace kf {

struct FastDivmod {
  uint32_t divisor = 1, multiplier = 1, shift = 0;
  FastDivmod() = default;
  explicit FastDivmod(uint32_t d) : divisor(d) {
    const DivMagic m = div_magic(d);
    multiplier = m.multiplier;
    shift = m.shift;
  }
  __device__ __forceinline__ uint32_t div(uint32_t n) const {
    return div_by(n, DivMagic{multiplier, shift});
  }
  __device__ __forceinline__ uint32_t mod(uint32_t n) const { return n - div(n) * divisor; }
};

}  // namespace kf
