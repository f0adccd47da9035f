// Host-side dispatch from the run-time tags of a plan to the compile-time types the backends are
// instantiated with: one switch per tag for every op family (CPU loops and CUDA launches alike).
#pragma once

#include "core/math/activation.hpp"
#include "core/math/numeric.hpp"
#include "kernel_fusion/types.h"

namespace kf {

// Calls fn with a value of the storage type of a floating dtype (the entry has checked it is one).
template <class Fn>
void dispatch_dtype(kf_dtype_t dtype, Fn&& fn) {
  switch (dtype) {
    case KF_DTYPE_FLOAT16: fn(math::half_t{}); break;
    case KF_DTYPE_BFLOAT16: fn(math::bfloat16_t{}); break;
    case KF_DTYPE_FLOAT64: fn(double{}); break;
    default: fn(float{}); break;
  }
}

// Calls fn with the functor of act.
template <class Fn>
void dispatch_activation(math::Activation act, Fn&& fn) {
  switch (act) {
    case math::Activation::relu: fn(math::Relu{}); break;
    case math::Activation::gelu: fn(math::Gelu{}); break;
    case math::Activation::gelu_tanh: fn(math::GeluTanh{}); break;
    case math::Activation::silu: fn(math::Silu{}); break;
    case math::Activation::tanh: fn(math::Tanh{}); break;
    case math::Activation::sigmoid: fn(math::Sigmoid{}); break;
    default: fn(math::Identity{}); break;
  }
}

}  // namespace kf
