// CUDA backend of the batch norm family: training (inference is in cuda.cu).
//
// Training needs per-channel reductions over N * spatial before any element can be written, and
// the op may not allocate scratch. Every kernel reduces shifted sums (shift = the channel's first
// element, so the variance keeps its precision for large means); a channel's parts meet in a
// fixed order, and one thread updates its running statistics.
//  - Channels-first data whose channel runs fill whole 16-byte vectors, with channels of up to
//    16 slices of 72 KiB (8 where the device holds no 16-block cluster, one without clusters;
//    StagedTrainingPolicy says which slice size a channel takes): the staged kernel. A block, or on
//    sm_90 a cluster of up to 16 blocks, per channel; each block copies its slice of the channel
//    into shared memory with cp.async, reduces it there, the blocks' sums meet through
//    distributed shared memory, and each block normalises its slice from shared memory: x is
//    read from DRAM once. The blocks stay resident and walk the channels.
//  - Other channels-first data: a block per channel, or on sm_90 a cluster of up to 8 blocks when
//    channels are too few to fill the GPU, reducing its part with 16-byte loads where the layout
//    allows and then normalising it with a second read of x (partly from L2).
//  - Channels-last data with at least 32 channels: one block per 32 adjacent channels (a warp
//    reads 32 consecutive channels of one position, so loads coalesce); x is read twice.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "core/ops/async_copy.cuh"
#include "core/ops/batch_norm/cuda_common.cuh"
#include "core/ops/batch_norm/staged_split.hpp"
#include "core/ops/reduce/launch_util.cuh"
#include "core/ops/rows/reduce.cuh"
#include "core/ops/rows/staged.cuh"
#include "core/ops/rows/tile.cuh"
#include "core/runtime/cuda/cluster_launch.hpp"
#include "core/runtime/cuda/cuda_check.hpp"
#include "core/runtime/cuda/device_caps.hpp"
#include "core/runtime/cuda/grid_dependency.cuh"
#include "core/runtime/cuda/launch.hpp"
#include "core/runtime/error.hpp"

namespace kf::batch_norm {
namespace {

using reduce::FastDivmod;

// ---- tuning (kept apart from the math) -------------------------------------------------------

struct ChannelPolicy {  // a block (or a cluster of max_split at most) per channel
  static constexpr int threads = 256;
  static constexpr int64_t max_blocks = 65535;
  static constexpr int max_split = 8;
  static constexpr int blocks_per_sm = 4;
};

// Training with each channel's elements staged in shared memory, split over a cluster (sm_90) of
// up to max_split blocks of at most slice_bytes each (six such blocks fit on an SM), so that x is
// read from DRAM once. Measured on an H100 (kf-bench, 2026-11-26T14:48Z, 256 channels of
// 514 KiB), % of copy f32 / f16 / bf16: 72 KiB slices in clusters of 8, 66 / 54 / 54; 36 KiB
// slices in clusters of 16, 66 / 59 / 60. Two buffers a block (the next channel staged while
// this one is computed) lost there: 36 KiB x 2, 54 / 46 / 46; 72 KiB x 2, 42 / 27 / 27. Once the
// output loops no longer dispatched the activation per element, two buffers of 36 KiB gained for
// f32 and lost for 16-bit data on an H200 (A/B, 2026-11-27 09:04Z, same call, two passes):
// 63.0 / 64.7 / 63.5 -> 65.5 / 62.8 / 59.9. So 4- and 8-byte types take two buffers where both
// fit in large_slice_bytes (three blocks an SM), 16-bit types one.
// Where the SMs are rows::tile_issue_lean (H200), a channel of more than one large slice takes
// large slices, in the fewest blocks. H200, kf-bench, NCHW 42 / 84 x 256 x 56 x 56 + ReLU (515 KiB
// channels), % of copy f32 / f16 / bf16: with the split forced (2026-11-29, about 14:22Z-14:24Z,
// one library, same calls), 15 blocks of 34 KiB (the rule before; two buffers for f32) 65.1-65.7 /
// 63.5-63.9 / 61.8, 8 of 64 KiB 71.5-71.9 / 68.4-70.6 / 68.7, 7 of 74 KiB (past
// large_slice_bytes) 71.5 / 71.0 / 68.4; more, smaller slices lost, with 19.5-24.8 MB resident
// (f16: 12 x 43 KiB 67.4, 14 x 37 KiB 66.4, 16 x 32 KiB 62.1), fewer, larger ones with fewer blocks
// an SM (f16: 5 x 103 KiB 65.9, 4 x 129 KiB 53.8). A/B of this rule (about 14:26Z, the library
// before it and after, same call, three passes): 65.3-66.2 / 63.3-64.0 / 61.6-62.3 -> 71.3-71.6
// / 68.6-70.9 / 68.3-68.4, inference unchanged. On the H100 the run of 2026-11-26 14:48Z above
// favoured the 36 KiB slices for 16-bit data; it keeps them.
struct StagedTrainingPolicy {
  static constexpr int threads = 256;
  static constexpr int max_portable_split = 8;
  static constexpr int max_split = 16;  // non-portable, where the device can hold one
  static constexpr int64_t slice_bytes = 36 * 1024;
  static constexpr int64_t large_slice_bytes = 72 * 1024;  // see above
};

struct ColumnPolicy {  // one block per `lanes` adjacent channels of channels-last data
  static constexpr int lanes = 32;
  static constexpr int rows = 8;  // positions read at once
  static constexpr int threads = lanes * rows;
  static constexpr int64_t max_blocks = 65535;
};

// act((v - shift - center) * scale + bias) in storage type S. The output loops take `act` from
// math::with_activation, so that none and ReLU cost no dispatch per element: with the activation
// switch inside the loop, the f32 staged kernel spent about 12 instructions an element on its
// output (SASS, sm_90) where the arithmetic takes 3. H200 A/B (kf-bench, 2026-11-27 08:58Z, same
// call, two passes), NCHW training + ReLU, % of copy f32 / f16 / bf16: 60.0 / 51.6 / 51.3 ->
// 63.0 / 64.1 / 63.3.
template <class S, class Act>
__device__ __forceinline__ S normalized(Act act, math::compute_t<S> v,
                                        const Coefficients<math::compute_t<S>>& k) {
  return math::StorageTraits<S>::from_compute(act((v - k.shift - k.center) * k.scale + k.bias));
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
  cuda::wait_prior_grid();  // a dependent launch: nothing global is touched before this
  cuda::allow_next_grid();
  using T = math::compute_t<S>;
  using Traits = math::StorageTraits<S>;
  using Vec = rows::Pack<S, V>;
  __shared__ T scratch[32];
  __shared__ rows::ClusterMailbox mailbox;  // the channel's sums, when split over a cluster
  rows::ClusterReducer cluster(mailbox, split > 1);
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
    T shift = Traits::to_compute(x[0]);
    // The channel's sums about shift, over the block's part.
    const auto sums_about = [&](T about) {
      T sum_d = 0, sum_d2 = 0;
      for (int64_t v = first + threadIdx.x; v < end; v += Policy::threads) {
        const Vec xv = *reinterpret_cast<const Vec*>(x + channel_offset(w, p.x_c, v * V, small));
#pragma unroll
        for (int e = 0; e < V; ++e) {
          const T d = Traits::to_compute(xv.v[e]) - about;
          sum_d += d;
          sum_d2 += d * d;
        }
      }
      sum_d = rows::block_sum(sum_d, scratch);  // ends with a barrier: x is fully read
      sum_d2 = rows::block_sum(sum_d2, scratch);
      return cluster.reduce(rows::Sums<T>{sum_d, sum_d2}, rows::AddSums{});
    };
    rows::Sums<T> sums = sums_about(shift);
    if (shift_far_from_mean(p, sums.d, sums.d2)) {  // summed again about the mean
      shift += sums.d / static_cast<T>(p.count);
      sums = sums_about(shift);
    }
    const auto k = train_channel<T>(p, c, shift, sums.d, sums.d2, threadIdx.x == 0 && rank == 0);
    math::with_activation(p.act, [&](auto act) {
      for (int64_t v = first + threadIdx.x; v < end; v += Policy::threads) {
        const int64_t m = v * V;
        const Vec xv = *reinterpret_cast<const Vec*>(x + channel_offset(w, p.x_c, m, small));
        Vec yv;
#pragma unroll
        for (int e = 0; e < V; ++e) yv.v[e] = normalized<S>(act, Traits::to_compute(xv.v[e]), k);
        *reinterpret_cast<Vec*>(out + channel_offset(w, p.out_c, m, small)) = yv;
      }
    });
  }
  cluster.done();
}

template <class Policy, class S>
__global__ void __launch_bounds__(Policy::threads)
    train_channels_last_kernel(const __grid_constant__ Plan p) {
  cuda::wait_prior_grid();  // a dependent launch: nothing global is touched before this
  cuda::allow_next_grid();
  using T = math::compute_t<S>;
  using Traits = math::StorageTraits<S>;
  __shared__ T partial_d[Policy::rows][Policy::lanes + 1];
  __shared__ T partial_d2[Policy::rows][Policy::lanes + 1];
  __shared__ Coefficients<T> coefficients[Policy::lanes];
  __shared__ T refined[Policy::lanes];  // a channel's shift for its second sums
  __shared__ bool redo[Policy::lanes];  // whether the channel takes them
  const rows::Walk& w = p.by_channel;
  const int lane = threadIdx.x % Policy::lanes, row = threadIdx.x / Policy::lanes;
  const S* x = static_cast<const S*>(p.x_c.data);
  S* out = static_cast<S*>(p.out_c.data);
  for (int64_t first = int64_t{blockIdx.x} * Policy::lanes; first < p.channels;
       first += int64_t{gridDim.x} * Policy::lanes) {
    const int64_t c = first + lane;
    const bool active = c < p.channels;
    T shift = active ? Traits::to_compute(x[c]) : T(0), sum_d, sum_d2;
    // This thread's sums about shift where `take`, then (row 0) the channel's from the rows'
    // partials.
    const auto sum_about = [&](bool take) {
      sum_d = 0;
      sum_d2 = 0;
      if (take) {
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
      }
    };
    sum_about(active);
    // A channel whose first element lies far out is summed again about its mean.
    bool again = false;
    if (row == 0) {
      again = active && shift_far_from_mean(p, sum_d, sum_d2);
      redo[lane] = again;
      refined[lane] = shift + sum_d / static_cast<T>(p.count);
      if (active && !again) coefficients[lane] = train_channel<T>(p, c, shift, sum_d, sum_d2, true);
    }
    if (__syncthreads_or(again)) {  // the partials are read: they may be written again
      again = redo[lane];
      if (again) shift = refined[lane];
      sum_about(again);
      if (row == 0 && again)
        coefficients[lane] = train_channel<T>(p, c, shift, sum_d, sum_d2, true);
    }
    __syncthreads();
    if (active) {
      const Coefficients<T> k = coefficients[lane];
      math::with_activation(p.act, [&](auto act) {
        for (int64_t m = row; m < p.count; m += Policy::rows)
          out[rows::col_offset(w, p.out_c, m) + c] =
              normalized<S>(act, Traits::to_compute(x[rows::col_offset(w, p.x_c, m) + c]), k);
      });
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
  cuda::launch_clustered_dependent(
      train_by_channel_kernel<Policy, S, V>, device, dim3(static_cast<unsigned>(channels * split)),
      dim3(Policy::threads), 0, split, stream, "batch norm kernel launch", p, split);
}

struct StagedArgs {
  int split;               // blocks per channel (a cluster when > 1)
  uint32_t part;           // vectors of a channel per block (the last block may have fewer)
  uint32_t vectors;        // vectors per channel
  FastDivmod run_vectors;  // vectors per contiguous run of a channel (one batch entry's plane)
  int64_t x_run_stride, out_run_stride;  // elements between a channel's runs in x and out
  int buffers;                           // 2: the next channel is staged while this one is used
};

// The output is streamed (st.global.cs: its lines the first to leave L2). H200 A/B (kf-bench
// `--suite ops`, plain stores against streamed ones, same call, two passes each), NCHW 42 / 84 x
// 256 x 56 x 56 + ReLU, % of copy, f32 / f16 / bf16: 2026-12-01 18:17Z, 69.9 / 69.8, 70.2 / 67.5,
// 69.2 / 66.0 -> 72.9 / 75.0, 72.7 / 70.3, 71.9 / 72.0; 18:36Z, 68.3 / 70.9, 71.2 / 69.0, 69.9
// / 69.8 -> 75.7 / 75.8, 71.4 / 72.1, 72.9 / 72.6. Inference (not staged) read 91.4-93.4 with
// both.
// One channel per block or cluster at a time: each block copies its slice of the channel into
// shared memory with 16-byte cp.async copies (all issued before the first wait), reduces shifted
// sums (shift = the channel's first element, so the variance keeps its precision for large
// means) from there, the blocks' sums meet in rank order through distributed shared memory, and
// each block normalises its slice from shared memory: x is read once. The blocks (clusters) stay
// resident and walk the channels; a thread reads only the slots it staged, so it restages them
// without a barrier: with one buffer right after its output pass (the next channel's loads are
// in flight while this one's stores drain), with two (a.buffers) before it waits for this
// channel's slots (the next channel's loads are in flight through this one's reduction and
// cluster exchange as well).
template <class S>
__global__ void __launch_bounds__(StagedTrainingPolicy::threads)
    train_staged_kernel(const __grid_constant__ Plan p, StagedArgs a) {
  cuda::wait_prior_grid();  // a dependent launch: nothing global is touched before this
  cuda::allow_next_grid();
  using T = math::compute_t<S>;
  using Traits = math::StorageTraits<S>;
  constexpr int kWidth = 16 / static_cast<int>(sizeof(S));
  constexpr int kThreads = StagedTrainingPolicy::threads;
  using Vec = rows::Pack<S, kWidth>;
  extern __shared__ __align__(async_copy::kSharedAlign) uint4 staged[];
  __shared__ rows::Sums<T> scratch[32];
  __shared__ rows::ClusterMailbox mailbox;  // the channel's sums, when split over a cluster
  rows::ClusterReducer cluster(mailbox, a.split > 1);
  const rows::Walk& w = p.by_channel;
  const int rank = static_cast<int>(blockIdx.x % static_cast<unsigned>(a.split));
  const int64_t stride = gridDim.x / a.split;
  const uint32_t first = rank * a.part;
  const uint32_t count = min(a.part, a.vectors - min(first, a.vectors));
  // Element offset of vector m of the channel in x (or out).
  auto offset = [&](uint32_t m, int64_t run_stride) {
    const uint32_t run = a.run_vectors.div(m);
    return run * run_stride + int64_t{m - run * a.run_vectors.divisor} * kWidth;
  };
  // Stages channel c: this thread's slots, vectors threadIdx.x + k * kThreads.
  auto stage = [&](int64_t c, uint4* slots) {
    const S* x = static_cast<const S*>(p.x_c.data) + rows::row_offset(w, p.x_c, c);
    for (uint32_t i = threadIdx.x; i < count; i += kThreads) {
      async_copy::copy16(slots + i, x + offset(first + i, a.x_run_stride));
    }
    async_copy::commit();
  };
  int64_t c = blockIdx.x / a.split;
  if (c < p.channels) stage(c, staged);
  for (unsigned buffer = 0; c < p.channels; c += stride, buffer ^= a.buffers - 1) {
    uint4* const slots = staged + buffer * a.part;
    const bool ahead = a.buffers > 1 && c + stride < p.channels;
    if (ahead) stage(c + stride, staged + (buffer ^ 1) * a.part);
    const S* x = static_cast<const S*>(p.x_c.data) + rows::row_offset(w, p.x_c, c);
    S* out = static_cast<S*>(p.out_c.data) + rows::row_offset(w, p.out_c, c);
    // The channel's values are fetched while its slice lands.
    T shift = Traits::to_compute(x[0]);
    const T weight = channel_value<T>(p.weight, c, T(1)), bias = channel_value<T>(p.bias, c, T(0));
    if (ahead) {
      async_copy::wait<1>();  // this thread's slots of channel c have landed
    } else {
      async_copy::wait<0>();
    }
    // The channel's sums about shift, from the block's staged slice.
    const auto sums_about = [&](T about) {
      rows::Sums<T> sums{0, 0};
      for (uint32_t i = threadIdx.x; i < count; i += kThreads) {
        const Vec xv = *reinterpret_cast<const Vec*>(slots + i);
#pragma unroll
        for (int e = 0; e < kWidth; ++e) {
          const T d = Traits::to_compute(xv.v[e]) - about;
          sums.d += d;
          sums.d2 += d * d;
        }
      }
      sums = rows::block_reduce(sums, rows::AddSums{}, scratch);
      return cluster.reduce(sums, rows::AddSums{});
    };
    rows::Sums<T> sums = sums_about(shift);
    if (shift_far_from_mean(p, sums.d, sums.d2)) {  // summed again about the mean
      shift += sums.d / static_cast<T>(p.count);
      sums = sums_about(shift);
    }
    const auto k =
        train_channel<T>(p, c, shift, sums.d, sums.d2, threadIdx.x == 0 && rank == 0, weight, bias);
    math::with_activation(p.act, [&](auto act) {
      for (uint32_t i = threadIdx.x; i < count; i += kThreads) {
        const Vec xv = *reinterpret_cast<const Vec*>(slots + i);
        Vec yv;
#pragma unroll
        for (int e = 0; e < kWidth; ++e)
          yv.v[e] = normalized<S>(act, Traits::to_compute(xv.v[e]), k);
        rows::store_pack<true>(reinterpret_cast<Vec*>(out + offset(first + i, a.out_run_stride)),
                               yv);  // streamed past L2 (st.global.cs)
      }
    });
    if (a.buffers == 1 && c + stride < p.channels) stage(c + stride, staged);
  }
  cluster.done();
}

// Prepares train_staged_kernel<S> on `device` once (the dynamic shared memory it may take, the
// largest carveout, non-portable cluster sizes) and returns the largest cluster it may use: 1
// before sm_90, 16 where the device can hold such a cluster of 36 KiB slices, else 8.
template <class S>
int prepare_staged_training(int32_t device) {
  static std::atomic<int> kept[cuda::kKeptDevices];
  return cuda::once_per_device(kept, device, [device] {
    using Policy = StagedTrainingPolicy;
    const auto kernel = train_staged_kernel<S>;
    cuda::check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(Policy::large_slice_bytes)),
                "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
    cuda::check(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                     cudaSharedmemCarveoutMaxShared),
                "cudaFuncSetAttribute(PreferredSharedMemoryCarveout)");
    int limit = 1;
    if (cuda::compute_major(device) >= 9) {
      limit = Policy::max_portable_split;
      if (cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) ==
              cudaSuccess &&
          rows::resident_blocks(kernel, Policy::threads, static_cast<size_t>(Policy::slice_bytes),
                                Policy::max_split, device) > 0)
        limit = Policy::max_split;
      cudaGetLastError();  // a refused non-portable size is not an error of the op
    }
    return limit;
  });
}

// Buffers a block of the staged kernel takes for a slice of `part` vectors: two (the next
// channel staged while this one is computed) for 4- and 8-byte types where both fit in
// large_slice_bytes, else one (StagedTrainingPolicy).
template <class S>
int staged_buffers(int64_t part) {
  return sizeof(S) >= 4 && part * 16 * 2 <= StagedTrainingPolicy::large_slice_bytes ? 2 : 1;
}

// even_split_by_rounds (staged_split.hpp) for launch_staged_training, the clusters from the
// occupancy query at each split's shared memory (and buffers). The answer depends on the device
// and shape only, so each thread keeps its last few (as rows::resident_blocks does) rather than
// ask the runtime at every launch.
template <class S>
int64_t split_by_rounds(const Plan& p, int64_t vectors, int64_t rule, int max_split,
                        int32_t device) {
  using Policy = StagedTrainingPolicy;
  struct Answer {
    int32_t device;
    int64_t channels;
    int64_t vectors;
    int64_t split;  // 0: an empty entry
  };
  constexpr unsigned kKept = 8;
  thread_local Answer kept[kKept] = {};
  thread_local unsigned next = 0;
  for (const Answer& a : kept)
    if (a.split > 0 && a.device == device && a.channels == p.channels && a.vectors == vectors)
      return a.split;
  const auto rounds_of = [&](int64_t split) -> int64_t {
    const int64_t part = (vectors + split - 1) / split;
    const int64_t bytes = part * 16 * staged_buffers<S>(part);
    if (bytes > Policy::large_slice_bytes || p.channels * split > 0x7fffffff) return 0;
    const int64_t clusters =
        rows::resident_blocks(train_staged_kernel<S>, Policy::threads, static_cast<size_t>(bytes),
                              static_cast<int>(split), device) /
        split;
    return clusters > 0 ? (p.channels + clusters - 1) / clusters : 0;
  };
  const int64_t best =
      even_split_by_rounds(vectors, rule, max_split, Policy::large_slice_bytes / 16, rounds_of);
  kept[next++ % kKept] = Answer{device, p.channels, vectors, best};
  return best;
}

// The staged kernel where it applies: channels-first data whose channel runs fill whole 16-byte
// vectors (x and out 16-byte aligned), a channel no larger than max_split slices (one slice
// without clusters). False otherwise: the caller reads x twice instead.
template <class S>
bool launch_staged_training(const Plan& p, int32_t device, cudaStream_t stream) {
  using Policy = StagedTrainingPolicy;
  constexpr int kWidth = 16 / static_cast<int>(sizeof(S));
  const rows::Walk& w = p.by_channel;
  if (p.channels_last || w.inner_ndim < 1 || w.inner_ndim > 2 || !channel_vectors_fit(p, kWidth))
    return false;
  const int64_t vectors = p.count / kWidth;
  if (vectors >= (int64_t{1} << 31)) return false;
  const int max_split = prepare_staged_training<S>(device);
  // 36 KiB slices (six blocks an SM), or 72 KiB ones (three) when a channel needs more blocks
  // than a cluster may hold, or where the device takes large slices (StagedTrainingPolicy)
  // and a channel needs more than one of them.
  constexpr int64_t kLarge = Policy::large_slice_bytes / 16;  // vectors of a large slice
  const bool large_first = vectors > kLarge && rows::tile_issue_lean(device);
  int64_t split = 0;
  for (const int64_t bytes :
       {large_first ? Policy::large_slice_bytes : Policy::slice_bytes, Policy::large_slice_bytes}) {
    split = (vectors + bytes / 16 - 1) / (bytes / 16);
    if (split <= max_split) break;
  }
  if (split > max_split || p.channels * split > 0x7fffffff) return false;
  if (max_split > 1 && !rows::tile_issue_lean(device))
    split = split_by_rounds<S>(p, vectors, split, max_split, device);
  StagedArgs a;
  a.split = static_cast<int>(split);
  a.vectors = static_cast<uint32_t>(vectors);
  a.part = static_cast<uint32_t>((vectors + split - 1) / split);
  const int64_t run = w.inner_shape[w.inner_ndim - 1];  // elements per contiguous run
  a.run_vectors = FastDivmod(static_cast<uint32_t>(run / kWidth));
  a.x_run_stride = w.inner_ndim == 2 ? p.x_c.inner[0] : 0;
  a.out_run_stride = w.inner_ndim == 2 ? p.out_c.inner[0] : 0;
  a.buffers = staged_buffers<S>(a.part);
  const size_t smem = static_cast<size_t>(a.part) * 16 * a.buffers;
  int64_t grid = p.channels * split;  // resident blocks walk the channels
  const int64_t resident =
      rows::resident_blocks(train_staged_kernel<S>, Policy::threads, smem, a.split, device);
  if (resident > 0 && grid > resident) grid = resident;
  cuda::launch_clustered_dependent(train_staged_kernel<S>, device,
                                   dim3(static_cast<unsigned>(grid)), dim3(Policy::threads), smem,
                                   a.split, stream, "batch norm kernel launch", p, a);
  return true;
}

template <class S>
void launch_training(const Plan& p, int32_t device, cudaStream_t stream) {
  if (launch_staged_training<S>(p, device, stream)) return;
  if (p.channels_last && p.channels >= ColumnPolicy::lanes) {
    const int64_t groups = (p.channels + ColumnPolicy::lanes - 1) / ColumnPolicy::lanes;
    cuda::launch_dependent(train_channels_last_kernel<ColumnPolicy, S>, device,
                           static_cast<unsigned>(std::min(groups, ColumnPolicy::max_blocks)),
                           ColumnPolicy::threads, stream, "batch norm kernel launch", p);
  } else {
    constexpr int V = 16 / sizeof(S);
    if (channel_vectors_fit(p, V))
      launch_by_channel<S, V>(p, device, stream);
    else
      launch_by_channel<S, 1>(p, device, stream);
  }
}

}  // namespace

void run_training_cuda(const Plan& plan, int32_t device_id, cudaStream_t stream) {
  switch (plan.dtype) {
    case KF_DTYPE_FLOAT16: launch_training<math::half_t>(plan, device_id, stream); break;
    case KF_DTYPE_BFLOAT16: launch_training<math::bfloat16_t>(plan, device_id, stream); break;
    case KF_DTYPE_FLOAT64: launch_training<double>(plan, device_id, stream); break;
    default: launch_training<float>(plan, device_id, stream); break;
  }
}

}  // namespace kf::batch_norm
