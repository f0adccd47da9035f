// core/ops/div_magic.hpp: the multiply-high division the CUDA kernels use (row offsets of
// multi-dim walks, elementwise broadcasting, reductions) against plain division, through div_by's
// host form (the high 32 bits of the 64-bit product, which is what __umulhi returns).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "core/ops/div_magic.hpp"

namespace {

constexpr uint32_t kLimit = (uint32_t{1} << 31) - 1;  // dividends and divisors below 2^31

TEST(DivMagic, EveryDividendUpTo65536ForSmallDivisors) {
  for (uint32_t d = 1; d <= 300; ++d) {
    const kf::DivMagic m = kf::div_magic(d);
    for (uint32_t n = 0; n <= 65536; ++n) ASSERT_EQ(kf::div_by(n, m), n / d) << n << " / " << d;
  }
}

TEST(DivMagic, EdgesAndRandomPairsBelow2To31) {
  std::mt19937_64 rng(20261126);
  std::vector<uint32_t> divisors = {1,          2,
                                    3,          5,
                                    7,          255,
                                    256,        257,
                                    65535,      65536,
                                    65537,      (1u << 30) - 1,
                                    1u << 30,   (1u << 30) + 1,
                                    kLimit - 1, kLimit};
  for (int i = 0; i < 2000; ++i) divisors.push_back(1 + static_cast<uint32_t>(rng() % kLimit));
  for (uint32_t d : divisors) {
    const kf::DivMagic m = kf::div_magic(d);
    std::vector<uint32_t> dividends = {0, 1, d - 1, d, d + 1, kLimit - 1, kLimit};
    for (uint32_t k : {2u, 3u, 1000u})
      if (uint64_t{d} * k <= kLimit) {
        dividends.push_back(d * k - 1);
        dividends.push_back(d * k);
      }
    for (int i = 0; i < 200; ++i) dividends.push_back(static_cast<uint32_t>(rng() % (kLimit + 1u)));
    for (uint32_t n : dividends) {
      if (n > kLimit) continue;
      ASSERT_EQ(kf::div_by(n, m), n / d) << n << " / " << d;
    }
  }
}

}  // namespace
