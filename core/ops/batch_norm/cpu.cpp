// CPU backend of the batch norm family. Training statistics are a shifted two-pass sum per
// channel (first the mean, then sums of x - mean, see core/math/row_stats.hpp); the running
// statistics are updated from them. The normalisation is one parallel pass over the elements in
// memory order with per-channel coefficients, which also makes the exact in-place form safe
// (every element is read before it is written, statistics are final by then).
//
// The statistics take one of two walks. Channels-first data (NCHW and any strided view) gathers
// each channel into a buffer (core/ops/rows/cpu_rows.hpp; up to kHeldCount elements at a time)
// and sums it there, channels spread over the threads. Dense channels-last data (NHWC) would read
// every cache line once per channel that way, so it is summed as a [count, C] matrix instead: fixed
// blocks of kBlockRows positions, each summed across its rows with the channels as the vector
// lanes (rows of few channels a group of whole rows at a time), the blocks' partial sums then
// added in block order (the same result for any thread count).
// The dense normalisation widens blocks of elements into float, applies the coefficients in
// vectorised loops (one channel's constants over a channels-first run, per-channel arrays
// repeated over whole channels-last rows) and narrows them back.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "core/math/numeric.hpp"
#include "core/math/row_stats.hpp"
#include "core/ops/batch_norm/batch_norm.hpp"
#include "core/ops/dispatch.hpp"
#include "core/ops/rows/cpu_rows.hpp"
#include "core/runtime/thread_pool.hpp"

namespace kf::batch_norm {
namespace {

namespace cpu = rows::cpu;

// Positions per block of the channels-last sums (as kSumBlock for a row's sum).
constexpr int64_t kBlockRows = cpu::kSumBlock;
// Elements normalised per block of the dense pass (4 KiB of f32, in L1).
constexpr int64_t kBlock = 1024;
// Channels-last statistics: rows of fewer channels than this are summed in groups of whole rows
// about this wide.
constexpr int64_t kGroupWidth = 64;
// Elements of a channel a channels-first task holds at a time (4 MiB of f32): a longer channel
// is summed piece by piece, each pass gathering it again, so that no task's buffer grows with the
// channel (a batch of 256 images of 112 x 112 has 3.2M elements a channel, and a task per core
// would otherwise hold one such buffer each).
constexpr int64_t kHeldCount = int64_t{1} << 20;
// Channels-first runs at least this long take the run-constant loop; shorter ones (a spatial
// extent of a few elements) take the element-by-element walk.
constexpr int64_t kMinRun = 16;

// y = (x - shift - center) * scale + bias: shift is a value close to the mean that x - shift
// is exact for (the running mean, or the rounded batch mean), center what is left of the mean.
// Stored as arrays, one entry per channel, so channels-last rows read them as vectors.
template <class C>
struct Coefficients {
  explicit Coefficients(int64_t channels)
      : shift(channels, C(0)),
        center(channels, C(0)),
        scale(channels, C(1)),
        bias(channels, C(0)) {}
  std::vector<C> shift, center, scale, bias;
};

template <class C>
C channel_value(const Channel& t, int64_t c, C absent) {
  return t.data ? static_cast<const C*>(t.data)[c * t.stride] : absent;
}

// Channel c's coefficients from its shifted sums, and its running statistics updated.
template <class C>
void finish_channel(const Plan& p, int64_t c, C shift, C sum_d, C sum_d2, Coefficients<C>* k) {
  const C count = static_cast<C>(p.count);
  const auto s = math::stats::layer_norm_stats<C>(sum_d, sum_d2, count, static_cast<C>(p.eps));
  k->shift[c] = shift;
  k->center[c] = s.center;
  k->scale[c] = s.rstd * channel_value<C>(p.weight, c, C(1));
  k->bias[c] = channel_value<C>(p.bias, c, C(0));
  if (p.running_mean.data) {
    const C mean = shift + s.center;
    C variance = sum_d2 / count - s.center * s.center;
    if (variance < C(0)) variance = C(0);
    const C unbiased = variance * (count / (count - C(1)));
    const C momentum = static_cast<C>(p.momentum);
    C& running_mean = static_cast<C*>(p.running_mean.data)[c * p.running_mean.stride];
    C& running_var = static_cast<C*>(p.running_var.data)[c * p.running_var.stride];
    running_mean = (C(1) - momentum) * running_mean + momentum * mean;
    running_var = (C(1) - momentum) * running_var + momentum * unbiased;
  }
}

template <class S>
void channels_first_statistics(const Plan& p, ThreadPool& threads,
                               Coefficients<math::compute_t<S>>* k) {
  using C = math::compute_t<S>;
  const rows::Walk& w = p.by_channel;
  // About 32K elements per task, at least one channel.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / p.count);
  const int64_t held = std::min(p.count, kHeldCount);
  threads.parallel_for(p.channels, grain, [&](int64_t begin, int64_t end) {
    std::vector<C> v(static_cast<size_t>(held));
    for (int64_t c = begin; c < end; ++c) {
      const int64_t base = rows::row_offset(w, p.x_c, c);
      C shift = 0, sum_d = 0, sum_d2 = 0;
      if (p.count == held) {  // gathered once, summed twice
        cpu::gather<S>(w, p.x_c, base, v.data());
        shift = cpu::sum(v.data(), p.count) / static_cast<C>(p.count);
        cpu::shifted_sums(v.data(), p.count, shift, &sum_d, &sum_d2);
      } else {  // each pass gathers the channel again, `held` elements at a time
        for (int64_t i = 0; i < p.count; i += held) {
          const int64_t n = std::min(held, p.count - i);
          cpu::gather<S>(w, p.x_c, base, i, i + n, v.data());
          shift += cpu::sum(v.data(), n);
        }
        shift /= static_cast<C>(p.count);
        for (int64_t i = 0; i < p.count; i += held) {
          const int64_t n = std::min(held, p.count - i);
          cpu::gather<S>(w, p.x_c, base, i, i + n, v.data());
          C d = 0, d2 = 0;
          cpu::shifted_sums(v.data(), n, shift, &d, &d2);
          sum_d += d;
          sum_d2 += d2;
        }
      }
      finish_channel<C>(p, c, shift, sum_d, sum_d2, k);
    }
  });
}

// Over `n` elements of x, whole rows of `width`: acc[j] += x[g * width + j], or with a shift,
// acc[j] += d and acc2[j] += d^2 for d = x[g * width + j] - shift[j]. A row of channels is
// width = C; a group of whole rows of few channels is a multiple of C.
template <class C>
KF_CPU_CLONES void add_rows(const C* x, int64_t n, int64_t width, C* acc) {
  for (int64_t g = 0; g < n; g += width)
    for (int64_t j = 0; j < width; ++j) acc[j] += x[g + j];
}

template <class C>
KF_CPU_CLONES void add_shifted_rows(const C* x, int64_t n, int64_t width, const C* shift, C* acc,
                                    C* acc2) {
  for (int64_t g = 0; g < n; g += width)
    for (int64_t j = 0; j < width; ++j) {
      const C d = x[g + j] - shift[j];
      acc[j] += d;
      acc2[j] += d * d;
    }
}

template <class S>
void channels_last_statistics(const Plan& p, ThreadPool& threads,
                              Coefficients<math::compute_t<S>>* k) {
  using C = math::compute_t<S>;
  const int64_t channels = p.channels;
  const int64_t blocks = (p.count + kBlockRows - 1) / kBlockRows;
  const S* x = static_cast<const S*>(p.x_e.data);
  // partial[b][c] (pass 1), then partial[b][c] and partial2[b][c] (pass 2).
  std::vector<C> partial(static_cast<size_t>(blocks * channels));
  std::vector<C> partial2(static_cast<size_t>(blocks * channels));
  // Few channels (a row shorter than kGroupWidth): a block is summed as groups of `rows_a_group`
  // rows, `width` accumulators wide, which are folded into the channels' sums at the block's end.
  // Adding one short row at a time cost a widening copy and one or two calls per row (C = 3, f32:
  // 1.6-3.2 GB/s against 7-10 this way, docs/performance.md). Wider rows are a group each.
  const int64_t rows_a_group = std::max<int64_t>(1, kGroupWidth / channels);
  const int64_t width = rows_a_group * channels;
  const bool grouped = rows_a_group > 1;
  std::vector<C> shift(static_cast<size_t>(width));  // channel j % channels at j
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / (kBlockRows * channels));
  // Rows are read in place where x is already in the compute type, else widened into `row`: a
  // whole block when grouped, one row at a time otherwise (a block of wide rows would need a
  // buffer of kBlockRows rows).
  constexpr bool kInPlace = std::is_same_v<S, C>;
  const auto pass = [&](bool shifted) {
    threads.parallel_for(blocks, grain, [&](int64_t begin, int64_t end) {
      std::vector<C> row(static_cast<size_t>(kInPlace  ? 0
                                             : grouped ? kBlockRows * channels
                                                       : channels));
      std::vector<C> acc(static_cast<size_t>(grouped ? 2 * width : 0));
      // Rows of `w` elements (the shift repeats every channels elements of w) into s (and s2).
      const auto add = [&](const C* v, int64_t n, int64_t w, C* s, C* s2) {
        if (shifted) {
          add_shifted_rows(v, n, w, shift.data(), s, s2);
        } else {
          add_rows(v, n, w, s);
        }
      };
      for (int64_t b = begin; b < end; ++b) {
        C* sum = partial.data() + b * channels;
        C* sum2 = partial2.data() + b * channels;
        std::fill(sum, sum + channels, C(0));
        std::fill(sum2, sum2 + channels, C(0));
        const int64_t first = b * kBlockRows, rows = std::min(p.count, first + kBlockRows) - first;
        const S* src = x + first * channels;
        if (!kInPlace && !grouped) {
          for (int64_t m = 0; m < rows; ++m) {
            widen_run(src + m * channels, 1, row.data(), channels);
            add(row.data(), channels, channels, sum, sum2);
          }
          continue;
        }
        const C* block = nullptr;
        if constexpr (kInPlace) {
          block = src;
        } else {
          widen_run(src, 1, row.data(), rows * channels);
          block = row.data();
        }
        // Whole groups into the accumulators (grouped) or straight into the sums (a group is one
        // row), then the groups folded into the sums and the rows past the last whole group.
        const int64_t whole = rows / rows_a_group * rows_a_group;
        if (grouped) {
          std::fill(acc.begin(), acc.end(), C(0));
          add(block, whole * channels, width, acc.data(), acc.data() + width);
          add_rows(acc.data(), width, channels, sum);
          if (shifted) add_rows(acc.data() + width, width, channels, sum2);
        } else {
          add(block, whole * channels, width, sum, sum2);
        }
        add(block + whole * channels, (rows - whole) * channels, channels, sum, sum2);
      }
    });
  };
  const auto total = [&](const std::vector<C>& part, C* out) {
    std::fill(out, out + channels, C(0));
    add_rows(part.data(), blocks * channels, channels, out);  // in block order
  };
  pass(false);
  total(partial, shift.data());
  for (int64_t c = 0; c < channels; ++c) shift[c] /= static_cast<C>(p.count);
  for (int64_t j = channels; j < width; ++j) shift[j] = shift[j - channels];
  pass(true);
  std::vector<C> sum_d(static_cast<size_t>(channels)), sum_d2(static_cast<size_t>(channels));
  total(partial, sum_d.data());
  total(partial2, sum_d2.data());
  for (int64_t c = 0; c < channels; ++c) finish_channel<C>(p, c, shift[c], sum_d[c], sum_d2[c], k);
}

template <class C>
void inference_coefficients(const Plan& p, Coefficients<C>* k) {
  for (int64_t c = 0; c < p.channels; ++c) {
    k->shift[c] = channel_value<C>(p.running_mean, c, C(0));
    const C variance = channel_value<C>(p.running_var, c, C(1));
    k->scale[c] = channel_value<C>(p.weight, c, C(1)) / math::stats::sqrt_of(variance + C(p.eps));
    k->bias[c] = channel_value<C>(p.bias, c, C(0));
  }
}

template <class C, class Act>
KF_CPU_CLONES void apply_constant(C* v, int64_t n, C shift, C center, C scale, C bias) {
  for (int64_t i = 0; i < n; ++i) v[i] = Act{}((v[i] - shift - center) * scale + bias);
}

template <class C, class Act>
KF_CPU_CLONES void apply_per_channel(C* v, int64_t n, const C* shift, const C* center,
                                     const C* scale, const C* bias) {
  for (int64_t i = 0; i < n; ++i) v[i] = Act{}((v[i] - shift[i] - center[i]) * scale[i] + bias[i]);
}

// Dense elements [begin, end): blocks that lie within one channel's run (channels first) or
// within one row of channels (channels last).
template <class S, class Act>
void normalize_dense(const Plan& p, const Coefficients<math::compute_t<S>>& k, int64_t begin,
                     int64_t end) {
  using C = math::compute_t<S>;
  const S* x = static_cast<const S*>(p.x_e.data);
  S* out = static_cast<S*>(p.out_e.data);
  C v[kBlock];
  const bool last = p.channel_inner == 1;
  // Channels last: k repeats the channels' coefficients over `span` elements (whole rows).
  const int64_t span = last ? static_cast<int64_t>(k.shift.size()) : p.channel_inner;
  for (int64_t e = begin; e < end;) {
    const int64_t at = last ? e % p.channels : e % span;
    const int64_t n = std::min({kBlock, end - e, span - at});
    widen_run(x + e, 1, v, n);
    if (last) {
      apply_per_channel<C, Act>(v, n, &k.shift[at], &k.center[at], &k.scale[at], &k.bias[at]);
    } else {
      const int64_t c = (e / span) % p.channels;
      apply_constant<C, Act>(v, n, k.shift[c], k.center[c], k.scale[c], k.bias[c]);
    }
    narrow_run(v, out + e, 1, n);
    e += n;
  }
}

// k's coefficients repeated over as many whole rows of channels as fit in a block (at least one
// row): entry i is channel i % channels, so that a channels-last block of few channels still
// covers kBlock elements.
template <class C>
Coefficients<C> repeated_rows(const Coefficients<C>& k, int64_t channels) {
  const int64_t span = channels * std::max<int64_t>(1, kBlock / channels);
  Coefficients<C> r(span);
  for (int64_t i = 0; i < span; ++i) {
    r.shift[i] = k.shift[i % channels];
    r.center[i] = k.center[i % channels];
    r.scale[i] = k.scale[i % channels];
    r.bias[i] = k.bias[i % channels];
  }
  return r;
}

// Any layout, element by element.
template <class S, class Act>
void normalize_strided(const Plan& p, const Coefficients<math::compute_t<S>>& k, int64_t begin,
                       int64_t end) {
  using Traits = math::StorageTraits<S>;
  const rows::Walk& w = p.elements;
  const S* x = static_cast<const S*>(p.x_e.data);
  S* out = static_cast<S*>(p.out_e.data);
  // The channel advances every channel_inner elements: counted, not divided per element.
  int64_t c = (begin / p.channel_inner) % p.channels;
  int64_t left = p.channel_inner - begin % p.channel_inner;
  for (int64_t e = begin; e < end; ++e) {
    const int64_t xo = p.dense ? e : rows::col_offset(w, p.x_e, e);
    const int64_t oo = p.dense ? e : rows::col_offset(w, p.out_e, e);
    const auto v = Traits::to_compute(x[xo]);
    out[oo] = Traits::from_compute(Act{}((v - k.shift[c] - k.center[c]) * k.scale[c] + k.bias[c]));
    if (--left == 0) {
      left = p.channel_inner;
      c = c + 1 == p.channels ? 0 : c + 1;
    }
  }
}

template <class S, class Act>
void run(const Plan& p, ThreadPool& threads) {
  using C = math::compute_t<S>;
  Coefficients<C> k(p.channels);
  if (p.training && p.dense && p.channel_inner == 1) {
    channels_last_statistics<S>(p, threads, &k);
  } else if (p.training) {
    channels_first_statistics<S>(p, threads, &k);
  } else {
    inference_coefficients<C>(p, &k);
  }
  const bool dense_runs = p.dense && (p.channel_inner == 1 || p.channel_inner >= kMinRun);
  const Coefficients<C> rows_k =
      dense_runs && p.channel_inner == 1 ? repeated_rows(k, p.channels) : Coefficients<C>(0);
  threads.parallel_for(p.elements.row_length, int64_t{1} << 15, [&](int64_t begin, int64_t end) {
    if (dense_runs) {
      normalize_dense<S, Act>(p, p.channel_inner == 1 ? rows_k : k, begin, end);
    } else {
      normalize_strided<S, Act>(p, k, begin, end);
    }
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
