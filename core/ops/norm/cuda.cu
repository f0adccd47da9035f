// CUDA backend of the norm family, three regimes chosen per call:
//  - rows of up to 1024 elements: a few lanes or a warp per row, several rows per block;
//  - rows of up to 16K elements (8K for f64): a block per row;
//    both hold the row in registers (core/ops/rows/tile.cuh), so h = x + residual is read from
//    DRAM once, with 16-byte loads when every row start is aligned and the length divides;
//  - everything else (strided rows, longer rows): the streaming path, one block per row over
//    global memory (pass 1: h, residual_out, shifted sums; pass 2: normalize, affine,
//    activation), which reads x twice. Each thread touches the same columns in both passes,
//    which keeps the exact in-place forms safe.
// In the cached paths each element is loaded, and later stored, by one thread, and every load
// comes before any store, so out and residual_out may be x or residual exactly.
#include <cuda_runtime.h>

#include "core/math/activation.hpp"
#include "core/math/numeric.hpp"
#include "core/math/row_stats.hpp"
#include "core/ops/norm/norm.hpp"
#include "core/ops/rows/reduce.cuh"
#include "core/ops/rows/tile.cuh"
#include "core/runtime/error.hpp"

namespace kf::norm {
namespace {

struct StreamPolicy {
  static constexpr int threads = 256;
};

template <class S>
__device__ __forceinline__ math::compute_t<S> load(const rows::Walk& w, const rows::Operand& o,
                                                   int64_t base, int64_t col) {
  return math::StorageTraits<S>::to_compute(
      static_cast<const S*>(o.data)[base + rows::col_offset(w, o, col)]);
}

template <class S>
__device__ __forceinline__ math::compute_t<S> input(const Plan& p, int64_t xb, int64_t rb,
                                                    int64_t col) {
  using Traits = math::StorageTraits<S>;
  math::compute_t<S> h = load<S>(p.walk, p.x, xb, col);
  // h = x + residual is rounded to the storage type, exactly as residual_out holds it, so the
  // norm never depends on whether residual_out was asked for.
  if (p.residual.data)
    h = Traits::to_compute(Traits::from_compute(h + load<S>(p.walk, p.residual, rb, col)));
  return h;
}

template <class Policy, class S>
__global__ void __launch_bounds__(Policy::threads)
    streaming_kernel(const __grid_constant__ Plan p) {
  using T = math::compute_t<S>;
  using Traits = math::StorageTraits<S>;
  __shared__ T scratch[32];
  const rows::Walk& w = p.walk;
  const int64_t n = w.row_length;
  const T eps = static_cast<T>(p.eps);
  for (int64_t row = blockIdx.x; row < w.rows; row += gridDim.x) {
    const int64_t xb = rows::row_offset(w, p.x, row);
    const int64_t rb = p.residual.data ? rows::row_offset(w, p.residual, row) : 0;
    const int64_t hb = p.residual_out.data ? rows::row_offset(w, p.residual_out, row) : 0;
    // The shift: the row's first element (differences from it stay small for sane data).
    const T shift = p.kind == Kind::layer ? input<S>(p, xb, rb, 0) : T(0);
    T sum_d = 0, sum_d2 = 0;
    for (int64_t c = threadIdx.x; c < n; c += Policy::threads) {
      const T h = input<S>(p, xb, rb, c);
      if (p.residual_out.data)
        static_cast<S*>(p.residual_out.data)[hb + rows::col_offset(w, p.residual_out, c)] =
            Traits::from_compute(h);
      const T d = h - shift;
      sum_d += d;
      sum_d2 += d * d;
    }
    sum_d = rows::block_sum(sum_d, scratch);
    sum_d2 = rows::block_sum(sum_d2, scratch);
    T center = 0, rstd;
    if (p.kind == Kind::layer) {
      const auto s = math::stats::layer_norm_stats<T>(sum_d, sum_d2, static_cast<T>(n), eps);
      center = s.center;
      rstd = s.rstd;
      if (threadIdx.x == 0 && p.mean.data)
        static_cast<T*>(p.mean.data)[rows::row_offset(w, p.mean, row)] = shift + center;
      if (threadIdx.x == 0 && p.rstd.data)
        static_cast<T*>(p.rstd.data)[rows::row_offset(w, p.rstd, row)] = rstd;
    } else {
      rstd = math::stats::rms_rstd<T>(sum_d2, static_cast<T>(n), eps);
    }
    const int64_t ob = rows::row_offset(w, p.out, row);
    for (int64_t c = threadIdx.x; c < n; c += Policy::threads) {
      // h is re-read from residual_out when it was written (x or residual may be out by now).
      const T h = p.residual_out.data ? load<S>(w, p.residual_out, hb, c) : input<S>(p, xb, rb, c);
      T y = (h - shift - center) * rstd;
      if (p.weight.data) y *= load<S>(w, p.weight, 0, c);
      if (p.bias.data) y += load<S>(w, p.bias, 0, c);
      static_cast<S*>(p.out.data)[ob + rows::col_offset(w, p.out, c)] =
          Traits::from_compute(math::apply_activation(p.act, y));
    }
  }
}

// Register-cached rows (see the top of the file). The layer norm shift is the row mean, taken
// from the cached row first, so sum_d and sum_d2 are of exact small differences, as on the CPU.
template <class P, class S>
__global__ void __launch_bounds__(P::threads) cached_kernel(const __grid_constant__ Plan p) {
  using T = math::compute_t<S>;
  using Traits = math::StorageTraits<S>;
  __shared__ T scratch[32];
  const rows::Walk& w = p.walk;
  const int64_t n = w.row_length;
  const T count = static_cast<T>(n), eps = static_cast<T>(p.eps);
  const int lane = threadIdx.x % P::group, slot = threadIdx.x / P::group;
  for (int64_t first = int64_t{blockIdx.x} * P::rows_per_block; first < w.rows;
       first += int64_t{gridDim.x} * P::rows_per_block) {
    const int64_t row = first + slot;
    const int64_t length = row < w.rows ? n : 0;  // rows past the end load and store nothing
    const int64_t r = row < w.rows ? row : 0;
    T h[P::items];
    rows::tile_load<P>(static_cast<const S*>(p.x.data) + rows::row_offset(w, p.x, r), length, lane,
                       h, T(0));
    if (p.residual.data) {
      T add[P::items];
      rows::tile_load<P>(
          static_cast<const S*>(p.residual.data) + rows::row_offset(w, p.residual, r), length, lane,
          add, T(0));
#pragma unroll
      for (int i = 0; i < P::items; ++i)
        h[i] = Traits::to_compute(Traits::from_compute(h[i] + add[i]));
      if (p.residual_out.data)
        rows::tile_store<P>(
            static_cast<S*>(p.residual_out.data) + rows::row_offset(w, p.residual_out, r), length,
            lane, h);
    }
    T shift = 0, center = 0, rstd;
    if (p.kind == Kind::layer) {
      T sum = 0;
#pragma unroll
      for (int i = 0; i < P::items; ++i) sum += h[i];  // padding is 0
      shift = rows::group_reduce<P::group>(sum, rows::Plus{}, scratch) / count;
      T sum_d = 0, sum_d2 = 0;
#pragma unroll
      for (int k = 0; k < P::chunks; ++k) {
        const bool inside = rows::tile_col<P>(lane, k) < length;
#pragma unroll
        for (int e = 0; e < P::vec; ++e) {
          const T d = inside ? h[k * P::vec + e] - shift : T(0);
          sum_d += d;
          sum_d2 += d * d;
        }
      }
      sum_d = rows::group_reduce<P::group>(sum_d, rows::Plus{}, scratch);
      sum_d2 = rows::group_reduce<P::group>(sum_d2, rows::Plus{}, scratch);
      const auto s = math::stats::layer_norm_stats<T>(sum_d, sum_d2, count, eps);
      center = s.center;
      rstd = s.rstd;
      if (lane == 0 && length > 0) {
        if (p.mean.data)
          static_cast<T*>(p.mean.data)[rows::row_offset(w, p.mean, r)] = shift + center;
        if (p.rstd.data) static_cast<T*>(p.rstd.data)[rows::row_offset(w, p.rstd, r)] = rstd;
      }
    } else {
      T squares = 0;
#pragma unroll
      for (int i = 0; i < P::items; ++i) squares += h[i] * h[i];
      rstd = math::stats::rms_rstd<T>(rows::group_reduce<P::group>(squares, rows::Plus{}, scratch),
                                      count, eps);
    }
    // Weight and bias are read a chunk at a time (from L1/L2: every row shares them).
    S* out = static_cast<S*>(p.out.data) + rows::row_offset(w, p.out, r);
    const S* weight = static_cast<const S*>(p.weight.data);
    const S* bias = static_cast<const S*>(p.bias.data);
#pragma unroll
    for (int k = 0; k < P::chunks; ++k) {
      const int64_t c = rows::tile_col<P>(lane, k);
      if (c >= length) continue;
      rows::Pack<S, P::vec> wk, bk, yk;
      if (weight) wk = *reinterpret_cast<const rows::Pack<S, P::vec>*>(weight + c);
      if (bias) bk = *reinterpret_cast<const rows::Pack<S, P::vec>*>(bias + c);
#pragma unroll
      for (int e = 0; e < P::vec; ++e) {
        T y = (h[k * P::vec + e] - shift - center) * rstd;
        if (weight) y *= Traits::to_compute(wk.v[e]);
        if (bias) y += Traits::to_compute(bk.v[e]);
        yk.v[e] = Traits::from_compute(math::apply_activation(p.act, y));
      }
      *reinterpret_cast<rows::Pack<S, P::vec>*>(out + c) = yk;
    }
  }
}

template <class S, int V>
bool launch_cached(const Plan& p, cudaStream_t stream) {
  return rows::with_tile_policy<S, V>(p.walk.row_length, [&](auto policy) {
    using P = decltype(policy);
    cached_kernel<P, S>
        <<<rows::tile_grid(p.walk.rows, P::rows_per_block), P::threads, 0, stream>>>(p);
  });
}

// 16-byte vectors when every row of every row operand starts aligned and the length divides.
template <class S>
bool vectors_fit(const Plan& p) {
  constexpr int V = 16 / sizeof(S);
  if (p.walk.row_length % V != 0) return false;
  for (const rows::Operand* o : {&p.x, &p.residual, &p.weight, &p.bias, &p.out, &p.residual_out})
    if (!rows::rows_aligned_16(p.walk, *o, sizeof(S))) return false;
  return true;
}

template <class S>
void launch(const Plan& p, cudaStream_t stream) {
  bool done = false;
  if (p.dense)
    done = vectors_fit<S>(p) ? launch_cached<S, 16 / sizeof(S)>(p, stream)
                             : launch_cached<S, 1>(p, stream);
  if (!done) {
    const int64_t grid = p.walk.rows < 65535 * 16 ? p.walk.rows : 65535 * 16;
    streaming_kernel<StreamPolicy, S>
        <<<static_cast<unsigned>(grid), StreamPolicy::threads, 0, stream>>>(p);
  }
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    fail(KF_ERROR_CUDA, "norm kernel launch: %s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
}

}  // namespace

void run_cuda(const Plan& plan, int32_t, void* native_stream) {
  cudaStream_t stream = static_cast<cudaStream_t>(native_stream);
  switch (plan.dtype) {
    case KF_DTYPE_FLOAT16: return launch<math::half_t>(plan, stream);
    case KF_DTYPE_BFLOAT16: return launch<math::bfloat16_t>(plan, stream);
    case KF_DTYPE_FLOAT64: return launch<double>(plan, stream);
    default: return launch<float>(plan, stream);
  }
}

}  // namespace kf::norm
