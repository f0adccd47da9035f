// Activation functors: the one definition of every activation, used by the CPU backend, the CUDA
// kernels and NVRTC-generated code. T is the compute type: float (for f32, f16 and bf16 storage)
// or double (for f64); the device and host paths evaluate the same formula.
#pragma once

#include "core/math/elementary.hpp"
#include "core/math/host_device.hpp"

namespace kf {
namespace math {

// Values equal kf_activation_t's (checked where the public enum is visible).
enum class Activation : int {
  none = 0,
  relu = 1,
  gelu = 2,
  gelu_tanh = 3,
  silu = 4,
  tanh = 5,
  sigmoid = 6
};
constexpr int kActivationCount = 7;

struct Identity {
  static constexpr Activation id = Activation::none;
  template <class T, class P = Precise>
  KF_HOST_DEVICE T operator()(T x, P = {}) const {
    return x;
  }
};

// max(x, +0) with NaN propagating (like PyTorch) instead of becoming 0: negative values and -0
// give +0. On the device, f32 (and f16/bf16, computed in f32) is one max.NaN (FMNMX.NAN), where
// a compare and a select took two instructions of the same pipe.
struct Relu {
  static constexpr Activation id = Activation::relu;
  template <class T, class P = Precise>
  KF_HOST_DEVICE T operator()(T x, P = {}) const {
#if KF_DEVICE_CODE
    if constexpr (sizeof(T) == sizeof(float)) {
      float r;
      asm("max.NaN.f32 %0, %1, 0f00000000;" : "=f"(r) : "f"(x));
      return r;
    }
#endif
    return x <= T(0) ? T(0) : x;
  }
};

// x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)), evaluated as h + h erf(x / sqrt 2) with h = x / 2
// (P::times_one_plus_erf): one fused multiply-add where the product form takes an add and a
// multiply.
struct Gelu {
  static constexpr Activation id = Activation::gelu;
  template <class T, class P = Precise>
  KF_HOST_DEVICE T operator()(T x, P = {}) const {
    return P::times_one_plus_erf(T(0.5) * x, x);
  }
};

// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
struct GeluTanh {
  static constexpr Activation id = Activation::gelu_tanh;
  template <class T, class P = Precise>
  KF_HOST_DEVICE T operator()(T x, P = {}) const {
    const T sqrt_2_over_pi = T(0.79788456080286535588);
    const T cubic = T(0.044715);
    const T inner = sqrt_2_over_pi * (x + cubic * x * x * x);
    return T(0.5) * x * (T(1) + P::tanh(inner));
  }
};

// x * sigmoid(x); for very negative x, exp(-x) overflows to inf and the quotient is -0, as it
// should.
struct Silu {
  static constexpr Activation id = Activation::silu;
  template <class T, class P = Precise>
  KF_HOST_DEVICE T operator()(T x, P = {}) const {
    return P::divide(x, T(1) + P::exp(-x));
  }
};

struct Tanh {
  static constexpr Activation id = Activation::tanh;
  template <class T, class P = Precise>
  KF_HOST_DEVICE T operator()(T x, P = {}) const {
    return P::tanh(x);
  }
};

struct Sigmoid {
  static constexpr Activation id = Activation::sigmoid;
  template <class T, class P = Precise>
  KF_HOST_DEVICE T operator()(T x, P = {}) const {
    return P::divide(T(1), T(1) + P::exp(-x));
  }
};

// The functor for a compile-time tag.
template <Activation A>
struct ActivationOf;
template <>
struct ActivationOf<Activation::none> {
  using type = Identity;
};
template <>
struct ActivationOf<Activation::relu> {
  using type = Relu;
};
template <>
struct ActivationOf<Activation::gelu> {
  using type = Gelu;
};
template <>
struct ActivationOf<Activation::gelu_tanh> {
  using type = GeluTanh;
};
template <>
struct ActivationOf<Activation::silu> {
  using type = Silu;
};
template <>
struct ActivationOf<Activation::tanh> {
  using type = Tanh;
};
template <>
struct ActivationOf<Activation::sigmoid> {
  using type = Sigmoid;
};

// Run-time dispatch, for paths where the activation is a parameter instead of a template argument
// (the branch is uniform across a warp, so it costs a compare, not divergence).
template <class T, class P = Precise>
KF_HOST_DEVICE T apply_activation(Activation act, T x, P primitives = {}) {
  switch (act) {
    case Activation::relu: return Relu{}(x, primitives);
    case Activation::gelu: return Gelu{}(x, primitives);
    case Activation::gelu_tanh: return GeluTanh{}(x, primitives);
    case Activation::silu: return Silu{}(x, primitives);
    case Activation::tanh: return Tanh{}(x, primitives);
    case Activation::sigmoid: return Sigmoid{}(x, primitives);
    case Activation::none:
    default: return x;
  }
}

// The activation as a functor for an output loop whose activation is a run-time parameter:
// with_activation(act, fn) calls fn with Identity or Relu, so that none and ReLU get their own
// copy of the loop (a select at most, no dispatch per element), or with AnyActivation, one copy
// shared by the transcendental ones, which dispatches at run time (a uniform branch, small beside
// their own cost).
struct AnyActivation {
  Activation act;
  template <class T, class P = Precise>
  KF_HOST_DEVICE T operator()(T x, P primitives = {}) const {
    return apply_activation(act, x, primitives);
  }
};

template <class Fn>
KF_HOST_DEVICE void with_activation(Activation act, Fn&& fn) {
  if (act == Activation::none) {
    fn(Identity{});
  } else if (act == Activation::relu) {
    fn(Relu{});
  } else {
    fn(AnyActivation{act});
  }
}

}  // namespace math
}  // namespace kf
