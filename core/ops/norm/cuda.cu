// CUDA backend of the norm family. This first version is the general path only: one block per row
// streaming over global memory (pass 1: h = x + residual, residual_out, shifted sums; pass 2:
// normalize, affine, activation), any strides, offsets from core/ops/rows/rows.hpp. Each thread
// touches the same columns in both passes, which keeps the exact in-place forms safe. The warp-
// and block-cached fast paths (single DRAM read, 16-byte vectors) are still to come.
#include <cuda_runtime.h>

#include "core/math/activation.hpp"
#include "core/math/numeric.hpp"
#include "core/math/row_stats.hpp"
#include "core/ops/norm/norm.hpp"
#include "core/ops/rows/reduce.cuh"
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

template <class S>
void launch(const Plan& p, cudaStream_t stream) {
  const int64_t grid = p.walk.rows < 65535 * 16 ? p.walk.rows : 65535 * 16;
  streaming_kernel<StreamPolicy, S>
      <<<static_cast<unsigned>(grid), StreamPolicy::threads, 0, stream>>>(p);
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
