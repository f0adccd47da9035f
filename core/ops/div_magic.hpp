// Division by a run-time constant as a multiply-high and a shift (Granlund-Montgomery, the form
// PyTorch's IntDivider uses): q = (umulhi(n, multiplier) + n) >> shift, exact for dividends and
// divisors below 2^31. Host code prepares the constants (div_magic); kernels divide with them
// (div_by: three instructions where a 32-bit division takes about twenty), through FastDivmod
// (core/ops/fast_divmod.cuh) or a rows::Walk's leading extents (core/ops/rows/rows.hpp).
#pragma once

#include <cstdint>

#include "core/math/host_device.hpp"

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

// n / d for the constants of d (n < 2^31).
KF_HOST_DEVICE uint32_t div_by(uint32_t n, DivMagic m) {
#if defined(__CUDA_ARCH__)
  const uint32_t high = __umulhi(n, m.multiplier);
#else
  const uint32_t high = static_cast<uint32_t>((uint64_t{n} * m.multiplier) >> 32);
#endif
  return (high + n) >> m.shift;
}

}  // namespace kf
