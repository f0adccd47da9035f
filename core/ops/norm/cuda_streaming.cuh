// The norm family's streaming kernels (see core/ops/norm/cuda.cuh for when they run): a block
// per row over global memory, x (and the residual) read twice, for strided rows and for rows
// that neither the register-cached nor the staged kernels take.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "core/math/activation.hpp"
#include "core/math/numeric.hpp"
#include "core/math/row_stats.hpp"
#include "core/ops/norm/cuda_storage.hpp"
#include "core/ops/norm/norm.hpp"
#include "core/ops/rows/reduce.cuh"
#include "core/ops/rows/rows.hpp"
#include "core/runtime/cuda/grid_dependency.cuh"

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

}  // namespace
}  // namespace kf::norm
