// CPU backend of the fused elementwise ops. Work is split into contiguous ranges of the output's
// walk and run on the context's thread pool. The dense paths are index loops the compiler
// vectorises, activations included (core/math/elementary.hpp gives host float exp/erf/tanh as
// branch-free polynomials); f16/bf16 are widened to float in blocks, computed by the same float
// loops and narrowed back. The strided path walks rows with an odometer over the outer dims.
#include <algorithm>
#include <type_traits>

#include "core/ops/cpu_runs.hpp"
#include "core/ops/elementwise/elementwise.hpp"
#include "core/runtime/cpu_clones.hpp"
#include "core/runtime/thread_pool.hpp"

namespace kf::elementwise {
namespace {

// Elements per task: large enough that scheduling is noise, small enough to spread 1M elements.
constexpr int64_t kGrain = int64_t{1} << 15;
// Elements of f16/bf16 widened to float at a time: two float blocks (4 KiB) stay in L1.
constexpr int64_t kBlock = 512;

// S is computed in itself (f32, f64) rather than widened (f16, bf16).
template <class S>
constexpr bool kComputedInPlace = std::is_same_v<S, math::compute_t<S>>;

template <class T, class Op, class Act>
KF_CPU_CLONES void dense_loop(const T* a, const T* b, T* out, int64_t n) {
  KF_NO_LOOP_CARRIED_DEPENDENCE
  for (int64_t i = 0; i < n; ++i) out[i] = FusedOp<T, Op, Act>::apply(a[i], b[i]);
}

template <class T, class Op, class Act>
KF_CPU_CLONES void scalar_loop(const T* a, T y, T* out, int64_t n) {
  KF_NO_LOOP_CARRIED_DEPENDENCE
  for (int64_t i = 0; i < n; ++i) out[i] = FusedOp<T, Op, Act>::compute(a[i], y);
}

template <class S, class Op, class Act>
void contiguous_range(const S* a, const S* b, S* out, int64_t n) {
  if constexpr (kComputedInPlace<S>) {
    dense_loop<S, Op, Act>(a, b, out, n);
  } else {
    float x[kBlock], y[kBlock];
    for (int64_t i = 0; i < n; i += kBlock) {
      const int64_t m = std::min(kBlock, n - i);
      widen_run(a + i, 1, x, m);
      widen_run(b + i, 1, y, m);
      dense_loop<float, Op, Act>(x, y, x, m);
      narrow_run(x, out + i, 1, m);
    }
  }
}

template <class S, class Op, class Act>
void scalar_range(const S* a, math::compute_t<S> y, S* out, int64_t n) {
  if constexpr (kComputedInPlace<S>) {
    scalar_loop<S, Op, Act>(a, y, out, n);
  } else {
    float x[kBlock];
    for (int64_t i = 0; i < n; i += kBlock) {
      const int64_t m = std::min(kBlock, n - i);
      widen_run(a + i, 1, x, m);
      scalar_loop<float, Op, Act>(x, y, x, m);
      narrow_run(x, out + i, 1, m);
    }
  }
}

template <class S, class Op, class Act>
void strided_row(const S* a, int64_t sa, const S* b, int64_t sb, S* out, int64_t so, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i * so] = FusedOp<S, Op, Act>::apply(a[i * sa], b[i * sb]);
}

// Elements [begin, end) of the bias walk: a and out dense rows, b one dense row.
template <class S, class Op, class Act>
void bias_range(const Plan& p, const S* a, const S* b, S* out, int64_t begin, int64_t end) {
  const int64_t row_length = p.row_length;
  int64_t column = begin % row_length;
  for (int64_t i = begin; i < end;) {
    const int64_t n = std::min(row_length - column, end - i);
    contiguous_range<S, Op, Act>(a + i, b + column, out + i, n);
    i += n;
    column = 0;
  }
}

// Elements [begin, end) of a general walk, innermost dim by innermost dim.
template <class S, class Op, class Act>
void strided_range(const Plan& p, const S* a, const S* b, S* out, int64_t begin, int64_t end) {
  const int32_t inner = p.ndim - 1;
  int64_t index[KF_MAX_DIMS];
  int64_t rest = begin, a_offset = 0, b_offset = 0, out_offset = 0;
  for (int32_t d = inner; d >= 0; --d) {
    index[d] = rest % p.shape[d];
    rest /= p.shape[d];
    a_offset += index[d] * p.a_strides[d];
    b_offset += index[d] * p.b_strides[d];
    out_offset += index[d] * p.out_strides[d];
  }
  const int64_t inner_size = p.shape[inner];
  const int64_t sa = p.a_strides[inner], sb = p.b_strides[inner], so = p.out_strides[inner];
  for (int64_t i = begin; i < end;) {
    const int64_t n = std::min(inner_size - index[inner], end - i);
    if (sa == 1 && sb == 1 && so == 1)
      contiguous_range<S, Op, Act>(a + a_offset, b + b_offset, out + out_offset, n);
    else
      strided_row<S, Op, Act>(a + a_offset, sa, b + b_offset, sb, out + out_offset, so, n);
    i += n;
    // Step past the row; on reaching its end, rewind it and carry into the outer dims.
    index[inner] += n;
    a_offset += n * sa;
    b_offset += n * sb;
    out_offset += n * so;
    for (int32_t d = inner; d > 0 && index[d] == p.shape[d]; --d) {
      a_offset += p.a_strides[d - 1] - p.shape[d] * p.a_strides[d];
      b_offset += p.b_strides[d - 1] - p.shape[d] * p.b_strides[d];
      out_offset += p.out_strides[d - 1] - p.shape[d] * p.out_strides[d];
      index[d] = 0;
      ++index[d - 1];
    }
  }
}

template <class S, class Op, class Act>
void run_typed(const Plan& p, ThreadPool& threads) {
  const S* a = static_cast<const S*>(p.a);
  const S* b = static_cast<const S*>(p.b);
  S* out = static_cast<S*>(p.out);
  switch (p.layout) {
    case Layout::contiguous:
      threads.parallel_for(p.count, kGrain, [&](int64_t begin, int64_t end) {
        contiguous_range<S, Op, Act>(a + begin, b + begin, out + begin, end - begin);
      });
      break;
    case Layout::scalar: {
      const math::compute_t<S> y = math::StorageTraits<S>::to_compute(b[0]);
      threads.parallel_for(p.count, kGrain, [&](int64_t begin, int64_t end) {
        scalar_range<S, Op, Act>(a + begin, y, out + begin, end - begin);
      });
      break;
    }
    case Layout::bias:
      threads.parallel_for(p.count, kGrain, [&](int64_t begin, int64_t end) {
        bias_range<S, Op, Act>(p, a, b, out, begin, end);
      });
      break;
    case Layout::strided:
      threads.parallel_for(p.count, kGrain, [&](int64_t begin, int64_t end) {
        strided_range<S, Op, Act>(p, a, b, out, begin, end);
      });
      break;
  }
}

}  // namespace

void run_cpu(const Plan& plan, ThreadPool& threads) {
  dispatch_dtype(plan.dtype, [&](auto storage) {
    dispatch_op(plan.op, [&](auto op) {
      dispatch_activation(plan.act, [&](auto act) {
        run_typed<decltype(storage), decltype(op), decltype(act)>(plan, threads);
      });
    });
  });
}

}  // namespace kf::elementwise
