// CPU backend of the norm family. Rows are split over the context's thread pool; each row is
// gathered once into a compute-type buffer (which also makes any strided layout and the exact
// in-place forms safe), reduced twice (shifted two-pass layer norm, see core/math/row_stats.hpp)
// and written back through the activation. Everything between the gather and the write-back
// runs over that buffer in vectorised loops (core/ops/rows/cpu_rows.hpp); weight and bias are
// widened once per task.
#include <algorithm>
#include <vector>

#include "core/math/numeric.hpp"
#include "core/math/row_stats.hpp"
#include "core/ops/dispatch.hpp"
#include "core/ops/norm/norm.hpp"
#include "core/ops/rows/cpu_rows.hpp"
#include "core/runtime/thread_pool.hpp"

namespace kf::norm {
namespace {

// h += r, rounded to the storage type S as residual_out holds it (the CUDA backend does the same).
template <class S>
KF_CPU_CLONES void add_residual(math::compute_t<S>* h, const math::compute_t<S>* r, int64_t n) {
  using Traits = math::StorageTraits<S>;
  for (int64_t i = 0; i < n; ++i) h[i] = Traits::to_compute(Traits::from_compute(h[i] + r[i]));
}

// h = ((h - shift) - center) * rstd, times weight and plus bias where present.
template <class C, bool kWeight, bool kBias>
KF_CPU_CLONES void normalize(C* h, int64_t n, C shift, C center, C rstd, const C* weight,
                             const C* bias) {
  for (int64_t i = 0; i < n; ++i) {
    C y = (h[i] - shift - center) * rstd;
    if constexpr (kWeight) y *= weight[i];
    if constexpr (kBias) y += bias[i];
    h[i] = y;
  }
}

template <class C, class Act>
KF_CPU_CLONES void activate(C* h, int64_t n) {
  for (int64_t i = 0; i < n; ++i) h[i] = Act{}(h[i]);
}

template <class S, class Act>
void run_rows(const Plan& p, int64_t begin, int64_t end) {
  using C = math::compute_t<S>;
  namespace cpu = rows::cpu;
  const rows::Walk& w = p.walk;
  const int64_t n = w.row_length;
  const auto buffer = [n](bool present) { return std::vector<C>(present ? n : 0); };
  std::vector<C> h = buffer(true), r = buffer(p.residual.data);
  std::vector<C> weight = buffer(p.weight.data), bias = buffer(p.bias.data);
  if (p.weight.data) cpu::gather<S>(w, p.weight, 0, weight.data());
  if (p.bias.data) cpu::gather<S>(w, p.bias, 0, bias.data());
  const auto finish = [&](C shift, C center, C rstd) {
    if (p.weight.data && p.bias.data) {
      normalize<C, true, true>(h.data(), n, shift, center, rstd, weight.data(), bias.data());
    } else if (p.weight.data) {
      normalize<C, true, false>(h.data(), n, shift, center, rstd, weight.data(), nullptr);
    } else if (p.bias.data) {
      normalize<C, false, true>(h.data(), n, shift, center, rstd, nullptr, bias.data());
    } else {
      normalize<C, false, false>(h.data(), n, shift, center, rstd, nullptr, nullptr);
    }
    if constexpr (Act::id != math::Activation::none) activate<C, Act>(h.data(), n);
  };
  const C eps = static_cast<C>(p.eps);
  for (int64_t row = begin; row < end; ++row) {
    cpu::gather<S>(w, p.x, rows::row_offset(w, p.x, row), h.data());
    if (p.residual.data) {
      cpu::gather<S>(w, p.residual, rows::row_offset(w, p.residual, row), r.data());
      add_residual<S>(h.data(), r.data(), n);
    }
    if (p.residual_out.data)
      cpu::scatter<S>(w, p.residual_out, rows::row_offset(w, p.residual_out, row), h.data());
    if (p.kind == Kind::layer) {
      const C shift = cpu::sum(h.data(), n) / static_cast<C>(n);
      C sum_d = 0, sum_d2 = 0;
      cpu::shifted_sums(h.data(), n, shift, &sum_d, &sum_d2);
      const auto s = math::stats::layer_norm_stats<C>(sum_d, sum_d2, static_cast<C>(n), eps);
      if (p.mean.data)
        static_cast<C*>(p.mean.data)[rows::row_offset(w, p.mean, row)] = shift + s.center;
      if (p.rstd.data) static_cast<C*>(p.rstd.data)[rows::row_offset(w, p.rstd, row)] = s.rstd;
      finish(shift, s.center, s.rstd);  // h - shift - s.center = h - mean
    } else {
      const C squares = cpu::sum_of_squares(h.data(), n);
      finish(C(0), C(0), math::stats::rms_rstd<C>(squares, static_cast<C>(n), eps));
    }
    cpu::scatter<S>(w, p.out, rows::row_offset(w, p.out, row), h.data());
  }
}

}  // namespace

void run_cpu(const Plan& plan, ThreadPool& threads) {
  // About 32K elements per task, at least one row.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / plan.walk.row_length);
  dispatch_dtype(plan.dtype, [&](auto storage) {
    dispatch_activation(plan.act, [&](auto act) {
      using S = decltype(storage);
      using Act = decltype(act);
      threads.parallel_for(plan.walk.rows, grain,
                           [&](int64_t begin, int64_t end) { run_rows<S, Act>(plan, begin, end); });
    });
  });
}

}  // namespace kf::norm
