// Binary arithmetic functors, applied in the compute type (float for f32/f16/bf16, double for f64).
#pragma once

#include "core/math/host_device.hpp"

namespace kf {
namespace math {

// Run-time tag of the functors below, for code that dispatches on the op.
enum class BinaryOp : int { add = 0, mul = 1 };

struct Add {
  static constexpr BinaryOp id = BinaryOp::add;
  template <class T>
  KF_HOST_DEVICE T operator()(T x, T y) const {
    return x + y;
  }
};

struct Mul {
  static constexpr BinaryOp id = BinaryOp::mul;
  template <class T>
  KF_HOST_DEVICE T operator()(T x, T y) const {
    return x * y;
  }
};

}  // namespace math
}  // namespace kf
