// CUDA backend of the batch norm family.
//
// Inference is one element-wise kernel: each element finds its channel from its logical index
// and applies y = (x - running_mean) * weight / sqrt(running_var + eps) + bias (the per-channel
// values stay in L1); dense tensors whose x and out agree on 16-byte alignment move 16-byte
// vectors, with the few unaligned head and tail elements done one by one.
//
// Training needs per-channel reductions over N * spatial before any element can be written, and
// the op may not allocate scratch. Channels-first data runs a block per channel, or on sm_90 a
// cluster of up to 8 blocks per channel when channels are too few to fill the GPU: each block
// reduces shifted sums (shift = the channel's first element, so the variance keeps its precision
// for large means) over its part with 16-byte loads where the layout allows, the parts meet
// through distributed shared memory, the first block updates the running statistics, and each
// block normalises its part (a second read of x, partly from L2). Channels-last data with at
// least 32 channels runs one block per 32 adjacent channels (a warp reads 32 consecutive channels
// of one position, so loads coalesce). Perf limit: x is read twice.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/math/activation.hpp"
#include "core/math/numeric.hpp"
#include "core/math/row_stats.hpp"
#include "core/ops/batch_norm/batch_norm.hpp"
#include "core/ops/rows/reduce.cuh"
#include "core/ops/rows/tile.cuh"
#include "core/runtime/cuda/cluster_launch.hpp"
#include "core/runtime/cuda/device_caps.hpp"
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

struct ChannelPolicy {  // a block (or a cluster of max_split at most) per channel
  static constexpr int threads = 256;
  static constexpr int64_t max_blocks = 65535;
  static constexpr int max_split = 8;
  static constexpr int blocks_per_sm = 4;
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

// A channel's inference coefficients: y = act((v - mean) * scale + bias). Computed once per
// channel run, not per element (the square root and division cost more than the element's
// bytes for 16-bit data).
template <class T>
struct Affine {
  T mean, scale, bias;
};

template <class T>
__device__ __forceinline__ Affine<T> affine_of(const Plan& p, int64_t c) {
  const T variance = channel_value<T>(p.running_var, c, T(1));
  return Affine<T>{
      channel_value<T>(p.running_mean, c, T(0)),
      channel_value<T>(p.weight, c, T(1)) / math::stats::sqrt_of(variance + static_cast<T>(p.eps)),
      channel_value<T>(p.bias, c, T(0))};
}

template <class T>
__device__ __forceinline__ T infer(const Plan& p, const Affine<T>& k, T v) {
  return math::apply_activation(p.act, (v - k.mean) * k.scale + k.bias);
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
    out[oo] = Traits::from_compute(
        infer(p, affine_of<math::compute_t<S>>(p, c), Traits::to_compute(x[xo])));
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
      Affine<math::compute_t<S>> k = affine_of<math::compute_t<S>>(p, c);
#pragma unroll
      for (int i = 0; i < kWidth; ++i) {
        result.v[i] = Traits::from_compute(infer(p, k, Traits::to_compute(in.v[i])));
        if (--left == 0) {
          left = channel_inner;
          c = c + 1 == channels ? 0 : c + 1;
          k = affine_of<math::compute_t<S>>(p, c);
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

// A block, or (sm_90) a cluster of `split` blocks, per channel: each block reduces its part of
// the channel's elements, V at a time (16-byte loads where the layout allows), the parts'
// shifted sums meet through distributed shared memory in rank order, and each block then
// normalises its own part (a second read, partly from L2).
template <class Policy, class S, int V>
__global__ void __launch_bounds__(Policy::threads)
    train_by_channel_kernel(const __grid_constant__ Plan p, int split) {
  using T = math::compute_t<S>;
  using Traits = math::StorageTraits<S>;
  using Vec = rows::Pack<S, V>;
  __shared__ T scratch[32];
  __shared__ T exchange[2];  // cluster slots: sum of d, sum of d^2
  const rows::Walk& w = p.by_channel;
  const bool small = p.count <= int64_t{0xffffffff};
  const int rank = static_cast<int>(blockIdx.x % static_cast<unsigned>(split));
  const int64_t vectors = p.count / V;
  const int64_t part = (vectors + split - 1) / split;
  const int64_t first = rank * part;
  const int64_t end = vectors < first + part ? vectors : first + part;
  for (int64_t c = blockIdx.x / split; c < p.channels; c += gridDim.x / split) {
    const S* x = static_cast<const S*>(p.x_c.data) + rows::row_offset(w, p.x_c, c);
    S* out = static_cast<S*>(p.out_c.data) + rows::row_offset(w, p.out_c, c);
    const T shift = Traits::to_compute(x[0]);
    T sum_d = 0, sum_d2 = 0;
    for (int64_t v = first + threadIdx.x; v < end; v += Policy::threads) {
      const Vec xv = *reinterpret_cast<const Vec*>(x + channel_offset(w, p.x_c, v * V, small));
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const T d = Traits::to_compute(xv.v[e]) - shift;
        sum_d += d;
        sum_d2 += d * d;
      }
    }
    sum_d = rows::block_sum(sum_d, scratch);  // ends with a barrier: x is fully read
    sum_d2 = rows::block_sum(sum_d2, scratch);
    if (split > 1) {
      sum_d = rows::cluster_reduce(sum_d, rows::Plus{}, &exchange[0]);
      sum_d2 = rows::cluster_reduce(sum_d2, rows::Plus{}, &exchange[1]);
    }
    const auto k = train_channel<T>(p, c, shift, sum_d, sum_d2, threadIdx.x == 0 && rank == 0);
    for (int64_t v = first + threadIdx.x; v < end; v += Policy::threads) {
      const int64_t m = v * V;
      const Vec xv = *reinterpret_cast<const Vec*>(x + channel_offset(w, p.x_c, m, small));
      Vec yv;
#pragma unroll
      for (int e = 0; e < V; ++e)
        yv.v[e] = Traits::from_compute(math::apply_activation(
            p.act, (Traits::to_compute(xv.v[e]) - k.shift - k.center) * k.scale + k.bias));
      *reinterpret_cast<Vec*>(out + channel_offset(w, p.out_c, m, small)) = yv;
    }
  }
  if (split > 1) rows::cluster_done();
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

// True when every channel's elements split into aligned V-element vectors in x and out: the
// innermost dim is contiguous and divides by V, every other stride divides by V.
bool channel_vectors_fit(const Plan& p, int V) {
  const rows::Walk& w = p.by_channel;
  if (w.inner_ndim < 1 || w.inner_shape[w.inner_ndim - 1] % V != 0) return false;
  for (const rows::Operand* o : {&p.x_c, &p.out_c}) {
    if (reinterpret_cast<uintptr_t>(o->data) % 16 != 0) return false;
    if (o->inner[w.inner_ndim - 1] != 1) return false;
    for (int32_t d = 0; d + 1 < w.inner_ndim; ++d)
      if (o->inner[d] % V != 0) return false;
    for (int32_t d = 0; d < w.outer_ndim; ++d)
      if (o->outer[d] % V != 0) return false;
  }
  return true;
}

template <class S, int V>
void launch_by_channel(const Plan& p, int32_t device, cudaStream_t stream) {
  using Policy = ChannelPolicy;
  // Few channels over many elements leave SMs idle with a block per channel: split each
  // channel over a cluster (sm_90) until the grid holds blocks_per_sm blocks per SM.
  int split = 1;
  if (cuda::compute_major(device) >= 9) {
    const int64_t wanted = int64_t{cuda::sm_count(device)} * Policy::blocks_per_sm;
    while (split < Policy::max_split && p.channels * split < wanted &&
           p.count / (int64_t{split} * 2) >= int64_t{Policy::threads} * V * 4)
      split *= 2;
  }
  const int64_t channels = std::min(p.channels, Policy::max_blocks / split);
  cuda::launch_clustered(train_by_channel_kernel<Policy, S, V>,
                         dim3(static_cast<unsigned>(channels * split)), dim3(Policy::threads), 0,
                         split, stream, "batch norm kernel launch", p, split);
}

template <class S>
void launch_training(const Plan& p, int32_t device, cudaStream_t stream) {
  if (p.channels_last && p.channels >= ColumnPolicy::lanes) {
    const int64_t groups = (p.channels + ColumnPolicy::lanes - 1) / ColumnPolicy::lanes;
    train_channels_last_kernel<ColumnPolicy, S>
        <<<static_cast<unsigned>(std::min(groups, ColumnPolicy::max_blocks)), ColumnPolicy::threads,
           0, stream>>>(p);
  } else {
    constexpr int V = 16 / sizeof(S);
    if (channel_vectors_fit(p, V))
      launch_by_channel<S, V>(p, device, stream);
    else
      launch_by_channel<S, 1>(p, device, stream);
  }
}

template <class S>
void launch(const Plan& p, int32_t device, cudaStream_t stream) {
  if (p.training)
    launch_training<S>(p, device, stream);
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

void run_cuda(const Plan& plan, int32_t device_id, void* native_stream) {
  cudaStream_t stream = static_cast<cudaStream_t>(native_stream);
  switch (plan.dtype) {
    case KF_DTYPE_FLOAT16: return launch<math::half_t>(plan, device_id, stream);
    case KF_DTYPE_BFLOAT16: return launch<math::bfloat16_t>(plan, device_id, stream);
    case KF_DTYPE_FLOAT64: return launch<double>(plan, device_id, stream);
    default: return launch<float>(plan, device_id, stream);
  }
}

}  // namespace kf::batch_norm
