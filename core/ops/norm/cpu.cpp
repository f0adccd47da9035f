// CPU backend of the norm family. Rows are split over the context's thread pool; each row is
// gathered once into a compute-type buffer (which also makes any strided layout and the exact
// in-place forms safe), reduced twice (shifted two-pass layer norm, see core/math/row_stats.hpp)
// and written back through the activation.
#include <algorithm>
#include <vector>

#include "core/math/numeric.hpp"
#include "core/math/row_stats.hpp"
#include "core/ops/dispatch.hpp"
#include "core/ops/norm/norm.hpp"
#include "core/ops/rows/blocked_sum.hpp"
#include "core/runtime/thread_pool.hpp"

namespace kf::norm {
namespace {

template <class S>
using T = math::compute_t<S>;

template <class S>
T<S> load(const rows::Walk& w, const rows::Operand& o, int64_t base, int64_t col) {
  const S* p = static_cast<const S*>(o.data);
  return math::StorageTraits<S>::to_compute(p[base + rows::col_offset(w, o, col)]);
}

template <class S>
void store(const rows::Walk& w, const rows::Operand& o, int64_t base, int64_t col, T<S> v) {
  S* p = static_cast<S*>(o.data);
  p[base + rows::col_offset(w, o, col)] = math::StorageTraits<S>::from_compute(v);
}

template <class S, class Act>
void run_rows(const Plan& p, int64_t begin, int64_t end) {
  using C = T<S>;
  const rows::Walk& w = p.walk;
  const int64_t n = w.row_length;
  const C eps = static_cast<C>(p.eps);
  std::vector<C> h(static_cast<size_t>(n));
  for (int64_t row = begin; row < end; ++row) {
    const int64_t xb = rows::row_offset(w, p.x, row);
    for (int64_t c = 0; c < n; ++c) h[c] = load<S>(w, p.x, xb, c);
    if (p.residual.data) {
      const int64_t rb = rows::row_offset(w, p.residual, row);
      // Rounded to the storage type, as residual_out holds it (the CUDA backend does the same).
      for (int64_t c = 0; c < n; ++c)
        h[c] = math::StorageTraits<S>::to_compute(
            math::StorageTraits<S>::from_compute(h[c] + load<S>(w, p.residual, rb, c)));
    }
    if (p.residual_out.data) {
      const int64_t rb = rows::row_offset(w, p.residual_out, row);
      for (int64_t c = 0; c < n; ++c) store<S>(w, p.residual_out, rb, c, h[c]);
    }
    C shift = 0, center = 0, rstd = 0;
    if (p.kind == Kind::layer) {
      shift = rows::blocked_sum<C>(n, [&](int64_t c) { return h[c]; }) / static_cast<C>(n);
      const C sum_d = rows::blocked_sum<C>(n, [&](int64_t c) { return h[c] - shift; });
      const C sum_d2 =
          rows::blocked_sum<C>(n, [&](int64_t c) { return (h[c] - shift) * (h[c] - shift); });
      const auto s = math::stats::layer_norm_stats<C>(sum_d, sum_d2, static_cast<C>(n), eps);
      center = shift + s.center;
      rstd = s.rstd;
      if (p.mean.data) static_cast<C*>(p.mean.data)[rows::row_offset(w, p.mean, row)] = center;
      if (p.rstd.data) static_cast<C*>(p.rstd.data)[rows::row_offset(w, p.rstd, row)] = rstd;
      center = s.center;  // subtracted from h - shift below
    } else {
      const C squares = rows::blocked_sum<C>(n, [&](int64_t c) { return h[c] * h[c]; });
      rstd = math::stats::rms_rstd<C>(squares, static_cast<C>(n), eps);
    }
    const int64_t ob = rows::row_offset(w, p.out, row);
    for (int64_t c = 0; c < n; ++c) {
      C y = (h[c] - shift - center) * rstd;
      if (p.weight.data) y *= load<S>(w, p.weight, 0, c);
      if (p.bias.data) y += load<S>(w, p.bias, 0, c);
      store<S>(w, p.out, ob, c, Act{}(y));
    }
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
