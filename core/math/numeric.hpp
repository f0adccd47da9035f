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

KF_HOST_DEVICE float half_to_float(half_t h) {
#if KF_DEVICE_CODE
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.bits));
  return f;
#else
  const unsigned int sign = (static_cast<unsigned int>(h.bits) & 0x8000u) << 16;
  const unsigned int exponent = (h.bits >> 10) & 0x1fu;
  unsigned int mantissa = h.bits & 0x3ffu;
  if (exponent == 0x1fu) return float_from_bits(sign | 0x7f800000u | (mantissa << 13));  // inf, NaN
  if (exponent != 0) return float_from_bits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  if (mantissa == 0) return float_from_bits(sign);  // signed zero
  // Subnormal half: normalise into a float exponent.
  unsigned int float_exponent = 113u;
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    --float_exponent;
  }
  return float_from_bits(sign | (float_exponent << 23) | ((mantissa & 0x3ffu) << 13));
#endif
}

KF_HOST_DEVICE half_t float_to_half(float f) {
  half_t h;
#if KF_DEVICE_CODE
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
#else
  const unsigned int x = float_bits(f);
  const unsigned int sign = (x >> 16) & 0x8000u;
  const unsigned int magnitude = x & 0x7fffffffu;
  unsigned int result;
  if (magnitude > 0x7f800000u) {
    result = 0x7e00u | ((magnitude >> 13) & 0x3ffu);  // quiet NaN, payload kept where it fits
  } else if (magnitude >= 0x477ff000u) {
    result = 0x7c00u;                     // >= 65520 rounds to infinity
  } else if (magnitude >= 0x38800000u) {  // normal half
    result = (((magnitude >> 23) - 112u) << 10) | ((magnitude >> 13) & 0x3ffu);
    const unsigned int rest = magnitude & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (result & 1u)))
      ++result;  // may carry into the exponent
  } else if (magnitude < 0x33000000u) {
    result = 0;  // below 2^-25: rounds to zero
  } else {       // subnormal half: value = m * 2^-24
    const unsigned int exponent = magnitude >> 23;
    const unsigned int significand = (magnitude & 0x7fffffu) | 0x800000u;
    const unsigned int shift = 126u - exponent;  // 14 .. 24
    result = significand >> shift;
    const unsigned int rest = significand & ((1u << shift) - 1u);
    const unsigned int halfway = 1u << (shift - 1u);
    if (rest > halfway || (rest == halfway && (result & 1u)))
      ++result;  // 1024 is the smallest normal
  }
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
  unsigned int x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    h.bits = static_cast<unsigned short>((x >> 16) | 0x40u);  // quiet NaN
    return h;
  }
  x += 0x7fffu + ((x >> 16) & 1u);
  h.bits = static_cast<unsigned short>(x >> 16);
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
