// kf_fused_bias_activation against float64 references (row_test::reference_activation, written
// independently of core/math/), for every dtype and activation: odd hidden sizes, strided views
// of every operand, in place, and every error path. Outputs are poisoned (NaN) first; the data is
// random, from a fixed seed (override with KF_TEST_SEED=<n>).
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "tests/common/test_util.hpp"
#include "tests/ops/row_test_util.hpp"

namespace {

using kf_test::Tensor;
using row_test::base_seed;
using row_test::dtype_name;
using row_test::fill;
using row_test::gather;
using row_test::make_view;
using row_test::reference_activation;
using row_test::shape_str;
using row_test::view_offsets;
using Shape = std::vector<int64_t>;

const char* activation_name(kf_activation_t act) {
  switch (act) {
    case KF_ACTIVATION_NONE: return "none";
    case KF_ACTIVATION_RELU: return "relu";
    case KF_ACTIVATION_GELU: return "gelu";
    case KF_ACTIVATION_GELU_TANH: return "gelu_tanh";
    case KF_ACTIVATION_SILU: return "silu";
    case KF_ACTIVATION_TANH: return "tanh";
    case KF_ACTIVATION_SIGMOID: return "sigmoid";
  }
  return "?";
}

// out[r, c] = act(x[r, c] + bias[c]), row-major, hidden = bias.size().
std::vector<double> reference(kf_activation_t act, const std::vector<double>& x,
                              const std::vector<double>& bias) {
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    out[i] = reference_activation(act, x[i] + bias[i % bias.size()]);
  return out;
}

using Param = std::tuple<kf_dtype_t, kf_activation_t>;

class BiasActivationNumeric : public row_test::DeviceFixture<::testing::TestWithParam<Param>> {
 protected:
  kf_dtype_t dtype() const { return std::get<0>(GetParam()); }
  kf_activation_t act() const { return std::get<1>(GetParam()); }
  uint64_t seed(uint64_t salt) const {
    return base_seed() * 1000003u + static_cast<uint64_t>(dtype()) * 10007u +
           static_cast<uint64_t>(act()) * 13u + salt;
  }
  std::string label(const std::string& what, uint64_t s) const {
    return std::string(dtype_name(dtype())) + " " + activation_name(act()) + " " + what +
           " (seed " + std::to_string(s) + ")";
  }
};

TEST_P(BiasActivationNumeric, OddSizes) {
  const std::vector<Shape> shapes = {{1},       {7},       {1023},       {4097},  {3, 7},
                                     {5, 1023}, {2, 4097}, {2, 3, 5, 7}, {4, 64}, {0, 5}};
  uint64_t salt = 0;
  for (const Shape& shape : shapes) {
    const uint64_t s = seed(salt += 2);
    const std::string what = label("x " + shape_str(shape), s);
    SCOPED_TRACE(what);
    const Shape bias_shape{shape.back()};
    Tensor x = kf_test::make_tensor(ctx(), dtype(), shape);
    Tensor bias = kf_test::make_tensor(ctx(), dtype(), bias_shape);
    Tensor out = kf_test::make_tensor(ctx(), dtype(), shape);
    const auto xv = fill(x, dtype(), static_cast<size_t>(kf_test::numel(shape)), s);
    const auto bv = fill(bias, dtype(), static_cast<size_t>(shape.back()), s + 1);
    kf_test::poison(out);
    KF_ASSERT_OK(kf_fused_bias_activation(ctx(), x, bias, out, act(), nullptr));
    if (xv.empty()) continue;
    kf_test::expect_close(kf_test::download(out), reference(act(), xv, bv),
                          kf_test::tolerance(dtype()), what);
  }
}

// Saturated inputs, where each activation tends to 0, to x or to +-1: GELU's and SiLU's tails
// must come out at (nearly) 0 however large |x| is, not at a small multiple of x, and tanh at
// exactly +-1 where it rounds there. Before 2026-12-04 the float tanh stopped at 1 - 3e-7, so
// GELU's tanh form of -1e30 came out -1.6e23 and of -10 -1.6e-6 (within the relative check
// above, which allows 1e-5 of max(1, |want|)).
TEST_P(BiasActivationNumeric, SaturatedTails) {
  std::vector<double> values = {-60000, -1000, -100, -10, -9.5, 9.5, 10, 100, 1000, 60000};
  if (dtype() != KF_DTYPE_FLOAT16) {
    values.push_back(-1e30);
    values.push_back(1e30);
  }
  const int64_t hidden = static_cast<int64_t>(values.size());
  const std::string what = label("saturated inputs", 0);
  SCOPED_TRACE(what);
  Tensor x = kf_test::make_tensor(ctx(), dtype(), {3, hidden});
  Tensor bias = kf_test::make_tensor(ctx(), dtype(), {hidden});
  Tensor out = kf_test::make_tensor(ctx(), dtype(), {3, hidden});
  std::vector<double> xv;
  for (int r = 0; r < 3; ++r) xv.insert(xv.end(), values.begin(), values.end());
  xv = kf_test::round_to_dtype(xv, dtype());
  const std::vector<double> bv(values.size(), 0.5);
  kf_test::upload(x, xv);
  kf_test::upload(bias, bv);
  kf_test::poison(out);
  KF_ASSERT_OK(kf_fused_bias_activation(ctx(), x, bias, out, act(), nullptr));
  const std::vector<double> got = kf_test::download(out);
  // The sum x + bias as the library forms it: in the dtype's compute type (f32 for 16-bit data).
  std::vector<double> sums(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) {
    const double sum = xv[i] + bv[i % bv.size()];
    sums[i] = dtype() == KF_DTYPE_FLOAT64 ? sum : static_cast<double>(static_cast<float>(sum));
  }
  const std::vector<double> want = reference(act(), sums, {0.0});
  const double tol = kf_test::tolerance(dtype());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_LE(std::fabs(got[i] - want[i]), tol * std::fabs(want[i]) + 1e-20)
        << "act(" << sums[i] << ") = " << got[i] << ", want " << want[i];
    // tanh rounds to +-1 in float from |x| = 9.01 (tanh(9) rounds to 1 - 6e-8).
    if (act() == KF_ACTIVATION_TANH && dtype() != KF_DTYPE_FLOAT64 && std::fabs(sums[i]) >= 10) {
      EXPECT_EQ(got[i], sums[i] > 0 ? 1.0 : -1.0) << "tanh(" << sums[i] << ")";
    }
  }
}

TEST_P(BiasActivationNumeric, StridedViews) {
  struct View {
    Shape base_shape, shape, strides;
    int64_t offset;
  };
  const std::vector<std::tuple<std::string, View, View, View>> cases = {
      {"x transposed",
       {{7, 5}, {5, 7}, {1, 5}, 0},
       {{7}, {7}, {1}, 0},
       {{5, 7}, {5, 7}, {7, 1}, 0}},
      {"bias every other element",
       {{5, 7}, {5, 7}, {7, 1}, 0},
       {{15}, {7}, {2}, 1},
       {{5, 7}, {5, 7}, {7, 1}, 0}},
      {"out row slice",
       {{5, 7}, {5, 7}, {7, 1}, 0},
       {{7}, {7}, {1}, 0},
       {{6, 9}, {5, 7}, {9, 1}, 10}},
      {"out transposed, x sliced",
       {{3, 4, 10}, {3, 4, 5}, {40, 10, 2}, 1},
       {{5}, {5}, {1}, 0},
       {{5, 4, 3}, {3, 4, 5}, {1, 3, 12}, 0}},
      {"misaligned rows",
       {{1003}, {1000}, {1}, 3},
       {{1001}, {1000}, {1}, 1},
       {{1003}, {1000}, {1}, 2}},
  };
  uint64_t salt = seed(100);
  for (const auto& c : cases) {
    const View& xv = std::get<1>(c);
    const View& bv = std::get<2>(c);
    const View& ov = std::get<3>(c);
    const std::string what = label(std::get<0>(c), salt);
    SCOPED_TRACE(what);
    Tensor x_base = kf_test::make_tensor(ctx(), dtype(), xv.base_shape);
    Tensor b_base = kf_test::make_tensor(ctx(), dtype(), bv.base_shape);
    Tensor out_base = kf_test::make_tensor(ctx(), dtype(), ov.base_shape);
    Tensor x = make_view(x_base, dtype(), xv.shape, xv.strides, xv.offset);
    Tensor bias = make_view(b_base, dtype(), bv.shape, bv.strides, bv.offset);
    Tensor out = make_view(out_base, dtype(), ov.shape, ov.strides, ov.offset);
    ASSERT_TRUE(x.t && bias.t && out.t);
    const auto x_values =
        gather(fill(x_base, dtype(), static_cast<size_t>(kf_test::numel(xv.base_shape)), ++salt),
               view_offsets(xv.shape, xv.strides, xv.offset));
    const auto b_values =
        gather(fill(b_base, dtype(), static_cast<size_t>(kf_test::numel(bv.base_shape)), ++salt),
               view_offsets(bv.shape, bv.strides, bv.offset));
    kf_test::poison(out_base);
    KF_ASSERT_OK(kf_fused_bias_activation(ctx(), x, bias, out, act(), nullptr));
    kf_test::expect_close(kf_test::download(out), reference(act(), x_values, b_values),
                          kf_test::tolerance(dtype()), what);
    std::vector<double> whole = kf_test::download(out_base);
    std::vector<bool> inside(whole.size(), false);
    for (int64_t o : view_offsets(ov.shape, ov.strides, ov.offset))
      inside[static_cast<size_t>(o)] = true;
    for (size_t i = 0; i < whole.size(); ++i) {
      if (!inside[i]) {
        EXPECT_TRUE(std::isnan(whole[i])) << what << ": element " << i << " written";
      }
    }
  }
}

TEST_P(BiasActivationNumeric, InPlace) {
  const uint64_t s = seed(200);
  Tensor x = kf_test::make_tensor(ctx(), dtype(), {9, 13});
  Tensor bias = kf_test::make_tensor(ctx(), dtype(), {13});
  const auto xv = fill(x, dtype(), 9 * 13, s);
  const auto bv = fill(bias, dtype(), 13, s + 1);
  KF_ASSERT_OK(kf_fused_bias_activation(ctx(), x, bias, x, act(), nullptr));
  kf_test::expect_close(kf_test::download(x), reference(act(), xv, bv), kf_test::tolerance(dtype()),
                        label("in place", s));
}

INSTANTIATE_TEST_SUITE_P(
    AllTypes, BiasActivationNumeric,
    ::testing::Combine(::testing::Values(KF_DTYPE_FLOAT32, KF_DTYPE_FLOAT16, KF_DTYPE_BFLOAT16,
                                         KF_DTYPE_FLOAT64),
                       ::testing::Values(KF_ACTIVATION_NONE, KF_ACTIVATION_RELU, KF_ACTIVATION_GELU,
                                         KF_ACTIVATION_GELU_TANH, KF_ACTIVATION_SILU,
                                         KF_ACTIVATION_TANH, KF_ACTIVATION_SIGMOID)),
    [](const ::testing::TestParamInfo<Param>& info) {
      return std::string(dtype_name(std::get<0>(info.param))) + "_" +
             activation_name(std::get<1>(info.param));
    });

// A large bias op: many grid-stride passes on CUDA (vectorised rows), many CPU tasks.
TEST(BiasActivationLarge, SeedShape) {
  KF_REQUIRE_DEVICE();
  kf_test::Context ctx;
  for (kf_dtype_t dtype : {KF_DTYPE_FLOAT32, KF_DTYPE_BFLOAT16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Shape shape{1024, 2048};
    Tensor x = kf_test::make_tensor(ctx, dtype, shape);
    Tensor bias = kf_test::make_tensor(ctx, dtype, {2048});
    Tensor out = kf_test::make_tensor(ctx, dtype, shape);
    const auto xv = fill(x, dtype, 1024 * 2048, base_seed() + 1);
    const auto bv = fill(bias, dtype, 2048, base_seed() + 2);
    kf_test::poison(out);
    KF_ASSERT_OK(kf_fused_bias_activation(ctx, x, bias, out, KF_ACTIVATION_GELU, nullptr));
    kf_test::expect_close(kf_test::download(out), reference(KF_ACTIVATION_GELU, xv, bv),
                          kf_test::tolerance(dtype), "seed shape");
  }
}

// 16-bit bias rows on CUDA run a looping grid of resident blocks that stage x two grid steps
// ahead through shared memory: tensors of 53M elements take at least three steps per thread on
// a GPU of up to 132 SMs. Rows of 4096 and of 4104 (a grid rounded to whole rows per step).
// CUDA only: the CPU backend has no such loop, and the tensors are large.
TEST(BiasActivationLarge, StagedRowsOverManySteps) {
  KF_REQUIRE_DEVICE();
  if (kf_test::device_under_test() != KF_DEVICE_CUDA)
    GTEST_SKIP() << "the staged bias loop is of the CUDA backend";
  kf_test::Context ctx;
  for (kf_dtype_t dtype : {KF_DTYPE_FLOAT16, KF_DTYPE_BFLOAT16}) {
    for (const Shape& shape : {Shape{13000, 4096}, Shape{12975, 4104}}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + shape_str(shape));
      const size_t n = static_cast<size_t>(shape[0] * shape[1]);
      Tensor x = kf_test::make_tensor(ctx, dtype, shape);
      Tensor bias = kf_test::make_tensor(ctx, dtype, {shape[1]});
      Tensor out = kf_test::make_tensor(ctx, dtype, shape);
      const auto xv = fill(x, dtype, n, base_seed() + 3);
      const auto bv = fill(bias, dtype, static_cast<size_t>(shape[1]), base_seed() + 4);
      kf_test::poison(out);
      KF_ASSERT_OK(kf_fused_bias_activation(ctx, x, bias, out, KF_ACTIVATION_GELU, nullptr));
      kf_test::expect_close(kf_test::download(out), reference(KF_ACTIVATION_GELU, xv, bv),
                            kf_test::tolerance(dtype), "staged bias rows");
    }
  }
}

// ---- every error path; a failing call leaves out untouched -----------------------------------

class BiasActivation : public row_test::DeviceTest {
 protected:
  // Runs the call, which must fail with code; out (when given) must still be poisoned.
  std::string expect_error(kf_result_t code, kf_context_t* c, const kf_tensor_t* x,
                           const kf_tensor_t* bias, kf_tensor_t* out, kf_activation_t act,
                           kf_stream_t* s, kf_tensor_t* watched, const std::string& what) {
    SCOPED_TRACE(what);
    if (watched) kf_test::poison(watched);
    KF_EXPECT_ERR(kf_fused_bias_activation(c, x, bias, out, act, s), code);
    std::string message = kf_get_last_error_message();
    if (watched) {
      for (double v : kf_test::download(watched))
        EXPECT_TRUE(std::isnan(v)) << what << ": a failing call wrote out";
    }
    return message;
  }
};

TEST_F(BiasActivation, WrongBiasShape) {
  Tensor x = tensor({3, 7}), out = tensor({3, 7});
  Tensor b5 = tensor({5}), b17 = tensor({1, 7}), b37 = tensor({3, 7}), b1 = tensor({1});
  const std::string message = expect_error(KF_ERROR_SHAPE_MISMATCH, ctx(), x, b5, out,
                                           KF_ACTIVATION_GELU, nullptr, out, "bias [5]");
  EXPECT_NE(message.find("bias has shape [5], expected [hidden] = [7]"), std::string::npos)
      << message;
  expect_error(KF_ERROR_SHAPE_MISMATCH, ctx(), x, b17, out, KF_ACTIVATION_GELU, nullptr, out,
               "bias [1,7]");
  expect_error(KF_ERROR_SHAPE_MISMATCH, ctx(), x, b37, out, KF_ACTIVATION_GELU, nullptr, out,
               "bias [3,7]");
  expect_error(KF_ERROR_SHAPE_MISMATCH, ctx(), x, b1, out, KF_ACTIVATION_GELU, nullptr, out,
               "bias [1] (a broadcast the op does not promise)");
  Tensor scalar = tensor({}), scalar_out = tensor({});
  expect_error(KF_ERROR_SHAPE_MISMATCH, ctx(), scalar, b1, scalar_out, KF_ACTIVATION_GELU, nullptr,
               scalar_out, "scalar x");
  Tensor out_wrong = tensor({7, 3});
  expect_error(KF_ERROR_SHAPE_MISMATCH, ctx(), x, tensor({7}), out_wrong, KF_ACTIVATION_GELU,
               nullptr, out_wrong, "out shape");
}

TEST_F(BiasActivation, WrongDtypes) {
  Tensor x = tensor({3, 7}), bias = tensor({7}), out = tensor({3, 7});
  Tensor bias16 = tensor({7}, KF_DTYPE_FLOAT16), out64 = tensor({3, 7}, KF_DTYPE_FLOAT64);
  Tensor xi = tensor({3, 7}, KF_DTYPE_INT32), bi = tensor({7}, KF_DTYPE_INT32);
  Tensor oi = tensor({3, 7}, KF_DTYPE_INT32);
  expect_error(KF_ERROR_DTYPE_MISMATCH, ctx(), x, bias16, out, KF_ACTIVATION_NONE, nullptr, out,
               "bias f16");
  expect_error(KF_ERROR_DTYPE_MISMATCH, ctx(), x, bias, out64, KF_ACTIVATION_NONE, nullptr, out64,
               "out f64");
  expect_error(KF_ERROR_DTYPE_MISMATCH, ctx(), xi, bi, oi, KF_ACTIVATION_NONE, nullptr, nullptr,
               "int32");
}

TEST_F(BiasActivation, BadArguments) {
  Tensor x = tensor({3, 7}), bias = tensor({7}), out = tensor({3, 7});
  expect_error(KF_ERROR_INVALID_ARGUMENT, ctx(), x, bias, out, static_cast<kf_activation_t>(99),
               nullptr, out, "activation 99");
  expect_error(KF_ERROR_INVALID_ARGUMENT, ctx(), x, bias, out, static_cast<kf_activation_t>(-1),
               nullptr, out, "activation -1");
  // out overlapping bias: bias is a view of out's first row.
  Tensor bias_in_out = make_view(out, KF_DTYPE_FLOAT32, {7}, {1}, 0);
  KF_EXPECT_ERR(kf_fused_bias_activation(ctx(), x, bias_in_out, out, KF_ACTIVATION_NONE, nullptr),
                KF_ERROR_INVALID_ARGUMENT);
  // out partially overlapping x.
  Tensor base = tensor({4, 7});
  Tensor x_view = make_view(base, KF_DTYPE_FLOAT32, {3, 7}, {7, 1}, 0);
  Tensor out_view = make_view(base, KF_DTYPE_FLOAT32, {3, 7}, {7, 1}, 7);
  KF_EXPECT_ERR(
      kf_fused_bias_activation(ctx(), x_view, bias, out_view, KF_ACTIVATION_NONE, nullptr),
      KF_ERROR_INVALID_ARGUMENT);
}

TEST_F(BiasActivation, NullAndForeignHandles) {
  Tensor x = tensor({3, 7}), bias = tensor({7}), out = tensor({3, 7});
  expect_error(KF_ERROR_INVALID_HANDLE, nullptr, x, bias, out, KF_ACTIVATION_NONE, nullptr, out,
               "NULL ctx");
  expect_error(KF_ERROR_INVALID_HANDLE, ctx(), nullptr, bias, out, KF_ACTIVATION_NONE, nullptr, out,
               "NULL x");
  expect_error(KF_ERROR_INVALID_HANDLE, ctx(), x, nullptr, out, KF_ACTIVATION_NONE, nullptr, out,
               "NULL bias");
  expect_error(KF_ERROR_INVALID_HANDLE, ctx(), x, bias, nullptr, KF_ACTIVATION_NONE, nullptr,
               nullptr, "NULL out");
  kf_test::Context other;
  ASSERT_NE(other.ctx, nullptr);
  Tensor foreign_bias = kf_test::make_tensor(other, KF_DTYPE_FLOAT32, {7});
  Tensor foreign_out = kf_test::make_tensor(other, KF_DTYPE_FLOAT32, {3, 7});
  expect_error(KF_ERROR_DEVICE_MISMATCH, ctx(), x, foreign_bias, out, KF_ACTIVATION_NONE, nullptr,
               out, "bias from another context");
  expect_error(KF_ERROR_DEVICE_MISMATCH, ctx(), x, bias, foreign_out, KF_ACTIVATION_NONE, nullptr,
               foreign_out, "out from another context");
  kf_stream_t* stream = nullptr;
  KF_ASSERT_OK(kf_stream_create(other, nullptr, &stream));
  expect_error(KF_ERROR_DEVICE_MISMATCH, ctx(), x, bias, out, KF_ACTIVATION_NONE, stream, out,
               "stream from another context");
  KF_ASSERT_OK(kf_stream_destroy(stream));
}

}  // namespace
