// CUDA backend of the norm family, five regimes chosen per call:
//  - grid-group rows (core/ops/rows/grid_group.cuh) for the norms' rows of 64 KiB and more that
//    the register-cached kernel does not hold (16-bit rows from 64 KiB, f32 rows past 64 KiB;
//    the RMS norm's with a residual too), dense, 16-byte aligned and in whole 16-byte vectors,
//    on sm_90: each row over a group of blocks of a cooperative grid (32 KiB shares, or the
//    row's vectors dealt evenly where it is not whole shares), the sums exchanged through global
//    memory (launch_grid_rows);
//  - staged rows (core/ops/rows/staged.cuh) for f32/f16/bf16 rows that are dense, 16-byte
//    aligned and fill whole 16-byte vectors, where they measured faster (see launch_staged):
//    f32 rows of more than 16 KiB up to 32 KiB (up to 64 KiB with a residual) and 16-bit rows
//    past 16 KiB with a residual (past 32 KiB without), up to 64 KiB; rows past 64 KiB, which
//    take a thread-block cluster per row (sm_90) with the statistics combined through
//    distributed shared memory; x (and the residual) are read from DRAM once. Dense rows of
//    more than 16384 elements that do not fill whole vectors, but whose operands are in phase
//    row by row (vocabulary rows of 30522), are staged from each row's first 16-byte boundary
//    (launch_shifted), the head and tail columns read apart;
//  - other rows of up to 1024 elements: a few lanes or a warp per row, several rows per block;
//  - other rows of up to 16K elements (8K for f64): a block per row;
//    both hold the row in registers (core/ops/rows/tile.cuh), so h = x + residual is read from
//    DRAM once, in the widest loads of 16, 8 or 4 bytes that every row operand's row starts are
//    aligned to and the row's bytes fill (rows::row_vector_bytes), else one element a load;
//    16-bit rows run on a resident grid that issues the next row's loads before working on the
//    current row (rows::tile_prefetches);
//  - everything else (strided rows, longer rows out of phase): the streaming path, one
//    block per row over global memory (pass 1: h, residual_out, shifted sums; pass 2:
//    normalize, affine, activation), which reads x twice, one element a load. Each thread
//    touches the same columns in both passes, which keeps the exact in-place forms safe.
// In the staged and cached paths each element is loaded, and later stored, by one thread (staged:
// each row is in shared memory before any of its stores), and every load comes before any store, so
// out and residual_out may be x or residual exactly.
// The kernels live in the headers this one includes, one a regime (cuda_streaming.cuh,
// cuda_cached.cuh, cuda_grid.cuh, cuda_staged.cuh, each with its launch but the cached one's);
// this header chooses among them (launch_cached, launch). Only the family's per-storage-type
// translation units include it (cuda_f32.cu, cuda_f16.cu, cuda_bf16.cu, cuda_f64.cu, and for 16-bit
// rows narrower than 16-byte vectors cuda_f16_narrow.cu and cuda_bf16_narrow.cu): each
// instantiates them for one type (and width), so they compile in parallel; cuda.cu dispatches.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "core/math/numeric.hpp"
#include "core/ops/norm/cuda_cached.cuh"
#include "core/ops/norm/cuda_grid.cuh"
#include "core/ops/norm/cuda_staged.cuh"
#include "core/ops/norm/cuda_storage.hpp"
#include "core/ops/norm/cuda_streaming.cuh"
#include "core/ops/norm/norm.hpp"
#include "core/ops/rows/dispatch.cuh"
#include "core/ops/rows/tile.cuh"

namespace kf::norm {
namespace {

// Whether the form with a residual for policy P and storage S has a build for three blocks per
// SM, which launch_cached takes where the SMs are not rows::tile_issue_lean: f16 rows of
// 2049..4096 (a 256-thread block a row, 16 elements a thread; 76 registers and no spills, where
// the two-block build takes 85). Not bf16, which gained nothing. kf-bench, RMS norm with a
// residual over 8192 rows of 4096, % of copy, two blocks -> three (same calls, three passes,
// 2026-11-27): H100 (14:32Z) f16 88.5-88.6 -> 89.8-90.2, bf16 86.9-87.0 -> 86.8-87.1 (squeezed
// from 96 registers to 80); H200 (14:26Z) f16 86.2-86.6 -> 81.6-82.1, bf16 86.1-86.5 -> 78.4-79.0.
template <class P, class S>
constexpr bool residual_takes_three_blocks() {
  return std::is_same_v<S, math::half_t> && P::vec == 8 && P::items == 16 && P::threads == 256 &&
         P::group == P::threads;
}

// The four-block build of the common form (rows::tile_lean_blocks: f32 rows of 16 elements a
// thread on 256-thread blocks, on issue-lean devices). Nsight Compute on an H200 (2026-11-29
// 08:45Z, 8192 rows of 4096) had the f32 softmax at 64 registers and four blocks reading 78.5 %
// of DRAM bandwidth, the layer norm and RMS norm at 80 registers and three blocks 69.8 and
// 74.0 %. H200 A/B (09:02Z, kf-bench, one library with both builds, same call, two passes), f32,
// % of copy, three blocks -> four: layer norm rows of 64 89.1 / 89.1 -> 92.3 / 92.4, of 256
// 89.5 / 89.6 -> 92.2 / 92.5 (08:54Z), of 4096 82.8 / 83.0 -> 90.0 / 90.1; RMS norm rows of
// 4096 88.4 / 88.6 -> 92.0 / 92.3; rows of 1024 and 16384 (other policies) within 0.5, those of
// 262144 (the clustered kernel) within their run-to-run spread of 2. The f32 128-thread policy
// (rows of 1025..2048) compiled for eight blocks moved nothing (the 2048x2048 seeds: layer norm
// 53.7 / 54.4 -> 54.3 / 54.4, RMS norm 56.9 / 57.2 -> 57.1 / 56.7), and keeps six.
// The same switch takes 16-bit rows of 4097..8192 (512 threads at 16 elements each) from one
// block an SM to two (rows::tile_lean_blocks has the A/B: rows of 8192 +10 to +17 points).
// The common form's kernels, for rows::launch_common_tile_kernel (kBlocks as for cached_kernel).
template <class P, class S, int kBlocks = 0>
struct CommonCached {
  template <bool kStage>
  static constexpr auto kernel = cached_kernel<P, S, false, kStage, kBlocks>;
};

// The layer norm's build for bf16 rows that widens row, weight and bias in word pairs
// (rows::widen_bf16_pairs: an IMAD and a LOP3 a word where element by element takes two ALU-pipe
// instructions), compiled for half as many resident blocks again (without that bound the pairs
// took 90 registers where the other build takes 80, a block fewer per SM). launch_cached takes it
// where the SMs are rows::tile_issue_lean, for the policies of 16 elements a thread of up to 256
// threads (rows of up to 512 and of 1025..2048); on other SMs, for bf16 rows of 33..64 (see
// there). kf-bench on an H200 (2026-11-27 21:52Z, same call, three passes), % of copy, element by
// element -> this build: layer norm bf16 rows of 64 / 128 / 256 / 512 / 2048 76.2 / 75.5 / 75.5
// / 74.7 / 68.6 -> 86.8 / 86.0 / 86.1 / 85.4 / 81.5, the 2048x2048 seed 35.9 -> 38.6; rows of 1024
// and 4096 (other policies) and every RMS norm row within 0.4. Not the RMS norm (an earlier build
// of this kind for both norms, 21:30Z: RMS norm rows of 64 87.2 -> 83.2), nor the other policies,
// where widening in pairs lost on both cards (see rows::pairs_widen). (Of bf16's 16-element
// policies, a 256-thread block a row is never picked on such SMs: rows of up to 2048 take 128
// threads, longer ones the wide form; so no build of it.)
template <class P, class S>
constexpr bool layer_takes_pairs() {
  return rows::pairs_widen<P, S>() && P::items <= 16 && P::group < 256 && P::threads <= 256;
}
template <class P, class S>
struct LayerPairs {
  template <bool kStage>
  static constexpr auto kernel =
      cached_kernel<P, S, false, kStage, rows::tile_min_blocks<P, S>() * 3 / 2, true>;
};

// The layer norm's build for bf16 rows of 32 elements a thread over a block (rows of 2049..4096
// in the wide form, 8193..16384) that widens the weight and bias in word pairs and the row
// element by element, which launch_cached takes where the SMs are rows::tile_issue_lean. In
// pairs half of the widening moves from the ALU pipe to the FMA pipe (rows::widen_bf16_pairs);
// the ALU pipe is what bounds these kernels there (Nsight Compute, H200, 2026-11-29, rows of
// 4096: 70 % of its peak, 23.6 instructions a thread an element). The row itself stays element
// by element: in pairs it lost (see rows::pairs_widen; H200 2026-11-29 09:35Z, rows of 4096
// 77.8 -> 66.7). Same registers (128), no spills. kf-bench on an H200 (10:02Z, one library
// with both builds, same call, two passes), layer norm bf16, % of copy, element by element ->
// this build: rows of 4096 77.7 / 77.9 -> 83.9 / 83.8, of 16384 70.0 / 70.1 -> 77.8 / 77.8.
// Rows of 4097..8192 (16 elements a thread) were not measured and keep the common form, as do
// devices that are not issue-lean and the RMS norm (no bias; at 86-87 % there). launch_cached
// also takes this build for the staged bf16 policies of 40 and 48 elements a thread.
template <class P, class S>
constexpr bool layer_takes_affine_pairs() {
  return rows::pairs_widen<P, S>() && P::items == 32 && P::group == P::threads;
}
template <class P, class S>
struct LayerAffinePairs {
  template <bool kStage>
  static constexpr auto kernel = cached_kernel<P, S, false, kStage, 0, false, true>;
};

// The layer norm's build for 16-bit rows of 12289..16384 over a 512-thread block (32 elements a
// thread, one block an SM) that holds the weight and bias in shared memory for the launch
// (kSharedAffine, 64 KiB), where the other builds read both from L1/L2 for every row; launch_cached
// takes it for a layer norm with a weight and a bias where the SMs are rows::tile_issue_lean.
// kf-bench on an H200 (2026-12-01 13:36Z and 13:50Z, one library with both, same calls, two
// passes each), layer norm, % of copy, from L1/L2 -> shared: rows of 16384 f16 81.8 / 81.6 /
// 82.1 / 82.1 -> 84.4 / 83.9 / 84.5 / 84.3, bf16 82.6 / 82.7 / 82.5 / 82.8 -> 83.4 / 83.0 / 83.7
// / 83.4. Not f32 (rows of 16384 82.8 / 82.9 / 82.8 / 82.7 -> 82.0 / 81.0 / 81.2 / 81.1, 192 KiB
// a block with the staged row), nor the 24-element policy below it (rows of 8193..12288), which
// moved both ways: rows of 12288 bf16 71.7 / 71.6 / 71.8 / 72.1 -> 74.0 / 73.7 / 73.7 / 73.7, f32
// 83.5 / 84.0 -> 82.2 / 82.2; rows of 10240 f16 72.0 / 71.5 -> 69.8 / 69.6, bf16 63.4 / 63.3 ->
// 62.5 / 62.3, f32 81.2 / 80.7 -> 73.5 / 73.5.
template <class P, class S>
constexpr bool layer_takes_shared_affine() {
  return sizeof(S) == 2 && P::threads == 512 && P::group == P::threads && P::items == 32 &&
         P::vec * sizeof(S) == 16;
}
template <class P, class S>
struct LayerSharedAffine {
  static constexpr size_t smem = size_t{2} * 16 * P::chunks * P::threads;  // weight and bias
  template <bool kStage>
  static constexpr auto kernel =
      cached_kernel<P, S, false, kStage, 0, false, layer_takes_affine_pairs<P, S>(), true>;
};

// The most resident blocks an SM for the cached kernels of policy P and storage S (0: as many as
// fit): three for the 16-bit prefetching policies of 256 threads at 16 elements a thread. Their
// registers, and so how many fit, move with every change to the kernel; four blocks an SM lost
// on the H100 wherever they were measured. H100 A/B (2026-11-27 23:40Z, kf-bench, same call,
// three passes), % of copy, f16 rows of 4096, where the output loop for a weight without a
// bias took the kernel from 72 to 64 registers: layer norm 92.1 / 91.9 / 92.1 -> 83.0 / 83.3 /
// 83.1, RMS norm 93.1 / 93.3 / 93.1 -> 88.3 / 88.5 / 88.2 (and 2026-11-27 00:35Z, the f16
// kernels compiled for four blocks: layer norm 90.9 -> 85.0, RMS norm 93.0 -> 85.1, rows of
// 64 85.2 -> 82.3).
template <class P, class S>
constexpr int cached_max_blocks() {
  return rows::tile_prefetches<P, S>() && P::threads == 256 && P::items == 16 ? 3 : 0;
}

// The same for the form with a residual where the SMs are rows::tile_issue_lean: two blocks of
// a row each for the 256-thread policy, as its registers had left it before the packed sum
// (rows::packed_sum) took bf16's kernel from 95 to 80 registers. Three lost on the H200: A/Bs of
// 2026-11-27 14:26Z (see residual_takes_three_blocks) and 2026-11-28 00:05Z (kf-bench, same
// call, RMS norm with a residual over bf16 rows of 4096, % of copy, 86.3 / 86.3 / 86.3 -> 82.0 /
// 82.1 at 80 registers). With this cap (H200 A/B, 2026-11-28 01:06Z, b041fc2 -> 8680d4c, same
// call, three passes): 86.8 / 86.9 / 86.7 -> 87.0 / 87.0 / 87.1.
template <class P, class S>
constexpr int residual_lean_max_blocks() {
  return P::threads == 256 && P::group == 256 ? 2 : cached_max_blocks<P, S>();
}

template <class S, int V>
bool launch_cached(const Plan& p, int32_t device, cudaStream_t stream) {
  if (p.walk.rows >= rows::kMaxColdRows) return false;  // row offsets in 32 bits (rows.hpp)
  // f32 rows of 1537..2048 without a residual, at most two rows a block of a grid of eight
  // blocks an SM (2112 rows on 132 SMs: the 2048 x 2048 seed rows): the policy with_tile_policy
  // takes for them (128 threads at 16 elements a thread) compiled for eight blocks an SM (64
  // registers, no stack; ptxas sm_90), on a resident grid whose blocks each stage their next row
  // in shared memory from the start (cached_kernel's kStageNext), so that both rows' loads are in
  // flight at once. A/Bs (kf-bench, one library choosing the form by an environment variable,
  // same call, every row checked `ok`), % of copy at 2048 x 2048, layer norm / RMS norm:
  //  - H200, 2026-12-05 19:53Z-19:56Z, three passes without it, six with it: 54.7 / 58.0, 54.4 /
  //    57.3, 54.9 / 58.1 -> 57.0 to 58.4 / 61.6 to 63.1. The softmax's same form moved 61.0-61.9
  //    -> 60.1-61.3 (two rows staged: 54.1-54.9) and keeps with_tile_policy's.
  //  - H100, 21:29Z, one pass: 66.3 / 67.6 -> 70.3 / 74.3.
  // Over more rows it lost (H100, 21:28Z, two passes, 256 MiB): rows of 1540 / 1800 / 2048 (21789
  // / 18642 / 16384 rows), layer norm 92.4 / 96.1 / 95.6 -> 80.5 / 82.9 / 88.1, RMS norm 95.7 /
  // 96.2 / 95.7 -> 83.2 / 85.2 / 90.4; so those keep the one-pass grid.
  if constexpr (std::is_same_v<S, float> && V == 4) {
    constexpr int kBlocks = 8;  // an SM, as compiled (__launch_bounds__) and as the gate counts
    const int64_t n = p.walk.row_length;
    if (!p.residual.data && n > 1536 && n <= 2048 &&
        p.walk.rows <= int64_t{2} * kBlocks * cuda::sm_count(device)) {
      using P = rows::TilePolicy<128, 4, V, 128>;
      rows::launch_tile_kernel<
          P, S, cached_kernel<P, S, false, true, kBlocks, false, false, false, true>, 1>(
          p, p.walk.rows, device, stream);
      return true;
    }
  }
  // The RMS norm's 16-bit rows of 4097..6144 of 16-byte vectors with a residual, where the SMs
  // are rows::tile_issue_lean: 320 threads at 16 elements a thread (rows of up to 5120) or 384
  // (5121..6144), compiled for two blocks an SM, instead of with_tile_policy's 512 at 16 (one
  // block an SM; a row of 4104 fills half its 8192 slots). H200 A/B (2026-12-04 about 17:20Z,
  // kf-bench, one library choosing the form by an environment variable, same call, one pass,
  // every row checked `ok`), % of copy, rows of 4104 / 5120 / 5128 / 6144: f16 74.9 / 79.7 /
  // 77.8 / 84.3 -> 88.2 / 86.5 / 87.5 / 86.2, bf16 72.7 / 78.9 / 77.1 / 83.0 -> 88.2 / 86.5 /
  // 87.3 / 86.0. Compiled for three blocks an SM they read 86.1 / 86.3 / 76.0 / 79.1 (f16) and
  // 85.1 / 85.9 / 77.0 / 78.8 (bf16).
  if constexpr (sizeof(S) == 2 && V == 8) {
    const int64_t n = p.walk.row_length;
    if (p.residual.data && n > 256 * 16 && n <= 384 * 16 && rows::tile_issue_lean(device)) {
      if (n <= 320 * 16) {
        using P = rows::TilePolicy<320, 2, 8, 320>;
        rows::launch_tile_kernel<P, S, cached_kernel<P, S, true, true, 2>>(p, p.walk.rows, device,
                                                                           stream, false);
      } else {
        using P = rows::TilePolicy<384, 2, 8, 384>;
        rows::launch_tile_kernel<P, S, cached_kernel<P, S, true, true, 2>>(p, p.walk.rows, device,
                                                                           stream, false);
      }
      return true;
    }
  }
  // The 32-elements-a-thread form for 16-bit rows of 2049..4096 (rows/tile.cuh), without a
  // residual, where the device's SMs issue few instructions per byte (rows::tile_issue_lean):
  // there its per-row work (the block reductions) weighs on twice the elements; elsewhere the
  // 16-elements-a-thread form keeps more rows in flight. kf-bench, 16384 rows of 4096, % of
  // copy, layer norm / RMS norm, f16 and bf16, 16 elements a thread -> 32 (same calls, two
  // passes, 2026-11-27): H200 (11:11Z) f16 79.5 / 85.3 -> 86.2 / 86.3, bf16 68.0 / 78.0 -> 77.4
  // / 84.0; H100 (11:19Z) f16 92.0 / 93.0 -> 86.1 / 87.3, bf16 90.5 / 92.4 -> 84.1 / 84.2. (An
  // H100 A/B of 2026-11-26 16:16Z had made it bf16-only, on every device.)
  //
  // Elsewhere (the H100) the wide form is taken for rows of 8193..10240 without a residual: f32
  // rows take 320 threads at 32 elements (with_tile_policy's kNorm policy), the RMS norm's 16-bit
  // rows of 16-byte vectors 320 at 32 too, where both had 512 threads at 24 (one block an SM).
  // H100 A/B (2026-12-06 19:22Z-19:28Z, bench/kf_ab.py, one library choosing by an environment
  // variable, three passes in rotating order, each value's three within 0.9), % of copy, lowest
  // of three, rows of 8200 / 9000 / 10000 / 10240, as before -> wide: f32 layer
  // norm + ReLU 76.3 / 79.7 / 82.8 / 85.8 -> 94.1 / 94.0 / 94.0 / 94.1, RMS norm 80.9 / 84.7 /
  // 87.7 / 89.3 -> 95.2 / 95.1 / 94.9 / 95.3; RMS norm f16 82.3 / 84.2 / 86.7 / 88.9 -> 87.8 /
  // 86.9 / 86.5 / 89.5, bf16 81.0 / 82.3 / 84.9 / 87.1 -> 87.6 / 86.7 / 86.0 / 88.6. The 16-bit
  // layer norm's wide forms (staged at 40 elements below; f16 rows of 8961..10240 on 320 at 32)
  // moved f16 rows of 8200 80.3 -> 76.4 and 9000 80.4 -> 83.8, and are not taken here. Rows of
  // 11000 and 12288 moved within 0.4, the RMS norm with a residual (no form changed) within its
  // noise of 1.7. Float64 checks of every row `ok`.
  const int64_t wide_n = p.walk.row_length;
  const bool wide_8k = wide_n > 8192 && wide_n <= 320 * 32 &&
                       (sizeof(S) == 4 || (sizeof(S) == 2 && p.kind == Kind::rms));
  const bool wide_form = p.residual.data == nullptr && (rows::tile_issue_lean(device) || wide_8k);
  // 16-bit rows of 769..1024 without a residual, where the SMs are not rows::tile_issue_lean:
  // a 128-thread block a row at 8 elements a thread (62 registers, eight blocks per SM) instead
  // of with_tile_policy's warp a row at 32 (114-126 registers, two 256-thread blocks per SM).
  // H100 A/B (2026-11-27 14:57Z, kf-bench, same call, two passes), rows of 1024, % of copy,
  // warp -> block: layer norm f16 86.3 / 86.4 -> 87.8 / 87.9, bf16 83.4 / 83.3 -> 86.0 / 86.0;
  // RMS norm f16 87.9 / 88.1 -> 89.8 / 90.5, bf16 86.0 / 85.8 -> 89.8 / 90.3; the other rows
  // within noise. Not measured on an H200, which keeps the warp a row.
  if constexpr (sizeof(S) == 2 && V == 8) {
    const int64_t n = p.walk.row_length;
    if (!p.residual.data && n > 768 && n <= 1024 && !rows::tile_issue_lean(device)) {
      using P = rows::TilePolicy<128, 1, 8, 128>;
      rows::launch_common_tile_kernel<P, S, CommonCached<P, S>>(p, p.walk.rows, device, stream);
      return true;
    }
  }
  // The RMS norm's 16-bit rows of 5121..6144 of 16-byte vectors in the wide form: a block of 384
  // threads at 16 elements a thread, compiled for three blocks an SM (56 registers; the bf16
  // kernel keeps 16 bytes of stack), instead of with_tile_policy's 256 at 24 (two blocks an SM:
  // 512 threads where this holds 1152). H200 A/B (2026-12-04 15:30Z, kf-bench, one library
  // choosing the policy by an environment variable, same call, two passes), % of copy, rows of
  // 5128 / 5632 / 6144, 256 at 24 -> 384 at 16: f16 80.2 / 84.4 / 86.4 -> 89.6 / 90.9 / 86.4,
  // bf16 78.8 / 82.9 / 85.2 -> 87.9 / 90.1 / 87.3; compiled for two blocks an SM (72-80
  // registers) it gained at most 1.2. The layer norm lost 3.4 to 5.6 points with it (its
  // second pass over the row and the affine's bias) and keeps 256 at 24.
  if constexpr (sizeof(S) == 2 && V == 8) {
    const int64_t n = p.walk.row_length;
    if (wide_form && p.kind == Kind::rms && n > 320 * 16 && n <= 384 * 16) {
      using P = rows::TilePolicy<384, 2, 8, 384>;
      rows::launch_common_tile_kernel<P, S, CommonCached<P, S, 3>>(p, p.walk.rows, device, stream);
      return true;
    }
  }
  // The layer norm's bf16 rows of 6145..8192 without a residual, where the SMs are
  // rows::tile_issue_lean: a 256-thread block a row at 32 elements a thread with the affine in
  // word pairs (LayerAffinePairs, as for the rows of 2049..4096 in the wide form) instead of
  // with_tile_policy's 512 threads at 16. H200 A/B (2026-11-29 12:52Z, kf-bench, the library
  // before this launch against the one with it, same call, two passes), layer norm bf16, % of
  // copy: rows of 8192 72.9 / 72.9 -> 85.7 / 85.6, of 6200 57.6 / 57.6 -> 73.8 / 73.6. Only
  // here: taken by every family (11:49Z), the same policy cost the softmax, the RMS norm and the
  // f16 layer norm 0.5-2.2 points at 8192 (RMS norm f16 90.4 -> 88.2), and at 6144 it lost to
  // the 24-element policy (layer norm bf16 73.2 against 76.9).
  if constexpr (std::is_same_v<S, math::bfloat16_t> && V == 8) {
    const int64_t n = p.walk.row_length;
    if (wide_form && p.kind == Kind::layer && n > 256 * 24 && n <= 256 * 32) {
      using P = rows::TilePolicy<256, 4, 8, 256>;
      static_assert(layer_takes_affine_pairs<P, S>(), "the affine in word pairs");
      rows::launch_common_tile_kernel<P, S, LayerAffinePairs<P, S>>(p, p.walk.rows, device, stream,
                                                                    cached_max_blocks<P, S>());
      return true;
    }
  }
  // The layer norm's 16-bit rows of 16-byte vectors in the wide form at 40 or 48 elements a
  // thread, the next row staged in shared memory (rows::tile_prefetches_shared: five or six
  // vectors a thread are more than the registers that hold a row ahead), bf16's weight and bias
  // widened in word pairs (LayerAffinePairs): rows of 4097..5120 on 128 threads (four blocks an
  // SM), 5121..6144 on 160 (three), 8193..8960 on 224 (two), bf16 rows of 8961..10240 on 256
  // (two); at 48, rows of 10241..10752 on 224 and 10753..12288 on 256 (two). They took 320
  // threads at 16, 256 at 24, 320 at 32 and 512 at 24 (with_tile_policy), the next row held in
  // registers. ptxas (sm_90): 119-128 registers, no stack. H200 A/Bs (2026-12-04, kf-bench, one
  // library choosing the form by an environment variable, same call, two passes, best of two),
  // layer norm + ReLU, % of copy:
  //  - 19:13Z, bf16 rows of 4104 / 4608 / 5120: 63.3 / 70.1 / 76.8 -> 76.4 / 85.2 / 86.4; of
  //    5128 / 5632 / 6144: 71.7 / 77.2 / 80.0 -> 74.0 / 82.6 / 85.9 (128 threads at 48 instead:
  //    74.2 / 82.7 / 80.3). 192 threads at 40 for rows of 6145..7680 moved rows of 6200 / 7168 /
  //    7680 within 0.3, so those keep 256 at 32 above.
  //  - 19:22Z, f16: rows of 4104 / 4608 / 5120 69.2 / 76.8 / 83.8 -> 77.3 / 86.5 / 85.3, of 5128
  //    / 5632 / 6144 76.2 / 80.3 / 82.4 -> 75.6 / 84.5 / 87.1.
  //  - 19:01Z, rows of 8200 / 9000 / 10000 / 10240 on 256 at 40: bf16 56.1 / 59.7 / 63.2 / 64.7
  //    -> 71.7 / 77.6 / 84.3 / 86.4; f16 77.2 / 80.6 / 82.8 / 86.0 -> 72.2 / 77.6 / 84.9 / 87.3,
  //    so f16 keeps 320 at 32. The same 320 at 32 compiled for one block an SM (no spills) read
  //    bf16 60.8 / 65.8 / 71.6 / 73.0.
  //  - 19:13Z, rows of 10248 / 11000 / 12288 on 256 at 48: bf16 62.9 / 65.9 / 72.2 -> 71.3 /
  //    75.5 / 82.3, f16 70.7 / 73.7 / 79.2 -> 71.2 / 75.3 / 83.3. The RMS norm moved within 0.8
  //    either way and keeps 512 at 24; the softmax lost with it (19:22Z, rows of 12288 f16 84.1
  //    -> 76.2, bf16 81.6 -> 77.1).
  //  - 19:58Z, 224 threads (fewer slots past the row's end), rows of 8200 / 8704 / 8960 at 40
  //    (against 256 at 40 for bf16, 320 at 32 for f16) and of 10248 / 10752 at 48 (against 256):
  //    bf16 71.3 / 78.6 / 82.7 and 71.3 / 79.7 -> 77.6 / 83.8 / 84.6 and 75.6 / 83.5, f16 77.3 /
  //    82.8 / 83.4 and 71.5 / 79.8 -> 78.3 / 84.9 / 84.6 and 76.4 / 83.9. 96 threads at 48 for
  //    rows of 4097..4608 lost 0.3 to 1.9 (rows of 4352 / 4608, bf16 84.0 / 85.2 -> 83.0 /
  //    84.2) but for f16 rows of 4104 (+0.8), and is not taken.
  //
  // The RMS norm's 16-bit rows of 10241..10752 take the same staged 224 threads at 48 (the common
  // build), instead of with_tile_policy's 512 at 24 (one block an SM); cuobjdump on the GPU: 128
  // registers (bf16 127), no stack. H200 A/B (2026-12-04 21:04Z-21:07Z, kf-bench `--filter
  // rms_norm`, one library choosing the policy by an environment variable, same call, two passes,
  // every row checked `ok`), % of copy, best of two, rows of 10248 / 10752, 512 at 24 -> 224 at
  // 48: f16 78.2 / 80.7 -> 82.7 / 86.6, bf16 77.2 / 79.4 -> 82.1 / 85.5; the rows with a residual
  // (other policies) within 0.6. (256 at 48 for its rows of 10241..12288 had moved them within
  // 0.8.)
  if constexpr (sizeof(S) == 2 && V == 8) {
    const int64_t n = p.walk.row_length;
    // Launches `policy` with the next row staged: the layer norm's build (bf16: the affine in
    // word pairs, LayerAffinePairs) where `layer` is std::true_type, else the common one.
    const auto staged = [&](auto policy, auto layer) {
      using P = decltype(policy);
      static_assert(rows::tile_prefetches_shared<P, S>(), "the next row staged");
      using F = std::conditional_t<decltype(layer)::value && rows::pairs_widen<P, S>(),
                                   LayerAffinePairs<P, S>, CommonCached<P, S>>;
      rows::launch_common_tile_kernel<P, S, F>(p, p.walk.rows, device, stream);
      return true;
    };
    if (wide_form && p.kind == Kind::layer) {
      constexpr std::true_type kLayer;
      constexpr bool kBf16 = std::is_same_v<S, math::bfloat16_t>;
      if (n > 4096 && n <= 128 * 40) return staged(rows::TilePolicy<128, 5, 8, 128>{}, kLayer);
      if (n > 128 * 40 && n <= 6144) return staged(rows::TilePolicy<160, 5, 8, 160>{}, kLayer);
      if (n > 8192 && n <= 224 * 40) return staged(rows::TilePolicy<224, 5, 8, 224>{}, kLayer);
      if (kBf16 && n > 224 * 40 && n <= 256 * 40)
        return staged(rows::TilePolicy<256, 5, 8, 256>{}, kLayer);
      if (n > 256 * 40 && n <= 224 * 48) return staged(rows::TilePolicy<224, 6, 8, 224>{}, kLayer);
      if (n > 224 * 48 && n <= 256 * 48) return staged(rows::TilePolicy<256, 6, 8, 256>{}, kLayer);
    }
    if (wide_form && p.kind == Kind::rms && n > 256 * 40 && n <= 224 * 48)
      return staged(rows::TilePolicy<224, 6, 8, 224>{}, std::false_type{});
  }
  // bf16 rows of 2049..2560 of 16-byte vectors keep the 32-element form (with_tile_policy).
  const bool fill_2560 = !(std::is_same_v<S, math::bfloat16_t> && V == 8);
  // 16-bit rows of 4097..5120 in the wide form take 320 threads at 16 elements, f32 rows of
  // 8193..10240 320 at 32 (kNorm).
  const int64_t length = p.walk.row_length;
  return rows::with_tile_policy<S, V, true>(length, wide_form, fill_2560, [&](auto policy) {
    using P = decltype(policy);
    if (p.residual.data) {
      if constexpr (residual_takes_three_blocks<P, S>()) {
        if (!rows::tile_issue_lean(device)) {
          rows::launch_tile_kernel<P, S, cached_kernel<P, S, true, true, 3>>(
              p, p.walk.rows, device, stream, false, cached_max_blocks<P, S>());
          return;
        }
      }
      rows::launch_tile_kernel<P, S, cached_kernel<P, S, true>>(
          p, p.walk.rows, device, stream, false,
          rows::tile_issue_lean(device) ? residual_lean_max_blocks<P, S>()
                                        : cached_max_blocks<P, S>());
    } else {
      if constexpr (layer_takes_shared_affine<P, S>()) {
        if (p.kind == Kind::layer && p.weight.data && p.bias.data &&
            rows::tile_issue_lean(device)) {
          using F = LayerSharedAffine<P, S>;
          rows::launch_common_tile_kernel<P, S, F>(p, p.walk.rows, device, stream, 0, F::smem);
          return;
        }
      }
      // Where the SMs are not rows::tile_issue_lean, only the bf16 rows of 33..64 (four lanes a
      // row at 16 elements a lane) take this build. H100 A/B (2026-12-06 04:37Z-04:44Z,
      // kf-bench, one library choosing the build by an environment variable, same call, two
      // passes each), layer norm + ReLU, 1048576 rows of 64, % of copy: element by element 84.9 /
      // 85.1 -> pairs 86.8 / 86.8; two lanes at 32 elements lost (81.4 / 81.4, f16 87.5 / 87.4 ->
      // 84.5 / 84.5). f16 has no pairs build.
      if constexpr (layer_takes_pairs<P, S>()) {
        constexpr bool kRows64 = std::is_same_v<P, rows::TilePolicy<4, 2, 8, 256>>;
        if (p.kind == Kind::layer && (kRows64 || rows::tile_issue_lean(device))) {
          rows::launch_common_tile_kernel<P, S, LayerPairs<P, S>>(p, p.walk.rows, device, stream,
                                                                  cached_max_blocks<P, S>());
          return;
        }
      }
      if constexpr (layer_takes_affine_pairs<P, S>()) {
        if (p.kind == Kind::layer && rows::tile_issue_lean(device)) {
          rows::launch_common_tile_kernel<P, S, LayerAffinePairs<P, S>>(
              p, p.walk.rows, device, stream, cached_max_blocks<P, S>());
          return;
        }
      }
      if constexpr (rows::tile_lean_blocks<P, S>() > 0) {
        if (rows::tile_issue_lean(device)) {
          rows::launch_common_tile_kernel<P, S, CommonCached<P, S, rows::tile_lean_blocks<P, S>()>>(
              p, p.walk.rows, device, stream);
          return;
        }
      }
      // The layer norm's f32 rows of 10241..12288 (512 threads at 24 elements a thread; its rows
      // of 8193..10240 take 320 at 32 in the wide form since 2026-12-06 19:28Z, wide_form above)
      // stage the next row in shared memory on every device (always_stage), though
      // rows::tile_stages_rows keeps the H100's other rows in place. H100 A/B (2026-12-06
      // 17:34Z-17:37Z, bench/kf_ab.py, one library choosing by an environment variable, three
      // passes in rotating order), f32, % of copy, lowest of three, in place -> staged, rows of
      // 8200 / 9000 / 10000 / 10240 / 11000 / 12288: layer norm + ReLU 69.4 / 73.4 / 78.2 / 79.3
      // / 82.2 / 87.3 -> 76.9 / 79.9 / 83.2 / 86.1 / 85.6 / 87.4. The RMS norm lost 0.9 to 3.5
      // points with it (93.3-93.4 -> 89.9-90.3 at 12288) and keeps its rows in place; the forms
      // with a residual do not stage.
      constexpr bool kF32Rows24 = std::is_same_v<S, float> && P::threads == 512 && P::items == 24;
      rows::launch_common_tile_kernel<P, S, CommonCached<P, S>>(
          p, p.walk.rows, device, stream, cached_max_blocks<P, S>(), 0,
          kF32Rows24 && p.kind == Kind::layer);
    }
  });
}

// launch_cached for rows::cached_launcher.
template <class S>
struct Cached {
  template <int V>
  static bool launch(const Plan& p, int32_t device, cudaStream_t stream) {
    return launch_cached<S, V>(p, device, stream);
  }
};

template <class S>
void launch(const Plan& p, int32_t device, cudaStream_t stream) {
  static_assert(StreamVectorPolicy<S>::threads == StreamPolicy<S, false>::threads &&
                StreamPolicy<S, true>::threads == StreamPolicy<S, false>::threads);
  const int bytes = rows::row_vector_bytes(
      p.walk, {&p.x, &p.residual, &p.weight, &p.bias, &p.out, &p.residual_out}, sizeof(S));
  // The streaming vector form's condition: every row operand in x's phase, row by row.
  bool in_phase = true;
  for (const rows::Operand* o : {&p.residual, &p.out, &p.residual_out})
    in_phase = in_phase && rows::rows_in_phase(p.walk, p.x, *o, sizeof(S));
  rows::launch_in_order<S, Cached<S>>(
      p, bytes, in_phase, device, stream, &launch_staged<S>,
      [](auto s, int b) { return narrow_cached_launcher(s, b); },
      {&streaming_kernel<StreamPolicy<S, false>, S, false>,
       &streaming_vector_kernel<StreamVectorPolicy<S>, S>,
       &streaming_kernel<StreamPolicy<S, true>, S, true>, StreamPolicy<S, false>::threads},
      "norm kernel launch", &launch_shifted<S>);
}

}  // namespace
}  // namespace kf::norm
