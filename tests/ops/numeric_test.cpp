// core/math/numeric.hpp: the host conversions between float and f16 / bf16 (round to nearest
// even, subnormals kept, overflow to infinity, NaN quiet with its payload kept where it fits)
// against references written the plain way, one value at a time with double arithmetic. The
// library's forms are branch-free so that loops over them vectorise; each is also run here through
// the CPU backend's own loops (kf::widen_run, kf::narrow_run), whose vector code must agree.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/math/numeric.hpp"
#include "core/ops/cpu_runs.hpp"

namespace {

using kf::math::bfloat16_t;
using kf::math::half_t;

// Bit casts (numeric.hpp's own, which are a memcpy on the host).
uint32_t bits_of(float f) { return kf::math::float_bits(f); }
float float_of(uint32_t u) { return kf::math::float_from_bits(u); }

float reference_half_to_float(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  const bool negative = (h & 0x8000) != 0;
  if (exponent == 0x1f) {  // inf, NaN: payload moved up
    return float_of((negative ? 0x80000000u : 0u) | 0x7f800000u |
                    (static_cast<uint32_t>(mantissa) << 13));
  }
  const double value =
      exponent == 0 ? std::ldexp(mantissa, -24) : std::ldexp(1024 + mantissa, exponent - 25);
  return static_cast<float>(negative ? -value : value);
}

uint16_t reference_float_to_half(float f) {
  const uint32_t u = bits_of(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  if (std::isnan(f)) return sign | 0x7e00u | ((u >> 13) & 0x3ffu);
  const double a = std::fabs(static_cast<double>(f));
  if (a < std::ldexp(1.0, -14)) {  // subnormal half (1024: the smallest normal)
    return sign | static_cast<uint16_t>(std::nearbyint(a * std::ldexp(1.0, 24)));
  }
  int e = 0;
  const double m = std::frexp(a, &e);  // a = m 2^e, m in [0.5, 1)
  double q = std::nearbyint((m * 2 - 1) * 1024);
  if (q == 1024) {
    q = 0;
    ++e;
  }
  const int biased = e - 1 + 15;
  if (biased >= 31 || std::isinf(a)) return sign | 0x7c00u;
  return sign | static_cast<uint16_t>((biased << 10) | static_cast<int>(q));
}

uint16_t reference_float_to_bfloat16(float f) {
  const uint32_t u = bits_of(f);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40u);
  uint32_t high = u >> 16;
  const uint32_t low = u & 0xffffu;
  if (low > 0x8000u || (low == 0x8000u && (high & 1u))) ++high;  // may carry up to inf
  return static_cast<uint16_t>(high);
}

// Floats worth checking: every 65521st bit pattern, each half's value and the midpoints to its
// neighbour with their float neighbours, and the edges of the ranges.
std::vector<float> sample_floats() {
  std::vector<float> out;
  for (uint64_t u = 0; u <= 0xffffffffu; u += 65521)
    out.push_back(float_of(static_cast<uint32_t>(u)));
  for (uint32_t h = 0; h < 0x7c00u; ++h) {
    const float lo = reference_half_to_float(static_cast<uint16_t>(h));
    const float hi = reference_half_to_float(static_cast<uint16_t>(h + 1));
    const float mid = static_cast<float>((static_cast<double>(lo) + hi) / 2);
    for (float f : {lo, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)}) {
      out.push_back(f);
      out.push_back(-f);
    }
  }
  for (uint32_t u : {0x00000001u, 0x007fffffu, 0x00800000u, 0x33000000u, 0x33000001u, 0x387fffffu,
                     0x38800000u, 0x477fefffu, 0x477ff000u, 0x477fffffu, 0x47800000u, 0x7f7fffffu,
                     0x7f7f8000u, 0x7f800000u, 0x7f800001u, 0x7fc00000u, 0x7fffffffu})
    for (uint32_t s : {0u, 0x80000000u}) out.push_back(float_of(u | s));
  return out;
}

// Narrowing every sampled float, one value at a time and in the CPU backend's loop
// (kf::narrow_run), against the reference.
template <class S>
void expect_narrowing(uint16_t (*reference)(float)) {
  const std::vector<float> floats = sample_floats();
  std::vector<S> looped(floats.size());
  kf::narrow_run<S>(floats.data(), looped.data(), 1, static_cast<int64_t>(floats.size()));
  for (size_t i = 0; i < floats.size(); ++i) {
    const uint16_t want = reference(floats[i]);
    ASSERT_EQ(kf::math::StorageTraits<S>::from_compute(floats[i]).bits, want)
        << std::hex << bits_of(floats[i]);
    ASSERT_EQ(looped[i].bits, want) << "in a loop, " << std::hex << bits_of(floats[i]);
  }
}

TEST(HostConversions, EveryHalfToFloat) {
  std::vector<half_t> halves(65536);
  for (uint32_t h = 0; h < 65536; ++h) halves[h].bits = static_cast<unsigned short>(h);
  std::vector<float> looped(65536);
  kf::widen_run<half_t>(halves.data(), 1, looped.data(), 65536);
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint32_t want = bits_of(reference_half_to_float(static_cast<uint16_t>(h)));
    ASSERT_EQ(bits_of(kf::math::half_to_float(halves[h])), want) << std::hex << h;
    ASSERT_EQ(bits_of(looped[h]), want) << "in a loop, " << std::hex << h;
  }
}

TEST(HostConversions, FloatToHalfRoundsToNearestEven) {
  expect_narrowing<half_t>(reference_float_to_half);
}

TEST(HostConversions, FloatToBfloat16RoundsToNearestEven) {
  expect_narrowing<bfloat16_t>(reference_float_to_bfloat16);
}

}  // namespace
