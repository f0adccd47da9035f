// CPU backend of the reductions. Every result is summed in a fixed grouping that does not depend on
// the thread count, so results are deterministic:
//  - columns layout: tasks take a tile of adjacent columns of one outer index and walk every
//    reduced row, accumulating the tile in blocks of rows, the blocks in groups (vectorisable
//    across the columns);
//  - rows and strided layouts: each output's reduced walk is cut into fixed chunks; a chunk is
//    reduced run by run (contiguous runs in 8 lanes, blocks of 128 elements folded into lane
//    totals; short runs' results folded into blocks of 128 elements and groups of 4096), and when
//    an output has several chunks their partials are combined in order.
// Blocked accumulation keeps f32 sums of millions of elements within 1e-5. The two inner loops
// (a run, a tile's row) are built for AVX-512, AVX2 and baseline x86-64 (KF_CPU_CLONES).
#include <algorithm>
#include <vector>

#include "core/ops/reduce/reduce.hpp"
#include "core/runtime/cpu_clones.hpp"
#include "core/runtime/thread_pool.hpp"

namespace kf::reduce {
namespace {

template <class S>
using C = math::compute_t<S>;

constexpr int kLanes = 8;
constexpr int64_t kLaneBlock = 128;           // elements per lane block before folding into totals
constexpr int64_t kChunk = int64_t{1} << 15;  // reduced elements per task
constexpr int64_t kTile = 256;                // columns per task (columns layout)
// Columns layout: rows accumulated in blocks of kRowBlock, the blocks in groups of kRowBlock, the
// groups into the total: a column of up to 2^24 rows adds no more than 4096 terms one after
// another (with the blocks folded straight into the total, f32 means of 0.1 over 2^23 rows of 2
// columns came out 1e-3 off).
constexpr int64_t kRowBlock = 64;

template <class R, class S>
C<S> load(const S* p) {
  return R::map(math::StorageTraits<S>::to_compute(*p));
}

// Reduces the n elements p[0], p[stride], ... (stride 1 when Unit).
template <class R, class S, bool Unit>
KF_CPU_CLONES C<S> reduce_run(const S* p, int64_t stride, int64_t n) {
  using T = C<S>;
  const int64_t s = Unit ? 1 : stride;
  T total[kLanes];
  for (T& t : total) t = R::template identity<T>();
  int64_t i = 0;
  for (; i + kLaneBlock <= n; i += kLaneBlock) {
    T part[kLanes];
    for (T& t : part) t = R::template identity<T>();
    const S* q = p + i * s;
    for (int64_t k = 0; k < kLaneBlock; k += kLanes)
      for (int l = 0; l < kLanes; ++l) part[l] = R::combine(part[l], load<R>(q + (k + l) * s));
    for (int l = 0; l < kLanes; ++l) total[l] = R::combine(total[l], part[l]);
  }
  T rest = R::template identity<T>();
  for (; i < n; ++i) rest = R::combine(rest, load<R>(p + i * s));
  for (int width = kLanes / 2; width > 0; width /= 2)
    for (int l = 0; l < width; ++l) total[l] = R::combine(total[l], total[l + width]);
  return R::combine(total[0], rest);
}

// part[j] = combine(part[j], row[j]) over one row of a columns tile.
template <class R, class S>
KF_CPU_CLONES void accumulate_row(const S* row, int64_t width, C<S>* part) {
  for (int64_t j = 0; j < width; ++j) part[j] = R::combine(part[j], load<R>(row + j));
}

// Reduces elements [begin, end) of the reduced walk (row-major over the reduced dims) from base.
template <class R, class S>
C<S> reduce_range(const Plan& p, const S* base, int64_t begin, int64_t end) {
  using T = C<S>;
  T acc = R::template identity<T>();
  if (p.red_ndim == 0) return begin < end ? load<R>(base) : acc;  // one element (or none)
  const int32_t inner = p.red_ndim - 1;
  int64_t index[KF_MAX_DIMS];
  int64_t rest = begin, offset = 0;
  for (int32_t d = inner; d >= 0; --d) {
    index[d] = rest % p.red_shape[d];
    rest /= p.red_shape[d];
    offset += index[d] * p.x_red[d];
  }
  const int64_t length = p.red_shape[inner], stride = p.x_red[inner];
  // Short runs are folded as a long run's elements are: run results into a block of at least
  // kLaneBlock elements, blocks into a group of at least kGroup, groups into acc. (Added straight
  // into acc, runs of two put 2^14 additions in a row, and an f32 mean of 0.1 was 1.5e-4 off.)
  constexpr int64_t kGroup = 32 * kLaneBlock;
  T block = R::template identity<T>(), group = R::template identity<T>();
  int64_t in_block = 0, in_group = 0;
  for (int64_t i = begin; i < end;) {
    const int64_t n = std::min(length - index[inner], end - i);
    block = R::combine(block, stride == 1 ? reduce_run<R, S, true>(base + offset, 1, n)
                                          : reduce_run<R, S, false>(base + offset, stride, n));
    if ((in_block += n) >= kLaneBlock) {
      group = R::combine(group, block);
      block = R::template identity<T>();
      in_group += in_block;
      in_block = 0;
      if (in_group >= kGroup) {
        acc = R::combine(acc, group);
        group = R::template identity<T>();
        in_group = 0;
      }
    }
    i += n;
    // Step past the run; on reaching the end of a dim, rewind it and carry outwards.
    index[inner] += n;
    offset += n * stride;
    for (int32_t d = inner; d > 0 && index[d] == p.red_shape[d]; --d) {
      offset += p.x_red[d - 1] - p.red_shape[d] * p.x_red[d];
      index[d] = 0;
      ++index[d - 1];
    }
  }
  return R::combine(acc, R::combine(group, block));
}

template <class R, class S>
void run_walk(const Plan& p, ThreadPool& threads) {
  using T = C<S>;
  const S* x = static_cast<const S*>(p.x);
  S* out = static_cast<S*>(p.out);
  const T n = static_cast<T>(p.reduced);
  auto store = [&](int64_t o, T acc) {
    int64_t xo, oo;
    output_offsets(p, o, &xo, &oo);
    out[oo] = math::StorageTraits<S>::from_compute(R::finish(acc, n));
  };
  const int64_t chunks = std::max<int64_t>(1, (p.reduced + kChunk - 1) / kChunk);
  const int64_t grain = std::max<int64_t>(1, kChunk / std::max<int64_t>(1, p.reduced));
  if (chunks == 1) {
    threads.parallel_for(p.outputs, grain, [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) {
        int64_t xo, oo;
        output_offsets(p, o, &xo, &oo);
        store(o, reduce_range<R>(p, x + xo, 0, p.reduced));
      }
    });
    return;
  }
  std::vector<T> partial(static_cast<size_t>(p.outputs * chunks));
  threads.parallel_for(p.outputs * chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t o = t / chunks, k = t - o * chunks;
      int64_t xo, oo;
      output_offsets(p, o, &xo, &oo);
      partial[t] = reduce_range<R>(p, x + xo, k * kChunk, std::min(p.reduced, (k + 1) * kChunk));
    }
  });
  threads.parallel_for(p.outputs, std::max<int64_t>(1, kChunk / chunks),
                       [&](int64_t begin, int64_t end) {
                         for (int64_t o = begin; o < end; ++o) {
                           T acc = R::template identity<T>();
                           for (int64_t k = 0; k < chunks; ++k)
                             acc = R::combine(acc, partial[o * chunks + k]);
                           store(o, acc);
                         }
                       });
}

template <class R, class S>
void run_columns(const Plan& p, ThreadPool& threads) {
  using T = C<S>;
  const S* x = static_cast<const S*>(p.x);
  S* out = static_cast<S*>(p.out);
  const T n = static_cast<T>(p.reduced);
  const int64_t tiles = (p.inner + kTile - 1) / kTile;
  const int64_t grain =
      std::max<int64_t>(1, kChunk / (std::min(kTile, p.inner) * std::max<int64_t>(1, p.reduced)));
  threads.parallel_for(p.outer * tiles, grain, [&](int64_t begin, int64_t end) {
    T total[kTile], group[kTile], part[kTile];
    for (int64_t t = begin; t < end; ++t) {
      const int64_t o = t / tiles, c0 = (t - o * tiles) * kTile;
      const int64_t width = std::min(kTile, p.inner - c0);
      const S* base = x + o * p.outer_stride + c0;
      for (int64_t j = 0; j < width; ++j) total[j] = R::template identity<T>();
      for (int64_t g0 = 0; g0 < p.reduced; g0 += kRowBlock * kRowBlock) {
        for (int64_t j = 0; j < width; ++j) group[j] = R::template identity<T>();
        const int64_t g1 = std::min(p.reduced, g0 + kRowBlock * kRowBlock);
        for (int64_t r0 = g0; r0 < g1; r0 += kRowBlock) {
          for (int64_t j = 0; j < width; ++j) part[j] = R::template identity<T>();
          const int64_t r1 = std::min(g1, r0 + kRowBlock);
          for (int64_t r = r0; r < r1; ++r) accumulate_row<R>(base + r * p.row_stride, width, part);
          for (int64_t j = 0; j < width; ++j) group[j] = R::combine(group[j], part[j]);
        }
        for (int64_t j = 0; j < width; ++j) total[j] = R::combine(total[j], group[j]);
      }
      S* dst = out + o * p.out_outer + c0 * p.out_stride;
      for (int64_t j = 0; j < width; ++j)
        dst[j * p.out_stride] = math::StorageTraits<S>::from_compute(R::finish(total[j], n));
    }
  });
}

}  // namespace

void run_cpu(const Plan& plan, ThreadPool& threads) {
  dispatch_dtype(plan.dtype, [&](auto storage) {
    using S = decltype(storage);
    math::reduction::dispatch(plan.op, [&](auto op) {
      using R = decltype(op);
      if (plan.layout == Layout::columns)
        run_columns<R, S>(plan, threads);
      else
        run_walk<R, S>(plan, threads);
    });
  });
}

}  // namespace kf::reduce
