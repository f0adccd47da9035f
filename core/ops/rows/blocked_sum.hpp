// Summation for the CPU statistics of the norm family (layer/RMS norm, batch norm).
#pragma once

#include <algorithm>
#include <cstdint>

namespace kf::rows {

// Sums f(i) over [0, n) in blocks of 256, so that rounding error grows with the square root of
// the block count rather than with n (rows of 40K+ f32 elements stay within 1e-6).
template <class C, class F>
C blocked_sum(int64_t n, F&& f) {
  C total = 0;
  for (int64_t start = 0; start < n; start += 256) {
    C block = 0;
    const int64_t stop = std::min<int64_t>(n, start + 256);
    for (int64_t i = start; i < stop; ++i) block += f(i);
    total += block;
  }
  return total;
}

}  // namespace kf::rows
