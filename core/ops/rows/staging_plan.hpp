// The host-side plan of the shared-memory staged rows (core/ops/rows/staged.cuh): the tuning
// numbers (StagedPolicy), the per-launch plan passed to the kernels (Staging) and plan_staging,
// which picks a regime for a row length. Plain C++, so that tests/ops/staging_plan_test.cpp
// checks the planning on the host.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kf::rows {

struct StagedPolicy {
  static constexpr int threads = 256;
  static constexpr int64_t tile_bytes = 16 * 1024;          // staged per buffer for short rows
  static constexpr int64_t group_row_bytes = 6 * 1024;      // longest row a warp (or less) takes
  static constexpr int64_t slice_bytes = 64 * 1024;         // staged per block for long rows
  static constexpr int64_t large_slice_bytes = 128 * 1024;  // when 64 KiB slices need > max
  // Rows of one operand (no residual) longer than this, up to slice_bytes, are staged by one
  // block in one buffer, rolling (for_each_tile: each thread restages its slots of the next row
  // as soon as it is done with them), not in two: two buffers of 32..64 KiB leave one or two
  // blocks an SM (228 KiB of shared memory on sm_90), one buffer three (the staged kernels'
  // register bound), so that an SM has more rows' bytes in flight. kf-bench on an H200
  // (2026-12-02, same calls, two passes each), 16-bit rows, % of copy, f16 / bf16:
  //  - two buffers -> a cluster of two blocks of 32 KiB slices, one rolling buffer each (04:09Z):
  //    rows of 32000, softmax 64.6 / 62.4 -> 74.5 / 72.0, layer norm 49.2 / 46.2 -> 62.5 / 57.4;
  //    rows of 20000 lost 9..18 points (softmax f16 80.0 -> 69.3, RMS norm 75.3 -> 57.4);
  //  - that cluster -> one block, one rolling buffer (04:41Z): rows of 32000, softmax 74.6 / 72.4
  //    -> 77.9 / 75.4, layer norm 62.2 / 57.4 -> 68.1 / 67.8, RMS norm 69.6 / 69.7 -> 71.4 /
  //    70.4; the shifted rows of 30522, softmax 59.0 / 56.7 -> 66.9 / 63.6, layer norm 36.3 /
  //    35.9 -> 42.4 / 41.8, RMS norm 49.2 / 49.4 -> 56.0 / 54.2;
  //  - two buffers -> one rolling buffer (04:41Z): rows of 24000, softmax 78.7 / 75.3 -> 80.7 /
  //    77.4, layer norm 62.4 / 61.4 -> 74.8 / 68.2, RMS norm 70.1 / 68.9 -> 75.6 / 81.2; rows of
  //    20000, softmax 79.6 / 75.6 -> 78.9 / 77.8, layer norm 61.5 / 60.9 -> 70.9 / 66.6, RMS
  //    norm 75.0 / 73.1 -> 76.0 / 78.4.
  // Shorter rows keep two buffers: the f32 rows of 16..32 KiB that are staged (the norms' 4097..
  // 8192) were not measured rolling.
  static constexpr int64_t rolling_row_bytes = 32 * 1024;
  static constexpr int max_portable_cluster = 8;
  static constexpr int max_cluster = 16;  // non-portable; used when the device can hold one
  // Whether the clustered kernels of storage type S restage the next row inside the output pass
  // (for_each_tile's kInPass; measured there) on every device: f32 rows gained; 16-bit ones lost
  // on the H200, and on the H100 gained or lost by family, so the families that gain there take
  // an in-pass build of their 16-bit kernels where the SMs are not tile_issue_lean (see the
  // softmax and the RMS norm).
  template <class S>
  static constexpr bool restages_in_pass() {
    return sizeof(S) == 4;
  }
};

// How one launch stages its rows (host-computed, passed to the kernel by value).
struct Staging {
  int group = 1;             // threads per row: 1..32 (a power of two) or StagedPolicy::threads
  int rows_per_tile = 1;     // rows a block stages at once
  int cluster = 1;           // blocks per row (> 1: a cluster launch)
  int64_t slice = 0;         // a row's elements per block (the whole row when cluster == 1)
  int buffers = 1;           // 2: the next tile is staged while the current one is computed
  bool rolling = false;      // one buffer, refilled by each thread as it finishes its slots
  int64_t buffer_elems = 0;  // elements of one buffer (every staged operand's tile)
  int resident = 0;          // clustered: per-column operands (a weight) staged once, after
                             // the buffers, a slice each
  size_t smem = 0;           // dynamic shared memory per block
  unsigned grid = 0;
};

// Plans staging for `rows` rows of n elements of `element_bytes` each, with `inputs` row
// operands staged (x, and a residual). max_cluster: the largest cluster the kernel may use (1
// where clusters are not available). resident: per-column operands (of n elements, the same
// for every row) the clustered kernel would keep in shared memory; as many of them as fit
// 64 KiB slices in max_cluster blocks are planned (Staging::resident), none where none fits.
// max_large_cluster: the largest cluster of 128 KiB slices (one block an SM) the kernel may use,
// within max_cluster. Returns false when the rows cannot be staged: the length does not fill
// whole 16-byte vectors, or a row needs more slices than those limits allow.
inline bool plan_staging(int64_t rows, int64_t n, int element_bytes, int inputs, int max_cluster,
                         Staging* s, int resident = 0,
                         int max_large_cluster = StagedPolicy::max_portable_cluster) {
  using P = StagedPolicy;
  const int64_t vec = 16 / element_bytes;
  if (n % vec != 0) return false;
  const int64_t row_bytes = n * element_bytes * inputs;
  Staging g;
  if (row_bytes <= P::slice_bytes) {
    g.slice = n;
    g.rows_per_tile = static_cast<int>(row_bytes < P::tile_bytes ? P::tile_bytes / row_bytes : 1);
    if (row_bytes <= P::group_row_bytes) {
      // Enough lanes per row that one pass of the block's groups covers the tile (fewer,
      // shorter shuffle trees and more rows in flight than a warp per row).
      const int64_t vectors = n / vec;
      g.group = 1;
      while (g.group < 32 && g.group < vectors &&
             int64_t{g.group} * 2 * g.rows_per_tile <= P::threads)
        g.group *= 2;
    } else {
      g.group = P::threads;
    }
    g.buffers = 2;
    if (inputs == 1 && row_bytes > P::rolling_row_bytes) {  // one row a tile (> tile_bytes)
      g.buffers = 1;
      g.rolling = true;
    }
    const int64_t tiles = (rows + g.rows_per_tile - 1) / g.rows_per_tile;
    g.grid = static_cast<unsigned>(tiles < (int64_t{1} << 20) ? tiles : (int64_t{1} << 20));
  } else {
    int64_t budget = P::slice_bytes;
    int64_t blocks = (row_bytes + budget - 1) / budget;
    int64_t limit = max_cluster;
    for (int k = resident; k > 0; --k) {
      const int64_t with = (n * element_bytes * (inputs + k) + budget - 1) / budget;
      if (with <= limit) {
        blocks = with;
        g.resident = k;
        break;
      }
    }
    if (blocks > limit) {  // 128 KiB slices (one block per SM), in max_large_cluster blocks
      budget = P::large_slice_bytes;
      blocks = (row_bytes + budget - 1) / budget;
      limit = limit < max_large_cluster ? limit : max_large_cluster;
    }
    if (blocks > limit || blocks < 2) return false;
    const int64_t per_block = (n + blocks - 1) / blocks;
    g.slice = (per_block + vec - 1) / vec * vec;
    g.cluster = static_cast<int>((n + g.slice - 1) / g.slice);  // no empty slices
    g.group = P::threads;
    g.rolling = true;
    const int64_t units = rows < (int64_t{1} << 20) ? rows : (int64_t{1} << 20);
    g.grid = static_cast<unsigned>(units * g.cluster);
  }
  g.buffer_elems = g.rows_per_tile * g.slice * inputs;
  g.smem = static_cast<size_t>((g.buffer_elems * g.buffers + g.resident * g.slice) * element_bytes);
  *s = g;
  return true;
}

}  // namespace kf::rows
