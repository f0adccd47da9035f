// The parts of the device fast paths (core/math/fusion_ops.hpp) that need no GPU to check:
// fast::reciprocal, the correction sequence fast::rsqrt ends with, against div_rn(1, s) for every
// mantissa of s and both seeds within one ulp of 1 / s; and the FastCheck range tests against
// their definitions. tests/fusion/fast_path_test.cu checks the whole device sequences, MUFU
// included, exhaustively on a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "core/math/fusion_ops.hpp"

namespace {

namespace km = kf::math;

uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

float from_bits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// The seeds tried: the floats within one ulp of 1 / s, the two that bracket it (one where 1 / s
// is a float). MUFU.RCP's seed is one of them (ptxas's rcp.rn.f32 relies on it).
std::vector<float> seeds_for(float s) {
  const double exact = 1.0 / static_cast<double>(s);  // correctly rounded: 1 / s is not a midpoint
  float below = static_cast<float>(exact);
  if (static_cast<double>(below) > exact) below = std::nextafter(below, 0.0f);
  if (static_cast<double>(below) == exact) return {below};
  return {below, std::nextafter(below, 2.0f * below)};
}

// For every mantissa of s at binary exponent `exponent`, both seeds give div_rn(1, s), but for
// the one exception (fast::reciprocal): s's mantissa all ones, where only the seed
// div_rn(1, s) itself does and the other gives one ulp less.
void expect_reciprocal_exact(int exponent) {
  uint64_t checked = 0, wrong = 0, exceptions = 0;
  for (uint32_t m = 0; m < (1u << 23); ++m) {
    const float s = std::ldexp(from_bits(0x3f800000u | m), exponent);
    const float want = km::div_rn(1.0f, s);
    for (float seed : seeds_for(s)) {
      ++checked;
      const float got = km::fast::reciprocal(s, seed);
      if (m == 0x7fffffu && seed != want) {
        ++exceptions;
        EXPECT_EQ(bits_of(got), bits_of(want) - 1u) << "s = " << s << ", seed " << seed;
        continue;
      }
      if (bits_of(got) != bits_of(want) && ++wrong <= 5) {
        ADD_FAILURE() << "s = " << s << " (0x" << std::hex << bits_of(s) << "), seed 0x"
                      << bits_of(seed) << ": got 0x" << bits_of(got) << ", div_rn(1, s) is 0x"
                      << bits_of(want) << std::dec;
      }
    }
  }
  EXPECT_EQ(wrong, 0u) << "of " << checked << " (s, seed) pairs at exponent " << exponent;
  EXPECT_EQ(exceptions, 1u);
  // Two seeds per mantissa, one where s is a power of two.
  EXPECT_EQ(checked, (2ull << 23) - 1);
}

// s = sqrt_rn(x) for x in the fast path's range [2^-61, FLT_MAX] lies in [2^-30.5, 2^64): its
// two ends and the middle. (The sequence does not depend on the exponent while every
// intermediate stays normal.)
TEST(FastPath, ReciprocalFromEitherNeighbourSeedIsCorrectlyRoundedAtExponent0) {
  expect_reciprocal_exact(0);
}

TEST(FastPath, ReciprocalFromEitherNeighbourSeedIsCorrectlyRoundedAtTheRangeEnds) {
  expect_reciprocal_exact(-31);
  expect_reciprocal_exact(63);
}

// Whether |x| lies in [2^-60, 2^61), by the definition.
bool in_fast_range(float x) {
  const float m = std::fabs(x);
  return std::isfinite(m) && m >= 0x1p-60f && m < 0x1p61f;
}

// Floats of every exponent and sign: the first, second, a middle and the last mantissa, plus
// zeros, infinities and NaNs of both signs.
std::vector<float> probe_values() {
  std::vector<float> values;
  for (uint32_t sign = 0; sign < 2; ++sign) {
    for (uint32_t exponent = 0; exponent < 256; ++exponent) {
      for (uint32_t m : {0u, 1u, 0x2aaaaau, 0x400000u, 0x7ffffeu, 0x7fffffu}) {
        values.push_back(from_bits(sign << 31 | exponent << 23 | m));
      }
    }
  }
  return values;
}

TEST(FastPath, FiniteOperandCheckIsFiniteAndAtLeastTwoToTheMinus61) {
  for (float x : probe_values()) {
    km::FastCheck ok;
    ok.finite_operand(x);
    const bool want = std::isfinite(x) && std::fabs(x) >= 0x1p-61f;
    EXPECT_EQ(ok.passed(), want) << "x = " << x << " (0x" << std::hex << bits_of(x) << std::dec
                                 << ")";
  }
}

TEST(FastPath, OperandCheckIsTheFastRangeOrZeroAndIgnoresNan) {
  for (float x : probe_values()) {
    // A signaling NaN makes the host's fmaxf return NaN (the device's FMNMX ignores it).
    if (std::isnan(x) && (bits_of(x) & 0x400000u) == 0) continue;
    km::FastCheck ok;
    ok.operand(x);
    const bool want = in_fast_range(x) || x == 0.0f || std::isnan(x);
    EXPECT_EQ(ok.passed(), want) << "x = " << x << " (0x" << std::hex << bits_of(x) << std::dec
                                 << ")";
  }
}

TEST(FastPath, OneOperandOutsideFailsTheWholeVector) {
  const float inside[] = {1.0f, -3.5f, 0x1p-60f, -0x1.fffffep60f, 0.0f};
  const float outside[] = {0x1p61f, 0x1.fffffep-61f, std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::denorm_min()};
  const float finite_inside[] = {1.0f, -3.5f, 0x1p-61f, std::numeric_limits<float>::max()};
  const float finite_outside[] = {0.0f, 0x1.fffffep-62f, std::numeric_limits<float>::infinity(),
                                  std::numeric_limits<float>::quiet_NaN()};
  for (float bad : outside) {
    for (float finite_bad : finite_outside) {
      km::FastCheck ok;
      for (float x : inside) ok.operand(x);
      for (float x : finite_inside) ok.finite_operand(x);
      EXPECT_TRUE(ok.passed());
      km::FastCheck with_bad = ok, with_finite_bad = ok;
      with_bad.operand(bad);
      with_finite_bad.finite_operand(finite_bad);
      for (float x : inside) with_bad.operand(x), with_finite_bad.operand(x);
      EXPECT_FALSE(with_bad.passed()) << "x = " << bad;
      EXPECT_FALSE(with_finite_bad.passed()) << "finite operand x = " << finite_bad;
    }
  }
}

}  // namespace
