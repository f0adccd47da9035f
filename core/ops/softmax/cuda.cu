// CUDA backend of the softmax family, three regimes chosen per call:
//  - rows of up to 1024 elements: a few lanes or a warp per row, several rows per block;
//  - rows of up to 16K elements (8K for f64): a block per row;
//    both hold the row's logits in registers (core/ops/rows/tile.cuh), so x (and the mask) are
//    read from DRAM once, with 16-byte loads when every row start is aligned and the length
//    divides; max and sum of exp are then exact two-pass reductions over the registers;
//  - everything else (strided or row-broadcast operands, longer rows): the streaming path, one
//    block per row over global memory (pass 1: online max and sum of exp; pass 2: write), which
//    reads x twice. Each thread touches the same columns in both passes, which keeps the in-place
//    form safe (in the cached paths every load of a row precedes its stores, by the same thread).
#include <cuda_runtime.h>

#include "core/math/numeric.hpp"
#include "core/math/row_stats.hpp"
#include "core/ops/rows/reduce.cuh"
#include "core/ops/rows/tile.cuh"
#include "core/ops/softmax/softmax.hpp"
#include "core/runtime/error.hpp"

namespace kf::softmax {
namespace {

struct StreamPolicy {
  static constexpr int threads = 256;
};

template <class S>
__device__ __forceinline__ math::compute_t<S> logit(const Plan& p, int64_t xb, int64_t mb,
                                                    int64_t query, int64_t col) {
  using T = math::compute_t<S>;
  using Traits = math::StorageTraits<S>;
  if (p.causal && math::stats::causal_hidden(query, col, p.diagonal))
    return math::stats::negative_infinity<T>();
  T v =
      static_cast<T>(p.scale) *
      Traits::to_compute(static_cast<const S*>(p.x.data)[xb + rows::col_offset(p.walk, p.x, col)]);
  if (p.mask.data)
    v += Traits::to_compute(
        static_cast<const S*>(p.mask.data)[mb + rows::col_offset(p.walk, p.mask, col)]);
  return v;
}

template <class Policy, class S>
__global__ void __launch_bounds__(Policy::threads)
    streaming_kernel(const __grid_constant__ Plan p) {
  using T = math::compute_t<S>;
  namespace st = math::stats;
  __shared__ T scratch_max[32];
  __shared__ T scratch_sum[32];
  const rows::Walk& w = p.walk;
  const int64_t n = w.row_length;
  for (int64_t row = blockIdx.x; row < w.rows; row += gridDim.x) {
    const int64_t query = row % p.query_rows;
    const int64_t xb = rows::row_offset(w, p.x, row);
    const int64_t mb = p.mask.data ? rows::row_offset(w, p.mask, row) : 0;
    st::MaxSum<T> s = st::max_sum_empty<T>();
    for (int64_t c = threadIdx.x; c < n; c += Policy::threads)
      s = st::max_sum_add(s, logit<S>(p, xb, mb, query, c));
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
    for (int k = 0; k < Policy::threads / 32; ++k)
      s = st::max_sum_merge(s, st::MaxSum<T>{scratch_max[k], scratch_sum[k]});
    __syncthreads();
    const T inv_sum = T(1) / s.sum, log_sum = st::log_of(s.sum);
    const int64_t ob = rows::row_offset(w, p.out, row);
    for (int64_t c = threadIdx.x; c < n; c += Policy::threads) {
      const T v = logit<S>(p, xb, mb, query, c);
      static_cast<S*>(p.out.data)[ob + rows::col_offset(w, p.out, c)] =
          math::StorageTraits<S>::from_compute(
              st::softmax_value(v, s.max, inv_sum, log_sum, p.log));
    }
  }
}

// Register-cached rows (see the top of the file).
template <class P, class S>
__global__ void __launch_bounds__(P::threads) cached_kernel(const __grid_constant__ Plan p) {
  using T = math::compute_t<S>;
  namespace st = math::stats;
  __shared__ T scratch[32];
  const rows::Walk& w = p.walk;
  const int64_t n = w.row_length;
  const T scale = static_cast<T>(p.scale), minus_inf = st::negative_infinity<T>();
  const int lane = threadIdx.x % P::group, slot = threadIdx.x / P::group;
  for (int64_t first = int64_t{blockIdx.x} * P::rows_per_block; first < w.rows;
       first += int64_t{gridDim.x} * P::rows_per_block) {
    const int64_t row = first + slot;
    const int64_t length = row < w.rows ? n : 0;  // rows past the end load and store nothing
    const int64_t r = row < w.rows ? row : 0;
    T v[P::items];
    rows::tile_load<P>(static_cast<const S*>(p.x.data) + rows::row_offset(w, p.x, r), length, lane,
                       v, T(0));
    if (p.mask.data) {
      T add[P::items];
      rows::tile_load<P>(static_cast<const S*>(p.mask.data) + rows::row_offset(w, p.mask, r),
                         length, lane, add, T(0));
#pragma unroll
      for (int i = 0; i < P::items; ++i) v[i] = scale * v[i] + add[i];
    } else {
#pragma unroll
      for (int i = 0; i < P::items; ++i) v[i] *= scale;
    }
    const int64_t query = r % p.query_rows;
    T max = minus_inf;
#pragma unroll
    for (int k = 0; k < P::chunks; ++k) {
      const int64_t c = rows::tile_col<P>(lane, k);
#pragma unroll
      for (int e = 0; e < P::vec; ++e) {
        T& x = v[k * P::vec + e];
        if (c + e >= length || (p.causal && st::causal_hidden(query, c + e, p.diagonal)))
          x = minus_inf;
        max = x > max ? x : max;
      }
    }
    max = rows::group_reduce<P::group>(max, rows::Larger{}, scratch);
    T sum = 0;
    if (max != minus_inf) {
#pragma unroll
      for (int i = 0; i < P::items; ++i) sum += st::exp_of(v[i] - max);  // exp(-inf) = 0
    }
    sum = rows::group_reduce<P::group>(sum, rows::Plus{}, scratch);
    const T inv_sum = T(1) / sum, log_sum = st::log_of(sum);
#pragma unroll
    for (int i = 0; i < P::items; ++i) v[i] = st::softmax_value(v[i], max, inv_sum, log_sum, p.log);
    rows::tile_store<P>(static_cast<S*>(p.out.data) + rows::row_offset(w, p.out, r), length, lane,
                        v);
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

// 16-byte vectors when every row of x, mask and out starts aligned and the length divides.
template <class S>
bool vectors_fit(const Plan& p) {
  constexpr int V = 16 / sizeof(S);
  return p.walk.row_length % V == 0 && rows::rows_aligned_16(p.walk, p.x, sizeof(S)) &&
         rows::rows_aligned_16(p.walk, p.mask, sizeof(S)) &&
         rows::rows_aligned_16(p.walk, p.out, sizeof(S));
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
    fail(KF_ERROR_CUDA, "softmax kernel launch: %s (%s)", cudaGetErrorString(e),
         cudaGetErrorName(e));
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

}  // namespace kf::softmax
