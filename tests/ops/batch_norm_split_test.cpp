// core/ops/batch_norm/staged_split.hpp: even_split_by_rounds, which picks how many blocks (a
// cluster) batch-norm training's staged kernel splits a channel over where the SMs are not
// issue-lean (the H100), checked on the host. The counts of resident clusters are given here;
// in cuda_training.cu the device's occupancy query stands behind them.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <vector>

#include "core/ops/batch_norm/staged_split.hpp"

namespace {

using kf::batch_norm::even_split_by_rounds;

constexpr int64_t kVectors = 32928;         // a channel of the benchmark's 256 (16-byte vectors)
constexpr int64_t kLarge = 72 * 1024 / 16;  // vectors of a 72 KiB slice

// Rounds over `channels` channels from a table of the clusters resident at once at each split;
// a split missing from the table does not fit (0). Records the splits it was asked about.
struct Rounds {
  std::map<int64_t, int64_t> clusters;
  int64_t channels = 256;
  mutable std::vector<int64_t> asked;
  int64_t operator()(int64_t split) const {
    asked.push_back(split);
    const auto it = clusters.find(split);
    if (it == clusters.end() || it->second == 0) return 0;
    return (channels + it->second - 1) / it->second;
  }
};

int64_t cost(const Rounds& r, int64_t vectors, int64_t split) {
  return r(split) * ((vectors + split - 1) / split);
}

// Rules that are odd and past 8, or past 14, are replaced by the cheapest even split by rounds x
// slice, whatever it promises; odd candidates are never taken.
TEST(BatchNormSplit, OddRulesPastEightAndRulesPastFourteenAreReplaced) {
  struct Case {
    const char* what;
    std::map<int64_t, int64_t> clusters;
    int64_t rule, want;
  };
  const Case cases[] = {
      // 15 (37 clusters, 7 rounds: 15372 by the count) gives way to 12 (44, 6 rounds: 16464),
      // which promises more; of equal costs (14: 37, 7 rounds, 16464) the first is kept.
      {"the 16-bit rule", {{8, 33}, {10, 40}, {12, 44}, {14, 37}, {15, 37}, {16, 41}}, 15, 12},
      // 15 in two buffers (21 clusters, 13 rounds) against 12 in one: the H100's A/B of
      // 2026-12-06 04:37Z took 12.
      {"the f32 rule", {{8, 33}, {10, 40}, {12, 44}, {14, 37}, {15, 21}, {16, 21}}, 15, 12},
      // 16, even but past 14 and the cheapest here (60 clusters, 5 rounds: 10290), gives way to
      // 14 (47, 6 rounds: 14112); so does 9.
      {"sixteen", {{8, 33}, {9, 35}, {10, 40}, {12, 44}, {14, 47}, {16, 60}}, 16, 14},
      {"nine", {{8, 33}, {9, 35}, {10, 40}, {12, 44}, {14, 47}, {16, 60}}, 9, 14},
      // 13 would cost least (128 clusters, 2 rounds) but is odd.
      {"odd candidates", {{8, 33}, {10, 40}, {12, 44}, {13, 128}, {14, 37}, {15, 37}}, 15, 12},
  };
  for (const Case& c : cases) {
    Rounds r;
    r.clusters = c.clusters;
    EXPECT_EQ(even_split_by_rounds(kVectors, c.rule, 16, kLarge, r), c.want) << c.what;
  }
  Rounds r;  // the premises of the first and third cases
  r.clusters = cases[0].clusters;
  EXPECT_LT(cost(r, kVectors, 15), cost(r, kVectors, 12));
  EXPECT_EQ(cost(r, kVectors, 12), cost(r, kVectors, 14));
  r.clusters = cases[2].clusters;
  EXPECT_EQ(cost(r, kVectors, 16), 10290);
  EXPECT_EQ(cost(r, kVectors, 14), 14112);
}

// An even rule of 14 or less stays unless a candidate promises a fifth less: the rule's 12 at 6
// rounds costs 16464, so a candidate must cost less than 13171.2 (10 at 4 rounds: 13172 stays; at
// 3 rounds: 9879 wins).
TEST(BatchNormSplit, AnEvenRuleNeedsAFifthLess) {
  Rounds r;
  r.clusters = {{8, 33}, {10, 64}, {12, 44}, {14, 37}};
  ASSERT_EQ(cost(r, kVectors, 10), 13172);
  EXPECT_EQ(even_split_by_rounds(kVectors, 12, 16, kLarge, r), 12);
  r.clusters[10] = 86;  // 3 rounds
  EXPECT_EQ(even_split_by_rounds(kVectors, 12, 16, kLarge, r), 10);
}

// Odd rules of 8 or less keep the margin: channels of 4800 vectors (f32 rows of 19200), the rule
// 3 blocks of 36 KiB; candidates from 2 up.
TEST(BatchNormSplit, OddRulesUpToEightKeepTheMargin) {
  constexpr int64_t kSmall = 4800;
  Rounds r;
  r.channels = 800;
  r.clusters = {{2, 160}, {3, 100}, {4, 80}, {6, 50}, {8, 40}};  // 5 / 8 / 10 / 16 / 20 rounds
  // The rule: 8 x 1600 = 12800; 2: 12000, 4: 12000, 6: 12800, 8: 12000. None a fifth less.
  EXPECT_EQ(even_split_by_rounds(kSmall, 3, 16, kLarge, r), 3);
  r.clusters[4] = 200;  // 4 rounds x 1200 = 4800
  EXPECT_EQ(even_split_by_rounds(kSmall, 3, 16, kLarge, r), 4);
}

// A launch of one round keeps the rule, odd or not; so does a rule the runtime cannot count.
TEST(BatchNormSplit, OneRoundOrNoCountKeepsTheRule) {
  Rounds r;
  r.channels = 30;
  r.clusters = {{10, 40}, {12, 44}, {15, 37}};
  EXPECT_EQ(even_split_by_rounds(kVectors, 15, 16, kLarge, r), 15);
  r.channels = 256;
  r.clusters.erase(15);
  EXPECT_EQ(even_split_by_rounds(kVectors, 15, 16, kLarge, r), 15);
  EXPECT_EQ(even_split_by_rounds(kVectors, 1, 16, kLarge, r), 1);
}

// Where no candidate fits (or the runtime cannot count them), an odd rule past 8 stays.
TEST(BatchNormSplit, NoCandidateKeepsTheRule) {
  Rounds r;
  r.clusters = {{15, 37}};
  EXPECT_EQ(even_split_by_rounds(kVectors, 15, 16, kLarge, r), 15);
}

// Candidates run from the fewest large slices (rounded up to even) to 14 and max_split: a
// device without non-portable clusters (max_split 8) offers 8 only, and a channel of 9.5 large
// slices starts at 10; 8 is not asked there.
TEST(BatchNormSplit, CandidatesLieBetweenTheFewestLargeSlicesAndTheLargestSplit) {
  Rounds r;
  r.clusters = {{8, 33}, {9, 35}, {10, 40}, {12, 44}, {14, 47}};
  EXPECT_EQ(even_split_by_rounds(kVectors, 9, 8, kLarge, r), 8);
  const int64_t long_channel = kLarge * 19 / 2;  // 9.5 large slices
  r.asked.clear();
  const int64_t split = even_split_by_rounds(long_channel, 9, 16, kLarge, r);
  EXPECT_GE(split, 10);
  EXPECT_EQ(split % 2, 0);
  for (int64_t asked : r.asked) EXPECT_NE(asked, 8) << "8 slices cannot hold the channel";
  for (int64_t asked : r.asked) EXPECT_LE(asked, 14);
}

}  // namespace
