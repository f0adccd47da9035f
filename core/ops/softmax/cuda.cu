// CUDA backend of the softmax family. This first version is the general path only: one block per
// row streaming over global memory (pass 1: online max and sum of exp; pass 2: write), any
// strides, offsets from core/ops/rows/rows.hpp. Each thread touches the same columns in both
// passes, which keeps the in-place form safe. The warp- and block-cached fast paths (single DRAM
// read, 16-byte vectors) are still to come.
#include <cuda_runtime.h>

#include "core/math/numeric.hpp"
#include "core/math/row_stats.hpp"
#include "core/ops/rows/reduce.cuh"
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

template <class S>
void launch(const Plan& p, cudaStream_t stream) {
  const int64_t grid = p.walk.rows < 65535 * 16 ? p.walk.rows : 65535 * 16;
  streaming_kernel<StreamPolicy, S>
      <<<static_cast<unsigned>(grid), StreamPolicy::threads, 0, stream>>>(p);
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
