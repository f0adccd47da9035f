// CUDA backend of the softmax family, four regimes chosen per call:
//  - dense, 16-byte aligned f32/f16/bf16 rows longer than the cached kernels hold (16384
//    elements): staged rows (core/ops/rows/staged.cuh), a slice of a row per block, or past
//    64 KiB a thread-block cluster per row (sm_90), each block holding a slice of x in shared
//    memory and the row's maximum and sum of exp combined through distributed shared memory, so
//    x is read from DRAM once;
//  - rows of up to 1024 elements: a few lanes or a warp per row, several rows per block;
//  - rows of up to 16K elements (8K for f64): a block per row;
//    both hold the row's logits in registers (core/ops/rows/tile.cuh), so x (and the mask) are
//    read from DRAM once, in the widest loads of 16, 8 or 4 bytes that every row start is
//    aligned to and the row's bytes fill (rows::row_vector_bytes), else one element a load; max
//    and sum of exp are then exact two-pass reductions over the registers; 16-bit rows run on a
//    resident grid that issues the next row's loads of x before working on the current row
//    (rows::tile_prefetches);
//  - everything else (strided or row-broadcast operands, longer rows off 16-byte vectors): the
//    streaming path, one block per row over global memory (pass 1: max and sum of exp; pass 2:
//    write), which reads x twice; dense rows without a mask in 16-byte vectors from each row's
//    first 16-byte boundary (streaming_vector_kernel). Each thread touches the same columns in
//    both passes, which keeps the in-place form safe (in the cached paths every load of a row
//    precedes its stores, by the same thread).
// The kernels and launches live in this header, which only the family's per-storage-type
// translation units include (cuda_f32.cu, cuda_f16.cu, cuda_bf16.cu, cuda_f64.cu, and for 16-bit
// rows narrower than 16-byte vectors cuda_f16_narrow.cu and cuda_bf16_narrow.cu): each
// instantiates them for one type (and width), so they compile in parallel; cuda.cu dispatches.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <type_traits>

#include "core/math/elementary.hpp"
#include "core/math/numeric.hpp"
#include "core/math/row_stats.hpp"
#include "core/ops/async_copy.cuh"
#include "core/ops/rows/dispatch.cuh"
#include "core/ops/rows/grid_group.cuh"
#include "core/ops/rows/reduce.cuh"
#include "core/ops/rows/staged.cuh"
#include "core/ops/rows/tile.cuh"
#include "core/ops/softmax/cuda_storage.hpp"
#include "core/ops/softmax/softmax.hpp"
#include "core/runtime/cuda/grid_dependency.cuh"
#include "core/runtime/error.hpp"

namespace kf::softmax {
namespace {

// The streaming kernel's block, and the columns each thread loads before it works on any of them
// (as the norms' streaming kernel, norm/cuda_streaming.cuh): for dense rows 32 bytes of f32 and f64
// data and 32 of 16-bit data (no spills at 64 registers, sm_90, nvcc 13); for strided rows four
// columns, two of f64 (four spilled 80 bytes a thread).
template <class S, bool kDense>
struct StreamPolicy {
  static constexpr int threads = 256;
  static constexpr int unroll =
      kDense ? (sizeof(S) >= 4 ? 32 / sizeof(S) : 16) : (sizeof(S) == 8 ? 2 : 4);
};

// The logit of column col, from x's and the mask's elements there (mask_value unused without a
// mask): -inf where the causal rule hides the column.
template <class S>
__device__ __forceinline__ math::compute_t<S> logit(const Plan& p, S x_value, S mask_value,
                                                    int64_t query, int64_t col) {
  using T = math::compute_t<S>;
  using Traits = math::StorageTraits<S>;
  if (p.causal && math::stats::causal_hidden(query, col, p.diagonal))
    return math::stats::negative_infinity<T>();
  T v = static_cast<T>(p.scale) * Traits::to_compute(x_value);
  if (p.mask.data) v += Traits::to_compute(mask_value);
  return v;
}

// e^(v - m) for the values v of a row about a maximum m of theirs, as the row kernels take it.
// f32 and f64 (math::Precise): e^(v - m). 16-bit rows (math::HalfStorage, MUFU.EX2): 2^(v log2 e
// - s) with s = m log2 e rounded once (`shift`), one FFMA and the MUFU a value where e^(v - m)
// took an FADD, an FMUL and the MUFU. The rounding of s scales every exp about m alike, so it
// cancels in a softmax; log_factor takes it out of the log-softmax's log of the sum (the FFMA's
// residual m log2 e - s is exact), and between() rescales a part's sum from its own maximum to
// another through the same rounded shifts, so parts merged from blocks or warps are scaled as
// exps taken about the merged maximum's own shift would be. of_scaled(x, factor(scale)) is
// e^(x scale - m) (the 16-bit form folds the scale into the FFMA: 2^(x (scale log2 e) - s)).
// The log-softmax of v is log_softmax(v, log_factor(sum)), and of x scaled log_softmax_scaled(x,
// scale, log_factor(sum)). f32 and f64 take (v - m) - log sum, the difference first, as the CPU
// backend and math::stats::softmax_value do: v - (m + log sum) rounds m + log sum at m's
// magnitude, up to ulp(2000) / 2 = 6e-5 in every f32 output for logits near 2000 (the test
// LogitsFarFromZero), where v - m is exact for v within a factor of two of m and otherwise
// rounds at the output's magnitude. The 16-bit rows keep v - (m + log sum), one FADD (or FFMA)
// a value: its rounding (up to 6e-5 about 2000, where a 16-bit logit's own ulp is 1 or 8) is
// under half an ulp of the 16-bit output for log-probabilities of magnitude 1/8 and more (f16)
// or 1/64 and more (bf16), and above it only nearer 0. (H200, 2026-12-04 08:07Z, kf-bench
// log_softmax, best of two alternating passes: the 16-bit rows of 16384 and 65536 lost 0.8-1.4 %
// with the difference first; the f32 rows of 1024 to 262144 ran 0.5 % slower to 1.9 % faster.)
// A/B on an H200 (2026-12-04, kf-bench softmax, best of two alternating passes, us): f16 rows of
// 65536 88.27 -> 86.30, of 262144 96.98 -> 88.93, of 1048576 107.09 -> 104.83; bf16 rows of
// 65536 92.08 -> 89.02; f32 and the rest within +-0.7 % (bf16 rows of 262144 96.93 -> 98.46, a
// pair whose first-pass times were 101.98 and 98.46).
template <class Prim, class T>
struct RowExp {
  T max;
  __device__ __forceinline__ explicit RowExp(T m) : max(m) {}
  __device__ __forceinline__ T operator()(T v) const { return Prim::exp(v - max); }
  __device__ __forceinline__ static T factor(T scale) { return scale; }
  __device__ __forceinline__ T of_scaled(T x, T scale) const {
    return Prim::exp(fma(x, scale, -max));
  }
  __device__ __forceinline__ T log_factor(T sum) const { return math::stats::log_of(sum); }
  __device__ __forceinline__ T log_softmax(T v, T log_factor) const {
    return (v - max) - log_factor;
  }
  __device__ __forceinline__ T log_softmax_scaled(T x, T scale, T log_factor) const {
    return fma(x, scale, -max) - log_factor;
  }
  // e^(m_part - m_row), for a sum of exp about m_part (callers leave out parts of -inf).
  __device__ __forceinline__ static T between(T m_part, T m_row) {
    return Prim::exp(m_part - m_row);
  }
};

template <>
struct RowExp<math::HalfStorage, float> {
  static constexpr float kLog2e = 1.44269504088896341f, kLn2 = 0.693147180559945309f;
  float max, shift;
  __device__ __forceinline__ static float shift_of(float m) { return __fmul_rn(m, kLog2e); }
  __device__ __forceinline__ explicit RowExp(float m) : max(m), shift(shift_of(m)) {}
  __device__ __forceinline__ float operator()(float v) const {
    return math::HalfStorage::exp2(fmaf(v, kLog2e, -shift));
  }
  __device__ __forceinline__ static float factor(float scale) { return scale * kLog2e; }
  __device__ __forceinline__ float of_scaled(float x, float factor) const {
    return math::HalfStorage::exp2(fmaf(x, factor, -shift));
  }
  __device__ __forceinline__ float log_factor(float sum) const {
    return max + (math::stats::log_of(sum) - fmaf(max, kLog2e, -shift) * kLn2);
  }
  __device__ __forceinline__ float log_softmax(float v, float log_factor) const {
    return v - log_factor;
  }
  __device__ __forceinline__ float log_softmax_scaled(float x, float scale,
                                                      float log_factor) const {
    return fmaf(x, scale, -log_factor);
  }
  __device__ __forceinline__ static float between(float m_part, float m_row) {
    return math::HalfStorage::exp2(shift_of(m_part) - shift_of(m_row));
  }
};

// The max and sum of a block's partial (max, sum) pairs, for every thread of the block (kThreads
// of them, a multiple of 32); scratch_max and scratch_sum hold 32 values each and are free again
// on return.
template <int kThreads, class T>
__device__ __forceinline__ math::stats::MaxSum<T> block_max_sum(math::stats::MaxSum<T> s,
                                                                T* scratch_max, T* scratch_sum) {
  namespace st = math::stats;
  for (int o = 16; o > 0; o >>= 1) {
    const st::MaxSum<T> other{__shfl_xor_sync(0xffffffffu, s.max, o),
                              __shfl_xor_sync(0xffffffffu, s.sum, o)};
    s = st::max_sum_merge(s, other);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    scratch_max[warp] = s.max;
    scratch_sum[warp] = s.sum;
  }
  __syncthreads();
  s = st::max_sum_empty<T>();
  for (int k = 0; k < kThreads / 32; ++k)
    s = st::max_sum_merge(s, st::MaxSum<T>{scratch_max[k], scratch_sum[k]});
  __syncthreads();
  return s;
}

// The streaming kernel: a block per row, over global memory, reading x (and the mask) twice. Each
// thread loads Policy::unroll columns of the row before it works on any of them, every load
// unconditional (a column past the row's end loads the thread's first column of the step
// instead, and is left out where values combine), so that the loads are in flight together; a
// thread reads and stores only its own columns, so out may be x.
// kDense: x, out and the mask have dense rows (Plan::dense).
template <class Policy, class S, bool kDense>
__global__ void __launch_bounds__(Policy::threads, 4)
    streaming_kernel(const __grid_constant__ Plan p) {
  cuda::wait_prior_grid();  // a dependent launch: nothing global is touched before this
  cuda::allow_next_grid();
  using T = math::compute_t<S>;
  namespace st = math::stats;
  constexpr int U = Policy::unroll;
  constexpr int64_t kStep = int64_t{Policy::threads} * U;
  __shared__ T scratch_max[32];
  __shared__ T scratch_sum[32];
  const rows::Walk& w = p.walk;
  const int64_t n = w.row_length;
  const S* x = static_cast<const S*>(p.x.data);
  const S* mask = static_cast<const S*>(p.mask.data);
  for (int64_t row = blockIdx.x; row < w.rows; row += gridDim.x) {
    const int64_t query = row % p.query_rows;
    const int64_t xb = rows::row_offset(w, p.x, row);
    const int64_t mb = mask ? rows::row_offset(w, p.mask, row) : 0;
    // Loads this thread's U columns from c0 (x's, and the mask's where there is one).
    // A step that lies inside the row loads at fixed offsets from its first column; the row's
    // last step clamps its columns.
    auto fetch = [&](int64_t c0, S(&xs)[U], S(&ms)[U]) {
      if (c0 + (U - 1) * Policy::threads < n) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
          xs[u] = x[xb + rows::col_offset_as<kDense>(w, p.x, c0 + u * Policy::threads)];
          if (mask)
            ms[u] = mask[mb + rows::col_offset_as<kDense>(w, p.mask, c0 + u * Policy::threads)];
        }
      } else {
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int64_t c = c0 + u * Policy::threads < n ? c0 + u * Policy::threads : c0;
          xs[u] = x[xb + rows::col_offset_as<kDense>(w, p.x, c)];
          if (mask) ms[u] = mask[mb + rows::col_offset_as<kDense>(w, p.mask, c)];
        }
      }
    };
    // Calls fn(column, logit) for this thread's columns, a step of loads at a time.
    auto for_each_logit = [&](auto&& fn) {
      for (int64_t c0 = threadIdx.x; c0 < n; c0 += kStep) {
        S xs[U], ms[U] = {};
        fetch(c0, xs, ms);
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int64_t c = c0 + u * Policy::threads;
          if (c >= n) break;
          fn(c, logit(p, xs[u], ms[u], query, c));
        }
      }
    };
    st::MaxSum<T> s = st::max_sum_empty<T>();
    for_each_logit([&](int64_t, T v) { s = st::max_sum_add(s, v); });
    s = block_max_sum<Policy::threads>(s, scratch_max, scratch_sum);
    const T inv_sum = T(1) / s.sum, log_sum = st::log_of(s.sum);
    const int64_t ob = rows::row_offset(w, p.out, row);
    S* out = static_cast<S*>(p.out.data);
    for_each_logit([&](int64_t c, T v) {
      out[ob + rows::col_offset_as<kDense>(w, p.out, c)] = math::StorageTraits<S>::from_compute(
          st::softmax_value(v, s.max, inv_sum, log_sum, p.log));
    });
  }
}

// The streaming kernel's form for dense rows without a mask (the rows the register-cached and
// staged kernels do not take: longer than 16384 elements and not filling 16-byte vectors, such
// as vocabulary rows of 30522, 32001 or 50257) whose x and out start equally far from a 16-byte
// boundary, row by row (launch checks rows::rows_in_phase): each row in 16-byte vectors from its
// first 16-byte boundary, the few columns before that boundary and after the last whole vector
// one at a time. (A row whose x and out were out of phase would take one element a load
// throughout; the kernel checks, though launch sends it none.) Each thread loads `unroll` vectors
// before it works on any of them (the row's last step clamped to the thread's own vector), and
// reads and stores only its own columns, so out may be x.
template <class S>
struct StreamVectorPolicy {
  static constexpr int threads = 256;
  static constexpr int vec = 16 / sizeof(S);
  // f64 spills 8 bytes a thread around its exp at one or two vectors, 16 at four (ptxas, sm_90).
  static constexpr int unroll = sizeof(S) == 8 ? 2 : 4;
};

template <class Policy, class S>
__global__ void __launch_bounds__(Policy::threads, 4)
    streaming_vector_kernel(const __grid_constant__ Plan p) {
  cuda::wait_prior_grid();  // a dependent launch: nothing global is touched before this
  cuda::allow_next_grid();
  using T = math::compute_t<S>;
  using Traits = math::StorageTraits<S>;
  using Pack = rows::Pack<S, Policy::vec>;
  using Prim = typename math::PrimitivesFor<S>::type;
  namespace st = math::stats;
  constexpr int V = Policy::vec, U = Policy::unroll;
  constexpr int64_t kStep = int64_t{Policy::threads} * U;
  __shared__ T scratch_max[32];
  __shared__ T scratch_sum[32];
  const rows::Walk& w = p.walk;
  const int64_t n = w.row_length;
  const T minus_inf = st::negative_infinity<T>();
  for (int64_t row = blockIdx.x; row < w.rows; row += gridDim.x) {
    const int64_t query = row % p.query_rows;
    const S* x = static_cast<const S*>(p.x.data) + rows::row_offset(w, p.x, row);
    S* out = static_cast<S*>(p.out.data) + rows::row_offset(w, p.out, row);
    const uintptr_t xa = reinterpret_cast<uintptr_t>(x), oa = reinterpret_cast<uintptr_t>(out);
    // Columns [0, head) and [head + vectors * V, n) one at a time; vector k at head + k * V.
    int64_t head = n;
    if (((xa ^ oa) & 15) == 0 && xa % sizeof(S) == 0) {
      head = static_cast<int64_t>((16 - (xa & 15)) & 15) / int64_t{sizeof(S)};
      if (head > n) head = n;
    }
    const int64_t vectors = (n - head) / V, tail = head + vectors * V;
    const Pack* xv = reinterpret_cast<const Pack*>(x + head);
    Pack* ov = reinterpret_cast<Pack*>(out + head);
    // Calls fn(column, storage value) for this thread's columns outside the vectors.
    auto for_each_single = [&](auto&& fn) {
      for (int64_t c = threadIdx.x; c < head; c += Policy::threads) fn(c, x[c]);
      for (int64_t c = tail + threadIdx.x; c < n; c += Policy::threads) fn(c, x[c]);
    };
    // Calls fn(k, vector k) for this thread's vectors, a step of U loads at a time (the row's
    // last step clamped to the thread's own vector).
    auto for_each_vector = [&](auto&& fn) {
      for (int64_t k0 = threadIdx.x; k0 < vectors; k0 += kStep) {
        const bool inside = k0 + (U - 1) * Policy::threads < vectors;
        Pack packs[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int64_t k = k0 + u * Policy::threads;
          packs[u] = xv[inside || k < vectors ? k : k0];
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int64_t k = k0 + u * Policy::threads;
          if (k >= vectors) break;
          fn(k, packs[u]);
        }
      }
    };
    st::MaxSum<T> s = st::max_sum_empty<T>();
    for_each_single([&](int64_t c, S v) { s = st::max_sum_add(s, logit(p, v, S{}, query, c)); });
    for_each_vector([&](int64_t k, const Pack& pack) {
      // The vector's logits join s a vector at a time: their max first (a NaN among them makes it
      // NaN, which then reaches every output), one rescale at most, an exp each.
      T v[V], m = minus_inf;
#pragma unroll
      for (int e = 0; e < V; ++e) {
        v[e] = logit(p, pack.v[e], S{}, query, head + k * V + e);
        m = v[e] > m || v[e] != v[e] ? v[e] : m;
      }
      if (!(m <= s.max)) {
        s.sum = s.max == minus_inf ? T(0) : s.sum * Prim::exp(s.max - m);
        s.max = m;
      }
      if (s.max != minus_inf) {
#pragma unroll
        for (int e = 0; e < V; ++e) s.sum += Prim::exp(v[e] - s.max);  // exp(-inf) = 0
      }
    });
    s = block_max_sum<Policy::threads>(s, scratch_max, scratch_sum);
    const T inv_sum = T(1) / s.sum, log_sum = st::log_of(s.sum);
    // st::softmax_value with the storage type's exponential (math::PrimitivesFor).
    auto value = [&](int64_t c, S x_value) {
      const T v = logit(p, x_value, S{}, query, c);
      if (s.max == minus_inf) return Traits::from_compute(p.log ? minus_inf : T(0));
      return Traits::from_compute(p.log ? v - s.max - log_sum : Prim::exp(v - s.max) * inv_sum);
    };
    for_each_single([&](int64_t c, S v) { out[c] = value(c, v); });
    for_each_vector([&](int64_t k, const Pack& pack) {
      Pack o;
#pragma unroll
      for (int e = 0; e < V; ++e) o.v[e] = value(head + k * V + e, pack.v[e]);
      ov[k] = o;
    });
  }
}

// Register-cached rows (see the top of the file). The kernel is written for few instructions per
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
        fetch(first + walk_step, next_query(query), advanced(cursor), raw);
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
        fetch(first + walk_step, next_query(query), advanced(cursor), raw);
      } else if constexpr (kPrefetch) {
        Raw next;
        fetch(first + walk_step, next_query(query), advanced(cursor), next);
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
    T max = minus_inf;  // NaN never wins (fmax), as in math::stats
#pragma unroll
    for (int k = 0; k < P::chunks; ++k)
      if (live(k))
#pragma unroll
        for (int e = 0; e < P::vec; ++e) max = fmax(max, v[k * P::vec + e]);
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

// The row's maximum and sum of exp from its blocks' own (rows::ClusterReducer::exchange): the
// maximum by a butterfly over lanes that hold a block's values each, then each block's sum
// rescaled to it (exp(block max - max), nothing from a block that saw only -inf) and added by a
// second butterfly. A row with nothing but -inf keeps max = -inf and sum = 0.
template <class Prim, class T>
struct MergeMaxSums {
  template <class Value>
  __device__ math::stats::MaxSum<T> operator()(unsigned blocks, Value value) const {
    const T minus_inf = math::stats::negative_infinity<T>();
    const math::stats::MaxSum<T> mine =
        rows::cluster_value_of_lane(blocks, value, math::stats::MaxSum<T>{minus_inf, T(0)});
    const T max = rows::lanes_reduce(mine.max, rows::Larger{}, rows::kMaxClusterBlocks);
    const T term =
        mine.max == minus_inf ? T(0) : mine.sum * RowExp<Prim, T>::between(mine.max, max);
    return {max, rows::lanes_reduce(term, rows::Plus{}, rows::kMaxClusterBlocks)};
  }
};

// Staged rows (core/ops/rows/staged.cuh): x is copied to shared memory; pass 1 takes the row's
// maximum, pass 2 its sum of exp, pass 3 writes (the same exact two-pass statistics as the
// register-cached kernel). In a cluster, passes 1 and 2 take the block's own maximum and sum,
// and one exchange combines them (MergeMaxSums): H200 A/B (2026-11-27 03:31Z, kf-bench, same
// call, two passes), % of copy at rows of 262144, f32 / f16 / bf16: 70.7 / 68.8 / 64.4 with an
// exchange for each, 72.9 / 70.4 / 67.0 with one. The mask, when present, is read from global
// memory in each pass: it is usually broadcast over rows, so it stays in L1/L2. Three blocks per
// SM: Nsight Compute on an H200 (2026-11-26) showed the clustered kernel of f32 rows of 262144 at
// two resident blocks (106 registers, and a 135 KiB shared-memory carveout), 3.8 warps per
// scheduler and 27 % of DRAM bandwidth; with this bound (80 registers, 8-40 bytes of spill) and the
// carveout raised (prepare_staged_kernel), those rows went from 34.8 to 41.0 % of copy (f32) and
// from 30 to 33 % (f16, bf16). Nsight Compute then (H200, 14:32Z) counted 82 instructions per f32
// element, issue-bound: the staging divided and found the row's offset per 16-byte vector (~90
// instructions each), and every pass tested the mask and the causal rule in 64 bits. The
// staging now finds a long row's source once, the passes count in 32 bits, and kMasked (a mask
// or the causal rule applies) is a separate instantiation: ~32 instructions per element, and
// rows of 262144 went from 42 / 37 / 35 to 56 / 63 / 62 % of copy (H200, 14:37Z, same call).
// kInPass: whether the clustered form restages the next row inside the output pass
// (rows::for_each_tile; launch_staged picks it for 16-bit rows).
// kShifted: the form for dense rows without a mask whose x and out start equally far from a
// 16-byte boundary, row by row, but not on one, or whose length fills no whole 16-byte vectors
// (vocabulary rows of 30522 or 50257; launch_shifted), one row a tile. Each row's whole 16-byte
// vectors are staged from its first 16-byte boundary (rows::head_columns: slot c of a block's
// slice holds column head + first_col + c). The few columns before that boundary (the head,
// in the first block) and after the last whole vector (in the last block) are read from global
// memory, each by one thread, before the first pass and used after it, so that their loads are
// in flight during it. x is read once, where the streaming kernel's vector form reads it twice.
template <class S, bool kClustered, bool kMasked,
          bool kInPass = (kClustered && rows::StagedPolicy::restages_in_pass<S>()),
          bool kShifted = false>
__global__ void __launch_bounds__(rows::StagedPolicy::threads, 3)
    staged_kernel(const __grid_constant__ Plan p, const rows::Staging g) {
  cuda::wait_prior_grid();  // a dependent launch: nothing global is touched before this
  cuda::allow_next_grid();
  using T = math::compute_t<S>;
  using Traits = math::StorageTraits<S>;
  using Prim = typename math::PrimitivesFor<S>::type;
  namespace st = math::stats;
  constexpr int V = 16 / sizeof(S);
  using Vec = rows::Pack<S, V>;
  extern __shared__ __align__(16) unsigned char staged_bytes[];
  __shared__ T scratch[32];
  __shared__ rows::ClusterMailbox mailbox;  // the clustered form's maximum and sum of exp
  const rows::Walk& w = p.walk;
  const int64_t n = w.row_length;
  const T scale = static_cast<T>(p.scale), minus_inf = st::negative_infinity<T>();
  constexpr bool kFoldScale = std::is_same_v<Prim, math::HalfStorage> && !kMasked;
  const T scale_factor = RowExp<Prim, T>::factor(scale);  // (kFoldScale's exps)
  rows::ClusterReducer cluster(mailbox, kClustered);
  const int rank = rows::slice_rank(g);
  const int64_t first_col = rank * g.slice;
  const int64_t cols = n - first_col < g.slice ? n - first_col : g.slice;
  S* const staged = reinterpret_cast<S*>(staged_bytes);
  const int lane = threadIdx.x % g.group, slot = threadIdx.x / g.group;
  const int groups = blockDim.x / g.group;
  const int64_t tiles = (w.rows + g.rows_per_tile - 1) / g.rows_per_tile;
  static_assert(kClustered || !kInPass);
  static_assert(!(kShifted && kMasked));
  const auto rows_in = [&](int64_t tile) {
    const int64_t left = w.rows - tile * g.rows_per_tile;
    return static_cast<int>(left < g.rows_per_tile ? left : g.rows_per_tile);
  };
  const auto row_x = [&](int64_t row) {
    return static_cast<const S*>(p.x.data) + rows::row_offset_cold(w, p.x, row);
  };
  // kShifted: the staged columns of this block's slice of a row of `head` head columns.
  const auto staged_cols = [&](int head) {
    return rows::shifted_slice_columns(n, head, first_col, g.slice);
  };
  // Columns of this block's slice of `row` left visible by the causal rule, in whole vectors (the
  // whole slice without it): the hidden ones, about half of a causal row, are neither staged nor
  // read, and their outputs are written directly. Tiles of one row only (the clustered form's).
  const auto visible = [&](int64_t row) -> int {
    if (!(kMasked && p.causal) || g.rows_per_tile != 1) return static_cast<int>(cols);
    const int64_t seen = row % p.query_rows + p.diagonal + 1 - first_col;
    if (seen <= 0) return 0;
    const int64_t vectors = (seen + V - 1) / V * V;
    return static_cast<int>(vectors < cols ? vectors : cols);
  };
  const auto stage = [&](int64_t tile, int buffer) {
    const int64_t row0 = tile * g.rows_per_tile;
    if constexpr (kShifted) {
      const S* x = row_x(row0);
      const int head = rows::head_columns(x);
      rows::stage_row(staged + buffer * g.buffer_elems, staged_cols(head), x + head + first_col);
      return;
    }
    rows::stage_rows(staged + buffer * g.buffer_elems, g.slice, rows_in(tile), visible(row0) / V,
                     [&](int r) {
                       return static_cast<const S*>(p.x.data) +
                              rows::row_offset_cold(w, p.x, row0 + r) + first_col;
                     });
  };
  const auto compute = [&](int64_t tile, int buffer, int64_t next) {
    const int64_t row0 = tile * g.rows_per_tile;
    const int tile_rows = rows_in(tile);
    // Rolling, kInPass (rows::for_each_tile): the next row's vectors of this thread's slots,
    // staged as the output pass leaves each slot.
    S* const slots = staged + buffer * g.buffer_elems;
    const S* next_x = nullptr;
    int next_seen = 0;
    if (kInPass && next >= 0) {
      next_x = row_x(next);
      const int head = kShifted ? rows::head_columns(next_x) : 0;
      next_x += head + first_col;
      next_seen = kShifted ? staged_cols(head) : visible(next);
    }
    const auto restage = [&](int c) {
      if constexpr (kShifted) {
        if (kInPass) rows::stage_vector(slots, next_x, c, next_seen);  // next_seen 0: none
      } else if (kInPass && c < next_seen) {
        async_copy::copy16(slots + c, next_x + c);
      }
    };
    for (int base = 0; base < tile_rows; base += groups) {
      // Lanes past the tile's rows still take part in their group's shuffles.
      const int r = base + slot;
      const int length = r < tile_rows ? static_cast<int>(cols) : 0;  // cols <= a slice
      const int64_t row = row0 + (r < tile_rows ? r : 0);
      int seen = length < visible(row) ? length : visible(row);  // the staged columns
      const S* x_row = staged + buffer * g.buffer_elems + (r < tile_rows ? r : 0) * g.slice;
      // kShifted: `seen` is the staged columns in whole vectors. This thread's columns of the
      // partial vector after them (`part`, for the thread that would stage it, else 0) and of the
      // head (`head_here`, for one thread of the first block, else 0) have their logits in
      // part_v and head_v, loaded from global memory.
      const S* x_start = nullptr;
      int head = 0, part = 0, head_here = 0;
      T part_v[V], head_v[V];
      if constexpr (kShifted) {
        x_start = row_x(row);
        head = rows::head_columns(x_start);
        const int staged_here = staged_cols(head);
        seen = staged_here / V * V;
        if (lane == (seen / V) % g.group) part = staged_here - seen;
        if (rank == 0 && lane == g.group - 1) head_here = head;
        if (part > 0 || head_here > 0) {  // one or two threads of the row (for_each_unstaged)
#pragma unroll
          for (int e = 0; e < V; ++e) {
            if (e < part)
              part_v[e] = scale * Traits::to_compute(x_start[head + first_col + seen + e]);
            if (e < head_here) head_v[e] = scale * Traits::to_compute(x_start[e]);
          }
        }
      }
      // Calls fn(at, logit) for each of this thread's columns of the partial vector and the
      // head, `at` its offset from the slice's first staged column.
      const auto for_each_extra = [&](auto&& fn) {
        if constexpr (kShifted)
          rows::for_each_unstaged(seen, part, part_v, head, head_here, head_v, fn);
      };
      const S* mask = kMasked && p.mask.data ? static_cast<const S*>(p.mask.data) +
                                                   rows::row_offset_cold(w, p.mask, row) + first_col
                                             : nullptr;
      const int64_t query = kMasked ? row % p.query_rows : 0;
      // The logits of one vector: scale * x + mask, -inf where the causal mask hides them.
      const auto logits = [&](int c, T(&v)[V]) {
        const Vec xv = *reinterpret_cast<const Vec*>(x_row + c);
        Vec mv;
        if (kMasked && mask) mv = *reinterpret_cast<const Vec*>(mask + c);
#pragma unroll
        for (int e = 0; e < V; ++e) {
          v[e] = scale * Traits::to_compute(xv.v[e]);
          if (kMasked && mask) v[e] += Traits::to_compute(mv.v[e]);
          if (kMasked && p.causal && st::causal_hidden(query, first_col + c + e, p.diagonal))
            v[e] = minus_inf;
        }
      };
      T max = minus_inf;
      for (int c = lane * V; c < seen; c += g.group * V) {
        T v[V];
        logits(c, v);
#pragma unroll
        for (int e = 0; e < V; ++e) max = v[e] > max ? v[e] : max;
      }
      for_each_extra([&](int, T v) { max = v > max ? v : max; });
      max = rows::group_reduce<rows::StagedPolicy::threads>(max, rows::Larger{}, g.group, scratch);
      // Calls fn(e, exp of element e's logit about a maximum (`about`)) for one vector. 16-bit
      // rows without a mask take them from x itself, the scale folded into the exponent's FFMA
      // (RowExp::of_scaled).
      const auto for_each_exp = [&](int c, const RowExp<Prim, T>& about, auto&& fn) {
        if constexpr (kFoldScale) {
          const Vec xv = *reinterpret_cast<const Vec*>(x_row + c);
#pragma unroll
          for (int e = 0; e < V; ++e)
            fn(e, about.of_scaled(Traits::to_compute(xv.v[e]), scale_factor));
        } else {
          T v[V];
          logits(c, v);
#pragma unroll
          for (int e = 0; e < V; ++e) fn(e, about(v[e]));  // exp(-inf) = 0
        }
      };
      T sum = 0;
      if (max != minus_inf) {
        const RowExp<Prim, T> about(max);
        for (int c = lane * V; c < seen; c += g.group * V)
          for_each_exp(c, about, [&](int, T y) { sum += y; });
        for_each_extra([&](int, T v) { sum += about(v); });
      }
      sum = rows::group_reduce<rows::StagedPolicy::threads>(sum, rows::Plus{}, g.group, scratch);
      if constexpr (kClustered) {
        // One exchange a row: each block's maximum and its sum of exp relative to it.
        const st::MaxSum<T> merged =
            cluster.exchange(st::MaxSum<T>{max, sum}, MergeMaxSums<Prim, T>{});
        max = merged.max;
        sum = merged.sum;
      }
      S* out =
          static_cast<S*>(p.out.data) + rows::row_offset_cold(w, p.out, row) + head + first_col;
      // kShifted: stores value(logit) for this thread's columns of the partial vector and the
      // head (rank 0, whose `out` is head columns past the row's start).
      const auto store_extras = [&](auto&& value) {
        for_each_extra([&](int at, T v) { out[at] = Traits::from_compute(value(v)); });
      };
      // Hidden columns (and every column of a fully masked row) give 0 (log-softmax: -inf).
      const auto write_hidden = [&](int from) {
        Vec yv;
#pragma unroll
        for (int e = 0; e < V; ++e) yv.v[e] = Traits::from_compute(p.log ? minus_inf : T(0));
        for (int c = from + lane * V; c < (kShifted ? seen : length); c += g.group * V)
          *reinterpret_cast<Vec*>(out + c) = yv;
      };
      int c = lane * V;        // the output pass's column: where restaging goes on after it
      if (max == minus_inf) {  // a fully masked row gives 0 (log-softmax: -inf), not NaN
        write_hidden(0);
        store_extras([&](T) { return p.log ? minus_inf : T(0); });
      } else if (p.log) {
        const RowExp<Prim, T> about(max);
        const T log_factor = about.log_factor(sum);
        for (; c < seen; c += g.group * V) {
          T v[V];
          logits(c, v);
          Vec yv;
#pragma unroll
          for (int e = 0; e < V; ++e)
            yv.v[e] = Traits::from_compute(about.log_softmax(v[e], log_factor));
          *reinterpret_cast<Vec*>(out + c) = yv;
          restage(c);
        }
        store_extras([&](T v) { return about.log_softmax(v, log_factor); });
        write_hidden(seen);
      } else {
        const T inv_sum = T(1) / sum;
        const RowExp<Prim, T> about(max);
        for (; c < seen; c += g.group * V) {
          Vec yv;
          for_each_exp(c, about, [&](int e, T y) { yv.v[e] = Traits::from_compute(y * inv_sum); });
          *reinterpret_cast<Vec*>(out + c) = yv;
          restage(c);
        }
        store_extras([&](T v) { return about(v) * inv_sum; });
        write_hidden(seen);
      }
      if (kInPass)
        for (; c < next_seen; c += g.group * V) restage(c);  // slots the output pass left alone
    }
  };
  rows::for_each_tile<kInPass>(g, tiles, stage, compute);
  if constexpr (kClustered) cluster.done();
}

// ---- grid-group rows (rows::GridGroups): softmax rows past the clusters, without a mask -------
//
// The norms' grid-group form (norm/cuda_grid.cuh, grid_norm_kernel) for the softmax and log-softmax
// without a mask or the causal rule: each row over a group of 512-thread blocks of a cooperative
// grid, two an SM, each block owning GridPolicy::vectors * threads 16-byte vectors of every row
// of its group. A block stages row i + 2 into a ring of three shared-memory slots, publishes row
// i's (maximum, sum of exp about it) as two tagged words, and writes row i - 1 once the group's
// pairs of that row are in; every block of the group merges them in the same order (the same
// bits everywhere). The thread's values are folded as (maximum, sum) pairs (merge_max_sum), so
// the block needs one reduction a row, as in bench/probes/grid_rows.cu (f32 rows of 262144 at
// 78-80 % of copy there, in 256-thread blocks of 32 KiB shares). Taken only for the rows the
// clusters do not hold: against the clustered kernel (kf-bench, H200 2026-11-30 10:00Z-10:04Z, the
// kernel taken for every row of 256 KiB and more, two passes each, % of copy) it lost at every
// length they hold, f32 rows of 65536 / 131072 / 262144 77.3-77.5 / 77.2 / 72.9-73.1 -> 61.3-61.4
// / 58.3-58.5 / 57.4-58.1, f16 / bf16 rows of 262144 70.1 / 67.4 -> 57.6-57.7 / 57.5-57.8 and of
// 524288 62.7-63.1 / 60.4-60.7 -> 57.1 / 57.0-57.1; where they do not (f32 rows of 524288, which
// fell to the streaming kernel) it took 19.7 -> 54.1-54.5. Why this form runs so far below the
// probe's was not found.
// Since 2026-12-04 each warp takes its maximum first and every exp about it once, so that its
// sums meet in a butterfly of adds (the pairs' butterfly took two exps a step), and the output
// pass's form (a row of -inf, log-softmax, softmax) is chosen once a row: Nsight Compute (H200,
// 2026-12-03 23:52Z, f16 rows of 262144, the kernel forced onto them) had counted 65.4 M warp
// instructions, about 31 a value, each value's exp in a branch region of its own (BSSY, BRA,
// BSYNC and predicated arithmetic). H200 A/B (2026-12-04 00:24Z-00:32Z, kf-bench, same call),
// % of copy, the kernel forced onto every row: f32 rows of 65536 / 131072 / 262144 61.1 /
// 58.5-58.8 / 57.8-58.1 -> 71.3 / 68.8 / 66.8, f16 61.6-61.8 / 61.5-61.6 / 57.8-58.3 -> 71.8 /
// 70.6 / 67.6, bf16 61.5-61.6 / 61.1 / 57.6-58.1 -> 71.8 / 70.7 / 67.7; still under the
// clusters there (f32 77.3 / 74.0-77.2 / 72.8-73.3), so they keep those rows. The rows it takes,
// f32 rows of 524288: 54.0-54.2 -> 57.2.
using rows::GridPolicy;

// (m, s) <- the pair of (m, s) and (om, os), each a maximum and a sum of exp about it: the larger
// maximum, each sum rescaled to it (nothing from a side that saw only -inf). Commutative to the
// bit (max and a sum of two terms), so a butterfly leaves the same bits in every lane.
template <class Prim, class T>
__device__ __forceinline__ void merge_max_sum(T& m, T& s, T om, T os) {
  const T minus_inf = math::stats::negative_infinity<T>();
  const T mx = m > om ? m : om;
  if (mx == minus_inf) return;  // both sides empty: (-inf, 0)
  const T a = m == minus_inf ? T(0) : s * RowExp<Prim, T>::between(m, mx);
  const T b = om == minus_inf ? T(0) : os * RowExp<Prim, T>::between(om, mx);
  s = a + b;
  m = mx;
}

template <class S>
__global__ void __launch_bounds__(GridPolicy::threads, 2)
    grid_softmax_kernel(const __grid_constant__ Plan p, const rows::GridGroups q) {
  cuda::wait_prior_grid();  // a dependent launch: nothing global is touched before this
  cuda::allow_next_grid();
  using G = GridPolicy;
  using T = math::compute_t<S>;
  using Traits = math::StorageTraits<S>;
  using Prim = typename math::PrimitivesFor<S>::type;
  namespace st = math::stats;
  constexpr int V = 16 / sizeof(S);
  constexpr int kWarps = G::threads / 32;
  using Vec = rows::Pack<S, V>;
  static_assert(sizeof(Vec) == sizeof(uint4), "a vector is 16 bytes");
  extern __shared__ __align__(16) unsigned char grid_bytes[];
  __shared__ T warp_max[2][kWarps], warp_sum[2][kWarps];
  __shared__ T row_max[2], row_factor[2];  // the maximum; 1 / sum (log-softmax: RowExp::log_factor)
  const int group = static_cast<int>(blockIdx.x) / q.blocks;
  const int rank = static_cast<int>(blockIdx.x) % q.blocks;
  if (group >= q.groups) return;
  const rows::Walk& w = p.walk;
  const int t = static_cast<int>(threadIdx.x), lane = t % 32, warp = t / 32;
  const rows::GridRing<S, Vec> ring{reinterpret_cast<Vec*>(grid_bytes), t};
  const int64_t my_rows = (w.rows - group + q.groups - 1) / q.groups;
  const int64_t first = int64_t{rank} * G::vectors * G::threads * V;  // the block's first column
  const T scale = static_cast<T>(p.scale), minus_inf = st::negative_infinity<T>();
  const T scale_factor = RowExp<Prim, T>::factor(scale);  // (RowExp::of_scaled)
  const auto row_of = [&](int64_t i) { return group + i * q.groups; };
  const auto x_row = [&](int64_t i) {  // the block's share of row i
    return static_cast<const S*>(p.x.data) + rows::row_offset_cold(w, p.x, row_of(i)) + first;
  };
  const auto stage = [&](int64_t i) { ring.stage(i, x_row(i)); };
  // Two words a block a row: [row][maximum, sum][block].
  const auto words_of = [&](int64_t i) { return q.words + row_of(i) * 2 * q.blocks; };
  constexpr bool kPairs = std::is_same_v<S, math::bfloat16_t>;  // as grid_norm_kernel
  const auto widen = [&](const Vec& v, T(&f)[V]) {
    if constexpr (kPairs) {
      rows::widen_bf16_pairs(v, f);
    } else {
#pragma unroll
      for (int e = 0; e < V; ++e) f[e] = Traits::to_compute(v.v[e]);
    }
  };
#pragma unroll
  for (int i = 0; i < G::ahead; ++i) {
    if (i < my_rows) stage(i);
    async_copy::commit();
  }
  rows::PublishedRow<> maxes, sums;
  for (int64_t i = 0; i <= my_rows; ++i) {
    const int64_t j = i - 1;  // the row written this iteration, once the group's pairs are in
    // The first warp's loads of row j's words are in flight while the block reduces row i.
    if (j >= 0 && warp == 0) {
      maxes.fetch(words_of(j), q.blocks);
      sums.fetch(words_of(j) + q.blocks, q.blocks);
    }
    if (i < my_rows) {                   // row i: this block's (maximum, sum of exp), published
      async_copy::wait<G::ahead - 1>();  // this thread's copies of row i have landed
      const Vec* s = ring.slot(i);
      T x[G::vectors][V];  // the values; their logits are x scale
      T m = minus_inf;
#pragma unroll
      for (int k = 0; k < G::vectors; ++k) {
        widen(s[k * G::threads + t], x[k]);
#pragma unroll
        for (int e = 0; e < V; ++e) m = fmaxf(m, x[k][e] * scale);  // NaN never wins
      }
      // The warp's maximum first, so that each exp is taken about it once, and the warp's sums
      // meet in one butterfly of adds (no rescaling exps in the butterfly).
      m = rows::lanes_reduce(
          m, [](T a, T b) { return fmaxf(a, b); }, 32);
      T sum = 0;
      if (m != minus_inf) {  // the same in every lane
        const RowExp<Prim, T> about(m);
#pragma unroll
        for (int k = 0; k < G::vectors; ++k)
#pragma unroll
          for (int e = 0; e < V; ++e) sum += about.of_scaled(x[k][e], scale_factor);
      }
      sum = rows::lanes_reduce(sum, rows::Plus{}, 32);
      if (lane == 0) {
        warp_max[i & 1][warp] = m;
        warp_sum[i & 1][warp] = sum;
      }
      __syncthreads();
      if (warp == 1) {
        m = warp_max[i & 1][lane % kWarps];
        sum = warp_sum[i & 1][lane % kWarps];
#pragma unroll
        for (int o = kWarps / 2; o > 0; o >>= 1)
          merge_max_sum<Prim>(m, sum, rows::shuffle_xor(m, o), rows::shuffle_xor(sum, o));
        if (lane == 0) {
          rows::publish(words_of(i) + rank, m, q.tag);
          rows::publish(words_of(i) + q.blocks + rank, sum, q.tag);
        }
      }
    }
    if (j >= 0) {
      if (warp == 0) {
        maxes.wait(words_of(j), q.blocks, q.tag);
        sums.wait(words_of(j) + q.blocks, q.blocks, q.tag);
        T m = minus_inf, sum = 0;
#pragma unroll
        for (int k = 0; k < rows::kLanesWords; ++k)
          if (lane + 32 * k < q.blocks) merge_max_sum<Prim>(m, sum, maxes.value(k), sums.value(k));
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
          merge_max_sum<Prim>(m, sum, rows::shuffle_xor(m, o), rows::shuffle_xor(sum, o));
        if (lane == 0) {
          row_max[j & 1] = m;
          row_factor[j & 1] = p.log ? RowExp<Prim, T>(m).log_factor(sum) : T(1) / sum;
        }
      }
      __syncthreads();
      const T m = row_max[j & 1], factor = row_factor[j & 1];
      Vec* s = ring.slot(j);
      S* out = static_cast<S*>(p.out.data) + rows::row_offset_cold(w, p.out, row_of(j)) + first;
      const bool restage = i + G::ahead < my_rows;  // row i + 2 takes row j's slot
      const S* next = restage ? x_row(i + G::ahead) : nullptr;
      // The output pass, its form chosen once a row (the same in every thread): a row of nothing
      // but -inf gives 0 (log-softmax: -inf), not NaN; otherwise y = exp(x scale - m) / sum, or
      // x scale - m - log sum (RowExp::log_softmax_scaled, the scaled logit in a multiply-add).
      const RowExp<Prim, T> about(m);
      const auto output_pass = [&](auto form) {
        constexpr int kForm = decltype(form)::value;  // 0: empty row, 1: log-softmax, 2: softmax
#pragma unroll
        for (int k = 0; k < G::vectors; ++k) {
          const Vec xv = s[k * G::threads + t];
          T y[V];
          widen(xv, y);  // the scale is applied below
#pragma unroll
          for (int e = 0; e < V; ++e) {
            if constexpr (kForm == 0)
              y[e] = p.log ? minus_inf : T(0);
            else if constexpr (kForm == 1)
              y[e] = about.log_softmax_scaled(y[e], scale, factor);
            else
              y[e] = about.of_scaled(y[e], scale_factor) * factor;
          }
          uint4 bits;
          if constexpr (kPairs) {
            bits = bf16::narrow_pairs(y);
          } else {
            Vec yv;
#pragma unroll
            for (int e = 0; e < V; ++e) yv.v[e] = Traits::from_compute(y[e]);
            memcpy(&bits, &yv, sizeof bits);
          }
          ring.write(s, k, out, bits, restage, next, xv);
        }
      };
      if (m == minus_inf)
        output_pass(std::integral_constant<int, 0>{});
      else if (p.log)
        output_pass(std::integral_constant<int, 1>{});
      else
        output_pass(std::integral_constant<int, 2>{});
    } else if (i + G::ahead < my_rows) {
      stage(i + G::ahead);
    }
    async_copy::commit();
  }
}

// grid_softmax_kernel for rows without a mask or the causal rule, on the terms of the norms'
// grid-group rows (norm/cuda_grid.cuh, launch_grid_rows; up to 32 * rows::kLanesWords blocks a
// row). False where it does not take them.
template <class S>
bool launch_grid_rows(const Plan& p, int32_t device, cudaStream_t stream) {
  using G = GridPolicy;
  if (p.mask.data || p.causal || !p.dense) return false;
  const int64_t blocks =
      rows::grid_blocks_a_row(p.walk.row_length, sizeof(S), 32 * rows::kLanesWords);
  return rows::launch_grid_groups<&grid_softmax_kernel<S>, G::threads, G::smem>(
      p, blocks, 2, device, stream, "softmax kernel launch");
}

// Runs the staged kernel when the rows fit it (16-bit and 32-bit types); false otherwise.
template <class S>
bool launch_staged(const Plan& p, int32_t device, cudaStream_t stream) {
  if constexpr (sizeof(S) > 4) {
    return false;
  } else {
    if (p.walk.rows >= rows::kMaxColdRows) return false;  // row offsets in 32 bits (rows.hpp)
    // Only rows past 64 KiB are staged (the cluster path: 5..7x over streaming on an H200,
    // 2026-11-26): for shorter rows the register-cached kernel was faster in the same run at
    // every length measured (f32 and bf16, 64..16384: by 15..55 %).
    // Rows the register-cached kernel holds (16384 elements: 64 KiB of f32, 32 KiB of 16-bit
    // data) are not staged; 16-bit rows of 16385..32768 are, one block a row in one
    // rolling buffer (rows::StagedPolicy::rolling_row_bytes; they fell to the
    // streaming kernel before: H200 sweep, 2026-11-29 21:58Z, bf16 rows of 20000 at 12.7 % of
    // copy).
    if (p.walk.row_length <= rows::kMaxTileRow) return false;
    if (p.mask.data || p.causal)
      return rows::stage_and_launch<staged_kernel<S, false, true>, staged_kernel<S, true, true>>(
          p, p.walk, sizeof(S), 1, device, stream, "softmax kernel launch");
    // 16-bit rows without a mask restage the next row inside the output pass where the SMs are
    // not rows::tile_issue_lean. H100 A/B (2026-11-27 17:00Z, kf-bench, same call, three
    // passes), rows of 262144, % of copy, after the pass -> in it: f16 82.6 / 80.3 / 82.5 ->
    // 84.0 / 81.3 / 83.5, bf16 82.1 / 79.6 / 81.5 -> 83.8 / 80.6 / 83.4 (the H200 keeps the
    // order it was measured with; the masked form was not timed).
    // Rows longer than the clusters hold (f32 rows of 524288, 16-bit rows of 1048576) take the
    // grid-group kernel instead of the streaming one; the rows the clusters hold stay with them
    // (see grid_softmax_kernel for why).
    if constexpr (sizeof(S) == 2) {
      if (!rows::tile_issue_lean(device))
        return rows::stage_and_launch<staged_kernel<S, false, false>,
                                      staged_kernel<S, true, false, true>>(
                   p, p.walk, sizeof(S), 1, device, stream, "softmax kernel launch") ||
               launch_grid_rows<S>(p, device, stream);
    }
    return rows::stage_and_launch<staged_kernel<S, false, false>, staged_kernel<S, true, false>>(
               p, p.walk, sizeof(S), 1, device, stream, "softmax kernel launch") ||
           launch_grid_rows<S>(p, device, stream);
  }
}

// Runs the shifted staged kernel (staged_kernel's kShifted) for rows the staged kernel takes
// but for their 16-byte vectors: dense rows longer than rows::kMaxTileRow without a mask or the
// causal rule, whose x and out launch has found in phase (rows::rows_in_phase), in the staged
// kernel's order (16-bit rows restage in the output pass where the SMs are not
// rows::tile_issue_lean); false otherwise. The rows are planned as rows of the length rounded up
// to whole vectors: a row staged from its first 16-byte boundary fills no more of them.
template <class S>
bool launch_shifted(const Plan& p, int32_t device, cudaStream_t stream) {
  if constexpr (sizeof(S) > 4) {
    return false;
  } else {
    if (p.mask.data || p.causal || p.walk.rows >= rows::kMaxColdRows) return false;
    if (p.walk.row_length <= rows::kMaxTileRow) return false;
    constexpr int64_t V = 16 / sizeof(S);
    rows::Walk whole = p.walk;
    whole.row_length = (whole.row_length + V - 1) / V * V;
    constexpr bool kInPass = rows::StagedPolicy::restages_in_pass<S>();
    if constexpr (sizeof(S) == 2) {
      if (!rows::tile_issue_lean(device))
        return rows::stage_and_launch<staged_kernel<S, false, false, false, true>,
                                      staged_kernel<S, true, false, true, true>>(
            p, whole, sizeof(S), 1, device, stream, "softmax kernel launch");
    }
    return rows::stage_and_launch<staged_kernel<S, false, false, false, true>,
                                  staged_kernel<S, true, false, kInPass, true>>(
        p, whole, sizeof(S), 1, device, stream, "softmax kernel launch");
  }
}

// The lean builds of the common form (rows::tile_lean_blocks, as the norms': the 16-bit rows of
// 4097..8192 at two blocks an SM, measured within 0.3 of one, as their kernels fit two already).
// The four-block build: the rows of up to 512 took 80 registers (three blocks) and take 64 for
// four; the block a row of 2049..4096 already took 64. H200 A/B (2026-11-29 09:12Z, kf-bench, one
// library with both builds, same call, two passes), f32, % of copy, three blocks -> four: rows of
// 64 92.2 / 92.3 -> 92.9 / 93.1, of 256 92.4 / 92.2 -> 93.8 / 93.8, of 4096 93.2 / 93.2 -> 93.4
// / 93.6 (rows of 1024, another policy: 93.7 / 93.6 -> 93.7 / 93.7).
//
// The common form's kernels, for rows::launch_common_tile_kernel (kBlocks: the resident blocks
// an SM it is compiled for, 0 for rows::tile_min_blocks).
template <class P, class S, int kBlocks = 0>
struct CommonCached {
  template <bool kStage>
  static constexpr auto kernel = cached_kernel<P, S, false, kStage, kBlocks>;
};

template <class S, int V>
bool launch_cached(const Plan& p, int32_t device, cudaStream_t stream) {
  if (p.walk.rows >= rows::kMaxColdRows) return false;  // row offsets in 32 bits (rows.hpp)
  // f32 rows of 10241..12288 without a mask keep the 512-thread policy at 32 elements a thread,
  // where the other row kernels take 24 (rows::with_tile_policy). H200 A/B
  // (2026-11-29 20:49Z, kf-bench, HEAD's library against the one with the 24-element policy,
  // same call, two passes), f32 softmax, % of copy, rows of 8200 / 10240 / 12288: 73.3 / 84.8 /
  // 86.4 -> 82.7 / 87.7 / 82.2 (82.5 / 87.8 / 81.8). Where between 10240 and 12288 the two
  // cross was not measured.
  if constexpr (std::is_same_v<S, float> && V == 4) {
    const int64_t n = p.walk.row_length;
    if (!p.mask.data && n > 512 * 20 && n <= 512 * 24) {
      using P = rows::TilePolicy<512, 8, V, 512>;
      rows::launch_common_tile_kernel<P, S, CommonCached<P, S>>(p, p.walk.rows, device, stream);
      return true;
    }
  }
  // f32 rows of 4609..5120 of 16-byte vectors without a mask, where the SMs are
  // rows::tile_issue_lean: 320 threads at 16 elements a thread, three blocks an SM, instead of
  // with_tile_policy's 256 at 24, two blocks an SM. H200 A/B (2026-12-04 14:12Z, kf-bench, one
  // library choosing the policy by an environment variable, same call, two passes), % of copy,
  // rows of 4104 / 4608 / 5000 / 5120: softmax 86.4 / 87.8 / 84.3 / 83.4 -> 82.9 / 87.8 / 88.7 /
  // 90.6, log-softmax 86.0 / 87.9 / 85.8 / 83.5 -> 82.1 / 87.0 / 87.8 / 89.5; so rows up to 4608
  // keep 256 at 24. (The 16-bit rows lost with it: rows::with_tile_policy.) Not measured on an
  // H100.
  if constexpr (std::is_same_v<S, float> && V == 4) {
    const int64_t n = p.walk.row_length;
    if (!p.mask.data && n > 4608 && n <= 5120 && rows::tile_issue_lean(device)) {
      using P = rows::TilePolicy<320, 4, V, 320>;
      rows::launch_common_tile_kernel<P, S, CommonCached<P, S>>(p, p.walk.rows, device, stream);
      return true;
    }
  }
  // 16-bit rows of 33..64 of 16-byte vectors without a mask, where the SMs are
  // rows::tile_issue_lean: two lanes a row at 32 elements a lane instead of with_tile_policy's
  // four at 16. H200 A/B (2026-12-01 12:14Z-12:15Z, kf-bench `--filter softmax --lengths 64,1024`,
  // one library choosing the policy by an environment variable, same call, three passes), % of
  // copy, rows of 64, four lanes -> two: f16 88.1 / 87.8 / 87.6 -> 89.7 / 90.3 / 89.8, bf16 89.0 /
  // 87.7 / 89.8 -> 89.6 / 90.1 / 90.0; eight lanes at 8 elements lost (f16 78.6-78.9, bf16
  // 75.7-75.9); rows of 1024 and the f32 rows within 0.4 throughout. Not measured on an H100,
  // which keeps four lanes.
  if constexpr (sizeof(S) == 2 && V == 8) {
    const int64_t n = p.walk.row_length;
    if (!p.mask.data && n > 32 && n <= 64 && rows::tile_issue_lean(device)) {
      using P = rows::TilePolicy<2, 4, V, 256>;
      rows::launch_common_tile_kernel<P, S, CommonCached<P, S>>(p, p.walk.rows, device, stream);
      return true;
    }
  }
  const bool wide = p.mask.data == nullptr;
  // fill_2560 = wide: every softmax row of the wide form takes the 160-thread policy for 16-bit
  // rows of 2049..2560 (only the bf16 norms keep the 96-thread one; with_tile_policy).
  return rows::with_tile_policy<S, V, false>(p.walk.row_length, wide, wide, [&](auto policy) {
    using P = decltype(policy);
    if (p.mask.data) {
      // The 16-bit rows of 16-byte vectors that prefetch (rows::tile_prefetches) at up to 16
      // elements a thread are compiled for the blocks an SM that 72 registers a thread allow
      // (128-thread blocks: 7, 256: 3), where they would take 84-88 and lose a third of their
      // warps (no spills either way; narrower vectors would spill under that bound).
      constexpr int kMaskedBlocks = sizeof(S) == 2 && P::vec * sizeof(S) == 16 &&
                                            rows::tile_prefetches<P, S>() && P::items <= 16 &&
                                            P::threads <= 256
                                        ? 64 * 1024 / (72 * P::threads)
                                        : 0;
      rows::launch_tile_kernel<P, S, cached_kernel<P, S, true, true, kMaskedBlocks>>(
          p, p.walk.rows, device, stream, false);
    } else {
      // 16-bit rows of 16-byte vectors over 512 threads at 24 or 32 elements a thread (rows of
      // 8193..16384) where the device gains from staging (rows::tile_stages_rows): three rows
      // staged ahead in shared memory (96 KiB at 32 elements) in place of the next row's loads
      // held in registers. H200 A/B (2026-11-30 15:59Z-16:08Z, kf-bench, one library choosing
      // the depth by an environment variable, same call, two passes each), % of copy, f16 / bf16
      // rows of 12288: 79.3 / 79.1 -> 82.0 / 81.9 and 77.8 / 77.8 -> 79.8 / 79.5; of 16384: 84.1
      // / 83.8 -> 84.9 / 85.4 and 83.5 / 83.4 -> 84.1 / 83.9; of 8200: 61.1 / 61.1 -> 60.2 /
      // 60.1 and 58.5 / 58.5 -> 58.6 / 58.5. One row staged ahead moved them by -0.5 to +0.1,
      // two by +0.3 to +1.7. The 16-bit norms lost 2 to 9 points with three (RMS norm rows of
      // 16384 88.0 -> 79.1), as did the 128-thread wide form (16-bit softmax rows of 3000 and 4096
      // 87 -> 77), so they keep the prefetch in registers. The committed form (16:32Z, 4b32072's
      // library against this one, same call, two passes), f16 / bf16 rows of 16384 / 12288 /
      // 8200: 84.4 -> 85.2-85.4 / 79.6-79.7 -> 81.7-81.8 / 60.8-60.9 -> 59.8 and 83.3 -> 82.8-83.8
      // / 77.8-77.9 -> 78.8-78.9 / 58.3 -> 57.9-58.1.
      if constexpr (sizeof(S) == 2 && rows::tile_can_stage<P, S>() && P::threads == 512) {
        if (rows::tile_stages_rows(device)) {
          rows::launch_tile_kernel<P, S, cached_kernel<P, S, false, true, 0, 3>, 3>(p, p.walk.rows,
                                                                                    device, stream);
          return;
        }
      }
      if constexpr (rows::tile_lean_blocks<P, S>() > 0) {
        if (rows::tile_issue_lean(device)) {
          rows::launch_common_tile_kernel<P, S, CommonCached<P, S, rows::tile_lean_blocks<P, S>()>>(
              p, p.walk.rows, device, stream);
          return;
        }
      }
      rows::launch_common_tile_kernel<P, S, CommonCached<P, S>>(p, p.walk.rows, device, stream);
    }
  });
}

// launch_cached for rows::cached_launcher.
template <class S>
struct Cached {
  template <int V>
  static bool launch(const Plan& p, int32_t device, cudaStream_t stream) {
    return launch_cached<S, V>(p, device, stream);
  }
};

template <class S>
void launch(const Plan& p, int32_t device, cudaStream_t stream) {
  static_assert(StreamVectorPolicy<S>::threads == StreamPolicy<S, false>::threads &&
                StreamPolicy<S, true>::threads == StreamPolicy<S, false>::threads);
  const int bytes = rows::row_vector_bytes(p.walk, {&p.x, &p.mask, &p.out}, sizeof(S));
  // The streaming vector form where there is no mask and x's and out's rows are in phase, row by
  // row (rows whose phases differ would take it one element a load, slower than the dense
  // streaming kernel's unrolled loads).
  const bool vector_form = !p.mask.data && rows::rows_in_phase(p.walk, p.x, p.out, sizeof(S));
  rows::launch_in_order<S, Cached<S>>(
      p, bytes, vector_form, device, stream, &launch_staged<S>,
      [](auto s, int b) { return narrow_cached_launcher(s, b); },
      {&streaming_kernel<StreamPolicy<S, false>, S, false>,
       &streaming_vector_kernel<StreamVectorPolicy<S>, S>,
       &streaming_kernel<StreamPolicy<S, true>, S, true>, StreamPolicy<S, false>::threads},
      "softmax kernel launch", &launch_shifted<S>);
}

}  // namespace
}  // namespace kf::softmax
