// rows::packed_sum (core/ops/rows/tile.cuh), the norms' two-at-a-time x + residual for f16 and
// bf16, against the element-wise definition the CPU backend and the other kernels use,
// from_compute(to_compute(a) + to_compute(b)): on the device over every pair of 16-bit patterns
// (2^32 each type; NaN results compared as NaN), and on the host over a sample of pairs and the
// special values. Skips where no CUDA device is present.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <type_traits>
#include <vector>

#include "core/math/numeric.hpp"
#include "core/ops/rows/tile.cuh"
#include "tests/common/test_util.hpp"

namespace {

using kf::math::bfloat16_t;
using kf::math::half_t;
using kf::math::StorageTraits;

template <class S>
__host__ __device__ bool is_nan_bits(unsigned short bits) {
  // f16: exponent 0x7c00; bf16: 0x7f80; a NaN has every exponent bit and some mantissa bit.
  const unsigned short exponent = std::is_same_v<S, half_t> ? 0x7c00 : 0x7f80;
  return (bits & exponent) == exponent && (bits & static_cast<unsigned short>(~exponent & 0x7fff));
}

struct Mismatch {
  unsigned long long count;
  unsigned int first;  // (a << 16) | b of the first mismatch found (any of them), or ~0u
};

// Thread a takes every b, two pairs a packed_sum: the word {a, a} + {b, b + 1}.
template <class S>
__global__ void every_pair(Mismatch* out) {
  const unsigned a = blockIdx.x * blockDim.x + threadIdx.x;
  if (a > 0xffffu) return;
  using Traits = StorageTraits<S>;
  unsigned long long local = 0;
  unsigned first = ~0u;
  const S sa{static_cast<unsigned short>(a)};
  for (unsigned b = 0; b <= 0xffffu; b += 2) {
    // The low half of a word is the first element.
    const unsigned z = kf::rows::packed_sum<S>(a | (a << 16), b | ((b + 1) << 16));
    for (unsigned e = 0; e < 2; ++e) {
      const S sb{static_cast<unsigned short>(b + e)};
      const S want = Traits::from_compute(Traits::to_compute(sa) + Traits::to_compute(sb));
      const unsigned short got = static_cast<unsigned short>(z >> (16 * e));
      const bool same = got == want.bits || (is_nan_bits<S>(got) && is_nan_bits<S>(want.bits));
      if (!same) {
        ++local;
        if (first == ~0u) first = (a << 16) | (b + e);
      }
    }
  }
  if (local) {
    atomicAdd(&out->count, local);
    atomicCAS(&out->first, ~0u, first);
  }
}

// packed_sum of pairs[i] = (a << 16) | b, one lane each, for the host to check.
template <class S>
__global__ void sample_pairs(const unsigned* pairs, int n, unsigned short* sums) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  // a + b in the low half, b + a in the high one.
  const unsigned a = pairs[i] >> 16, b = pairs[i] & 0xffffu;
  const unsigned z = kf::rows::packed_sum<S>(a | (b << 16), b | (a << 16));
  sums[2 * i] = static_cast<unsigned short>(z);
  sums[2 * i + 1] = static_cast<unsigned short>(z >> 16);
}

template <class S>
void check_every_pair() {
  Mismatch* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, sizeof(Mismatch)), cudaSuccess);
  const Mismatch start{0, ~0u};
  ASSERT_EQ(cudaMemcpy(d, &start, sizeof start, cudaMemcpyHostToDevice), cudaSuccess);
  every_pair<S><<<65536 / 256, 256>>>(d);
  // A launch that failed shows here, not at the synchronisation, and leaves the outputs unwritten.
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  Mismatch got{~0ull, 0};
  ASSERT_EQ(cudaMemcpy(&got, d, sizeof got, cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(d);
  EXPECT_EQ(got.count, 0u) << "first mismatch: a = 0x" << std::hex << (got.first >> 16)
                           << ", b = 0x" << (got.first & 0xffffu);
}

template <class S>
void check_sample() {
  // Special patterns of either type (zeros, the smallest and largest subnormals, ones, the
  // largest finite values, infinities, NaNs), then random pairs, then pairs far apart in scale.
  const std::vector<unsigned short> specials = {
      0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x007f, 0x0400, 0x0080, 0x3c00, 0x3f80, 0xbc00,
      0xbf80, 0x7bff, 0x7f7f, 0xfbff, 0xff7f, 0x7c00, 0x7f80, 0xfc00, 0xff80, 0x7e00, 0x7fc0};
  std::vector<unsigned> pairs;
  for (unsigned short a : specials)
    for (unsigned short b : specials) pairs.push_back((unsigned{a} << 16) | b);
  std::mt19937 rng(20261127);
  for (int i = 0; i < (1 << 20); ++i) pairs.push_back(static_cast<unsigned>(rng()));
  for (int i = 0; i < (1 << 16); ++i) {  // exponents 10..20 apart
    const unsigned a = rng() & 0xffffu;
    const unsigned shift = (10 + rng() % 11) << (std::is_same_v<S, half_t> ? 10 : 7);
    const unsigned b =
        ((a & 0x7fffu) > shift ? (a & 0x7fffu) - shift : rng() & 0x3ffu) | ((rng() & 1u) << 15);
    pairs.push_back((a << 16) | (b & 0xffffu));
  }
  const int n = static_cast<int>(pairs.size());
  unsigned* d_pairs = nullptr;
  unsigned short* d_sums = nullptr;
  ASSERT_EQ(cudaMalloc(&d_pairs, n * sizeof(unsigned)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_sums, 2 * n * sizeof(unsigned short)), cudaSuccess);
  ASSERT_EQ(cudaMemset(d_sums, 0x5a, 2 * n * sizeof(unsigned short)), cudaSuccess);  // poison
  ASSERT_EQ(cudaMemcpy(d_pairs, pairs.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice),
            cudaSuccess);
  sample_pairs<S><<<(n + 255) / 256, 256>>>(d_pairs, n, d_sums);
  // A launch that failed shows here, not at the synchronisation, and leaves the outputs unwritten.
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<unsigned short> sums(2 * n);
  ASSERT_EQ(
      cudaMemcpy(sums.data(), d_sums, sums.size() * sizeof(unsigned short), cudaMemcpyDeviceToHost),
      cudaSuccess);
  cudaFree(d_pairs);
  cudaFree(d_sums);
  using Traits = StorageTraits<S>;
  int mismatches = 0;
  for (int i = 0; i < n && mismatches < 10; ++i) {
    const S a{static_cast<unsigned short>(pairs[i] >> 16)};
    const S b{static_cast<unsigned short>(pairs[i] & 0xffffu)};
    // The CPU backend's definition, and the float64 sum rounded once to S for finite inputs.
    const S want = Traits::from_compute(Traits::to_compute(a) + Traits::to_compute(b));
    for (int e = 0; e < 2; ++e) {
      const unsigned short got = sums[2 * i + e];
      const bool same = got == want.bits || (is_nan_bits<S>(got) && is_nan_bits<S>(want.bits));
      if (!same) ++mismatches;
      EXPECT_TRUE(same) << "a = 0x" << std::hex << a.bits << ", b = 0x" << b.bits << ": device 0x"
                        << got << ", host 0x" << want.bits;
    }
    const double exact = static_cast<double>(Traits::to_compute(a)) + Traits::to_compute(b);
    if (std::isfinite(exact)) {
      const S once = Traits::from_compute(static_cast<float>(exact));  // exact in float here
      if (static_cast<double>(static_cast<float>(exact)) == exact)
        EXPECT_EQ(sums[2 * i], once.bits) << "a = 0x" << std::hex << a.bits << ", b = 0x" << b.bits;
    }
  }
}

TEST(PackedSum, EveryHalfPairMatchesTheElementWiseSum) {
  KF_REQUIRE_DEVICE();
  check_every_pair<half_t>();
}

TEST(PackedSum, EveryBfloat16PairMatchesTheElementWiseSum) {
  KF_REQUIRE_DEVICE();
  check_every_pair<bfloat16_t>();
}

TEST(PackedSum, SampledHalfPairsMatchTheHost) {
  KF_REQUIRE_DEVICE();
  check_sample<half_t>();
}

TEST(PackedSum, SampledBfloat16PairsMatchTheHost) {
  KF_REQUIRE_DEVICE();
  check_sample<bfloat16_t>();
}

}  // namespace
