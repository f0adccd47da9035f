// Shared helpers of the C++ tests: the device under test, random data, float64 references,
// half-precision conversions and RAII holders for C handles.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernel_fusion/kernel_fusion.h"

namespace kf_test {

// The device this binary tests: CUDA when built with KF_TEST_CUDA, else the CPU.
kf_device_type_t device_under_test();

namespace detail {
void select_device_under_test(kf_device_type_t type);
#if defined(KF_TEST_CUDA)
// test_util.cpp is compiled once (into kf_test_common, without KF_TEST_CUDA), so a CUDA test
// binary announces its device from its own sources, before main.
struct SelectCudaUnderTest {
  SelectCudaUnderTest() { select_device_under_test(KF_DEVICE_CUDA); }
};
inline SelectCudaUnderTest select_cuda_under_test;
#endif
}  // namespace detail
// True when the device under test can be used (always for the CPU).
bool device_available();

// Skips the current test (reported as skipped by CTest) when the device is missing.
#define KF_REQUIRE_DEVICE()                                                       \
  do {                                                                            \
    if (!::kf_test::device_available()) GTEST_SKIP() << "no CUDA device present"; \
  } while (0)

// Fails the test with the library's message unless r == KF_SUCCESS.
#define KF_ASSERT_OK(expr)                                                           \
  do {                                                                               \
    kf_result_t kf_r_ = (expr);                                                      \
    ASSERT_EQ(kf_r_, KF_SUCCESS) << #expr << ": " << kf_result_string(kf_r_) << ": " \
                                 << kf_get_last_error_message();                     \
  } while (0)
#define KF_EXPECT_ERR(expr, code)                                               \
  do {                                                                          \
    kf_result_t kf_r_ = (expr);                                                 \
    EXPECT_EQ(kf_r_, code) << #expr << " returned " << kf_result_string(kf_r_); \
    if (kf_r_ != KF_SUCCESS) {                                                  \
      EXPECT_STRNE(kf_get_last_error_message(), "") << #expr;                   \
    }                                                                           \
  } while (0)

// A context on the device under test; destroyed at scope exit.
struct Context {
  kf_context_t* ctx = nullptr;
  Context();
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  operator kf_context_t*() const { return ctx; }
};

// A tensor handle destroyed at scope exit.
struct Tensor {
  kf_tensor_t* t = nullptr;
  Tensor() = default;
  explicit Tensor(kf_tensor_t* h) : t(h) {}
  ~Tensor() { kf_tensor_destroy(t); }
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  Tensor(Tensor&& o) noexcept : t(o.t) { o.t = nullptr; }
  operator kf_tensor_t*() const { return t; }
};

kf_tensor_desc_t make_desc(kf_dtype_t dtype, std::vector<int64_t> shape,
                           std::vector<int64_t> strides = {});
int64_t numel(const std::vector<int64_t>& shape);

// Creates a tensor (asserting success).
Tensor make_tensor(kf_context_t* ctx, kf_dtype_t dtype, const std::vector<int64_t>& shape);

// Half conversions (round to nearest even), for building inputs and reading outputs.
uint16_t float_to_half_bits(float f);
float half_bits_to_float(uint16_t h);
uint16_t float_to_bf16_bits(float f);
float bf16_bits_to_float(uint16_t h);

// Packs doubles into the dtype's bytes (rounding) and back.
std::vector<unsigned char> encode(const std::vector<double>& values, kf_dtype_t dtype);
std::vector<double> decode(const std::vector<unsigned char>& bytes, kf_dtype_t dtype);

// Uniform random values in [lo, hi), never all zero; deterministic for a seed.
std::vector<double> random_values(size_t n, uint64_t seed, double lo = -3.0, double hi = 3.0);

// Values rounded to what the dtype can represent (so references start from the exact inputs).
std::vector<double> round_to_dtype(const std::vector<double>& values, kf_dtype_t dtype);

// Relative tolerance by dtype: f64 1e-12, f32 1e-5, f16 1e-3, bf16 1e-2.
double tolerance(kf_dtype_t dtype);

// Uploads host values (packed, row-major) into a tensor; downloads them back.
void upload(kf_tensor_t* t, const std::vector<double>& values);
std::vector<double> download(kf_tensor_t* t);

// Fills a tensor's whole storage span with a NaN pattern (0xFF bytes) so unwritten elements show.
void poison(kf_tensor_t* t);

// Expects |got - want| <= tol * max(1, |want|) elementwise; reports the first few mismatches.
void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol,
                  const std::string& what);

}  // namespace kf_test
