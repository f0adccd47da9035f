// Division by a run-time constant as a multiply-high and a shift (Granlund-Montgomery, the form
// PyTorch's IntDivider uses): q = (umulhi(n, multiplier) + n) >> shift, exact for dividends and
// divisors below 2^31. Host code prepares the constants; CUDA kernels divide with them
// (core/ops/fast_divmod.cuh, core/ops/rows/rows.hpp).
#pragma once

#include <cstdint>

namespace kf {

struct DivMagic {
  uint32_t multiplier = 1;
  uint32_t shift = 0;
};

// The constants for divisor d (1 <= d < 2^31).
inline DivMagic div_magic(uint32_t d) {
  DivMagic m;
  while (m.shift < 32 && (uint32_t{1} << m.shift) < d) ++m.shift;
  m.multiplier =
      static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << m.shift) - d)) / d + 1);
  return m;
}

}  // namespace kf
