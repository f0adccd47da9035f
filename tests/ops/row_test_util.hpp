// Helpers shared by the op tests: seeds, dtype names and the dtype parameter list, a fixture with
// a context on the device under test, views of a packed base tensor, and comparisons that accept
// matching infinities.
#pragma once

#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "tests/common/test_util.hpp"

namespace row_test {

using kf_test::Tensor;
using Shape = std::vector<int64_t>;

inline uint64_t base_seed() {
  static const uint64_t seed = [] {
    const char* env = std::getenv("KF_TEST_SEED");
    return env ? std::strtoull(env, nullptr, 0) : uint64_t{20261127};
  }();
  return seed;
}

inline const char* dtype_name(kf_dtype_t dtype) {
  switch (dtype) {
    case KF_DTYPE_FLOAT32: return "f32";
    case KF_DTYPE_FLOAT16: return "f16";
    case KF_DTYPE_BFLOAT16: return "bf16";
    case KF_DTYPE_FLOAT64: return "f64";
    default: return "int";
  }
}

// Every floating dtype, as the parameter list of INSTANTIATE_TEST_SUITE_P, and the test-name
// suffix for each.
inline auto float_dtypes() {
  return ::testing::Values(KF_DTYPE_FLOAT32, KF_DTYPE_FLOAT16, KF_DTYPE_BFLOAT16, KF_DTYPE_FLOAT64);
}
inline std::string dtype_param_name(const ::testing::TestParamInfo<kf_dtype_t>& info) {
  return dtype_name(info.param);
}

// A context on the device under test (the test is skipped without one), and tensors in it.
// Base is ::testing::Test or a ::testing::TestWithParam<...> for parameterised fixtures.
template <class Base = ::testing::Test>
class DeviceFixture : public Base {
 protected:
  std::unique_ptr<kf_test::Context> context_;
  void SetUp() override {
    KF_REQUIRE_DEVICE();
    context_ = std::make_unique<kf_test::Context>();
    ASSERT_NE(ctx(), nullptr);
  }
  kf_context_t* ctx() const { return context_->ctx; }
  Tensor tensor(const Shape& shape, kf_dtype_t dtype = KF_DTYPE_FLOAT32) {
    return kf_test::make_tensor(ctx(), dtype, shape);
  }
};
using DeviceTest = DeviceFixture<>;

inline std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

// Element offsets (from the base's first element) that a view reaches, in row-major order.
inline std::vector<int64_t> view_offsets(const Shape& shape, const Shape& strides, int64_t offset) {
  std::vector<int64_t> offsets{offset};
  for (size_t d = 0; d < shape.size(); ++d) {
    std::vector<int64_t> next;
    for (int64_t o : offsets)
      for (int64_t k = 0; k < shape[d]; ++k) next.push_back(o + k * strides[d]);
    offsets.swap(next);
  }
  return offsets;
}

inline std::vector<double> gather(const std::vector<double>& values,
                                  const std::vector<int64_t>& offsets) {
  std::vector<double> out;
  for (int64_t o : offsets) out.push_back(values[static_cast<size_t>(o)]);
  return out;
}

inline Tensor make_view(const Tensor& base, kf_dtype_t dtype, const Shape& shape,
                        const Shape& strides, int64_t offset) {
  kf_tensor_desc_t desc = kf_test::make_desc(dtype, shape, strides);
  kf_tensor_t* view = nullptr;
  kf_result_t r = kf_tensor_create_view(base, &desc, offset, &view);
  EXPECT_EQ(r, KF_SUCCESS) << "view " << shape_str(shape) << ": " << kf_get_last_error_message();
  return Tensor(view);
}

// Random values rounded to the dtype, uploaded into t (packed, row-major), returned.
inline std::vector<double> fill(kf_tensor_t* t, kf_dtype_t dtype, size_t n, uint64_t seed,
                                double lo = -3.0, double hi = 3.0) {
  std::vector<double> values =
      kf_test::round_to_dtype(kf_test::random_values(n, seed, lo, hi), dtype);
  kf_test::upload(t, values);
  return values;
}

// Like kf_test::expect_close, but equal infinities match.
inline void expect_close_inf(std::vector<double> got, std::vector<double> want, double tol,
                             const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(want[i]) && got[i] == want[i]) got[i] = want[i] = 0;
  }
  kf_test::expect_close(got, want, tol, what);
}

inline double reference_activation(kf_activation_t act, double x) {
  const double pi = 3.14159265358979323846;
  switch (act) {
    case KF_ACTIVATION_NONE: return x;
    case KF_ACTIVATION_RELU: return x > 0 ? x : 0.0;
    case KF_ACTIVATION_GELU: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case KF_ACTIVATION_GELU_TANH:
      return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / pi) * (x + 0.044715 * x * x * x)));
    case KF_ACTIVATION_SILU: return x / (1.0 + std::exp(-x));
    case KF_ACTIVATION_TANH: return std::tanh(x);
    case KF_ACTIVATION_SIGMOID: return 1.0 / (1.0 + std::exp(-x));
  }
  return NAN;
}

// Spacing of dtype's values (f32 or f64) at magnitude |v|.
inline double ulp_at(double v, kf_dtype_t dtype) {
  const int digits = dtype == KF_DTYPE_FLOAT64 ? 53 : 24;
  int exponent = 0;
  std::frexp(std::fabs(v), &exponent);
  return std::ldexp(1.0, exponent - digits);
}

// Statistics that sit near a large base (a mean of 1e4) cannot be checked relative to their
// magnitude: f32's tolerance there exceeds their whole spread. Compares got - base with want - base
// instead, allowing `ulps` spacings of dtype at the base (the rounding of a stored result) plus
// tol relative to the difference.
inline void expect_close_about(const std::vector<double>& got, const std::vector<double>& want,
                               const std::vector<double>& base, kf_dtype_t dtype, double ulps,
                               double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  ASSERT_EQ(base.size(), want.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d_got = got[i] - base[i], d_want = want[i] - base[i];
    const double allowed = ulps * ulp_at(base[i], dtype) + tol * std::fabs(d_want);
    if (!(std::fabs(d_got - d_want) <= allowed) && reported++ < 5)
      ADD_FAILURE() << what << " [" << i << "]: got " << got[i] << ", want " << want[i]
                    << " (about " << base[i] << ": " << d_got << " vs " << d_want << ", allowed "
                    << allowed << ")";
  }
}

}  // namespace row_test
