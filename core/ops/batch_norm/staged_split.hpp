// Batch-norm training's staged kernel (cuda_training.cu): the split of a channel over a cluster
// chosen by rounds x slice where the SMs are not rows::tile_issue_lean. Plain C++ over the
// caller's count of rounds, so that tests/ops/batch_norm_split_test.cpp checks the choice on the
// host.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>

namespace kf::batch_norm {

// The split that launch_staged_training takes where the SMs are not rows::tile_issue_lean (the
// H100), in place of `rule`'s (the split of a channel of `vectors` 16-byte vectors by the slice
// sizes): the resident clusters walk the channels in rounds, so a launch takes about rounds x
// slice, rounds = channels / clusters resident at once, rounded up. Of the even splits from the
// fewest large slices up to 14 (and max_split), the one with the least rounds x slice; clusters
// come from the occupancy query at each split's shared memory (and buffers). Only where the rule's
// launch takes more than one round (what was measured). A candidate must promise a fifth less than
// the rule, but where the rule's split is odd and past 8, or past 14, which the H100 ran 1-5 points
// slower than the even splits of 10..14 at every type, the best candidate replaces it whatever it
// promises. H100 A/Bs (kf-bench, one library choosing by an environment variable, same call, two
// passes each), NCHW training + ReLU, 256 channels of 32928 vectors (f32 42x256x56x56, 16-bit
// 84x256x56x56), % of copy:
//  - 2026-12-06 04:37Z-04:44Z: f32, the rule's 15 blocks of 2196 vectors in two buffers (21
//    clusters resident, 13 rounds) 79.2 / 79.5 -> 12 of 2744 in one (44 clusters, 6 rounds, 42 %
//    less by this count) 83.1 / 83.1. A split promising 6 % less (16 of 2058 in two buffers, 21
//    clusters, 13 rounds) read 78.4 / 78.6: small promises are not kept, hence the margin.
//  - 06:04Z-06:11Z, each split forced (the buffers by staged_buffers: one for 16-bit data, two
//    for f32 from 15 up), f32 / f16 / bf16: 8: 81.6-81.7 / 79.4-80.6 / 80.2; 9: 81.4-81.5 /
//    79.8-79.9 / 79.3-79.4; 10: 82.9-83.0 / 80.6-81.0 / 79.9-80.2; 11: 80.1 / 77.9 / 77.0-77.1;
//    12: 83.1-83.2 / 80.6-80.7 / 79.6-79.9; 13: 80.9 / 78.0-78.4 / 77.8; 14: 82.9-83.0 /
//    80.4-80.5 / 79.8-80.1; 15 in one buffer (the 16-bit rule): 80.3 / 78.2-78.5 / 77.6-77.8;
//    16: 77.5-77.6 / 77.3-77.7 / 76.5-77.0. Two buffers for 16-bit data at 8, 10 and 12 read
//    80.5-81.1 / 79.6-80.4. The rounds count ranks the 16-bit rule's 15 first, so odd rules are
//    replaced rather than outbid; why odd clusters run slower was not found.
//  - This rule on the H100 (06:13Z, kf-bench, two passes): f32 / f16 / bf16 83.0, 82.8 / 80.7,
//    80.4 / 79.5, 79.7 (before it, 07c210f, 05:50Z-06:11Z: 83.1-83.2 / 78.2-78.5 / 77.6-77.9).
// Not measured on an H200, which keeps the rule (large slices first).
// `rounds_of(split)`: the rounds the clusters of `split` blocks resident at once take over the
// channels, or 0 where a slice of that split does not fit or the runtime cannot tell;
// `large_vectors`: the vectors of the largest slice.
template <class RoundsOf>
int64_t even_split_by_rounds(int64_t vectors, int64_t rule, int64_t max_split,
                             int64_t large_vectors, const RoundsOf& rounds_of) {
  const int64_t rule_rounds = rule >= 2 ? rounds_of(rule) : 0;
  if (rule_rounds <= 1) return rule;  // a launch of one round keeps the rule
  const auto cost_of = [&](int64_t split) {
    return rounds_of(split) * ((vectors + split - 1) / split);
  };
  constexpr int64_t kMostEven = 14;  // the largest split measured among the fast ones
  const bool replace = rule > 8 && (rule % 2 == 1 || rule > kMostEven);
  int64_t best = rule;
  // What a candidate must beat.
  int64_t best_cost = replace ? std::numeric_limits<int64_t>::max()
                              : rule_rounds * ((vectors + rule - 1) / rule) * 4 / 5;
  const int64_t fewest = std::max<int64_t>((vectors + large_vectors - 1) / large_vectors, 2);
  for (int64_t split = fewest + fewest % 2; split <= std::min<int64_t>(max_split, kMostEven);
       split += 2) {
    const int64_t cost = split == rule ? 0 : cost_of(split);
    if (cost > 0 && cost < best_cost) {
      best = split;
      best_cost = cost;
    }
  }
  return best;
}

}  // namespace kf::batch_norm
