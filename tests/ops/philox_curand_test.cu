// core/math/philox.hpp against curand's own device Philox4_32_10: for several seeds and
// subsequences, the numbers curand() returns after curand_init(seed, subsequence, 0) are the
// words of math::philox_block(seed, subsequence, i / 4) in order, computed on the host and on
// the device. Skips where no CUDA device is present.
#include <cuda_runtime.h>
#include <curand_kernel.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/math/philox.hpp"
#include "tests/common/test_util.hpp"

namespace {

constexpr int kNumbers = 64;  // per (seed, subsequence): 16 Philox blocks

__global__ void curand_numbers(const unsigned long long* seeds,
                               const unsigned long long* subsequences, unsigned int* curand_out,
                               unsigned int* header_out) {
  const int t = threadIdx.x;
  curandStatePhilox4_32_10_t state;
  curand_init(seeds[t], subsequences[t], 0, &state);
  for (int i = 0; i < kNumbers; ++i) curand_out[t * kNumbers + i] = curand(&state);
  for (int b = 0; b < kNumbers / 4; ++b) {
    const kf::math::PhiloxWords w = kf::math::philox_block(seeds[t], subsequences[t], b);
    for (int e = 0; e < 4; ++e) header_out[t * kNumbers + 4 * b + e] = w.v[e];
  }
}

TEST(PhiloxCurand, SameSequenceAsCurandDevice) {
  KF_REQUIRE_DEVICE();
  const std::vector<unsigned long long> seeds = {0, 1, 0xDEADBEEFCAFEF00Dull, ~0ull, 42, 42};
  const std::vector<unsigned long long> subsequences = {0, 0, 7, ~0ull, 1ull << 40, 3};
  const int n = static_cast<int>(seeds.size());
  unsigned long long *d_seeds = nullptr, *d_subsequences = nullptr;
  unsigned int *d_curand = nullptr, *d_header = nullptr;
  ASSERT_EQ(cudaMalloc(&d_seeds, n * sizeof(unsigned long long)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_subsequences, n * sizeof(unsigned long long)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_curand, n * kNumbers * sizeof(unsigned int)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_header, n * kNumbers * sizeof(unsigned int)), cudaSuccess);
  cudaMemcpy(d_seeds, seeds.data(), n * sizeof(unsigned long long), cudaMemcpyHostToDevice);
  cudaMemcpy(d_subsequences, subsequences.data(), n * sizeof(unsigned long long),
             cudaMemcpyHostToDevice);
  curand_numbers<<<1, n>>>(d_seeds, d_subsequences, d_curand, d_header);
  // A launch that failed shows here, not at the synchronisation, and leaves the outputs unwritten.
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<unsigned int> from_curand(n * kNumbers), from_header(n * kNumbers);
  cudaMemcpy(from_curand.data(), d_curand, from_curand.size() * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(from_header.data(), d_header, from_header.size() * 4, cudaMemcpyDeviceToHost);
  for (int t = 0; t < n; ++t) {
    for (int i = 0; i < kNumbers; ++i) {
      const kf::math::PhiloxWords host = kf::math::philox_block(seeds[t], subsequences[t], i / 4);
      const size_t k = static_cast<size_t>(t * kNumbers + i);
      EXPECT_EQ(from_header[k], from_curand[k]) << "device header, seed " << seeds[t] << " i " << i;
      EXPECT_EQ(host.v[i % 4], from_curand[k]) << "host header, seed " << seeds[t] << " i " << i;
    }
  }
  cudaFree(d_seeds);
  cudaFree(d_subsequences);
  cudaFree(d_curand);
  cudaFree(d_header);
}

}  // namespace
