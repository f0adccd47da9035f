// The device fast paths of core/math/fusion_ops.hpp against the exact functions, exhaustively:
// every float operand in the range where FastCheck lets a fast result stand gives the bits of
// the exact function (div_rn, sqrt_rn, div_rn(1, sqrt_rn)), hardware approximations included.
// (tests/fusion/fast_path_test.cpp checks the arithmetic around them on the host.) Skips where
// no CUDA device is present.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/math/fusion_ops.hpp"
#include "tests/common/test_util.hpp"

namespace {

namespace km = kf::math;

// Operand bit patterns [first, first + count) of positive floats, with a sign bit applied.
struct Sweep {
  uint32_t first;
  uint32_t count;
  uint32_t sign;
};

// Where a check found a fast result that is not the exact one (or a FastCheck that failed).
struct Mismatches {
  unsigned long long count;
  uint32_t operand;  // the first one found (any, when several threads race)
  uint32_t fast;
  uint32_t exact;
  int check_failed;  // FastCheck did not pass for an operand inside the range
};

enum class Op { rsqrt, sqrt, divide };

__device__ uint32_t device_bits(float x) { return __float_as_uint(x); }

__global__ void compare(Op op, Sweep sweep, float divisor, Mismatches* out) {
  const km::Divisor<float> d = km::make_divisor(divisor);
  const uint32_t stride = gridDim.x * blockDim.x;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < sweep.count; i += stride) {
    const float x = __uint_as_float((sweep.first + i) | sweep.sign);
    km::FastCheck ok;
    float fast, exact;
    switch (op) {
      case Op::rsqrt:
        fast = km::fast::rsqrt(x, ok);
        exact = km::div_rn(1.0f, km::sqrt_rn(x));
        break;
      case Op::sqrt:
        fast = km::fast::sqrt(x, ok);
        exact = km::sqrt_rn(x);
        break;
      default:
        fast = km::fast::div(x, d, ok);
        exact = km::div_rn(x, divisor);
        break;
    }
    const bool both_nan = fast != fast && exact != exact;
    if (!ok.passed()) atomicExch(&out->check_failed, 1);
    if (!both_nan && device_bits(fast) != device_bits(exact)) {
      if (atomicAdd(&out->count, 1ull) == 0) {
        out->operand = device_bits(x);
        out->fast = device_bits(fast);
        out->exact = device_bits(exact);
      }
    }
  }
}

// Bits of 2^-60 and of 2^61: FastCheck's range for every fast path's operand.
constexpr uint32_t kLowest = 0x21800000u;
constexpr uint32_t kPastHighest = 0x5e000000u;

void expect_exact(Op op, Sweep sweep, float divisor, const char* what) {
  Mismatches* d_out = nullptr;
  ASSERT_EQ(cudaMalloc(&d_out, sizeof(Mismatches)), cudaSuccess);
  ASSERT_EQ(cudaMemset(d_out, 0, sizeof(Mismatches)), cudaSuccess);
  compare<<<4096, 256>>>(op, sweep, divisor, d_out);
  // A launch that failed shows here, not at the synchronisation, and leaves the outputs unwritten.
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  Mismatches got{};
  ASSERT_EQ(cudaMemcpy(&got, d_out, sizeof got, cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(d_out);
  EXPECT_EQ(got.check_failed, 0) << what << ": FastCheck failed inside its range";
  EXPECT_EQ(got.count, 0ull) << what << ": e.g. operand 0x" << std::hex << got.operand
                             << " gives 0x" << got.fast << ", exactly 0x" << got.exact;
}

// rsqrt's range (FastCheck::finite_operand): finite magnitudes from 2^-61 (0x21000000) up.
constexpr uint32_t kRsqrtLowest = 0x21000000u;
constexpr uint32_t kInfinity = 0x7f800000u;

TEST(FastPathDevice, RsqrtIsExactOverItsWholeRange) {
  KF_REQUIRE_DEVICE();
  const Sweep all = {kRsqrtLowest, kInfinity - kRsqrtLowest, 0u};
  expect_exact(Op::rsqrt, all, 0.0f, "rsqrt");
  const Sweep negative = {kRsqrtLowest, kInfinity - kRsqrtLowest, 0x80000000u};
  expect_exact(Op::rsqrt, negative, 0.0f, "rsqrt of negatives (NaN)");
}

TEST(FastPathDevice, ReciprocalIsExactWhereTheMantissaIsAllOnes) {
  KF_REQUIRE_DEVICE();
  // 1 / b through a launch-value divisor (make_divisor's Newton step, the division's correction)
  // needs MUFU.RCP to give exactly div_rn(1, b) there, as fast::reciprocal does
  // (fast_path_test.cpp), for every exponent of b in the division's range. (fast::reciprocal on
  // rsqrt's s, up to 2^64, is covered by the rsqrt sweep above.)
  for (uint32_t exponent = 67; exponent < 188; ++exponent) {
    const uint32_t b_bits = exponent << 23 | 0x007fffffu;
    float b;
    std::memcpy(&b, &b_bits, sizeof b);
    expect_exact(Op::divide, {0x3f800000u, 1u, 0u}, b, "1 / b, b of all-ones mantissa");
  }
}

TEST(FastPathDevice, SqrtIsExactOverItsWholeRange) {
  KF_REQUIRE_DEVICE();
  expect_exact(Op::sqrt, {kLowest, kPastHighest - kLowest, 0u}, 0.0f, "sqrt");
  expect_exact(Op::sqrt, {0u, 1u, 0u}, 0.0f, "sqrt(+0)");
  expect_exact(Op::sqrt, {0u, 1u, 0x80000000u}, 0.0f, "sqrt(-0)");
}

TEST(FastPathDevice, DivisionByALaunchValueIsExactForEveryNumerator) {
  KF_REQUIRE_DEVICE();
  // Divisors across the range, of both signs, and the all-ones mantissa (fast::reciprocal).
  const float divisors[] = {0.625f,          3.0f,          -7.0f,           1.0f / 3.0f, 0x1p-60f,
                            -0x1.fffffep60f, 0x1.fffffep0f, -0x1.fffffep-31f};
  for (float b : divisors) {
    for (uint32_t sign : {0u, 0x80000000u}) {
      const std::string what = "division by " + std::to_string(b);
      expect_exact(Op::divide, {kLowest, kPastHighest - kLowest, sign}, b, what.c_str());
      expect_exact(Op::divide, {0u, 1u, sign}, b, (what + " of a zero").c_str());
    }
  }
}

}  // namespace
