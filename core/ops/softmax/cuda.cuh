// CUDA backend of the softmax family, four regimes chosen per call:
//  - dense, 16-byte aligned f32/f16/bf16 rows longer than the cached kernels hold (16384
//    elements): staged rows (core/ops/rows/staged.cuh), a slice of a row per block, or past
//    64 KiB a thread-block cluster per row (sm_90), each block holding a slice of x in shared
//    memory and the row's maximum and sum of exp combined through distributed shared memory, so
//    x is read from DRAM once; rows without a mask longer than the clusters hold, and on the
//    H100 some that they hold (cuda_staged.cuh, grid_before_clusters), over a group of blocks of
//    a cooperative grid (cuda_grid.cuh), which exchange their partials through global memory;
//  - rows of up to 1024 elements: a few lanes or a warp per row, several rows per block;
//  - rows of up to 16K elements (8K for f64): a block per row;
//    both hold the row's logits in registers (core/ops/rows/tile.cuh), so x (and the mask) are
//    read from DRAM once, in the widest loads of 16, 8 or 4 bytes that every row start is
//    aligned to and the row's bytes fill (rows::row_vector_bytes), else one element a load; max
//    and sum of exp are then exact two-pass reductions over the registers; 16-bit rows run on a
//    resident grid that issues the next row's loads of x before working on the current row
//    (rows::tile_prefetches);
//  - everything else (strided or row-broadcast operands, longer rows off 16-byte vectors): the
//    streaming path, one block per row over global memory (pass 1: max and sum of exp; pass 2:
//    write), which reads x twice; dense rows without a mask in 16-byte vectors from each row's
//    first 16-byte boundary (streaming_vector_kernel). Each thread touches the same columns in
//    both passes, which keeps the in-place form safe (in the cached paths every load of a row
//    precedes its stores, by the same thread).
// The kernels live in the headers this one includes, one a regime (cuda_streaming.cuh,
// cuda_cached.cuh, cuda_grid.cuh, cuda_staged.cuh, each with its launch but the cached one's;
// cuda_row_exp.cuh holds the exponentials three of them share); this header chooses among them
// (launch_cached, launch). Only the family's per-storage-type translation units include it
// (cuda_f32.cu, cuda_f16.cu, cuda_bf16.cu, cuda_f64.cu, and for 16-bit rows narrower than 16-byte
// vectors cuda_f16_narrow.cu and cuda_bf16_narrow.cu): each instantiates them for one type (and
// width), so they compile in parallel; cuda.cu dispatches.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "core/math/numeric.hpp"
#include "core/ops/rows/dispatch.cuh"
#include "core/ops/rows/tile.cuh"
#include "core/ops/softmax/cuda_cached.cuh"
#include "core/ops/softmax/cuda_grid.cuh"
#include "core/ops/softmax/cuda_staged.cuh"
#include "core/ops/softmax/cuda_storage.hpp"
#include "core/ops/softmax/cuda_streaming.cuh"
#include "core/ops/softmax/softmax.hpp"

namespace kf::softmax {
namespace {

// The lean builds of the common form (rows::tile_lean_blocks, as the norms': the 16-bit rows of
// 4097..8192 at two blocks an SM, measured within 0.3 of one, as their kernels fit two already).
// The four-block build: the rows of up to 512 took 80 registers (three blocks) and take 64 for
// four; the block a row of 2049..4096 already took 64. H200 A/B (2026-11-29 09:12Z, kf-bench, one
// library with both builds, same call, two passes), f32, % of copy, three blocks -> four: rows of
// 64 92.2 / 92.3 -> 92.9 / 93.1, of 256 92.4 / 92.2 -> 93.8 / 93.8, of 4096 93.2 / 93.2 -> 93.4
// / 93.6 (rows of 1024, another policy: 93.7 / 93.6 -> 93.7 / 93.7).
//
// The common form's kernels, for rows::launch_common_tile_kernel (kBlocks: the resident blocks
// an SM it is compiled for, 0 for rows::tile_min_blocks).
template <class P, class S, int kBlocks = 0>
struct CommonCached {
  template <bool kStage>
  static constexpr auto kernel = cached_kernel<P, S, false, kStage, kBlocks>;
};

template <class S, int V>
bool launch_cached(const Plan& p, int32_t device, cudaStream_t stream) {
  if (p.walk.rows >= rows::kMaxColdRows) return false;  // row offsets in 32 bits (rows.hpp)
  // f32 rows of 10241..12288 without a mask, where the SMs are rows::tile_issue_lean, keep the
  // 512-thread policy at 32 elements a thread, where the other row kernels take 24
  // (rows::with_tile_policy). H200 A/B
  // (2026-11-29 20:49Z, kf-bench, HEAD's library against the one with the 24-element policy,
  // same call, two passes), f32 softmax, % of copy, rows of 8200 / 10240 / 12288: 73.3 / 84.8 /
  // 86.4 -> 82.7 / 87.7 / 82.2 (82.5 / 87.8 / 81.8). Where between 10240 and 12288 the two
  // cross was not measured.
  // These rows, and the f32 rows of 8193..10240 (512 threads at 24, below), stage the next row in
  // shared memory on every device (always_stage), though rows::tile_stages_rows keeps the H100's
  // f32 rows of 12289..16384 (the same policy as here) in place. H100 A/B (2026-12-06
  // 17:34Z-17:37Z, bench/kf_ab.py, one library choosing by an environment variable, three passes
  // in rotating order, each value's three within 1 point), f32, % of copy, lowest of three, in
  // place -> staged, rows of 8200 / 9000 / 10000 / 10240 / 11000 / 12288: softmax 70.1 / 73.6 /
  // 78.7 / 79.8 / 78.6 / 84.1 -> 89.6 / 86.3 / 85.0 / 87.4 / 82.7 / 85.3, log-softmax 69.2 /
  // 72.9 / 77.9 / 78.9 / 78.0 / 83.5 -> 89.1 / 86.2 / 84.9 / 87.1 / 82.7 / 85.1; rows of 14336 /
  // 16384 staged lost 0.2 to 3.2 (softmax 92.0-92.1 -> 88.9-89.6). Float64 checks of the staged
  // rows (`--large-mib 16`) all `ok`.
  // Elsewhere (the H100) the rows of 10241..12288 take with_tile_policy's 24 elements, staged
  // (always_stage below). H100 A/B (2026-12-06 19:28Z, bench/kf_ab.py as above, three passes,
  // each value's three within 0.8), % of copy, lowest of three, rows of 10248 / 11000 / 11500 /
  // 12288, 32 elements staged -> 24 staged: softmax 83.2 / 82.3 / 85.4 / 85.0 -> 85.0 / 84.1 /
  // 86.2 / 87.3, log-softmax 82.9 / 81.8 / 85.6 / 84.8 -> 84.7 / 84.3 / 86.2 / 87.3. Float64
  // checks of the rows of 10248 / 11000 / 12288 `ok`.
  if constexpr (std::is_same_v<S, float> && V == 4) {
    const int64_t n = p.walk.row_length;
    if (!p.mask.data && n > 512 * 20 && n <= 512 * 24 && rows::tile_issue_lean(device)) {
      using P = rows::TilePolicy<512, 8, V, 512>;
      rows::launch_common_tile_kernel<P, S, CommonCached<P, S>>(p, p.walk.rows, device, stream, 0,
                                                                0, /*always_stage=*/true);
      return true;
    }
  }
  // f32 rows of 4609..5120 of 16-byte vectors without a mask, where the SMs are
  // rows::tile_issue_lean: 320 threads at 16 elements a thread, three blocks an SM, instead of
  // with_tile_policy's 256 at 24, two blocks an SM. H200 A/B (2026-12-04 14:12Z, kf-bench, one
  // library choosing the policy by an environment variable, same call, two passes), % of copy,
  // rows of 4104 / 4608 / 5000 / 5120: softmax 86.4 / 87.8 / 84.3 / 83.4 -> 82.9 / 87.8 / 88.7 /
  // 90.6, log-softmax 86.0 / 87.9 / 85.8 / 83.5 -> 82.1 / 87.0 / 87.8 / 89.5; so rows up to 4608
  // keep 256 at 24. (The 16-bit rows lost with it: rows::with_tile_policy.) Not measured on an
  // H100.
  if constexpr (std::is_same_v<S, float> && V == 4) {
    const int64_t n = p.walk.row_length;
    if (!p.mask.data && n > 4608 && n <= 5120 && rows::tile_issue_lean(device)) {
      using P = rows::TilePolicy<320, 4, V, 320>;
      rows::launch_common_tile_kernel<P, S, CommonCached<P, S>>(p, p.walk.rows, device, stream);
      return true;
    }
  }
  // 16-bit rows of 33..64 of 16-byte vectors without a mask, where the SMs are
  // rows::tile_issue_lean: two lanes a row at 32 elements a lane instead of with_tile_policy's
  // four at 16. H200 A/B (2026-12-01 12:14Z-12:15Z, kf-bench `--filter softmax --lengths 64,1024`,
  // one library choosing the policy by an environment variable, same call, three passes), % of
  // copy, rows of 64, four lanes -> two: f16 88.1 / 87.8 / 87.6 -> 89.7 / 90.3 / 89.8, bf16 89.0 /
  // 87.7 / 89.8 -> 89.6 / 90.1 / 90.0; eight lanes at 8 elements lost (f16 78.6-78.9, bf16
  // 75.7-75.9); rows of 1024 and the f32 rows within 0.4 throughout. Not measured on an H100,
  // which keeps four lanes.
  if constexpr (sizeof(S) == 2 && V == 8) {
    const int64_t n = p.walk.row_length;
    if (!p.mask.data && n > 32 && n <= 64 && rows::tile_issue_lean(device)) {
      using P = rows::TilePolicy<2, 4, V, 256>;
      rows::launch_common_tile_kernel<P, S, CommonCached<P, S>>(p, p.walk.rows, device, stream);
      return true;
    }
  }
  const bool wide = p.mask.data == nullptr;
  // fill_2560 = wide: every softmax row of the wide form takes the 160-thread policy for 16-bit
  // rows of 2049..2560 (only the bf16 norms keep the 96-thread one; with_tile_policy).
  return rows::with_tile_policy<S, V, false>(p.walk.row_length, wide, wide, [&](auto policy) {
    using P = decltype(policy);
    if (p.mask.data) {
      // The 16-bit rows of 16-byte vectors that prefetch (rows::tile_prefetches) at up to 16
      // elements a thread are compiled for the blocks an SM that 72 registers a thread allow
      // (128-thread blocks: 7, 256: 3), where they would take 84-88 and lose a third of their
      // warps (no spills either way; narrower vectors would spill under that bound).
      // So are the f32 rows of 1537..2048 of 16-byte vectors (128 threads at 16 elements a
      // thread, seven blocks): ptxas sm_90, 77 registers -> 72, no spills (64 for eight blocks,
      // with 32 / 48 bytes of spill stores / loads). H100 A/B (2026-12-06 04:37Z-04:44Z, kf-bench,
      // one library choosing the bound by an environment variable, same call, two passes each), f32
      // 11 x 2048 x 2048 with a mask and causal, % of copy: unbounded 86.6 / 86.4, seven blocks
      // 88.8 / 88.7, eight 81.2 / 81.1. Not measured on an H200.
      constexpr bool kF32Rows2048 = std::is_same_v<S, float> && P::vec == 4 && P::threads == 128 &&
                                    P::items == 16 && P::group == 128;
      constexpr int kMaskedBlocks =
          (sizeof(S) == 2 && P::vec * sizeof(S) == 16 && rows::tile_prefetches<P, S>() &&
           P::items <= 16 && P::threads <= 256) ||
                  kF32Rows2048
              ? 64 * 1024 / (72 * P::threads)
              : 0;
      rows::launch_tile_kernel<P, S, cached_kernel<P, S, true, true, kMaskedBlocks>>(
          p, p.walk.rows, device, stream, false);
    } else {
      // 16-bit rows of 16-byte vectors over 512 threads at 24 or 32 elements a thread (rows of
      // 8193..16384) where the device gains from staging (rows::tile_stages_rows): three rows
      // staged ahead in shared memory (96 KiB at 32 elements) in place of the next row's loads
      // held in registers. H200 A/B (2026-11-30 15:59Z-16:08Z, kf-bench, one library choosing
      // the depth by an environment variable, same call, two passes each), % of copy, f16 / bf16
      // rows of 12288: 79.3 / 79.1 -> 82.0 / 81.9 and 77.8 / 77.8 -> 79.8 / 79.5; of 16384: 84.1
      // / 83.8 -> 84.9 / 85.4 and 83.5 / 83.4 -> 84.1 / 83.9; of 8200: 61.1 / 61.1 -> 60.2 /
      // 60.1 and 58.5 / 58.5 -> 58.6 / 58.5. One row staged ahead moved them by -0.5 to +0.1,
      // two by +0.3 to +1.7. The 16-bit norms lost 2 to 9 points with three (RMS norm rows of
      // 16384 88.0 -> 79.1), as did the 128-thread wide form (16-bit softmax rows of 3000 and 4096
      // 87 -> 77), so they keep the prefetch in registers. The committed form (16:32Z, 4b32072's
      // library against this one, same call, two passes), f16 / bf16 rows of 16384 / 12288 /
      // 8200: 84.4 -> 85.2-85.4 / 79.6-79.7 -> 81.7-81.8 / 60.8-60.9 -> 59.8 and 83.3 -> 82.8-83.8
      // / 77.8-77.9 -> 78.8-78.9 / 58.3 -> 57.9-58.1.
      if constexpr (sizeof(S) == 2 && rows::tile_can_stage<P, S>() && P::threads == 512) {
        if (rows::tile_stages_rows(device)) {
          rows::launch_tile_kernel<P, S, cached_kernel<P, S, false, true, 0, 3>, 3>(p, p.walk.rows,
                                                                                    device, stream);
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
      // f32 rows of 8193..10240, and of 10241..12288 where the case above leaves them (the
      // H100), stage on every device.
      constexpr bool kF32Rows24 = std::is_same_v<S, float> && P::threads == 512 && P::items == 24;
      rows::launch_common_tile_kernel<P, S, CommonCached<P, S>>(p, p.walk.rows, device, stream, 0,
                                                                0, kF32Rows24);
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
  const int bytes = rows::row_vector_bytes(p.walk, {&p.x, &p.mask, &p.out}, sizeof(S));
  // The streaming vector form where there is no mask and x's and out's rows are in phase, row by
  // row (rows whose phases differ would take it one element a load, slower than the dense
  // streaming kernel's unrolled loads).
  const bool vector_form = !p.mask.data && rows::rows_in_phase(p.walk, p.x, p.out, sizeof(S));
  rows::launch_in_order<S, Cached<S>>(
      p, bytes, vector_form, device, stream, &launch_staged<S>,
      [](auto s, int b) { return narrow_cached_launcher(s, b); },
      {&streaming_kernel<StreamPolicy<S, false>, S, false>,
       &streaming_vector_kernel<StreamVectorPolicy<S>, S>,
       &streaming_kernel<StreamPolicy<S, true>, S, true>, StreamPolicy<S, false>::threads},
      "softmax kernel launch", &launch_shifted<S>);
}

}  // namespace
}  // namespace kf::softmax
