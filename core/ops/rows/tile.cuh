// Register-cached rows for the row-wise CUDA kernels (norms, softmax): a row is split over a group
// of threads (a few lanes, a warp, or a whole block), each thread holding `chunks` vectors of `vec`
// elements in registers, so the row is read from DRAM once. Chunk k of lane l starts at column
// (k * group + l) * vec: every load is coalesced across the group, 16 bytes per thread when vec
// fills 16 bytes. The tuning knobs live in TilePolicy, apart from the math of each family.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "core/math/numeric.hpp"
#include "core/ops/async_copy.cuh"
#include "core/ops/bf16_pairs.cuh"
#include "core/ops/rows/reduce.cuh"
#include "core/ops/rows/rows.hpp"
#include "core/runtime/cuda/cuda_check.hpp"
#include "core/runtime/cuda/device_caps.hpp"
#include "core/runtime/cuda/launch.hpp"

namespace kf::rows {

template <int kGroup, int kChunks, int kVec, int kThreads>
struct TilePolicy {
  static_assert(kGroup <= 32 ? (32 % kGroup == 0) : (kGroup == kThreads && kGroup % 32 == 0),
                "a row's group is a power-of-two part of a warp, or the whole block");
  static constexpr int group = kGroup;      // threads sharing one row
  static constexpr int chunks = kChunks;    // vectors per thread
  static constexpr int vec = kVec;          // elements per vector (1: scalar loads)
  static constexpr int threads = kThreads;  // block size
  static constexpr int items = kChunks * kVec;
  static constexpr int64_t capacity = int64_t{kGroup} * kChunks * kVec;  // longest row served
  static constexpr int rows_per_block = kThreads / kGroup;
};

// Whether a register-cached kernel holds the next row's loads (in the storage type) while it
// works on the current one: for 16-bit rows whose loads take at most 16 registers a thread (a
// vector of up to 4 bytes takes a whole register). Such a kernel runs with a resident grid
// (resident_grid) and two 256-thread blocks per SM. Measured on an H200 (2026-11-26, kf-bench,
// softmax, same run): f16 and bf16 rows of 64 / 1024 / 4096 / 16384 went from 71-77 / 75-76 /
// 57-58 / 53 % of copy to 81 / 90 / 74-75 / 83-84 %; f32 rows, which keep three blocks per SM
// without it, lost up to 11 points with it (64 bytes in flight per thread are enough there).
template <class P, class S>
constexpr bool tile_prefetches() {
  return sizeof(S) == 2 && P::chunks * ((P::vec * sizeof(S) + 3) / 4) <= 16;
}

// Whether a register-cached kernel stages the next row in shared memory (cp.async) while it works
// on the current one: rows of 16-byte vectors over a block at 32 elements a thread (f32 rows of
// 8193..16384), which take 128 registers a thread and leave one 512-thread block per SM, with no
// room for a second row in registers. Without it such an SM has no loads in flight while it
// reduces and stores a row: Nsight Compute on an H200 (2026-11-27 07:04Z) read 60 % of DRAM
// bandwidth for softmax and both norms over f32 rows of 16384, against 76-80 % for rows of 1024
// and 4096. H200 A/B (07:36Z, kf-bench, same call, two passes), % of copy over f32 rows of
// 16384: softmax 73.7 -> 79.6, layer norm 73.5 -> 81.8, RMS norm 78.4 -> 85.1. Not for a warp
// per row (f32 rows of 1024, 32 elements a thread, two blocks per SM): about 07:25Z they lost
// 8-12 points with it against the 06:06Z run (softmax 94.0 -> 86.4, RMS norm 90.1 -> 78.6).
// The row takes P::chunks * P::threads 16-byte slots (64 KiB), thread t's chunk k at slot
// k * P::threads + t; a thread reads back only the slots it staged, so no barrier is needed.
// Only for the kernels' common forms: those that hold a second row (a mask, a residual) spilled
// 80-112 bytes a thread with it (sm_90, nvcc 13), and keep loading in place. A family may stage
// other policies whose rows tile_can_stage (the softmax's 16-bit rows of 8193..16384). 16-bit
// policies of five or more vectors a thread stage (the layer norm's rows of 40 or 48 elements a
// thread, norm/cuda.cuh's launch_cached), and so do the norms' f32 rows of 1537..2048 at 16
// elements a thread over short grids (cached_kernel's kStageNext, norm/cuda.cuh).
template <class P, class S>
constexpr bool tile_can_stage() {
  return P::vec * sizeof(S) == 16 && P::items > 16 && P::group == P::threads;
}
template <class P, class S>
constexpr bool tile_prefetches_shared() {
  return !tile_prefetches<P, S>() && tile_can_stage<P, S>();
}

// Whether a register-cached kernel that stages its rows in shared memory (`staged`: its kShared
// form) streams its output past L2 (st.global.cs, store_pack): the f32 rows of 8193..16384 over
// 512 threads. H200, kf-bench `--suite ops`, % of copy, the library with plain stores against
// one streaming the output (same call, two passes each):
//  - 18:17Z, every row kernel's output streamed: f32 rows of 16384, softmax 79.9 / 79.5 -> 83.5
//    / 83.6, layer norm 82.8 / 82.8 -> 86.5 / 86.5, RMS norm 86.0 / 87.7 -> 86.3 / 86.6. It
//    lost elsewhere: f32 rows of 64 by 1.2 points, the 16-bit softmax's rows of 64 by 2.5,
//    16-bit rows of 4096 by 0.6-2.7 (bf16 layer norm 85.2 / 85.4 -> 82.6 / 82.5), the 16-bit RMS
//    norm with a residual by 1.0; the 16-bit softmax's staged rows of 16384 moved within 0.7
//    either way.
//  - 18:36Z, the f32 staged forms alone (`--lengths 4100,6144,8192,12288,16384`), softmax /
//    layer norm / RMS norm: rows of 16384 (512 threads at 32 elements) 80.6 / 81.2 -> 84.3 /
//    83.8, 82.5 / 82.9 -> 86.6 / 86.4, 87.7 / 87.8 -> 86.6 / 86.9; rows of 12288 (512 at 24)
//    85.3 / 85.4 -> 85.0 / 84.2, 84.7 / 84.2 -> 85.7 / 85.9, 85.7 / 85.6 -> 87.4 / 87.9; rows of
//    4100 and 6144 (256 at 24) 84.2 / 84.0 -> 81.5 / 81.7 and 81.3 / 81.3 -> 83.2 / 83.6
//    (softmax), the norms within 0.3. So the 512-thread forms take it and the 256-thread one
//    does not.
template <class P, class S>
constexpr bool tile_streams_output(bool staged) {
  return staged && sizeof(S) == 4 && P::threads == 512;
}

// The rows a register-cached kernel of policy P stages ahead in shared memory unless its family
// asks for another depth: one where tile_prefetches_shared, none otherwise. Each row staged
// takes P::chunks * P::threads 16-byte slots (tile_slots).
template <class P, class S>
constexpr int tile_staged_rows() {
  return tile_prefetches_shared<P, S>() ? 1 : 0;
}

// Whether `device`'s SMs issue fewer than 8.5 instructions per byte of DRAM bandwidth
// (cuda::issue_per_byte: H200 6.8, H100 SXM 10; a device that does not report its clocks counts
// as not). The row kernels' best forms differ across that line (tile_stages_rows below, the
// norms' 32-elements-a-thread form).
inline bool tile_issue_lean(int32_t device) {
  const double ratio = cuda::issue_per_byte(device);
  return ratio > 0 && ratio < 8.5;
}

// Whether `device` takes the shared-memory staging of tile_prefetches_shared: where its SMs issue
// fewer than 8.5 instructions per byte of DRAM bandwidth (tile_issue_lean). On an H100 the staged
// kernels lost what they gained on the H200: kf-bench, f32 rows of 16384, % of copy, H100 06:14Z
// (before it) against 09:39Z (with it), softmax 91.3 -> 85.9, layer norm 91.1 -> 87.5, RMS
// norm 92.5 -> 87.1, every other row within 1 point. Such devices keep the kernel that loads each
// row in place, in one pass of blocks: H100 A/B (10:03Z, same call, two passes), staged -> in
// place, softmax 87.2 -> 91.9, layer norm 87.2 -> 91.1, RMS norm 87.3 -> 92.4, the other f32 rows
// within noise. That holds for f32 rows of 12289..16384 (512 threads at 32 elements a thread),
// not for shorter ones: the softmax stages its f32 rows of 8193..12288, and the layer norm its
// f32 rows of 512 threads at 24, on every device (launch_common_tile_kernel's always_stage;
// softmax/cuda.cuh, norm/cuda.cuh; H100 A/B of 2026-12-06 17:34Z).
inline bool tile_stages_rows(int32_t device) { return tile_issue_lean(device); }

// Dynamic shared memory of a register-cached kernel that stages kRows rows ahead.
template <class P, class S, int kRows = tile_staged_rows<P, S>()>
constexpr size_t tile_shared_bytes() {
  static_assert(kRows == 0 || (P::vec * sizeof(S) == 16 && P::group == P::threads),
                "rows of 16-byte vectors over a block");
  return size_t{16} * P::chunks * P::threads * kRows;
}

// Blocks per SM a register-cached kernel is compiled for (its __launch_bounds__): 256-thread
// blocks keep two resident (at most 128 registers), three when a thread holds at most 16 floats
// (at most 85). Left to itself the compiler took 137 registers for 32 floats (one block per SM)
// and 90-114 for 16 (two): an H200 run (2026-11-26, kf-bench) measured softmax f32 rows of 1024
// at 71 % of copy with one resident block against 93 % with two, and the norms' 64-element
// rows 8-10 points faster at three blocks than at two.
// Smaller blocks (96, 128, 160 or 192 threads) get as many as fit in an SM's 64K registers at the
// registers a thread of the 256-thread blocks gets (allocated in eights: 80 at three blocks, 128
// at two). The same threads an SM as the 256-thread blocks for 96, 128 and 192; for 160, five
// blocks at 80 registers, where 768 / 160 threads would round down to four.
template <class P, class S>
constexpr int tile_min_blocks() {
  // 320-thread blocks of up to 16 elements a thread (rows of 4097..5120, with_tile_policy and
  // the softmax's launch_cached): three, at the 64 registers a thread of the 512-thread blocks'
  // two-block build (tile_lean_blocks), where the rule below would leave one.
  if (P::threads == 320 && P::items <= 16) return 3;
  // 320-thread blocks of 32 elements a thread (16-bit rows of 8193..10240, the norms' f32 ones):
  // two.
  if (P::threads == 320 && P::items == 32) return 2;
  if (P::threads > 256) return 1;
  const int per_256 = tile_prefetches<P, S>()                             ? 2
                      : sizeof(math::compute_t<S>) == 4 && P::items <= 16 ? 3
                                                                          : 2;
  constexpr int kRegisters = 64 * 1024;
  const int per_thread = kRegisters / (per_256 * 256) / 8 * 8;
  return kRegisters / (P::threads * per_thread);
}

// Resident blocks an SM of the second build that the norms' and the softmax's common forms keep
// for devices whose SMs are tile_issue_lean (0: no such build):
//  - four for f32 rows of 16-byte vectors at 16 elements a thread on 256-thread blocks (rows of
//    up to 512, a few lanes or a warp a row; rows of 2049..4096, a block a row), which
//    tile_min_blocks compiles for three. For four they take 64 registers without spilling
//    (ptxas, sm_90; 79-80 at three), so an SM holds 64 KiB of rows in flight instead of 48.
//  - two for 16-bit rows of 16-byte vectors at 16 elements a thread on 512-thread blocks (rows
//    of 4097..8192), which tile_min_blocks compiles for one: the norms' kernels took 70-71
//    registers, one block an SM, and take 62-63 without spilling (the softmax's already fit in
//    64). H200 A/B (2026-11-29 11:24Z, kf-bench, one library with both builds, same call, three
//    passes), % of copy, one block -> two: layer norm f16 / bf16 rows of 8192 68.4 / 62.8 ->
//    85.0 / 72.9, of 6144 53.9 / 48.9 -> 67.0 / 56.7; RMS norm rows of 8192 77.6 / 76.6 ->
//    90.5 / 89.4, of 6144 70.0 / 67.3 -> 85.9 / 80.5; softmax within 0.3. f32 rows of 4097..8192
//    (the same rule then) moved within 0.6 (the softmax lost 0.6) and keep one build.
// The H200 measurements of the first rule are beside each family's launch (norm/cuda.cuh,
// softmax/cuda.cuh); neither rule was measured on an H100, which keeps tile_min_blocks.
template <class P, class S>
constexpr int tile_lean_blocks() {
  if (sizeof(S) == 2 && P::vec * sizeof(S) == 16 && P::threads == 512 && P::items <= 16) return 2;
  return sizeof(S) == 4 && P::vec == 4 && P::threads == 256 && P::items <= 16 ? 4 : 0;
}

// Whether the register-cached kernels of policy P may widen storage S a word of two elements at a
// time (widen_bf16_pairs): the softmax's always do, the layer norm's in one build (LayerPairs in
// norm/cuda.cuh). bf16 vectors, but for the warp-a-row policies of three or more vectors a thread
// (rows of 513..1024, where the softmax's kernels gained nothing).
// kf-bench, % of copy, element by element -> in pairs: H200 (2026-11-27 21:38Z, same call, three
// passes) masked causal softmax bf16 70.3 -> 72.6, rows of 64 88.2 -> 89.7, the other rows within
// 0.5; H100 (`.ci/gpu.sh` of e75ea04, 19:48Z, against d0f431e's run of 18:36Z) masked causal
// 96.3 -> 99.6, the other rows within 0.2. The norms' kernels otherwise widen element by element:
// with pairs their bf16 rows of 4096 and 16384 lost on both cards. H100 (that run): layer norm
// 90.6 / 90.4 -> 83.0 / 69.3, RMS norm 92.4 / 86.8 -> 82.6 / 74.0. H200 (21:30Z and 21:35Z, same
// calls, three passes): layer norm 77.5 / 72.4 -> 66.7 / 52.8, RMS norm 83.8 / 83.5 -> 71.9 /
// 57.1, and with the row alone in pairs (weight and bias element by element, no extra registers)
// 77.3 / 72.2 -> 64.7 / 49.8 and 83.8 / 83.3 -> 72.7 / 55.4.
template <class P, class S>
constexpr bool pairs_widen() {
  return std::is_same_v<S, math::bfloat16_t> && P::vec % 2 == 0 &&
         !(P::group <= 32 && P::chunks >= 3);
}

template <class S, int V>
struct alignas(sizeof(S) * V) Pack {
  S v[V];
};

// A bf16 pack widened to float a 32-bit word of two elements at a time (bf16::widen_pairs), on
// the FMA pipe where it can be, against a shift and a mask on the ALU pipe per word (SASS,
// sm_90). The H200's 16-bit rows are bound by that pipe (see pairs_widen).
template <int V>
__device__ __forceinline__ void widen_bf16_pairs(const Pack<math::bfloat16_t, V> p,
                                                 float (&out)[V]) {
  static_assert(V % 2 == 0, "whole words");
  unsigned int words[V / 2];
  __builtin_memcpy(words, p.v, sizeof words);
  bf16::widen_pairs(words, out);
}

// First column of chunk k held by `lane` of the group. Column math is in 32 bits: a cached row
// holds at most P::capacity (2^14) elements, and the helpers below take its length as an int. In
// 64 bits each chunk's clamped column took eight instructions (a pair of compares, two selects,
// a 64-bit add and a two-part LEA) and the kernels redo it for every operand of every row (SASS,
// sm_90: about 40 a row operand in the bf16 layer norm's loop). H200 A/B (2026-11-29 11:00Z,
// kf-bench, same call, two passes), % of copy, 64 -> 32 bits: layer norm bf16 rows of 1024 /
// 4096 / 16384 85.3 / 84.0 / 77.7 -> 88.1 / 85.7 / 82.8, f16 rows of 16384 79.3 -> 82.3; masked
// causal softmax f16 / bf16 76.0 / 72.4 -> 79.0 / 73.2; softmax bf16 rows of 16384 81.7 -> 83.3;
// RMS norm 16-bit rows of 16384 +1; the other cached rows within 1 point either way.
template <class P>
__device__ __forceinline__ int tile_col(int lane, int k) {
  static_assert(P::capacity < (int64_t{1} << 30), "cached rows index columns in 32 bits");
  return (k * P::group + lane) * P::vec;
}

// This thread's part of a row as loaded: P::chunks vectors in the storage type. Holding the next
// row in this form (half the registers of the compute type for 16-bit rows) lets a kernel issue
// its loads before working on the current row.
template <class P, class S>
struct TileRaw {
  Pack<S, P::vec> packs[P::chunks];
};

// The same part of a 16-bit row held as 32-bit words, two elements a word (the low half the
// first), for the kernels that keep the next row's loads in registers across a row's work
// (tile_prefetches). Held as 16-bit elements (TileRaw), the part is split into 16-bit values and
// each conditional load is merged into the loop-carried registers by byte permutes placed right
// after the load, which then waits for the data before the current row is worked on (SASS,
// sm_90, nvcc 13: the softmax's masked 16-bit rows). Whole words load straight into them.
// (Only 16-bit parts of whole words are ever built: the functions taking one assert it, the type
// itself does not, so that overload resolution may name it for other parts.)
template <class P, class S>
struct TileWords {
  static constexpr int per_chunk = P::vec / 2 > 0 ? P::vec / 2 : 1;
  unsigned int words[P::chunks][per_chunk];
};
template <class P, class S>
constexpr bool tile_words_fit() {
  return sizeof(S) == 2 && P::vec % 2 == 0;
}

// Widens the two elements of word w (the low half the first) to float, exactly.
__device__ __forceinline__ void widen_word(unsigned int w, math::half_t, float& lo, float& hi) {
  asm("{\n\t.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.f32.f16 %0, l;\n\tcvt.f32.f16 %1, h;\n\t}"
      : "=f"(lo), "=f"(hi)
      : "r"(w));
}
__device__ __forceinline__ void widen_word(unsigned int w, math::bfloat16_t, float& lo, float& hi) {
  lo = __uint_as_float(w << 16);
  hi = __uint_as_float(w & 0xffff0000u);
}

// Chunk k of a fetched part, widened to float (bf16 on the FMA pipe where kPairs, as
// widen_bf16_pairs).
template <class P, class S, bool kPairs = false>
__device__ __forceinline__ void tile_widen(const TileWords<P, S>& raw, int k,
                                           float (&out)[P::vec]) {
  static_assert(tile_words_fit<P, S>(), "16-bit elements, whole words");
  if constexpr (kPairs) {
    bf16::widen_pairs(raw.words[k], out);
  } else {
#pragma unroll
    for (int i = 0; i < TileWords<P, S>::per_chunk; ++i)
      widen_word(raw.words[k][i], S{}, out[2 * i], out[2 * i + 1]);
  }
}
template <class P, class S, bool kPairs = false>
__device__ __forceinline__ void tile_widen(const TileRaw<P, S>& raw, int k,
                                           math::compute_t<S> (&out)[P::vec]) {
  if constexpr (kPairs) {
    widen_bf16_pairs(raw.packs[k], out);
  } else {
#pragma unroll
    for (int e = 0; e < P::vec; ++e) out[e] = math::StorageTraits<S>::to_compute(raw.packs[k].v[e]);
  }
}

// tile_fetch into words.
template <class P, class S>
__device__ __forceinline__ void tile_fetch(const S* row, int n, int lane, TileWords<P, S>& raw) {
  static_assert(tile_words_fit<P, S>(), "16-bit elements, whole words");
  constexpr int W = TileWords<P, S>::per_chunk;
#pragma unroll
  for (int k = 0; k < P::chunks; ++k) {
    const int c = tile_col<P>(lane, k);
    if (c >= n) continue;
    if constexpr (W == 4) {
      const uint4 u = *reinterpret_cast<const uint4*>(row + c);
      raw.words[k][0] = u.x, raw.words[k][1] = u.y, raw.words[k][2] = u.z, raw.words[k][3] = u.w;
    } else if constexpr (W == 2) {
      const uint2 u = *reinterpret_cast<const uint2*>(row + c);
      raw.words[k][0] = u.x, raw.words[k][1] = u.y;
    } else {
      static_assert(W == 1, "4-, 8- or 16-byte vectors");
      raw.words[k][0] = *reinterpret_cast<const unsigned int*>(row + c);
    }
  }
}

// Issues the loads of this thread's part of a row of n elements (n a multiple of P::vec; 0 loads
// nothing).
template <class P, class S>
__device__ __forceinline__ void tile_fetch(const S* row, int n, int lane, TileRaw<P, S>& raw) {
#pragma unroll
  for (int k = 0; k < P::chunks; ++k) {
    const int c = tile_col<P>(lane, k);
    if (c < n) raw.packs[k] = *reinterpret_cast<const Pack<S, P::vec>*>(row + c);
  }
}

// The column chunk k of `lane` loads from in a row of n elements (n a multiple of P::vec, at
// least P::vec): its own, or the row's last vector where the row has ended. With it every chunk
// loads defined values from inside the row and no load is predicated; a kernel that loads this
// way leaves the chunks past the end (tile_col(lane, k) >= n) out where it combines values.
template <class P>
__device__ __forceinline__ int tile_load_col(int lane, int k, int n) {
  const int c = tile_col<P>(lane, k);
  return c < n ? c : n - P::vec;
}

// Issues the loads of every chunk of this thread's part of a row of n elements (tile_load_col).
template <class P, class S>
__device__ __forceinline__ void tile_fetch_clamped(const S* row, int n, int lane,
                                                   TileRaw<P, S>& raw) {
#pragma unroll
  for (int k = 0; k < P::chunks; ++k)
    raw.packs[k] = *reinterpret_cast<const Pack<S, P::vec>*>(row + tile_load_col<P>(lane, k, n));
}

// The shared-memory slots of a register-cached kernel's staged row `staged` (of the rows it
// stages ahead: tile_staged_rows, or its family's depth).
template <class P, class S>
__device__ __forceinline__ Pack<S, P::vec>* tile_slots(int staged = 0) {
  extern __shared__ __align__(async_copy::kSharedAlign) unsigned char kf_tile_slots[];
  return reinterpret_cast<Pack<S, P::vec>*>(kf_tile_slots) + staged * (P::chunks * P::threads);
}

// Stages this thread's part of a row of n elements (n a multiple of P::vec) into its slots of
// `slots` with cp.async: the chunks tile_fetch loads, or (kClamped) every chunk from the column
// tile_fetch_clamped loads. The copies join the thread's next async_copy::commit() group.
template <class P, bool kClamped, class S>
__device__ __forceinline__ void tile_stage(const S* row, int n, int lane, Pack<S, P::vec>* slots) {
  static_assert(P::vec * sizeof(S) == 16, "16-byte vectors");
#pragma unroll
  for (int k = 0; k < P::chunks; ++k) {
    const int c = kClamped ? tile_load_col<P>(lane, k, n) : tile_col<P>(lane, k);
    if (kClamped || c < n) async_copy::copy16(slots + k * P::threads + threadIdx.x, row + c);
  }
}

// Reads back what tile_stage staged for a row of n elements, once this thread's copies have
// landed (async_copy::wait): the chunks tile_stage copied (the others are left as they are).
template <class P, bool kClamped, class S>
__device__ __forceinline__ void tile_read_staged(const Pack<S, P::vec>* slots, int n, int lane,
                                                 TileRaw<P, S>& raw) {
#pragma unroll
  for (int k = 0; k < P::chunks; ++k)
    if (kClamped || tile_col<P>(lane, k) < n) raw.packs[k] = slots[k * P::threads + threadIdx.x];
}

// Converts every chunk of a fetched part of a row to the compute type (no padding); in pairs
// where kPairs (widen_bf16_pairs).
template <class P, class S, bool kPairs = false>
__device__ __forceinline__ void tile_convert(const TileRaw<P, S>& raw,
                                             math::compute_t<S> (&dst)[P::items]) {
#pragma unroll
  for (int k = 0; k < P::chunks; ++k) {
    if constexpr (kPairs) {
      math::compute_t<S> values[P::vec];
      widen_bf16_pairs(raw.packs[k], values);
#pragma unroll
      for (int e = 0; e < P::vec; ++e) dst[k * P::vec + e] = values[e];
    } else {
#pragma unroll
      for (int e = 0; e < P::vec; ++e)
        dst[k * P::vec + e] = math::StorageTraits<S>::to_compute(raw.packs[k].v[e]);
    }
  }
}

// Converts a fetched part of a row of n elements to the compute type, `pad` where the row has
// ended; in pairs where kPairs (widen_bf16_pairs).
template <class P, class S, bool kPairs = false>
__device__ __forceinline__ void tile_unpack(const TileRaw<P, S>& raw, int n, int lane,
                                            math::compute_t<S> (&dst)[P::items],
                                            math::compute_t<S> pad) {
#pragma unroll
  for (int k = 0; k < P::chunks; ++k) {
    const bool inside = tile_col<P>(lane, k) < n;
    if constexpr (kPairs) {
      math::compute_t<S> values[P::vec];
      widen_bf16_pairs(raw.packs[k], values);
#pragma unroll
      for (int e = 0; e < P::vec; ++e) dst[k * P::vec + e] = inside ? values[e] : pad;
    } else {
#pragma unroll
      for (int e = 0; e < P::vec; ++e)
        dst[k * P::vec + e] = inside ? math::StorageTraits<S>::to_compute(raw.packs[k].v[e]) : pad;
    }
  }
}

// tile_convert and tile_unpack of a part held in words (widen_word, tile_widen).
template <class P, class S>
__device__ __forceinline__ void tile_convert(const TileWords<P, S>& raw, float (&dst)[P::items]) {
#pragma unroll
  for (int k = 0; k < P::chunks; ++k)
#pragma unroll
    for (int i = 0; i < TileWords<P, S>::per_chunk; ++i)
      widen_word(raw.words[k][i], S{}, dst[k * P::vec + 2 * i], dst[k * P::vec + 2 * i + 1]);
}
template <class P, class S, bool kPairs = false>
__device__ __forceinline__ void tile_unpack(const TileWords<P, S>& raw, int n, int lane,
                                            float (&dst)[P::items], float pad) {
#pragma unroll
  for (int k = 0; k < P::chunks; ++k) {
    const bool inside = tile_col<P>(lane, k) < n;
    float values[P::vec];
    tile_widen<P, S, kPairs>(raw, k, values);
#pragma unroll
    for (int e = 0; e < P::vec; ++e) dst[k * P::vec + e] = inside ? values[e] : pad;
  }
}

// Loads this thread's part of a row of n elements (n a multiple of P::vec) into dst (compute type),
// `pad` where the row has ended. Every load is issued before the first conversion.
template <class P, class S>
__device__ __forceinline__ void tile_load(const S* row, int n, int lane,
                                          math::compute_t<S> (&dst)[P::items],
                                          math::compute_t<S> pad) {
  Pack<S, P::vec> packs[P::chunks];
#pragma unroll
  for (int k = 0; k < P::chunks; ++k) {
    const int c = tile_col<P>(lane, k);
    if (c < n) packs[k] = *reinterpret_cast<const Pack<S, P::vec>*>(row + c);
  }
#pragma unroll
  for (int k = 0; k < P::chunks; ++k) {
    const bool inside = tile_col<P>(lane, k) < n;
#pragma unroll
    for (int e = 0; e < P::vec; ++e)
      dst[k * P::vec + e] = inside ? math::StorageTraits<S>::to_compute(packs[k].v[e]) : pad;
  }
}

// a + b for 16-bit values two to a 32-bit word, rounded to S, a word an instruction
// (packed_sum: add.rn.f16x2, and for bf16 fma.rn.bf16x2 by 1, as sm_80 has no bf16 add), where
// element by element the same sum takes two widenings, an FADD, a rounding and a widening back
// per element (SASS, sm_90). The bits are those of the element-wise definition,
// from_compute(to_compute(a) + to_compute(b)) (math::StorageTraits): the float sum of two 16-bit
// values is exact unless their exponents differ by 13 or more (16 for bf16), and then the smaller
// is under 2^-12 of the larger, so the float sum, off by at most 2^-24 of it, lies with the exact
// one strictly between the same two rounding midpoints of S and both round to the larger; neither
// form flushes subnormals. tests/ops/packed_sum_test.cu compares the two over every pair of bit
// patterns on the device. (Where packed_sum_available is false a kernel sums element by element.)
template <class S>
__host__ __device__ constexpr bool packed_sum_available() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  return std::is_same_v<S, math::half_t>;
#else
  return std::is_same_v<S, math::half_t> || std::is_same_v<S, math::bfloat16_t>;
#endif
}

// Two elements of S a word: a + b, element by element.
template <class S>
__device__ __forceinline__ unsigned int packed_sum(unsigned int a, unsigned int b) {
  static_assert(packed_sum_available<S>(), "f16 or bf16");
  unsigned int sum;
  if constexpr (std::is_same_v<S, math::half_t>)
    asm("add.rn.f16x2 %0, %1, %2;" : "=r"(sum) : "r"(a), "r"(b));
  else
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(sum) : "r"(a), "r"(0x3f803f80u), "r"(b));
  return sum;
}

// A row part summed in words (tile_sum_words) is a TileWords (above): stored and widened
// without the per-element moves that 16-bit elements take (SASS, sm_90: a PRMT to split each
// word and another to join it again for the store).

// sum = a + b (packed_sum), chunk by chunk.
template <class P, class S>
__device__ __forceinline__ void tile_sum_words(const TileRaw<P, S>& a, const TileRaw<P, S>& b,
                                               TileWords<P, S>& sum) {
  static_assert(tile_words_fit<P, S>(), "whole words of a 16-bit type");
#pragma unroll
  for (int k = 0; k < P::chunks; ++k) {
    unsigned int x[P::vec / 2], y[P::vec / 2];
    __builtin_memcpy(x, a.packs[k].v, sizeof x);
    __builtin_memcpy(y, b.packs[k].v, sizeof y);
#pragma unroll
    for (int i = 0; i < P::vec / 2; ++i) sum.words[k][i] = packed_sum<S>(x[i], y[i]);
  }
}

// Stores this thread's part of a row summed in words, unconverted.
template <class P, class S>
__device__ __forceinline__ void tile_store_words(S* row, int n, int lane,
                                                 const TileWords<P, S>& sum) {
#pragma unroll
  for (int k = 0; k < P::chunks; ++k) {
    const int c = tile_col<P>(lane, k);
    if (c >= n) continue;
    if constexpr (P::vec * sizeof(S) == 16) {
      *reinterpret_cast<uint4*>(row + c) =
          make_uint4(sum.words[k][0], sum.words[k][1], sum.words[k][2], sum.words[k][3]);
    } else {
      Pack<S, P::vec> pack;
      __builtin_memcpy(pack.v, sum.words[k], sizeof pack.v);
      *reinterpret_cast<Pack<S, P::vec>*>(row + c) = pack;
    }
  }
}

// Stores a pack at `to`; kStreamed: a 16-byte pack takes st.global.cs, marking its line the
// first to leave L2 (tile_streams_output).
template <bool kStreamed, class S, int V>
__device__ __forceinline__ void store_pack(Pack<S, V>* to, const Pack<S, V>& pack) {
  if constexpr (kStreamed && sizeof(pack) == 16) {
    uint4 bits;
    __builtin_memcpy(&bits, &pack, sizeof bits);
    __stcs(reinterpret_cast<uint4*>(to), bits);
  } else {
    *to = pack;
  }
}

// Stores this thread's part of a row (values in the compute type, rounded to S); kStreamed: see
// store_pack.
template <class P, bool kStreamed = false, class S>
__device__ __forceinline__ void tile_store(S* row, int n, int lane,
                                           const math::compute_t<S> (&src)[P::items]) {
#pragma unroll
  for (int k = 0; k < P::chunks; ++k) {
    const int c = tile_col<P>(lane, k);
    if (c >= n) continue;
    Pack<S, P::vec> pack;
#pragma unroll
    for (int e = 0; e < P::vec; ++e)
      pack.v[e] = math::StorageTraits<S>::from_compute(src[k * P::vec + e]);
    store_pack<kStreamed>(reinterpret_cast<Pack<S, P::vec>*>(row + c), pack);
  }
}

// True when every row of t (absent: true) starts on a `bytes` boundary (a power of two), so that
// loads `bytes` wide of a dense row whose length fills whole loads are aligned.
inline bool rows_aligned(const Walk& w, const Operand& t, int64_t element_bytes, int64_t bytes) {
  if (!t.data) return true;
  if (reinterpret_cast<uintptr_t>(t.data) % bytes != 0) return false;
  for (int32_t d = 0; d < w.outer_ndim; ++d)
    if ((t.outer[d] * element_bytes) % bytes != 0) return false;
  return true;
}

// The widest load, 16, 8 or 4 bytes, that fits the rows of every operand in `ops` (each row
// starts aligned to it and the row's bytes fill whole loads), or the element's size where none
// of these is wider than an element and fits.
template <size_t N>
int row_vector_bytes(const Walk& w, const Operand* const (&ops)[N], int64_t element_bytes) {
  for (int64_t bytes = 16; bytes > element_bytes; bytes /= 2) {
    bool fits = (w.row_length * element_bytes) % bytes == 0;
    for (size_t i = 0; fits && i < N; ++i) fits = rows_aligned(w, *ops[i], element_bytes, bytes);
    if (fits) return static_cast<int>(bytes);
  }
  return static_cast<int>(element_bytes);
}

// True when every row of a and of b (either absent: true) starts equally far from a 16-byte
// boundary, row by row, and on a whole element: then one row's 16-byte vectors of a and of b
// cover the same columns.
inline bool rows_in_phase(const Walk& w, const Operand& a, const Operand& b,
                          int64_t element_bytes) {
  if (!a.data || !b.data) return true;
  const uintptr_t pa = reinterpret_cast<uintptr_t>(a.data),
                  pb = reinterpret_cast<uintptr_t>(b.data);
  if (pa % element_bytes != 0 || (pa - pb) % 16 != 0) return false;
  for (int32_t d = 0; d < w.outer_ndim; ++d)
    if (((a.outer[d] - b.outer[d]) * element_bytes) % 16 != 0) return false;
  return true;
}

// Block count for a grid-stride launch over `rows` rows, rows_per_block at a time.
inline unsigned tile_grid(int64_t rows, int rows_per_block) {
  const int64_t blocks = (rows + rows_per_block - 1) / rows_per_block;
  return static_cast<unsigned>(blocks < (int64_t{1} << 20) ? blocks : (int64_t{1} << 20));
}

// Block count for a kernel that walks rows with a resident grid (each block many rows, the next
// row's loads issued before the current row is worked on): every block the device holds at once
// (at most max_per_sm an SM where that is positive), or fewer when there are fewer row groups.
// The kernel's occupancy is read once per device (every launch of a kernel passes the same
// threads and smem).
template <auto kKernel>
unsigned resident_grid(int64_t rows, int rows_per_block, int threads, int32_t device,
                       size_t smem = 0, int max_per_sm = 0) {
  static std::atomic<int> kept[cuda::kKeptDevices];
  const int per_sm = cuda::once_per_device(kept, device, [threads, smem] {
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kKernel, threads, smem) != cudaSuccess) {
      (void)cudaGetLastError();  // leave no sticky error behind; one block per SM still runs
      n = 0;
    }
    return n > 0 ? n : 1;
  });
  const unsigned all = tile_grid(rows, rows_per_block);
  const int blocks = max_per_sm > 0 && max_per_sm < per_sm ? max_per_sm : per_sm;
  const int64_t resident = int64_t{blocks} * cuda::sm_count(device);
  return resident < all ? static_cast<unsigned>(resident) : all;
}

// Launches register-cached kernel kKernel (policy P, storage S) over `rows` rows of plan p: on a
// resident grid when it prefetches the next row (tile_prefetches, or in shared memory,
// tile_prefetches_shared), else in one pass. `stages`: whether kKernel is a form that stages
// its rows where the policy does (false for the forms with a residual or a mask, and for the
// in-place form launch_common_tile_kernel picks), kStagedRows rows ahead (the policy's
// tile_staged_rows unless the family asks for more); both must match the kernel's own choice,
// since they size its dynamic shared memory. max_per_sm: a cap on the resident grid's blocks an
// SM (resident_grid; 0: none). extra_smem: dynamic shared memory the kernel keeps past its staged
// rows (the layer norm's weight and bias, norm/cuda.cuh's LayerSharedAffine), the same at every
// launch of kKernel.
template <class P, class S, auto kKernel, int kStagedRows = tile_staged_rows<P, S>(), class Plan>
void launch_tile_kernel(const Plan& p, int64_t rows, int32_t device, cudaStream_t stream,
                        bool stages = true, int max_per_sm = 0, size_t extra_smem = 0) {
  const size_t smem = (stages ? tile_shared_bytes<P, S, kStagedRows>() : 0) + extra_smem;
  if (smem > 0) {
    // The shared memory past 48 KiB is allowed once per device (as prepare_staged_kernel does),
    // not at every launch.
    static std::atomic<bool> allowed[cuda::kKeptDevices];
    cuda::once_per_device(allowed, device, [smem] {
      cuda::check(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem)),
                  "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
      return true;
    });
  }
  const unsigned grid =
      tile_prefetches<P, S>() || smem > 0
          ? resident_grid<kKernel>(rows, P::rows_per_block, P::threads, device, smem, max_per_sm)
          : tile_grid(rows, P::rows_per_block);
  cuda::launch_dependent_shared(kKernel, device, grid, P::threads, smem, stream,
                                "row kernel launch", p);
}

// Launches the common form (no residual, no mask) of a register-cached kernel family over `rows`
// rows of plan p (max_per_sm and extra_smem as for launch_tile_kernel): Family::kernel<true>, which
// stages the next row in shared memory where the policy does (tile_prefetches_shared) and the
// device gains (tile_stages_rows) or the caller asks for it on every device (`always_stage`);
// elsewhere Family::kernel<false>, instantiated only for the policies that stage, which loads
// each row in place in one pass of blocks.
template <class P, class S, class Family, class Plan>
void launch_common_tile_kernel(const Plan& p, int64_t rows, int32_t device, cudaStream_t stream,
                               int max_per_sm = 0, size_t extra_smem = 0,
                               bool always_stage = false) {
  if constexpr (tile_prefetches_shared<P, S>()) {
    if (!always_stage && !tile_stages_rows(device)) {
      launch_tile_kernel<P, S, Family::template kernel<false>>(p, rows, device, stream, false,
                                                               max_per_sm, extra_smem);
      return;
    }
  }
  launch_tile_kernel<P, S, Family::template kernel<true>>(p, rows, device, stream, true, max_per_sm,
                                                          extra_smem);
}

// Picks the cached policy for rows of n elements loaded `V` at a time and calls fn(Policy{});
// returns false when the row is too long to cache (the caller streams it instead). Up to 1024
// elements a row takes the fewest lanes (1..32) that hold it with 16 elements per thread, several
// rows per 256-thread block: the per-row work (shuffle trees, the statistics' divisions) is then
// spread over 16 elements, and each thread has 64 bytes of loads in flight (f32). Longer rows
// take a block of 96, 128, 192, 256 or 512 threads holding 8..32 elements each (32 only for 4-byte
// compute types: 64 floats, or 32 doubles, spill out of the 128 registers a 512-thread block leaves
// a thread). Measured on an H200 (2026-11-26, kf-bench, same run): a warp per row of 2048 f32 (64
// elements per thread) was 2 % faster for softmax and 2-3 % slower for the norms, so the block path
// stays. Its per-row work (two or three block reductions, each with barriers) weighs on 8 elements
// a thread, though: 128-thread blocks of 16 elements a thread for rows of up to 2048 (f32, f16,
// bf16), and of 32 for 16-bit rows of up to 4096 where the caller allows it
// (`wide`: false for kernels that hold two rows, a residual or a mask as well, which spilled
// there, and for the norms on devices that are not tile_issue_lean), measured on an H200 (15:05Z
// and 15:12Z, same calls), % of copy f32 / f16 / bf16: causal softmax over 2048 columns 62.5 / 37 /
// 36 -> 70 / 57 / 53.5; the 2048x2048 seeds, softmax 50 / 36 / 35 -> 59 / 42 / 41, layer norm
// 40 / 29 / 27 -> 51 / 34 / 30, RMS norm 46 / 37 / 36 -> 55 / 41.5 / 38; 16-bit rows of 4096,
// layer norm 63 / 47 -> 70 / 60, RMS norm 85 / 69 -> 85 / 82, softmax 84.5 / 84 -> 85.5 / 87.
// The longest row with_tile_policy serves (f32, f16 and bf16 rows of 16-byte vectors).
constexpr int64_t kMaxTileRow = 512 * 32;

// kNorm: the caller is a norm, which takes two policies below that the softmax lost with: 320
// threads at 16 elements for 16-bit rows of 4097..5120 and at 32 for f32 rows of 8193..10240.
template <class S, int V, bool kNorm, class Fn>
bool with_tile_policy(int64_t n, bool wide, bool fill_2560, Fn&& fn) {
  constexpr int kRowBlock = 256;   // block size of the lanes-per-row regime
  constexpr int kChunks = 16 / V;  // 16 elements per thread
  constexpr int kPerLane = 16;
  if (n <= kPerLane) return fn(TilePolicy<1, kChunks, V, kRowBlock>{}), true;
  if (n <= 2 * kPerLane) return fn(TilePolicy<2, kChunks, V, kRowBlock>{}), true;
  if (n <= 4 * kPerLane) return fn(TilePolicy<4, kChunks, V, kRowBlock>{}), true;
  if (n <= 8 * kPerLane) return fn(TilePolicy<8, kChunks, V, kRowBlock>{}), true;
  if (n <= 16 * kPerLane) return fn(TilePolicy<16, kChunks, V, kRowBlock>{}), true;
  if (n <= 32 * kPerLane) return fn(TilePolicy<32, kChunks, V, kRowBlock>{}), true;
  // Rows of 513..768 (768: BERT-base's hidden size) at 24 elements a lane (16-bit rows of
  // 16-byte vectors: three chunks): at 32, the last quarter of every lane's slots lies past the
  // row's end and is worked for nothing. This was 16-bit rows of 16-byte vectors only; H200 A/B
  // for the other types (2026-11-30 00:48Z, kf-bench, same call, two passes within 0.5), % of
  // copy, rows of 520 / 700 / 766 / 768: f32 softmax 72.8 / 82.7 / 82.0 / 87.5 -> 76.4 / 85.3 /
  // 86.6 / 89.9, layer norm 70.5 / 79.5 / 59.4 / 84.3 -> 74.4 / 82.7 / 60.2 / 87.2, RMS norm
  // 80.1 / 86.4 / 66.3 / 90.4 -> 81.2 / 87.4 / 67.8 / 91.6; 16-bit rows of 8- and 4-byte vectors
  // (700, 766), bf16 / f16: softmax 78.8 / 81.3 -> 87.1 / 87.4 and 76.7 / 82.4 -> 87.2 / 85.2,
  // layer norm 59.7 / 67.0 -> 72.4 / 79.2 and 52.4 / 59.6 -> 64.8 / 73.3, RMS norm 79.2 / 81.0
  // -> 82.4 / 83.0 and 71.5 / 78.5 -> 81.0 / 82.0; rows of 1024 and 1100 within 0.4.
  if constexpr (sizeof(math::compute_t<S>) == 4 && 24 % V == 0)
    if (n <= 768) return fn(TilePolicy<32, 24 / V, V, kRowBlock>{}), true;
  if (n <= 1024) return fn(TilePolicy<32, 2 * kChunks, V, kRowBlock>{}), true;
  // Rows just past a power of two: the blocks of 128, 256 (and the wide 128) threads below take
  // rows of up to 2048 and 4096, so a row of 1100 or 2100 left about half of their slots past
  // its end, each loaded as -inf (or 0) and worked. Blocks of 96 threads (rows of 1025..1536)
  // and 192 (2049..3072; 16-bit rows in the wide form: 96 threads at 32 elements) hold three
  // quarters as much. H200 A/B (2026-11-30 00:41Z, kf-bench, 879bf59's library against this one,
  // same call, two passes within 0.5), % of copy, rows of 1100 / 1300 / 1536 / 2100 / 2600 /
  // 3072: f32 softmax 80.2 / 86.2 / 92.0 / 71.8 / 80.0 / 87.8 -> 89.0 / 93.4 / 95.1 / 83.2 /
  // 90.4 / 94.3, layer norm 61.9 / 69.9 / 78.8 / 63.6 / 73.7 / 82.9 -> 77.7 / 83.6 / 90.5 / 69.3
  // / 79.0 / 86.9, RMS norm 74.4 / 81.7 / 88.4 / 76.1 / 83.9 / 90.5 -> 86.8 / 89.1 / 93.7 / 80.2
  // / 85.8 / 91.6; bf16 softmax 52.9 / 61.4 / 74.2 / 59.4 / 73.9 / 82.1 -> 66.5 / 77.6 / 89.4 /
  // 72.9 / 83.8 / 89.2, layer norm 45.2 / 53.1 / 65.8 / 46.1 / 64.8 / 75.1 -> 56.9 / 66.3 / 84.8
  // / 55.2 / 77.5 / 86.6, RMS norm 56.1 / 64.5 / 82.2 / 60.4 / 77.1 / 84.8 -> 74.7 / 80.4 / 90.9
  // / 73.3 / 85.0 / 90.5; rows of 700, 2048 and 4096 (other policies) within 0.6. The scalar
  // f32 norm with a residual spills 4 bytes at 96 and 192 threads (ptxas, sm_90), not at 128.
  if constexpr (sizeof(math::compute_t<S>) == 4) {
    if (n <= 96 * 16) return fn(TilePolicy<96, 16 / V, V, 96>{}), true;
    if (n <= 128 * 16) return fn(TilePolicy<128, 16 / V, V, 128>{}), true;
  }
  if (n <= 256 * 8) return fn(TilePolicy<256, (8 + V - 1) / V, V, 256>{}), true;
  if constexpr (sizeof(S) == 2 && V > 1) {
    // 16-bit rows of 2049..2560 in the wide form where the caller allows it (`fill_2560`): 160
    // threads at 16 elements, whose 2560 slots a row of 2100 fills to 82 %, rather than 96 at 32
    // (3072 slots, 68 %). H200 A/B (2026-11-30 04:14Z, kf-bench, 11dcd54's library against the
    // one with it for every wide-form row, same call, two passes within 0.3), % of copy, rows of
    // 2100 / 2304 / 2560: softmax f16 77.4 / 81.3 / 85.2 -> 80.6 / 86.1 / 90.1, bf16 72.6 / 80.4
    // / 84.5 -> 76.9 / 84.1 / 89.3; layer norm f16 61.4 / 76.5 / 81.9 -> 65.9 / 77.4 / 83.9,
    // bf16 55.3 / 70.7 / 77.3 -> 64.6 / 54.9 / 59.0; RMS norm f16 77.0 / 84.9 / 87.1 -> 83.9 /
    // 87.0 / 89.5, bf16 73.2 / 83.0 / 85.9 -> 75.9 / 80.3 / 83.6; rows of 3072 within 0.4. The
    // bf16 norms' rows of 16-byte vectors (2304, 2560) lost, the layer norm's 16 points (its
    // 32-element form widens the affine in word pairs, LayerAffinePairs in norm/cuda.cuh), so
    // the norms pass fill_2560 = false for them; rows of 2100 are 8-byte vectors. Rows of 4-byte
    // vectors (length 2 mod 4) were not measured and take it too.
    if (n <= 160 * 16 && wide && fill_2560) return fn(TilePolicy<160, 16 / V, V, 160>{}), true;
    if (n <= 96 * 32 && wide) return fn(TilePolicy<96, 32 / V, V, 96>{}), true;
    if (n <= 128 * 32 && wide) return fn(TilePolicy<128, 32 / V, V, 128>{}), true;
  }
  // Rows of 2049..2560 (but 16-bit rows in the wide form above): 160 threads, whose 2560 slots
  // a row of 2100 fills to 82 % where 192 threads' 3072 fill 68 %. H200 A/B (2026-11-30 03:13Z,
  // kf-bench, 1caceac's library against this one, same call, two passes within 0.4), f32, % of
  // copy, rows of 2049 / 2100 / 2560: softmax 70.7 / 83.5 / 90.8 -> 79.4 / 90.3 / 94.7, layer
  // norm 60.7 / 69.6 / 79.0 -> 68.1 / 81.4 / 89.3, RMS norm 69.0 / 80.3 / 86.0 -> 77.0 / 87.9 /
  // 93.3; rows of 3072 (192 threads either way) within 0.5. The scalar f32 masked softmax
  // spills 16 bytes at 160 threads (ptxas, sm_90), the scalar f32 norm with a residual 4 bytes,
  // as at 96 and 192.
  if constexpr (sizeof(math::compute_t<S>) == 4) {
    if (n <= 160 * 16) return fn(TilePolicy<160, 16 / V, V, 160>{}), true;
    if (n <= 192 * 16) return fn(TilePolicy<192, 16 / V, V, 192>{}), true;
  }
  if (n <= 256 * 16) return fn(TilePolicy<256, 16 / V, V, 256>{}), true;
  // 16-bit rows of 4097..5120 of 16-byte vectors in the wide form where the caller allows it
  // (kNorm: the norms): 320 threads at 16 elements, three blocks an SM (tile_min_blocks),
  // whose 5120 slots a row of 5000 fills to 98 %, where the 256 threads at 24 below (two blocks
  // an SM) fill 81 % and hold 512 threads an SM instead of 960. H200 A/B (2026-12-04 14:12Z,
  // kf-bench, one library choosing the policy by an environment variable, same call, two
  // passes), % of copy, rows of 4104 / 4608 / 5000 / 5120, 256 at 24 -> 320 at 16: RMS norm f16
  // 75.9 / 79.2 / 79.1 / 81.4 -> 85.4 / 89.8 / 89.5 / 91.3, bf16 73.4 / 77.7 / 77.8 / 79.9 ->
  // 83.0 / 88.3 / 88.5 / 90.8; layer norm + ReLU f16 65.2 / 72.4 / 75.2 / 77.1 -> 69.6 / 77.0 /
  // 81.5 / 83.9, bf16 54.4 / 60.4 / 65.0 / 66.2 -> 58.9 / 65.2 / 70.2 / 71.9. The 16-bit softmax
  // lost 0.5 to 3.6 points at every length but f16 rows of 5120 (+0.4) and keeps 256 at 24; the
  // f32 softmax takes the policy for rows of 4609..5120 only (softmax/cuda.cuh, launch_cached);
  // the f32 norms' rows of 16..32 KiB are staged, not cached. Rows of 4096 and 6144 (other
  // policies) within 0.5. (The layer norm's 16-bit rows of 4097..6144 take staged policies of
  // 40 elements a thread since, norm/cuda.cuh's launch_cached.)
  if constexpr (kNorm && sizeof(S) == 2 && V == 8)
    if (n <= 320 * 16 && wide) return fn(TilePolicy<320, 16 / V, V, 320>{}), true;
  // 16-bit rows of 4097..6144 of 16-byte vectors where the caller allows the wide forms: a block
  // of 256 at 24 elements a thread, where the 512-thread policy below leaves a quarter or more of
  // its slots past the row's end (rows of 5120: 37.5 %). H200 A/B (2026-11-29 11:49Z, kf-bench,
  // one library with both policies, same call, two passes), % of copy, f16 / bf16, rows of 5120:
  // softmax 63.6 / 61.4 -> 88.0 / 86.7, layer norm 57.6 / 48.5 -> 77.1 / 66.4, RMS norm 80.1 /
  // 70.6 -> 81.4 / 80.2; rows of 6144: softmax 74.5 / 71.6 -> 84.8 / 85.7, layer norm 67.6 /
  // 57.2 -> 81.8 / 76.9, RMS norm 85.6 / 80.6 -> 86.1 / 84.6.
  if constexpr (sizeof(S) == 2 && V == 8)
    if (n <= 256 * 24 && wide) return fn(TilePolicy<256, 3, V, 256>{}), true;
  // The same for f32 rows of 4097..6144 (24 elements a thread in six 16-byte vectors). H200 A/B
  // (2026-11-29 12:59Z, kf-bench, 794a8ab's library against this one, same call, two passes),
  // f32, % of copy, rows of 4352 / 5120 / 6144: softmax 64.5 / 70.1 / 78.4 -> 88.7 / 83.0 /
  // 80.5; layer norm and RMS norm within 0.7 either way (83.2 / 83.0 / 80.9 and 80.6 / 80.9 /
  // 80.5 before).
  if constexpr (sizeof(S) == 4 && V == 4)
    if (n <= 256 * 24 && wide) return fn(TilePolicy<256, 6, V, 256>{}), true;
  if (n <= 512 * 16) return fn(TilePolicy<512, 16 / V, V, 512>{}), true;
  // 16-bit rows of 8193..10240 of 16-byte vectors in the wide form: 320 threads at 32 elements a
  // thread, two blocks an SM (tile_min_blocks), whose 10240 slots a row of 8200 fills to 80 %,
  // where the 512 threads at 24 below (one block an SM) fill 67 %. H200 A/B (2026-12-04
  // 16:37Z-16:44Z, kf-bench, one library choosing the policy by an environment variable, same
  // call, two passes, best of two), % of copy, rows of 8200 / 9000 / 10000 / 10240, 512 at 24
  // -> 320 at 32: softmax f16 62.4 / 65.8 / 73.6 / 76.1 -> 85.5 / 86.8 / 86.9 /
  // 85.0, bf16 60.6 / 64.1 / 71.1 / 73.4 -> 84.4 / 86.3 / 86.5 / 87.3; RMS norm f16 75.6 / 76.5 /
  // 78.2 / 80.3 -> 87.6 / 87.7 / 87.4 / 88.2, bf16 73.5 / 75.3 / 77.3 / 79.0 -> 87.1 / 87.9 /
  // 87.8 / 86.8; layer norm + ReLU f16 59.6 / 64.5 / 70.3 / 71.9 -> 77.2 / 80.9 / 83.1 / 86.0,
  // bf16 52.0 / 56.0 / 61.9 / 64.5 -> 56.0 / 59.7 / 63.3 / 64.9. Rows of 8192 and those with a
  // residual (other policies) within 0.5. Rows of 10241..12288 keep 512 at 24: 384 threads at 32,
  // two blocks an SM, lost 2 to 20 points there but in the f16 RMS norm (rows of 10248 / 11000 /
  // 12288: softmax f16 70.4 / 72.8 / 83.7 -> 59.1 / 60.8 / 64.3, RMS norm bf16 77.7 / 78.3 / 82.1
  // -> 57.7 / 58.5 / 64.1, f16 78.6 / 79.8 / 84.4 -> 85.9 / 86.0 / 84.8). 640 threads at 16
  // (rows of 8193..10240) and 768 (10241..12288), one block an SM, gained at most 1.2 anywhere
  // and lost up to 11 (layer norm f16 rows of 10248 70.7 -> 59.4). ptxas (sm_90): 96 registers;
  // the softmax's kernels spill nothing, the norms' 4-22 bytes (f16 / bf16 stores).
  if constexpr (sizeof(S) == 2 && V == 8)
    if (n <= 320 * 32 && wide) return fn(TilePolicy<320, 4, V, 320>{}), true;
  // The norms' (kNorm) f32 rows of 8193..10240 of 16-byte vectors in the wide form take the same
  // block (one row staged ahead in shared memory, tile_prefetches_shared). H200 A/B (2026-12-04
  // 16:52Z, as above, f32, best of two), rows of 8200 / 9000 / 10000 / 10240, 512 at 24 -> 320 at
  // 32: RMS norm 71.1 / 74.4 / 79.0 / 82.4 -> 79.6 / 81.9 / 80.5 / 84.8, layer norm + ReLU 66.8 /
  // 71.3 / 76.6 / 80.3 -> 73.2 / 75.6 / 76.3 / 81.4; the softmax lost 5 to 6 points (82.3 / 83.4
  // / 84.0 / 87.0 -> 77.4 / 77.6 / 77.8 / 81.0) and keeps 512 at 24. Rows of 8192 and those with
  // a residual within 0.6. ptxas (sm_90): 95-96 registers, 20 bytes of spill stores.
  if constexpr (kNorm && sizeof(S) == 4 && V == 4)
    if (n <= 320 * 32 && wide) return fn(TilePolicy<320, 8, V, 320>{}), true;
  // Rows of 8193..12288 of 16-byte vectors: 512 threads at 24 elements a thread, where the
  // 32-element policy below leaves a quarter to a half of its slots past the row's end. H200 A/B
  // (2026-11-29 20:49Z, kf-bench, the library before it against the one with it, same call, two
  // passes, the second within 0.5 but where shown), % of copy, rows of 8200 / 10240 / 12288:
  // layer norm f32 52.1 / 65.9 / 76.8 -> 67.9 / 80.7 / 83.5 (84.9), f16 48.3 / 59.4 / 68.8 ->
  // 59.9 / 72.0 / 79.2, bf16 48.9 / 60.0 / 68.6 -> 52.1 / 64.6 / 72.1; RMS norm f32 55.8 / 71.9 /
  // 79.2 -> 71.3 / 82.9 / 86.0, f16 73.1 / 78.4 / 82.0 -> 75.2 / 79.9 / 83.9, bf16 65.8 / 76.7 /
  // 80.0 -> 72.9 / 78.7 / 81.8; softmax f16 52.4 / 64.9 / 71.8 -> 61.2 / 73.4 / 79.3, bf16 51.2 /
  // 62.2 / 70.8 -> 58.7 / 70.6 / 77.9 (f32: softmax/cuda.cuh keeps 32 past 10240). Rows of 16384
  // (not this policy) within 1 point.
  if constexpr (sizeof(math::compute_t<S>) == 4 && V > 1 && 24 % V == 0)
    if (n <= 512 * 24) return fn(TilePolicy<512, 24 / V, V, 512>{}), true;
  if constexpr (sizeof(math::compute_t<S>) == 4)
    if (n <= kMaxTileRow) return fn(TilePolicy<512, 32 / V, V, 512>{}), true;
  return false;
}

}  // namespace kf::rows
