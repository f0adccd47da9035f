// The reductions of kf_reduce, written once for the CPU backend and the CUDA kernels. Each is
// identity / map / combine / finish over the compute type T (float, or double for f64 data):
// acc = combine(acc, map(x)) over the elements in any fixed grouping, then finish(acc, n).
// combine is associative up to rounding, so backends may group partial results (lanes, blocks of
// rows, warps) as long as the grouping is fixed, which keeps every result deterministic.
#pragma once

#include "core/math/host_device.hpp"
#include "core/math/row_stats.hpp"

namespace kf {
namespace math {
namespace reduction {

// Mirrors kf_reduce_op_t (the entry checks the values match).
enum class Op : int { sum, mean, max, min, sum_squares, mean_abs, l2_norm };
constexpr int kOpCount = 7;

// |x|, NaN stays NaN and |-0| is +0. fabs rather than a compare and select: a CUDA kernel folds
// it into the add that takes it (an operand modifier), where the select cost two instructions
// an element in the 16-bit column reductions.
KF_HOST_DEVICE float abs_of(float x) { return ::fabsf(x); }
KF_HOST_DEVICE double abs_of(double x) { return ::fabs(x); }

struct Sum {
  template <class T>
  static KF_HOST_DEVICE T identity() {
    return T(0);
  }
  template <class T>
  static KF_HOST_DEVICE T map(T x) {
    return x;
  }
  template <class T>
  static KF_HOST_DEVICE T combine(T a, T b) {
    return a + b;
  }
  template <class T>
  static KF_HOST_DEVICE T finish(T acc, T) {
    return acc;
  }
};

struct Mean : Sum {
  template <class T>
  static KF_HOST_DEVICE T finish(T acc, T n) {
    return acc / n;  // 0 / 0 = NaN for an empty reduction, as NumPy
  }
};

struct SumSquares : Sum {
  template <class T>
  static KF_HOST_DEVICE T map(T x) {
    return x * x;
  }
};

struct MeanAbs : Mean {
  template <class T>
  static KF_HOST_DEVICE T map(T x) {
    return abs_of(x);
  }
};

struct L2Norm : SumSquares {
  template <class T>
  static KF_HOST_DEVICE T finish(T acc, T) {
    return stats::sqrt_of(acc);
  }
};

// max and min propagate NaN: a NaN accumulator stays, a NaN element replaces the accumulator.
struct Max {
  template <class T>
  static KF_HOST_DEVICE T identity() {
    return stats::negative_infinity<T>();
  }
  template <class T>
  static KF_HOST_DEVICE T map(T x) {
    return x;
  }
  template <class T>
  static KF_HOST_DEVICE T combine(T a, T b) {
    return (a > b || a != a) ? a : b;
  }
  template <class T>
  static KF_HOST_DEVICE T finish(T acc, T) {
    return acc;
  }
};

struct Min : Max {
  template <class T>
  static KF_HOST_DEVICE T identity() {
    return -stats::negative_infinity<T>();
  }
  template <class T>
  static KF_HOST_DEVICE T combine(T a, T b) {
    return (a < b || a != a) ? a : b;
  }
};

// Calls fn with the functor of op (host code: backends pick their kernels with it).
template <class Fn>
inline void dispatch(Op op, Fn&& fn) {
  switch (op) {
    case Op::mean: fn(Mean{}); break;
    case Op::max: fn(Max{}); break;
    case Op::min: fn(Min{}); break;
    case Op::sum_squares: fn(SumSquares{}); break;
    case Op::mean_abs: fn(MeanAbs{}); break;
    case Op::l2_norm: fn(L2Norm{}); break;
    default: fn(Sum{}); break;
  }
}

}  // namespace reduction
}  // namespace math
}  // namespace kf
