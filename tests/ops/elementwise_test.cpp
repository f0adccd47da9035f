// kf_fused_elementwise_{add,mul}_activation against float64 references computed here (the
// activations are written again below on purpose, independently of core/math/), for every dtype,
// op and activation: odd sizes, broadcasting, strided views of every operand, in place, and every
// error path. Outputs are poisoned (NaN) first; the data is random, from a printed seed
// (override with KF_TEST_SEED=<n>).
#include <cmath>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#if defined(KF_TEST_CUDA)
#include <cuda_runtime.h>
#endif

#include "kernel_fusion/dlpack.h"
#include "tests/common/test_util.hpp"
#include "tests/ops/row_test_util.hpp"

namespace {

using kf_test::Tensor;
using Shape = std::vector<int64_t>;

enum class Op { add, mul };

const char* op_name(Op op) { return op == Op::add ? "add" : "mul"; }

const char* dtype_name(kf_dtype_t dtype) {
  switch (dtype) {
    case KF_DTYPE_FLOAT32: return "f32";
    case KF_DTYPE_FLOAT16: return "f16";
    case KF_DTYPE_BFLOAT16: return "bf16";
    case KF_DTYPE_FLOAT64: return "f64";
    default: return "int";
  }
}

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

using row_test::reference_activation;  // written once for every op test

kf_result_t call(Op op, kf_context_t* ctx, const kf_tensor_t* a, const kf_tensor_t* b,
                 kf_tensor_t* out, kf_activation_t act, kf_stream_t* s = nullptr) {
  return op == Op::add ? kf_fused_elementwise_add_activation(ctx, a, b, out, act, s)
                       : kf_fused_elementwise_mul_activation(ctx, a, b, out, act, s);
}

uint64_t base_seed() {
  static const uint64_t seed = [] {
    const char* env = std::getenv("KF_TEST_SEED");
    return env ? std::strtoull(env, nullptr, 0) : uint64_t{20261126};
  }();
  return seed;
}

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

// out = act(a op b) with b broadcast onto a (NumPy rules), everything row-major.
std::vector<double> reference(Op op, kf_activation_t act, const std::vector<double>& a,
                              const Shape& a_shape, const std::vector<double>& b,
                              const Shape& b_shape) {
  std::vector<double> out(a.size());
  const size_t lead = a_shape.size() - b_shape.size();
  std::vector<int64_t> index(a_shape.size(), 0);
  for (size_t i = 0; i < a.size(); ++i) {
    int64_t b_index = 0;
    for (size_t j = 0; j < b_shape.size(); ++j)
      b_index = b_index * b_shape[j] + (b_shape[j] == 1 ? 0 : index[lead + j]);
    const double x = a[i], y = b[static_cast<size_t>(b_index)];
    out[i] = reference_activation(act, op == Op::add ? x + y : x * y);
    for (size_t d = a_shape.size(); d-- > 0;) {  // advance the row-major multi-index
      if (++index[d] < a_shape[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

// Element offsets (from base's first element) that a view reaches, in row-major order.
std::vector<int64_t> view_offsets(const Shape& shape, const Shape& strides, int64_t offset) {
  std::vector<int64_t> offsets{offset};
  for (size_t d = 0; d < shape.size(); ++d) {
    std::vector<int64_t> next;
    for (int64_t o : offsets)
      for (int64_t k = 0; k < shape[d]; ++k) next.push_back(o + k * strides[d]);
    offsets.swap(next);
  }
  return offsets;
}

std::vector<double> gather(const std::vector<double>& values, const std::vector<int64_t>& offsets) {
  std::vector<double> out;
  for (int64_t o : offsets) out.push_back(values[static_cast<size_t>(o)]);
  return out;
}

Tensor make_view(const Tensor& base, kf_dtype_t dtype, const Shape& shape, const Shape& strides,
                 int64_t offset) {
  kf_tensor_desc_t desc = kf_test::make_desc(dtype, shape, strides);
  kf_tensor_t* view = nullptr;
  kf_result_t r = kf_tensor_create_view(base, &desc, offset, &view);
  EXPECT_EQ(r, KF_SUCCESS) << "view " << shape_str(shape) << " strides " << shape_str(strides)
                           << ": " << kf_get_last_error_message();
  return Tensor(view);
}

// Rounded random inputs for a tensor (uploaded), so the reference starts from exactly what the
// library reads.
std::vector<double> fill(kf_tensor_t* t, kf_dtype_t dtype, size_t n, uint64_t seed) {
  std::vector<double> values = kf_test::round_to_dtype(kf_test::random_values(n, seed), dtype);
  kf_test::upload(t, values);
  return values;
}

// Half types are computed in f32 and rounded once at the store: the error is at most one unit in
// the last place of the output (2^-10 relative for f16, 2^-7 for bf16), inside kf_test's
// per-dtype tolerance (1e-3, 1e-2), including the few-ulp error of device erff/tanhf/expf.
double tolerance(kf_dtype_t dtype) { return kf_test::tolerance(dtype); }

class DeviceTest {
 protected:
  std::unique_ptr<kf_test::Context> context_;
  kf_context_t* ctx() const { return context_->ctx; }
  void start() { context_ = std::make_unique<kf_test::Context>(); }
};

// ---- numeric tests, one instance per dtype x op x activation -----------------------------------

using Param = std::tuple<kf_dtype_t, Op, kf_activation_t>;

class ElementwiseNumeric : public ::testing::TestWithParam<Param>, protected DeviceTest {
 protected:
  void SetUp() override {
    KF_REQUIRE_DEVICE();
    start();
    ASSERT_NE(ctx(), nullptr);
  }
  kf_dtype_t dtype() const { return std::get<0>(GetParam()); }
  Op op() const { return std::get<1>(GetParam()); }
  kf_activation_t act() const { return std::get<2>(GetParam()); }
  uint64_t seed(uint64_t salt) const {
    const auto& p = GetParam();
    return base_seed() * 1000003u + static_cast<uint64_t>(std::get<0>(p)) * 10007u +
           static_cast<uint64_t>(std::get<1>(p)) * 101u +
           static_cast<uint64_t>(std::get<2>(p)) * 13u + salt;
  }
  std::string label(const std::string& what, uint64_t case_seed) const {
    return std::string(dtype_name(dtype())) + " " + op_name(op()) + " " + activation_name(act()) +
           " " + what + " (seed " + std::to_string(case_seed) +
           ", KF_TEST_SEED=" + std::to_string(base_seed()) + ")";
  }

  // Dense a and b, fresh out (poisoned), compared against the reference.
  void check_dense(const Shape& a_shape, const Shape& b_shape, uint64_t salt) {
    const uint64_t s = seed(salt);
    const std::string what = label(shape_str(a_shape) + " with b " + shape_str(b_shape), s);
    SCOPED_TRACE(what);
    Tensor a = kf_test::make_tensor(ctx(), dtype(), a_shape);
    Tensor b = kf_test::make_tensor(ctx(), dtype(), b_shape);
    Tensor out = kf_test::make_tensor(ctx(), dtype(), a_shape);
    const auto av = fill(a, dtype(), static_cast<size_t>(kf_test::numel(a_shape)), s);
    const auto bv = fill(b, dtype(), static_cast<size_t>(kf_test::numel(b_shape)), s + 1);
    kf_test::poison(out);
    KF_ASSERT_OK(call(op(), ctx(), a, b, out, act()));
    kf_test::expect_close(kf_test::download(out), reference(op(), act(), av, a_shape, bv, b_shape),
                          tolerance(dtype()), what);
  }
};

TEST_P(ElementwiseNumeric, OddSizesAndBroadcasting) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{1}, {1}},
      {{7}, {7}},
      {{1023}, {1023}},
      {{4097}, {4097}},
      {{3, 5, 7}, {3, 5, 7}},
      {{}, {}},
      {{6, 33}, {33}},
      {{4, 64}, {64}},
      {{2, 3, 40}, {40}},
      {{37}, {1}},
      {{5, 9}, {}},
      {{5, 3, 7}, {5, 1, 7}},
      {{4, 3, 7}, {3, 7}},
      {{3, 5}, {3, 1}},
      {{1, 7}, {7}},
      {{2, 1, 3, 1, 5}, {3, 1, 5}},
      {{0, 5}, {5}},
  };
  uint64_t salt = 0;
  for (const auto& c : cases) check_dense(c.first, c.second, salt += 2);
}

TEST_P(ElementwiseNumeric, StridedViews) {
  const uint64_t s = seed(100);
  // Bases big enough for every view below; out's base is poisoned and checked outside the view.
  struct View {
    Shape base_shape, shape, strides;
    int64_t offset;
  };
  const std::vector<std::tuple<std::string, View, View, View>> cases = {
      {"a transposed",
       {{7, 5}, {5, 7}, {1, 5}, 0},
       {{5, 7}, {5, 7}, {7, 1}, 0},
       {{5, 7}, {5, 7}, {7, 1}, 0}},
      {"b sliced",
       {{5, 7}, {5, 7}, {7, 1}, 0},
       {{5, 15}, {5, 7}, {15, 2}, 1},
       {{5, 7}, {5, 7}, {7, 1}, 0}},
      {"out row slice",
       {{5, 7}, {5, 7}, {7, 1}, 0},
       {{5, 7}, {5, 7}, {7, 1}, 0},
       {{6, 9}, {5, 7}, {9, 1}, 10}},
      {"all transposed alike",
       {{7, 5}, {5, 7}, {1, 5}, 0},
       {{7, 5}, {5, 7}, {1, 5}, 0},
       {{7, 5}, {5, 7}, {1, 5}, 0}},
      {"out transposed, b bias",
       {{5, 7}, {5, 7}, {7, 1}, 0},
       {{7}, {7}, {1}, 0},
       {{7, 5}, {5, 7}, {1, 5}, 0}},
      {"3-D mixed",
       {{3, 4, 10}, {3, 4, 5}, {40, 10, 2}, 1},
       {{4, 5}, {4, 5}, {5, 1}, 0},
       {{5, 4, 3}, {3, 4, 5}, {1, 3, 12}, 0}},
      {"a broadcast view",
       {{7}, {5, 7}, {0, 1}, 0},
       {{5, 7}, {5, 7}, {7, 1}, 0},
       {{5, 7}, {5, 7}, {7, 1}, 0}},
      {"same misalignment",
       {{1003}, {1000}, {1}, 1},
       {{1003}, {1000}, {1}, 1},
       {{1003}, {1000}, {1}, 1}},
      {"different misalignment",
       {{1003}, {1000}, {1}, 1},
       {{1003}, {1000}, {1}, 2},
       {{1003}, {1000}, {1}, 3}},
      {"scalar b, misaligned a/out",
       {{1003}, {1000}, {1}, 3},
       {{2}, {1}, {1}, 1},
       {{1003}, {1000}, {1}, 3}},
      {"bias row at an offset",
       {{4, 64}, {4, 64}, {64, 1}, 0},
       {{72}, {64}, {1}, 8},
       {{4, 64}, {4, 64}, {64, 1}, 0}},
  };
  uint64_t salt = s;
  for (const auto& c : cases) {
    const View& av = std::get<1>(c);
    const View& bv = std::get<2>(c);
    const View& ov = std::get<3>(c);
    const std::string what = label(std::get<0>(c), salt);
    SCOPED_TRACE(what);
    Tensor a_base = kf_test::make_tensor(ctx(), dtype(), av.base_shape);
    Tensor b_base = kf_test::make_tensor(ctx(), dtype(), bv.base_shape);
    Tensor out_base = kf_test::make_tensor(ctx(), dtype(), ov.base_shape);
    Tensor a = make_view(a_base, dtype(), av.shape, av.strides, av.offset);
    Tensor b = make_view(b_base, dtype(), bv.shape, bv.strides, bv.offset);
    Tensor out = make_view(out_base, dtype(), ov.shape, ov.strides, ov.offset);
    ASSERT_TRUE(a.t && b.t && out.t);
    // Inputs are written through the packed bases and read back through the views' offsets, so
    // the expected values do not depend on the library's own strided copies.
    const auto a_values =
        gather(fill(a_base, dtype(), static_cast<size_t>(kf_test::numel(av.base_shape)), ++salt),
               view_offsets(av.shape, av.strides, av.offset));
    const auto b_values =
        gather(fill(b_base, dtype(), static_cast<size_t>(kf_test::numel(bv.base_shape)), ++salt),
               view_offsets(bv.shape, bv.strides, bv.offset));
    kf_test::poison(out_base);
    KF_ASSERT_OK(call(op(), ctx(), a, b, out, act()));
    const auto want = reference(op(), act(), a_values, av.shape, b_values, bv.shape);
    kf_test::expect_close(kf_test::download(out), want, tolerance(dtype()), what);
    // Nothing outside the view was written.
    std::vector<double> whole = kf_test::download(out_base);
    std::vector<bool> inside(whole.size(), false);
    for (int64_t o : view_offsets(ov.shape, ov.strides, ov.offset))
      inside[static_cast<size_t>(o)] = true;
    for (size_t i = 0; i < whole.size(); ++i) {
      if (!inside[i]) {
        EXPECT_TRUE(std::isnan(whole[i]))
            << what << ": element " << i << " outside out was written";
      }
    }
  }
}

TEST_P(ElementwiseNumeric, InPlace) {
  const uint64_t s = seed(200);
  const Shape shape{9, 13};
  {
    SCOPED_TRACE(label("out is a", s));
    Tensor a = kf_test::make_tensor(ctx(), dtype(), shape);
    Tensor b = kf_test::make_tensor(ctx(), dtype(), {13});
    const auto av = fill(a, dtype(), 9 * 13, s);
    const auto bv = fill(b, dtype(), 13, s + 1);
    KF_ASSERT_OK(call(op(), ctx(), a, b, a, act()));
    kf_test::expect_close(kf_test::download(a), reference(op(), act(), av, shape, bv, {13}),
                          tolerance(dtype()), label("out is a", s));
  }
  {  // a and out are distinct handles describing the same elements (a transposed view)
    SCOPED_TRACE(label("out is a's view", s + 2));
    Tensor base = kf_test::make_tensor(ctx(), dtype(), {13, 9});
    Tensor a = make_view(base, dtype(), shape, {1, 9}, 0);
    Tensor out = make_view(base, dtype(), shape, {1, 9}, 0);
    Tensor b = kf_test::make_tensor(ctx(), dtype(), shape);
    const auto av = fill(a, dtype(), 9 * 13, s + 2);
    const auto bv = fill(b, dtype(), 9 * 13, s + 3);
    KF_ASSERT_OK(call(op(), ctx(), a, b, out, act()));
    kf_test::expect_close(kf_test::download(out), reference(op(), act(), av, shape, bv, shape),
                          tolerance(dtype()), label("out is a's view", s + 2));
  }
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  return std::string(dtype_name(std::get<0>(info.param))) + "_" + op_name(std::get<1>(info.param)) +
         "_" + activation_name(std::get<2>(info.param));
}

INSTANTIATE_TEST_SUITE_P(
    AllTypes, ElementwiseNumeric,
    ::testing::Combine(::testing::Values(KF_DTYPE_FLOAT32, KF_DTYPE_FLOAT16, KF_DTYPE_BFLOAT16,
                                         KF_DTYPE_FLOAT64),
                       ::testing::Values(Op::add, Op::mul),
                       ::testing::Values(KF_ACTIVATION_NONE, KF_ACTIVATION_RELU, KF_ACTIVATION_GELU,
                                         KF_ACTIVATION_GELU_TANH, KF_ACTIVATION_SILU,
                                         KF_ACTIVATION_TANH, KF_ACTIVATION_SIGMOID)),
    param_name);

// ---- large tensors: many grid-stride iterations on CUDA, many chunks on the CPU pool
// --------------

using LargeParam = std::tuple<kf_dtype_t, Op>;

class ElementwiseLarge : public ::testing::TestWithParam<LargeParam>, protected DeviceTest {
 protected:
  void SetUp() override {
    KF_REQUIRE_DEVICE();
    start();
    ASSERT_NE(ctx(), nullptr);
  }
};

TEST_P(ElementwiseLarge, DenseScalarBiasAndStrided) {
  const kf_dtype_t dtype = std::get<0>(GetParam());
  const Op op = std::get<1>(GetParam());
  const uint64_t s = base_seed() + 7919u * static_cast<uint64_t>(dtype) + static_cast<uint64_t>(op);
  const std::vector<std::tuple<Shape, Shape, kf_activation_t>> cases = {
      {{5000011}, {5000011}, KF_ACTIVATION_GELU},       // dense, several grid passes, odd tail
      {{3000017}, {1}, KF_ACTIVATION_SILU},             // scalar
      {{1024, 2048}, {2048}, KF_ACTIVATION_GELU_TANH},  // bias, vectorised rows
      // bias rows whose vector count has a large odd factor (2049): no grid makes every pass
      // start on the same columns, so each pass looks its bias vectors up again
      {{160, 16392}, {16392}, KF_ACTIVATION_RELU},
      {{2049, 1001}, {2049, 1}, KF_ACTIVATION_SIGMOID},  // column broadcast: strided path
  };
  uint64_t salt = s;
  for (const auto& c : cases) {
    const Shape& a_shape = std::get<0>(c);
    const Shape& b_shape = std::get<1>(c);
    const kf_activation_t act = std::get<2>(c);
    const std::string what = std::string(dtype_name(dtype)) + " " + op_name(op) + " " +
                             activation_name(act) + " " + shape_str(a_shape) + " with b " +
                             shape_str(b_shape) + " (seed " + std::to_string(salt) + ")";
    SCOPED_TRACE(what);
    Tensor a = kf_test::make_tensor(ctx(), dtype, a_shape);
    Tensor b = kf_test::make_tensor(ctx(), dtype, b_shape);
    Tensor out = kf_test::make_tensor(ctx(), dtype, a_shape);
    const auto av = fill(a, dtype, static_cast<size_t>(kf_test::numel(a_shape)), ++salt);
    const auto bv = fill(b, dtype, static_cast<size_t>(kf_test::numel(b_shape)), ++salt);
    kf_test::poison(out);
    KF_ASSERT_OK(call(op, ctx(), a, b, out, act));
    kf_test::expect_close(kf_test::download(out), reference(op, act, av, a_shape, bv, b_shape),
                          tolerance(dtype), what);
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, ElementwiseLarge,
                         ::testing::Combine(::testing::Values(KF_DTYPE_FLOAT32, KF_DTYPE_FLOAT16,
                                                              KF_DTYPE_BFLOAT16, KF_DTYPE_FLOAT64),
                                            ::testing::Values(Op::add, Op::mul)),
                         [](const ::testing::TestParamInfo<LargeParam>& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) + "_" +
                                  op_name(std::get<1>(info.param));
                         });

// ---- streams, empty tensors, and every error path ---------------------------------------------

class Elementwise : public ::testing::Test, protected DeviceTest {
 protected:
  void SetUp() override {
    KF_REQUIRE_DEVICE();
    start();
    ASSERT_NE(ctx(), nullptr);
  }
  Tensor tensor(const Shape& shape, kf_dtype_t dtype = KF_DTYPE_FLOAT32) {
    return kf_test::make_tensor(ctx(), dtype, shape);
  }
  // Runs body, which must fail with code, for both ops; out must be unchanged (still poisoned).
  // Returns the last failure's message.
  std::string expect_error(kf_result_t code, const std::function<kf_result_t(Op)>& body,
                           kf_tensor_t* out, const std::string& what) {
    SCOPED_TRACE(what);
    std::string message;
    for (Op op : {Op::add, Op::mul}) {
      if (out) kf_test::poison(out);
      KF_EXPECT_ERR(body(op), code);
      message = kf_get_last_error_message();
      if (out) {
        for (double v : kf_test::download(out))
          EXPECT_TRUE(std::isnan(v)) << what << ": a failing call wrote out";
      }
    }
    return message;
  }
  // expect_error with KF_ERROR_INVALID_HANDLE, whose message must name the parameter `param`.
  void expect_dead_handle(const std::function<kf_result_t(Op)>& body, kf_tensor_t* out,
                          const std::string& param, const std::string& what) {
    const std::string message = expect_error(KF_ERROR_INVALID_HANDLE, body, out, what);
    EXPECT_NE(message.find(param + " ("), std::string::npos) << what << ": " << message;
  }
};

TEST_F(Elementwise, ExplicitStream) {
  kf_stream_t* stream = nullptr;
  KF_ASSERT_OK(kf_stream_create(ctx(), nullptr, &stream));
  Tensor a = tensor({257, 3}), b = tensor({3}), out = tensor({257, 3});
  const auto av = fill(a, KF_DTYPE_FLOAT32, 771, base_seed());
  const auto bv = fill(b, KF_DTYPE_FLOAT32, 3, base_seed() + 1);
  kf_test::poison(out);
  KF_ASSERT_OK(kf_fused_elementwise_mul_activation(ctx(), a, b, out, KF_ACTIVATION_SILU, stream));
  KF_ASSERT_OK(kf_stream_synchronize(stream));
  kf_test::expect_close(kf_test::download(out),
                        reference(Op::mul, KF_ACTIVATION_SILU, av, {257, 3}, bv, {3}),
                        kf_test::tolerance(KF_DTYPE_FLOAT32), "explicit stream");
  KF_ASSERT_OK(kf_stream_destroy(stream));
}

// Every call reads what the call before it wrote and overwrites what that call read, queued
// back to back on one stream. On sm_90 the CUDA kernels are dependent launches that may start
// while the kernel before them still runs, so this checks that none of them reads or writes
// before that kernel has finished. In the transposed case each call reads every part of the
// previous call's output in another order than it was written, so an early read is likely to
// meet stale data wherever it happens. Integer-valued data keeps every sum exact in f32.
TEST_F(Elementwise, BackToBackCallsSeeEachOthersResults) {
  constexpr int kRounds = 50;
  struct Case {
    std::string what;
    Shape shape, b1_shape, b2_shape;  // y = x + b1, then x = y + b2 (or y^T + b2), kRounds times
    bool transposed;
  };
  const int64_t n = (int64_t{1} << 20) + 3;
  const std::vector<Case> cases = {
      {"dense", {n}, {n}, {n}, false},
      {"bias row", {512, 2052}, {2052}, {2052}, false},
      {"column broadcast (strided kernel)", {1027, 1021}, {1027, 1}, {1027, 1}, false},
      {"dense, then a transposed read (strided kernel)", {1021, 1021}, {1021, 1021}, {1021}, true},
  };
  uint64_t salt = base_seed();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const size_t count = static_cast<size_t>(kf_test::numel(c.shape));
    // x0 in [-3000, 3000], b1 and b2 nonzero in [-10, 10], all whole numbers.
    const auto whole = [&](const Shape& shape, double scale, bool nonzero) {
      std::vector<double> v =
          kf_test::random_values(static_cast<size_t>(kf_test::numel(shape)), ++salt);
      for (double& e : v) e = std::round(e * scale) + (nonzero ? (e < 0 ? -1.0 : 1.0) : 0.0);
      return v;
    };
    const std::vector<double> x0 = whole(c.shape, 1000.0, false);
    const std::vector<double> b1 = whole(c.b1_shape, 3.0, true);
    const std::vector<double> b2 = whole(c.b2_shape, 3.0, true);
    Tensor x = tensor(c.shape), y = tensor(c.shape);
    Tensor b1_t = tensor(c.b1_shape), b2_t = tensor(c.b2_shape);
    const int64_t side = c.shape[0];
    Tensor y_read = c.transposed ? make_view(y, KF_DTYPE_FLOAT32, c.shape, {1, side}, 0) : Tensor();
    kf_tensor_t* second_input = c.transposed ? static_cast<kf_tensor_t*>(y_read) : y;
    kf_test::upload(x, x0);
    kf_test::upload(b1_t, b1);
    kf_test::upload(b2_t, b2);
    kf_test::poison(y);
    for (int r = 0; r < kRounds; ++r) {
      KF_ASSERT_OK(
          kf_fused_elementwise_add_activation(ctx(), x, b1_t, y, KF_ACTIVATION_NONE, nullptr));
      KF_ASSERT_OK(kf_fused_elementwise_add_activation(ctx(), second_input, b2_t, x,
                                                       KF_ACTIVATION_NONE, nullptr));
    }
    // The same rounds on the host, in double.
    std::vector<double> x_want = x0, y_want(count), read(count);
    for (int r = 0; r < kRounds; ++r) {
      y_want = reference(Op::add, KF_ACTIVATION_NONE, x_want, c.shape, b1, c.b1_shape);
      read = y_want;
      if (c.transposed) {
        for (int64_t i = 0; i < side; ++i)
          for (int64_t j = 0; j < side; ++j)
            read[static_cast<size_t>(i * side + j)] = y_want[static_cast<size_t>(j * side + i)];
      }
      x_want = reference(Op::add, KF_ACTIVATION_NONE, read, c.shape, b2, c.b2_shape);
    }
    kf_test::expect_close(kf_test::download(x), x_want, 0.0, c.what + ": x");
    kf_test::expect_close(kf_test::download(y), y_want, 0.0, c.what + ": y");
  }
}

#if defined(KF_TEST_CUDA)
// The same chain captured into a CUDA graph from a stream of the context (relaxed capture) and
// replayed: on sm_90 the captured launches are dependent launches, and the graph keeps their
// order. Every kernel and occupancy query is looked up once before the capture.
TEST_F(Elementwise, CapturedIntoACudaGraph) {
  constexpr int kPairs = 10, kReplays = 3;
  const Shape shape = {1021, 1021}, b1_shape = {1021, 1021}, b2_shape = {1021};
  const size_t count = static_cast<size_t>(kf_test::numel(shape));
  uint64_t salt = base_seed() + 77;
  const auto whole = [&](const Shape& sh, double scale) {
    std::vector<double> v = kf_test::random_values(static_cast<size_t>(kf_test::numel(sh)), ++salt);
    for (double& e : v) e = std::round(e * scale) + (e < 0 ? -1.0 : 1.0);
    return v;
  };
  const std::vector<double> x0 = whole(shape, 1000.0), b1 = whole(b1_shape, 3.0),
                            b2 = whole(b2_shape, 3.0);
  kf_stream_t* stream = nullptr;
  KF_ASSERT_OK(kf_stream_create(ctx(), nullptr, &stream));
  void* native = nullptr;
  KF_ASSERT_OK(kf_stream_get_native(stream, &native));
  const auto cs = static_cast<cudaStream_t>(native);
  Tensor x = tensor(shape), y = tensor(shape), b1_t = tensor(b1_shape), b2_t = tensor(b2_shape);
  Tensor y_t = make_view(y, KF_DTYPE_FLOAT32, shape, {1, shape[0]}, 0);  // y transposed
  kf_test::upload(x, x0);
  kf_test::upload(b1_t, b1);
  kf_test::upload(b2_t, b2);
  // Both kernels twice on the stream before the capture (their handles and grids cached, and
  // every tensor's allocation known complete, so that no call waits on an outside event while
  // captured), then x restored.
  for (int warm = 0; warm < 2; ++warm) {
    KF_ASSERT_OK(
        kf_fused_elementwise_add_activation(ctx(), x, b1_t, y, KF_ACTIVATION_NONE, stream));
    KF_ASSERT_OK(
        kf_fused_elementwise_add_activation(ctx(), y_t, b2_t, x, KF_ACTIVATION_NONE, stream));
    KF_ASSERT_OK(kf_stream_synchronize(stream));
  }
  kf_test::upload(x, x0);

  ASSERT_EQ(cudaStreamBeginCapture(cs, cudaStreamCaptureModeRelaxed), cudaSuccess);
  for (int r = 0; r < kPairs; ++r) {
    KF_ASSERT_OK(
        kf_fused_elementwise_add_activation(ctx(), x, b1_t, y, KF_ACTIVATION_NONE, stream));
    KF_ASSERT_OK(
        kf_fused_elementwise_add_activation(ctx(), y_t, b2_t, x, KF_ACTIVATION_NONE, stream));
  }
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(cs, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int k = 0; k < kReplays; ++k) ASSERT_EQ(cudaGraphLaunch(exec, cs), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(cs), cudaSuccess);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);

  // x <- (x + b1)^T + b2, kPairs * kReplays times, on the host in double.
  const int64_t side = shape[0];
  std::vector<double> x_want = x0, y_want(count), read(count);
  for (int r = 0; r < kPairs * kReplays; ++r) {
    y_want = reference(Op::add, KF_ACTIVATION_NONE, x_want, shape, b1, b1_shape);
    for (int64_t i = 0; i < side; ++i)
      for (int64_t j = 0; j < side; ++j)
        read[static_cast<size_t>(i * side + j)] = y_want[static_cast<size_t>(j * side + i)];
    x_want = reference(Op::add, KF_ACTIVATION_NONE, read, shape, b2, b2_shape);
  }
  kf_test::expect_close(kf_test::download(x), x_want, 0.0, "graph replays: x");
  kf_test::expect_close(kf_test::download(y), y_want, 0.0, "graph replays: y");
  KF_ASSERT_OK(kf_stream_destroy(stream));
}
#endif

TEST_F(Elementwise, EmptyTensorsSucceed) {
  Tensor a = tensor({0, 5}), b = tensor({5}), out = tensor({0, 5});
  KF_ASSERT_OK(kf_fused_elementwise_add_activation(ctx(), a, b, out, KF_ACTIVATION_GELU, nullptr));
  Tensor b_empty = tensor({0, 1});
  KF_ASSERT_OK(
      kf_fused_elementwise_mul_activation(ctx(), a, b_empty, out, KF_ACTIVATION_NONE, nullptr));
}

TEST_F(Elementwise, ReadsOfOverlappingInputsAreFine) {
  Tensor a = tensor({4, 6}), out = tensor({4, 6});
  const auto av = fill(a, KF_DTYPE_FLOAT32, 24, base_seed());
  kf_test::poison(out);
  KF_ASSERT_OK(kf_fused_elementwise_mul_activation(ctx(), a, a, out, KF_ACTIVATION_NONE, nullptr));
  kf_test::expect_close(kf_test::download(out),
                        reference(Op::mul, KF_ACTIVATION_NONE, av, {4, 6}, av, {4, 6}),
                        kf_test::tolerance(KF_DTYPE_FLOAT32), "a * a");
}

TEST_F(Elementwise, NullHandles) {
  Tensor a = tensor({3, 5}), b = tensor({5}), out = tensor({3, 5});
  expect_error(
      KF_ERROR_INVALID_HANDLE,
      [&](Op op) { return call(op, nullptr, a, b, out, KF_ACTIVATION_NONE); }, out, "NULL ctx");
  expect_error(
      KF_ERROR_INVALID_HANDLE,
      [&](Op op) { return call(op, ctx(), nullptr, b, out, KF_ACTIVATION_NONE); }, out, "NULL a");
  expect_error(
      KF_ERROR_INVALID_HANDLE,
      [&](Op op) { return call(op, ctx(), a, nullptr, out, KF_ACTIVATION_NONE); }, out, "NULL b");
  expect_error(
      KF_ERROR_INVALID_HANDLE,
      [&](Op op) { return call(op, ctx(), a, b, nullptr, KF_ACTIVATION_NONE); }, nullptr,
      "NULL out");
}

TEST_F(Elementwise, DestroyedHandles) {
  Tensor a = tensor({3, 5}), b = tensor({5}), out = tensor({3, 5});
  kf_tensor_desc_t desc = kf_test::make_desc(KF_DTYPE_FLOAT32, {5});
  kf_tensor_t* gone = nullptr;
  KF_ASSERT_OK(kf_tensor_create(ctx(), &desc, &gone));
  KF_ASSERT_OK(kf_tensor_destroy(gone));  // `gone` is a dangling handle from here on
  expect_dead_handle([&](Op op) { return call(op, ctx(), a, gone, out, KF_ACTIVATION_NONE); }, out,
                     "b", "destroyed b");
  kf_stream_t* stream = nullptr;
  KF_ASSERT_OK(kf_stream_create(ctx(), nullptr, &stream));
  KF_ASSERT_OK(kf_stream_destroy(stream));
  expect_dead_handle([&](Op op) { return call(op, ctx(), a, b, out, KF_ACTIVATION_NONE, stream); },
                     out, "s", "destroyed stream");

  // Handles that this thread has just used successfully (and so holds as recently checked) are
  // refused once destroyed: every handle of a call, in the order of the parameters.
  kf_tensor_t* used_b = nullptr;
  kf_tensor_t* used_out = nullptr;
  kf_stream_t* used_stream = nullptr;
  KF_ASSERT_OK(kf_tensor_create(ctx(), &desc, &used_b));
  kf_tensor_desc_t out_desc = kf_test::make_desc(KF_DTYPE_FLOAT32, {3, 5});
  KF_ASSERT_OK(kf_tensor_create(ctx(), &out_desc, &used_out));
  KF_ASSERT_OK(kf_stream_create(ctx(), nullptr, &used_stream));
  kf_test::upload(used_b, std::vector<double>(5, 1.5));
  KF_ASSERT_OK(kf_fused_elementwise_add_activation(ctx(), a, used_b, used_out, KF_ACTIVATION_NONE,
                                                   used_stream));
  KF_ASSERT_OK(kf_stream_synchronize(used_stream));
  KF_ASSERT_OK(kf_tensor_destroy(used_out));
  expect_dead_handle(
      [&](Op op) { return call(op, ctx(), a, used_b, used_out, KF_ACTIVATION_NONE, used_stream); },
      nullptr, "out", "out destroyed after a call that used it");
  KF_ASSERT_OK(kf_stream_destroy(used_stream));
  KF_ASSERT_OK(kf_tensor_destroy(used_b));
  // Both b and the stream are dead now: the first of them in parameter order is named.
  expect_dead_handle(
      [&](Op op) { return call(op, ctx(), a, used_b, out, KF_ACTIVATION_NONE, used_stream); }, out,
      "b", "b and s destroyed after a call that used them");
  expect_error(
      KF_ERROR_INVALID_HANDLE,
      [&](Op op) {
        return call(op, reinterpret_cast<kf_context_t*>(a.t), a, b, out, KF_ACTIVATION_NONE);
      },
      out, "tensor passed as ctx");
}

TEST_F(Elementwise, ForeignContext) {
  kf_test::Context other;
  ASSERT_NE(other.ctx, nullptr);
  Tensor a = tensor({3, 5}), b = tensor({5}), out = tensor({3, 5});
  Tensor foreign = kf_test::make_tensor(other, KF_DTYPE_FLOAT32, {5});
  Tensor foreign_out = kf_test::make_tensor(other, KF_DTYPE_FLOAT32, {3, 5});
  expect_error(
      KF_ERROR_DEVICE_MISMATCH,
      [&](Op op) { return call(op, ctx(), a, foreign, out, KF_ACTIVATION_NONE); }, out,
      "b from another context");
  expect_error(
      KF_ERROR_DEVICE_MISMATCH,
      [&](Op op) { return call(op, ctx(), a, b, foreign_out, KF_ACTIVATION_NONE); }, foreign_out,
      "out from another context");
  kf_stream_t* stream = nullptr;
  KF_ASSERT_OK(kf_stream_create(other, nullptr, &stream));
  expect_error(
      KF_ERROR_DEVICE_MISMATCH,
      [&](Op op) { return call(op, ctx(), a, b, out, KF_ACTIVATION_NONE, stream); }, out,
      "stream from another context");
  KF_ASSERT_OK(kf_stream_destroy(stream));
}

TEST_F(Elementwise, ShapeMismatch) {
  Tensor a = tensor({3, 5}), out = tensor({3, 5});
  Tensor b34 = tensor({3, 4}), b235 = tensor({2, 3, 5}), b1_5 = tensor({2, 5}),
         out34 = tensor({3, 4});
  Tensor out_flat = tensor({15});
  const std::string message = expect_error(
      KF_ERROR_SHAPE_MISMATCH,
      [&](Op op) { return call(op, ctx(), a, b34, out, KF_ACTIVATION_NONE); }, out,
      "b [3,4] onto [3,5]");
  EXPECT_NE(message.find("[3,4]"), std::string::npos) << message;
  EXPECT_NE(message.find("[3,5]"), std::string::npos) << message;
  expect_error(
      KF_ERROR_SHAPE_MISMATCH,
      [&](Op op) { return call(op, ctx(), a, b235, out, KF_ACTIVATION_NONE); }, out,
      "b has more dims than a");
  expect_error(
      KF_ERROR_SHAPE_MISMATCH,
      [&](Op op) { return call(op, ctx(), a, b1_5, out, KF_ACTIVATION_NONE); }, out,
      "b [2,5] onto [3,5]");
  expect_error(
      KF_ERROR_SHAPE_MISMATCH,
      [&](Op op) { return call(op, ctx(), a, a, out34, KF_ACTIVATION_NONE); }, out34,
      "out [3,4] for a [3,5]");
  expect_error(
      KF_ERROR_SHAPE_MISMATCH,
      [&](Op op) { return call(op, ctx(), a, a, out_flat, KF_ACTIVATION_NONE); }, out_flat,
      "out [15] for a [3,5]");
}

TEST_F(Elementwise, DtypeMismatch) {
  Tensor a = tensor({3, 5}), out = tensor({3, 5});
  Tensor b16 = tensor({5}, KF_DTYPE_FLOAT16), out64 = tensor({3, 5}, KF_DTYPE_FLOAT64);
  expect_error(
      KF_ERROR_DTYPE_MISMATCH,
      [&](Op op) { return call(op, ctx(), a, b16, out, KF_ACTIVATION_NONE); }, out,
      "f16 b with f32 a");
  expect_error(
      KF_ERROR_DTYPE_MISMATCH,
      [&](Op op) { return call(op, ctx(), a, a, out64, KF_ACTIVATION_NONE); }, out64,
      "f64 out with f32 a");
  for (kf_dtype_t dtype : {KF_DTYPE_INT8, KF_DTYPE_UINT8, KF_DTYPE_INT32, KF_DTYPE_INT64}) {
    Tensor ia = tensor({3, 5}, dtype), ib = tensor({5}, dtype), iout = tensor({3, 5}, dtype);
    expect_error(
        KF_ERROR_DTYPE_MISMATCH,
        [&](Op op) { return call(op, ctx(), ia, ib, iout, KF_ACTIVATION_NONE); }, nullptr,
        std::string("integer dtype ") + std::to_string(dtype));
  }
}

TEST_F(Elementwise, UnknownActivation) {
  Tensor a = tensor({3, 5}), b = tensor({5}), out = tensor({3, 5});
  // Called the way a C program (or ctypes) passes an out-of-range enum: as a plain int. Going
  // through a kf_activation_t variable in C++ would itself be undefined (and trips UBSan).
  using RawEntry = kf_result_t (*)(kf_context_t*, const kf_tensor_t*, const kf_tensor_t*,
                                   kf_tensor_t*, int32_t, kf_stream_t*);
  static_assert(sizeof(kf_activation_t) == sizeof(int32_t), "enum passed as int32_t");
  for (int32_t act : {-1, 7, 1000}) {
    expect_error(
        KF_ERROR_INVALID_ARGUMENT,
        [&](Op op) {
          RawEntry entry =
              reinterpret_cast<RawEntry>(op == Op::add ? &kf_fused_elementwise_add_activation
                                                       : &kf_fused_elementwise_mul_activation);
          return entry(ctx(), a, b, out, act, nullptr);
        },
        out, "activation " + std::to_string(act));
  }
}

TEST_F(Elementwise, OverlappingOutput) {
  Tensor base = tensor({16});
  Tensor a = make_view(base, KF_DTYPE_FLOAT32, {8}, {1}, 0);
  Tensor shifted = make_view(base, KF_DTYPE_FLOAT32, {8}, {1}, 4);
  Tensor b = tensor({8});
  fill(base, KF_DTYPE_FLOAT32, 16, base_seed());
  fill(b, KF_DTYPE_FLOAT32, 8, base_seed() + 1);
  expect_error(
      KF_ERROR_INVALID_ARGUMENT,
      [&](Op op) { return call(op, ctx(), a, b, shifted, KF_ACTIVATION_NONE); }, nullptr,
      "out partially overlaps a");
  expect_error(
      KF_ERROR_INVALID_ARGUMENT,
      [&](Op op) { return call(op, ctx(), b, a, shifted, KF_ACTIVATION_NONE); }, nullptr,
      "out partially overlaps b");
  expect_error(
      KF_ERROR_INVALID_ARGUMENT,
      [&](Op op) { return call(op, ctx(), b, a, a, KF_ACTIVATION_NONE); }, nullptr, "out is b");
  Tensor every_other = make_view(base, KF_DTYPE_FLOAT32, {8}, {2}, 0);
  expect_error(
      KF_ERROR_INVALID_ARGUMENT,
      [&](Op op) { return call(op, ctx(), a, b, every_other, KF_ACTIVATION_NONE); }, nullptr,
      "out a different view of a's memory");
}

TEST_F(Elementwise, UnwritableOutput) {
  Tensor a = tensor({3, 3}), b = tensor({3}), out = tensor({3, 3});
  Tensor row = tensor({3});
  Tensor broadcast_out = make_view(row, KF_DTYPE_FLOAT32, {3, 3}, {0, 1}, 0);
  expect_error(
      KF_ERROR_INVALID_ARGUMENT,
      [&](Op op) { return call(op, ctx(), a, b, broadcast_out, KF_ACTIVATION_NONE); }, row,
      "zero-stride out");
  Tensor four = tensor({4});
  Tensor self_overlapping = make_view(four, KF_DTYPE_FLOAT32, {3, 2}, {1, 1}, 0);
  Tensor a32 = tensor({3, 2}), b2 = tensor({2});
  expect_error(
      KF_ERROR_INVALID_ARGUMENT,
      [&](Op op) { return call(op, ctx(), a32, b2, self_overlapping, KF_ACTIVATION_NONE); }, four,
      "self-overlapping out");

  DLManagedTensorVersioned* exported = nullptr;
  KF_ASSERT_OK(kf_tensor_to_dlpack(out, &exported));
  exported->flags |= DLPACK_FLAG_BITMASK_READ_ONLY;
  kf_tensor_t* imported = nullptr;
  kf_result_t r = kf_tensor_from_dlpack(ctx(), exported, &imported);
  if (r != KF_SUCCESS) exported->deleter(exported);
  KF_ASSERT_OK(r);
  Tensor read_only(imported);
  expect_error(
      KF_ERROR_INVALID_ARGUMENT,
      [&](Op op) { return call(op, ctx(), a, b, read_only, KF_ACTIVATION_NONE); }, out,
      "read-only out");
  // A read-only tensor is a fine input: a = read_only + b, written over a poisoned a.
  const std::vector<double> ov = kf_test::random_values(9, 91), bv = kf_test::random_values(3, 92);
  kf_test::upload(out, ov);
  kf_test::upload(b, bv);
  kf_test::poison(a);
  KF_ASSERT_OK(
      kf_fused_elementwise_add_activation(ctx(), read_only, b, a, KF_ACTIVATION_NONE, nullptr));
  kf_test::expect_close(kf_test::download(a),
                        reference(Op::add, KF_ACTIVATION_NONE, ov, {3, 3}, bv, {3}),
                        kf_test::tolerance(KF_DTYPE_FLOAT32), "read-only input");
}

}  // namespace
