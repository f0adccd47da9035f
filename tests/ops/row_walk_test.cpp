// core/ops/rows/rows.hpp: RowCursor, which the masked softmax kernels advance by their grid's
// step instead of dividing for every row, against row_offset_cold (and a plain row-major
// decomposition) over walks of zero to three leading dims, on the host.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <random>
#include <vector>

#include "core/ops/rows/rows.hpp"

namespace {

// A walk over leading dims `shape` (row dims left out), with the division constants the library
// prepares (rows.cpp, make_walk).
kf::rows::Walk walk_of(std::initializer_list<int64_t> shape) {
  kf::rows::Walk w;
  w.rows = 1;
  for (int64_t extent : shape) {
    const kf::DivMagic m = kf::div_magic(static_cast<uint32_t>(extent));
    w.outer_shape[w.outer_ndim] = extent;
    w.outer_multiplier[w.outer_ndim] = m.multiplier;
    w.outer_shift[w.outer_ndim] = m.shift;
    ++w.outer_ndim;
    w.rows *= extent;
  }
  return w;
}

// Offset of `row` by a plain row-major decomposition over the walk's leading dims.
int64_t plain_offset(const kf::rows::Walk& w, const kf::rows::Operand& t, int64_t row) {
  int64_t offset = 0;
  for (int32_t d = w.outer_ndim - 1; d >= 0; --d) {
    offset += (row % w.outer_shape[d]) * t.outer[d];
    row /= w.outer_shape[d];
  }
  return offset;
}

TEST(RowCursor, AdvancesLikeRowOffsetCold) {
  std::mt19937_64 rng(20261127);
  int64_t compared = 0;
  const std::vector<kf::rows::Walk> walks = {
      walk_of({}),          walk_of({37}),      walk_of({16, 2048}), walk_of({3, 5}),
      walk_of({2048, 1}),   walk_of({1, 4096}), walk_of({7, 9, 11}), walk_of({65537, 3}),
      walk_of({5, 100003}), walk_of({2, 3, 5})};
  for (const kf::rows::Walk& w : walks) {
    // Operands: a dense one, one broadcast over the first leading dim (a mask over heads), one
    // with padded, permuted strides.
    kf::rows::Operand dense, broadcast, padded;
    int64_t stride = 64;
    for (int32_t d = w.outer_ndim - 1; d >= 0; --d) {
      dense.outer[d] = stride;
      broadcast.outer[d] = d == 0 ? 0 : stride;
      padded.outer[d] = 3 * stride + 5 * (d + 1);
      stride *= w.outer_shape[d];
    }
    for (int64_t step : {int64_t{1}, int64_t{7}, int64_t{264}, int64_t{2048}, int64_t{4097},
                         static_cast<int64_t>(1 + rng() % 300000)}) {
      const int64_t starts = step < 40 ? step : 40;  // a thread's first row: below the step
      for (int64_t first = 0; first < starts; ++first) {
        kf::rows::RowCursor cursor = kf::rows::row_cursor(w, first);
        const kf::rows::RowCursor by = kf::rows::row_cursor(w, step);
        int checked = 0;
        for (int64_t row = first; row < w.rows && checked < 200; row += step, ++checked) {
          for (const kf::rows::Operand* t : {&dense, &broadcast, &padded}) {
            const int64_t want = plain_offset(w, *t, row);
            ASSERT_EQ(kf::rows::row_offset_cold(w, *t, row), want) << "row " << row;
            ++compared;
            ASSERT_EQ(kf::rows::row_offset_at(w, *t, cursor, row), want)
                << "row " << row << " (first " << first << ", step " << step << ", " << w.outer_ndim
                << " leading dims)";
          }
          cursor = kf::rows::advance(w, cursor, by);
        }
      }
    }
  }
  EXPECT_GT(compared, 100000) << "the walks above should take that many rows";
  std::printf("%lld offsets compared\n", static_cast<long long>(compared));
}

}  // namespace
