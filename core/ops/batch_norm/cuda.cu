// CUDA backend of the batch norm family.
//
// Inference is one element-wise kernel: each element finds its channel from its logical index
// and applies y = (x - running_mean) * weight / sqrt(running_var + eps) + bias (the per-channel
// values stay in L1); dense tensors whose x and out agree on 16-byte alignment move 16-byte
// vectors, with the few unaligned head and tail elements done one by one.
//
// Training needs per-channel reductions over N * spatial before any element can be written, and
// the op may not allocate scratch, so a block owns whole channels: it reduces shifted sums (shift
// = the channel's first element, so the variance keeps its precision for large means), updates
// the running statistics, then normalises the channel it just read (a second read of x, mostly
// from L2 for moderate channels). Channels-first data runs one block per channel; channels-last
// data with at least 32 channels runs one block per 32 adjacent channels (a warp reads 32
// consecutive channels of one position, so loads coalesce). Perf limit: parallelism is C blocks
// (C / 32 for channels-last), so few channels over a huge batch leave most SMs idle; several
// blocks per channel would need a cross-block reduction (a workspace or a cluster), which this
// version does not have.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/math/activation.hpp"
#include "core/math/numeric.hpp"
#include "core/math/row_stats.hpp"
#include "core/ops/batch_norm/batch_norm.hpp"
#include "core/ops/rows/reduce.cuh"
#include "core/runtime/error.hpp"

namespace kf::batch_norm {
namespace {

// ---- tuning (kept apart from the math) -------------------------------------------------------

struct InferencePolicy {
  static constexpr int threads = 256;
  static constexpr int min_blocks_per_sm = 4;
  static constexpr int vector_bytes = 16;
  // Grid-stride loops: enough blocks to fill 132-144 SMs several times over, no device query.
  static constexpr int64_t max_blocks = 4096;
};

struct ChannelPolicy {  // one block per channel
  static constexpr int threads = 256;
  static constexpr int64_t max_blocks = 65535;
};

struct ColumnPolicy {  // one block per `lanes` adjacent channels of channels-last data
  static constexpr int lanes = 32;
  static constexpr int rows = 8;  // positions read at once
  static constexpr int threads = lanes * rows;
  static constexpr int64_t max_blocks = 65535;
};

template <class S, int Width>
union Vector {
  uint4 raw;
  S v[Width];
};

template <class T>
__device__ __forceinline__ T channel_value(const Channel& t, int64_t c, T absent) {
  return t.data ? static_cast<const T*>(t.data)[c * t.stride] : absent;
}

template <class S>
__device__ __forceinline__ math::compute_t<S> infer(const Plan& p, int64_t c,
                                                    math::compute_t<S> v) {
  using T = math::compute_t<S>;
  const T mean = channel_value<T>(p.running_mean, c, T(0));
  const T variance = channel_value<T>(p.running_var, c, T(1));
  const T scale =
      channel_value<T>(p.weight, c, T(1)) / math::stats::sqrt_of(variance + static_cast<T>(p.eps));
  return math::apply_activation(p.act, (v - mean) * scale + channel_value<T>(p.bias, c, T(0)));
}

// ---- inference ----------------------------------------------------------------------------------

// Index is uint32_t when every element index fits, else int64_t (the division by the channel
// extents is the costly part of the loop).
template <class Policy, class S, class Index, bool Vectorized>
__global__ void __launch_bounds__(Policy::threads, Policy::min_blocks_per_sm)
    inference_kernel(const __grid_constant__ Plan p, Index total, Index head) {
  using Traits = math::StorageTraits<S>;
  constexpr int kWidth = Policy::vector_bytes / static_cast<int>(sizeof(S));
  const Index channel_inner = static_cast<Index>(p.channel_inner);
  const Index channels = static_cast<Index>(p.channels);
  const S* x = static_cast<const S*>(p.x_e.data);
  S* out = static_cast<S*>(p.out_e.data);
  const Index first = static_cast<Index>(blockIdx.x) * Policy::threads + threadIdx.x;
  const Index step = static_cast<Index>(gridDim.x) * Policy::threads;
  auto one = [&](Index e) {
    const Index c = (e / channel_inner) % channels;
    const int64_t xo = p.dense ? static_cast<int64_t>(e) : rows::col_offset(p.elements, p.x_e, e);
    const int64_t oo = p.dense ? static_cast<int64_t>(e) : rows::col_offset(p.elements, p.out_e, e);
    out[oo] = Traits::from_compute(infer<S>(p, c, Traits::to_compute(x[xo])));
  };
  if constexpr (Vectorized) {
    const Index vectors = (total - head) / kWidth;
    const Index tail = head + vectors * kWidth;
    for (Index v = first; v < vectors; v += step) {
      const Index e = head + v * kWidth;
      Vector<S, kWidth> in, result;
      in.raw = *reinterpret_cast<const uint4*>(x + e);
      Index c = (e / channel_inner) % channels;
      Index left = channel_inner - e % channel_inner;  // elements until the channel changes
#pragma unroll
      for (int k = 0; k < kWidth; ++k) {
        result.v[k] = Traits::from_compute(infer<S>(p, c, Traits::to_compute(in.v[k])));
        if (--left == 0) {
          left = channel_inner;
          c = c + 1 == channels ? 0 : c + 1;
        }
      }
      *reinterpret_cast<uint4*>(out + e) = result.raw;
    }
    for (Index i = first; i < head + (total - tail); i += step) one(i < head ? i : tail + i - head);
  } else {
    for (Index e = first; e < total; e += step) one(e);
  }
}

template <class S, class Index>
void launch_inference(const Plan& p, cudaStream_t stream) {
  using Policy = InferencePolicy;
  constexpr int kWidth = Policy::vector_bytes / static_cast<int>(sizeof(S));
  const int64_t total = p.elements.row_length;
  const auto x = reinterpret_cast<uintptr_t>(p.x_e.data);
  const auto o = reinterpret_cast<uintptr_t>(p.out_e.data);
  const bool vectorized = p.dense && (x - o) % Policy::vector_bytes == 0;
  int64_t head = 0;
  if (vectorized) {
    head = static_cast<int64_t>(
        ((Policy::vector_bytes - x % Policy::vector_bytes) % Policy::vector_bytes) / sizeof(S));
    head = std::min(head, total);
  }
  const int64_t work = vectorized ? (total - head) / kWidth + kWidth : total;
  const int64_t grid =
      std::min<int64_t>(Policy::max_blocks, (work + Policy::threads - 1) / Policy::threads);
  if (vectorized)
    inference_kernel<Policy, S, Index, true>
        <<<static_cast<unsigned>(grid), Policy::threads, 0, stream>>>(p, static_cast<Index>(total),
                                                                      static_cast<Index>(head));
  else
    inference_kernel<Policy, S, Index, false>
        <<<static_cast<unsigned>(grid), Policy::threads, 0, stream>>>(p, static_cast<Index>(total),
                                                                      Index{0});
}

// ---- training -----------------------------------------------------------------------------------

// Coefficients of one channel from its shifted sums (d = x - shift); updates the running
// statistics when `update` (one thread per channel).
template <class T>
struct Coefficients {
  T shift, center, scale, bias;
};

template <class T>
__device__ __forceinline__ Coefficients<T> train_channel(const Plan& p, int64_t c, T shift, T sum_d,
                                                         T sum_d2, bool update) {
  const T n = static_cast<T>(p.count);
  const auto s = math::stats::layer_norm_stats<T>(sum_d, sum_d2, n, static_cast<T>(p.eps));
  if (update && p.running_mean.data) {
    T variance = sum_d2 / n - s.center * s.center;
    if (variance < T(0)) variance = T(0);
    const T momentum = static_cast<T>(p.momentum);
    T& running_mean = static_cast<T*>(p.running_mean.data)[c * p.running_mean.stride];
    T& running_var = static_cast<T*>(p.running_var.data)[c * p.running_var.stride];
    running_mean = (T(1) - momentum) * running_mean + momentum * (shift + s.center);
    running_var = (T(1) - momentum) * running_var + momentum * (variance * (n / (n - T(1))));
  }
  return Coefficients<T>{shift, s.center, s.rstd * channel_value<T>(p.weight, c, T(1)),
                         channel_value<T>(p.bias, c, T(0))};
}

template <class S>
__device__ __forceinline__ void write(const Plan& p, S* out, math::compute_t<S> v,
                                      const Coefficients<math::compute_t<S>>& k) {
  *out = math::StorageTraits<S>::from_compute(
      math::apply_activation(p.act, (v - k.shift - k.center) * k.scale + k.bias));
}

// Offset of element m of a channel. NCHW-like walks have two column dims (batch, spatial):
// 32-bit division when the channel's elements are indexable in 32 bits.
__device__ __forceinline__ int64_t channel_offset(const rows::Walk& w, const rows::Operand& o,
                                                  int64_t m, bool small) {
  if (small && w.inner_ndim == 2) {
    const uint32_t q = static_cast<uint32_t>(m) / static_cast<uint32_t>(w.inner_shape[1]);
    const uint32_t r = static_cast<uint32_t>(m) - q * static_cast<uint32_t>(w.inner_shape[1]);
    return static_cast<int64_t>(q) * o.inner[0] + static_cast<int64_t>(r) * o.inner[1];
  }
  return rows::col_offset(w, o, m);
}

template <class Policy, class S>
__global__ void __launch_bounds__(Policy::threads)
    train_by_channel_kernel(const __grid_constant__ Plan p) {
  using T = math::compute_t<S>;
  using Traits = math::StorageTraits<S>;
  __shared__ T scratch[32];
  const rows::Walk& w = p.by_channel;
  const bool small = p.count <= int64_t{0xffffffff};
  for (int64_t c = blockIdx.x; c < p.channels; c += gridDim.x) {
    const S* x = static_cast<const S*>(p.x_c.data) + rows::row_offset(w, p.x_c, c);
    S* out = static_cast<S*>(p.out_c.data) + rows::row_offset(w, p.out_c, c);
    const T shift = Traits::to_compute(x[0]);
    T sum_d = 0, sum_d2 = 0;
    for (int64_t m = threadIdx.x; m < p.count; m += Policy::threads) {
      const T d = Traits::to_compute(x[channel_offset(w, p.x_c, m, small)]) - shift;
      sum_d += d;
      sum_d2 += d * d;
    }
    sum_d = rows::block_sum(sum_d, scratch);  // ends with a barrier: x is fully read
    sum_d2 = rows::block_sum(sum_d2, scratch);
    const auto k = train_channel<T>(p, c, shift, sum_d, sum_d2, threadIdx.x == 0);
    for (int64_t m = threadIdx.x; m < p.count; m += Policy::threads)
      write<S>(p, out + channel_offset(w, p.out_c, m, small),
               Traits::to_compute(x[channel_offset(w, p.x_c, m, small)]), k);
  }
}

template <class Policy, class S>
__global__ void __launch_bounds__(Policy::threads)
    train_channels_last_kernel(const __grid_constant__ Plan p) {
  using T = math::compute_t<S>;
  using Traits = math::StorageTraits<S>;
  __shared__ T partial_d[Policy::rows][Policy::lanes + 1];
  __shared__ T partial_d2[Policy::rows][Policy::lanes + 1];
  __shared__ Coefficients<T> coefficients[Policy::lanes];
  const rows::Walk& w = p.by_channel;
  const int lane = threadIdx.x % Policy::lanes, row = threadIdx.x / Policy::lanes;
  const S* x = static_cast<const S*>(p.x_c.data);
  S* out = static_cast<S*>(p.out_c.data);
  for (int64_t first = int64_t{blockIdx.x} * Policy::lanes; first < p.channels;
       first += int64_t{gridDim.x} * Policy::lanes) {
    const int64_t c = first + lane;
    const bool active = c < p.channels;
    T shift = 0, sum_d = 0, sum_d2 = 0;
    if (active) {
      shift = Traits::to_compute(x[c]);
      for (int64_t m = row; m < p.count; m += Policy::rows) {
        const T d = Traits::to_compute(x[rows::col_offset(w, p.x_c, m) + c]) - shift;
        sum_d += d;
        sum_d2 += d * d;
      }
    }
    partial_d[row][lane] = sum_d;
    partial_d2[row][lane] = sum_d2;
    __syncthreads();
    if (row == 0 && active) {
      for (int r = 1; r < Policy::rows; ++r) {
        sum_d += partial_d[r][lane];
        sum_d2 += partial_d2[r][lane];
      }
      coefficients[lane] = train_channel<T>(p, c, shift, sum_d, sum_d2, true);
    }
    __syncthreads();
    if (active) {
      const Coefficients<T> k = coefficients[lane];
      for (int64_t m = row; m < p.count; m += Policy::rows)
        write<S>(p, out + rows::col_offset(w, p.out_c, m) + c,
                 Traits::to_compute(x[rows::col_offset(w, p.x_c, m) + c]), k);
    }
    __syncthreads();  // shared arrays are reused by the next group of channels
  }
}

template <class S>
void launch_training(const Plan& p, cudaStream_t stream) {
  if (p.channels_last && p.channels >= ColumnPolicy::lanes) {
    const int64_t groups = (p.channels + ColumnPolicy::lanes - 1) / ColumnPolicy::lanes;
    train_channels_last_kernel<ColumnPolicy, S>
        <<<static_cast<unsigned>(std::min(groups, ColumnPolicy::max_blocks)), ColumnPolicy::threads,
           0, stream>>>(p);
  } else {
    train_by_channel_kernel<ChannelPolicy, S>
        <<<static_cast<unsigned>(std::min(p.channels, ChannelPolicy::max_blocks)),
           ChannelPolicy::threads, 0, stream>>>(p);
  }
}

template <class S>
void launch(const Plan& p, cudaStream_t stream) {
  if (p.training)
    launch_training<S>(p, stream);
  else if (p.elements.row_length <= int64_t{0xffffffff} - 2 * InferencePolicy::vector_bytes)
    launch_inference<S, uint32_t>(p, stream);
  else
    launch_inference<S, int64_t>(p, stream);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    fail(KF_ERROR_CUDA, "batch norm kernel launch: %s (%s)", cudaGetErrorString(e),
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

}  // namespace kf::batch_norm
