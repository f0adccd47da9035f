// CUDA backend of the norm family, five regimes chosen per call:
//  - grid-group rows (core/ops/rows/grid_group.cuh) for the norms' rows of 64 KiB and more that
//    the register-cached kernel does not hold (16-bit rows from 64 KiB, f32 rows past 64 KiB;
//    the RMS norm's with a residual too), dense, 16-byte aligned and in whole 16-byte vectors,
//    on sm_90: each row over a group of blocks of a cooperative grid (32 KiB shares, or the
//    row's vectors dealt evenly where it is not whole shares), the sums exchanged through global
//    memory (launch_grid_rows);
//  - staged rows (core/ops/rows/staged.cuh) for f32/f16/bf16 rows that are dense, 16-byte
//    aligned and fill whole 16-byte vectors, where they measured faster (see launch_staged):
//    f32 rows of more than 16 KiB up to 32 KiB (up to 64 KiB with a residual) and 16-bit rows
//    past 16 KiB with a residual (past 32 KiB without), up to 64 KiB; rows past 64 KiB, which
//    take a thread-block cluster per row (sm_90) with the statistics combined through
//    distributed shared memory; x (and the residual) are read from DRAM once. Dense rows of
//    more than 16384 elements that do not fill whole vectors, but whose operands are in phase
//    row by row (vocabulary rows of 30522), are staged from each row's first 16-byte boundary
//    (launch_shifted), the head and tail columns read apart;
//  - other rows of up to 1024 elements: a few lanes or a warp per row, several rows per block;
//  - other rows of up to 16K elements (8K for f64): a block per row;
//    both hold the row in registers (core/ops/rows/tile.cuh), so h = x + residual is read from
//    DRAM once, in the widest loads of 16, 8 or 4 bytes that every row operand's row starts are
//    aligned to and the row's bytes fill (rows::row_vector_bytes), else one element a load;
//    16-bit rows run on a resident grid that issues the next row's loads before working on the
//    current row (rows::tile_prefetches);
//  - everything else (strided rows, longer rows out of phase): the streaming path, one
//    block per row over global memory (pass 1: h, residual_out, shifted sums; pass 2:
//    normalize, affine, activation), which reads x twice, one element a load. Each thread
//    touches the same columns in both passes, which keeps the exact in-place forms safe.
// In the staged and cached paths each element is loaded, and later stored, by one thread (staged:
// each row is in shared memory before any of its stores), and every load comes before any store, so
// out and residual_out may be x or residual exactly.
// The kernels and launches live in this header, which only the family's per-storage-type
// translation units include (cuda_f32.cu, cuda_f16.cu, cuda_bf16.cu, cuda_f64.cu, and for 16-bit
// rows narrower than 16-byte vectors cuda_f16_narrow.cu and cuda_bf16_narrow.cu): each
// instantiates them for one type (and width), so they compile in parallel; cuda.cu dispatches.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <type_traits>

#include "core/math/activation.hpp"
#include "core/math/numeric.hpp"
#include "core/math/row_stats.hpp"
#include "core/ops/async_copy.cuh"
#include "core/ops/norm/cuda_storage.hpp"
#include "core/ops/norm/norm.hpp"
#include "core/ops/rows/dispatch.cuh"
#include "core/ops/rows/grid_group.cuh"
#include "core/ops/rows/reduce.cuh"
#include "core/ops/rows/staged.cuh"
#include "core/ops/rows/tile.cuh"
#include "core/runtime/cuda/grid_dependency.cuh"
#include "core/runtime/error.hpp"

namespace kf::norm {
namespace {

// The streaming kernel's block, and the columns each thread loads before it works on any of them,
// so that enough loads are in flight per SM (one at a time left an H200 at 8-13 % of copy over
// 16-bit rows of 16400..32768, 2026-11-29). The most that keep four blocks an SM (64 registers)
// without spilling (ptxas, sm_90, nvcc 13): for dense rows eight columns, two of f64 (four
// spilled 8 bytes); for strided rows, whose column offsets take registers of their own, two, one
// of f64.
template <class S, bool kDense>
struct StreamPolicy {
  static constexpr int threads = 256;
  static constexpr int unroll = sizeof(S) == 8 ? (kDense ? 2 : 1) : (kDense ? 8 : 2);
};

template <class S, bool kDense = false>
__device__ __forceinline__ S load_raw(const rows::Walk& w, const rows::Operand& o, int64_t base,
                                      int64_t col) {
  return static_cast<const S*>(o.data)[base + rows::col_offset_as<kDense>(w, o, col)];
}

// h = x + residual rounded to the storage type, exactly as residual_out holds it, so the norm never
// depends on whether residual_out was asked for.
template <class S>
__device__ __forceinline__ math::compute_t<S> combine(const Plan& p, S x, S r) {
  using Traits = math::StorageTraits<S>;
  if (!p.residual.data) return Traits::to_compute(x);
  return Traits::to_compute(Traits::from_compute(Traits::to_compute(x) + Traits::to_compute(r)));
}

// The streaming kernels' row statistics from each thread's shifted sums (shift: the layer norm's,
// 0 for the RMS norm): the block's sums, then the center (layer norm; 0 otherwise) and 1 / the
// deviation, which thread 0 saves where the plan asks for them. Ends with a barrier.
template <class T>
__device__ __forceinline__ math::stats::LayerNormStats<T> row_statistics(const Plan& p, int64_t row,
                                                                         T shift, T sum_d, T sum_d2,
                                                                         T* scratch) {
  const rows::Walk& w = p.walk;
  const T n = static_cast<T>(w.row_length), eps = static_cast<T>(p.eps);
  sum_d = rows::block_sum(sum_d, scratch);
  sum_d2 = rows::block_sum(sum_d2, scratch);
  if (p.kind != Kind::layer) return {T(0), math::stats::rms_rstd<T>(sum_d2, n, eps)};
  const auto s = math::stats::layer_norm_stats<T>(sum_d, sum_d2, n, eps);
  if (threadIdx.x == 0 && p.mean.data)
    static_cast<T*>(p.mean.data)[rows::row_offset(w, p.mean, row)] = shift + s.center;
  if (threadIdx.x == 0 && p.rstd.data)
    static_cast<T*>(p.rstd.data)[rows::row_offset(w, p.rstd, row)] = s.rstd;
  return s;
}

// Whether the streaming kernels' shift (a row's first element) lies more than four deviations
// from the row's mean, by the statistics taken about it (0 center for the RMS norm: never). The
// variance is then sum_d2 / n - center^2 with center^2 above 16 of it, and its relative error,
// about (1 + (center * rstd)^2) of the sums' rounding, grows with the square of that distance.
// Rows of 20001 values in +-3 led by 250 (144 deviations of the others) had rstd up to 5.6e-4 off
// in f32 (H200, 2026-12-01, NormTest.FirstElementFarFromTheRest), and f64 rows past 8192 1.2e-12.
// Such rows are summed again about the mean just found (a third read of the row). The
// statistics are the same bits in every thread (row_statistics), so the whole block takes the
// same branch.
template <class T>
__device__ __forceinline__ bool shift_far_from_mean(const math::stats::LayerNormStats<T>& s) {
  const T c = s.center * s.rstd;
  return c * c > T(16);
}

// The streaming kernels' sums of the differences from `shift` (and of their squares) over a row's
// columns t, t + blockDim.x, ... for thread t, h taken as their output passes take it: from
// residual_out where it was written (x or residual may be out by now), else from x and the
// residual. The vector kernel's first pass gave its threads other columns; this is called after
// row_statistics' barriers, so every thread's residual_out columns are in, and before any output
// is stored (out may be x).
template <class S, bool kDense, class T>
__device__ __forceinline__ rows::Sums<T> streaming_sums_about(const Plan& p, int64_t row, T shift) {
  const rows::Walk& w = p.walk;
  const int64_t xb = rows::row_offset(w, p.x, row);
  const int64_t rb = p.residual.data ? rows::row_offset(w, p.residual, row) : 0;
  const int64_t hb = p.residual_out.data ? rows::row_offset(w, p.residual_out, row) : 0;
  rows::Sums<T> sums{0, 0};
  for (int64_t c = threadIdx.x; c < w.row_length; c += blockDim.x) {
    const T h =
        p.residual_out.data
            ? math::StorageTraits<S>::to_compute(load_raw<S, kDense>(w, p.residual_out, hb, c))
            : combine(p, load_raw<S, kDense>(w, p.x, xb, c),
                      p.residual.data ? load_raw<S, kDense>(w, p.residual, rb, c) : S{});
    const T d = h - shift;
    sums.d += d;
    sums.d2 += d * d;
  }
  return sums;
}

// The streaming kernel: a block per row, over global memory, reading x (and the residual) twice.
// Each thread loads Policy::unroll columns of the row before it works on any of them, every load
// unconditional (a column past the row's end loads the thread's first column of the step
// instead, and is left out where values combine), so that the loads are in flight together; a
// thread reads and stores only its own columns, which keeps the exact in-place forms safe.
// kDense: every row operand's rows are dense (Plan::dense).
template <class Policy, class S, bool kDense>
__global__ void __launch_bounds__(Policy::threads, 4)
    streaming_kernel(const __grid_constant__ Plan p) {
  cuda::wait_prior_grid();  // a dependent launch: nothing global is touched before this
  cuda::allow_next_grid();
  using T = math::compute_t<S>;
  using Traits = math::StorageTraits<S>;
  constexpr int U = Policy::unroll;
  constexpr int64_t kStep = int64_t{Policy::threads} * U;
  __shared__ T scratch[32];
  const rows::Walk& w = p.walk;
  const int64_t n = w.row_length;
  for (int64_t row = blockIdx.x; row < w.rows; row += gridDim.x) {
    const int64_t xb = rows::row_offset(w, p.x, row);
    const int64_t rb = p.residual.data ? rows::row_offset(w, p.residual, row) : 0;
    const int64_t hb = p.residual_out.data ? rows::row_offset(w, p.residual_out, row) : 0;
    // The shift: the row's first element (differences from it stay small for sane data; see
    // shift_far_from_mean for the rest).
    T shift = p.kind == Kind::layer
                  ? combine(p, load_raw<S, kDense>(w, p.x, xb, 0),
                            p.residual.data ? load_raw<S, kDense>(w, p.residual, rb, 0) : S{})
                  : T(0);
    // Column u of the step from c0: at a fixed offset from c0 where the step lies inside the row,
    // else clamped (the row's last step).
    auto column = [&](int64_t c0, int u, bool inside) {
      const int64_t c = c0 + u * Policy::threads;
      return inside || c < n ? c : c0;
    };
    T sum_d = 0, sum_d2 = 0;
    for (int64_t c0 = threadIdx.x; c0 < n; c0 += kStep) {
      S xs[U], rs[U] = {};
      const bool inside = c0 + (U - 1) * Policy::threads < n;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t c = column(c0, u, inside);
        xs[u] = load_raw<S, kDense>(w, p.x, xb, c);
        if (p.residual.data) rs[u] = load_raw<S, kDense>(w, p.residual, rb, c);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t c = c0 + u * Policy::threads;
        if (c >= n) break;
        const T h = combine(p, xs[u], rs[u]);
        if (p.residual_out.data)
          static_cast<S*>(
              p.residual_out.data)[hb + rows::col_offset_as<kDense>(w, p.residual_out, c)] =
              Traits::from_compute(h);
        const T d = h - shift;
        sum_d += d;
        sum_d2 += d * d;
      }
    }
    auto stats = row_statistics(p, row, shift, sum_d, sum_d2, scratch);
    if (shift_far_from_mean(stats)) {  // summed again about the mean
      shift += stats.center;
      const rows::Sums<T> sums = streaming_sums_about<S, kDense>(p, row, shift);
      stats = row_statistics(p, row, shift, sums.d, sums.d2, scratch);
    }
    const T center = stats.center, rstd = stats.rstd;
    const int64_t ob = rows::row_offset(w, p.out, row);
    for (int64_t c0 = threadIdx.x; c0 < n; c0 += kStep) {
      S hs[U], rs[U] = {}, ws[U] = {}, bs[U] = {};
      const bool inside = c0 + (U - 1) * Policy::threads < n;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t c = column(c0, u, inside);
        // h is re-read from residual_out when it was written (x or residual may be out by now).
        if (p.residual_out.data) {
          hs[u] = load_raw<S, kDense>(w, p.residual_out, hb, c);
        } else {
          hs[u] = load_raw<S, kDense>(w, p.x, xb, c);
          if (p.residual.data) rs[u] = load_raw<S, kDense>(w, p.residual, rb, c);
        }
        if (p.weight.data) ws[u] = load_raw<S, kDense>(w, p.weight, 0, c);
        if (p.bias.data) bs[u] = load_raw<S, kDense>(w, p.bias, 0, c);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t c = c0 + u * Policy::threads;
        if (c >= n) break;
        const T h = p.residual_out.data ? Traits::to_compute(hs[u]) : combine(p, hs[u], rs[u]);
        T y = (h - shift - center) * rstd;
        if (p.weight.data) y *= Traits::to_compute(ws[u]);
        if (p.bias.data) y += Traits::to_compute(bs[u]);
        static_cast<S*>(p.out.data)[ob + rows::col_offset_as<kDense>(w, p.out, c)] =
            Traits::from_compute(math::apply_activation(p.act, y));
      }
    }
  }
}

// The streaming kernel's form for dense rows whose row operands (x, residual, out, residual_out)
// start equally far from a 16-byte boundary, row by row (rows::rows_in_phase): the rows the
// register-cached and staged kernels do not take, longer than 16384 elements and not filling
// 16-byte vectors. Each row in 16-byte vectors from its first 16-byte boundary, the few columns
// before it and after the last whole vector one at a time; the weight and the bias in vectors
// too on the rows where they start in the row's phase, else an element a load (the same
// columns for every row: they stay in cache). Each thread loads `unroll` vectors before it works
// on any of them (the row's last step clamped to the thread's own vector), and reads and stores
// only its own columns, so the exact in-place forms stay safe.
// f32: two vectors a step. 16-bit rows take one: with two, the row operands' vectors spilled
// 96-154 bytes a thread at 64 registers and 16-88 at 80 (ptxas, sm_90); bf16's spilled 12 bytes
// with one at 64 registers, so it takes three blocks an SM. f64 one as well.
template <class S>
struct StreamVectorPolicy {
  static constexpr int threads = 256;
  static constexpr int vec = 16 / sizeof(S);
  static constexpr int unroll = sizeof(S) == 4 ? 2 : 1;
  static constexpr int min_blocks = std::is_same_v<S, math::bfloat16_t> ? 3 : 4;
};

template <class Policy, class S>
__global__ void __launch_bounds__(Policy::threads, Policy::min_blocks)
    streaming_vector_kernel(const __grid_constant__ Plan p) {
  cuda::wait_prior_grid();  // a dependent launch: nothing global is touched before this
  cuda::allow_next_grid();
  using T = math::compute_t<S>;
  using Traits = math::StorageTraits<S>;
  using Pack = rows::Pack<S, Policy::vec>;
  constexpr int V = Policy::vec, U = Policy::unroll;
  constexpr int64_t kStep = int64_t{Policy::threads} * U;
  __shared__ T scratch[32];
  const rows::Walk& w = p.walk;
  const int64_t n = w.row_length;
  const S* weight = static_cast<const S*>(p.weight.data);
  const S* bias = static_cast<const S*>(p.bias.data);
  for (int64_t row = blockIdx.x; row < w.rows; row += gridDim.x) {
    const S* x = static_cast<const S*>(p.x.data) + rows::row_offset(w, p.x, row);
    const S* res = p.residual.data ? static_cast<const S*>(p.residual.data) +
                                         rows::row_offset(w, p.residual, row)
                                   : nullptr;
    S* out = static_cast<S*>(p.out.data) + rows::row_offset(w, p.out, row);
    S* h_out = p.residual_out.data
                   ? static_cast<S*>(p.residual_out.data) + rows::row_offset(w, p.residual_out, row)
                   : nullptr;
    const uintptr_t xa = reinterpret_cast<uintptr_t>(x);
    // Columns [0, head) and [tail, n) one at a time; vector k at head + k * V.
    int64_t head = static_cast<int64_t>((16 - (xa & 15)) & 15) / int64_t{sizeof(S)};
    if (head > n) head = n;
    const int64_t vectors = (n - head) / V, tail = head + vectors * V;
    auto in_phase = [&](const S* t) {
      return !t || ((reinterpret_cast<uintptr_t>(t) ^ xa) & 15) == 0;
    };
    const bool affine_vectors = in_phase(weight) && in_phase(bias);
    auto h_of = [&](int64_t c) {  // h at column c, from x and the residual
      return combine(p, x[c], res ? res[c] : S{});
    };
    // The shift: the row's first element (differences from it stay small for sane data; see
    // shift_far_from_mean for the rest).
    T shift = p.kind == Kind::layer ? h_of(0) : T(0);
    T sum_d = 0, sum_d2 = 0;
    auto add = [&](T h) {
      const T d = h - shift;
      sum_d += d;
      sum_d2 += d * d;
    };
    // This thread's vectors of a step from k0 (the row's last step clamped to k0).
    auto vector_index = [&](int64_t k0, int u, bool inside) {
      const int64_t k = k0 + u * Policy::threads;
      return inside || k < vectors ? k : k0;
    };
    for (int64_t c = threadIdx.x; c < head; c += Policy::threads) {
      const T h = h_of(c);
      if (h_out) h_out[c] = Traits::from_compute(h);
      add(h);
    }
    for (int64_t c = tail + threadIdx.x; c < n; c += Policy::threads) {
      const T h = h_of(c);
      if (h_out) h_out[c] = Traits::from_compute(h);
      add(h);
    }
    for (int64_t k0 = threadIdx.x; k0 < vectors; k0 += kStep) {
      Pack xs[U], rs[U] = {};
      const bool inside = k0 + (U - 1) * Policy::threads < vectors;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t k = vector_index(k0, u, inside);
        xs[u] = reinterpret_cast<const Pack*>(x + head)[k];
        if (res) rs[u] = reinterpret_cast<const Pack*>(res + head)[k];
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t k = k0 + u * Policy::threads;
        if (k >= vectors) break;
        Pack hp;
#pragma unroll
        for (int e = 0; e < V; ++e) {
          const T h = combine(p, xs[u].v[e], rs[u].v[e]);
          hp.v[e] = Traits::from_compute(h);
          add(h);
        }
        if (h_out) reinterpret_cast<Pack*>(h_out + head)[k] = hp;
      }
    }
    auto stats = row_statistics(p, row, shift, sum_d, sum_d2, scratch);
    if (shift_far_from_mean(stats)) {  // summed again about the mean
      shift += stats.center;
      const rows::Sums<T> sums = streaming_sums_about<S, true>(p, row, shift);
      stats = row_statistics(p, row, shift, sums.d, sums.d2, scratch);
    }
    const T center = stats.center, rstd = stats.rstd;
    // The output of column c from h (and the weight's and the bias's elements there).
    auto output = [&](T h, S wv, S bv) {
      T y = (h - shift - center) * rstd;
      if (weight) y *= Traits::to_compute(wv);
      if (bias) y += Traits::to_compute(bv);
      return Traits::from_compute(math::apply_activation(p.act, y));
    };
    // h is re-read from residual_out when it was written (x or residual may be out by now).
    auto h_again = [&](int64_t c) { return h_out ? Traits::to_compute(h_out[c]) : h_of(c); };
    for (int64_t c = threadIdx.x; c < head; c += Policy::threads)
      out[c] = output(h_again(c), weight ? weight[c] : S{}, bias ? bias[c] : S{});
    for (int64_t c = tail + threadIdx.x; c < n; c += Policy::threads)
      out[c] = output(h_again(c), weight ? weight[c] : S{}, bias ? bias[c] : S{});
    for (int64_t k0 = threadIdx.x; k0 < vectors; k0 += kStep) {
      Pack hs[U], rs[U] = {}, ws[U] = {}, bs[U] = {};
      const bool inside = k0 + (U - 1) * Policy::threads < vectors;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t k = vector_index(k0, u, inside);
        if (h_out) {
          hs[u] = reinterpret_cast<const Pack*>(h_out + head)[k];
        } else {
          hs[u] = reinterpret_cast<const Pack*>(x + head)[k];
          if (res) rs[u] = reinterpret_cast<const Pack*>(res + head)[k];
        }
        if (affine_vectors) {
          if (weight) ws[u] = reinterpret_cast<const Pack*>(weight + head)[k];
          if (bias) bs[u] = reinterpret_cast<const Pack*>(bias + head)[k];
        } else {
#pragma unroll
          for (int e = 0; e < V; ++e) {
            if (weight) ws[u].v[e] = weight[head + k * V + e];
            if (bias) bs[u].v[e] = bias[head + k * V + e];
          }
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t k = k0 + u * Policy::threads;
        if (k >= vectors) break;
        Pack o;
#pragma unroll
        for (int e = 0; e < V; ++e) {
          const T h = h_out ? Traits::to_compute(hs[u].v[e]) : combine(p, hs[u].v[e], rs[u].v[e]);
          o.v[e] = output(h, ws[u].v[e], bs[u].v[e]);
        }
        reinterpret_cast<Pack*>(out + head)[k] = o;
      }
    }
  }
}

// The output loops take their activation from math::with_activation: none and ReLU get their
// own copy of the loop, the transcendental ones share one. 16-bit outputs use math::HalfStorage's
// fast primitives, as the elementwise kernels do.
using math::with_activation;

using rows::AddSums;
using rows::Sums;

// Register-cached rows (see the top of the file). The layer norm shift is the row mean, taken
// from the cached row first, so sum_d and sum_d2 are of exact small differences, as on the CPU.
// Written for few instructions per element (a 16-bit row has about 25 issue slots per element at
// H200 bandwidth, and the layer norm took 32 before kClamped below: Nsight Compute, bf16 rows of
// 16384, 2026-11-26): unpredicated loads, sums masked a chunk at a time, both sums of differences
// in one reduction, the statistics without divisions, one multiply-add for weight and bias, the
// activation chosen outside the output loop.
// kResidual: the form with a residual has its own instantiation, so the common form does not
// pay for the second row's registers.
// kStage = false: the form without the shared-memory staging below, for devices that lose with
// it (rows::tile_stages_rows).
// kBlocks: the resident blocks per SM it is compiled for (0: rows::tile_min_blocks; see
// residual_takes_three_blocks).
// kWordPairs: bf16 row, weight and bias widened a 32-bit word of two elements at a time
// (rows::widen_bf16_pairs; see LayerPairs).
// kAffinePairs: only the weight and bias so widened, the row element by element (see
// layer_takes_affine_pairs).
// kSharedAffine: the layer norm's weight and bias are copied into shared memory once a launch and
// read from there for every row (see LayerSharedAffine); the plan has both.
template <class P, class S, bool kResidual, bool kStage = true, int kBlocks = 0,
          bool kWordPairs = false, bool kAffinePairs = false, bool kSharedAffine = false>
__global__ void __launch_bounds__(P::threads, kBlocks > 0 ? kBlocks : rows::tile_min_blocks<P, S>())
    cached_kernel(const __grid_constant__ Plan p) {
  cuda::wait_prior_grid();  // a dependent launch: nothing global is touched before this
  cuda::allow_next_grid();
  using T = math::compute_t<S>;
  using Traits = math::StorageTraits<S>;
  using Prim = typename math::PrimitivesFor<S>::type;
  using Vec = rows::Pack<S, P::vec>;
  // The block reductions alternate between scratch arrays (rows::block_reduce's kReuse = false:
  // one barrier each instead of two): the layer norm's two a row take scratch[0] and
  // pair_scratch, the RMS norm's one takes scratch[0] and scratch[1] on alternate rows.
  __shared__ T scratch[2][32];
  __shared__ Sums<T> pair_scratch[32];
  unsigned parity = 0;
  const rows::Walk& w = p.walk;
  const int n = static_cast<int>(w.row_length);  // at most P::capacity (rows::tile_col)
  const T count = static_cast<T>(n), eps = static_cast<T>(p.eps);
  const int lane = threadIdx.x % P::group, slot = threadIdx.x / P::group;
  // With prefetching (rows::tile_prefetches: 16-bit rows) the grid is resident and the next
  // row's loads are issued before the current row is worked on.
  constexpr bool kPrefetch = rows::tile_prefetches<P, S>();
  struct Raw {
    rows::TileRaw<P, S> x, residual;
  };
  // Rows of 16-byte vectors in f32/f16/bf16 (kClamped) load every chunk (rows::tile_load_col:
  // past the row's end, its last vector again), so no load is predicated and no value is
  // padded, and take the per-row forms with fewer instructions below; the sums leave the chunks
  // past the end out. Scalar rows and f64, whose kernels sit at their register limit (that form
  // spilled there), load only their columns, pad with 0 and keep the element-wise forms.
  // H200, same call (2026-11-27 00:11Z, a row-op timer, two passes), GB/s change: layer norm
  // f16 / bf16 rows of 64, 1024, 4096, 16384 +15 .. +29 %, f32 -2 .. +5 %; RMS norm -3 .. +7 %.
  constexpr bool kClamped = P::vec > 1 && sizeof(T) == 4;
  // The block reductions see the block size fixed (rows::block_reduce), but for the form with a
  // residual: H200 A/B (2026-11-27 05:44Z, kf-bench, same call, two passes), % of copy, the f16
  // RMS norm with a residual over rows of 4096 went from 86.5 to 82.0 with it (bf16 86.3 / 86.1,
  // f32 89.4 / 89.6), while the common form gained: layer norm f16 / bf16 rows of 4096 75.1 /
  // 72.8 -> 79.2 / 77.5 and of 16384 75.0 / 67.7 -> 78.7 / 72.0, f32 rows of 4096 80.8 -> 82.3;
  // RMS norm f16 rows of 4096 84.3 -> 84.9, bf16 82.6 -> 83.8.
  constexpr int kReduceThreads = kResidual ? 0 : P::threads;
  // A row past the last loads nothing: its values feed only results that are dropped (its
  // group's sums, stores of length 0).
  auto fetch = [&](int64_t first, Raw& raw) {
    const int64_t row = first + slot;
    if (row >= w.rows) return;
    const auto fetch_row = [&](const rows::Operand& o, rows::TileRaw<P, S>& to) {
      const S* from = static_cast<const S*>(o.data) + rows::row_offset_cold(w, o, row);
      if constexpr (kClamped)
        rows::tile_fetch_clamped<P>(from, n, lane, to);
      else
        rows::tile_fetch<P>(from, n, lane, to);
    };
    fetch_row(p.x, raw.x);
    if constexpr (kResidual) fetch_row(p.residual, raw.residual);
  };
  constexpr bool kPairs = kWordPairs && !kResidual && rows::pairs_widen<P, S>();
  // kPackedSum: 16-bit rows of 16-byte vectors add the residual two elements an instruction and
  // store residual_out as summed (rows::packed_sum: the same bits as the element-wise sum
  // rounded to S, which input() and the staged kernel take). H100 A/B (2026-11-27 23:31Z,
  // kf-bench, same call, four passes), RMS norm with a residual over 8192 rows of 4096, % of
  // copy: bf16 86.9 / 87.1 / 86.9 / 86.9 -> 87.9 / 88.5 / 88.4 / 88.2, f16 90.2-90.5 ->
  // 90.0-90.4; the RMS norm's other rows within noise.
  constexpr bool kPackedSum =
      kResidual && kClamped && sizeof(S) == 2 && rows::packed_sum_available<S>();
  auto convert = [&](const rows::TileRaw<P, S>& from, int length, T(&to)[P::items]) {
    if constexpr (kClamped)
      rows::tile_convert<P, S, kPairs>(from, to);
    else
      rows::tile_unpack<P, S, kPairs>(from, length, lane, to, T(0));
  };
  // kClamped rows scale by 1 / n and take rsqrt (math::stats::*_scaled: no range checks or slow
  // paths in the per-row work); the others keep the divisions.
  const T inv_count = T(1) / count;
  const auto mean_of = [&](T total) { return kClamped ? total * inv_count : total / count; };
  // kShared (rows::tile_prefetches_shared: f32 rows of 32 elements a thread and the layer norm's
  // 16-bit rows of 40 or 48, without a residual): the next row is staged in shared memory while
  // this one is worked on.
  constexpr bool kShared = rows::tile_prefetches_shared<P, S>() && !kResidual && kStage;
  using Slot = rows::Pack<S, P::vec>;
  const auto stage = [&](int64_t first) {
    const int64_t row = first + slot;
    if constexpr (kShared) {
      if (row >= w.rows) return;
      Slot* const slots = rows::tile_slots<P, S>();
      rows::tile_stage<P, kClamped>(
          static_cast<const S*>(p.x.data) + rows::row_offset_cold(w, p.x, row), n, lane, slots);
    }
  };
  // kSharedAffine: past the staged row (kShared), chunks * threads slots of the weight's vectors
  // and as many of the bias's, thread t's chunk k at k * threads + t: the columns its output pass
  // reads (tile_load_col, the same for every row). Each thread reads back only the slots it
  // copied, so no barrier is needed. The copies join the first staged row's group (kShared) or
  // commit a group of their own, waited for before the first row's output pass.
  static_assert(!kSharedAffine ||
                    (kClamped && !kResidual && P::group == P::threads && P::vec * sizeof(S) == 16),
                "the shared affine is for rows of 16-byte vectors over a block");
  [[maybe_unused]] Slot* const affine = rows::tile_slots<P, S>(kShared ? 1 : 0);
  if constexpr (kSharedAffine) {
    const S* weight = static_cast<const S*>(p.weight.data);
    const S* bias = static_cast<const S*>(p.bias.data);
#pragma unroll
    for (int k = 0; k < P::chunks; ++k) {
      const int c = rows::tile_load_col<P>(lane, k, n);
      async_copy::copy16(affine + k * P::threads + threadIdx.x, weight + c);
      async_copy::copy16(affine + (P::chunks + k) * P::threads + threadIdx.x, bias + c);
    }
    if constexpr (!kShared) async_copy::commit();
  }
  Raw raw;
  if constexpr (kPrefetch) fetch(int64_t{blockIdx.x} * P::rows_per_block, raw);
  if constexpr (kShared) {
    stage(int64_t{blockIdx.x} * P::rows_per_block);
    async_copy::commit();
  }
  for (int64_t first = int64_t{blockIdx.x} * P::rows_per_block; first < w.rows;
       first += int64_t{gridDim.x} * P::rows_per_block) {
    const int64_t row = first + slot;
    const int length = row < w.rows ? n : 0;  // rows past the end store nothing
    const int64_t r = row < w.rows ? row : 0;
    // Whether chunk k is inside the row.
    const auto inside = [&](int k) { return rows::tile_col<P>(lane, k) < length; };
    T h[P::items];
    T add[kResidual && !kPackedSum ? P::items : 1];
    // kPackedSum: h = x + residual, in S.
    std::conditional_t<kPackedSum, rows::TileWords<P, S>, char> summed;
    // h (and add) from a fetched row: x and the residual widened, or their packed sum.
    const auto take = [&](const Raw& from) {
      if constexpr (kPackedSum) {
        rows::tile_sum_words(from.x, from.residual, summed);
        rows::tile_convert<P, S>(summed, h);
      } else {
        convert(from.x, length, h);
        if constexpr (kResidual) convert(from.residual, length, add);
      }
    };
    if constexpr (kPrefetch) {
      Raw next;
      fetch(first + int64_t{gridDim.x} * P::rows_per_block, next);
      take(raw);
      raw = next;
    } else if constexpr (kShared) {
      async_copy::wait<0>();  // this thread's copies of the row have landed
      const Slot* const slots = rows::tile_slots<P, S>();
      Raw now;
      if (row < w.rows) rows::tile_read_staged<P, kClamped>(slots, n, lane, now.x);
      stage(first + int64_t{gridDim.x} * P::rows_per_block);  // into the slots just read
      async_copy::commit();
      convert(now.x, length, h);
    } else if constexpr (kClamped) {
      Raw now;
      fetch(first, now);
      take(now);
    } else {
      rows::tile_load<P>(static_cast<const S*>(p.x.data) + rows::row_offset_cold(w, p.x, r), length,
                         lane, h, T(0));
      if constexpr (kResidual)
        rows::tile_load<P>(
            static_cast<const S*>(p.residual.data) + rows::row_offset_cold(w, p.residual, r),
            length, lane, add, T(0));
    }
    if constexpr (kPackedSum) {
      if (p.residual_out.data)
        rows::tile_store_words<P>(
            static_cast<S*>(p.residual_out.data) + rows::row_offset_cold(w, p.residual_out, r),
            length, lane, summed);
    } else if constexpr (kResidual) {
#pragma unroll
      for (int i = 0; i < P::items; ++i)
        h[i] = Traits::to_compute(Traits::from_compute(h[i] + add[i]));
      if (p.residual_out.data)
        rows::tile_store<P>(
            static_cast<S*>(p.residual_out.data) + rows::row_offset_cold(w, p.residual_out, r),
            length, lane, h);
    }
    T shift = 0, scaled_center = 0, rstd;  // y = (h - shift) * rstd - scaled_center
    if (p.kind == Kind::layer) {
      // kClamped rows sum a chunk at a time and leave the chunks past the end out; the others
      // (padded with 0) sum element by element.
      T sum = 0;
      if constexpr (kClamped) {
#pragma unroll
        for (int k = 0; k < P::chunks; ++k) {
          T part = h[k * P::vec];
#pragma unroll
          for (int e = 1; e < P::vec; ++e) part += h[k * P::vec + e];
          if (inside(k)) sum += part;
        }
      } else {
#pragma unroll
        for (int i = 0; i < P::items; ++i) sum += h[i];  // padding is 0
      }
      shift = mean_of(
          rows::group_reduce<kReduceThreads, false>(sum, rows::Plus{}, P::group, scratch[0]));
      Sums<T> sums{0, 0};
#pragma unroll
      for (int k = 0; k < P::chunks; ++k) {
        if constexpr (kClamped) {
          const T d0 = h[k * P::vec] - shift;
          Sums<T> part{d0, d0 * d0};
#pragma unroll
          for (int e = 1; e < P::vec; ++e) {
            const T d = h[k * P::vec + e] - shift;
            part.d += d;
            part.d2 += d * d;
          }
          if (inside(k)) sums = AddSums{}(sums, part);
        } else {
#pragma unroll
          for (int e = 0; e < P::vec; ++e) {
            const T d = inside(k) ? h[k * P::vec + e] - shift : T(0);
            sums.d += d;
            sums.d2 += d * d;
          }
        }
      }
      sums = rows::group_reduce<kReduceThreads, false>(sums, AddSums{}, P::group, pair_scratch);
      const auto s = kClamped
                         ? math::stats::layer_norm_stats_scaled<T>(sums.d, sums.d2, inv_count, eps)
                         : math::stats::layer_norm_stats<T>(sums.d, sums.d2, count, eps);
      rstd = s.rstd;
      scaled_center = s.center * rstd;  // small: x - shift is the exact difference
      if (lane == 0 && length > 0) {
        if (p.mean.data)
          static_cast<T*>(p.mean.data)[rows::row_offset_cold(w, p.mean, r)] = shift + s.center;
        if (p.rstd.data) static_cast<T*>(p.rstd.data)[rows::row_offset_cold(w, p.rstd, r)] = rstd;
      }
    } else {
      T squares = 0;
      if constexpr (kClamped) {
#pragma unroll
        for (int k = 0; k < P::chunks; ++k) {
          T part = h[k * P::vec] * h[k * P::vec];
#pragma unroll
          for (int e = 1; e < P::vec; ++e) part += h[k * P::vec + e] * h[k * P::vec + e];
          if (inside(k)) squares += part;
        }
      } else {
#pragma unroll
        for (int i = 0; i < P::items; ++i) squares += h[i] * h[i];
      }
      const T total = rows::group_reduce<kReduceThreads, false>(squares, rows::Plus{}, P::group,
                                                                scratch[parity]);
      parity ^= 1;
      rstd = kClamped ? math::stats::rms_rstd_scaled<T>(total, inv_count, eps)
                      : math::stats::rms_rstd<T>(total, count, eps);
    }
    // y = (h - shift) * rstd - scaled_center. 16-bit rows take it as one multiply-add,
    // h * rstd - (shift * rstd + scaled_center): the offset's rounding (2^-24 of |shift| * rstd)
    // is 2^-13 of the rounding a 16-bit x already carries at that magnitude.
    const T offset = shift * rstd + scaled_center;
    const auto normalized = [&](T v) {
      if constexpr (sizeof(S) == 2 && kClamped)
        return v * rstd - offset;
      else
        return (v - shift) * rstd - scaled_center;
    };
    // Weight and bias are read a chunk at a time (from L1/L2: every row shares them; holding them
    // in registers across rows cost more registers than it saved; kSharedAffine: from shared
    // memory). The activation runs over the finished row in its own short loop, so its
    // temporaries are not live beside w and b.
    const S* weight = static_cast<const S*>(p.weight.data);
    const S* bias = static_cast<const S*>(p.bias.data);
    if (kClamped && weight && bias) {  // layer norm's usual case: unpredicated loads
      // (kShared's wait at the top of the row covers the shared affine's copies.)
      if constexpr (kSharedAffine && !kShared) async_copy::wait<0>();
#pragma unroll
      for (int k = 0; k < P::chunks; ++k) {
        Vec wk, bk;
        if constexpr (kSharedAffine) {
          wk = affine[k * P::threads + threadIdx.x];
          bk = affine[(P::chunks + k) * P::threads + threadIdx.x];
        } else {
          const int c = rows::tile_load_col<P>(lane, k, n);
          wk = *reinterpret_cast<const Vec*>(weight + c);
          bk = *reinterpret_cast<const Vec*>(bias + c);
        }
        if constexpr (kPairs || (kAffinePairs && rows::pairs_widen<P, S>())) {
          T wf[P::vec], bf[P::vec];
          rows::widen_bf16_pairs(wk, wf);
          rows::widen_bf16_pairs(bk, bf);
#pragma unroll
          for (int e = 0; e < P::vec; ++e)
            h[k * P::vec + e] = normalized(h[k * P::vec + e]) * wf[e] + bf[e];
        } else {
#pragma unroll
          for (int e = 0; e < P::vec; ++e)
            h[k * P::vec + e] = normalized(h[k * P::vec + e]) * Traits::to_compute(wk.v[e]) +
                                Traits::to_compute(bk.v[e]);
        }
      }
    } else if (!kWordPairs && kClamped && weight) {
      // The RMS norm's usual case, a weight without a bias: unpredicated loads, where the loop
      // below loads under a predicate (16-bit vectors then split a PRMT an element) and issues the
      // absent bias's instructions predicated off. A/B, kf-bench, same call, b041fc2's library
      // against this one (with packed_sum and cached_max_blocks), RMS norm, % of copy: H100
      // (2026-11-27 23:50Z, two passes) f32 rows of 1024 92.8 / 93.0 -> 95.2 / 95.0 and of 16384
      // 92.1 / 92.3 -> 94.7 / 94.8, bf16 rows of 1024 89.6 / 90.5 -> 92.0 / 92.1 and of 16384
      // 86.7 / 86.7 -> 88.3 / 88.6, with a residual over bf16 rows of 4096 87.0 / 86.5 -> 90.3 /
      // 90.3, the f32 32x512x768 seed 82.8 / 83.0 -> 86.2 / 86.5, f16 rows of 4096 93.1 / 92.9 ->
      // 91.4 / 92.1; H200 (2026-11-28 00:05Z, three passes against two) bf16 rows of 4096 83.9 /
      // 83.6 / 83.6 -> 87.3 / 87.2 and of 16384 83.2 / 83.3 / 83.2 -> 86.2 / 86.2, f32 rows of
      // 1024 90.1 / 89.8 / 89.8 -> 92.8 / 92.7. Not in the LayerPairs build (kWordPairs): with it
      // there the layer norm's bf16 rows of 64 fell from 86.9 to 74.4 on the H200 (same call), so
      // those kernels stay as they were measured (their sm_90 SASS is b041fc2's).
#pragma unroll
      for (int k = 0; k < P::chunks; ++k) {
        const Vec wk = *reinterpret_cast<const Vec*>(weight + rows::tile_load_col<P>(lane, k, n));
#pragma unroll
        for (int e = 0; e < P::vec; ++e)
          h[k * P::vec + e] = normalized(h[k * P::vec + e]) * Traits::to_compute(wk.v[e]);
      }
    } else {
#pragma unroll
      for (int k = 0; k < P::chunks; ++k) {
        const int c = rows::tile_col<P>(lane, k);
        Vec wk, bk;
        if (weight && c < n) wk = *reinterpret_cast<const Vec*>(weight + c);
        if (bias && c < n) bk = *reinterpret_cast<const Vec*>(bias + c);
        if constexpr (kPairs) {
          T wf[P::vec], bf[P::vec];
          if (weight) rows::widen_bf16_pairs(wk, wf);
          if (bias) rows::widen_bf16_pairs(bk, bf);
#pragma unroll
          for (int e = 0; e < P::vec; ++e) {
            T y = normalized(h[k * P::vec + e]);
            if (weight) y *= wf[e];
            if (bias) y += bf[e];
            h[k * P::vec + e] = y;
          }
        } else {
#pragma unroll
          for (int e = 0; e < P::vec; ++e) {
            T y = normalized(h[k * P::vec + e]);
            if (weight) y *= Traits::to_compute(wk.v[e]);
            if (bias) y += Traits::to_compute(bk.v[e]);
            h[k * P::vec + e] = y;
          }
        }
      }
    }
    with_activation(p.act, [&](auto act) {
#pragma unroll
      for (int i = 0; i < P::items; ++i) h[i] = act(h[i], Prim{});
    });
    rows::tile_store<P, rows::tile_streams_output<P, S>(kShared)>(
        static_cast<S*>(p.out.data) + rows::row_offset_cold(w, p.out, r), length, lane, h);
  }
}

// A block's layer-norm sums for the clustered kernel's one exchange a row: its own mean as the
// shift, and the sums of d = h - shift and of d^2 over its slice.
template <class T>
struct ShiftedSums {
  T shift, d, d2, unused;  // 16 bytes: one slot of rows::ClusterMailbox
};

// The row's statistics from its blocks' ShiftedSums (rows::ClusterReducer::exchange), about
// block 0's shift: each block's mean offset from it, e = (shift_b - shift_0) + d_b / n_b (the
// first difference exact for nearby shifts), and its sum of squares about its own mean,
// m2 = d2_b - d_b^2 / n_b; then the row's offset c = sum(n_b e) / n and its sum of squares
// about the mean, sum(m2 + n_b (e - c)^2) (the parallel form of Chan, Golub and LeVeque). Each
// sum is one butterfly over lanes that hold a block each. Returns {shift_0, n c, that sum}, so
// that the mean is shift_0 + c: a row with mean 1e4 and std 1e-2 keeps its variance.
// kShifted (the shifted staged kernel's): block 0 also takes the `head` columns before its slice,
// and each slice starts `head` columns later.
template <class T, bool kShifted = false>
struct MergeShiftedSums {
  int64_t n;         // the row's length
  int64_t slice;     // a block's columns (the last block's may be fewer)
  int64_t head = 0;  // kShifted: the row's columns before block 0's slice
  template <class Value>
  __device__ ShiftedSums<T> operator()(unsigned blocks, Value value) const {
    const T base = value(0).shift;
    const ShiftedSums<T> mine =
        rows::cluster_value_of_lane(blocks, value, ShiftedSums<T>{base, T(0), T(0), T(0)});
    const int64_t block = threadIdx.x % rows::kMaxClusterBlocks;
    T count;
    if constexpr (kShifted) {
      const int64_t first = block * slice + head;
      count = static_cast<T>((first < n ? (n - first < slice ? n - first : slice) : 0) +
                             (block == 0 ? head : 0));
    } else {
      const int64_t first = block * slice;
      count = first < n ? static_cast<T>(n - first < slice ? n - first : slice) : T(0);
    }
    const T q = count > T(0) ? mine.d / count : T(0);
    const T e = (mine.shift - base) + q;
    const T offset = rows::lanes_reduce(count * e, rows::Plus{}, rows::kMaxClusterBlocks);
    const T c = offset / static_cast<T>(n);
    const T m2 = (mine.d2 - mine.d * q) + count * (e - c) * (e - c);
    return {base, offset, rows::lanes_reduce(m2, rows::Plus{}, rows::kMaxClusterBlocks), T(0)};
  }
};

// Staged rows (core/ops/rows/staged.cuh): x (and the residual) are copied to shared memory, then
// the passes read them there: h (= x + residual, written back over the staged x), the mean,
// the sums of differences from it, and the output. In a cluster the layer norm's first two
// passes take the block's own mean and sums, combined in one exchange (MergeShiftedSums)
// instead of one for the mean and one for the sums: H200 A/B (2026-11-27 03:31Z, kf-bench, same
// call, two passes), % of copy at rows of 262144, f32 / f16 / bf16: 50.6 / 57.8 / 54.2 -> 51.7 /
// 59.2 / 56.4. Each thread touches the same columns in
// every pass, so a thread only reads back what it wrote itself.
// Three blocks per SM, as softmax's staged kernel (see there): on an H200 (2026-11-26T11:18Z)
// 16-bit rows of 262144 went from 35-43 to 41-49 % of copy with it, f32 rows were unchanged.
// kInPass: whether the clustered form restages the next row inside the output pass
// (rows::for_each_tile; launch_staged picks it for the RMS norm's 16-bit rows).
// kShifted: the form for dense rows whose row operands start equally far from a 16-byte
// boundary, row by row, but not on one, or whose length fills no whole 16-byte vectors
// (launch_shifted), one row a tile, as the softmax's (see there): each row's whole 16-byte
// vectors are staged from its first 16-byte boundary; the few columns before that boundary and
// after the last whole vector are read from global memory, each by one thread, which keeps their
// values in shared memory for the row's passes. The weight and bias, which start on the row's
// column 0, are then read an element at a time.
template <class S, bool kClustered, bool kResident = false,
          bool kInPass = (kClustered && rows::StagedPolicy::restages_in_pass<S>()),
          bool kShifted = false>
__global__ void __launch_bounds__(rows::StagedPolicy::threads, 3)
    staged_kernel(const __grid_constant__ Plan p, const rows::Staging g) {
  cuda::wait_prior_grid();  // a dependent launch: nothing global is touched before this
  cuda::allow_next_grid();
  using T = math::compute_t<S>;
  using Traits = math::StorageTraits<S>;
  constexpr int V = 16 / sizeof(S);
  using Vec = rows::Pack<S, V>;
  extern __shared__ __align__(16) unsigned char staged_bytes[];
  using Prim = typename math::PrimitivesFor<S>::type;
  __shared__ T scratch[32];
  __shared__ Sums<T> pair_scratch[32];
  __shared__ rows::ClusterMailbox mailbox;  // the clustered form's row statistics
  rows::ClusterReducer cluster(mailbox, kClustered);
  // kShifted: h of the columns outside a row's whole staged vectors (the partial vector's, the
  // head's), each written and read by the one thread that takes them; alternate rows take
  // alternate halves (a block takes one row at a time: its group is the block), since the next
  // row's thread for them may write before this row's has read. Held in registers instead, they
  // made the 16-bit kernels spill 32-44 bytes a thread (ptxas, sm_90; 0-4 bytes here). kf-bench,
  // H200 2026-12-02 10:58Z, same call, two passes each, % of copy, rows of 20001 / 30522 / 50257:
  // layer norm f16 42.1 / 41.2 / 38.4 -> 44.3 / 42.1 / 40.9, bf16 40.8 / 42.2 / 37.9 -> 43.1 /
  // 43.0 / 41.0; RMS norm f16 56.4 / 55.9 / 52.4 -> 58.4 / 56.2 / 56.1, bf16 55.8 / 54.4 / 51.4
  // -> 60.0 / 57.0 / 55.6; f32 within a point.
  __shared__ T unstaged[2][2][kShifted ? V : 1];
  // For kShifted rows, whether only the threads that take head or tail columns run those
  // columns' loops (rows::for_each_unstaged's kBranch): in the 16-bit kernels, not in f32's.
  constexpr bool kBranchExtra = sizeof(S) == 2;
  unsigned parity = 0;
  const rows::Walk& w = p.walk;
  const int64_t n = w.row_length;
  const T count = static_cast<T>(n), eps = static_cast<T>(p.eps);
  const int rank = rows::slice_rank(g);
  const int64_t first_col = rank * g.slice;
  const int64_t cols = n - first_col < g.slice ? n - first_col : g.slice;
  S* const staged = reinterpret_cast<S*>(staged_bytes);
  const int lane = threadIdx.x % g.group, slot = threadIdx.x / g.group;
  const int groups = blockDim.x / g.group;
  const S* weight = p.weight.data ? static_cast<const S*>(p.weight.data) + first_col : nullptr;
  const S* bias = p.bias.data ? static_cast<const S*>(p.bias.data) + first_col : nullptr;
  const int vectors = static_cast<int>(cols / V);
  // kResident (RMS norm, clustered; see launch_staged): the block's slice of the weight is staged
  // once, after the buffers, each thread its own slots in the first row's copy group, and the
  // output pass reads it there rather than from L2 for every row.
  S* const weight_slice = staged + g.buffer_elems * g.buffers;
  if constexpr (kResident)
    rows::stage_rows(weight_slice, g.slice, 1, vectors, [&](int) { return weight; });
  const auto reduce = [&](T v) {
    v = rows::group_reduce<rows::StagedPolicy::threads>(v, rows::Plus{}, g.group, scratch);
    if constexpr (kClustered) v = cluster.reduce(v, rows::Plus{});
    return v;
  };
  const int64_t tiles = (w.rows + g.rows_per_tile - 1) / g.rows_per_tile;
  static_assert(kClustered || !kInPass);
  static_assert(!kResident || (kClustered && sizeof(S) == 2));
  static_assert(!(kShifted && kResident));
  const auto rows_in = [&](int64_t tile) {
    const int64_t left = w.rows - tile * g.rows_per_tile;
    return static_cast<int>(left < g.rows_per_tile ? left : g.rows_per_tile);
  };
  const auto row_of = [&](const rows::Operand& t, int64_t row) {
    return static_cast<const S*>(t.data) + rows::row_offset_cold(w, t, row);
  };
  // kShifted: the staged columns of this block's slice of a row of `head` head columns.
  const auto staged_cols = [&](int head) {
    return rows::shifted_slice_columns(n, head, first_col, g.slice);
  };
  const auto stage = [&](int64_t tile, int buffer) {
    const int64_t row0 = tile * g.rows_per_tile;
    S* xs = staged + buffer * g.buffer_elems;
    if constexpr (kShifted) {
      const S* x = row_of(p.x, row0);
      const int head = rows::head_columns(x);
      const int here = staged_cols(head);
      rows::stage_row(xs, here, x + head + first_col);
      if (p.residual.data)
        rows::stage_row(xs + g.slice, here, row_of(p.residual, row0) + head + first_col);
      return;
    }
    rows::stage_rows(xs, g.slice, rows_in(tile), vectors, [&](int r) {
      return static_cast<const S*>(p.x.data) + rows::row_offset_cold(w, p.x, row0 + r) + first_col;
    });
    if (p.residual.data)
      rows::stage_rows(xs + g.rows_per_tile * g.slice, g.slice, rows_in(tile), vectors, [&](int r) {
        return static_cast<const S*>(p.residual.data) +
               rows::row_offset_cold(w, p.residual, row0 + r) + first_col;
      });
  };
  const auto compute = [&](int64_t tile, int buffer, int64_t next) {
    const int64_t row0 = tile * g.rows_per_tile;
    const int tile_rows = rows_in(tile);
    S* xs = staged + buffer * g.buffer_elems;
    S* rs = xs + g.rows_per_tile * g.slice;
    // Rolling, kInPass (rows::for_each_tile): the next row's vectors of this thread's slots,
    // staged as the last pass to read each slot leaves it: the residual's after the first pass,
    // x's after the output pass.
    const S* next_x = nullptr;
    const S* next_residual = nullptr;
    int next_cols = 0;  // kShifted: the next row's staged columns in this block
    if (kInPass && next >= 0) {
      next_x = row_of(p.x, next);
      const int head = kShifted ? rows::head_columns(next_x) : 0;
      next_x += head + first_col;
      if (p.residual.data) next_residual = row_of(p.residual, next) + head + first_col;
      if (kShifted) next_cols = staged_cols(head);
    }
    const auto restage = [&](S* slots, const S* from, int c) {
      if constexpr (kShifted) {
        if (kInPass && from != nullptr) rows::stage_vector(slots, from, c, next_cols);
      } else if (kInPass && from != nullptr) {
        async_copy::copy16(slots + c, from + c);
      }
    };
    for (int base = 0; base < tile_rows; base += groups) {
      // Lanes past the tile's rows still take part in their group's shuffles.
      const int r = base + slot;
      int length = r < tile_rows ? static_cast<int>(cols) : 0;  // cols <= a slice
      const int64_t row = row0 + (r < tile_rows ? r : 0);
      S* h_row = xs + (r < tile_rows ? r : 0) * g.slice;
      const int step = g.group * V;
      // kShifted: `length` is the block's staged columns in whole vectors, block_cols all its
      // columns. This thread's columns of the partial vector after them (`part`, where it staged
      // that vector) and of the head (`head_here`, one thread of the first block) have their h
      // in `extra`, loaded from global memory and the residual added (and written to
      // residual_out) here; `at` in for_each_extra is a column's offset from the block's first
      // staged column.
      int head = 0, part = 0, head_here = 0, block_cols = length;
      // kShifted: their h in shared memory (`unstaged`), not in registers, which the kernel has
      // none to spare for (there the 16-bit kernels spilled): extra[0] the partial vector's,
      // extra[1] the head's.
      auto& extra = unstaged[parity];
      parity ^= 1;
      if constexpr (kShifted) {
        const S* x_start = row_of(p.x, row);
        head = rows::head_columns(x_start);
        const int here = staged_cols(head);
        length = here / V * V;
        if (lane == (length / V) % g.group) part = here - length;
        if (rank == 0 && lane == g.group - 1) head_here = head;
        block_cols = here + (rank == 0 ? head : 0);
        const S* r_start = p.residual.data ? row_of(p.residual, row) : nullptr;
        S* h_start = p.residual_out.data ? static_cast<S*>(p.residual_out.data) +
                                               rows::row_offset_cold(w, p.residual_out, row)
                                         : nullptr;
        // h of a column, from its x and residual values, written to residual_out at `to`.
        const auto take = [&](S x_value, const S* residual_value, int64_t to) {
          if (r_start) {
            x_value = Traits::from_compute(Traits::to_compute(x_value) +
                                           Traits::to_compute(*residual_value));
            if (h_start) h_start[to] = x_value;
          }
          return Traits::to_compute(x_value);
        };
        const int64_t part_at = head + first_col + length;  // the partial vector's first column
        // (kBranchExtra: one or two threads of the row; see for_each_unstaged.)
        if (!kBranchExtra || part > 0 || head_here > 0) {
#pragma unroll
          for (int e = 0; e < V; ++e) {
            if (e < part)
              extra[0][e] = take(x_start[part_at + e], r_start ? r_start + part_at + e : nullptr,
                                 part_at + e);
            if (e < head_here) extra[1][e] = take(x_start[e], r_start ? r_start + e : nullptr, e);
          }
        }
      }
      const auto for_each_extra = [&](auto&& fn) {
        if constexpr (kShifted)
          rows::for_each_unstaged<kBranchExtra>(length, part, extra[0], head, head_here, extra[1],
                                                fn);
      };
      // kShifted, after a pass's restaging up to `length`: the slots of the next row past this
      // row's whole vectors (the next row may have more of them).
      const auto restage_tail = [&](S* slots, const S* from) {
        if constexpr (kShifted && kInPass) {
          int c = lane * V;
          while (c < length) c += step;
          for (; c < next_cols; c += step) restage(slots, from, c);
        }
      };
      T sum = 0;
      if (p.residual.data) {
        const S* r_row = rs + (r < tile_rows ? r : 0) * g.slice;
        S* h_out = p.residual_out.data
                       ? static_cast<S*>(p.residual_out.data) +
                             rows::row_offset_cold(w, p.residual_out, row) + head + first_col
                       : nullptr;
        for (int c = lane * V; c < length; c += g.group * V) {
          Vec hv = *reinterpret_cast<const Vec*>(h_row + c);
          const Vec rv = *reinterpret_cast<const Vec*>(r_row + c);
#pragma unroll
          for (int e = 0; e < V; ++e) {
            hv.v[e] =
                Traits::from_compute(Traits::to_compute(hv.v[e]) + Traits::to_compute(rv.v[e]));
            sum += p.kind == Kind::layer
                       ? Traits::to_compute(hv.v[e])
                       : Traits::to_compute(hv.v[e]) * Traits::to_compute(hv.v[e]);
          }
          *reinterpret_cast<Vec*>(h_row + c) = hv;
          if (h_out) *reinterpret_cast<Vec*>(h_out + c) = hv;
          restage(rs, next_residual, c);
        }
        restage_tail(rs, next_residual);
      } else {
        for (int c = lane * V; c < length; c += g.group * V) {
          const Vec hv = *reinterpret_cast<const Vec*>(h_row + c);
#pragma unroll
          for (int e = 0; e < V; ++e) {
            const T h = Traits::to_compute(hv.v[e]);
            sum += p.kind == Kind::layer ? h : h * h;
          }
        }
      }
      for_each_extra([&](int, T h) { sum += p.kind == Kind::layer ? h : h * h; });
      T shift = 0, center = 0, rstd;
      if (p.kind == Kind::layer) {
        // Clustered: each block's own mean is the shift of its sums, and the blocks' shifts and
        // sums meet in one exchange (ShiftedSums); else the row's mean is the shift. (A shifted
        // row's last block may have no columns: its shift is then 0.)
        if constexpr (kClustered) {
          shift =
              rows::group_reduce<rows::StagedPolicy::threads>(sum, rows::Plus{}, g.group, scratch);
          if constexpr (kShifted)
            shift = block_cols > 0 ? shift / static_cast<T>(block_cols) : T(0);
          else
            shift = shift / static_cast<T>(length);
        } else {
          shift = reduce(sum) / count;
        }
        Sums<T> sums{0, 0};
        for (int c = lane * V; c < length; c += g.group * V) {
          const Vec hv = *reinterpret_cast<const Vec*>(h_row + c);
#pragma unroll
          for (int e = 0; e < V; ++e) {
            const T d = Traits::to_compute(hv.v[e]) - shift;
            sums.d += d;
            sums.d2 += d * d;
          }
        }
        for_each_extra([&](int, T h) {
          const T d = h - shift;
          sums.d += d;
          sums.d2 += d * d;
        });
        sums =
            rows::group_reduce<rows::StagedPolicy::threads>(sums, AddSums{}, g.group, pair_scratch);
        if constexpr (kClustered) {
          const ShiftedSums<T> merged =
              cluster.exchange(ShiftedSums<T>{shift, sums.d, sums.d2, T(0)},
                               MergeShiftedSums<T, kShifted>{n, g.slice, head});
          shift = merged.shift;
          center = merged.d / count;
          // merged.d2 is the sum of squares about the mean: no centre to take off.
          rstd = math::stats::layer_norm_stats<T>(T(0), merged.d2, count, eps).rstd;
        } else {
          const auto s = math::stats::layer_norm_stats<T>(sums.d, sums.d2, count, eps);
          center = s.center;
          rstd = s.rstd;
        }
        if (lane == 0 && rank == 0 && length > 0) {
          if (p.mean.data)
            static_cast<T*>(p.mean.data)[rows::row_offset_cold(w, p.mean, row)] = shift + center;
          if (p.rstd.data)
            static_cast<T*>(p.rstd.data)[rows::row_offset_cold(w, p.rstd, row)] = rstd;
        }
      } else {
        rstd = math::stats::rms_rstd<T>(reduce(sum), count, eps);
      }
      S* out =
          static_cast<S*>(p.out.data) + rows::row_offset_cold(w, p.out, row) + head + first_col;
      const T scaled_center = center * rstd;  // y = (h - shift) * rstd - scaled_center
      // f32 rows: the weight and bias vectors (from L2 after the first rows) of kLoads slots
      // are loaded before any of them is stored (the compiler cannot move a load above a store
      // to `out`). H200 A/B (2026-11-27 07:36Z, kf-bench, same call, two passes), % of copy
      // at rows of 262144: f32 layer norm 52.9 -> 62.6, RMS norm 59.0 -> 69.6. 16-bit rows
      // lost with two (about 07:25Z, same call: layer norm bf16 55.9 -> 51.0, RMS norm 65.0 ->
      // 60.9; four spilled) and keep one.
      constexpr int kLoads = sizeof(S) == 4 ? 4 : 1;
      // y for element e of slot vectors h, w, b.
      const auto output = [&](auto act, const Vec& hv, const Vec& wv, const Vec& bv, int e) {
        T y = (Traits::to_compute(hv.v[e]) - shift) * rstd - scaled_center;
        if (weight) y *= Traits::to_compute(wv.v[e]);
        if (bias) y += Traits::to_compute(bv.v[e]);
        return Traits::from_compute(act(y, Prim{}));
      };
      with_activation(p.act, [&](auto act) {
        if constexpr (kShifted) {
          // The weight and bias start on column 0, `head` columns before the staged ones: an
          // element at a time. (Read instead as the aligned vectors a staged vector spans,
          // realigned in registers by a word select and a byte permute, they spilled 20-104
          // bytes a thread and moved the rows both ways, f32 down by up to 12 points: H200,
          // 2026-12-02 10:35Z and 10:58Z; docs/performance.md, "Session of 10:11Z".)
          const S* w_at = weight ? weight + head : nullptr;
          const S* b_at = bias ? bias + head : nullptr;
          const auto y_of = [&](T h, int at) {
            T y = (h - shift) * rstd - scaled_center;
            if (w_at) y *= Traits::to_compute(w_at[at]);
            if (b_at) y += Traits::to_compute(b_at[at]);
            return Traits::from_compute(act(y, Prim{}));
          };
          for (int c = lane * V; c < length; c += step) {
            const Vec hv = *reinterpret_cast<const Vec*>(h_row + c);
            Vec yv;
#pragma unroll
            for (int e = 0; e < V; ++e) yv.v[e] = y_of(Traits::to_compute(hv.v[e]), c + e);
            *reinterpret_cast<Vec*>(out + c) = yv;
            restage(xs, next_x, c);
          }
          for_each_extra([&](int at, T h) { out[at] = y_of(h, at); });
          restage_tail(xs, next_x);
        } else if constexpr (kLoads == 1) {
          for (int c = lane * V; c < length; c += g.group * V) {
            const Vec hv = *reinterpret_cast<const Vec*>(h_row + c);
            Vec wv, bv, yv;
            if constexpr (kResident)
              wv = *reinterpret_cast<const Vec*>(weight_slice + c);
            else if (weight)
              wv = *reinterpret_cast<const Vec*>(weight + c);
            if (bias) bv = *reinterpret_cast<const Vec*>(bias + c);
#pragma unroll
            for (int e = 0; e < V; ++e) yv.v[e] = output(act, hv, wv, bv, e);
            *reinterpret_cast<Vec*>(out + c) = yv;
            // (The clustered form has one row a tile: this pass covers all the thread's slots.)
            restage(xs, next_x, c);
          }
        } else {
          for (int c0 = lane * V; c0 < length; c0 += kLoads * step) {
            Vec wv[kLoads], bv[kLoads];
#pragma unroll
            for (int j = 0; j < kLoads; ++j) {
              const int c = c0 + j * step;
              if (c >= length) break;
              if (weight) wv[j] = *reinterpret_cast<const Vec*>(weight + c);
              if (bias) bv[j] = *reinterpret_cast<const Vec*>(bias + c);
            }
#pragma unroll
            for (int j = 0; j < kLoads; ++j) {
              const int c = c0 + j * step;
              if (c >= length) break;
              const Vec hv = *reinterpret_cast<const Vec*>(h_row + c);
              Vec yv;
#pragma unroll
              for (int e = 0; e < V; ++e) yv.v[e] = output(act, hv, wv[j], bv[j], e);
              *reinterpret_cast<Vec*>(out + c) = yv;
              restage(xs, next_x, c);
            }
          }
        }
      });
    }
  };
  rows::for_each_tile<kInPass>(g, tiles, stage, compute);
  if constexpr (kClustered) cluster.done();
}

// The clustered kernel that keeps the weight's slice resident (16-bit types only; the f32
// clustered kernel otherwise), restaging the next row inside the output pass or after it.
template <class S, bool kInPass>
constexpr auto resident_kernel() {
  if constexpr (sizeof(S) == 2) {
    return &staged_kernel<S, true, true, kInPass>;
  } else {
    return &staged_kernel<S, true>;
  }
}

// ---- grid-group rows (rows::GridGroups): the norms' rows of 64 KiB and more -------------------
//
// Each row is spread over a group of blocks, each block owning GridPolicy::vectors * threads
// 16-byte vectors, the same columns of every row of the group, on a cooperative grid of two
// 512-thread blocks an SM. A block stages row i + 2 into a ring of three shared-memory slots
// (cp.async; each thread reads back only its own slots, and restages each slot as the output pass
// leaves it), publishes row i's partial statistics, and writes row i - 1 once the group's partials
// of that row are in; the first warp's loads of those partials are issued before the block
// reduces row i, and polled after. The form of bench/probes/grid_rows.cu (docs/performance.md,
// "Session of 05:45Z" and "Session of 07:55Z").
// RMS norm: a sum of squares a block a row; the weight is read once a launch, into registers.
// kf-bench, H200 2026-11-30 08:09Z-08:19Z, % of copy, against the clustered kernel in the same
// calls: f32 / f16 / bf16 rows of 262144 68.5-71.6 / 70.0-70.8 / 64.7-67.1 -> 81.3-82.0 /
// 78.3-79.1 / 77.1-77.6; rows of 524288 10.9 / 55.0-57.1 / 61.0-61.7 -> 80.9-81.1 / 79.2-79.3 /
// 77.4-77.5; f32 rows of 131072 74.3-74.8 -> 80.9-81.6. Rows of 256 KiB (taken since 08:19Z):
// f32 65536 76.0 -> 79.8-80.1, f16 / bf16 131072 74.4 / 68.0 -> 76.9-77.1 / 75.7-75.8.
// Layer norm: three words a block a row (Moments), so that the block still needs one barrier a
// row: each warp takes its own mean as the shift of its sums, and the warps' and then the blocks'
// parts meet by Chan's parallel formula (merge_moments); the weight and bias are read from L2
// in the output pass. kf-bench, H200 2026-11-30 10:18Z-10:24Z, layer norm (weight, bias, ReLU),
// % of copy, against the clustered kernel in the same calls (two passes each): f32 rows of
// 65536 / 131072 / 262144 / 524288 68.4 / 65.0-66.9 / 60.9-61.6 / 10.2 -> 74.2-74.7 / 73.6-73.9 /
// 72.7-73.0 / 70.2-70.9; f16 rows of 131072 / 262144 / 524288 62.4-62.5 / 58.3-59.9 / 50.1-50.3 ->
// 69.4-70.0 / 67.5-67.9 / 66.5-66.7; bf16 58.5-58.6 / 53.3-56.9 / 52.4-52.6 -> 68.9-69.0 /
// 66.9-67.1 / 66.4-67.3. The RMS norm's rows, whose kernel became this template's other half
// (its output pass reshaped with the layer norm's; which change mattered was not isolated),
// gained in the same runs against 75da9e1's: f32 rows of 131072 / 262144 / 524288 81.0-81.9 /
// 81.7-81.8 / 81.5-81.7 -> 84.4-85.0 / 84.7-85.7 / 84.8-85.2, f16 77.3-77.4 / 79.0-79.1 /
// 79.0-79.1 -> 79.9-80.2 / 82.0-82.2 / 82.3-82.9, bf16 78.9-79.2 / 80.0-80.1 / 80.9 -> 82.2 /
// 82.9-83.1 / 84.7-84.8.
// The 16-bit layer norm takes its statistics in one pass (each thread's values about its first
// one, the lanes merged by Chan's formula) and, with both a weight and a bias, an output pass
// specialised for them (kBoth). Nsight Compute (H200, 2026-12-03 03:26Z, f16 rows of 262144, the
// form before) had the kernel at 54.2 M warp instructions against the RMS norm's 27.3 M, at 121.5
// against 74.8 us, its stall samples led by issue (not selected, selected, math: 41 %) where the
// RMS norm's were led by its barrier and memory. H200 A/B (kf-bench `--filter layer_norm
// --lengths 131072,262144,524288`, one call, two passes each; 03:37Z and 03:48Z), % of copy, f16
// rows of 131072 / 262144 / 524288: before 70.0-70.5 / 66.6-68.0 / 66.7-67.2; kBoth alone
// 70.2-70.8 / 69.2-69.4 / 68.3-69.0; both changes 72.8 / 70.6-70.7 / 69.4-69.6. bf16: 68.8-69.5
// / 65.7-66.8 / 66.2-66.8; 69.4-70.1 / 68.9-69.1 / 68.2-68.9; 72.0 / 70.3-70.4 / 69.3-69.5. f32
// keeps the form before: with kBoth it lost 1.3-2.3 points (73.8-74.5 / 73.0-73.6 / 70.9-71.5
// -> 72.2-72.6 / 70.5-71.6 / 69.3-69.5), with the one-pass statistics alone 2.0-3.3 at rows of
// 524288 (70.9-71.5 -> 68.2-68.9) and nothing at the shorter rows.
using rows::GridPolicy;

// A part of a row for the layer norm: values whose mean is shift + d / (their count) and whose
// sum of squared differences from that mean is m2.
template <class T>
struct Moments {
  T shift, d, m2;
};

// Chan, Golub and LeVeque's parallel form over parts, K a lane of the first `lanes` lanes
// (part(k, m, n) sets m and its count n and returns true where lane's k-th part exists and holds
// values; every aligned run of `lanes` lanes holds each part once), about `base` (the first
// part's shift, the same in every lane): each part's mean offset from base, e = (shift - base) +
// d / n (the difference exact for nearby shifts), the row's offset c = sum(n e) / total (total:
// the parts' counts summed) and its sum of squares about the mean, sum(m2 + n (e - c)^2). Returns
// {base, total c, that sum}, the same bits in every lane (butterflies), so that a row with mean
// 1e4 and std 1e-2 keeps its variance.
template <int K, class T, class Part>
__device__ __forceinline__ Moments<T> merge_moments(T base, T total, int lanes, Part part_of) {
  T offset = 0;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    Moments<T> m;
    T n;
    if (part_of(k, m, n)) offset += n * (m.shift - base) + m.d;
  }
  offset = rows::lanes_reduce(offset, rows::Plus{}, lanes);
  const T c = offset / total;
  T m2 = 0;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    Moments<T> m;
    T n;
    if (part_of(k, m, n)) {
      const T e = (m.shift - base) + m.d / n;
      m2 += m.m2 + n * (e - c) * (e - c);
    }
  }
  return {base, offset, rows::lanes_reduce(m2, rows::Plus{}, lanes)};
}

// merge_moments where each lane holds one part, `mine`, of `part` values (none where part is 0).
template <class T>
__device__ __forceinline__ Moments<T> merge_lane_moments(T base, T part, T total, int lanes,
                                                         const Moments<T>& mine) {
  return merge_moments<1>(base, total, lanes, [&](int, Moments<T>& m, T& n) {
    m = mine;
    n = part;
    return part > T(0);
  });
}

// The layer norm's partials take 3 words a block: up to 64 blocks a row (two words a lane),
// where four spilled (launch_grid_rows).
inline constexpr int kLayerLaneWords = 2;

// kLaneWords: the published words a lane of the first warp holds, up to 32 * kLaneWords blocks
// a row (the layer norm's kLayerLaneWords; for the RMS norm rows::kLanesWords, or 1 where a row
// takes at most 32 blocks: launch_grid_rows).
// kResidual (the RMS norm): each slot holds the block's shares of x and of the residual (192 KiB
// a block, one block an SM); the statistics pass writes h = x + residual, rounded to S, over the
// staged x and to residual_out, and the output pass reads h there.
// kPartial: rows that are not a whole number of shares, dealt evenly to the blocks
// (rows::grid_share_vectors: `share` vectors a block, the last block the rest). A thread owns its
// first `owned` vectors of the share and its loops stop there; the statistics count the values
// each thread, warp and block holds. Without kPartial every count is a constant.
template <class S, bool kLayer, int kLaneWords, bool kResidual = false, bool kPartial = false>
__global__ void __launch_bounds__(GridPolicy::threads, kResidual ? 1 : 2)
    grid_norm_kernel(const __grid_constant__ Plan p, const rows::GridGroups q) {
  static_assert(!(kLayer && kResidual), "the layer norm takes no residual");
  cuda::wait_prior_grid();  // a dependent launch: nothing global is touched before this
  cuda::allow_next_grid();
  using G = GridPolicy;
  using T = math::compute_t<S>;
  using Traits = math::StorageTraits<S>;
  using Prim = typename math::PrimitivesFor<S>::type;
  constexpr int V = 16 / sizeof(S);
  constexpr int kWarps = G::threads / 32;
  constexpr int kWords = kLayer ? 3 : 1;  // words a block a row: Moments, or a sum of squares
  using Vec = rows::Pack<S, V>;
  static_assert(sizeof(Vec) == sizeof(uint4), "a vector is 16 bytes");
  extern __shared__ __align__(16) unsigned char grid_bytes[];
  __shared__ T warp_sums[2][kWords][kWarps];
  __shared__ T row_stats[2][3];  // rstd; the layer norm's shift and center * rstd
  const int group = static_cast<int>(blockIdx.x) / q.blocks;
  const int rank = static_cast<int>(blockIdx.x) % q.blocks;
  if (group >= q.groups) return;
  const rows::Walk& w = p.walk;
  const int t = static_cast<int>(threadIdx.x), lane = t % 32, warp = t / 32;
  const rows::GridRing<S, Vec, kResidual ? 2 : 1> ring{reinterpret_cast<Vec*>(grid_bytes), t};
  const int64_t my_rows = (w.rows - group + q.groups - 1) / q.groups;
  constexpr int kShare = G::vectors * G::threads;  // a whole share's vectors
  const int share =
      kPartial ? rows::grid_share_vectors(w.row_length * int64_t{sizeof(S)}, q.blocks) : kShare;
  const int64_t first = int64_t{rank} * share * V;  // the block's first column
  // The vectors of a row block b owns, and this thread's: vector k at k * threads + t, k < owned.
  const int64_t row_vectors = w.row_length / V;
  const auto block_vectors = [&](int64_t b) {
    return kPartial ? static_cast<int>(std::min<int64_t>(share, row_vectors - b * share)) : kShare;
  };
  const int my_vectors = block_vectors(rank);
  const int owned = kPartial ? std::min(std::max(my_vectors - t + G::threads - 1, 0) / G::threads,
                                        int{G::vectors})
                             : G::vectors;
  const T count = static_cast<T>(w.row_length), eps = static_cast<T>(p.eps);
  const auto row_of = [&](int64_t i) { return group + i * q.groups; };
  const auto x_row = [&](int64_t i) {  // the block's share of row i
    return static_cast<const S*>(p.x.data) + rows::row_offset_cold(w, p.x, row_of(i)) + first;
  };
  const auto residual_row = [&](int64_t i) {  // the block's share of row i of the residual
    return static_cast<const S*>(p.residual.data) +
           rows::row_offset_cold(w, p.residual, row_of(i)) + first;
  };
  const auto stage = [&](int64_t i) {
    if constexpr (kResidual)
      ring.stage(i, x_row(i), residual_row(i), owned);
    else
      ring.stage(i, x_row(i), nullptr, owned);
  };
  // [row][word][block]
  const auto words_of = [&](int64_t i) { return q.words + row_of(i) * kWords * q.blocks; };
  // bf16 vectors widened a word at a time on the FMA pipe (rows::widen_bf16_pairs) and narrowed
  // a pair an instruction (cvt.rn.bf16x2.f32). H200 A/B (2026-11-30 08:39Z, kf-bench, same call,
  // two passes), % of copy, bf16 rows of 131072 / 262144 / 524288: 76.2-76.3 / 77.7-77.9 / 77.6
  // -> 79.0-79.9 / 80.8-81.3 / 81.2-81.5. The same for f16 (per-element widening, cvt.rn.f16x2
  // narrowing) lost 3.5-4 points (77.8 / 79.3-79.5 / 79.4-79.7 -> 74.0-74.3 / 75.5-75.8 /
  // 75.4-75.7): f16 and f32 keep the per-element conversions.
  constexpr bool kPairs = std::is_same_v<S, math::bfloat16_t>;
  const auto widen = [](const Vec& v, T(&f)[V]) {
    if constexpr (kPairs) {
      rows::widen_bf16_pairs(v, f);
    } else {
#pragma unroll
      for (int e = 0; e < V; ++e) f[e] = Traits::to_compute(v.v[e]);
    }
  };
  const S* const weight_share =
      p.weight.data ? static_cast<const S*>(p.weight.data) + first : nullptr;
  const S* const bias_share = p.bias.data ? static_cast<const S*>(p.bias.data) + first : nullptr;
  // The RMS norm's weight, held in registers for the launch.
  Vec weight[kLayer ? 1 : G::vectors];
  if constexpr (!kLayer) {
    if (weight_share) {
#pragma unroll
      for (int k = 0; k < G::vectors; ++k)
        if (!kPartial || k < owned)
          weight[k] = *reinterpret_cast<const Vec*>(weight_share + (k * G::threads + t) * V);
    }
  }
#pragma unroll
  for (int i = 0; i < G::ahead; ++i) {
    if (i < my_rows) stage(i);
    async_copy::commit();
  }
  // The values a thread, a warp (warp w's: warp_values(w)) and a block hold of a row (the layer
  // norm's parts).
  constexpr T kWholeThread = T(G::vectors * V), kWholeWarp = 32 * kWholeThread;
  const auto warp_values = [&](int w) {
    if constexpr (!kPartial) return kWholeWarp;
    int n = 0;
#pragma unroll
    for (int k = 0; k < G::vectors; ++k)  // warp w's threads' vectors k
      n += std::min(std::max(my_vectors - k * G::threads - w * 32, 0), 32);
    return T(n * V);
  };
  const T thread_values = kPartial ? T(owned * V) : kWholeThread;
  rows::PublishedRow<kLaneWords> published[kWords];
  for (int64_t i = 0; i <= my_rows; ++i) {
    const int64_t j = i - 1;  // the row written this iteration, once the group's partials are in
    // The first warp's loads of row j's words are in flight while the block reduces row i.
    if (j >= 0 && warp == 0) {
#pragma unroll
      for (int c = 0; c < kWords; ++c) published[c].fetch(words_of(j) + c * q.blocks, q.blocks);
    }
    if (i < my_rows) {                   // row i: this block's partial, published
      async_copy::wait<G::ahead - 1>();  // this thread's copies of row i have landed
      Vec* const s = ring.slot(i);
      if constexpr (kLayer && sizeof(S) == 2) {
        // One pass over the thread's values, about its first one (h0): their sums of differences
        // d and of squares d2, so the thread's part is {h0, d, d2 - d * d / n}. The lanes' parts
        // meet by Chan's formula (merge_moments) about lane 0's mean, so that rows with a large
        // mean keep their variance. Not about lane 0's h0: a row whose first value lies far out
        // then has its offsets from it summed, and its mean lost their low bits (bf16 rows of
        // 16384, the first value 250 over values in +-3, taken by this kernel in a trial at
        // 14:41Z: a saved mean of 0.0015869 for 0.0015766, FirstElementFarFromTheRest).
        T h0 = 0, d = 0, d2 = 0;
#pragma unroll
        for (int k = 0; k < G::vectors; ++k) {
          if constexpr (kPartial) {
            if (k >= owned) break;
          }
          T h[V];
          widen(s[k * G::threads + t], h);
          if (k == 0) h0 = h[0];
#pragma unroll
          for (int e = 0; e < V; ++e) {
            const T x = h[e] - h0;
            d += x;
            d2 += x * x;
          }
        }
        // (A thread, or a warp, that owns no vectors has a part of no values, left out.)
        const Moments<T> mine{h0, d, d2 - d * (d / thread_values)};
        const T base = __shfl_sync(0xffffffffu, h0 + d / thread_values, 0);
        const Moments<T> warp_part =
            merge_lane_moments(base, thread_values, warp_values(warp), 32, mine);
        if (lane == 0) {
          warp_sums[i & 1][0][warp] = warp_part.shift;
          warp_sums[i & 1][1][warp] = warp_part.d;
          warp_sums[i & 1][2][warp] = warp_part.m2;
        }
      } else {
        T sum = 0;
        // kResidual: h = x + residual, as residual_out holds it (combine), over the staged x.
        [[maybe_unused]] S* const h_out =
            kResidual && p.residual_out.data
                ? static_cast<S*>(p.residual_out.data) +
                      rows::row_offset_cold(w, p.residual_out, row_of(i)) + first
                : nullptr;
#pragma unroll
        for (int k = 0; k < G::vectors; ++k) {
          if constexpr (kPartial) {
            if (k >= owned) break;
          }
          T h[V];
          if constexpr (kResidual) {
            Vec hv = s[k * G::threads + t];
            T r[V];
            widen(hv, h);
            widen(s[ring.kShare + k * G::threads + t], r);
#pragma unroll
            for (int e = 0; e < V; ++e) {
              hv.v[e] = Traits::from_compute(h[e] + r[e]);
              h[e] = Traits::to_compute(hv.v[e]);
            }
            s[k * G::threads + t] = hv;
            if (h_out) {
              uint4 bits;
              memcpy(&bits, &hv, sizeof bits);
              __stcs(reinterpret_cast<uint4*>(h_out + (k * G::threads + t) * V), bits);
            }
          } else {
            widen(s[k * G::threads + t], h);
          }
#pragma unroll
          for (int e = 0; e < V; ++e) sum += kLayer ? h[e] : h[e] * h[e];
        }
        sum = rows::lanes_reduce(sum, rows::Plus{}, 32);
        if constexpr (kLayer) {
          // The warp's mean is the shift of its sums of differences (read from the slot again).
          const T shift = sum / warp_values(warp);
          T d = 0, d2 = 0;
#pragma unroll
          for (int k = 0; k < G::vectors; ++k) {
            if constexpr (kPartial) {
              if (k >= owned) break;
            }
            T h[V];
            widen(s[k * G::threads + t], h);
#pragma unroll
            for (int e = 0; e < V; ++e) {
              const T x = h[e] - shift;
              d += x;
              d2 += x * x;
            }
          }
          d = rows::lanes_reduce(d, rows::Plus{}, 32);
          d2 = rows::lanes_reduce(d2, rows::Plus{}, 32);
          if (lane == 0) {
            warp_sums[i & 1][0][warp] = shift;
            warp_sums[i & 1][1][warp] = d;
            warp_sums[i & 1][2][warp] = d2 - d * (d / warp_values(warp));
          }
        } else if (lane == 0) {
          warp_sums[i & 1][0][warp] = sum;
        }
      }
      __syncthreads();
      if (warp == 1) {
        if constexpr (kLayer) {
          const int from = lane % kWarps;
          const Moments<T> mine{warp_sums[i & 1][0][from], warp_sums[i & 1][1][from],
                                warp_sums[i & 1][2][from]};
          const Moments<T> block = merge_lane_moments(warp_sums[i & 1][0][0], warp_values(from),
                                                      T(my_vectors * V), kWarps, mine);
          if (lane == 0) {
            unsigned long long* to = words_of(i) + rank;
            rows::publish(to, block.shift, q.tag);
            rows::publish(to + q.blocks, block.d, q.tag);
            rows::publish(to + 2 * q.blocks, block.m2, q.tag);
          }
        } else {
          const T sum =
              rows::lanes_reduce(warp_sums[i & 1][0][lane % kWarps], rows::Plus{}, kWarps);
          if (lane == 0) rows::publish(words_of(i) + rank, sum, q.tag);
        }
      }
    }
    if (j >= 0) {
      if (warp == 0) {
        if constexpr (kLayer) {
#pragma unroll
          for (int c = 0; c < kWords; ++c)
            published[c].wait(words_of(j) + c * q.blocks, q.blocks, q.tag);
          const T base = __shfl_sync(0xffffffffu, published[0].value(0), 0);  // block 0's shift
          const Moments<T> row =
              merge_moments<kLaneWords>(base, count, 32, [&](int k, Moments<T>& m, T& n) {
                const int b = lane + 32 * k;
                if (b >= q.blocks) return false;
                m = {published[0].value(k), published[1].value(k), published[2].value(k)};
                n = T(block_vectors(b) * V);
                return true;
              });
          const T center = row.d / count;
          // row.m2 is the sum of squares about the mean: no centre to take off.
          const T rstd = math::stats::layer_norm_stats<T>(T(0), row.m2, count, eps).rstd;
          if (lane == 0) {
            row_stats[j & 1][0] = rstd;
            row_stats[j & 1][1] = base;
            if (rank == 0) {
              const int64_t r = row_of(j);
              if (p.mean.data)
                static_cast<T*>(p.mean.data)[rows::row_offset_cold(w, p.mean, r)] = base + center;
              if (p.rstd.data)
                static_cast<T*>(p.rstd.data)[rows::row_offset_cold(w, p.rstd, r)] = rstd;
            }
          }
          if (lane == 1) row_stats[j & 1][2] = center * rstd;
        } else {
          const T total = published[0].sum(words_of(j), q.blocks, q.tag);
          if (lane == 0) row_stats[j & 1][0] = math::stats::rms_rstd<T>(total, count, eps);
        }
      }
      __syncthreads();
      const T rstd = row_stats[j & 1][0];
      Vec* s = ring.slot(j);
      S* out = static_cast<S*>(p.out.data) + rows::row_offset_cold(w, p.out, row_of(j)) + first;
      const bool restage = i + G::ahead < my_rows;  // row i + 2 takes row j's slot
      const S* next = restage ? x_row(i + G::ahead) : nullptr;
      // Row j's residual share was read in its statistics pass, before this row's barriers.
      [[maybe_unused]] const S* next_residual = nullptr;
      if constexpr (kResidual) next_residual = restage ? residual_row(i + G::ahead) : nullptr;
      // The output pass; kBoth (16-bit layer norm with a weight and a bias): the operands loaded
      // unconditionally and applied by one FMA. With their presence known only at run time the
      // f16 kernel spent two byte permutes an element merging predicated loads and a multiply and
      // an add apart (SASS, sm_90): 825 instructions a thread a row against the RMS norm's 416.
      const auto output_pass = [&](auto act, auto both) {
        constexpr bool kBoth = decltype(both)::value;
        const bool has_weight = kBoth || weight_share, has_bias = kBoth || bias_share;
        // The layer norm's y = (h - shift) * rstd - center * rstd, then the affine.
        const T shift = kLayer ? row_stats[j & 1][1] : T(0);
        const T scaled_center = kLayer ? row_stats[j & 1][2] : T(0);
        // The layer norm's weight and bias vectors, kAffine slots at a time, loaded from L2 in
        // program order (rows::load_in_order): hoisting all of them spilled.
        constexpr int kAffine = sizeof(S) == 4 ? 2 : 1;
        [[maybe_unused]] Vec affine[kLayer ? 2 : 1][kAffine];
#pragma unroll
        for (int k = 0; k < G::vectors; ++k) {
          if constexpr (kPartial) {
            if (k >= owned) break;
          }
          const Vec hv = s[k * G::threads + t];
          Vec wv, bv;
          if constexpr (kLayer) {
            if (k % kAffine == 0) {
#pragma unroll
              for (int a = 0; a < kAffine; ++a) {
                if constexpr (kPartial) {
                  if (k + a >= owned) break;
                }
                const int64_t at = ((k + a) * G::threads + t) * V;
                if (has_weight) affine[0][a] = rows::load_in_order<Vec>(weight_share + at);
                if (has_bias) affine[1][a] = rows::load_in_order<Vec>(bias_share + at);
              }
            }
            wv = affine[0][k % kAffine];
            bv = affine[1][k % kAffine];
          } else {
            wv = weight[k];
          }
          uint4 bits;
          if constexpr (kPairs) {
            T y[V];
            widen(hv, y);
#pragma unroll
            for (int e = 0; e < V; ++e)
              y[e] = kLayer ? (y[e] - shift) * rstd - scaled_center : y[e] * rstd;
            if constexpr (kBoth) {
              T wk[V], bk[V];
              widen(wv, wk);
              widen(bv, bk);
#pragma unroll
              for (int e = 0; e < V; ++e) y[e] = fmaf(y[e], wk[e], bk[e]);
            } else {
              if (has_weight) {
                T wk[V];
                widen(wv, wk);
#pragma unroll
                for (int e = 0; e < V; ++e) y[e] *= wk[e];
              }
              if (kLayer && has_bias) {
                T bk[V];
                widen(bv, bk);
#pragma unroll
                for (int e = 0; e < V; ++e) y[e] += bk[e];
              }
            }
#pragma unroll
            for (int e = 0; e < V; ++e) y[e] = act(y[e], Prim{});
            bits = bf16::narrow_pairs(y);
          } else {
            Vec yv;
#pragma unroll
            for (int e = 0; e < V; ++e) {
              const T h = Traits::to_compute(hv.v[e]);
              T y = kLayer ? (h - shift) * rstd - scaled_center : h * rstd;
              if constexpr (kBoth) {
                y = y * Traits::to_compute(wv.v[e]) + Traits::to_compute(bv.v[e]);  // one FMA
              } else {
                if (has_weight) y *= Traits::to_compute(wv.v[e]);
                if (kLayer && has_bias) y += Traits::to_compute(bv.v[e]);
              }
              yv.v[e] = Traits::from_compute(act(y, Prim{}));
            }
            memcpy(&bits, &yv, sizeof bits);
          }
          ring.write(s, k, out, bits, restage, next, hv, next_residual);
        }
      };
      with_activation(p.act, [&](auto act) {
        if constexpr (kLayer && sizeof(S) == 2) {
          if (weight_share && bias_share) return output_pass(act, std::true_type{});
        }
        output_pass(act, std::false_type{});
      });
    } else if (i + G::ahead < my_rows) {
      stage(i + G::ahead);
    }
    async_copy::commit();
  }
}

// launch_grid_rows's launch of `blocks` blocks a row (kPartial: rows that are not a whole number
// of shares).
template <class S, bool kPartial>
bool launch_grid_kernel(const Plan& p, int64_t blocks, int32_t device, cudaStream_t stream) {
  using G = GridPolicy;
  // Three words a block a row for the layer norm (Moments), one for the RMS norm.
  // The RMS norm's rows of up to 32 blocks (16-bit rows of 262144, f32 rows of up to 262144)
  // take the instance that holds one word a lane. H200 A/B (2026-11-30 16:15Z, kf-bench
  // `--filter rms_norm,layer_norm --lengths 65536,131072,262144`, same call, two passes each), %
  // of copy, rows of 262144: RMS norm f16 82.5 / 82.0 -> 83.8 / 83.8, bf16 83.9 / 84.1 -> 84.2 /
  // 83.7, f32 85.5 / 84.5 -> 84.6 / 84.9; the shorter rows within 2.2 either way. The layer
  // norm's instance with one word a lane lost 4 % (f16) and 7 % (bf16) over the same rows, so it
  // keeps kLayerLaneWords.
  const char* const what = "norm kernel launch";
  if (p.kind == Kind::layer) {
    if constexpr (kPartial && sizeof(S) == 2) {
      return false;  // not taken (launch_grid_rows), so not built
    } else {
      return rows::launch_grid_groups<&grid_norm_kernel<S, true, kLayerLaneWords, false, kPartial>,
                                      G::threads, G::smem>(p, blocks, 3, device, stream, what);
    }
  }
  if (p.residual.data) {
    constexpr size_t kSmem = 2 * G::smem;  // x's and the residual's shares a slot
    if (blocks <= 32)
      return rows::launch_grid_groups<&grid_norm_kernel<S, false, 1, true, kPartial>, G::threads,
                                      kSmem>(p, blocks, 1, device, stream, what);
    return rows::launch_grid_groups<&grid_norm_kernel<S, false, rows::kLanesWords, true, kPartial>,
                                    G::threads, kSmem>(p, blocks, 1, device, stream, what);
  }
  if (blocks <= 32)
    return rows::launch_grid_groups<&grid_norm_kernel<S, false, 1, false, kPartial>, G::threads,
                                    G::smem>(p, blocks, 1, device, stream, what);
  return rows::launch_grid_groups<&grid_norm_kernel<S, false, rows::kLanesWords, false, kPartial>,
                                  G::threads, G::smem>(p, blocks, 1, device, stream, what);
}

// Runs the grid-group kernel where it takes the rows: the layer norm, and the RMS norm without a
// bias (with a residual or without), f32 and 16-bit rows of at least GridPolicy::min_row_bytes
// in whole 16-byte vectors, up to 32 * rows::kLanesWords blocks' shares (the layer norm's up to
// 32 * kLayerLaneWords), on sm_90 (where it was measured), when a group fits on the device at
// once and the plan carries the scratch (Plan::pool, Plan::grid); false otherwise. Rows that are
// not a whole number of shares take the kPartial instances. The caller has checked that the rows
// are dense and 16-byte aligned and that rows < kMaxColdRows.
template <class S>
bool launch_grid_rows(const Plan& p, int32_t device, cudaStream_t stream) {
  using G = GridPolicy;
  if ((p.kind == Kind::rms && p.bias.data) || !p.dense) return false;
  const int64_t row_bytes = p.walk.row_length * int64_t{sizeof(S)};
  // Rows that are not whole shares (kPartial), where they measured faster than the kernels they
  // had. H200 A/B (2026-12-03 16:31Z, kf-bench, same call, two passes), % of copy, before ->
  // kPartial: RMS norm f32 rows of 20000 / 40000 / 100000 / 200000 74 / 72 / 69 / 67 -> 77 / 81
  // / 81 / 82, f16 and bf16 rows of 40000 / 100000 / 200000 75 / 67 / 64 and 67 / 68 / 63 -> 76
  // / 79 / 81 and 76 / 79 / 80; with a residual f32 rows of 40000 / 100000 / 200000 80 / 73 / 62
  // -> 84 / 83 / 84, 16-bit rows of 100000 / 200000 71-72 / 65-67 -> 80 / 82-83; the f32 layer
  // norm's rows of 40000 / 100000 / 200000 63 / 59 / 57 -> 70 / 68 / 69. Left out: the 16-bit
  // layer norm's (f16 rows of 40000 / 100000 61 / 62 -> 53 / 55, bf16 57 / 58 -> 55 / 56), and
  // the f32 layer norm's and RMS norm's with a residual under three shares (rows of 20000: 65 ->
  // 63 and 81 -> 77; rows of 24000 gained about 1 point).
  const bool partial = row_bytes % G::share_bytes != 0;
  if (partial) {
    if (p.kind == Kind::layer && sizeof(S) == 2) return false;
    if (sizeof(S) == 4 && (p.kind == Kind::layer || p.residual.data) &&
        row_bytes < 3 * G::share_bytes)
      return false;
  }
  const int64_t blocks = rows::grid_blocks_a_row(
      p.walk.row_length, sizeof(S),
      32 * (p.kind == Kind::layer ? kLayerLaneWords : rows::kLanesWords), true);
  if (blocks == 0) return false;
  return partial ? launch_grid_kernel<S, true>(p, blocks, device, stream)
                 : launch_grid_kernel<S, false>(p, blocks, device, stream);
}

// Runs the staged kernel when the rows fit it (16-bit and 32-bit types); false otherwise.
template <class S>
bool launch_staged(const Plan& p, int32_t device, cudaStream_t stream) {
  if constexpr (sizeof(S) > 4) {
    return false;
  } else {
    if (p.walk.rows >= rows::kMaxColdRows) return false;  // row offsets in 32 bits (rows.hpp)
    // Where staging pays, measured against the register-cached kernel on an H200 (2026-11-26,
    // kf-bench, same run): rows of 2..32 KiB (bf16 1024..16384, f32 4096; before the cached
    // kernel prefetched) and rows with a residual gained 15..45 %; rows of <= 1 KiB and 64 KiB
    // rows without a residual lost 5..45 % (64 KiB leaves a block per SM); rows past 64 KiB need
    // the cluster path (5..7x over streaming). Later runs moved rows back to the cached kernel:
    // 16-bit rows up to 32 KiB, for which it now prefetches the next row (rows::tile_prefetches):
    // f16 / bf16 rows of 1024, 4096 and 16384 went from 68 / 56 / 69 % of copy to 88 / 76 / 83 %
    // (RMS norm) and from 50 / 40 / 53 % to 77 / 57 / 60 % (layer norm), and 16-bit rows with a
    // residual up to 16 KiB (past that the cached kernel then spilled): RMS norm with a residual,
    // rows of 4096, from 73 / 70 % to 86 / 86 % (10:45Z); and f32 rows up to 4 KiB
    // without a residual (10:39Z): rows of 1024 went from 67 to 90 % (RMS) and from 65 to 87 %
    // (layer norm), the 32x512x768 seed from 66 to 74 and from 59 to 68 %. f32 rows of 4096
    // stayed 1-2 points faster staged while the cached kernel spilled; without the spills
    // (rows::row_offset_cold) f32 rows up to 16 KiB, with or without a residual, run cached
    // (H200, 12:37Z, same call): rows of 4096 from 67 to 78 % (layer norm), 77 to 87 % (RMS) and
    // 85 to 89 % (RMS with a residual), the 2048x2048 seed from 35 to 40 % (layer norm).
    // The staged kernel holds one block of rows with a residual an SM (12.5 % occupancy; Nsight
    // Compute, 2026-12-03 08:05Z: DRAM 48 %, no warp eligible in 53 % of cycles). Now that the
    // cached form with a residual fits (ptxas sm_90, 512 threads a row: 16-bit 120 / 128
    // registers, no spills; f32 rows of 16384 spill 32 bytes), 16-bit rows with a residual up to
    // 32 KiB and f32 ones up to 64 KiB run cached. H200 A/B (2026-12-03 09:30Z, kf-bench, same
    // call, two passes), RMS norm with a residual, % of copy: rows of 12288 / 16384, f16 81.3 /
    // 67.0 -> 86.3 / 85.9, bf16 80.6 / 67.9 -> 86.6 / 85.1; f32 rows of 8192 / 12288 / 16384
    // 75.6 / 82.5 / 80.9 -> 89.9 / 90.6 / 89.3. f32 rows of 16..32 KiB without a residual stay
    // staged: cached in the same call they lost (rows of 8192: layer norm 82.1 -> 58.6, RMS norm
    // 85.6 -> 66.6).
    const int64_t row_bytes = p.walk.row_length * int64_t{sizeof(S)};
    if (row_bytes <= 1024) return false;
    if (sizeof(S) == 4 && row_bytes <= (p.residual.data ? 64 : 16) * 1024) return false;
    if (sizeof(S) == 2 && row_bytes <= 32 * 1024) return false;
    // f32 rows of 8193..16384 without a residual run cached (512 threads a row). 16-bit rows of
    // the same bytes (16385..32768 elements) are longer than any cached policy holds and are
    // staged, one block a row (in one rolling buffer: rows::StagedPolicy::rolling_row_bytes):
    // left out here they fell to the streaming kernel (H200 sweep,
    // 2026-11-29 21:58Z, bf16 rows of 20000: layer norm 9.3 %, RMS norm 11.7 % of copy).
    if (sizeof(S) == 4 && !p.residual.data && row_bytes > 32 * 1024 &&
        row_bytes <= rows::StagedPolicy::slice_bytes)
      return false;
    // The rows left here of 64 KiB and more that are whole grid-group shares (16-bit rows from
    // 64 KiB, f32 rows past 64 KiB, which run cached up to there) take the grid-group kernel.
    // Before, 16-bit rows of 64 KiB ran one block a row (staged) and longer rows in clusters of
    // 64 KiB slices, below the grid-group kernel's rate, which holds at every length. H200 A/B
    // (2026-12-03 15:02Z, kf-bench, same call, two passes), % of copy, before -> after; f32 rows
    // of 24576 / 32768 / 49152 (rows of 65536 took the kernel already), 16-bit rows of 32768 /
    // 49152 / 65536: layer norm (weight, bias, ReLU) f32 71.3-71.5 / 70.6-71.0 / 68.9-69.0 ->
    // 74.0-75.2 / 74.0-75.2 / 73.1-74.5, f16 69.0-69.4 / 64.9 / 64.3-64.4 -> 72.9-73.5 /
    // 72.4-73.2 / 72.4-73.1, bf16 67.7-67.9 / 59.3-59.6 / 60.2-60.3 -> 72.0-72.1 / 71.3 / 71.3;
    // RMS norm f32 78.0-78.3 / 76.6-76.7 / 76.2-76.4 -> 80.5-80.6 / 80.9-81.3 / 81.5-82.3, f16
    // 65.3-67.9 / 73.6-73.9 / 75.1 -> 81.2 / 80.6-80.9 / 81.1-81.4, bf16 65.1-68.7 / 70.2-71.0 /
    // 70.1-70.3 -> 82.1-82.2 / 81.3-81.8 / 82.5-82.8; with a residual f32 80.7 / 81.0-81.1 /
    // 80.5-80.8 -> 82.1-82.9 / 82.2-83.2 / 82.5-83.7, f16 77.8-78.1 / 75.0 / 75.1-75.2 ->
    // 81.6-82.1 / 81.7-82.6 / 82.7-82.8, bf16 77.8-77.9 / 74.9-75.0 / 75.1-75.3 -> 81.8-81.9 /
    // 82.4-82.6 / 82.6-83.6. The cached rows stay cached: with the kernel from 32 KiB (a trial,
    // 14:41Z) they lost, f32 rows of 16384 layer norm 86.1-86.3 -> 75.0-75.3, RMS norm 86.3-87.3
    // -> 81.8-82.0, with a residual 89.4-89.5 -> 82.8-83.0; f16 rows of 16384 84.7 / 88.0 /
    // 85.8-86.2 -> 74.9-75.0 / 80.8-81.1 / 81.7-82.0; and so did the f32 rows of 8192 staged
    // (32 KiB), 82.2-82.6 / 85.4 -> 75.9-76.4 / 81.6-81.9.
    if (launch_grid_rows<S>(p, device, stream)) return true;
    // The RMS norm's weight (without a residual) stays resident in the clustered kernel, for rows
    // past 64 KiB that fit 16 blocks of 64 KiB with it (x's slice and the weight's: twice the
    // blocks): f16 rows everywhere, bf16 rows where the SMs are not rows::tile_issue_lean.
    // kf-bench, RMS norm, 256 rows of 262144 (the one length measured), % of copy,
    // weight from L2 -> resident (same calls, 2026-11-27): H100 (16:15Z, two passes) f16 69.3 /
    // 69.3 -> 82.6 / 82.5, bf16 72.8 / 74.6 -> 80.4 / 80.1; H200 (16:27Z, three passes) f16
    // 60.8 / 60.9 / 63.0 -> 70.4 / 69.7 / 69.9, bf16 64.4 / 66.3 / 63.2 -> 62.0 / 61.4 / 62.1.
    // Not the layer norm: its weight and bias both resident took 96 KiB blocks, two per SM
    // (H100: f16 69.8 -> 66.3, bf16 69.9 -> 62.3), and the weight alone, the bias from L2, lost
    // on the H200 (f16 59.6 -> 51.6, bf16 55.6 -> 50.3).
    // Where the SMs are not issue-lean, that kernel also restages the next row inside the output
    // pass (rows::for_each_tile). H100 A/B (2026-11-27 17:00Z, kf-bench, same call, three
    // passes), RMS norm, rows of 262144, % of copy, after the pass -> in it: f16 81.9 / 82.1 /
    // 81.8 -> 83.6 / 83.6 / 83.5, bf16 80.4 / 80.8 / 80.5 -> 82.7 / 82.9 / 83.1; the layer norm
    // lost with it (f16 71.5 / 69.2 / 70.5 -> 67.3 / 67.6 / 67.7) and keeps the order it has.
    const bool lean = rows::tile_issue_lean(device);
    const bool resident = sizeof(S) == 2 && p.kind == Kind::rms && p.weight.data && !p.bias.data &&
                          !p.residual.data && (std::is_same_v<S, math::half_t> || !lean);
    const int inputs = p.residual.data ? 2 : 1;
    // Rows with a residual past what portable clusters of 128 KiB slices hold (f32 rows past
    // 131072, 16-bit past 262144) and that the grid-group kernel leaves (launch_grid_rows: since
    // its partial shares, only where it cannot launch) take clusters of up to 16 such slices where
    // the device holds one (rows::large_cluster_limit); else the streaming kernel runs them, a
    // block a row. H200
    // A/B (2026-12-03 10:32Z, before the grid-group kernel took any residual; kf-bench, same call,
    // two passes), RMS norm with a residual, % of copy, streaming -> clusters: f32 rows of 200000 /
    // 262144 26.7 / 21.5-21.6 -> 62.1-62.4 / 65.8-69.0 (13 and 16 blocks), f16 / bf16 rows of
    // 524288 12.4-12.5 -> 45.3-48.6 / 44.4-47.7; every other row within 2 points.
    const bool large = p.residual.data != nullptr;
    if constexpr (std::is_same_v<S, math::half_t>) {
      if (lean)
        return rows::stage_and_launch<staged_kernel<S, false>, staged_kernel<S, true>,
                                      resident_kernel<S, false>()>(
            p, p.walk, sizeof(S), inputs, device, stream, "norm kernel launch", resident ? 1 : 0,
            large);
    }
    return rows::stage_and_launch<staged_kernel<S, false>, staged_kernel<S, true>,
                                  resident_kernel<S, true>()>(p, p.walk, sizeof(S), inputs, device,
                                                              stream, "norm kernel launch",
                                                              resident ? 1 : 0, large);
  }
}

// Runs the shifted staged kernel (staged_kernel's kShifted) for rows that launch_staged would
// stage but for their 16-byte vectors, whose row operands launch has found in phase with x
// (rows::rows_in_phase), in the staged kernel's order (no weight kept resident); false
// otherwise, and for the rows that launch_staged leaves to the register-cached kernel, which
// takes rows of any alignment. The rows are planned as rows of the length rounded up to whole
// vectors: a row staged from its first 16-byte boundary fills no more of them.
template <class S>
bool launch_shifted(const Plan& p, int32_t device, cudaStream_t stream) {
  if constexpr (sizeof(S) > 4) {
    return false;
  } else {
    if (p.walk.rows >= rows::kMaxColdRows || p.walk.row_length <= rows::kMaxTileRow) return false;
    constexpr int64_t V = 16 / sizeof(S);
    rows::Walk whole = p.walk;
    whole.row_length = (whole.row_length + V - 1) / V * V;
    // Every row here is longer than 16384 elements (kMaxTileRow), so that a 16-bit row of one
    // operand is staged in one rolling buffer (rows::StagedPolicy::rolling_row_bytes) and longer
    // ones by clusters. The layer norm's 16-bit rows of up to 56 KiB had kept the streaming
    // kernel, which had beaten two buffers (H200, 2026-12-02 02:16Z: rows of 20001 / 30522 /
    // 32001, f16 36.3 / 32.5 / 34.4 -> 35.2 / 28.0 / 29.3). One rolling buffer beats both:
    // kf-bench, H200, 07:52Z, the streaming kernel -> the shifted staged kernel in the same call
    // (two passes each), % of copy, rows of 20001 / 24001 / 27001, f16 36.3 / 34.4 / 34.8 ->
    // 42.1 / 42.4 / 43.2, bf16 30.5 / 29.6 / 29.4 -> 40.8 / 42.1 / 42.6.
    const int inputs = p.residual.data ? 2 : 1;
    return rows::stage_and_launch<
        staged_kernel<S, false, false, false, true>,
        staged_kernel<S, true, false, rows::StagedPolicy::restages_in_pass<S>(), true>>(
        p, whole, sizeof(S), inputs, device, stream, "norm kernel launch");
  }
}

// Whether the form with a residual for policy P and storage S has a build for three blocks per
// SM, which launch_cached takes where the SMs are not rows::tile_issue_lean: f16 rows of
// 2049..4096 (a 256-thread block a row, 16 elements a thread; 76 registers and no spills, where
// the two-block build takes 85). Not bf16, which gained nothing. kf-bench, RMS norm with a
// residual over 8192 rows of 4096, % of copy, two blocks -> three (same calls, three passes,
// 2026-11-27): H100 (14:32Z) f16 88.5-88.6 -> 89.8-90.2, bf16 86.9-87.0 -> 86.8-87.1 (squeezed
// from 96 registers to 80); H200 (14:26Z) f16 86.2-86.6 -> 81.6-82.1, bf16 86.1-86.5 -> 78.4-79.0.
template <class P, class S>
constexpr bool residual_takes_three_blocks() {
  return std::is_same_v<S, math::half_t> && P::vec == 8 && P::items == 16 && P::threads == 256 &&
         P::group == P::threads;
}

// The four-block build of the common form (rows::tile_lean_blocks: f32 rows of 16 elements a
// thread on 256-thread blocks, on issue-lean devices). Nsight Compute on an H200 (2026-11-29
// 08:45Z, 8192 rows of 4096) had the f32 softmax at 64 registers and four blocks reading 78.5 %
// of DRAM bandwidth, the layer norm and RMS norm at 80 registers and three blocks 69.8 and
// 74.0 %. H200 A/B (09:02Z, kf-bench, one library with both builds, same call, two passes), f32,
// % of copy, three blocks -> four: layer norm rows of 64 89.1 / 89.1 -> 92.3 / 92.4, of 256
// 89.5 / 89.6 -> 92.2 / 92.5 (08:54Z), of 4096 82.8 / 83.0 -> 90.0 / 90.1; RMS norm rows of
// 4096 88.4 / 88.6 -> 92.0 / 92.3; rows of 1024 and 16384 (other policies) within 0.5, those of
// 262144 (the clustered kernel) within their run-to-run spread of 2. The f32 128-thread policy
// (rows of 1025..2048) compiled for eight blocks moved nothing (the 2048x2048 seeds: layer norm
// 53.7 / 54.4 -> 54.3 / 54.4, RMS norm 56.9 / 57.2 -> 57.1 / 56.7), and keeps six.
// The same switch takes 16-bit rows of 4097..8192 (512 threads at 16 elements each) from one
// block an SM to two (rows::tile_lean_blocks has the A/B: rows of 8192 +10 to +17 points).
// The common form's kernels, for rows::launch_common_tile_kernel (kBlocks as for cached_kernel).
template <class P, class S, int kBlocks = 0>
struct CommonCached {
  template <bool kStage>
  static constexpr auto kernel = cached_kernel<P, S, false, kStage, kBlocks>;
};

// The layer norm's build for bf16 rows that widens row, weight and bias in word pairs
// (rows::widen_bf16_pairs: an IMAD and a LOP3 a word where element by element takes two ALU-pipe
// instructions), compiled for half as many resident blocks again (without that bound the pairs
// took 90 registers where the other build takes 80, a block fewer per SM). launch_cached takes it
// where the SMs are rows::tile_issue_lean, for the policies of 16 elements a thread of up to 256
// threads (rows of up to 512 and of 1025..2048). kf-bench on an H200 (2026-11-27 21:52Z, same
// call, three passes), % of copy, element by element -> this build: layer norm bf16 rows of 64 /
// 128 / 256 / 512 / 2048 76.2 / 75.5 / 75.5 / 74.7 / 68.6 -> 86.8 / 86.0 / 86.1 / 85.4 / 81.5,
// the 2048x2048 seed 35.9 -> 38.6; rows of 1024 and 4096 (other policies) and every RMS norm row
// within 0.4. Not the RMS norm (an earlier build of this kind for both norms, 21:30Z: RMS norm
// rows of 64 87.2 -> 83.2), nor the other policies, where widening in pairs lost on both cards
// (see rows::pairs_widen).
// (Of bf16's 16-element policies, a 256-thread block a row is never picked on such SMs: rows of
// up to 2048 take 128 threads, longer ones the wide form; so no build of it.)
template <class P, class S>
constexpr bool layer_takes_pairs() {
  return rows::pairs_widen<P, S>() && P::items <= 16 && P::group < 256 && P::threads <= 256;
}
template <class P, class S>
struct LayerPairs {
  template <bool kStage>
  static constexpr auto kernel =
      cached_kernel<P, S, false, kStage, rows::tile_min_blocks<P, S>() * 3 / 2, true>;
};

// The layer norm's build for bf16 rows of 32 elements a thread over a block (rows of 2049..4096
// in the wide form, 8193..16384) that widens the weight and bias in word pairs and the row
// element by element, which launch_cached takes where the SMs are rows::tile_issue_lean. In
// pairs half of the widening moves from the ALU pipe to the FMA pipe (rows::widen_bf16_pairs);
// the ALU pipe is what bounds these kernels there (Nsight Compute, H200, 2026-11-29, rows of
// 4096: 70 % of its peak, 23.6 instructions a thread an element). The row itself stays element
// by element: in pairs it lost (see rows::pairs_widen; H200 2026-11-29 09:35Z, rows of 4096
// 77.8 -> 66.7). Same registers (128), no spills. kf-bench on an H200 (10:02Z, one library
// with both builds, same call, two passes), layer norm bf16, % of copy, element by element ->
// this build: rows of 4096 77.7 / 77.9 -> 83.9 / 83.8, of 16384 70.0 / 70.1 -> 77.8 / 77.8.
// Rows of 4097..8192 (16 elements a thread) were not measured and keep the common form, as do
// devices that are not issue-lean and the RMS norm (no bias; at 86-87 % there). launch_cached
// also takes this build for the staged bf16 policies of 40 and 48 elements a thread.
template <class P, class S>
constexpr bool layer_takes_affine_pairs() {
  return rows::pairs_widen<P, S>() && P::items == 32 && P::group == P::threads;
}
template <class P, class S>
struct LayerAffinePairs {
  template <bool kStage>
  static constexpr auto kernel = cached_kernel<P, S, false, kStage, 0, false, true>;
};

// The layer norm's build for 16-bit rows of 12289..16384 over a 512-thread block (32 elements a
// thread, one block an SM) that holds the weight and bias in shared memory for the launch
// (kSharedAffine, 64 KiB), where the other builds read both from L1/L2 for every row; launch_cached
// takes it for a layer norm with a weight and a bias where the SMs are rows::tile_issue_lean.
// kf-bench on an H200 (2026-12-01 13:36Z and 13:50Z, one library with both, same calls, two
// passes each), layer norm, % of copy, from L1/L2 -> shared: rows of 16384 f16 81.8 / 81.6 /
// 82.1 / 82.1 -> 84.4 / 83.9 / 84.5 / 84.3, bf16 82.6 / 82.7 / 82.5 / 82.8 -> 83.4 / 83.0 / 83.7
// / 83.4. Not f32 (rows of 16384 82.8 / 82.9 / 82.8 / 82.7 -> 82.0 / 81.0 / 81.2 / 81.1, 192 KiB
// a block with the staged row), nor the 24-element policy below it (rows of 8193..12288), which
// moved both ways: rows of 12288 bf16 71.7 / 71.6 / 71.8 / 72.1 -> 74.0 / 73.7 / 73.7 / 73.7, f32
// 83.5 / 84.0 -> 82.2 / 82.2; rows of 10240 f16 72.0 / 71.5 -> 69.8 / 69.6, bf16 63.4 / 63.3 ->
// 62.5 / 62.3, f32 81.2 / 80.7 -> 73.5 / 73.5.
template <class P, class S>
constexpr bool layer_takes_shared_affine() {
  return sizeof(S) == 2 && P::threads == 512 && P::group == P::threads && P::items == 32 &&
         P::vec * sizeof(S) == 16;
}
template <class P, class S>
struct LayerSharedAffine {
  static constexpr size_t smem = size_t{2} * 16 * P::chunks * P::threads;  // weight and bias
  template <bool kStage>
  static constexpr auto kernel =
      cached_kernel<P, S, false, kStage, 0, false, layer_takes_affine_pairs<P, S>(), true>;
};

// The most resident blocks an SM for the cached kernels of policy P and storage S (0: as many as
// fit): three for the 16-bit prefetching policies of 256 threads at 16 elements a thread. Their
// registers, and so how many fit, move with every change to the kernel; four blocks an SM lost
// on the H100 wherever they were measured. H100 A/B (2026-11-27 23:40Z, kf-bench, same call,
// three passes), % of copy, f16 rows of 4096, where the output loop for a weight without a
// bias took the kernel from 72 to 64 registers: layer norm 92.1 / 91.9 / 92.1 -> 83.0 / 83.3 /
// 83.1, RMS norm 93.1 / 93.3 / 93.1 -> 88.3 / 88.5 / 88.2 (and 2026-11-27 00:35Z, the f16
// kernels compiled for four blocks: layer norm 90.9 -> 85.0, RMS norm 93.0 -> 85.1, rows of
// 64 85.2 -> 82.3).
template <class P, class S>
constexpr int cached_max_blocks() {
  return rows::tile_prefetches<P, S>() && P::threads == 256 && P::items == 16 ? 3 : 0;
}

// The same for the form with a residual where the SMs are rows::tile_issue_lean: two blocks of
// a row each for the 256-thread policy, as its registers had left it before the packed sum
// (rows::packed_sum) took bf16's kernel from 95 to 80 registers. Three lost on the H200: A/Bs of
// 2026-11-27 14:26Z (see residual_takes_three_blocks) and 2026-11-28 00:05Z (kf-bench, same
// call, RMS norm with a residual over bf16 rows of 4096, % of copy, 86.3 / 86.3 / 86.3 -> 82.0 /
// 82.1 at 80 registers). With this cap (H200 A/B, 2026-11-28 01:06Z, b041fc2 -> 8680d4c, same
// call, three passes): 86.8 / 86.9 / 86.7 -> 87.0 / 87.0 / 87.1.
template <class P, class S>
constexpr int residual_lean_max_blocks() {
  return P::threads == 256 && P::group == 256 ? 2 : cached_max_blocks<P, S>();
}

template <class S, int V>
bool launch_cached(const Plan& p, int32_t device, cudaStream_t stream) {
  if (p.walk.rows >= rows::kMaxColdRows) return false;  // row offsets in 32 bits (rows.hpp)
  // The RMS norm's 16-bit rows of 4097..6144 of 16-byte vectors with a residual, where the SMs
  // are rows::tile_issue_lean: 320 threads at 16 elements a thread (rows of up to 5120) or 384
  // (5121..6144), compiled for two blocks an SM, instead of with_tile_policy's 512 at 16 (one
  // block an SM; a row of 4104 fills half its 8192 slots). H200 A/B (2026-12-04 about 17:20Z,
  // kf-bench, one library choosing the form by an environment variable, same call, one pass,
  // every row checked `ok`), % of copy, rows of 4104 / 5120 / 5128 / 6144: f16 74.9 / 79.7 /
  // 77.8 / 84.3 -> 88.2 / 86.5 / 87.5 / 86.2, bf16 72.7 / 78.9 / 77.1 / 83.0 -> 88.2 / 86.5 /
  // 87.3 / 86.0. Compiled for three blocks an SM they read 86.1 / 86.3 / 76.0 / 79.1 (f16) and
  // 85.1 / 85.9 / 77.0 / 78.8 (bf16).
  if constexpr (sizeof(S) == 2 && V == 8) {
    const int64_t n = p.walk.row_length;
    if (p.residual.data && n > 256 * 16 && n <= 384 * 16 && rows::tile_issue_lean(device)) {
      if (n <= 320 * 16) {
        using P = rows::TilePolicy<320, 2, 8, 320>;
        rows::launch_tile_kernel<P, S, cached_kernel<P, S, true, true, 2>>(p, p.walk.rows, device,
                                                                           stream, false);
      } else {
        using P = rows::TilePolicy<384, 2, 8, 384>;
        rows::launch_tile_kernel<P, S, cached_kernel<P, S, true, true, 2>>(p, p.walk.rows, device,
                                                                           stream, false);
      }
      return true;
    }
  }
  // The 32-elements-a-thread form for 16-bit rows of 2049..4096 (rows/tile.cuh), without a
  // residual, where the device's SMs issue few instructions per byte (rows::tile_issue_lean):
  // there its per-row work (the block reductions) weighs on twice the elements; elsewhere the
  // 16-elements-a-thread form keeps more rows in flight. kf-bench, 16384 rows of 4096, % of
  // copy, layer norm / RMS norm, f16 and bf16, 16 elements a thread -> 32 (same calls, two
  // passes, 2026-11-27): H200 (11:11Z) f16 79.5 / 85.3 -> 86.2 / 86.3, bf16 68.0 / 78.0 -> 77.4
  // / 84.0; H100 (11:19Z) f16 92.0 / 93.0 -> 86.1 / 87.3, bf16 90.5 / 92.4 -> 84.1 / 84.2. (An
  // H100 A/B of 2026-11-26 16:16Z had made it bf16-only, on every device.)
  const bool wide_form = p.residual.data == nullptr && rows::tile_issue_lean(device);
  // 16-bit rows of 769..1024 without a residual, where the SMs are not rows::tile_issue_lean:
  // a 128-thread block a row at 8 elements a thread (62 registers, eight blocks per SM) instead
  // of with_tile_policy's warp a row at 32 (114-126 registers, two 256-thread blocks per SM).
  // H100 A/B (2026-11-27 14:57Z, kf-bench, same call, two passes), rows of 1024, % of copy,
  // warp -> block: layer norm f16 86.3 / 86.4 -> 87.8 / 87.9, bf16 83.4 / 83.3 -> 86.0 / 86.0;
  // RMS norm f16 87.9 / 88.1 -> 89.8 / 90.5, bf16 86.0 / 85.8 -> 89.8 / 90.3; the other rows
  // within noise. Not measured on an H200, which keeps the warp a row.
  if constexpr (sizeof(S) == 2 && V == 8) {
    const int64_t n = p.walk.row_length;
    if (!p.residual.data && n > 768 && n <= 1024 && !rows::tile_issue_lean(device)) {
      using P = rows::TilePolicy<128, 1, 8, 128>;
      rows::launch_common_tile_kernel<P, S, CommonCached<P, S>>(p, p.walk.rows, device, stream);
      return true;
    }
  }
  // The RMS norm's 16-bit rows of 5121..6144 of 16-byte vectors in the wide form: a block of 384
  // threads at 16 elements a thread, compiled for three blocks an SM (56 registers; the bf16
  // kernel keeps 16 bytes of stack), instead of with_tile_policy's 256 at 24 (two blocks an SM:
  // 512 threads where this holds 1152). H200 A/B (2026-12-04 15:30Z, kf-bench, one library
  // choosing the policy by an environment variable, same call, two passes), % of copy, rows of
  // 5128 / 5632 / 6144, 256 at 24 -> 384 at 16: f16 80.2 / 84.4 / 86.4 -> 89.6 / 90.9 / 86.4,
  // bf16 78.8 / 82.9 / 85.2 -> 87.9 / 90.1 / 87.3; compiled for two blocks an SM (72-80
  // registers) it gained at most 1.2. The layer norm lost 3.4 to 5.6 points with it (its
  // second pass over the row and the affine's bias) and keeps 256 at 24.
  if constexpr (sizeof(S) == 2 && V == 8) {
    const int64_t n = p.walk.row_length;
    if (wide_form && p.kind == Kind::rms && n > 320 * 16 && n <= 384 * 16) {
      using P = rows::TilePolicy<384, 2, 8, 384>;
      rows::launch_common_tile_kernel<P, S, CommonCached<P, S, 3>>(p, p.walk.rows, device, stream);
      return true;
    }
  }
  // The layer norm's bf16 rows of 6145..8192 without a residual, where the SMs are
  // rows::tile_issue_lean: a 256-thread block a row at 32 elements a thread with the affine in
  // word pairs (LayerAffinePairs, as for the rows of 2049..4096 in the wide form) instead of
  // with_tile_policy's 512 threads at 16. H200 A/B (2026-11-29 12:52Z, kf-bench, the library
  // before this launch against the one with it, same call, two passes), layer norm bf16, % of
  // copy: rows of 8192 72.9 / 72.9 -> 85.7 / 85.6, of 6200 57.6 / 57.6 -> 73.8 / 73.6. Only
  // here: taken by every family (11:49Z), the same policy cost the softmax, the RMS norm and the
  // f16 layer norm 0.5-2.2 points at 8192 (RMS norm f16 90.4 -> 88.2), and at 6144 it lost to
  // the 24-element policy (layer norm bf16 73.2 against 76.9).
  if constexpr (std::is_same_v<S, math::bfloat16_t> && V == 8) {
    const int64_t n = p.walk.row_length;
    if (wide_form && p.kind == Kind::layer && n > 256 * 24 && n <= 256 * 32) {
      using P = rows::TilePolicy<256, 4, 8, 256>;
      static_assert(layer_takes_affine_pairs<P, S>(), "the affine in word pairs");
      rows::launch_common_tile_kernel<P, S, LayerAffinePairs<P, S>>(p, p.walk.rows, device, stream,
                                                                    cached_max_blocks<P, S>());
      return true;
    }
  }
  // The layer norm's 16-bit rows of 16-byte vectors in the wide form at 40 or 48 elements a
  // thread, the next row staged in shared memory (rows::tile_prefetches_shared: five or six
  // vectors a thread are more than the registers that hold a row ahead), bf16's weight and bias
  // widened in word pairs (LayerAffinePairs): rows of 4097..5120 on 128 threads (four blocks an
  // SM), 5121..6144 on 160 (three), 8193..8960 on 224 (two), bf16 rows of 8961..10240 on 256
  // (two); at 48, rows of 10241..10752 on 224 and 10753..12288 on 256 (two). They took 320
  // threads at 16, 256 at 24, 320 at 32 and 512 at 24 (with_tile_policy), the next row held in
  // registers. ptxas (sm_90): 119-128 registers, no stack. H200 A/Bs (2026-12-04, kf-bench, one
  // library choosing the form by an environment variable, same call, two passes, best of two),
  // layer norm + ReLU, % of copy:
  //  - 19:13Z, bf16 rows of 4104 / 4608 / 5120: 63.3 / 70.1 / 76.8 -> 76.4 / 85.2 / 86.4; of
  //    5128 / 5632 / 6144: 71.7 / 77.2 / 80.0 -> 74.0 / 82.6 / 85.9 (128 threads at 48 instead:
  //    74.2 / 82.7 / 80.3). 192 threads at 40 for rows of 6145..7680 moved rows of 6200 / 7168 /
  //    7680 within 0.3, so those keep 256 at 32 above.
  //  - 19:22Z, f16: rows of 4104 / 4608 / 5120 69.2 / 76.8 / 83.8 -> 77.3 / 86.5 / 85.3, of 5128
  //    / 5632 / 6144 76.2 / 80.3 / 82.4 -> 75.6 / 84.5 / 87.1.
  //  - 19:01Z, rows of 8200 / 9000 / 10000 / 10240 on 256 at 40: bf16 56.1 / 59.7 / 63.2 / 64.7
  //    -> 71.7 / 77.6 / 84.3 / 86.4; f16 77.2 / 80.6 / 82.8 / 86.0 -> 72.2 / 77.6 / 84.9 / 87.3,
  //    so f16 keeps 320 at 32. The same 320 at 32 compiled for one block an SM (no spills) read
  //    bf16 60.8 / 65.8 / 71.6 / 73.0.
  //  - 19:13Z, rows of 10248 / 11000 / 12288 on 256 at 48: bf16 62.9 / 65.9 / 72.2 -> 71.3 /
  //    75.5 / 82.3, f16 70.7 / 73.7 / 79.2 -> 71.2 / 75.3 / 83.3. The RMS norm moved within 0.8
  //    either way and keeps 512 at 24; the softmax lost with it (19:22Z, rows of 12288 f16 84.1
  //    -> 76.2, bf16 81.6 -> 77.1).
  //  - 19:58Z, 224 threads (fewer slots past the row's end), rows of 8200 / 8704 / 8960 at 40
  //    (against 256 at 40 for bf16, 320 at 32 for f16) and of 10248 / 10752 at 48 (against 256):
  //    bf16 71.3 / 78.6 / 82.7 and 71.3 / 79.7 -> 77.6 / 83.8 / 84.6 and 75.6 / 83.5, f16 77.3 /
  //    82.8 / 83.4 and 71.5 / 79.8 -> 78.3 / 84.9 / 84.6 and 76.4 / 83.9. 96 threads at 48 for
  //    rows of 4097..4608 lost 0.3 to 1.9 (rows of 4352 / 4608, bf16 84.0 / 85.2 -> 83.0 /
  //    84.2) but for f16 rows of 4104 (+0.8), and is not taken.
  //
  // The RMS norm's 16-bit rows of 10241..10752 take the same staged 224 threads at 48 (the common
  // build), instead of with_tile_policy's 512 at 24 (one block an SM); cuobjdump on the GPU: 128
  // registers (bf16 127), no stack. H200 A/B (2026-12-04 21:04Z-21:07Z, kf-bench `--filter
  // rms_norm`, one library choosing the policy by an environment variable, same call, two passes,
  // every row checked `ok`), % of copy, best of two, rows of 10248 / 10752, 512 at 24 -> 224 at
  // 48: f16 78.2 / 80.7 -> 82.7 / 86.6, bf16 77.2 / 79.4 -> 82.1 / 85.5; the rows with a residual
  // (other policies) within 0.6. (256 at 48 for its rows of 10241..12288 had moved them within
  // 0.8.)
  if constexpr (sizeof(S) == 2 && V == 8) {
    const int64_t n = p.walk.row_length;
    // Launches `policy` with the next row staged: the layer norm's build (bf16: the affine in
    // word pairs, LayerAffinePairs) where `layer` is std::true_type, else the common one.
    const auto staged = [&](auto policy, auto layer) {
      using P = decltype(policy);
      static_assert(rows::tile_prefetches_shared<P, S>(), "the next row staged");
      using F = std::conditional_t<decltype(layer)::value && rows::pairs_widen<P, S>(),
                                   LayerAffinePairs<P, S>, CommonCached<P, S>>;
      rows::launch_common_tile_kernel<P, S, F>(p, p.walk.rows, device, stream);
      return true;
    };
    if (wide_form && p.kind == Kind::layer) {
      constexpr std::true_type kLayer;
      constexpr bool kBf16 = std::is_same_v<S, math::bfloat16_t>;
      if (n > 4096 && n <= 128 * 40) return staged(rows::TilePolicy<128, 5, 8, 128>{}, kLayer);
      if (n > 128 * 40 && n <= 6144) return staged(rows::TilePolicy<160, 5, 8, 160>{}, kLayer);
      if (n > 8192 && n <= 224 * 40) return staged(rows::TilePolicy<224, 5, 8, 224>{}, kLayer);
      if (kBf16 && n > 224 * 40 && n <= 256 * 40)
        return staged(rows::TilePolicy<256, 5, 8, 256>{}, kLayer);
      if (n > 256 * 40 && n <= 224 * 48) return staged(rows::TilePolicy<224, 6, 8, 224>{}, kLayer);
      if (n > 224 * 48 && n <= 256 * 48) return staged(rows::TilePolicy<256, 6, 8, 256>{}, kLayer);
    }
    if (wide_form && p.kind == Kind::rms && n > 256 * 40 && n <= 224 * 48)
      return staged(rows::TilePolicy<224, 6, 8, 224>{}, std::false_type{});
  }
  // bf16 rows of 2049..2560 of 16-byte vectors keep the 32-element form (with_tile_policy).
  const bool fill_2560 = !(std::is_same_v<S, math::bfloat16_t> && V == 8);
  // 16-bit rows of 4097..5120 in the wide form take 320 threads at 16 elements, f32 rows of
  // 8193..10240 320 at 32 (kNorm).
  const int64_t length = p.walk.row_length;
  return rows::with_tile_policy<S, V, true>(length, wide_form, fill_2560, [&](auto policy) {
    using P = decltype(policy);
    if (p.residual.data) {
      if constexpr (residual_takes_three_blocks<P, S>()) {
        if (!rows::tile_issue_lean(device)) {
          rows::launch_tile_kernel<P, S, cached_kernel<P, S, true, true, 3>>(
              p, p.walk.rows, device, stream, false, cached_max_blocks<P, S>());
          return;
        }
      }
      rows::launch_tile_kernel<P, S, cached_kernel<P, S, true>>(
          p, p.walk.rows, device, stream, false,
          rows::tile_issue_lean(device) ? residual_lean_max_blocks<P, S>()
                                        : cached_max_blocks<P, S>());
    } else {
      if constexpr (layer_takes_shared_affine<P, S>()) {
        if (p.kind == Kind::layer && p.weight.data && p.bias.data &&
            rows::tile_issue_lean(device)) {
          using F = LayerSharedAffine<P, S>;
          rows::launch_common_tile_kernel<P, S, F>(p, p.walk.rows, device, stream, 0, F::smem);
          return;
        }
      }
      if constexpr (layer_takes_pairs<P, S>()) {
        if (p.kind == Kind::layer && rows::tile_issue_lean(device)) {
          rows::launch_common_tile_kernel<P, S, LayerPairs<P, S>>(p, p.walk.rows, device, stream,
                                                                  cached_max_blocks<P, S>());
          return;
        }
      }
      if constexpr (layer_takes_affine_pairs<P, S>()) {
        if (p.kind == Kind::layer && rows::tile_issue_lean(device)) {
          rows::launch_common_tile_kernel<P, S, LayerAffinePairs<P, S>>(
              p, p.walk.rows, device, stream, cached_max_blocks<P, S>());
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
      rows::launch_common_tile_kernel<P, S, CommonCached<P, S>>(p, p.walk.rows, device, stream,
                                                                cached_max_blocks<P, S>());
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
  const int bytes = rows::row_vector_bytes(
      p.walk, {&p.x, &p.residual, &p.weight, &p.bias, &p.out, &p.residual_out}, sizeof(S));
  // The streaming vector form's condition: every row operand in x's phase, row by row.
  bool in_phase = true;
  for (const rows::Operand* o : {&p.residual, &p.out, &p.residual_out})
    in_phase = in_phase && rows::rows_in_phase(p.walk, p.x, *o, sizeof(S));
  rows::launch_in_order<S, Cached<S>>(
      p, bytes, in_phase, device, stream, &launch_staged<S>,
      [](auto s, int b) { return narrow_cached_launcher(s, b); },
      {&streaming_kernel<StreamPolicy<S, false>, S, false>,
       &streaming_vector_kernel<StreamVectorPolicy<S>, S>,
       &streaming_kernel<StreamPolicy<S, true>, S, true>, StreamPolicy<S, false>::threads},
      "norm kernel launch", &launch_shifted<S>);
}

}  // namespace
}  // namespace kf::norm
