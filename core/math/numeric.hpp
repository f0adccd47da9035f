// Storage types and compute types. f16 and bf16 are stored as 16-bit patterns and computed in
// float; f32 in float; f64 in double. Host conversions are bit-exact round-to-nearest-even (NaN
// stays NaN, overflow goes to infinity, subnormals are kept); device conversions are the hardware
// cvt instructions (the same ones cuda_fp16.h's intrinsics emit), written as inline PTX so that
// this header needs no CUDA header under NVRTC.
#pragma once

#include "core/math/host_device.hpp"

namespace kf {
namespace math {

struct half_t {
  unsigned short bits;
};
struct bfloat16_t {
  unsigned short bits;
};
static_assert(sizeof(half_t) == 2 && sizeof(bfloat16_t) == 2, "16-bit storage types");

KF_HOST_DEVICE unsigned int float_bits(float f) {
#if KF_DEVICE_CODE
  return __float_as_uint(f);
#else
  unsigned int u;
  __builtin_memcpy(&u, &f, sizeof u);
  return u;
#endif
}

KF_HOST_DEVICE float float_from_bits(unsigned int u) {
#if KF_DEVICE_CODE
  return __uint_as_float(u);
#else
  float f;
  __builtin_memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// c ? a : b as a bit blend. The host conversions below select among cases they all compute;
// written as ?:, GCC turns the selects back into branches and loops over them stay scalar.
KF_HOST_DEVICE unsigned int select_bits(bool c, unsigned int a, unsigned int b) {
  const unsigned int mask = 0u - static_cast<unsigned int>(c);
  return (a & mask) | (b & ~mask);
}

KF_HOST_DEVICE float half_to_float(half_t h) {
#if KF_DEVICE_CODE
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.bits));
  return f;
#else
  // Branch-free (every case is computed, one is selected), so that loops over many elements
  // vectorise. A normal half's exponent is rebiased in the bits; a subnormal's value m * 2^-24
  // is computed from m as a float, which touches no float subnormal (a caller running with
  // denormals-are-zero set still gets it right); inf and NaN keep the payload.
  const unsigned int sign = (static_cast<unsigned int>(h.bits) & 0x8000u) << 16;
  const unsigned int magnitude = static_cast<unsigned int>(h.bits) & 0x7fffu;
  const unsigned int normal = (magnitude << 13) + (112u << 23);
  const unsigned int subnormal =
      float_bits(static_cast<float>(static_cast<int>(magnitude)) * 5.9604644775390625e-8f);
  const unsigned int special = (magnitude << 13) | 0x7f800000u;
  const unsigned int result = select_bits(magnitude >= 0x7c00u, special,
                                          select_bits(magnitude < 0x400u, subnormal, normal));
  return float_from_bits(sign | result);
#endif
}

KF_HOST_DEVICE half_t float_to_half(float f) {
  half_t h;
#if KF_DEVICE_CODE
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
#else
  // Round to nearest even, branch-free (every case is computed, one is selected), so that loops
  // over many elements vectorise.
  const unsigned int x = float_bits(f);
  const unsigned int sign = (x >> 16) & 0x8000u;
  const unsigned int magnitude = x & 0x7fffffffu;
  // Normal half: rebias the exponent and round the 13 dropped bits; a carry out of the mantissa
  // bumps the exponent, up to infinity for [65520, 65536).
  const unsigned int normal = (magnitude - (112u << 23) + 0xfffu + ((magnitude >> 13) & 1u)) >> 13;
  // Subnormal half (below 2^-14): adding 0.5 (exponent 126) leaves the value's multiple of 2^-24,
  // rounded to nearest even by the float addition itself, in the low mantissa bits.
  const unsigned int subnormal = float_bits(float_from_bits(magnitude) + 0.5f) - 0x3f000000u;
  unsigned int result = select_bits(magnitude < 0x38800000u, subnormal, normal);
  result = select_bits(magnitude >= 0x47800000u, 0x7c00u, result);  // overflow (>= 65536), inf
  // NaN: quiet, payload kept where it fits.
  result = select_bits(magnitude > 0x7f800000u, 0x7e00u | ((magnitude >> 13) & 0x3ffu), result);
  h.bits = static_cast<unsigned short>(sign | result);
#endif
  return h;
}

KF_HOST_DEVICE float bfloat16_to_float(bfloat16_t h) {
  return float_from_bits(static_cast<unsigned int>(h.bits) << 16);
}

KF_HOST_DEVICE bfloat16_t float_to_bfloat16(float f) {
  bfloat16_t h;
#if KF_DEVICE_CODE && __CUDA_ARCH__ >= 800
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
#else
  // Round to nearest even; NaN quiet. Branch-free, so that loops over many elements vectorise.
  const unsigned int x = float_bits(f);
  const unsigned int rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  const unsigned int quiet_nan = (x >> 16) | 0x40u;
  h.bits =
      static_cast<unsigned short>(select_bits((x & 0x7fffffffu) > 0x7f800000u, quiet_nan, rounded));
#endif
  return h;
}

// How a storage type is computed: compute_type, and the conversions to and from it.
template <class S>
struct StorageTraits;

template <>
struct StorageTraits<float> {
  using compute_type = float;
  static KF_HOST_DEVICE float to_compute(float x) { return x; }
  static KF_HOST_DEVICE float from_compute(float x) { return x; }
};

template <>
struct StorageTraits<double> {
  using compute_type = double;
  static KF_HOST_DEVICE double to_compute(double x) { return x; }
  static KF_HOST_DEVICE double from_compute(double x) { return x; }
};

template <>
struct StorageTraits<half_t> {
  using compute_type = float;
  static KF_HOST_DEVICE float to_compute(half_t x) { return half_to_float(x); }
  static KF_HOST_DEVICE half_t from_compute(float x) { return float_to_half(x); }
};

template <>
struct StorageTraits<bfloat16_t> {
  using compute_type = float;
  static KF_HOST_DEVICE float to_compute(bfloat16_t x) { return bfloat16_to_float(x); }
  static KF_HOST_DEVICE bfloat16_t from_compute(float x) { return float_to_bfloat16(x); }
};

template <class S>
using compute_t = typename StorageTraits<S>::compute_type;

}  // namespace math
}  // namespace kf
