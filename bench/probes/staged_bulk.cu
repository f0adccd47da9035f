// kf-probe-staged-bulk: a standalone probe of the staged class with the Tensor Memory
// Accelerator's bulk copies (batch-norm training over NCHW channels; the norms' and softmax's
// rows of 262144), not the library's kernels (they are not called). A cluster of `split` blocks
// takes a channel (or row) at a time, each block a slice of it, held in NB shared-memory slots.
// One thread of the block (the issuer) moves the slices: global -> shared with cp.async.bulk, one
// copy for each contiguous run the slice crosses, completing on the slot's mbarrier. The other
// threads only reduce the slice, exchange the block's shifted sums with the cluster through
// distributed shared memory (the same rank order, so every block gets the same statistics), and
// normalise. Three forms:
//  - direct: each thread writes its outputs from registers with 16-byte stores;
//  - bulk: the slice is normalised in place and written by the issuer's bulk copies
//    (shared -> global, bulk_group); a slot is restaged once those have read it;
//  - pipe: bulk, and channel k + 1 is reduced and pushed before channel k's exchange is waited
//    for (the cluster barrier split into arrive and wait), to hide the exchange.
// The op is batch-norm training's arithmetic (shifted sums, a weight, a bias and ReLU; the
// running statistics left out), f32 and f16; every output is compared with a float64 host
// reference (NaN-poisoned first), and timed with CUDA events against a 256 MiB
// cudaMemcpyAsync in the same process, as kf-bench times. A last launch of each case records
// clock64 marks (waiting for the slice, reduce + exchange, output, load issued -> seen) and
// prints their means. Measured on the H200: docs/performance.md, "Session of 05:39Z
// (2026-12-01)"; none of the forms passed the library's staged kernels.
// Usage: kf-probe-staged-bulk (512-thread blocks; kf-probe-staged-bulk-256: 256)
#include <cooperative_groups.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench/probes/probe_util.cuh"

namespace cg = cooperative_groups;

#ifndef KF_PROBE_THREADS
#define KF_PROBE_THREADS 512
#endif
constexpr int kThreads = KF_PROBE_THREADS;

// The data: `channels` channels, each `runs` contiguous runs of `run_vectors` 16-byte vectors;
// run r of channel c starts at vector c * channel_stride + r * run_stride.
struct Shape {
  int channels, runs;
  uint32_t run_vectors;
  int64_t channel_stride, run_stride;
  uint32_t part;  // vectors of a channel a block (the last may have fewer)
  int split;
  float eps;
};

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void bar_init(uint64_t* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void bar_expect(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n .reg .pred p;\n"
      "W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      " @!p bra W;\n}" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void bulk_load(void* to, const void* from, uint32_t bytes,
                                          uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(smem_addr(to)),
      "l"(from), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}
__device__ __forceinline__ void bulk_store(void* to, const void* from, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(to),
               "r"(smem_addr(from)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
__device__ __forceinline__ void bulk_wait_read0() {
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}
__device__ __forceinline__ void bulk_wait0() {
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}
__device__ __forceinline__ void fence_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Calls f(vector offset in global, first slot, vectors) for each contiguous piece of the slice
// [first, first + count) of channel c.
template <class F>
__device__ __forceinline__ void for_pieces(const Shape& s, int c, uint32_t first, uint32_t count,
                                           F f) {
  uint32_t v = first;
  const uint32_t end = first + count;
  while (v < end) {
    const uint32_t r = v / s.run_vectors;
    const uint32_t stop = min(end, (r + 1) * s.run_vectors);
    f(c * s.channel_stride + r * s.run_stride + (v - r * s.run_vectors), v - first, stop - v);
    v = stop;
  }
}

// The block's shifted sums of its slice (four vectors in flight a thread), folded over the
// block: returned in every lane of warp 0. Starts with a barrier, so that warp_sums may be reused.
template <class S>
__device__ __forceinline__ float2 block_sums(const uint4* slice, uint32_t count, float shift,
                                             float2* warp_sums) {
  using L = Vec<S>;
  float sd[2] = {0, 0}, sd2[2] = {0, 0};
  auto add = [&](const uint4& u, int a) {
    float f[L::n];
    L::load(u, f);
#pragma unroll
    for (int e = 0; e < L::n; ++e) {
      const float d = f[e] - shift;
      sd[a] += d;
      sd2[a] = fmaf(d, d, sd2[a]);
    }
  };
  uint32_t i = threadIdx.x;
  for (; i + 3 * kThreads < count; i += 4 * kThreads) {
    uint4 u[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) u[j] = slice[i + j * kThreads];
#pragma unroll
    for (int j = 0; j < 4; ++j) add(u[j], j & 1);
  }
  for (; i < count; i += kThreads) add(slice[i], 0);
  float2 t = make_float2(sd[0] + sd[1], sd2[0] + sd2[1]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    t.x += __shfl_xor_sync(0xffffffffu, t.x, o);
    t.y += __shfl_xor_sync(0xffffffffu, t.y, o);
  }
  __syncthreads();
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = t;
  __syncthreads();
  if (threadIdx.x < 32) {
    t = threadIdx.x < kThreads / 32 ? warp_sums[threadIdx.x] : make_float2(0, 0);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      t.x += __shfl_xor_sync(0xffffffffu, t.x, o);
      t.y += __shfl_xor_sync(0xffffffffu, t.y, o);
    }
  }
  return t;
}

// Warp 0 pushes the block's sums t into slot `rank` of every block's mailbox row `row`.
__device__ __forceinline__ void push_sums(cg::cluster_group& cluster, float2* row, float2 t,
                                          int rank, int split) {
  if (threadIdx.x < static_cast<unsigned>(split))
    cluster.map_shared_rank(row, threadIdx.x)[rank] = t;
}

// Every warp folds the cluster's sums from the local mailbox row, the same tree everywhere, and
// returns act's (scale, bias) for the channel: (v - mean) * weight * rstd + bias as one FMA.
__device__ __forceinline__ float2 coefficients(const float2* row, int split, int64_t n, float shift,
                                               float weight, float bias, float eps) {
  const unsigned lane = threadIdx.x % 32;
  float2 t = lane < static_cast<unsigned>(split) ? row[lane] : make_float2(0, 0);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    t.x += __shfl_xor_sync(0xffffffffu, t.x, o);
    t.y += __shfl_xor_sync(0xffffffffu, t.y, o);
  }
  const float mean_d = t.x / static_cast<float>(n);
  const float var = fmaxf(t.y / static_cast<float>(n) - mean_d * mean_d, 0.f);
  const float scale = weight * rsqrtf(var + eps);
  return make_float2(scale, bias - (shift + mean_d) * scale);
}

// ReLU(v * k.x + k.y) of the slice, in place (four vectors in flight a thread).
template <class S>
__device__ __forceinline__ void normalize_in_place(uint4* slice, uint32_t count, float2 k) {
  using L = Vec<S>;
  auto put = [&](uint4 u) {
    float f[L::n];
    L::load(u, f);
#pragma unroll
    for (int e = 0; e < L::n; ++e) f[e] = fmaxf(fmaf(f[e], k.x, k.y), 0.f);
    return L::store(f);
  };
  uint32_t i = threadIdx.x;
  for (; i + 3 * kThreads < count; i += 4 * kThreads) {
    uint4 u[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) u[j] = slice[i + j * kThreads];
#pragma unroll
    for (int j = 0; j < 4; ++j) slice[i + j * kThreads] = put(u[j]);
  }
  for (; i < count; i += kThreads) slice[i] = put(slice[i]);
}

// A block's place: its rank in the cluster, its cluster among `clusters`, and its slice of a
// channel, vectors [first, first + count); n is the channel's elements.
struct Place {
  int rank, cluster_id, clusters;
  uint32_t first, count;
  int64_t n;
};
template <class S>
__device__ __forceinline__ Place place_of(const cg::cluster_group& cluster, const Shape& s) {
  Place p;
  p.rank = static_cast<int>(cluster.block_rank());
  p.cluster_id = blockIdx.x / s.split;
  p.clusters = gridDim.x / s.split;
  const uint32_t vectors = s.runs * s.run_vectors;
  p.first = p.rank * s.part;
  p.count = min(s.part, vectors - min(p.first, vectors));
  p.n = int64_t{vectors} * Vec<S>::n;
  return p;
}

// trace (optional): clock64 per block and channel k at `event` (0 the top, 1 data landed, 2
// statistics exchanged, 3 output issued, 4 the channel's load issued).
__device__ __forceinline__ void mark(long long* trace, int max_k, int k, int event) {
  if (trace != nullptr && k < max_k)
    trace[(int64_t{blockIdx.x} * max_k + k) * 5 + event] = clock64();
}

// The issuer's bulk copies of the block's slice of channel c into `to`, completing on `full`.
__device__ __forceinline__ void load_slice(uint4* to, uint64_t* full, const uint4* gx,
                                           const Shape& s, const Place& p, int c) {
  bar_expect(full, p.count * 16u);
  for_pieces(s, c, p.first, p.count, [&](int64_t g, uint32_t at, uint32_t m) {
    bulk_load(to + at, gx + g, m * 16u, full);
  });
}

// The issuer's bulk stores of the block's slice of channel c from `from`, as one bulk group.
__device__ __forceinline__ void store_slice(uint4* gout, const uint4* from, const Shape& s,
                                            const Place& p, int c) {
  for_pieces(s, c, p.first, p.count,
             [&](int64_t g, uint32_t at, uint32_t m) { bulk_store(gout + g, from + at, m * 16u); });
  bulk_commit();
}

// The issuer's set-up of the slots' mbarriers, visible to the cluster's bulk copies.
__device__ __forceinline__ void init_slots(uint64_t* full, int slots) {
  for (int i = 0; i < slots; ++i) bar_init(&full[i]);
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// Channel c's shift: its first element (so that the variance keeps its precision).
template <class S>
__device__ __forceinline__ float channel_shift(const uint4* gx, const Shape& s, int c) {
  float f[Vec<S>::n];
  Vec<S>::load(__ldg(gx + c * s.channel_stride), f);
  return f[0];
}

// kDirect: the output is written by every thread with 16-byte stores from registers (the slot is
// free once the block has passed the barrier after its output loop); otherwise it is normalised
// in place and written by the issuing thread's bulk copies (the slot is free once they have
// read it). The issuing thread is thread 32, so that thread 0's coefficients do not wait on it.
template <class S, int NB, bool kDirect>
__global__ void __launch_bounds__(kThreads)
    staged_bulk_kernel(const S* __restrict__ x, S* __restrict__ out, const float* __restrict__ w,
                       const float* __restrict__ b, Shape s, long long* trace, int max_k) {
  using L = Vec<S>;
  constexpr unsigned kIssuer = 32;
  extern __shared__ __align__(128) uint4 buf[];
  __shared__ uint64_t full[NB];
  __shared__ float2 warp_sums[kThreads / 32];
  __shared__ float2 mailbox[2][32];
  cg::cluster_group cluster = cg::this_cluster();
  const Place p = place_of<S>(cluster, s);
  const uint4* gx = reinterpret_cast<const uint4*>(x);
  uint4* gout = reinterpret_cast<uint4*>(out);
  // Stages the channel NB - 1 ahead of c into the slot the previous channel has left.
  auto restage = [&](int c, int k) {
    if (!kDirect) bulk_wait_read0();
    const int ahead = c + (NB - 1) * p.clusters;
    mark(trace, max_k, k + NB - 1, 4);
    const int slot = (k - 1 + NB) % NB;
    if (ahead < s.channels) load_slice(buf + slot * s.part, &full[slot], gx, s, p, ahead);
  };
  if (threadIdx.x == kIssuer) init_slots(full, NB);
  __syncthreads();
  if (threadIdx.x == kIssuer) {
    for (int i = 0; i < NB; ++i) {
      const int c = p.cluster_id + i * p.clusters;
      mark(trace, max_k, i, 4);
      if (c < s.channels) load_slice(buf + i * s.part, &full[i], gx, s, p, c);
    }
  }
  cluster.sync();  // every block's mailbox exists before any is read
  int k = 0;
  for (int c = p.cluster_id; c < s.channels; c += p.clusters, ++k) {
    const int slot = k % NB;
    const bool early = kDirect || NB == 1;  // restage at the top, not after the exchange
    if (threadIdx.x == 0) mark(trace, max_k, k, 0);
    if (k > 0 && early && threadIdx.x == kIssuer) restage(c, k);
    const float shift = channel_shift<S>(gx, s, c);
    const float wc = __ldg(w + c), bc = __ldg(b + c);
    bar_wait(&full[slot], (k / NB) & 1);
    if (threadIdx.x == 0) mark(trace, max_k, k, 1);
    uint4* const slice = buf + slot * s.part;
    const float2 t = block_sums<S>(slice, p.count, shift, warp_sums);
    push_sums(cluster, &mailbox[k & 1][0], t, p.rank, s.split);
    cluster.sync();
    if (threadIdx.x == 0) mark(trace, max_k, k, 2);
    if (k > 0 && !early && threadIdx.x == kIssuer) restage(c, k);
    const float2 k2 = coefficients(&mailbox[k & 1][0], s.split, p.n, shift, wc, bc, s.eps);
    if (kDirect) {
      for_pieces(s, c, p.first, p.count, [&](int64_t g, uint32_t at, uint32_t m) {
        for (uint32_t i = threadIdx.x; i < m; i += kThreads) {
          float f[L::n];
          L::load(slice[at + i], f);
#pragma unroll
          for (int e = 0; e < L::n; ++e) f[e] = fmaxf(fmaf(f[e], k2.x, k2.y), 0.f);
          gout[g + i] = L::store(f);
        }
      });
      __syncthreads();  // the slot is read: it may be restaged
    } else {
      normalize_in_place<S>(slice, p.count, k2);
      fence_async_shared();  // the generic writes are seen by the bulk copies
      __syncthreads();
      if (threadIdx.x == kIssuer) store_slice(gout, slice, s, p, c);
    }
    if (threadIdx.x == 0) mark(trace, max_k, k, 3);
  }
  if (threadIdx.x == kIssuer) bulk_wait0();
  cluster.sync();  // no block leaves while another may still read its mailbox
}

// The exchange hidden behind the next channel: each block reduces channel k + 1 and pushes its
// sums into every block's mailbox before it waits for channel k's exchange, so that the
// cluster barrier's latency and the blocks' skew overlap a reduction. The cluster barrier is
// split (arrive after a push, wait before the fold); mailboxes rotate over four slots, so that
// no push lands in a slot a block may still be folding. Bulk copies in and out as above; NB >= 3.
__device__ __forceinline__ void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

template <class S, int NB>
__global__ void __launch_bounds__(kThreads)
    pipelined_kernel(const S* __restrict__ x, S* __restrict__ out, const float* __restrict__ w,
                     const float* __restrict__ b, Shape s, long long* trace, int max_k) {
  static_assert(NB >= 3, "channel k + 1 is reduced while k is written and k + 2 loads");
  constexpr unsigned kIssuer = 32;
  extern __shared__ __align__(128) uint4 buf[];
  __shared__ uint64_t full[NB];
  __shared__ float2 warp_sums[kThreads / 32];
  __shared__ float2 mailbox[4][32];
  cg::cluster_group cluster = cg::this_cluster();
  const Place p = place_of<S>(cluster, s);
  const uint4* gx = reinterpret_cast<const uint4*>(x);
  uint4* gout = reinterpret_cast<uint4*>(out);
  auto channel = [&](int k) { return p.cluster_id + k * p.clusters; };
  auto load = [&](int k) {  // the issuer only
    mark(trace, max_k, k, 4);
    load_slice(buf + (k % NB) * s.part, &full[k % NB], gx, s, p, channel(k));
  };
  // Reduces channel k's slice and pushes the block's sums into every block's mailbox.
  auto reduce_push = [&](int k) {
    const float shift = channel_shift<S>(gx, s, channel(k));
    bar_wait(&full[k % NB], (k / NB) & 1);
    if (threadIdx.x == 0) mark(trace, max_k, k, 1);
    const float2 t = block_sums<S>(buf + (k % NB) * s.part, p.count, shift, warp_sums);
    push_sums(cluster, &mailbox[k % 4][0], t, p.rank, s.split);
  };
  if (threadIdx.x == kIssuer) init_slots(full, NB);
  __syncthreads();
  if (threadIdx.x == kIssuer)
    for (int k = 0; k < NB && channel(k) < s.channels; ++k) load(k);
  cluster.sync();  // every block's mailbox exists before any is written
  if (channel(0) < s.channels) {
    if (threadIdx.x == 0) mark(trace, max_k, 0, 0);
    reduce_push(0);
    cluster_arrive();
  }
  for (int k = 0; channel(k) < s.channels; ++k) {
    const int c = channel(k);
    const bool next = channel(k + 1) < s.channels;
    const float wc = __ldg(w + c), bc = __ldg(b + c), shift = channel_shift<S>(gx, s, c);
    if (next) {
      if (threadIdx.x == 0) mark(trace, max_k, k + 1, 0);
      reduce_push(k + 1);
    }
    if (k > 0 && threadIdx.x == kIssuer) {
      bulk_wait_read0();  // channel k - 1's stores have read its slot: stage k - 1 + NB there
      if (channel(k - 1 + NB) < s.channels) load(k - 1 + NB);
    }
    cluster_wait();  // channel k's sums are in every mailbox
    if (threadIdx.x == 0) mark(trace, max_k, k, 2);
    if (next) cluster_arrive();  // channel k + 1's pushes are done
    const float2 k2 = coefficients(&mailbox[k % 4][0], s.split, p.n, shift, wc, bc, s.eps);
    uint4* const slice = buf + (k % NB) * s.part;
    normalize_in_place<S>(slice, p.count, k2);
    fence_async_shared();
    __syncthreads();
    if (threadIdx.x == kIssuer) store_slice(gout, slice, s, p, c);
    if (threadIdx.x == 0) mark(trace, max_k, k, 3);
  }
  if (threadIdx.x == kIssuer) bulk_wait0();
  cluster.sync();
}

struct Result {
  double us, pct;
  double err;
  bool ok;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <class S>
float host_value(S v);
template <>
float host_value(float v) {
  return v;
}
template <>
float host_value(__half v) {
  return __half2float(v);
}

template <class S, int NB, int kMode>  // 0 direct, 1 bulk, 2 pipelined
Result run_case(const char* name, int channels, int runs, int64_t run_elems, int split,
                double ceiling, int runs_timed, bool traced = true) {
  constexpr int W = 16 / sizeof(S);
  Shape s{};
  s.channels = channels;
  s.runs = runs;
  s.run_vectors = static_cast<uint32_t>(run_elems / W);
  s.channel_stride = s.run_vectors;
  s.run_stride = int64_t{channels} * s.run_vectors;
  const uint32_t vectors = s.runs * s.run_vectors;
  s.part = (vectors + split - 1) / split;
  s.split = split;
  s.eps = 1e-5f;
  const size_t elems = size_t{static_cast<size_t>(channels)} * runs * run_elems;
  const size_t bytes = elems * sizeof(S);
  std::vector<S> hx(elems);
  uint64_t state = 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < elems; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const float u = static_cast<float>((state >> 40) & 0xffffff) / 16777216.0f;
    const int c = static_cast<int>((i / run_elems) % channels);
    hx[i] = static_cast<S>(3.0f * u - 1.0f + 0.25f * static_cast<float>(c % 7));
  }
  std::vector<float> hw(channels), hb(channels);
  for (int c = 0; c < channels; ++c) hw[c] = 0.5f + 0.01f * (c % 13), hb[c] = 0.1f * (c % 5) - 0.2f;
  S *dx, *dout;
  float *dw, *db;
  CK(cudaMalloc(&dx, bytes));
  CK(cudaMalloc(&dout, bytes));
  CK(cudaMalloc(&dw, channels * 4));
  CK(cudaMalloc(&db, channels * 4));
  CK(cudaMemcpy(dx, hx.data(), bytes, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dw, hw.data(), channels * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(db, hb.data(), channels * 4, cudaMemcpyHostToDevice));
  CK(cudaMemset(dout, 0xff, bytes));  // NaN poison
  const auto kernel = [] {
    if constexpr (kMode == 2)
      return pipelined_kernel<S, NB>;
    else
      return staged_bulk_kernel<S, NB, kMode == 0>;
  }();
  const size_t smem = size_t{s.part} * 16 * NB;
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          static_cast<int>(smem)));
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                          cudaSharedmemCarveoutMaxShared));
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  cudaLaunchConfig_t cfg{};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = split;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.gridDim = dim3(split * channels);
  int active = 0;
  if (cudaOccupancyMaxActiveClusters(&active, kernel, &cfg) != cudaSuccess || active == 0) {
    cudaGetLastError();
    printf("%-34s %s split %2d NB %d slice %6.1f KiB: does not fit\n", name,
           (kMode == 0   ? "direct"
            : kMode == 1 ? "bulk  "
                         : "pipe  "),
           split, NB, s.part * 16 / 1024.0);
    CK(cudaFree(dx));
    CK(cudaFree(dout));
    CK(cudaFree(dw));
    CK(cudaFree(db));
    return {0, 0, 0, false};
  }
  const int grid_clusters = std::min(channels, active);
  int per_sm = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem));
  cfg.gridDim = dim3(split * grid_clusters);
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cfg.stream = st;
  CK(cudaLaunchKernelEx(&cfg, kernel, dx, dout, dw, db, s, (long long*)nullptr, 0));
  CK(cudaStreamSynchronize(st));
  // Check against float64.
  std::vector<S> ho(elems);
  CK(cudaMemcpy(ho.data(), dout, bytes, cudaMemcpyDeviceToHost));
  double worst = 0;
  bool ok = true;
  const int64_t per = int64_t{runs} * run_elems;
  for (int c = 0; c < channels; ++c) {
    double sum = 0, sum2 = 0;
    for (int r = 0; r < runs; ++r)
      for (int64_t e = 0; e < run_elems; ++e) {
        const double v = host_value(hx[(size_t(r) * channels + c) * run_elems + e]);
        sum += v;
        sum2 += v * v;
      }
    const double mean = sum / per, var = std::max(sum2 / per - mean * mean, 0.0);
    const double rstd = 1.0 / std::sqrt(var + 1e-5);
    for (int r = 0; r < runs; ++r)
      for (int64_t e = 0; e < run_elems; ++e) {
        const size_t i = (size_t(r) * channels + c) * run_elems + e;
        const double ref = std::max((host_value(hx[i]) - mean) * rstd * hw[c] + hb[c], 0.0);
        const double got = host_value(ho[i]);
        const double err = std::fabs(got - ref);
        const double tol =
            sizeof(S) == 4 ? 2e-5 + 2e-5 * std::fabs(ref) : 2e-3 + 4e-3 * std::fabs(ref);
        if (!(err <= tol)) ok = false;
        if (!(err <= worst)) worst = std::isnan(err) ? INFINITY : err;
      }
  }
  cudaEvent_t ev[2];
  CK(cudaEventCreate(&ev[0]));
  CK(cudaEventCreate(&ev[1]));
  std::vector<double> us;
  for (int i = 0; i < 3; ++i)
    CK(cudaLaunchKernelEx(&cfg, kernel, dx, dout, dw, db, s, (long long*)nullptr, 0));
  for (int i = 0; i < runs_timed; ++i) {
    CK(cudaEventRecord(ev[0], st));
    CK(cudaLaunchKernelEx(&cfg, kernel, dx, dout, dw, db, s, (long long*)nullptr, 0));
    CK(cudaEventRecord(ev[1], st));
    CK(cudaEventSynchronize(ev[1]));
    float ms;
    CK(cudaEventElapsedTime(&ms, ev[0], ev[1]));
    us.push_back(ms * 1e3);
  }
  const double t = median(us);
  if (traced) {  // one more launch with the clock64 marks
    const int max_k = (channels + grid_clusters - 1) / grid_clusters;
    const size_t nmarks = size_t(cfg.gridDim.x) * max_k * 5;
    long long* dtrace;
    CK(cudaMalloc(&dtrace, nmarks * 8));
    CK(cudaMemset(dtrace, 0, nmarks * 8));
    CK(cudaLaunchKernelEx(&cfg, kernel, dx, dout, dw, db, s, dtrace, max_k));
    CK(cudaStreamSynchronize(st));
    std::vector<long long> h(nmarks);
    CK(cudaMemcpy(h.data(), dtrace, nmarks * 8, cudaMemcpyDeviceToHost));
    CK(cudaFree(dtrace));
    double sum[6] = {0, 0, 0, 0, 0, 0};
    long cnt = 0;
    for (unsigned blk = 0; blk < cfg.gridDim.x; ++blk)
      for (int k = 1; k + 1 < max_k; ++k) {
        const long long* m = &h[(size_t(blk) * max_k + k) * 5];
        const long long* nx = m + 5;
        if (m[0] == 0 || m[1] == 0 || m[2] == 0 || m[3] == 0 || m[4] == 0 || nx[0] == 0) continue;
        sum[0] += m[1] - m[0];   // waiting for the slice
        sum[1] += m[2] - m[1];   // reduce + exchange
        sum[2] += m[3] - m[2];   // coefficients + output
        sum[3] += nx[0] - m[3];  // to the next top
        sum[4] += m[1] - m[4];   // load issued -> landed (seen)
        sum[5] += nx[0] - m[0];  // a channel
        ++cnt;
      }
    if (cnt > 0)
      printf(
          "    trace (cycles, mean of %ld): wait %.0f, reduce+exchange %.0f, output %.0f, "
          "rest %.0f, issue->seen %.0f, channel %.0f\n",
          cnt, sum[0] / cnt, sum[1] / cnt, sum[2] / cnt, sum[3] / cnt, sum[4] / cnt, sum[5] / cnt);
  }
  const double gbps = 2.0 * bytes / (t * 1e3);
  printf(
      "%-34s %s split %2d NB %d slice %6.1f KiB, %d/SM, %3d clusters: %8.2f us %7.1f GB/s %5.1f %% "
      " %s (max err %.2e)\n",
      name,
      (kMode == 0   ? "direct"
       : kMode == 1 ? "bulk  "
                    : "pipe  "),
      split, NB, s.part * 16 / 1024.0, per_sm, grid_clusters, t, gbps, 100 * gbps / ceiling,
      ok ? "ok" : "WRONG", worst);
  fflush(stdout);
  CK(cudaEventDestroy(ev[0]));
  CK(cudaEventDestroy(ev[1]));
  CK(cudaStreamDestroy(st));
  CK(cudaFree(dx));
  CK(cudaFree(dout));
  CK(cudaFree(dw));
  CK(cudaFree(db));
  return {t, 100 * gbps / ceiling, worst, ok};
}

double copy_ceiling() {
  const size_t bytes = size_t{256} << 20;
  void *a, *b;
  CK(cudaMalloc(&a, bytes));
  CK(cudaMalloc(&b, bytes));
  CK(cudaMemset(a, 0x5a, bytes));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaEvent_t ev[2];
  CK(cudaEventCreate(&ev[0]));
  CK(cudaEventCreate(&ev[1]));
  for (int i = 0; i < 3; ++i) CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, st));
  std::vector<double> us;
  for (int i = 0; i < 20; ++i) {
    CK(cudaEventRecord(ev[0], st));
    CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, st));
    CK(cudaEventRecord(ev[1], st));
    CK(cudaEventSynchronize(ev[1]));
    float ms;
    CK(cudaEventElapsedTime(&ms, ev[0], ev[1]));
    us.push_back(ms * 1e3);
  }
  const double gbps = 2.0 * bytes / (median(us) * 1e3);
  CK(cudaFree(a));
  CK(cudaFree(b));
  CK(cudaStreamDestroy(st));
  return gbps;
}

// Every form at clusters of 8, 11 and 16 blocks, as many slots as fit (slices of at most 100 KiB).
template <class S>
void sweep(const char* name, int channels, int runs, int64_t run_elems, double ceiling) {
  const int64_t channel_bytes = int64_t{runs} * run_elems * sizeof(S);
  for (int split : {8, 11, 16}) {
    const int64_t slice = (channel_bytes + split - 1) / split;
    if (slice > 100 * 1024) continue;
    run_case<S, 1, 0>(name, channels, runs, run_elems, split, ceiling, 20);
    run_case<S, 1, 1>(name, channels, runs, run_elems, split, ceiling, 20);
    run_case<S, 2, 1>(name, channels, runs, run_elems, split, ceiling, 20);
    if (slice <= 72 * 1024) {
      run_case<S, 3, 1>(name, channels, runs, run_elems, split, ceiling, 20);
      run_case<S, 3, 2>(name, channels, runs, run_elems, split, ceiling, 20);
    }
    if (slice <= 52 * 1024) run_case<S, 4, 2>(name, channels, runs, run_elems, split, ceiling, 20);
  }
}

int main() {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const double ceiling = copy_ceiling();
  printf("%s, %d SMs; copy ceiling (256 MiB cudaMemcpyAsync) %.1f GB/s\n", prop.name,
         prop.multiProcessorCount, ceiling);
  // Batch-norm training, NCHW 42 / 84 x 256 x 56 x 56: 256 channels of 515 KiB.
  sweep<float>("bn NCHW 42x256x56x56 f32", 256, 42, 56 * 56, ceiling);
  sweep<__half>("bn NCHW 84x256x56x56 f16", 256, 84, 56 * 56, ceiling);
  // Rows of 262144: 128 (f32) / 256 (f16) rows of one run each.
  sweep<float>("rows 128 x 262144 f32", 128, 1, 262144, ceiling);
  sweep<__half>("rows 256 x 262144 f16", 256, 1, 262144, ceiling);
  printf("copy ceiling again %.1f GB/s\n", copy_ceiling());
  return 0;
}
