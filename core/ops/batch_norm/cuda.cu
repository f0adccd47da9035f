// CUDA backend of the batch norm family: inference here, training in cuda_training.cu.
//
// Inference is element-wise: y = act((x - running_mean) * weight / sqrt(running_var + eps) + bias).
// Dense tensors whose channel runs fill whole 16-byte vectors (NCHW-like with H * W a multiple
// of the vector width, or NHWC-like with C one) run the vector kernel: each block fills a table
// of every channel's coefficients in shared memory while its first vectors load, then takes an
// equal contiguous share of the vectors, four in flight per thread, with the activation a
// template argument. Anything else runs the general kernel: each element finds its channel from
// its logical index (the per-channel values stay in L1); dense tensors whose x and out agree on
// 16-byte alignment move 16-byte vectors, with the few unaligned head and tail elements done
// one by one.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/ops/batch_norm/cuda_common.cuh"
#include "core/ops/dispatch.hpp"
#include "core/ops/reduce/launch_util.cuh"
#include "core/ops/rows/rows.hpp"
#include "core/runtime/cuda/grid_dependency.cuh"
#include "core/runtime/cuda/launch.hpp"
#include "core/runtime/error.hpp"

namespace kf::batch_norm {
namespace {

using reduce::FastDivmod;

// ---- tuning (kept apart from the math) -------------------------------------------------------

struct InferencePolicy {
  static constexpr int threads = 256;
  static constexpr int min_blocks_per_sm = 4;
  static constexpr int vector_bytes = 16;
  // Grid-stride loops: enough blocks to fill 132-144 SMs several times over, no device query.
  static constexpr int64_t max_blocks = 4096;
};

// Dense tensors seen as 16-byte vectors, each with its channel's coefficients from a table in
// shared memory (up to table_bytes of it).
struct VectorInferencePolicy {
  static constexpr int threads = 256;
  static constexpr int unroll = 4;  // vectors in flight per thread
  static constexpr size_t table_bytes = 32 * 1024;
};

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
  cuda::wait_prior_grid();  // a dependent launch: nothing global is touched before this
  cuda::allow_next_grid();
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

// A channel's coefficients in the shared-memory table, padded so that one 16-byte (f32) or two
// (f64) loads fetch them.
template <class T>
struct alignas(4 * sizeof(T)) TableEntry {
  T mean, scale, bias, unused;
};

struct VectorArgs {
  uint32_t vectors;        // 16-byte vectors of x (and of out)
  uint32_t per_block;      // vectors per block (a multiple of the block size)
  FastDivmod run_vectors;  // kRuns: vectors per channel run (channel_inner / W)
  FastDivmod channels;     // kRuns: C; else C / W (vectors per position)
};

// Dense x and out starting on 16-byte boundaries, as 16-byte vectors of W elements, `unroll` of
// them loaded by each thread before any is used. kRuns (NCHW-like: channel_inner a multiple of
// W): a vector lies in one channel run, channel (v / run_vectors) % C. Otherwise (NHWC-like:
// channel_inner == 1, C a multiple of W): vector v holds channels (v % (C / W)) * W + 0..W-1.
// Each block first fills the table of every channel's coefficients (a square root and a
// division per channel instead of per vector); the index math is two multiply-high divisions.
template <class S, class Act, bool kRuns>
__global__ void __launch_bounds__(VectorInferencePolicy::threads)
    inference_vector_kernel(const __grid_constant__ Plan p, VectorArgs a) {
  cuda::wait_prior_grid();  // a dependent launch: nothing global is touched before this
  cuda::allow_next_grid();
  using T = math::compute_t<S>;
  using Traits = math::StorageTraits<S>;
  using Primitives = typename math::PrimitivesFor<S>::type;
  using Policy = VectorInferencePolicy;
  constexpr int kWidth = 16 / static_cast<int>(sizeof(S));
  constexpr int kUnroll = Policy::unroll;
  constexpr uint32_t kStep = Policy::threads * kUnroll;
  const uint4* x = static_cast<const uint4*>(p.x_e.data);
  uint4* out = static_cast<uint4*>(p.out_e.data);
  // Block b owns vectors [b * per_block, (b + 1) * per_block): every block the same share.
  const uint32_t begin = blockIdx.x * a.per_block;
  const uint32_t end = min(begin + a.per_block, a.vectors);
  Vector<S, kWidth> in[kUnroll];
  auto load = [&](uint32_t base) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const uint32_t v = base + u * Policy::threads;
      if (v < end) in[u].raw = x[v];
    }
  };
  uint32_t base = begin + threadIdx.x;
  load(base);  // in flight while the table is filled
  extern __shared__ uint4 table_storage[];
  TableEntry<T>* table = reinterpret_cast<TableEntry<T>*>(table_storage);
  for (int c = threadIdx.x; c < p.channels; c += Policy::threads) {
    const Affine<T> k = affine_of<T>(p, c);
    table[c] = TableEntry<T>{k.mean, k.scale, k.bias, T(0)};
  }
  __syncthreads();
  auto apply = [](const TableEntry<T>& k, S v) {
    return Traits::from_compute(
        Act{}((Traits::to_compute(v) - k.mean) * k.scale + k.bias, Primitives{}));
  };
  for (bool first = true; base < end; base += kStep, first = false) {
    if (!first) load(base);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const uint32_t v = base + u * Policy::threads;
      if (v >= end) continue;
      Vector<S, kWidth> result;
      if constexpr (kRuns) {
        const TableEntry<T> k = table[a.channels.mod(a.run_vectors.div(v))];
#pragma unroll
        for (int e = 0; e < kWidth; ++e) result.v[e] = apply(k, in[u].v[e]);
      } else {
        const TableEntry<T>* k = table + a.channels.mod(v) * kWidth;
#pragma unroll
        for (int e = 0; e < kWidth; ++e) result.v[e] = apply(k[e], in[u].v[e]);
      }
      out[v] = result.raw;
    }
  }
}

// The vector kernel where the layout allows it; false otherwise (the caller takes the general
// kernel).
template <class S>
bool launch_vector_inference(const Plan& p, int32_t device, cudaStream_t stream) {
  using Policy = VectorInferencePolicy;
  using T = math::compute_t<S>;
  constexpr int kWidth = 16 / static_cast<int>(sizeof(S));
  const int64_t total = p.elements.row_length;
  const bool runs = p.channel_inner % kWidth == 0;
  if (!p.dense || reinterpret_cast<uintptr_t>(p.x_e.data) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(p.out_e.data) % 16 != 0 || total % kWidth != 0 ||
      total / kWidth >= (int64_t{1} << 31) ||
      p.channels * static_cast<int64_t>(sizeof(TableEntry<T>)) >
          static_cast<int64_t>(Policy::table_bytes) ||
      !(runs || (p.channel_inner == 1 && p.channels % kWidth == 0)))
    return false;
  VectorArgs a;
  a.vectors = static_cast<uint32_t>(total / kWidth);
  a.run_vectors = FastDivmod(runs ? static_cast<uint32_t>(p.channel_inner / kWidth) : 1u);
  a.channels = FastDivmod(static_cast<uint32_t>(runs ? p.channels : p.channels / kWidth));
  const size_t smem = static_cast<size_t>(p.channels) * sizeof(TableEntry<T>);
  // One pass of blocks of equal shares, each thread `unroll` vectors, or more where the table
  // would otherwise cost a block more than its vectors (a thread fills C / threads entries).
  // One pass rather than one wave of resident blocks looping: the wave leaves the SMs short of
  // warps at the end of the launch. kf-bench on an H200 (2026-11-26 16:46Z, same call, two
  // passes each), NCHW inference 256 channels, % of copy f32 / f16 / bf16: one wave 85.2 / 83.8
  // / 83.6; four 89.2 / 88.9 / 88.6; sixteen 93.2 / 92.7 / 92.6; one pass 93.2 / 93.0 / 92.9.
  const int64_t table_steps =
      (p.channels + Policy::threads * Policy::unroll - 1) / (Policy::threads * Policy::unroll);
  const int64_t per_thread = Policy::unroll * std::max<int64_t>(1, table_steps);
  a.per_block = static_cast<uint32_t>(per_thread * Policy::threads);
  const int64_t blocks = (int64_t{a.vectors} + a.per_block - 1) / a.per_block;
  dispatch_activation(p.act, [&](auto act) {
    using Act = decltype(act);
    auto* kernel =
        runs ? inference_vector_kernel<S, Act, true> : inference_vector_kernel<S, Act, false>;
    cuda::launch_dependent_shared(kernel, device, static_cast<unsigned>(blocks), Policy::threads,
                                  smem, stream, "batch norm kernel launch", p, a);
  });
  return true;
}

template <class S, class Index>
void launch_inference(const Plan& p, int32_t device, cudaStream_t stream) {
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
  cuda::launch_dependent(vectorized ? inference_kernel<Policy, S, Index, true>
                                    : inference_kernel<Policy, S, Index, false>,
                         device, static_cast<unsigned>(grid), Policy::threads, stream,
                         "batch norm kernel launch", p, static_cast<Index>(total),
                         static_cast<Index>(head));
}

// The largest element count the 32-bit kernels take: a thread's index e < total must stay
// below 2^32 after its last step (e += gridDim.x * threads, up to max_blocks * threads), or it
// wraps to its first index and the loop never ends (2^20 divides 2^32).
constexpr int64_t kLastNarrowIndex = int64_t{0xffffffff} -
                                     InferencePolicy::max_blocks * InferencePolicy::threads -
                                     2 * InferencePolicy::vector_bytes;

template <class S>
void launch(const Plan& p, int32_t device, cudaStream_t stream) {
  if (launch_vector_inference<S>(p, device, stream))
    ;
  else if (p.elements.row_length <= kLastNarrowIndex)
    launch_inference<S, uint32_t>(p, device, stream);
  else
    launch_inference<S, int64_t>(p, device, stream);
}

}  // namespace

void run_cuda(const Plan& plan, int32_t device_id, void* native_stream) {
  cudaStream_t stream = static_cast<cudaStream_t>(native_stream);
  if (plan.training) return run_training_cuda(plan, device_id, stream);
  switch (plan.dtype) {
    case KF_DTYPE_FLOAT16: return launch<math::half_t>(plan, device_id, stream);
    case KF_DTYPE_BFLOAT16: return launch<math::bfloat16_t>(plan, device_id, stream);
    case KF_DTYPE_FLOAT64: return launch<double>(plan, device_id, stream);
    default: return launch<float>(plan, device_id, stream);
  }
}

}  // namespace kf::batch_norm
