// The scalar operations of the fusion engine, written once: the CPU executor
// (core/fusion/cpu/) calls them, and the CUDA source that codegen emits calls exactly these names
// (NVRTC compiles this header as embedded text, so it uses no STL and includes standard headers
// only outside NVRTC).
//
// Every template takes the dtype as its kf_dtype_t integer value D. A value of dtype D is held in
// Compute<D>: float for f32/f16/bf16, double for f64, long long for every integer dtype. Integer
// values are always already wrapped to D's range; every integer op computes in 64-bit unsigned
// arithmetic (no undefined behaviour) and wraps to D's width before returning, so integer results
// are bit-identical on CPU and GPU. Float +, -, *, / and sqrt are correctly rounded (IEEE, round
// to nearest even) on both backends and never contracted into FMAs: on the device through the
// explicitly rounded intrinsics or the range-checked fast paths below, on the CPU through the
// plain operators (the executor is built with -ffp-contract=off), so those results are
// bit-identical too. Only the transcendental functions (exp, log, pow, the activations) differ
// between backends, by a few ulp. NaN results are NaN on both backends, but their bits (sign,
// payload) are not specified: the GPU's arithmetic returns its canonical NaN.
//
// Fast paths (device code, f32 compute types). The correctly rounded division and square root
// cost a range check and a branch to a slow path per operation (div.rn.f32: MUFU.RCP, five FMAs,
// FCHK and a call; sqrt.rn.f32 likewise), and those branches stop the compiler from interleaving
// the elements a thread computes. fast::div, fast::sqrt and fast::rsqrt run the same instruction
// sequences ptxas emits for div.rn / sqrt.rn / rcp.rn when their range check passes, without the
// branch, and record their operands in a FastCheck; the generated kernel evaluates a whole vector
// of elements with the fast paths and, unless the FastCheck passes (every operand in a range,
// narrower than ptxas's, where the sequences are exact), recomputes the vector with the exact
// functions. Results are therefore identical to the exact functions' (tests/fusion/
// random_graph_test.cpp checks them bit for bit against the CPU over random and edge values).
// The *_v<Fast, ...> entry points pick the fast or the exact form at compile time.
//
// Entry points (all KF_HOST_DEVICE, namespace kf::math):
//   DtypeTraits<D>, Compute<D>, Storage<D>
//   load<D>(base, offset) / store<D>(base, offset, v)   element access (offset in elements)
//   load_input<D>(base, offset)     load<D> through the read-only path (inputs of a kernel)
//   load2<D>(base, pair, lo, hi) / store2<D>(base, pair, lo, hi)   two neighbours at once
//   from_value<D>(double)           a launch value (scalar, constant) met by an operand of dtype D
//   wrap<D>(unsigned long long)     reduce an integer modulo 2^bits(D) (integer D only)
//   unary<Op, D>(x)                 Op = kf_unary_op_t
//   binary<Op, D>(a, b)             Op = KF_BINARY_ADD .. KF_BINARY_POW (float min / max: IEEE
//                                   754-2019 minimum / maximum, -0 below +0, NaN propagating)
//   unary_v<Fast, Op, D>(x, ok), binary_v<Fast, Op, D>(a, b, ok)   the same, fast paths allowed
//                                   (ok: a FastCheck; recompute exactly unless ok.passed())
//   div_v<Fast, D>(a, divisor, ok)  a / b for b prepared once by make_divisor (a launch value)
//   compare<Op, D>(a, b)            Op = KF_BINARY_EQ .. KF_BINARY_GE; 0 or 1, the u8 result
//   activation<Act, D>(x)           Act = kf_activation_t (floating D)
//   clamp<D>(x, lo, hi)             min(max(x, lo), hi), NaN propagating
//   truthy<D>(x)                    x != 0 (NaN is true), the condition of where
//   select<D>(cond, a, b)           cond ? a : b
//   cast<From, To, Mode>(x)         Mode = kf_cast_mode_t
#pragma once

#include "core/math/activation.hpp"
#include "core/math/elementary.hpp"
#include "core/math/host_device.hpp"
#include "core/math/numeric.hpp"

#ifndef __CUDACC_RTC__
#include <math.h>
#endif

namespace kf {
namespace math {

// kf_dtype_t, kf_unary_op_t, kf_binary_op_t, kf_cast_mode_t as plain integers: this header is
// also compiled where the public headers are not (NVRTC). core/fusion checks that they match.
namespace dtype {
constexpr int f32 = 0, f16 = 1, bf16 = 2, f64 = 3, i8 = 4, u8 = 5, i32 = 6, i64 = 7;
}
namespace unary_op {
constexpr int neg = 0, abs = 1, exp = 2, log = 3, sqrt = 4, rsqrt = 5, square = 6;
}
namespace binary_op {
constexpr int add = 0, sub = 1, mul = 2, div = 3, min = 4, max = 5, pow = 6;
constexpr int eq = 7, ne = 8, lt = 9, le = 10, gt = 11, ge = 12;
}  // namespace binary_op
namespace cast_mode {
constexpr int wrap = 0, saturate = 1, saturate_round = 2;
}

template <int D>
struct DtypeTraits;

template <>
struct DtypeTraits<dtype::f32> {
  using storage = float;
  using compute = float;
  static constexpr bool floating = true;
};
template <>
struct DtypeTraits<dtype::f16> {
  using storage = half_t;
  using compute = float;
  static constexpr bool floating = true;
};
template <>
struct DtypeTraits<dtype::bf16> {
  using storage = bfloat16_t;
  using compute = float;
  static constexpr bool floating = true;
};
template <>
struct DtypeTraits<dtype::f64> {
  using storage = double;
  using compute = double;
  static constexpr bool floating = true;
};

// Integer dtypes: bits, signedness and range (as long long and as an exact double where the
// range fits in 53 bits; int64's range is handled apart).
template <class S, int Bits, bool Signed>
struct IntegerTraits {
  using storage = S;
  using compute = long long;
  static constexpr bool floating = false;
  static constexpr int bits = Bits;
  static constexpr bool is_signed = Signed;
  static constexpr long long min_value =
      Signed ? (Bits == 64 ? -9223372036854775807LL - 1 : -(1LL << (Bits - 1))) : 0;
  static constexpr long long max_value =
      Bits == 64 ? 9223372036854775807LL : (Signed ? (1LL << (Bits - 1)) - 1 : (1LL << Bits) - 1);
};
template <>
struct DtypeTraits<dtype::i8> : IntegerTraits<signed char, 8, true> {};
template <>
struct DtypeTraits<dtype::u8> : IntegerTraits<unsigned char, 8, false> {};
template <>
struct DtypeTraits<dtype::i32> : IntegerTraits<int, 32, true> {};
template <>
struct DtypeTraits<dtype::i64> : IntegerTraits<long long, 64, true> {};

template <int D>
using Compute = typename DtypeTraits<D>::compute;
template <int D>
using Storage = typename DtypeTraits<D>::storage;

// ---------------------------------------------------------------------------------------------
// Explicitly rounded float arithmetic (no FMA contraction on the device).

// a op b rounded to nearest even: on the device the explicitly rounded intrinsics (never fused
// into an FMA), on the host the plain operator (the executor is built with -ffp-contract=off).
#if KF_DEVICE_CODE
#define KF_ROUNDED_BINARY(name, op, float_rn, double_rn)                 \
  KF_HOST_DEVICE float name(float a, float b) { return float_rn(a, b); } \
  KF_HOST_DEVICE double name(double a, double b) { return double_rn(a, b); }
#else
#define KF_ROUNDED_BINARY(name, op, float_rn, double_rn)         \
  KF_HOST_DEVICE float name(float a, float b) { return a op b; } \
  KF_HOST_DEVICE double name(double a, double b) { return a op b; }
#endif
KF_ROUNDED_BINARY(add_rn, +, __fadd_rn, __dadd_rn)
KF_ROUNDED_BINARY(sub_rn, -, __fsub_rn, __dsub_rn)
KF_ROUNDED_BINARY(mul_rn, *, __fmul_rn, __dmul_rn)
KF_ROUNDED_BINARY(div_rn, /, __fdiv_rn, __ddiv_rn)
#undef KF_ROUNDED_BINARY
KF_HOST_DEVICE float sqrt_rn(float x) {
#if KF_DEVICE_CODE
  return __fsqrt_rn(x);
#else
  return ::sqrtf(x);
#endif
}
// a * b + c rounded once (an FMA on both backends, as IEEE fusedMultiplyAdd).
KF_HOST_DEVICE float fma_rn(float a, float b, float c) {
#if KF_DEVICE_CODE
  return __fmaf_rn(a, b, c);
#else
  return ::fmaf(a, b, c);
#endif
}
KF_HOST_DEVICE double sqrt_rn(double x) {
#if KF_DEVICE_CODE
  return __dsqrt_rn(x);
#else
  return ::sqrt(x);
#endif
}
KF_HOST_DEVICE float log_of(float x) { return ::logf(x); }
KF_HOST_DEVICE double log_of(double x) { return ::log(x); }
KF_HOST_DEVICE float pow_of(float a, float b) { return ::powf(a, b); }
KF_HOST_DEVICE double pow_of(double a, double b) { return ::pow(a, b); }
// ---------------------------------------------------------------------------------------------
// Fast paths of the correctly rounded float division and square root (see the header comment).
// Each returns exactly what div_rn / sqrt_rn / div_rn(1, sqrt_rn(x)) return whenever the
// FastCheck it updates passes at the end of the vector; otherwise its result is meaningless and
// the caller recomputes with the exact function. On the host (never called there by the
// executor) they are the exact functions.

// What the fast paths of a vector of elements have seen, checked once for the whole vector
// (passed()): hi, the largest magnitude of the operands bounded by 2^61; lo, the smallest key
// of the operands bounded below (their bits shifted left by one, the sign dropped, offset so
// that every bound is the same comparison); flag, the other conditions.
struct FastCheck {
  float hi = 0.0f;
  unsigned int lo = 0xffffffffu;
  bool flag = true;

  // A magnitude in [2^-60, 2^61), or a zero (the key less one puts a zero above every other).
  // A NaN is ignored: every fast path gives NaN for it, as the exact function does (NaN bits are
  // not specified).
  KF_HOST_DEVICE void operand(float x) {
    hi = fmaxf(hi, ::fabsf(x));
    const unsigned int key = (float_bits(x) << 1) - 1u;
    lo = key < lo ? key : lo;
  }
  // A finite magnitude of at least 2^-61, in one comparison: the offset carries infinity and
  // NaN (the largest keys) round to below every finite value's, so both fail (a NaN x is then
  // recomputed exactly, with the same result).
  KF_HOST_DEVICE void finite_operand(float x) {
    const unsigned int key = (float_bits(x) << 1) + 0x01000000u;
    lo = key < lo ? key : lo;
  }
  KF_HOST_DEVICE bool passed() const {
    // 2^-60 is 0x21800000 (exponent 67), shifted left by one, less one; 2^-61 shifted and
    // offset by finite_operand is the same key.
    return flag && hi < 0x1p61f && lo >= 0x42ffffffu;
  }
};

namespace fast {

// |x| in [2^-60, 2^61) (biased exponents 67 .. 187).
KF_HOST_DEVICE bool in_division_range(float x) {
  return (float_bits(x) & 0x7f800000u) - 0x21800000u <= 0x3c000000u;
}
// q with the sign of s.
KF_HOST_DEVICE float with_sign_of(float q, float s) {
#if KF_DEVICE_CODE
  unsigned int r;
  asm("lop3.b32 %0, %1, %2, %3, 0xd8;"  // (q & ~mask) | (s & mask)
      : "=r"(r)
      : "r"(float_bits(q)), "r"(float_bits(s)), "r"(0x80000000u));
  return float_from_bits(r);
#else
  return float_from_bits((float_bits(q) & 0x7fffffffu) | (float_bits(s) & 0x80000000u));
#endif
}

// div_rn(1, s) from a seed within one ulp of 1 / s: the seed corrected once by its exact
// residual (the sequence of rcp.rn.f32: ptxas emits MUFU.RCP and this one correction).
// tests/fusion/fast_path_test.cpp runs it on the host for every mantissa of s and both floats
// within one ulp of 1 / s: the result is div_rn(1, s) for all of them but one case, s with a
// mantissa of all ones (1 / s lies just above a rounding midpoint), where only the seed
// div_rn(1, s) itself gives div_rn(1, s) (the other, one ulp less). MUFU.RCP's seed is within
// one ulp (closer than the 2^-23 the PTX ISA promises) and exact there: ptxas's rcp.rn relies on
// both, and tests/fusion/fast_path_test.cu checks fast::rsqrt, which ends with this sequence,
// for every operand on the GPU.
KF_HOST_DEVICE float reciprocal(float s, float seed) {
  return fma_rn(seed, fma_rn(-s, seed, 1.0f), seed);
}

// a / b: 1/b refined once by Newton, the quotient corrected once by its exact residual (the
// sequence of div.rn.f32). Exact when b and a (or a == 0) lie in [2^-60, 2^61) in magnitude: no
// intermediate then overflows, underflows or is subnormal. A zero a gives the quotient's signed
// zero through with_sign_of (the correction step may lose the sign of a zero). b's check is a
// flag (a launch value's is the same for every element: the compiler keeps one).
KF_HOST_DEVICE float div(float a, float b, FastCheck& ok) {
#if KF_DEVICE_CODE
  const float r0 = hw::rcp_approx_ftz(b);
  const float r = __fmaf_rn(r0, __fmaf_rn(-b, r0, 1.0f), r0);
  const float q0 = __fmul_rn(a, r);
  const float q = __fmaf_rn(__fmaf_rn(-b, q0, a), r, q0);
  ok.flag = ok.flag & in_division_range(b);
  ok.operand(a);
  return with_sign_of(q, q0);
#else
  (void)ok;
  return div_rn(a, b);
#endif
}

}  // namespace fast

// A divisor prepared once for many divisions (a launch value): the value and, for f32, the
// refined reciprocal and range check of fast::div. The generated kernels build it per thread.
template <class T>
struct Divisor {
  T value;
};
template <>
struct Divisor<float> {
  float value;
  float reciprocal;  // device only: 1/value refined once, as fast::div computes it
  bool in_range;
};

template <class T>
KF_HOST_DEVICE Divisor<T> make_divisor(T b) {
  Divisor<T> d;
  d.value = b;
  if constexpr (sizeof(T) == sizeof(float)) {
#if KF_DEVICE_CODE
    const float r0 = hw::rcp_approx_ftz(b);
    d.reciprocal = __fmaf_rn(r0, __fmaf_rn(-b, r0, 1.0f), r0);
#else
    d.reciprocal = 1.0f / b;  // unused on the host
#endif
    d.in_range = fast::in_division_range(b);
  }
  return d;
}

namespace fast {

// a / d.value, as div(a, d.value, ok) with the divisor's part done once.
KF_HOST_DEVICE float div(float a, const Divisor<float>& d, FastCheck& ok) {
#if KF_DEVICE_CODE
  const float q0 = __fmul_rn(a, d.reciprocal);
  const float q = __fmaf_rn(__fmaf_rn(-d.value, q0, a), d.reciprocal, q0);
  ok.flag = ok.flag & d.in_range;
  ok.operand(a);
  return with_sign_of(q, q0);
#else
  (void)ok;
  return div_rn(a, d.value);
#endif
}

#if KF_DEVICE_CODE
// The sequence of sqrt.rn.f32 without its range check (which is x in [2^-101, FLT_MAX]): the
// approximate reciprocal square root r, s = x r, then s corrected once by its exact residual with
// r / 2. sqrt and rsqrt below both start from it.
KF_HOST_DEVICE float sqrt_sequence(float x) {
  const float r = hw::rsqrt_approx_ftz(x);
  const float s = __fmul_rn(x, r);
  return __fmaf_rn(__fmaf_rn(-s, s, x), __fmul_rn(r, 0.5f), s);
}
#endif

// sqrt(x) by sqrt_sequence. Exact for x in [2^-60, 2^61), +-0 (returned as is) and negative x
// (NaN).
KF_HOST_DEVICE float sqrt(float x, FastCheck& ok) {
#if KF_DEVICE_CODE
  const float s = sqrt_sequence(x);
  ok.operand(x);
  return x == 0.0f ? x : s;
#else
  (void)ok;
  return sqrt_rn(x);
#endif
}

// 1 / sqrt(x) rounded twice, as div_rn(1, sqrt_rn(x)): sqrt_sequence, then its
// reciprocal by reciprocal() from MUFU.RCP's seed. Exact for finite x of magnitude at least
// 2^-61 (negative x: NaN): the square root's sequence is exact on [2^-101, FLT_MAX] (sqrt.rn's
// own range check), and s then lies in [2^-30.5, 2^64), where the reciprocal's is (no
// intermediate overflows, underflows or is subnormal). That range needs one comparison
// (FastCheck::finite_operand). MUFU.RSQ's r is no seed for the reciprocal: its error (2^-22.9)
// exceeds one ulp, and where s's mantissa is all ones only the exact div_rn(1, s) is (see
// reciprocal()). Zero is not in the range (1 / +-0 is +-inf).
KF_HOST_DEVICE float rsqrt(float x, FastCheck& ok) {
#if KF_DEVICE_CODE
  const float s = sqrt_sequence(x);
  ok.finite_operand(x);
  return reciprocal(s, hw::rcp_approx_ftz(s));
#else
  (void)ok;
  return div_rn(1.0f, sqrt_rn(x));
#endif
}

}  // namespace fast

// Round to the nearest integer, ties to even (the default rounding mode on both backends).
KF_HOST_DEVICE double round_half_even(double x) { return ::rint(x); }

template <class T>
KF_HOST_DEVICE bool is_nan(T x) {
  return x != x;
}

// Whether x's sign bit is set (-0 included).
KF_HOST_DEVICE bool sign_bit(float x) { return (float_bits(x) >> 31) != 0; }
KF_HOST_DEVICE bool sign_bit(double x) {
#if KF_DEVICE_CODE
  return __double_as_longlong(x) < 0;
#else
  long long u;
  __builtin_memcpy(&u, &x, sizeof u);
  return u < 0;
#endif
}

// |x| with the sign bit cleared (-0 gives +0; a NaN stays NaN): on the device an operand
// modifier of the instruction that uses it.
KF_HOST_DEVICE float magnitude_of(float x) { return ::fabsf(x); }
KF_HOST_DEVICE double magnitude_of(double x) { return ::fabs(x); }

// ---------------------------------------------------------------------------------------------
// Integers.

// u modulo 2^bits(D), as D's signed or unsigned value (two's complement, no implementation-
// defined conversion).
template <int D>
KF_HOST_DEVICE long long wrap(unsigned long long u) {
  using T = DtypeTraits<D>;
  if constexpr (T::bits == 64) {
    return u <= 0x7fffffffffffffffULL ? static_cast<long long>(u) : -static_cast<long long>(~u) - 1;
  } else {
    const unsigned long long v = u & ((1ULL << T::bits) - 1ULL);
    if (T::is_signed && (v >> (T::bits - 1)) != 0)
      return static_cast<long long>(v) - static_cast<long long>(1ULL << T::bits);
    return static_cast<long long>(v);
  }
}

// A double as int64: truncated toward zero, NaN gives 0, beyond the int64 range clamped to it.
KF_HOST_DEVICE long long truncate_to_int64(double x) {
  if (is_nan(x)) return 0;
  if (x >= 9223372036854775808.0) return 9223372036854775807LL;
  if (x <= -9223372036854775808.0) return -9223372036854775807LL - 1;
  return static_cast<long long>(x);
}

// A double as integer dtype D under a saturating cast: NaN gives 0, clamped to D's range,
// truncated (Round false) or rounded half to even (Round true).
template <int D, bool Round>
KF_HOST_DEVICE long long saturate_to_integer(double x) {
  using T = DtypeTraits<D>;
  if (is_nan(x)) return 0;
  if (Round) x = round_half_even(x);
  if constexpr (T::bits == 64) {
    return truncate_to_int64(x);
  } else {
    if (x <= static_cast<double>(T::min_value)) return T::min_value;
    if (x >= static_cast<double>(T::max_value)) return T::max_value;
    return static_cast<long long>(x);
  }
}

// ---------------------------------------------------------------------------------------------
// Rounding into floating dtypes.

// x rounded to float with round-to-odd: truncated toward zero, and the last mantissa bit set when
// inexact. Rounding that float to a half type (11 or 8 significant bits, far fewer than float's
// 24) then gives exactly the correctly rounded half of x, with no double-rounding error.
KF_HOST_DEVICE float float_round_to_odd(double x) {
  float f = static_cast<float>(x);
  if (!is_nan(x) && static_cast<double>(f) != x) {
    unsigned int bits = float_bits(f);
    const double magnitude_f = f < 0.0f ? -static_cast<double>(f) : static_cast<double>(f);
    const double magnitude_x = x < 0.0 ? -x : x;
    if (magnitude_f > magnitude_x) bits -= 1u;  // one step toward zero
    f = float_from_bits(bits | 1u);
  }
  return f;
}

// An integer as a double, rounded to odd: exact below 2^53; above, the bits past double's 53 are
// cut and the last kept bit set when any was not zero. A plain conversion rounds to nearest
// there, and can land on a half type's midpoint that x was past (2^62 + 2^54 + 1 became 2^62 +
// 2^54, which rounds to the even bf16 2^62); rounded to odd, the half type's rounding of the
// double (through float_round_to_odd) is that of x.
template <class I>
KF_HOST_DEVICE double integer_round_to_odd_double(I x) {
  const bool negative = x < 0;
  unsigned long long magnitude = static_cast<unsigned long long>(x);
  if (negative) magnitude = 0ull - magnitude;
  int dropped = 0;
  while ((magnitude >> dropped) >> 53 != 0) ++dropped;  // at most 11
  const unsigned long long kept = magnitude >> dropped;
  const bool inexact = (magnitude & ((1ull << dropped) - 1ull)) != 0;
  const double v = static_cast<double>(kept | (inexact ? 1ull : 0ull)) *
                   static_cast<double>(1ull << dropped);  // both exact
  return negative ? -v : v;
}

// The value of dtype To nearest to x (ties to even; overflow to infinity), held in Compute<To>.
template <int To>
KF_HOST_DEVICE Compute<To> round_to(float x) {
  if constexpr (To == dtype::f32) {
    return x;
  } else if constexpr (To == dtype::f64) {
    return static_cast<double>(x);
  } else if constexpr (To == dtype::f16) {
    return half_to_float(float_to_half(x));
  } else {
    static_assert(To == dtype::bf16, "round_to: floating targets only");
    return bfloat16_to_float(float_to_bfloat16(x));
  }
}
template <int To>
KF_HOST_DEVICE Compute<To> round_to(double x) {
  if constexpr (To == dtype::f32) {
    return static_cast<float>(x);
  } else if constexpr (To == dtype::f64) {
    return x;
  } else {
    return round_to<To>(float_round_to_odd(x));
  }
}

// The largest finite value of a floating dtype.
template <int D>
KF_HOST_DEVICE double max_finite() {
  if constexpr (D == dtype::f16) {
    return 65504.0;
  } else if constexpr (D == dtype::bf16) {
    return 3.38953138925153547590470800371487866880e38;  // 0x7f7f
  } else if constexpr (D == dtype::f32) {
    return 3.40282346638528859811704183484516925440e38;  // FLT_MAX
  } else {
    return 1.79769313486231570814527423731704356798e308;  // DBL_MAX
  }
}

// ---------------------------------------------------------------------------------------------
// Element access and launch values.

template <int D>
KF_HOST_DEVICE Compute<D> load(const void* base, long long offset) {
  const Storage<D> s = static_cast<const Storage<D>*>(base)[offset];
  if constexpr (D == dtype::f16) {
    return half_to_float(s);
  } else if constexpr (D == dtype::bf16) {
    return bfloat16_to_float(s);
  } else {
    return static_cast<Compute<D>>(s);
  }
}

// load<D> of an input the kernel never writes (the launch refuses outputs overlapping inputs):
// on the device through the read-only data path (ld.global.nc), whatever the compiler can prove
// about the pointer's address space.
template <int D>
KF_HOST_DEVICE Compute<D> load_input(const void* base, long long offset) {
#if KF_DEVICE_CODE
  const Storage<D>* p = static_cast<const Storage<D>*>(base) + offset;
  if constexpr (D == dtype::f16 || D == dtype::bf16) {
    Storage<D> s;
    s.bits = __ldg(reinterpret_cast<const unsigned short*>(p));
    return load<D>(&s, 0);
  } else {
    return static_cast<Compute<D>>(__ldg(p));
  }
#else
  return load<D>(base, offset);
#endif
}

// Half types round to nearest even; integer values are in range already.
template <int D>
KF_HOST_DEVICE void store(void* base, long long offset, Compute<D> v) {
  Storage<D>* p = static_cast<Storage<D>*>(base) + offset;
  if constexpr (D == dtype::f16) {
    *p = float_to_half(v);
  } else if constexpr (D == dtype::bf16) {
    *p = float_to_bfloat16(v);
  } else {
    *p = static_cast<Storage<D>>(v);
  }
}

// Elements 2 * pair and 2 * pair + 1 at once: one 32-bit access for 16-bit dtypes (and one
// conversion instruction for both on sm_80+), else two element accesses. Same values as load and
// store.
template <int D>
KF_HOST_DEVICE void load2(const void* base, long long pair, Compute<D>& lo, Compute<D>& hi) {
  if constexpr (D == dtype::bf16) {
    const unsigned int w = static_cast<const unsigned int*>(base)[pair];
    lo = float_from_bits(w << 16);
    hi = float_from_bits(w & 0xffff0000u);
  } else {
    lo = load<D>(base, 2 * pair);
    hi = load<D>(base, 2 * pair + 1);
  }
}

template <int D>
KF_HOST_DEVICE void store2(void* base, long long pair, Compute<D> lo, Compute<D> hi) {
#if KF_DEVICE_CODE && __CUDA_ARCH__ >= 800
  if constexpr (D == dtype::bf16 || D == dtype::f16) {
    unsigned int w;
    if constexpr (D == dtype::bf16) {
      asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
    } else {
      asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
    }
    static_cast<unsigned int*>(base)[pair] = w;
    return;
  }
#endif
  store<D>(base, 2 * pair, lo);
  store<D>(base, 2 * pair + 1, hi);
}

// A launch value (weakly typed scalar or constant) met by an operand of dtype D. Floating D:
// the value in D's compute type (f16/bf16 values are not rounded: they round only by a cast or a
// write). Integer D: as KF_CAST_WRAP from f64 (truncated, NaN 0, clamped to int64, wrapped).
template <int D>
KF_HOST_DEVICE Compute<D> from_value(double v) {
  if constexpr (DtypeTraits<D>::floating) {
    return static_cast<Compute<D>>(v);
  } else {
    return wrap<D>(static_cast<unsigned long long>(truncate_to_int64(v)));
  }
}

// ---------------------------------------------------------------------------------------------
// Arithmetic.

namespace detail {

// Floating min and max are IEEE 754-2019 minimum and maximum: NaN when either operand is NaN,
// and -0 below +0 (min(+0, -0) is -0, max(-0, +0) is +0), so the result does not depend on the
// operands' order. On the device, f32 (and f16/bf16, computed in f32) is one instruction
// (min.NaN / max.NaN, FMNMX.NAN); elsewhere comparisons (equal operands differ in bits only as
// signed zeros).
template <int D>
KF_HOST_DEVICE Compute<D> min_of(Compute<D> a, Compute<D> b) {
  if constexpr (DtypeTraits<D>::floating) {
#if KF_DEVICE_CODE
    if constexpr (sizeof(Compute<D>) == sizeof(float)) {
      float r;
      asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
      return r;
    }
#endif
    if (is_nan(a) || is_nan(b)) return a + b;  // a NaN
    if (a == b) return sign_bit(a) ? a : b;    // -0 below +0; equal values otherwise
    return a < b ? a : b;
  } else {
    return b < a ? b : a;
  }
}

template <int D>
KF_HOST_DEVICE Compute<D> max_of(Compute<D> a, Compute<D> b) {
  if constexpr (DtypeTraits<D>::floating) {
#if KF_DEVICE_CODE
    if constexpr (sizeof(Compute<D>) == sizeof(float)) {
      float r;
      asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
      return r;
    }
#endif
    if (is_nan(a) || is_nan(b)) return a + b;  // a NaN
    if (a == b) return sign_bit(a) ? b : a;    // +0 above -0; equal values otherwise
    return a < b ? b : a;
  } else {
    return a < b ? b : a;
  }
}

// a^b for integers (validation keeps pow to floating dtypes; defined for completeness): exact
// and wrapped for b >= 0; for b < 0 the truncated value (1, -1 or 0).
template <int D>
KF_HOST_DEVICE long long integer_pow(long long a, long long b) {
  if (b < 0) {
    if (a == 1) return 1;
    if (a == -1) return (b & 1) ? -1 : 1;
    return 0;
  }
  unsigned long long result = 1, base = static_cast<unsigned long long>(a);
  unsigned long long e = static_cast<unsigned long long>(b);
  while (e != 0) {
    if (e & 1ULL) result *= base;
    base *= base;
    e >>= 1;
  }
  return wrap<D>(result);
}

}  // namespace detail

template <int Op, int D>
KF_HOST_DEVICE Compute<D> unary(Compute<D> x) {
  using T = Compute<D>;
  if constexpr (DtypeTraits<D>::floating) {
    if constexpr (Op == unary_op::neg) {
      return -x;
    } else if constexpr (Op == unary_op::abs) {
      return magnitude_of(x);  // the sign bit cleared: -0 becomes +0, NaN stays NaN
    } else if constexpr (Op == unary_op::exp) {
      return exp_of(x);
    } else if constexpr (Op == unary_op::log) {
      return log_of(x);
    } else if constexpr (Op == unary_op::sqrt) {
      return sqrt_rn(x);
    } else if constexpr (Op == unary_op::rsqrt) {
      return div_rn(T(1), sqrt_rn(x));
    } else {
      static_assert(Op == unary_op::square, "unary: unknown op");
      return mul_rn(x, x);
    }
  } else {
    const unsigned long long u = static_cast<unsigned long long>(x);
    if constexpr (Op == unary_op::neg) {
      return wrap<D>(0ULL - u);
    } else if constexpr (Op == unary_op::abs) {
      return x < 0 ? wrap<D>(0ULL - u) : x;
    } else if constexpr (Op == unary_op::square) {
      return wrap<D>(u * u);
    } else {
      // Floating-only ops (validation forbids them on integers): through f64, cast back wrapping.
      return from_value<D>(unary<Op, dtype::f64>(static_cast<double>(x)));
    }
  }
}

template <int Op, int D>
KF_HOST_DEVICE Compute<D> binary(Compute<D> a, Compute<D> b) {
  if constexpr (Op == binary_op::min) {
    return detail::min_of<D>(a, b);
  } else if constexpr (Op == binary_op::max) {
    return detail::max_of<D>(a, b);
  } else if constexpr (DtypeTraits<D>::floating) {
    if constexpr (Op == binary_op::add) {
      return add_rn(a, b);
    } else if constexpr (Op == binary_op::sub) {
      return sub_rn(a, b);
    } else if constexpr (Op == binary_op::mul) {
      return mul_rn(a, b);
    } else if constexpr (Op == binary_op::div) {
      return div_rn(a, b);
    } else {
      static_assert(Op == binary_op::pow, "binary: unknown op (comparisons are compare<>)");
      return pow_of(a, b);
    }
  } else {
    using U = unsigned long long;
    if constexpr (Op == binary_op::add) {
      return wrap<D>(static_cast<U>(a) + static_cast<U>(b));
    } else if constexpr (Op == binary_op::sub) {
      return wrap<D>(static_cast<U>(a) - static_cast<U>(b));
    } else if constexpr (Op == binary_op::mul) {
      return wrap<D>(static_cast<U>(a) * static_cast<U>(b));
    } else if constexpr (Op == binary_op::div) {
      if (b == 0) return 0;
      if (b == -1) return wrap<D>(0ULL - static_cast<U>(a));  // INT_MIN / -1 wraps to INT_MIN
      return a / b;                                           // truncates toward zero
    } else {
      static_assert(Op == binary_op::pow, "binary: unknown op (comparisons are compare<>)");
      return detail::integer_pow<D>(a, b);
    }
  }
}

// unary<Op, D> and binary<Op, D>, with the fast paths of f32-computed division, sqrt and rsqrt
// when Fast (which record their operands in ok; see the header comment).
template <bool Fast, int Op, int D>
KF_HOST_DEVICE Compute<D> unary_v(Compute<D> x, FastCheck& ok) {
  if constexpr (Fast && KF_DEVICE_CODE && DtypeTraits<D>::floating &&
                sizeof(Compute<D>) == sizeof(float)) {
    if constexpr (Op == unary_op::sqrt) {
      return fast::sqrt(x, ok);
    } else if constexpr (Op == unary_op::rsqrt) {
      return fast::rsqrt(x, ok);
    } else {
      return unary<Op, D>(x);
    }
  } else {
    (void)ok;
    return unary<Op, D>(x);
  }
}

template <bool Fast, int Op, int D>
KF_HOST_DEVICE Compute<D> binary_v(Compute<D> a, Compute<D> b, FastCheck& ok) {
  if constexpr (Fast && KF_DEVICE_CODE && Op == binary_op::div && DtypeTraits<D>::floating &&
                sizeof(Compute<D>) == sizeof(float)) {
    return fast::div(a, b, ok);
  } else {
    (void)ok;
    return binary<Op, D>(a, b);
  }
}

// a / d.value for a divisor prepared once (a launch value met by an operand of dtype D).
template <bool Fast, int D>
KF_HOST_DEVICE Compute<D> div_v(Compute<D> a, const Divisor<Compute<D>>& d, FastCheck& ok) {
  if constexpr (Fast && KF_DEVICE_CODE && DtypeTraits<D>::floating &&
                sizeof(Compute<D>) == sizeof(float)) {
    return fast::div(a, d, ok);
  } else {
    (void)ok;
    return binary<binary_op::div, D>(a, d.value);
  }
}

// Whether unary_v / binary_v have a fast path (one that records in ok) for this op and dtype.
template <int Op, int D>
constexpr bool unary_has_fast_path() {
  return DtypeTraits<D>::floating && sizeof(Compute<D>) == sizeof(float) &&
         (Op == unary_op::sqrt || Op == unary_op::rsqrt);
}
template <int Op, int D>
constexpr bool binary_has_fast_path() {
  return DtypeTraits<D>::floating && sizeof(Compute<D>) == sizeof(float) && Op == binary_op::div;
}

// 0 or 1 (the u8 value of a comparison); every comparison with NaN is false except NE.
template <int Op, int D>
KF_HOST_DEVICE long long compare(Compute<D> a, Compute<D> b) {
  if constexpr (Op == binary_op::eq) {
    return a == b ? 1 : 0;
  } else if constexpr (Op == binary_op::ne) {
    return a != b ? 1 : 0;
  } else if constexpr (Op == binary_op::lt) {
    return a < b ? 1 : 0;
  } else if constexpr (Op == binary_op::le) {
    return a <= b ? 1 : 0;
  } else if constexpr (Op == binary_op::gt) {
    return a > b ? 1 : 0;
  } else {
    static_assert(Op == binary_op::ge, "compare: unknown op");
    return a >= b ? 1 : 0;
  }
}

// act(x) with activation.hpp's functors and the precise primitives. Integer D (not reachable
// through validation): computed in f64 and cast back wrapping.
template <int Act, int D>
KF_HOST_DEVICE Compute<D> activation(Compute<D> x) {
  using Functor = typename ActivationOf<static_cast<Activation>(Act)>::type;
  if constexpr (DtypeTraits<D>::floating) {
    return Functor{}(x, Precise{});
  } else {
    return from_value<D>(Functor{}(static_cast<double>(x), Precise{}));
  }
}

template <int D>
KF_HOST_DEVICE Compute<D> clamp(Compute<D> x, Compute<D> lo, Compute<D> hi) {
  return detail::min_of<D>(detail::max_of<D>(x, lo), hi);
}

template <int D>
KF_HOST_DEVICE bool truthy(Compute<D> x) {
  return x != Compute<D>(0);  // NaN != 0 is true
}

template <int D>
KF_HOST_DEVICE Compute<D> select(bool cond, Compute<D> a, Compute<D> b) {
  return cond ? a : b;
}

// ---------------------------------------------------------------------------------------------
// Casts, as kf_cast_mode_t documents them.

template <int From, int To, int Mode>
KF_HOST_DEVICE Compute<To> cast(Compute<From> x) {
  constexpr bool from_floating = DtypeTraits<From>::floating;
  constexpr bool to_floating = DtypeTraits<To>::floating;
  constexpr bool saturate = Mode != cast_mode::wrap;
  if constexpr (to_floating) {
    if constexpr (from_floating) {
      if (saturate) {  // clamp to the target's finite range (compared in double); NaN passes
        const double v = static_cast<double>(x);
        if (v >= max_finite<To>()) return static_cast<Compute<To>>(max_finite<To>());
        if (v <= -max_finite<To>()) return static_cast<Compute<To>>(-max_finite<To>());
      }
      return round_to<To>(x);
    } else {
      // Integer to floating: one rounding (f32, f64 directly; halves through f64 and then a
      // round-to-odd float).
      if constexpr (To == dtype::f32) {
        return static_cast<float>(x);
      } else if constexpr (To == dtype::f64) {
        return static_cast<double>(x);
      } else {
        double v = integer_round_to_odd_double(x);
        if (saturate) {
          if (v > max_finite<To>()) v = max_finite<To>();
          if (v < -max_finite<To>()) v = -max_finite<To>();
        }
        return round_to<To>(v);
      }
    }
  } else {
    if constexpr (from_floating) {
      const double v = static_cast<double>(x);
      if constexpr (Mode == cast_mode::wrap) {
        return wrap<To>(static_cast<unsigned long long>(truncate_to_int64(v)));
      } else {
        return saturate_to_integer<To, Mode == cast_mode::saturate_round>(v);
      }
    } else {
      if constexpr (Mode == cast_mode::wrap) {
        return wrap<To>(static_cast<unsigned long long>(x));
      } else {
        using T = DtypeTraits<To>;
        if (x < T::min_value) return T::min_value;
        if (x > T::max_value) return T::max_value;
        return x;
      }
    }
  }
}

}  // namespace math
}  // namespace kf
