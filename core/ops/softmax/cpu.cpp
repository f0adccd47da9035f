// CPU backend of the softmax family. Rows are split over the context's thread pool; each row's
// logits (scale * x + mask, -inf where causally hidden) are gathered once into a buffer, reduced
// to (max, sum of exp) and written out.
#include <algorithm>
#include <vector>

#include "core/math/numeric.hpp"
#include "core/math/row_stats.hpp"
#include "core/ops/dispatch.hpp"
#include "core/ops/softmax/softmax.hpp"
#include "core/runtime/thread_pool.hpp"

namespace kf::softmax {
namespace {

template <class S>
void run_rows(const Plan& p, int64_t begin, int64_t end) {
  using C = math::compute_t<S>;
  using Traits = math::StorageTraits<S>;
  namespace st = math::stats;
  const rows::Walk& w = p.walk;
  const int64_t n = w.row_length;
  const C scale = static_cast<C>(p.scale);
  const S* x = static_cast<const S*>(p.x.data);
  const S* mask = static_cast<const S*>(p.mask.data);
  S* out = static_cast<S*>(p.out.data);
  std::vector<C> v(static_cast<size_t>(n));
  for (int64_t row = begin; row < end; ++row) {
    const int64_t query = row % p.query_rows;
    const int64_t xb = rows::row_offset(w, p.x, row);
    for (int64_t c = 0; c < n; ++c)
      v[c] = scale * Traits::to_compute(x[xb + rows::col_offset(w, p.x, c)]);
    if (mask) {
      const int64_t mb = rows::row_offset(w, p.mask, row);
      for (int64_t c = 0; c < n; ++c)
        v[c] += Traits::to_compute(mask[mb + rows::col_offset(w, p.mask, c)]);
    }
    if (p.causal) {
      for (int64_t c = 0; c < n; ++c)
        if (st::causal_hidden(query, c, p.diagonal)) v[c] = st::negative_infinity<C>();
    }
    C max = st::negative_infinity<C>();
    for (int64_t c = 0; c < n; ++c) max = v[c] > max ? v[c] : max;
    C sum = 0;
    if (max != st::negative_infinity<C>()) {
      for (int64_t start = 0; start < n; start += 256) {  // blocked: error ~ sqrt(blocks)
        C block = 0;
        for (int64_t c = start; c < std::min<int64_t>(n, start + 256); ++c)
          block += st::exp_of(v[c] - max);
        sum += block;
      }
    }
    const C inv_sum = C(1) / sum, log_sum = st::log_of(sum);
    const int64_t ob = rows::row_offset(w, p.out, row);
    for (int64_t c = 0; c < n; ++c)
      out[ob + rows::col_offset(w, p.out, c)] =
          Traits::from_compute(st::softmax_value(v[c], max, inv_sum, log_sum, p.log));
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
