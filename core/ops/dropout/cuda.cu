// CUDA backend of GELU + dropout.
//
// Contiguous tensors whose x and out start on 16-byte boundaries (the usual case) run the vector
// kernel: each thread moves whole 16-byte vectors of x and out and one 4- or 8-byte word of the
// mask. One Philox block (four numbers, eight 16-bit decisions: dropout.hpp) decides eight
// elements: a 16-bit thread's group of eight draws one block, and the f32 and f64 groups of four
// take half a block each (a pair of lanes shares the block's draws over two steps). The few
// elements after the last whole vector are done one by one. Everything else runs the strided
// kernel, one Philox block per thread and per eight consecutive row-major indices. The vector
// kernel gives each block an equal contiguous share of a grid of waves of resident blocks
// (VectorPolicy); f32 and f64 stage x through shared memory, three groups ahead. The strided kernel
// runs one full wave. Launches are asynchronous: no allocation, no synchronisation.
//
// Cost: the 16-bit kernels are bound by instruction issue and by the ALU pipe (half the FMA pipe's
// rate), not memory, on an H200: cutting four ALU instructions of about 60 a group of eight gained
// 1.2-1.4 points of copy in f16 and in bf16 (2026-12-01, vector_kernel). Per group of
// eight they draw one Philox-4x32-10 block (10 rounds of two 32x32->64 multiplies and two 3-way
// XORs, ~37 instructions with the key schedule read from the kernel's parameters) and evaluate
// eight GELUs (erf: CUDA's erff for f32 and f64, math::HalfStorage's shorter one for f16/bf16).
// Before ffbc86d each element took a whole 32-bit number, two blocks a 16-bit group; one block
// took the H200's f16 / bf16 from 84.4 / 83.0 to 90.4-90.6 / 89.7 % of copy (kf-bench `--suite
// ops --filter gelu_dropout`, p = 0.1 with a mask). The instruction cuts before it (the scale in
// GELU's half, 32-bit block indices, HalfStorage's GELU ending in one fused multiply-add), their
// SASS counts and every A/B behind the policies below are in docs/performance.md ("Session of
// 21:03Z" and "Session of 14:01Z", 2026-11-30).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/ops/async_copy.cuh"
#include "core/ops/bf16_pairs.cuh"
#include "core/ops/dropout/dropout.hpp"
#include "core/runtime/cuda/cuda_check.hpp"
#include "core/runtime/cuda/device_caps.hpp"
#include "core/runtime/cuda/grid_dependency.cuh"
#include "core/runtime/cuda/launch.hpp"

namespace kf::dropout {
namespace {

// ---- tuning (kept apart from the math) -------------------------------------------------------

// Elements a Philox block decides (dropout.hpp): two a 32-bit word.
constexpr int kPerBlock = 8;

template <class S>
struct VectorPolicy {
  static constexpr int threads = 256;
  // The blocks an SM the kernel is compiled for (its register budget): f16 and bf16 8 (32
  // registers, no spills), f32 6 (40), f64 4. H200, % of copy (docs/performance.md): the 16-bit
  // kernels at 8 blocks in 10 waves 90.7-90.9 / 89.9-90.0 (f16 / bf16), at 4 to 6 blocks 82-87
  // (f16); f32 in 6 waves at 6 blocks 90.1-90.5, at 5 and 8 blocks 89.6-89.8 and 89.4-89.8.
  static constexpr int min_blocks_per_sm = sizeof(S) == 8 ? 4 : sizeof(S) == 2 ? 8 : 6;
  // Elements per thread per iteration: a 16-byte vector of x, and at least four (half a Philox
  // block). f32 groups of eight (two vectors a thread, staged) ran at 68 % of copy against 90.5
  // for groups of four: a thread's two 16-byte copies leave each warp's copy instruction half a
  // sector's use (cp.async bypasses L1).
  static constexpr int elements = 16 / static_cast<int>(sizeof(S)) > 4
                                      ? 16 / static_cast<int>(sizeof(S))
                                      : 4;
  static constexpr int vectors = elements * static_cast<int>(sizeof(S)) / 16;  // per operand
  // Blocks per SM's worth of the grid, in waves of min_blocks_per_sm; 0: one pass of blocks.
  // Each block takes an equal share of the groups. One wave leaves the SMs short of warps at the
  // end of the launch, and one pass of blocks lost 7-10 points in 16-bit against 4 to 16 waves
  // (H100, 2026-11-26).
  // H200: the 16-bit kernels at 8 blocks in 6 / 8 / 10 / 12 / 16 waves 89.7 / 89.8-90.0 /
  // 90.7-90.9 / 89.4-89.8 / 86.2 (f16); f32 8 waves of 6 blocks (90.4-90.8 against 89.8-90.4 in
  // 6). f64 (not benchmarked) keeps 4.
  static constexpr int waves = sizeof(S) == 2 ? 10 : sizeof(S) == 4 ? 8 : 4;
  // Whether x is staged through shared memory (cp.async, three stages) rather than loaded by
  // each thread before its work; staging needs a grid of waves, each thread working through
  // several groups. kf-bench, same calls, % of copy f32 / f16 / bf16: H200 (2026-11-27 03:50Z
  // and 03:53Z) loaded, one pass (f32) and 8 waves (16-bit): 79.3 / 75.4 / 73.9 and 79.0; all
  // staged, 4 waves: 86.7 / 70.4 / 68.8; all staged, 8 waves: 84.7 / 71.1 / 69.4; f32 staged in
  // 2 waves: 85.9, in 4: 86.8. H100 (03:54Z), f32: loaded in one pass 95.4, staged in 4 waves
  // 91.2. The 16-bit kernels are bound by instruction issue, and the staging's instructions cost
  // them more than the overlap gains.
  static constexpr bool staged = sizeof(S) != 2;
};

struct StridedPolicy {
  static constexpr int threads = 256;
  static constexpr int min_blocks_per_sm = 4;
};

// Where a launch goes: the (current) device, its SM count and the stream.
struct Target {
  int device;
  int sms;
  cudaStream_t stream;
};

// ---- shared per-element math ------------------------------------------------------------------

struct Rng {
  math::PhiloxKeys keys;  // the seed's key schedule (read from the kernel's parameters)
  unsigned long long offset;
  uint32_t keep_threshold;
  // uniform16(w, 1) >= t, i.e. (w >> 16) >= t, is w > t * 2^16 - 1 for t in [1, 2^16], and
  // uniform16(w, 0) >= t is (w << 16) > t * 2^16 - 1: a compare, and a shift for the low half.
  uint32_t keep_above;
  // Element e's decision from its word.
  __device__ __forceinline__ bool kept(unsigned int word, int e) const {
    return ((e & 1) != 0 ? word : word << 16) > keep_above;
  }
  // The eight keep decisions of Philox block `block`, drawn (keep_threshold > 0). A 32-bit block
  // index leaves the counter's second word 0: the compiler folds it into the first round, and
  // the first round's product of the subsequence word and the second round's of the first word
  // are the same for every block, computed once a thread.
  template <class Block>
  __device__ __forceinline__ void draw8(Block block, bool (&keep)[kPerBlock]) const {
    const math::PhiloxWords words = math::philox_block(keys, offset, static_cast<uint64_t>(block));
#pragma unroll
    for (int e = 0; e < kPerBlock; ++e) keep[e] = kept(words.v[e / 2], e);
  }
  // The same, all kept when keep_threshold == 0, without drawing (the branch is uniform across
  // the grid).
  __device__ __forceinline__ void keep8(uint64_t block, bool (&keep)[kPerBlock]) const {
    if (keep_threshold == 0) {
#pragma unroll
      for (int e = 0; e < kPerBlock; ++e) keep[e] = true;
      return;
    }
    draw8(block, keep);
  }
  // The keep decision of element i alone (word (i / 2) % 4 picked without indexing a local
  // array).
  __device__ __forceinline__ bool keep(int64_t i) const {
    if (keep_threshold == 0) return true;
    const math::PhiloxWords words =
        math::philox_block(keys, offset, static_cast<uint64_t>(i) / kPerBlock);
    const int w = static_cast<int>((i >> 1) & 3);
    const unsigned int word = w == 0   ? words.v[0]
                              : w == 1 ? words.v[1]
                              : w == 2 ? words.v[2]
                                       : words.v[3];
    return kept(word, static_cast<int>(i & 1));
  }
};

// A dropped element is exactly 0 whatever x holds (a NaN or inf input too): a select, not a
// multiply by the mask. The kept value is computed either way, so a warp never branches on the
// random bits. 16-bit storage takes HalfStorage's shorter erf, as the element-wise GELU does.
// In the compute type (x widened from storage S):
template <class S>
__device__ __forceinline__ math::compute_t<S> dropout_compute(math::compute_t<S> x, bool kept,
                                                              math::compute_t<S> half_scale) {
  using T = math::compute_t<S>;
  const T value = kept_value(x, half_scale, typename math::PrimitivesFor<S>::type{});
  return kept ? value : T(0);
}
template <class S>
__device__ __forceinline__ S dropout_value(S x, bool kept, math::compute_t<S> half_scale) {
  using Traits = math::StorageTraits<S>;
  return Traits::from_compute(dropout_compute<S>(Traits::to_compute(x), kept, half_scale));
}

// ---- vector kernel ----------------------------------------------------------------------------

template <class S>
struct VectorArgs {
  const S* x;     // 16-byte aligned
  S* out;         // 16-byte aligned
  uint8_t* mask;  // nullable; aligned to VectorPolicy<S>::elements bytes
  int64_t count;
  int64_t groups;     // whole groups of VectorPolicy<S>::elements
  int64_t per_block;  // groups per block (a multiple of the block size)
  Rng rng;
  math::compute_t<S> half_scale;  // kept_value's
};

// One aligned 4- or 8-byte store of a group's mask bytes.
__device__ __forceinline__ void store_mask(uint8_t* mask, const uint32_t (&bits)[1]) {
  *reinterpret_cast<uint32_t*>(mask) = bits[0];
}
__device__ __forceinline__ void store_mask(uint8_t* mask, const uint32_t (&bits)[2]) {
  *reinterpret_cast<uint2*>(mask) = make_uint2(bits[0], bits[1]);
}

// When a group stores its mask bytes: whenever args.mask is set (tested a group), never, always.
enum class MaskStores { kEach, kNever, kAlways };
template <MaskStores M>
using MaskStoresTag = std::integral_constant<MaskStores, M>;

// Stages of the vector kernel's shared-memory buffer: the group being computed and the two
// after it, in flight.
constexpr int kStages = 3;

template <class S, int Elements>
union Group {
  uint4 raw[Elements * sizeof(S) / 16];
  S v[Elements];
};

// kDraws: keep_threshold > 0, a separate instantiation. With keep8's uniform branch in the loop,
// the two paths' decisions met as bytes: each was selected to 0 or 1, sign-extended and compared
// again before its select and its mask bit (three instructions an element, SASS, sm_90).
// kWide: the launch's groups or Philox blocks reach 2^31 (8 GiB of f32 elements), indexed in 64
// bits. The others index groups and blocks in 32: each pointer is one wide multiply-add from the
// group index instead of a 64-bit increment a step, and Rng::draw8 folds its first rounds. H200
// A/B (2026-11-30 14:22Z, kf-bench `--suite ops`, 6c12484's library against this, same call,
// three passes), p = 0.1 with a mask, % of copy, f32 / f16 / bf16: 88.5-88.9 / 80.6-80.9 /
// 80.0-80.3 -> 90.1-90.3 / 84.7-85.0 / 80.8-81.0; the loop bodies (SASS) f32 197 -> 190, f16
// 243 -> 235, bf16 248 -> 243 instructions, f16 at 40 registers instead of 46 (one Philox block
// for four elements then). The 64-bit form is the one every size used before;
// Dropout.HugeTensorIndexedIn64Bits runs it (17 GB of f16).
template <class Policy, class S, bool kDraws, bool kWide>
__global__ void __launch_bounds__(Policy::threads, Policy::min_blocks_per_sm)
    vector_kernel(VectorArgs<S> args) {
  cuda::wait_prior_grid();  // a dependent launch: nothing global is touched before this
  cuda::allow_next_grid();
  constexpr int kElements = Policy::elements;
  constexpr int kVectors = Policy::vectors;
  const uint4* x = reinterpret_cast<const uint4*>(args.x);
  uint4* out = reinterpret_cast<uint4*>(args.out);
  const int64_t first = int64_t{blockIdx.x} * Policy::threads + threadIdx.x;

  // The elements after the last whole group, one per thread of the first warp.
  const int64_t tail_start = args.groups * kElements;
  if (first < args.count - tail_start) {
    const int64_t i = tail_start + first;
    const bool kept = args.rng.keep(i);
    args.out[i] = dropout_value(args.x[i], kept, args.half_scale);
    if (args.mask) args.mask[i] = kept ? 1 : 0;
  }

  // Block b owns groups [b * per_block, (b + 1) * per_block), so every block has the same share;
  // thread t takes groups t, t + threads, ... of it.
  using Index = std::conditional_t<kWide, int64_t, uint32_t>;
  const Index end =
      static_cast<Index>(std::min(args.groups, int64_t{blockIdx.x + 1} * args.per_block));
  // Element offsets of group g's operands, in 64 bits either way.
  const auto at = [](Index g, int per_group) { return static_cast<uint64_t>(g) * per_group; };
  // bf16 widened and narrowed a word of two elements at a time, where element by element takes a
  // shift or a byte permute each on the ALU pipe. H200 A/B (2026-11-30 14:24Z, kf-bench `--suite
  // ops`, f922bf5's library against this, same call, two passes), p = 0.1 with a mask, bf16
  // 80.7-81.2 -> 83.1 % of copy, the loop body 243 -> 235 instructions (SASS). Since 2026-12-01
  // the widening has no ALU instruction (bf16::widen_pairs_fma: two multiplies a word on the FMA
  // pipe, where widen_pairs takes a multiply and a LOP3): the loop holds 56 ALU instructions
  // instead of 60, as many as f16's, for 207 instructions instead of 201. H200 A/B (09:17Z, the
  // same command with `--filter gelu_dropout`, the loop with its mask store hoisted (below) against
  // this, same call, four passes): bf16 89.7-90.0 -> 91.1-91.3 % of copy.
  constexpr bool kPairs = std::is_same_v<S, math::bfloat16_t>;
  // kPaired (groups of four elements that draw): a lane pair's Philox work is shared over two
  // steps (the paired staging loop below); `words` is this group's half of its block, drawn.
  constexpr bool kPaired = kDraws && kElements < kPerBlock;
  static_assert(!kPaired || Policy::staged, "the paired draws are in the staged loop");
  // `stores`: MaskStores::kEach tests args.mask at every group (the paired staging loop); the
  // other loops are copied for kNever and kAlways instead (below).
  const auto finish = [&](Index g, Group<S, kElements>& v, uint2 words, auto stores) {
    uint32_t mask_bits[kElements / 4];  // one byte per element, little-endian
    [[maybe_unused]] float f[kPairs ? kElements : 1];
    if constexpr (kPairs) {
      const unsigned int words[4] = {v.raw[0].x, v.raw[0].y, v.raw[0].z, v.raw[0].w};
      bf16::widen_pairs_fma(words, f);
    }
    // A group of four elements (f32, f64) is half a Philox block: group g draws block g / 2 and
    // takes its half g % 2 (the block is drawn twice, by two threads).
    constexpr int kDecided = kElements < kPerBlock ? kElements : kPerBlock;  // a draw's elements
#pragma unroll
    for (int b = 0; b < kElements / kDecided; ++b) {
      bool kept[kPerBlock];
#pragma unroll
      for (int e = 0; e < kPerBlock; ++e) kept[e] = true;
      if constexpr (kPaired) {
#pragma unroll
        for (int e = 0; e < 4; ++e) kept[e] = args.rng.kept(e < 2 ? words.x : words.y, e);
      } else if constexpr (kDraws) {
        args.rng.draw8(g * Index{kElements / kPerBlock} + b, kept);
      }
#pragma unroll
      for (int e = 0; e < kDecided; ++e) {
        const int at = kDecided * b + e;
        if constexpr (kPairs) {
          f[at] = dropout_compute<S>(f[at], kept[e], args.half_scale);
        } else {
          v.v[at] = dropout_value(v.v[at], kept[e], args.half_scale);
        }
        if (at % 4 == 0) mask_bits[at / 4] = 0;
        mask_bits[at / 4] |= kept[e] ? uint32_t{1} << (8 * (at % 4)) : 0u;
      }
    }
    if constexpr (kPairs) v.raw[0] = bf16::narrow_pairs(f);
#pragma unroll
    for (int k = 0; k < kVectors; ++k) out[at(g, kVectors) + k] = v.raw[k];
    constexpr MaskStores kStores = decltype(stores)::value;
    if (kStores == MaskStores::kAlways || (kStores == MaskStores::kEach && args.mask))
      store_mask(args.mask + at(g, kElements), mask_bits);
  };
  // Runs loop(stores) in the copy for this launch: kAlways with a mask, kNever without.
  const auto for_mask = [&](auto loop) {
    if (args.mask)
      loop(MaskStoresTag<MaskStores::kAlways>{});
    else
      loop(MaskStoresTag<MaskStores::kNever>{});
  };
  Index g = static_cast<Index>(int64_t{blockIdx.x} * args.per_block + threadIdx.x);
  if constexpr (!Policy::staged) {
    // The loop is copied for a launch with a mask and one without, so that no group tests
    // args.mask: the test and the mask's address took four ALU instructions a group (SASS, sm_90;
    // f16's loop 202 -> 200 instructions, 60 -> 56 of them on the ALU pipe). H200 A/B (2026-12-01
    // 09:03Z to 09:17Z, kf-bench `--suite ops --filter gelu_dropout`, 3216a7c's library against
    // this, same calls, four runs of three or four passes), p = 0.1 with a mask: f16 90.6-90.9 ->
    // 91.8-92.1 % of copy; bf16 unchanged (89.7-90.2) until its widening left the ALU pipe
    // (above). Measured with it and not kept (09:08Z-09:14Z): an L2 prefetch of x 1 to 8 steps
    // ahead (`prefetch.global.L2`), at most +0.4 for bf16 and -1.2 for f16, and at the benchmark's
    // size (three steps a thread) the prefetches 3 or more steps ahead never fired, so that gain
    // was the schedule's; the 16-bit loop staged like f32's (cp.async, three stages) in 10 / 6 / 4
    // waves, 89.4-89.6 / 89.6-89.7 / 89.2-89.3 (f16) and 89.0-89.2 / 89.7-89.9 / 89.1-89.3 (bf16).
    for_mask([&](auto stores) {
      for (; g < end; g += Policy::threads) {
        Group<S, kElements> v;
#pragma unroll
        for (int k = 0; k < kVectors; ++k) v.raw[k] = x[at(g, kVectors) + k];
        finish(g, v, uint2{}, stores);
      }
    });
  } else {
    // Each thread copies x's vectors of the group two steps ahead into its own slots of a
    // three-stage shared-memory buffer (cp.async) before computing the current one, so its
    // loads stay in flight while it draws and computes; it reads back only what it copied, so
    // no block barrier is needed.
    __shared__ uint4 stage[kStages][kVectors][Policy::threads];
    const auto fetch = [&](Index ahead, int slot) {
#pragma unroll
      for (int k = 0; k < kVectors; ++k)
        async_copy::copy16_if(&stage[slot][k][threadIdx.x], x + at(ahead, kVectors) + k,
                              ahead < end);
    };
    const auto staged = [&](Index now, int slot, uint2 words, auto stores) {
      Group<S, kElements> v;
#pragma unroll
      for (int k = 0; k < kVectors; ++k) v.raw[k] = stage[slot][k][threadIdx.x];
      finish(now, v, words, stores);
    };
    if constexpr (!kPaired) {
      for_mask([&](auto stores) {
        async_copy::pipelined<kStages>(
            g, end, Index{Policy::threads}, fetch,
            [&](Index now, int slot) { staged(now, slot, uint2{}, stores); });
      });
    } else {
      // The same staging, with the draws paired. Groups 2m and 2m + 1 (lanes 2j and 2j + 1 of a
      // warp, at the same step) take the two halves of Philox block m, so each lane of a pair
      // drew the whole block for half of it before. Here the steps go in pairs: at a pair's first
      // step the even lane draws its step's block and the odd lane the next step's (group g +
      // threads of both lies in block (g + threads) / 2: threads is even), and one exchange of two
      // words gives each lane its half of both: one block a lane per two steps instead of two. The
      // loop runs while the warp's first lane has a group, so that both lanes of a pair meet at
      // every exchange; a lane past `end` draws and exchanges but neither loads nor stores. (A
      // lone last step draws a block that no step uses.) The f32 loop (SASS, sm_90): 194
      // instructions a step before, 204 + 158 a pair of steps now. H200 A/B (2026-12-01 06:09Z,
      // kf-bench `--suite ops --filter gelu_dropout`, eb493f0's library against this, same call,
      // three passes), p = 0.1 with a mask, f32 90.1-90.2 -> 91.2-91.4 % of copy (7282 x 4096:
      // five steps a thread, so three draws instead of five); the 16-bit rows, whose kernels did
      // not change, within 0.2.
      const Index lane = static_cast<Index>(threadIdx.x % 32u);
      const bool odd = (threadIdx.x & 1u) != 0;
#pragma unroll
      for (int s = 0; s < kStages - 1; ++s) {
        fetch(g + static_cast<Index>(s) * Policy::threads, s);
        async_copy::commit();
      }
      // The block the lane draws at the pair's first step: its group's, or (odd lane) the next
      // step's group's.
      Index block = (g + (odd ? Index{Policy::threads} : Index{0})) / Index{2};
      int slot = 0;
      // One step: stage the group kStages - 1 ahead, then finish group g from its slot.
      const auto step = [&](uint2 words) {
        fetch(g + Index{kStages - 1} * Policy::threads, slot == 0 ? kStages - 1 : slot - 1);
        async_copy::commit();
        async_copy::wait<kStages - 1>();
        if (g < end) staged(g, slot, words, MaskStoresTag<MaskStores::kEach>{});
        g += Policy::threads;
        slot = slot == kStages - 1 ? 0 : slot + 1;
      };
      while (g - lane < end) {
        const math::PhiloxWords w =
            math::philox_block(args.rng.keys, args.rng.offset, static_cast<uint64_t>(block));
        block += Policy::threads;
        // The even lane keeps words 0, 1 (its half now) and sends 2, 3; the odd lane keeps 2, 3
        // (its half at the next step) and sends 0, 1.
        const uint2 mine = odd ? uint2{w.v[2], w.v[3]} : uint2{w.v[0], w.v[1]};
        const uint2 send = odd ? uint2{w.v[0], w.v[1]} : uint2{w.v[2], w.v[3]};
        const uint2 got{__shfl_xor_sync(0xffffffffu, send.x, 1),
                        __shfl_xor_sync(0xffffffffu, send.y, 1)};
        step(odd ? got : mine);
        if (g - lane >= end) break;
        step(odd ? mine : got);
      }
    }
  }
}

// ---- strided kernel ---------------------------------------------------------------------------

struct StridedArgs {
  int64_t count;
  int32_t ndim;
  // Innermost dim first.
  int64_t shape[KF_MAX_DIMS];
  int64_t x_strides[KF_MAX_DIMS];
  int64_t out_strides[KF_MAX_DIMS];
  int64_t mask_strides[KF_MAX_DIMS];
  Rng rng;
};

template <class Policy, class S>
__global__ void __launch_bounds__(Policy::threads, Policy::min_blocks_per_sm)
    strided_kernel(const S* x, S* out, uint8_t* mask, StridedArgs args,
                   math::compute_t<S> half_scale) {
  cuda::wait_prior_grid();  // a dependent launch: nothing global is touched before this
  cuda::allow_next_grid();
  const int64_t blocks = (args.count + kPerBlock - 1) / kPerBlock;
  const int64_t step = int64_t{gridDim.x} * Policy::threads;
  for (int64_t block = int64_t{blockIdx.x} * Policy::threads + threadIdx.x; block < blocks;
       block += step) {
    bool kept[kPerBlock];
    args.rng.keep8(static_cast<uint64_t>(block), kept);
#pragma unroll
    for (int e = 0; e < kPerBlock; ++e) {
      const int64_t i = block * kPerBlock + e;
      if (i >= args.count) break;
      int64_t rest = i, x_offset = 0, out_offset = 0, mask_offset = 0;
      for (int32_t d = 0; d < args.ndim; ++d) {
        const int64_t q = rest / args.shape[d];
        const int64_t r = rest - q * args.shape[d];
        x_offset += r * args.x_strides[d];
        out_offset += r * args.out_strides[d];
        mask_offset += r * args.mask_strides[d];
        rest = q;
      }
      out[out_offset] = dropout_value(x[x_offset], kept[e], half_scale);
      if (mask) mask[mask_offset] = kept[e] ? 1 : 0;
    }
  }
}

// ---- host side --------------------------------------------------------------------------------

// Blocks for work_items (at least one), at most blocks_per_sm per SM (0: no cap, one pass).
uint32_t grid_size(int64_t work_items, int threads, int sms, int blocks_per_sm) {
  const int64_t wanted = std::max<int64_t>(1, (work_items + threads - 1) / threads);
  if (blocks_per_sm == 0) return static_cast<uint32_t>(wanted);
  return static_cast<uint32_t>(std::min<int64_t>(wanted, int64_t{sms} * blocks_per_sm));
}

Rng make_rng(const Plan& p) {
  const uint32_t keep_above =
      p.keep_threshold == 0 ? 0u : static_cast<uint32_t>(uint64_t{p.keep_threshold} * 65536 - 1);
  return Rng{math::philox_seed_keys(p.seed), p.offset, p.keep_threshold, keep_above};
}

template <class S>
void launch_vector(const Plan& p, const Target& t) {
  using Policy = VectorPolicy<S>;
  VectorArgs<S> args;
  args.x = static_cast<const S*>(p.x);
  args.out = static_cast<S*>(p.out);
  args.mask = p.mask;
  args.count = p.count;
  args.groups = p.count / Policy::elements;
  args.rng = make_rng(p);
  args.half_scale = static_cast<math::compute_t<S>>(p.scale / 2);
  const int64_t work = std::max<int64_t>(args.groups, p.count - args.groups * Policy::elements);
  const int64_t grid =
      grid_size(work, Policy::threads, t.sms, Policy::waves * Policy::min_blocks_per_sm);
  args.per_block =
      (args.groups + grid * Policy::threads - 1) / (grid * Policy::threads) * Policy::threads;
  // The groups, and the Philox blocks drawn (one per eight elements of the whole groups):
  // 64-bit indices from 2^31 on (vector_kernel's kWide).
  const bool wide =
      std::max(args.groups, args.groups * Policy::elements / kPerBlock) >= (int64_t{1} << 31);
  const bool draws = args.rng.keep_threshold != 0;
  const auto kernel =
      draws
          ? (wide ? vector_kernel<Policy, S, true, true> : vector_kernel<Policy, S, true, false>)
          : (wide ? vector_kernel<Policy, S, false, true> : vector_kernel<Policy, S, false, false>);
  cuda::launch_dependent(kernel, t.device, static_cast<unsigned>(grid), Policy::threads, t.stream,
                         "dropout kernel launch", args);
}

template <class S>
void launch_strided(const Plan& p, const Target& t) {
  using Policy = StridedPolicy;
  StridedArgs args{};
  args.count = p.count;
  args.ndim = p.ndim;
  args.rng = make_rng(p);
  for (int32_t d = 0; d < p.ndim; ++d) {
    const int32_t from = p.ndim - 1 - d;  // the plan lists dims outermost first
    args.shape[d] = p.shape[from];
    args.x_strides[d] = p.x_strides[from];
    args.out_strides[d] = p.out_strides[from];
    args.mask_strides[d] = p.mask_strides[from];
  }
  const int64_t grid = grid_size((p.count + kPerBlock - 1) / kPerBlock, Policy::threads, t.sms,
                                 Policy::min_blocks_per_sm);
  cuda::launch_dependent(strided_kernel<Policy, S>, t.device, static_cast<unsigned>(grid),
                         Policy::threads, t.stream, "dropout kernel launch",
                         static_cast<const S*>(p.x), static_cast<S*>(p.out), p.mask, args,
                         static_cast<math::compute_t<S>>(p.scale / 2));
}

bool aligned(const void* ptr, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(ptr) % bytes == 0;
}

template <class S>
void run_typed(const Plan& p, const Target& t) {
  constexpr int kElements = VectorPolicy<S>::elements;
  if (p.contiguous && aligned(p.x, 16) && aligned(p.out, 16) && aligned(p.mask, kElements))
    launch_vector<S>(p, t);
  else
    launch_strided<S>(p, t);
}

}  // namespace

// The entry has made device_id current (kf::activate).
void run_cuda(const Plan& plan, int32_t device_id, void* native_stream) {
  const Target t{device_id, cuda::sm_count(device_id), static_cast<cudaStream_t>(native_stream)};
  switch (plan.dtype) {
    case KF_DTYPE_FLOAT16: return run_typed<math::half_t>(plan, t);
    case KF_DTYPE_BFLOAT16: return run_typed<math::bfloat16_t>(plan, t);
    case KF_DTYPE_FLOAT64: return run_typed<double>(plan, t);
    default: return run_typed<float>(plan, t);
  }
}

}  // namespace kf::dropout
