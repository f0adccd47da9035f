// CPU backend of the batch norm family. Training statistics are computed per channel in parallel
// (a shifted two-pass sum: first the mean, then sums of x - mean, see core/math/row_stats.hpp),
// the running statistics are updated there, and the normalisation is one parallel pass over the
// elements in memory order with per-channel coefficients, which also makes the exact in-place
// form safe (every element is read before it is written, statistics are final by then).
#include <algorithm>
#include <vector>

#include "core/math/numeric.hpp"
#include "core/math/row_stats.hpp"
#include "core/ops/batch_norm/batch_norm.hpp"
#include "core/ops/dispatch.hpp"
#include "core/ops/rows/blocked_sum.hpp"
#include "core/runtime/thread_pool.hpp"

namespace kf::batch_norm {
namespace {

// y = (x - shift - center) * scale + bias: shift is a value close to the mean that x - shift
// is exact for (the running mean, or the rounded batch mean), center what is left of the mean.
template <class C>
struct Coefficients {
  C shift = 0, center = 0, scale = 1, bias = 0;
};

template <class C>
C channel_value(const Channel& t, int64_t c, C absent) {
  return t.data ? static_cast<const C*>(t.data)[c * t.stride] : absent;
}

template <class S>
Coefficients<math::compute_t<S>> training_channel(const Plan& p, int64_t c) {
  using C = math::compute_t<S>;
  const rows::Walk& w = p.by_channel;
  const S* x = static_cast<const S*>(p.x_c.data) + rows::row_offset(w, p.x_c, c);
  auto load = [&](int64_t m) {
    return math::StorageTraits<S>::to_compute(x[rows::col_offset(w, p.x_c, m)]);
  };
  const int64_t n = p.count;
  const C count = static_cast<C>(n);
  Coefficients<C> k;
  k.shift = rows::blocked_sum<C>(n, load) / count;
  const C sum_d = rows::blocked_sum<C>(n, [&](int64_t m) { return load(m) - k.shift; });
  const C sum_d2 = rows::blocked_sum<C>(n, [&](int64_t m) {
    const C d = load(m) - k.shift;
    return d * d;
  });
  const auto s = math::stats::layer_norm_stats<C>(sum_d, sum_d2, count, static_cast<C>(p.eps));
  k.center = s.center;
  k.scale = s.rstd * channel_value<C>(p.weight, c, C(1));
  k.bias = channel_value<C>(p.bias, c, C(0));
  if (p.running_mean.data) {
    const C mean = k.shift + s.center;
    C variance = sum_d2 / count - s.center * s.center;
    if (variance < C(0)) variance = C(0);
    const C unbiased = variance * (count / (count - C(1)));
    const C momentum = static_cast<C>(p.momentum);
    C& running_mean = static_cast<C*>(p.running_mean.data)[c * p.running_mean.stride];
    C& running_var = static_cast<C*>(p.running_var.data)[c * p.running_var.stride];
    running_mean = (C(1) - momentum) * running_mean + momentum * mean;
    running_var = (C(1) - momentum) * running_var + momentum * unbiased;
  }
  return k;
}

template <class C>
Coefficients<C> inference_channel(const Plan& p, int64_t c) {
  Coefficients<C> k;
  k.shift = channel_value<C>(p.running_mean, c, C(0));
  const C variance = channel_value<C>(p.running_var, c, C(1));
  k.scale = channel_value<C>(p.weight, c, C(1)) / math::stats::sqrt_of(variance + C(p.eps));
  k.bias = channel_value<C>(p.bias, c, C(0));
  return k;
}

template <class S, class Act>
void normalize(const Plan& p, const std::vector<Coefficients<math::compute_t<S>>>& coefficients,
               int64_t begin, int64_t end) {
  using Traits = math::StorageTraits<S>;
  const rows::Walk& w = p.elements;
  const S* x = static_cast<const S*>(p.x_e.data);
  S* out = static_cast<S*>(p.out_e.data);
  // The channel advances every channel_inner elements: counted, not divided per element.
  int64_t c = (begin / p.channel_inner) % p.channels;
  int64_t left = p.channel_inner - begin % p.channel_inner;
  for (int64_t e = begin; e < end; ++e) {
    const auto& k = coefficients[static_cast<size_t>(c)];
    if (--left == 0) {
      left = p.channel_inner;
      c = c + 1 == p.channels ? 0 : c + 1;
    }
    const int64_t xo = p.dense ? e : rows::col_offset(w, p.x_e, e);
    const int64_t oo = p.dense ? e : rows::col_offset(w, p.out_e, e);
    const auto v = Traits::to_compute(x[xo]);
    out[oo] = Traits::from_compute(Act{}((v - k.shift - k.center) * k.scale + k.bias));
  }
}

template <class S, class Act>
void run(const Plan& p, ThreadPool& threads) {
  using C = math::compute_t<S>;
  std::vector<Coefficients<C>> coefficients(static_cast<size_t>(p.channels));
  if (p.training) {
    // About 32K elements per task, at least one channel.
    const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / p.count);
    threads.parallel_for(p.channels, grain, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c)
        coefficients[static_cast<size_t>(c)] = training_channel<S>(p, c);
    });
  } else {
    for (int64_t c = 0; c < p.channels; ++c)
      coefficients[static_cast<size_t>(c)] = inference_channel<C>(p, c);
  }
  threads.parallel_for(p.elements.row_length, int64_t{1} << 15, [&](int64_t begin, int64_t end) {
    normalize<S, Act>(p, coefficients, begin, end);
  });
}

}  // namespace

void run_cpu(const Plan& plan, ThreadPool& threads) {
  dispatch_dtype(plan.dtype, [&](auto storage) {
    dispatch_activation(plan.act,
                        [&](auto act) { run<decltype(storage), decltype(act)>(plan, threads); });
  });
}

}  // namespace kf::batch_norm
