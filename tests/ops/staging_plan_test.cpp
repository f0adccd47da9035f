// core/ops/rows/staging_plan.hpp: plan_staging, which picks how the staged norm and softmax kernels
// split rows over blocks and clusters and how much shared memory each block takes, checked on
// the host: the regimes at the lengths the benchmark and the CUDA tests use, the resident
// per-column operands (the RMS norm's weight), and invariants over a sweep of lengths.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "core/ops/rows/staging_plan.hpp"

namespace {

using kf::rows::plan_staging;
using kf::rows::StagedPolicy;
using kf::rows::Staging;

constexpr int64_t kKiB = 1024;

Staging plan(int64_t rows, int64_t n, int element_bytes, int inputs, int max_cluster,
             int resident = 0) {
  Staging g;
  EXPECT_TRUE(plan_staging(rows, n, element_bytes, inputs, max_cluster, &g, resident))
      << n << " elements of " << element_bytes << " bytes";
  return g;
}

// 16-bit rows of 262144 (512 KiB): eight 64 KiB slices, or sixteen of 32 KiB with the weight's
// slice beside each (64 KiB a block either way: three blocks per SM).
TEST(StagingPlan, LongSixteenBitRowsWithAndWithoutTheResidentWeight) {
  const Staging plain = plan(256, 262144, 2, 1, 16);
  EXPECT_EQ(plain.cluster, 8);
  EXPECT_EQ(plain.slice, 32768);
  EXPECT_EQ(plain.resident, 0);
  EXPECT_TRUE(plain.rolling);
  EXPECT_EQ(plain.buffers, 1);
  EXPECT_EQ(plain.smem, size_t{64 * kKiB});
  EXPECT_EQ(plain.grid, 256u * 8u);

  const Staging weight = plan(256, 262144, 2, 1, 16, 1);
  EXPECT_EQ(weight.cluster, 16);
  EXPECT_EQ(weight.slice, 16384);
  EXPECT_EQ(weight.resident, 1);
  EXPECT_EQ(weight.buffer_elems, 16384);
  EXPECT_EQ(weight.smem, size_t{64 * kKiB});  // 32 KiB of x, 32 KiB of weight
  EXPECT_EQ(weight.grid, 256u * 16u);

  // Weight and bias would take 24 blocks of 64 KiB: only the weight is planned resident.
  const Staging affine = plan(256, 262144, 2, 1, 16, 2);
  EXPECT_EQ(affine.resident, 1);
  EXPECT_EQ(affine.cluster, 16);
}

// Where the resident operand does not fit 64 KiB blocks in the largest cluster, the plan is the
// one without it.
TEST(StagingPlan, ResidentOperandsOnlyWhereTheyFit) {
  // f32 rows of 262144 (1 MiB) already take 16 blocks of 64 KiB.
  const Staging f32 = plan(128, 262144, 4, 1, 16, 1);
  EXPECT_EQ(f32.resident, 0);
  EXPECT_EQ(f32.cluster, 16);
  EXPECT_EQ(f32.slice, 16384);
  EXPECT_EQ(f32.smem, size_t{64 * kKiB});

  // Portable clusters only (8 blocks): the 16-bit weight does not fit either.
  const Staging portable = plan(256, 262144, 2, 1, 8, 1);
  EXPECT_EQ(portable.resident, 0);
  EXPECT_EQ(portable.cluster, 8);

  // A residual staged with x: 16-bit rows of 262144 with a residual and the weight would take
  // 24 blocks; without the weight, 16.
  const Staging residual = plan(64, 262144, 2, 2, 16, 1);
  EXPECT_EQ(residual.resident, 0);
  EXPECT_EQ(residual.cluster, 16);
  EXPECT_EQ(residual.buffer_elems, 2 * 16384);
}

// A length whose slices do not divide it: whole 16-byte vectors a slice, the last one shorter,
// no empty slice (16-bit rows of 65544, as NormTest.ManyLongRows takes them with a weight).
TEST(StagingPlan, UnevenSlices) {
  const Staging g = plan(40, 65544, 2, 1, 16, 1);
  EXPECT_EQ(g.resident, 1);
  EXPECT_EQ(g.cluster, 5);
  EXPECT_EQ(g.slice, 13112);
  EXPECT_EQ(g.slice % 8, 0);
  EXPECT_EQ(65544 - 4 * g.slice, 13096);
  EXPECT_EQ(g.smem, size_t{2 * 13112 * 2});
}

// Without clusters of 16 or 8, rows that need them take 128 KiB slices in portable clusters (or
// in clusters of up to 16 where the caller allows it), and rows that need more than the limit
// cannot be staged.
TEST(StagingPlan, LargeSlicesAndRefusals) {
  const Staging f32 = plan(128, 262144, 4, 1, 8);
  EXPECT_EQ(f32.cluster, 8);
  EXPECT_EQ(f32.slice, 32768);
  EXPECT_EQ(f32.smem, size_t{128 * kKiB});

  // Rows of 2 MiB (f32 rows of 262144 with a residual): 16 slices of 128 KiB where the device
  // holds such clusters, none in portable ones.
  Staging wide;
  EXPECT_TRUE(plan_staging(64, 262144, 4, 2, 16, &wide, 0, 16));
  EXPECT_EQ(wide.cluster, 16);
  EXPECT_EQ(wide.slice, 16384);
  EXPECT_EQ(wide.buffer_elems, 2 * 16384);
  EXPECT_EQ(wide.smem, size_t{128 * kKiB});
  EXPECT_TRUE(wide.rolling);
  EXPECT_EQ(wide.grid, 64u * 16u);
  Staging g;
  EXPECT_FALSE(plan_staging(64, 262144, 4, 2, 16, &g));             // portable clusters only
  EXPECT_FALSE(plan_staging(64, 262144, 4, 2, 8, &g, 0, 16));       // within max_cluster
  EXPECT_FALSE(plan_staging(16, 262144 * 2, 4, 2, 16, &g, 0, 16));  // 4 MiB rows
  EXPECT_FALSE(plan_staging(256, 262144, 2, 1, 1, &g, 1));          // no clusters at all
  EXPECT_FALSE(plan_staging(16, 1 << 22, 4, 1, 16, &g));            // 16 MiB rows
  EXPECT_FALSE(plan_staging(16, 262145, 2, 1, 16, &g));             // not whole 16-byte vectors
}

// Rows of up to 64 KiB: tiles of rows in two buffers, no cluster, no resident operand.
TEST(StagingPlan, ShortRowsTakeTiles) {
  const Staging g = plan(65536, 1024, 2, 1, 16, 1);  // 2 KiB rows
  EXPECT_EQ(g.cluster, 1);
  EXPECT_EQ(g.resident, 0);
  EXPECT_EQ(g.rows_per_tile, 8);
  EXPECT_EQ(g.group, 32);
  EXPECT_EQ(g.buffers, 2);
  EXPECT_EQ(g.smem, size_t{2 * 8 * 1024 * 2});
  EXPECT_EQ(g.grid, 65536u / 8u);

  const Staging block = plan(100, 16384, 2, 1, 16);  // 32 KiB rows: a block a row
  EXPECT_EQ(block.group, StagedPolicy::threads);
  EXPECT_EQ(block.rows_per_tile, 1);
  EXPECT_EQ(block.cluster, 1);
}

// Rows of one operand of 32..64 KiB: one block, one rolling buffer, never a resident operand;
// the rows of 32 KiB and rows with a residual keep two buffers.
TEST(StagingPlan, RowsOfOneRollingBuffer) {
  const Staging rolling = plan(240, 28680, 2, 1, 16, 1);
  EXPECT_EQ(rolling.cluster, 1);
  EXPECT_EQ(rolling.slice, 28680);
  EXPECT_EQ(rolling.rows_per_tile, 1);
  EXPECT_EQ(rolling.group, StagedPolicy::threads);
  EXPECT_EQ(rolling.resident, 0);
  EXPECT_TRUE(rolling.rolling);
  EXPECT_EQ(rolling.buffers, 1);
  EXPECT_EQ(rolling.smem, size_t{28680 * 2});
  EXPECT_EQ(rolling.grid, 240u);

  const Staging longest = plan(240, 32768, 2, 1, 1);  // without clusters too
  EXPECT_TRUE(longest.rolling);
  EXPECT_EQ(longest.cluster, 1);
  EXPECT_EQ(longest.smem, size_t{64 * kKiB});

  const Staging shortest = plan(240, StagedPolicy::rolling_row_bytes / 2 + 8, 2, 1, 16);
  EXPECT_TRUE(shortest.rolling);
  EXPECT_EQ(shortest.buffers, 1);

  const Staging two = plan(240, StagedPolicy::rolling_row_bytes / 2, 2, 1, 16);
  EXPECT_FALSE(two.rolling);
  EXPECT_EQ(two.buffers, 2);
  EXPECT_EQ(two.smem, size_t{2 * StagedPolicy::rolling_row_bytes});

  const Staging residual = plan(240, 16384, 2, 2, 16);
  EXPECT_FALSE(residual.rolling);
  EXPECT_EQ(residual.buffers, 2);
  EXPECT_EQ(residual.smem, size_t{2 * 64 * kKiB});
}

// Invariants over lengths past 64 KiB: the slices cover the row with none empty, each a whole
// number of vectors; the cluster stays within the limit (max_large_cluster for 128 KiB slices);
// shared memory holds exactly the slices (the row operands' and the resident ones'), within a
// 64 KiB budget (a vector an operand of rounding) unless 128 KiB slices were needed, and resident
// operands only in 64 KiB blocks.
TEST(StagingPlan, InvariantsOverLongRows) {
  int planned = 0, with_resident = 0, large = 0;
  for (int element_bytes : {2, 4}) {
    const int64_t vec = 16 / element_bytes;
    for (int inputs : {1, 2}) {
      for (int max_cluster : {8, 16}) {
        for (int resident : {0, 1, 2}) {
          for (int max_large_cluster : {8, 16}) {
            for (int64_t n = 64 * kKiB / element_bytes + vec; n <= 2 * 1024 * kKiB / element_bytes;
                 n += 4093 * vec) {
              Staging g;
              if (!plan_staging(300, n, element_bytes, inputs, max_cluster, &g, resident,
                                max_large_cluster))
                continue;
              const std::string where =
                  "n " + std::to_string(n) + ", " + std::to_string(element_bytes) +
                  " bytes, inputs " + std::to_string(inputs) + ", max cluster " +
                  std::to_string(max_cluster) + ", resident " + std::to_string(resident) +
                  ", max large cluster " + std::to_string(max_large_cluster);
              ++planned;
              if (n * element_bytes * inputs <= StagedPolicy::slice_bytes) continue;  // tiles
              EXPECT_GE(g.cluster, 2) << where;
              EXPECT_LE(g.cluster, max_cluster) << where;
              EXPECT_EQ(g.slice % vec, 0) << where;
              EXPECT_GE(g.slice * g.cluster, n) << where;
              EXPECT_LT(g.slice * (g.cluster - 1), n) << where;
              EXPECT_LE(g.resident, resident) << where;
              EXPECT_EQ(g.buffer_elems, g.slice * inputs) << where;
              EXPECT_EQ(g.smem, static_cast<size_t>((g.buffer_elems + g.resident * g.slice) *
                                                    element_bytes))
                  << where;
              const int64_t rounding = 16 * (inputs + g.resident);
              if (g.resident > 0) {
                ++with_resident;
                EXPECT_LE(static_cast<int64_t>(g.smem), StagedPolicy::slice_bytes + rounding)
                    << where;
              } else {
                EXPECT_LE(static_cast<int64_t>(g.smem), StagedPolicy::large_slice_bytes + rounding)
                    << where;
              }
              if (static_cast<int64_t>(g.smem) > StagedPolicy::slice_bytes + rounding) {
                ++large;
                EXPECT_LE(g.cluster, max_large_cluster) << where;
              }
              EXPECT_EQ(g.grid, 300u * static_cast<unsigned>(g.cluster)) << where;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(planned, 100);
  EXPECT_GT(large, 10);
  EXPECT_GT(with_resident, 20);
}

}  // namespace
