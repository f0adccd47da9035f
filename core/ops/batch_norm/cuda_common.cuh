// Device helpers shared by the batch norm CUDA kernels (cuda.cu: inference; cuda_training.cu:
// training): per-channel values, the inference coefficients, the training coefficients from a
// channel's shifted sums. Include only from the family's .cu files.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/math/activation.hpp"
#include "core/math/numeric.hpp"
#include "core/math/row_stats.hpp"
#include "core/ops/batch_norm/batch_norm.hpp"

namespace kf::batch_norm {

template <class S, int Width>
union Vector {
  uint4 raw;
  S v[Width];
};

template <class T>
__device__ __forceinline__ T channel_value(const Channel& t, int64_t c, T absent) {
  return t.data ? static_cast<const T*>(t.data)[c * t.stride] : absent;
}

// A channel's inference coefficients: y = act((v - mean) * scale + bias). Computed once per
// channel run, not per element (the square root and division cost more than the element's
// bytes for 16-bit data).
template <class T>
struct Affine {
  T mean, scale, bias;
};

template <class T>
__device__ __forceinline__ Affine<T> affine_of(const Plan& p, int64_t c) {
  const T variance = channel_value<T>(p.running_var, c, T(1));
  return Affine<T>{
      channel_value<T>(p.running_mean, c, T(0)),
      channel_value<T>(p.weight, c, T(1)) / math::stats::sqrt_of(variance + static_cast<T>(p.eps)),
      channel_value<T>(p.bias, c, T(0))};
}

// Coefficients of one channel from its shifted sums (d = x - shift), with the channel's weight
// and bias given; updates the running statistics when `update` (one thread per channel).
template <class T>
struct Coefficients {
  T shift, center, scale, bias;
};

template <class T>
__device__ __forceinline__ Coefficients<T> train_channel(const Plan& p, int64_t c, T shift, T sum_d,
                                                         T sum_d2, bool update, T weight, T bias) {
  const T n = static_cast<T>(p.count);
  const auto s = math::stats::layer_norm_stats<T>(sum_d, sum_d2, n, static_cast<T>(p.eps));
  if (update && p.running_mean.data) {
    T variance = sum_d2 / n - s.center * s.center;
    if (variance < T(0)) variance = T(0);
    const T momentum = static_cast<T>(p.momentum);
    T& running_mean = static_cast<T*>(p.running_mean.data)[c * p.running_mean.stride];
    T& running_var = static_cast<T*>(p.running_var.data)[c * p.running_var.stride];
    running_mean = (T(1) - momentum) * running_mean + momentum * (shift + s.center);
    running_var = (T(1) - momentum) * running_var + momentum * (variance * (n / (n - T(1))));
  }
  return Coefficients<T>{shift, s.center, s.rstd * weight, bias};
}

// Whether a channel's shift (its first element) lies more than four deviations from its mean, by
// its shifted sums: the variance, sum_d2 / n - center^2, then cancels with a relative error of
// about (1 + (center * rstd)^2) of the sums' rounding (as the norms' streaming kernels found:
// shift_far_from_mean in norm/cuda_streaming.cuh), so the kernels sum the channel again about the
// mean. center^2 > 16 (variance + eps), multiplied out by n^2, so that no division or square root
// (and their registers) joins the kernels. The sums are the same bits in every thread that holds
// them (block and cluster reductions), so a channel's block or cluster takes one branch.
template <class T>
__device__ __forceinline__ bool shift_far_from_mean(const Plan& p, T sum_d, T sum_d2) {
  const T n = static_cast<T>(p.count);
  return T(17) * sum_d * sum_d > T(16) * n * (sum_d2 + n * static_cast<T>(p.eps));
}

// The same, reading the channel's weight and bias.
template <class T>
__device__ __forceinline__ Coefficients<T> train_channel(const Plan& p, int64_t c, T shift, T sum_d,
                                                         T sum_d2, bool update) {
  return train_channel<T>(p, c, shift, sum_d, sum_d2, update, channel_value<T>(p.weight, c, T(1)),
                          channel_value<T>(p.bias, c, T(0)));
}

// Enqueues the training kernels (cuda_training.cu).
void run_training_cuda(const Plan& plan, int32_t device_id, cudaStream_t stream);

}  // namespace kf::batch_norm
