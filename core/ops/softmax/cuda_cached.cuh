// The softmax family's register-cached kernel (see core/ops/softmax/cuda.cuh for when it runs):
// rows of up to 16384 elements held in registers (core/ops/rows/tile.cuh), a few lanes, a warp or
// a block a row; its builds and launches are in cuda.cuh.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "core/math/elementary.hpp"
#include "core/math/numeric.hpp"
#include "core/math/row_stats.hpp"
#include "core/ops/async_copy.cuh"
#include "core/ops/rows/reduce.cuh"
#include "core/ops/rows/tile.cuh"
#include "core/ops/softmax/cuda_row_exp.cuh"
#include "core/ops/softmax/cuda_storage.hpp"
#include "core/ops/softmax/softmax.hpp"
#include "core/runtime/cuda/grid_dependency.cuh"

namespace kf::softmax {
namespace {

// Register-cached rows (see the top of cuda.cuh). The kernel is written for few instructions per
// element, since at H200 bandwidth a 16-bit row leaves about 25 issue slots per element: columns
// past the row's end are loaded as -inf (no per-element bounds test), the causal mask and the
// scale are applied only when present, exp is taken once per element and kept in registers, and
// per-row work (the query index, the logarithm) is done only by the forms that need it. 16-bit
// rows use the fast exponential of math::HalfStorage (a few ulp of float, below their rounding).
// kMask: the form with a mask has its own instantiation; its mask row is fetched with x's (and
// prefetched with it), so a row waits for one round trip, and the common form does not pay for
// the mask's registers. Causal rows fetch only their visible columns: H200 A/B (2026-11-26,
// kf-bench, same call), [16, 2048, 2048] with a [2048, 2048] mask (f32: [8, ...]), % of copy
// f32 / f16 / bf16, 70.8 / 57.2 / 53.7 -> 86.0 / 60.0 / 55.8. The 16-bit rows are issue-bound
// here (Nsight Compute, 84-87 M instructions, 7.4 cycles a warp between issues), so the per-row
// work matters: a first form that divided for each row's query index and masked every element
// against it lost 8 points on them.
// kStage = false: the form without the shared-memory staging below, for devices that lose with
// it (rows::tile_stages_rows).
// kStagedRows: the rows staged ahead in shared memory by the form that stages (kStage, no mask):
// rows::tile_staged_rows, or three for the 16-bit rows of 16-byte vectors over 512 threads
// (launch_cached).
template <class P, class S, bool kMask, bool kStage = true, int kBlocks = 0,
          int kStagedRows = rows::tile_staged_rows<P, S>()>
__global__ void __launch_bounds__(P::threads, kBlocks > 0 ? kBlocks : rows::tile_min_blocks<P, S>())
    cached_kernel(const __grid_constant__ Plan p) {
  cuda::wait_prior_grid();  // a dependent launch: nothing global is touched before this
  cuda::allow_next_grid();
  using T = math::compute_t<S>;
  using Traits = math::StorageTraits<S>;
  using Prim = typename math::PrimitivesFor<S>::type;
  namespace st = math::stats;
  // bf16 rows widened a word of two elements at a time (rows::pairs_widen).
  constexpr bool kPairs = rows::pairs_widen<P, S>();
  // A row's two block reductions take scratch[0] and scratch[1] (rows::block_reduce's kReuse =
  // false: one barrier each instead of two).
  __shared__ T scratch[2][32];
  const rows::Walk& w = p.walk;
  const int n = static_cast<int>(w.row_length);  // at most P::capacity (rows::tile_col)
  const T scale = static_cast<T>(p.scale), minus_inf = st::negative_infinity<T>();
  const int lane = threadIdx.x % P::group, slot = threadIdx.x / P::group;
  // The grid is resident (rows::resident_grid): each block walks many rows, and a row's loads
  // are issued before the row before it is worked on, so a thread's loads stay in flight through
  // its reductions and stores.
  // kShared (rows::tile_prefetches_shared: f32 rows of 32 elements a thread, without a mask; and
  // the 16-bit rows of launch_cached's staged form): the next kStagedRows rows are staged in
  // shared memory while this one is worked on, in place of the 16-bit rows' prefetch in
  // registers (kPrefetch).
  // kWords: the masked 16-bit rows hold their prefetch as 32-bit words (rows::TileWords), the
  // next row's loads going into the registers just read. As 16-bit elements, each prefetched
  // load was merged into the loop-carried registers by byte permutes placed right after it (a
  // PRMT an element pair, SASS, sm_90, nvcc 13), which waited for the data before the row was
  // worked on. H200 A/B (2026-12-01 03:44Z, kf-bench `--suite ops --filter
  // softmax,log_softmax`, 0aefb3f's library (1db6c17's kernels) against fde78ea's, same call,
  // two passes), causal [16, 2048, 2048] with a [2048, 2048] mask, % of copy, with kSplitLog and
  // the 72-register bound of launch_cached: f16 79.1 / 78.9 -> 86.7 / 86.5, bf16 78.2 / 78.2 ->
  // 97.4 / 97.3. The unmasked 16-bit rows, measured in the same form, moved within noise but for
  // the rows of 64 (bf16 87.4-90.0 -> 87.0-87.6 over two calls), and keep theirs.
  constexpr bool kShared = kStagedRows > 0 && !kMask && kStage;
  constexpr bool kPrefetch = rows::tile_prefetches<P, S>() && !kShared;
  constexpr bool kStreamOut = rows::tile_streams_output<P, S>(kShared);  // st.global.cs
  constexpr bool kWords = kPrefetch && kMask && rows::tile_words_fit<P, S>();
  using RawPart = std::conditional_t<kWords, rows::TileWords<P, S>, rows::TileRaw<P, S>>;
  struct Raw {
    RawPart x, mask;
  };
  // The causal rule: a row sees columns up to its query index + diagonal. Each thread tracks the
  // query index of its rows as the grid walks them (a division per thread, not per row; rows and
  // query_rows are below 2^31 here, the cached launch's bound, and rows of at most 2^14), and the
  // hidden columns are never read from memory (their logits are -inf whatever x holds): about
  // half of x and of the mask.
  const int64_t walk_step = int64_t{gridDim.x} * P::rows_per_block;
  const int64_t first_row = int64_t{blockIdx.x} * P::rows_per_block;
  uint32_t queries = 1, query_step = 0, query = 0;
  if (p.causal) {
    queries = static_cast<uint32_t>(p.query_rows);
    query_step = static_cast<uint32_t>(walk_step) % queries;
    query = static_cast<uint32_t>(first_row + slot) % queries;
  }
  const auto next_query = [&](uint32_t q) {
    q += query_step;
    return q >= queries ? q - queries : q;
  };
  // Visible columns of a row of `length` with query index q (all of them without the rule), in
  // 32 bits: q < Lq < 2^31 and diagonal = Lk - Lq with Lk <= 2^14 here, so q + diagonal + 1 lies
  // in (-2^31, 2^14].
  const auto visible = [&](uint32_t q, int length) -> int {
    if (!p.causal) return length;
    // columns [0, seen) are visible
    const int seen = static_cast<int>(q) + static_cast<int>(p.diagonal) + 1;
    return max(0, min(seen, length));
  };
  // The columns fetched: the visible ones in whole vectors (the last vector's hidden columns are
  // masked after the fetch). Without the rule, the row (no rounding on the common path).
  const auto loaded = [&](int seen) {
    return p.causal ? (seen + P::vec - 1) / P::vec * P::vec : seen;
  };
  // kMask: each thread's row is found through a rows::RowCursor advanced with the walk, not by
  // dividing for every operand of every row (row_offset_cold): an [Lq, Lk] mask broadcast over the
  // heads keeps the walk at two leading dims. H200 A/B (2026-11-27 13:32Z, kf-bench, same call,
  // two passes), causal [16, 2048, 2048] with a [2048, 2048] mask (f32: [8, ...]), % of copy f32
  // / f16 / bf16: 92.4 / 63.7 / 60.0 -> 96.0 / 76.1 / 70.1. Not for the unmasked forms, whose
  // dense walks have one leading dim: in the same run the cursor cost them up to 7.5 points
  // (f32 rows of 4096 93.3 -> 85.8, the 16-bit 32x512x768 seeds 68 -> 64.5).
  const rows::RowCursor cursor_step = kMask ? rows::row_cursor(w, walk_step) : rows::RowCursor{};
  rows::RowCursor cursor = kMask ? rows::row_cursor(w, first_row + slot) : rows::RowCursor{};
  // Heads inner: where the mask is broadcast over the outer of two leading dims ([H, Lq, Lk]
  // logits, or [B, H * Lq, Lk], with an [Lq, Lk] mask, ...), the rows are walked in the order
  // (q, h) rather than (h, q): walk index i is row (i % H, i / H), so the H rows that read one
  // mask row run side by side and all but the first find it in L2. In (h, q) order a mask row
  // is read again only Lq rows later, after about 32 MiB of f32 x and out at Lq = Lk = 2048, and
  // much of it is read from DRAM again: Nsight Compute (H100, 2026-12-05 12:47Z) read 2.65 TB/s
  // of DRAM for the f32 causal rows of [11, 2048, 2048] against the 2.31 TB/s that x, out and
  // one pass over the mask account for. H100 A/B (13:33Z-13:35Z, kf-bench `--suite ops --filter
  // softmax`, one library choosing the order by an environment variable, same call, two
  // passes), causal rows with a [2048, 2048] mask, % of copy, f32 / f16 / bf16: 77.3 / 84.1 /
  // 84.2 and 77.3 / 84.1 / 84.1 -> 86.4 / 84.5 / 84.7 and 86.5 / 84.7 / 84.7. The 16-bit rows
  // (which prefetch the next row on a resident grid) gained little; why they stay near 84.5 was
  // not found.
  const bool heads_inner =
      kMask && w.outer_ndim == 2 && p.mask.outer[0] == 0 && w.outer_shape[0] > 1;
  // The row of walk index `index` (below w.rows < 2^31 here, the cached launch's bound) and its
  // query index, in that order.
  const auto heads_inner_cursor = [&](int64_t index) {
    const uint32_t i = static_cast<uint32_t>(index);
    const uint32_t lo = div_by(i, DivMagic{w.outer_multiplier[0], w.outer_shift[0]});
    return rows::RowCursor{i - lo * static_cast<uint32_t>(w.outer_shape[0]), lo};
  };
  // The inner leading extent is a product of x's leading extents whose innermost is Lq, so the
  // query index of row (hi, lo) is lo mod Lq (lo itself where the extent is Lq, the usual case).
  const auto heads_inner_query = [&](rows::RowCursor c) {
    return !p.causal || c.lo < queries ? c.lo : c.lo % queries;  // (unused without the rule)
  };
  const auto offset_of = [&](const rows::Operand& o, rows::RowCursor c, int64_t row) {
    if constexpr (kMask)
      return rows::row_offset_at(w, o, c, row);
    else
      return rows::row_offset_cold(w, o, row);
  };
  const auto advanced = [&](rows::RowCursor c) {
    if constexpr (kMask)
      return rows::advance(w, c, cursor_step);
    else
      return c;
  };
  auto fetch = [&](int64_t first, uint32_t q, rows::RowCursor c, Raw& raw) {
    const int64_t row = first + slot;
    if (row >= w.rows) return;
    const int count = loaded(visible(q, n));
    rows::tile_fetch<P>(static_cast<const S*>(p.x.data) + offset_of(p.x, c, row), count, lane,
                        raw.x);
    if constexpr (kMask)
      rows::tile_fetch<P>(static_cast<const S*>(p.mask.data) + offset_of(p.mask, c, row), count,
                          lane, raw.mask);
  };
  // The next row's loads (the prefetching forms): the row walk_step on from `first`.
  const auto fetch_next = [&](int64_t first, Raw& into) {
    if (heads_inner) {
      if (first + walk_step + slot >= w.rows) return;
      const rows::RowCursor c = heads_inner_cursor(first + walk_step + slot);
      fetch(first + walk_step, heads_inner_query(c), c, into);
      return;
    }
    fetch(first + walk_step, next_query(query), advanced(cursor), into);
  };
  using Slot = rows::Pack<S, P::vec>;
  // Stages the row `first` + slot (query index q) into staged row `at` of the slots.
  const auto stage = [&](int64_t first, uint32_t q, rows::RowCursor c, int at) {
    const int64_t row = first + slot;
    if constexpr (kShared) {
      if (row >= w.rows) return;
      const int count = loaded(visible(q, n));
      Slot* const slots = rows::tile_slots<P, S>(at);
      rows::tile_stage<P, false>(static_cast<const S*>(p.x.data) + offset_of(p.x, c, row), count,
                                 lane, slots);
    }
  };
  // The query index `steps` rows of the walk after q.
  const auto query_after = [&](uint32_t q, int steps) {
    for (int i = 0; i < steps; ++i) q = next_query(q);
    return q;
  };
  if (heads_inner && first_row + slot < w.rows) {
    cursor = heads_inner_cursor(first_row + slot);
    query = heads_inner_query(cursor);
  }
  Raw raw;
  if constexpr (kPrefetch) fetch(first_row, query, cursor, raw);
  int staged = 0;  // the staged row holding this thread's current row
  if constexpr (kShared) {
#pragma unroll
    for (int r = 0; r < kStagedRows; ++r) {  // kShared forms have no mask: the cursor stays
      stage(first_row + r * walk_step, query_after(query, r), cursor, r);
      async_copy::commit();
    }
  }
  // kChunked (f32 rows of 16-byte vectors over a block of threads, up to 16 elements each):
  // every step works chunk by chunk and leaves out the chunks that were not fetched (hidden by
  // the causal rule or past the row's end): they are not converted, scaled, maximised,
  // exponentiated or normalised, and store 0 (log-softmax: -inf) without a conversion. Their
  // logits would be -inf, whose exp adds an exact 0 to the sum, so the results are the same. The
  // form also keeps the softmax and log-softmax steps apart, where the compiler otherwise
  // computes both and selects. H200 A/B (2026-11-27 05:59Z, kf-bench, same call, two passes),
  // % of copy: f32 rows of 4096 87.0 -> 93.2 (log-softmax 86.9 -> 93.3), causal [8, 2048, 2048]
  // with a mask 88.5 -> 92.2, the 2048 x 2048 seed 59.3 -> 60.7, every other row within 1.2
  // points. Not for the others: the same form for every policy (05:44Z) lost where the per-chunk
  // branches cost more than they save, with 32 elements a thread, a few lanes a row, or 16-bit
  // rows (f32 rows of 1024 93.7 -> 65.8, of 16384 72.9 -> 52.2, f16 rows of 4096 86.6 -> 79.7;
  // causal 16-bit rows +1 .. +2); scalar rows (unaligned, a branch per element) were not timed.
  // bf16 rows with a mask take it too, keeping their prefetch of the next row (kPrefetch; the
  // form had fetched each row in place). H200 A/B (2026-11-30 05:08Z, kf-bench `--suite ops
  // --filter softmax`, 05faef6's library against one with the form for 16-bit masked rows, same
  // call, two passes), causal [16, 2048, 2048] with a [2048, 2048] mask, % of copy: bf16 73.2 /
  // 73.6 -> 78.5 / 78.8, f16 79.3 / 79.4 -> 79.4 / 79.8. The same form without the prefetch had
  // lost (02:48Z: f16 79.1 -> 67.5, bf16 73.2 -> 67.3). Since the prefetch is held in words
  // (kWords), f16 takes it too: H200 A/B (2026-12-01 04:00Z, 0aefb3f's library against the one
  // with it, same call, two passes), f16 causal 79.1 / 79.1 -> 97.5 / 97.6 (86.9 / 86.9 without
  // it, ba76fe5 at 03:55Z), bf16 78.2 / 78.3 -> 97.2 / 97.3. Masked rows without the causal rule
  // (every chunk fetched) take it unmeasured.
  constexpr bool kChunked = (sizeof(S) == 4 || (sizeof(S) == 2 && kMask && kPrefetch)) &&
                            P::vec > 1 && P::group > 32 && P::items <= 16;
  for (int64_t first = first_row; first < w.rows;
       first += walk_step, query = next_query(query), cursor = advanced(cursor)) {
    const int64_t row = first + slot;
    if (heads_inner && row < w.rows) {
      cursor = heads_inner_cursor(row);
      query = heads_inner_query(cursor);
    }
    const int length = row < w.rows ? n : 0;  // rows past the end load and store nothing
    const int64_t r = row < w.rows ? row : 0;
    const int seen = visible(query, length);
    const int count = loaded(seen);  // the columns fetched; -inf (x) and 0 (mask) after them
    // Whether chunk k takes part: every chunk, or (kChunked) the fetched ones, whose columns are
    // all below count (a multiple of P::vec).
    const auto live = [&](int k) { return !kChunked || rows::tile_col<P>(lane, k) < count; };
    T v[P::items];
    if constexpr (kChunked) {
      // kPrefetch: this row's loads were issued a row ago; the next row's go into the same
      // registers once they are read.
      if constexpr (!kPrefetch) fetch(first, query, cursor, raw);
#pragma unroll
      for (int k = 0; k < P::chunks; ++k) {
        if (!live(k)) continue;
        T xf[P::vec], mf[P::vec];
        rows::tile_widen<P, S, kPairs>(raw.x, k, xf);
        if constexpr (kMask) rows::tile_widen<P, S, kPairs>(raw.mask, k, mf);
#pragma unroll
        for (int e = 0; e < P::vec; ++e) v[k * P::vec + e] = kMask ? scale * xf[e] + mf[e] : xf[e];
      }
      if constexpr (kPrefetch)  // the next row's loads, into the registers just read
        fetch_next(first, raw);
      if (!kMask && scale != T(1)) {
#pragma unroll
        for (int k = 0; k < P::chunks; ++k)
          if (live(k))
#pragma unroll
            for (int e = 0; e < P::vec; ++e) v[k * P::vec + e] *= scale;
      }
    } else {
      T add[kMask ? P::items : 1];
      if constexpr (kWords) {
        rows::tile_unpack<P, S, kPairs>(raw.x, count, lane, v, minus_inf);
        rows::tile_unpack<P, S, kPairs>(raw.mask, count, lane, add, T(0));
        fetch_next(first, raw);
      } else if constexpr (kPrefetch) {
        Raw next;
        fetch_next(first, next);
        rows::tile_unpack<P, S, kPairs>(raw.x, count, lane, v, minus_inf);
        if constexpr (kMask) rows::tile_unpack<P, S, kPairs>(raw.mask, count, lane, add, T(0));
        raw = next;
      } else if constexpr (kShared) {
        async_copy::wait<kStagedRows - 1>();  // this thread's copies of the row have landed
        rows::tile_read_staged<P, false>(rows::tile_slots<P, S>(staged), count, lane, raw.x);
        // The row kStagedRows steps on, into the slots just read.
        stage(first + kStagedRows * walk_step, query_after(query, kStagedRows), advanced(cursor),
              staged);
        async_copy::commit();
        staged = staged + 1 == kStagedRows ? 0 : staged + 1;
        rows::tile_unpack<P, S, kPairs>(raw.x, count, lane, v, minus_inf);
      } else if constexpr (P::items <= 16) {
        fetch(first, query, cursor, raw);  // x's and the mask's loads in flight together
        rows::tile_unpack<P, S, kPairs>(raw.x, count, lane, v, minus_inf);
        if constexpr (kMask) rows::tile_unpack<P, S, kPairs>(raw.mask, count, lane, add, T(0));
      } else {  // 32 elements a thread: both rows at once would spill (f32 at 128 registers)
        rows::tile_load<P>(static_cast<const S*>(p.x.data) + offset_of(p.x, cursor, r), count, lane,
                           v, minus_inf);
        if constexpr (kMask)
          rows::tile_load<P>(static_cast<const S*>(p.mask.data) + offset_of(p.mask, cursor, r),
                             count, lane, add, T(0));
      }
      if constexpr (kMask) {
#pragma unroll
        for (int i = 0; i < P::items; ++i) v[i] = scale * v[i] + add[i];
      } else if (scale != T(1)) {
#pragma unroll
        for (int i = 0; i < P::items; ++i) v[i] *= scale;
      }
      if (!(scale > T(0))) {  // scale * -inf is not -inf: the padding is set again
#pragma unroll
        for (int k = 0; k < P::chunks; ++k)
          if (rows::tile_col<P>(lane, k) >= count)
#pragma unroll
            for (int e = 0; e < P::vec; ++e) v[k * P::vec + e] = minus_inf;
      }
    }
    if (p.causal && seen < count) {
      // Columns past the fetched ones are -inf already (or left out); the last fetched vector
      // may hold hidden columns, [seen, count).
#pragma unroll
      for (int k = 0; k < P::chunks; ++k)
        if (rows::tile_col<P>(lane, k) == count - P::vec)
#pragma unroll
          for (int e = 0; e < P::vec; ++e)
            if (count - P::vec + e >= seen) v[k * P::vec + e] = minus_inf;
    }
    T max = minus_inf;  // a NaN wins (larger_or_nan), as in math::stats
#pragma unroll
    for (int k = 0; k < P::chunks; ++k)
      if (live(k))
#pragma unroll
        for (int e = 0; e < P::vec; ++e) max = st::larger_or_nan(max, v[k * P::vec + e]);
    max = rows::group_reduce<P::threads, false>(max, rows::Larger{}, P::group, scratch[0]);
    const bool hidden_row = max == minus_inf;  // gives 0 (log-softmax: -inf), not NaN
    // The rest of the row, for softmax or log-softmax (is_log). The masked and the staged 16-bit
    // rows compile each form on its own (kSplitLog: is_log a constant): with the form a runtime
    // choice per element, the compiler kept both the logits and their exps and selected between
    // them, an FSEL and a move per element, about 7 % of the masked causal rows' instructions
    // (Nsight Compute, H200, 2026-12-01; its A/B is at kWords above; f16 rows of 16384, staged,
    // 85.2 / 85.1 -> 85.7 / 86.5 there). The f32 rows keep one body: compiled twice, the kernels
    // of up to 16 elements a thread spilled 16 to 56 bytes (ptxas, sm_90, nvcc 13).
    const auto finish = [&](auto log_form) {
      const bool is_log = log_form;
      const RowExp<Prim, T> exp_about(max);
      T sum = 0;
      if (is_log) {
#pragma unroll
        for (int k = 0; k < P::chunks; ++k)
          if (live(k))
#pragma unroll
            for (int e = 0; e < P::vec; ++e) sum += exp_about(v[k * P::vec + e]);  // exp(-inf) = 0
      } else {
#pragma unroll
        for (int k = 0; k < P::chunks; ++k)
          if (live(k))
#pragma unroll
            for (int e = 0; e < P::vec; ++e) {
              v[k * P::vec + e] = exp_about(v[k * P::vec + e]);
              sum += v[k * P::vec + e];
            }
      }
      sum = rows::group_reduce<P::threads, false>(sum, rows::Plus{}, P::group, scratch[1]);
      if (hidden_row) {
        if constexpr (!kChunked) {  // (kChunked stores it below)
#pragma unroll
          for (int i = 0; i < P::items; ++i) v[i] = is_log ? minus_inf : T(0);
        }
      } else if (is_log) {
        const T log_factor = exp_about.log_factor(sum);
#pragma unroll
        for (int k = 0; k < P::chunks; ++k)
          if (live(k))
#pragma unroll
            for (int e = 0; e < P::vec; ++e)
              v[k * P::vec + e] = exp_about.log_softmax(v[k * P::vec + e], log_factor);
      } else {
        const T inv_sum = T(1) / sum;
#pragma unroll
        for (int k = 0; k < P::chunks; ++k)
          if (live(k))
#pragma unroll
            for (int e = 0; e < P::vec; ++e) v[k * P::vec + e] *= inv_sum;
      }
      S* const out = static_cast<S*>(p.out.data) + offset_of(p.out, cursor, r);
      if constexpr (kChunked) {
        using Vec = rows::Pack<S, P::vec>;
#pragma unroll
        for (int k = 0; k < P::chunks; ++k) {
          const int c = rows::tile_col<P>(lane, k);
          if (c >= length) continue;
          Vec pack;
          if (live(k) && !hidden_row) {
#pragma unroll
            for (int e = 0; e < P::vec; ++e) pack.v[e] = Traits::from_compute(v[k * P::vec + e]);
          } else {
            const S fill = Traits::from_compute(is_log ? minus_inf : T(0));
#pragma unroll
            for (int e = 0; e < P::vec; ++e) pack.v[e] = fill;
          }
          rows::store_pack<kStreamOut>(reinterpret_cast<Vec*>(out + c), pack);
        }
      } else {
        rows::tile_store<P, kStreamOut>(out, length, lane, v);
      }
    };
    constexpr bool kSplitLog = sizeof(S) == 2 && (kMask || kShared);
    if constexpr (!kSplitLog)
      finish(p.log);
    else if (p.log)
      finish(std::true_type{});
    else
      finish(std::false_type{});
  }
}

}  // namespace
}  // namespace kf::softmax
