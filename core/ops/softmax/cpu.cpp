// CPU backend of the softmax family. Rows are split over the context's thread pool; each row's
// logits (scale * x + mask, -inf where causally hidden) are gathered once into a buffer, reduced
// to (max, sum of exp) and written out. The loops over the buffer are vectorised
// (core/ops/rows/cpu_rows.hpp), exp included (core/math/elementary.hpp's branch-free float exp),
// and each exp(v - max) is computed once, for the sum and the output.
#include <algorithm>
#include <vector>

#include "core/math/elementary.hpp"
#include "core/math/numeric.hpp"
#include "core/math/row_stats.hpp"
#include "core/ops/dispatch.hpp"
#include "core/ops/rows/cpu_rows.hpp"
#include "core/ops/softmax/softmax.hpp"
#include "core/runtime/thread_pool.hpp"

namespace kf::softmax {
namespace {

// v = scale * v, plus the mask where there is one.
template <class C>
KF_CPU_CLONES void logits(C* v, const C* mask, C scale, int64_t n) {
  if (mask) {
    for (int64_t i = 0; i < n; ++i) v[i] = scale * v[i] + mask[i];
  } else {
    for (int64_t i = 0; i < n; ++i) v[i] = scale * v[i];
  }
}

// e = exp(v - max).
template <class C>
KF_CPU_CLONES void exp_shifted(const C* v, C max, C* e, int64_t n) {
  for (int64_t i = 0; i < n; ++i) e[i] = math::exp_of(v[i] - max);
}

// Softmax: e * inv_sum; log-softmax: v - max - log_sum, into e.
template <class C>
KF_CPU_CLONES void finish(const C* v, C max, C inv_sum, C log_sum, bool log, C* e, int64_t n) {
  if (log) {
    for (int64_t i = 0; i < n; ++i) e[i] = v[i] - max - log_sum;
  } else {
    for (int64_t i = 0; i < n; ++i) e[i] *= inv_sum;
  }
}

template <class S>
void run_rows(const Plan& p, int64_t begin, int64_t end) {
  using C = math::compute_t<S>;
  namespace st = math::stats;
  namespace cpu = rows::cpu;
  const rows::Walk& w = p.walk;
  const int64_t n = w.row_length;
  const C scale = static_cast<C>(p.scale);
  std::vector<C> v(static_cast<size_t>(n)), e(static_cast<size_t>(n));
  std::vector<C> mask(p.mask.data ? static_cast<size_t>(n) : 0);
  for (int64_t row = begin; row < end; ++row) {
    cpu::gather<S>(w, p.x, rows::row_offset(w, p.x, row), v.data());
    if (p.mask.data) cpu::gather<S>(w, p.mask, rows::row_offset(w, p.mask, row), mask.data());
    logits(v.data(), p.mask.data ? mask.data() : nullptr, scale, n);
    if (p.causal) {  // columns past query + diagonal are hidden
      const int64_t seen = std::clamp<int64_t>(row % p.query_rows + p.diagonal + 1, 0, n);
      std::fill(v.begin() + seen, v.end(), st::negative_infinity<C>());
    }
    const C max = cpu::max_of(v.data(), n);
    if (max == st::negative_infinity<C>()) {  // fully masked: 0 (log: -inf), not NaN
      std::fill(e.begin(), e.end(), p.log ? st::negative_infinity<C>() : C(0));
    } else {
      exp_shifted(v.data(), max, e.data(), n);
      const C sum = cpu::sum(e.data(), n);
      finish(v.data(), max, C(1) / sum, st::log_of(sum), p.log, e.data(), n);
    }
    cpu::scatter<S>(w, p.out, rows::row_offset(w, p.out, row), e.data());
  }
}

}  // namespace

void run_cpu(const Plan& plan, ThreadPool& threads) {
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / plan.walk.row_length);
  auto go = [&](auto storage) {
    using S = decltype(storage);
    threads.parallel_for(plan.walk.rows, grain,
                         [&](int64_t begin, int64_t end) { run_rows<S>(plan, begin, end); });
  };
  dispatch_dtype(plan.dtype, go);
}

}  // namespace kf::softmax
