// The CPU backend's worker pool (an internal class: this test compiles its source directly).
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/runtime/thread_pool.hpp"

namespace {

TEST(ThreadPool, CoversEveryIndexExactlyOnce) {
  kf::ThreadPool pool(4);
  EXPECT_EQ(pool.size(), 4);
  for (int64_t count : {0, 1, 7, 1023, 4097, 100000}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(count));
    pool.parallel_for(count, 16, [&](int64_t begin, int64_t end) {
      EXPECT_LT(begin, end);
      for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)]++;
    });
    for (int64_t i = 0; i < count; ++i)
      ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << count << " " << i;
  }
}

TEST(ThreadPool, RespectsMinGrain) {
  kf::ThreadPool pool(8);
  std::atomic<int> calls{0};
  pool.parallel_for(100, 60, [&](int64_t begin, int64_t end) {
    ++calls;
    if (end != 100) {
      EXPECT_GE(end - begin, 60);
    }
  });
  EXPECT_LE(calls.load(), 2);
}

TEST(ThreadPool, PropagatesTheFirstException) {
  kf::ThreadPool pool(4);
  EXPECT_THROW(pool.parallel_for(1000, 1,
                                 [](int64_t begin, int64_t) {
                                   if (begin >= 500) throw std::runtime_error("chunk failed");
                                 }),
               std::runtime_error);
  // Still usable afterwards.
  std::atomic<int64_t> sum{0};
  pool.parallel_for(1000, 1, [&](int64_t begin, int64_t end) { sum += end - begin; });
  EXPECT_EQ(sum.load(), 1000);
}

TEST(ThreadPool, NestedAndConcurrentCallers) {
  kf::ThreadPool pool(4);
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int rep = 0; rep < 20; ++rep) {
        pool.parallel_for(64, 1, [&](int64_t begin, int64_t end) {
          // A nested call runs inline on the calling worker.
          pool.parallel_for(end - begin, 1, [&](int64_t b, int64_t e) { total += e - b; });
        });
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(total.load(), 4 * 20 * 64);
}

TEST(ThreadPool, DefaultSizeIsOnePerCore) {
  kf::ThreadPool pool(0);
  EXPECT_EQ(pool.size(), static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency())));
  kf::ThreadPool single(1);
  int64_t seen = 0;
  single.parallel_for(10, 1, [&](int64_t begin, int64_t end) { seen += end - begin; });
  EXPECT_EQ(seen, 10);
}

}  // namespace
