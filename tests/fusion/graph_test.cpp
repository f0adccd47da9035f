// The fusion engine's C entries on a CPU context: every builder rule and its message, handles,
// out-params left alone on failure, compile options and kernel facts, the structure hash (equal
// for value-only differences), and launch validation with value overrides observed in results.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kernel_fusion/kernel_fusion.h"
#include "tests/common/test_util.hpp"

namespace {

using kf_test::download;
using kf_test::make_desc;
using kf_test::make_tensor;
using kf_test::Tensor;
using kf_test::upload;

// The call fails with `code` and a message containing `text`.
#define EXPECT_FAILS(expr, code, text)                                       \
  do {                                                                       \
    const kf_result_t r_ = (expr);                                           \
    EXPECT_EQ(r_, code) << #expr << ": " << kf_result_string(r_) << ": "     \
                        << kf_get_last_error_message();                      \
    const std::string m_ = kf_get_last_error_message();                      \
    EXPECT_NE(m_.find(text), std::string::npos)                              \
        << #expr << ": message \"" << m_ << "\" lacks \"" << (text) << "\""; \
  } while (0)

constexpr int32_t kUntouched = -777;

// A C caller passes enums as plain ints; holding an out-of-range value in a C++ enum variable
// would itself be undefined, so these call through int-typed signatures.
static_assert(sizeof(kf_unary_op_t) == sizeof(int32_t), "enums are passed as int32_t");
using RawUnary = kf_result_t (*)(kf_graph_t*, int32_t, int32_t, int32_t*);
using RawBinary = kf_result_t (*)(kf_graph_t*, int32_t, int32_t, int32_t, int32_t*);
using RawCast = kf_result_t (*)(kf_graph_t*, int32_t, int32_t, int32_t, int32_t*);
const RawUnary unary_raw = reinterpret_cast<RawUnary>(&kf_graph_unary);
const RawUnary activation_raw = reinterpret_cast<RawUnary>(&kf_graph_activation);
const RawUnary color_raw = reinterpret_cast<RawUnary>(&kf_graph_color_convert);
const RawBinary binary_raw = reinterpret_cast<RawBinary>(&kf_graph_binary);
const RawCast cast_raw = reinterpret_cast<RawCast>(&kf_graph_cast);

// Stores an int into an enum field through memcpy (never loaded as the enum by the test).
template <class E>
void set_raw(E* field, int32_t value) {
  static_assert(sizeof(E) == sizeof(int32_t), "enum fields are int-sized");
  std::memcpy(field, &value, sizeof value);
}

class GraphTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(ctx.ctx, nullptr);
    KF_ASSERT_OK(kf_graph_create(ctx, &g));
  }
  void TearDown() override {
    kf_graph_destroy(g);
    for (kf_fused_kernel_t* k : kernels) kf_fused_kernel_destroy(k);
  }

  int32_t tensor_input(kf_dtype_t dtype, int32_t rank, kf_graph_t* graph = nullptr) {
    kf_graph_input_desc_t d = KF_GRAPH_INPUT_DESC_INIT;
    d.dtype = dtype;
    d.rank = rank;
    return made(kf_graph_input(graph ? graph : g, &d, &id_), "kf_graph_input");
  }
  int32_t image_input(kf_dtype_t dtype, int32_t channels, kf_graph_t* graph = nullptr) {
    kf_graph_input_desc_t d = KF_GRAPH_INPUT_DESC_INIT;
    d.kind = KF_INPUT_IMAGE;
    d.dtype = dtype;
    d.rank = 3;
    d.channels = channels;
    return made(kf_graph_input(graph ? graph : g, &d, &id_), "kf_graph_input(image)");
  }
  int32_t nv12_input() {
    kf_graph_input_desc_t d = KF_GRAPH_INPUT_DESC_INIT;
    d.kind = KF_INPUT_NV12;
    d.dtype = KF_DTYPE_UINT8;
    d.rank = 2;
    return made(kf_graph_input(g, &d, &id_), "kf_graph_input(nv12)");
  }
  int32_t scalar(double v, kf_graph_t* graph = nullptr) {
    return made(kf_graph_scalar(graph ? graph : g, v, &id_), "kf_graph_scalar");
  }
  int32_t constant(std::vector<double> v) {
    return made(kf_graph_constant(g, static_cast<int32_t>(v.size()), v.data(), &id_),
                "kf_graph_constant");
  }
  int32_t unary(kf_unary_op_t op, int32_t x) {
    return made(kf_graph_unary(g, op, x, &id_), "kf_graph_unary");
  }
  int32_t binary(kf_binary_op_t op, int32_t a, int32_t b, kf_graph_t* graph = nullptr) {
    return made(kf_graph_binary(graph ? graph : g, op, a, b, &id_), "kf_graph_binary");
  }
  int32_t made_where(int32_t cond, int32_t a, int32_t b) {
    return made(kf_graph_where(g, cond, a, b, &id_), "kf_graph_where");
  }
  int32_t made_clamp(int32_t x, int32_t lo, int32_t hi) {
    return made(kf_graph_clamp(g, x, lo, hi, &id_), "kf_graph_clamp");
  }
  int32_t made_color(int32_t x, kf_color_conversion_t conversion) {
    return made(kf_graph_color_convert(g, x, conversion, &id_), "kf_graph_color_convert");
  }
  int32_t cast(int32_t x, kf_dtype_t dtype, kf_cast_mode_t mode = KF_CAST_WRAP) {
    return made(kf_graph_cast(g, x, dtype, mode, &id_), "kf_graph_cast");
  }
  int32_t read(int32_t image, const kf_image_read_desc_t& desc) {
    return made(kf_graph_read_image(g, image, &desc, &id_), "kf_graph_read_image");
  }
  int32_t read(int32_t image) {
    const kf_image_read_desc_t desc = KF_IMAGE_READ_DESC_INIT;
    return read(image, desc);
  }
  void output(int32_t node, kf_output_layout_t layout = KF_OUTPUT_AS_IS, int32_t batched = 0,
              kf_graph_t* graph = nullptr) {
    kf_graph_output_desc_t d = KF_GRAPH_OUTPUT_DESC_INIT;
    d.layout = layout;
    d.batched = batched;
    made(kf_graph_output(graph ? graph : g, node, &d, nullptr), "kf_graph_output");
  }
  kf_fused_kernel_t* compile(kf_graph_t* graph = nullptr, int32_t max_items = 1,
                             uint32_t flags = 0) {
    kf_compile_options_t o = KF_COMPILE_OPTIONS_INIT;
    o.max_items = max_items;
    o.flags = flags;
    kf_fused_kernel_t* k = nullptr;
    const kf_result_t r = kf_graph_compile(graph ? graph : g, &o, &k);
    EXPECT_EQ(r, KF_SUCCESS) << kf_get_last_error_message();
    if (k != nullptr) kernels.push_back(k);
#if defined(KF_TEST_NVRTC)
    // Builds with NVRTC also compile every kernel of the suite for both CI architectures, past
    // the disk cache, so that each run compiles anew and leaves nothing in the user's cache.
    kf_compile_options_t nvrtc = o;
    nvrtc.flags |= KF_COMPILE_NO_DISK_CACHE;
    for (int32_t sm : {80, 90}) {
      size_t cubin_bytes = 0;
      EXPECT_EQ(kf_graph_compile_for_arch(graph ? graph : g, &nvrtc, sm, &cubin_bytes, nullptr),
                KF_SUCCESS)
          << "sm_" << sm << ": " << kf_get_last_error_message();
      EXPECT_GT(cubin_bytes, 0u) << "sm_" << sm;
    }
#endif
    return k;
  }
  kf_fused_kernel_info_t info(const kf_fused_kernel_t* k) {
    kf_fused_kernel_info_t i{};
    i.struct_size = sizeof i;
    EXPECT_EQ(kf_fused_kernel_get_info(k, &i), KF_SUCCESS) << kf_get_last_error_message();
    return i;
  }

  kf_test::Context ctx;
  kf_graph_t* g = nullptr;
  std::vector<kf_fused_kernel_t*> kernels;

 private:
  int32_t made(kf_result_t r, const char* what) {
    EXPECT_EQ(r, KF_SUCCESS) << what << ": " << kf_get_last_error_message();
    return r == KF_SUCCESS ? id_ : -1;
  }
  int32_t id_ = -1;
};

// ---- handles

TEST_F(GraphTest, CreateAndDestroyCheckHandles) {
  kf_graph_t* other = reinterpret_cast<kf_graph_t*>(0x1);
  EXPECT_FAILS(kf_graph_create(nullptr, &other), KF_ERROR_INVALID_HANDLE, "ctx is NULL");
  EXPECT_EQ(other, reinterpret_cast<kf_graph_t*>(0x1));
  EXPECT_FAILS(kf_graph_create(ctx, nullptr), KF_ERROR_INVALID_ARGUMENT, "out is NULL");
  EXPECT_EQ(kf_graph_destroy(nullptr), KF_SUCCESS);

  KF_ASSERT_OK(kf_graph_create(ctx, &other));
  KF_ASSERT_OK(kf_graph_destroy(other));
  int32_t id = kUntouched;
  EXPECT_FAILS(kf_graph_scalar(other, 1.0, &id), KF_ERROR_INVALID_HANDLE, "not a live graph");
  EXPECT_EQ(id, kUntouched);
  EXPECT_FAILS(kf_graph_destroy(other), KF_ERROR_INVALID_HANDLE, "not a live graph");

  // A handle of another kind is refused by kind.
  Tensor t = make_tensor(ctx, KF_DTYPE_FLOAT32, {2});
  EXPECT_FAILS(kf_graph_scalar(reinterpret_cast<kf_graph_t*>(t.t), 1.0, &id),
               KF_ERROR_INVALID_HANDLE, "is a tensor, not a graph");
  EXPECT_FAILS(kf_fused_kernel_destroy(reinterpret_cast<kf_fused_kernel_t*>(g)),
               KF_ERROR_INVALID_HANDLE, "is a graph, not a fused kernel");
}

TEST_F(GraphTest, ContextDestroysItsGraphsAndKernels) {
  kf_context_config_t config = KF_CONTEXT_CONFIG_INIT;
  config.device_type = KF_DEVICE_CPU;
  kf_context_t* other = nullptr;
  KF_ASSERT_OK(kf_context_create(&config, &other));
  kf_graph_t* graph = nullptr;
  KF_ASSERT_OK(kf_graph_create(other, &graph));
  const int32_t x = tensor_input(KF_DTYPE_FLOAT32, 1, graph);
  output(binary(KF_BINARY_MUL, x, scalar(2.0, graph), graph), KF_OUTPUT_AS_IS, 0, graph);
  kf_fused_kernel_t* k = nullptr;
  KF_ASSERT_OK(kf_graph_compile(graph, nullptr, &k));
  KF_ASSERT_OK(kf_context_destroy(other));  // frees both (ASan's leak check watches)
  EXPECT_FAILS(kf_graph_destroy(graph), KF_ERROR_INVALID_HANDLE, "not a live graph");
  EXPECT_FAILS(kf_fused_kernel_destroy(k), KF_ERROR_INVALID_HANDLE, "not a live fused kernel");
  kf_fused_kernel_info_t i{};
  i.struct_size = sizeof i;
  EXPECT_FAILS(kf_fused_kernel_get_info(k, &i), KF_ERROR_INVALID_HANDLE, "not a live");
  EXPECT_FAILS(kf_graph_create(other, &graph), KF_ERROR_INVALID_HANDLE, "not a live context");
}

// ---- inputs

TEST_F(GraphTest, InputDescriptorIsValidated) {
  int32_t id = kUntouched;
  kf_graph_input_desc_t d = KF_GRAPH_INPUT_DESC_INIT;
  EXPECT_FAILS(kf_graph_input(g, nullptr, &id), KF_ERROR_INVALID_ARGUMENT, "desc is NULL");
  EXPECT_FAILS(kf_graph_input(g, &d, nullptr), KF_ERROR_INVALID_ARGUMENT, "out_node is NULL");
  d.struct_size = 8;
  EXPECT_FAILS(kf_graph_input(g, &d, &id), KF_ERROR_INVALID_ARGUMENT, "KF_GRAPH_INPUT_DESC_INIT");
  d = KF_GRAPH_INPUT_DESC_INIT;
  set_raw(&d.kind, 7);
  EXPECT_FAILS(kf_graph_input(g, &d, &id), KF_ERROR_INVALID_ARGUMENT, "kf_input_kind_t");
  d = KF_GRAPH_INPUT_DESC_INIT;
  set_raw(&d.dtype, 42);
  EXPECT_FAILS(kf_graph_input(g, &d, &id), KF_ERROR_DTYPE_MISMATCH, "not a kf_dtype_t");
  d = KF_GRAPH_INPUT_DESC_INIT;
  for (int32_t rank : {-1, KF_MAX_DIMS + 1}) {
    d.rank = rank;
    EXPECT_FAILS(kf_graph_input(g, &d, &id), KF_ERROR_INVALID_ARGUMENT, "rank 0..8");
  }
  d = KF_GRAPH_INPUT_DESC_INIT;
  d.kind = KF_INPUT_IMAGE;
  d.rank = 2;
  d.channels = 3;
  EXPECT_FAILS(kf_graph_input(g, &d, &id), KF_ERROR_INVALID_ARGUMENT, "[H, W, C], rank 3");
  d.rank = 3;
  for (int32_t channels : {0, 2, 5}) {
    d.channels = channels;
    EXPECT_FAILS(kf_graph_input(g, &d, &id), KF_ERROR_INVALID_ARGUMENT, "1, 3 or 4 channels");
  }
  d = KF_GRAPH_INPUT_DESC_INIT;
  d.kind = KF_INPUT_NV12;
  d.rank = 2;
  EXPECT_FAILS(kf_graph_input(g, &d, &id), KF_ERROR_DTYPE_MISMATCH, "NV12 frame is uint8");
  d.dtype = KF_DTYPE_UINT8;
  d.rank = 3;
  EXPECT_FAILS(kf_graph_input(g, &d, &id), KF_ERROR_INVALID_ARGUMENT, "rank 2");
  EXPECT_EQ(id, kUntouched);

  EXPECT_EQ(tensor_input(KF_DTYPE_FLOAT32, 0), 0);  // rank 0 (a scalar tensor) is fine
  EXPECT_EQ(tensor_input(KF_DTYPE_INT64, KF_MAX_DIMS), 1);
}

TEST_F(GraphTest, TensorAndImageInputsDoNotMix) {
  tensor_input(KF_DTYPE_FLOAT32, 2);
  kf_graph_input_desc_t d = KF_GRAPH_INPUT_DESC_INIT;
  d.kind = KF_INPUT_IMAGE;
  d.rank = 3;
  d.channels = 3;
  int32_t id = kUntouched;
  EXPECT_FAILS(kf_graph_input(g, &d, &id), KF_ERROR_INVALID_ARGUMENT, "cannot mix image inputs");

  kf_graph_t* image_graph = nullptr;
  KF_ASSERT_OK(kf_graph_create(ctx, &image_graph));
  image_input(KF_DTYPE_UINT8, 3, image_graph);
  d = KF_GRAPH_INPUT_DESC_INIT;
  EXPECT_FAILS(kf_graph_input(image_graph, &d, &id), KF_ERROR_INVALID_ARGUMENT,
               "cannot mix tensor inputs");
  EXPECT_EQ(id, kUntouched);
  KF_EXPECT_ERR(kf_graph_destroy(image_graph), KF_SUCCESS);
}

// ---- elementwise rules

TEST_F(GraphTest, UnknownNodesAndEnumsAreRefused) {
  const int32_t x = tensor_input(KF_DTYPE_FLOAT32, 1);
  int32_t id = kUntouched;
  for (int32_t bad : {-1, 1, 1000}) {
    EXPECT_FAILS(kf_graph_unary(g, KF_UNARY_NEG, bad, &id), KF_ERROR_INVALID_ARGUMENT,
                 "does not exist");
    EXPECT_FAILS(kf_graph_binary(g, KF_BINARY_ADD, x, bad, &id), KF_ERROR_INVALID_ARGUMENT,
                 "b is node");
  }
  EXPECT_FAILS(unary_raw(g, 7, x, &id), KF_ERROR_INVALID_ARGUMENT, "kf_unary_op_t");
  EXPECT_FAILS(unary_raw(g, -1, x, &id), KF_ERROR_INVALID_ARGUMENT, "kf_unary_op_t");
  EXPECT_FAILS(activation_raw(g, 7, x, &id), KF_ERROR_INVALID_ARGUMENT, "kf_activation_t");
  EXPECT_FAILS(binary_raw(g, 13, x, x, &id), KF_ERROR_INVALID_ARGUMENT, "kf_binary_op_t");
  EXPECT_FAILS(cast_raw(g, x, KF_DTYPE_INT8, 3, &id), KF_ERROR_INVALID_ARGUMENT, "kf_cast_mode_t");
  EXPECT_FAILS(cast_raw(g, x, 8, KF_CAST_WRAP, &id), KF_ERROR_DTYPE_MISMATCH, "kf_dtype_t");
  EXPECT_FAILS(kf_graph_unary(g, KF_UNARY_NEG, x, nullptr), KF_ERROR_INVALID_ARGUMENT,
               "out_node is NULL");
  EXPECT_EQ(id, kUntouched);
}

TEST_F(GraphTest, FloatingOnlyOpsRefuseIntegers) {
  const int32_t i = tensor_input(KF_DTYPE_INT32, 1);
  const int32_t f = tensor_input(KF_DTYPE_FLOAT16, 1);
  int32_t id = kUntouched;
  for (kf_unary_op_t op : {KF_UNARY_EXP, KF_UNARY_LOG, KF_UNARY_SQRT, KF_UNARY_RSQRT}) {
    EXPECT_FAILS(kf_graph_unary(g, op, i, &id), KF_ERROR_DTYPE_MISMATCH,
                 "needs a floating value, but x (node 0) is int32");
    EXPECT_GE(unary(op, f), 0);
  }
  for (kf_unary_op_t op : {KF_UNARY_NEG, KF_UNARY_ABS, KF_UNARY_SQUARE}) EXPECT_GE(unary(op, i), 0);
  EXPECT_FAILS(kf_graph_activation(g, KF_ACTIVATION_GELU, i, &id), KF_ERROR_DTYPE_MISMATCH,
               "activations need a floating value");
  KF_EXPECT_ERR(kf_graph_activation(g, KF_ACTIVATION_SILU, f, &id), KF_SUCCESS);
  EXPECT_FAILS(kf_graph_binary(g, KF_BINARY_POW, i, scalar(2.0), &id), KF_ERROR_DTYPE_MISMATCH,
               "pow needs floating operands");
  id = kUntouched;
  EXPECT_FAILS(kf_graph_unary(g, KF_UNARY_EXP, i, &id), KF_ERROR_DTYPE_MISMATCH, "int32");
  EXPECT_EQ(id, kUntouched);
}

TEST_F(GraphTest, BinaryOperandsShareADtype) {
  const int32_t f = tensor_input(KF_DTYPE_FLOAT32, 2);
  const int32_t i = tensor_input(KF_DTYPE_INT32, 1);
  int32_t id = kUntouched;
  EXPECT_FAILS(kf_graph_binary(g, KF_BINARY_ADD, f, i, &id), KF_ERROR_DTYPE_MISMATCH,
               "add: a (node 0) is float32 but b (node 1) is int32");
  EXPECT_EQ(id, kUntouched);
  const int32_t converted = cast(i, KF_DTYPE_FLOAT32);
  EXPECT_GE(binary(KF_BINARY_ADD, f, converted), 0);
}

// The bf16 nearest to an integer (ties to even), as its bits: x is exact in long double, and
// dividing by the quantum of x's binade (8 significant bits) and rounding is one rounding.
uint16_t bf16_bits_nearest(int64_t x) {
  const long double v = static_cast<long double>(x);
  if (x == 0) return 0;
  int exponent = 0;
  std::frexp(v, &exponent);  // |v| in [2^(exponent - 1), 2^exponent)
  const long double quantum = std::ldexp(1.0L, exponent - 8);
  const float rounded = static_cast<float>(std::nearbyint(v / quantum) * quantum);  // exact
  uint32_t bits = 0;
  std::memcpy(&bits, &rounded, sizeof bits);
  return static_cast<uint16_t>(bits >> 16);
}

// int64 to bf16 in every mode is one rounding. Through double first (53 bits), a value just past
// a bf16 midpoint could land on the midpoint and then round to even, the wrong way:
// 2^62 + 2^54 + 1 gave 2^62, not 2^62 + 2^55.
TEST_F(GraphTest, Int64ToBfloat16RoundsOnce) {
  std::vector<int64_t> values;
  for (int length = 54; length <= 63; ++length) {  // past double's 53 bits
    for (int64_t mantissa : {0x80, 0x81, 0xB5, 0xFE, 0xFF}) {
      const int shift = length - 8;
      const int64_t base = mantissa << shift, half = int64_t{1} << (shift - 1);
      for (int64_t x : {base + half, base + half + 1, base + half - 1, base + 1})
        for (int64_t sign : {1, -1}) values.push_back(sign * x);
    }
  }
  values.push_back(std::numeric_limits<int64_t>::max());
  values.push_back(std::numeric_limits<int64_t>::min());
  values.push_back(12345);
  for (kf_cast_mode_t mode : {KF_CAST_WRAP, KF_CAST_SATURATE, KF_CAST_SATURATE_ROUND}) {
    SCOPED_TRACE("mode " + std::to_string(mode));
    kf_graph_t* graph = nullptr;
    KF_ASSERT_OK(kf_graph_create(ctx, &graph));
    int32_t converted = 0;
    ASSERT_EQ(kf_graph_cast(graph, tensor_input(KF_DTYPE_INT64, 1, graph), KF_DTYPE_BFLOAT16, mode,
                            &converted),
              KF_SUCCESS)
        << kf_get_last_error_message();
    output(converted, KF_OUTPUT_AS_IS, 0, graph);
    kf_fused_kernel_t* k = compile(graph);
    kf_graph_destroy(graph);
    ASSERT_NE(k, nullptr);
    const int64_t n = static_cast<int64_t>(values.size());
    Tensor in = make_tensor(ctx, KF_DTYPE_INT64, {n});
    Tensor out = make_tensor(ctx, KF_DTYPE_BFLOAT16, {n});
    KF_ASSERT_OK(kf_tensor_copy_from_host(in, values.data(), values.size() * 8, nullptr));
    std::vector<uint16_t> got(values.size(), 0x7FC1);
    KF_ASSERT_OK(kf_tensor_copy_from_host(out, got.data(), got.size() * 2, nullptr));
    kf_launch_args_t args = KF_LAUNCH_ARGS_INIT;
    const kf_tensor_t* inputs[] = {in};
    kf_tensor_t* outputs[] = {out};
    args.n_items = 1;
    args.inputs = inputs;
    args.outputs = outputs;
    KF_ASSERT_OK(kf_fused_kernel_launch(k, &args, nullptr));
    KF_ASSERT_OK(kf_tensor_copy_to_host(out, got.data(), got.size() * 2, nullptr));
    for (size_t i = 0; i < values.size(); ++i)
      EXPECT_EQ(got[i], bf16_bits_nearest(values[i])) << values[i];
  }
}

TEST_F(GraphTest, ConstantsAreWeaklyTyped) {
  const int32_t i = tensor_input(KF_DTYPE_INT32, 1);
  const int32_t two = scalar(2.0);
  const int32_t sum = binary(KF_BINARY_ADD, i, two);  // int32: the constant took i's dtype
  int32_t id = kUntouched;
  EXPECT_FAILS(kf_graph_unary(g, KF_UNARY_EXP, sum, &id), KF_ERROR_DTYPE_MISMATCH, "is int32");
  const int32_t h = tensor_input(KF_DTYPE_FLOAT16, 1);
  EXPECT_GE(binary(KF_BINARY_MUL, two, h), 0);  // the same constant meets a float16 operand

  EXPECT_FAILS(kf_graph_binary(g, KF_BINARY_ADD, two, scalar(3.0), &id), KF_ERROR_INVALID_ARGUMENT,
               "every operand is a constant");
  EXPECT_FAILS(kf_graph_unary(g, KF_UNARY_NEG, two, &id), KF_ERROR_INVALID_ARGUMENT,
               "is node 1, a constant");
  EXPECT_FAILS(kf_graph_cast(g, two, KF_DTYPE_INT8, KF_CAST_WRAP, &id), KF_ERROR_INVALID_ARGUMENT,
               "a constant");
  EXPECT_FAILS(kf_graph_output(g, two, nullptr, &id), KF_ERROR_INVALID_ARGUMENT,
               "node 1 is a constant");
  EXPECT_EQ(id, kUntouched);

  // A constant that meets an integer operand must hold an integer-representable value.
  for (double bad : {std::nan(""), std::numeric_limits<double>::infinity(), 1e300}) {
    const int32_t c = scalar(bad);
    EXPECT_FAILS(kf_graph_binary(g, KF_BINARY_ADD, i, c, &id), KF_ERROR_INVALID_ARGUMENT,
                 "used as an integer value");
    EXPECT_GE(binary(KF_BINARY_ADD, h, c), 0);  // floating operands take any value
  }
  EXPECT_EQ(id, kUntouched);
  EXPECT_FAILS(kf_graph_constant(g, 1, nullptr, &id), KF_ERROR_INVALID_ARGUMENT, "values is NULL");
  EXPECT_FAILS(kf_graph_scalar(g, 1.0, nullptr), KF_ERROR_INVALID_ARGUMENT, "out_node is NULL");
}

TEST_F(GraphTest, ComparisonsGiveUint8) {
  const int32_t f = tensor_input(KF_DTYPE_FLOAT32, 1);
  const int32_t u = tensor_input(KF_DTYPE_UINT8, 1);
  for (kf_binary_op_t op :
       {KF_BINARY_EQ, KF_BINARY_NE, KF_BINARY_LT, KF_BINARY_LE, KF_BINARY_GT, KF_BINARY_GE}) {
    const int32_t mask = binary(op, f, scalar(0.5));
    EXPECT_GE(binary(KF_BINARY_ADD, mask, u), 0);  // u8 + u8
    int32_t id = kUntouched;
    EXPECT_FAILS(kf_graph_binary(g, KF_BINARY_ADD, mask, f, &id), KF_ERROR_DTYPE_MISMATCH,
                 "is uint8 but b");
  }
}

TEST_F(GraphTest, WhereAndClampRules) {
  const int32_t f = tensor_input(KF_DTYPE_FLOAT32, 1);
  const int32_t i = tensor_input(KF_DTYPE_INT32, 1);
  const int32_t zero = scalar(0.0);
  int32_t id = kUntouched;
  // cond has any dtype; a and b share one, a constant adapts.
  EXPECT_GE(made_where(f, i, zero), 0);
  EXPECT_GE(made_where(i, zero, f), 0);
  EXPECT_FAILS(kf_graph_where(g, f, f, i, &id), KF_ERROR_DTYPE_MISMATCH,
               "a (node 0) is float32 but b (node 1) is int32");
  EXPECT_FAILS(kf_graph_where(g, f, zero, scalar(1.0), &id), KF_ERROR_INVALID_ARGUMENT,
               "every operand is a constant");
  EXPECT_FAILS(kf_graph_where(g, zero, f, f, &id), KF_ERROR_INVALID_ARGUMENT,
               "cond is node 2, a constant");
  EXPECT_FAILS(kf_graph_where(g, f, f, 99, &id), KF_ERROR_INVALID_ARGUMENT, "does not exist");

  EXPECT_GE(made_clamp(i, zero, scalar(10.0)), 0);
  EXPECT_GE(made_clamp(f, f, scalar(1.0)), 0);
  EXPECT_FAILS(kf_graph_clamp(g, i, f, zero, &id), KF_ERROR_DTYPE_MISMATCH,
               "x (node 1) is int32 but lo (node 0) is float32");
  EXPECT_FAILS(kf_graph_clamp(g, zero, zero, zero, &id), KF_ERROR_INVALID_ARGUMENT,
               "every operand is a constant");
  EXPECT_FAILS(kf_graph_clamp(g, i, zero, scalar(0.5e300), &id), KF_ERROR_INVALID_ARGUMENT,
               "used as an integer value");
  EXPECT_EQ(id, kUntouched);
}

TEST_F(GraphTest, TensorGraphsHaveOneChannel) {
  int32_t id = kUntouched;
  const double rgb[3] = {1, 2, 3};
  // A multi-channel constant made before any input blocks tensor inputs...
  EXPECT_GE(constant({1, 2, 3}), 0);
  kf_graph_input_desc_t d = KF_GRAPH_INPUT_DESC_INIT;
  EXPECT_FAILS(kf_graph_input(g, &d, &id), KF_ERROR_SHAPE_MISMATCH, "has 3 channels");
  // ...and cannot be made once there are tensor inputs.
  kf_graph_t* other = nullptr;
  KF_ASSERT_OK(kf_graph_create(ctx, &other));
  tensor_input(KF_DTYPE_FLOAT32, 1, other);
  EXPECT_FAILS(kf_graph_constant(other, 3, rgb, &id), KF_ERROR_INVALID_ARGUMENT,
               "one channel per element");
  for (int32_t channels : {0, 5}) {
    EXPECT_FAILS(kf_graph_constant(other, channels, rgb, &id), KF_ERROR_INVALID_ARGUMENT,
                 "1 to 4 channels");
  }
  EXPECT_FAILS(kf_graph_color_convert(other, 0, KF_COLOR_RGB_TO_BGR, &id),
               KF_ERROR_INVALID_ARGUMENT, "needs an image graph");
  EXPECT_EQ(id, kUntouched);
  kf_graph_destroy(other);
}

// ---- image graphs

TEST_F(GraphTest, ImageInputsAreOnlyRead) {
  const int32_t image = image_input(KF_DTYPE_UINT8, 3);
  int32_t id = kUntouched;
  EXPECT_FAILS(kf_graph_unary(g, KF_UNARY_NEG, image, &id), KF_ERROR_INVALID_ARGUMENT,
               "read it with kf_graph_read_image() first");
  EXPECT_FAILS(kf_graph_output(g, image, nullptr, &id), KF_ERROR_INVALID_ARGUMENT, "image input");
  const int32_t pixel = read(image);
  EXPECT_FAILS(kf_graph_read_image(g, pixel, nullptr, &id), KF_ERROR_INVALID_ARGUMENT,
               "desc is NULL");
  kf_image_read_desc_t desc = KF_IMAGE_READ_DESC_INIT;
  EXPECT_FAILS(kf_graph_read_image(g, pixel, &desc, &id), KF_ERROR_INVALID_ARGUMENT,
               "not an image or NV12 input");
  EXPECT_FAILS(kf_graph_read_image(g, 50, &desc, &id), KF_ERROR_INVALID_ARGUMENT, "does not exist");
  desc.keep_aspect_ratio = 1;
  EXPECT_FAILS(kf_graph_read_image(g, image, &desc, &id), KF_ERROR_INVALID_ARGUMENT,
               "keep_aspect_ratio needs a resize");
  desc = KF_IMAGE_READ_DESC_INIT;
  set_raw(&desc.interpolation, 3);
  EXPECT_FAILS(kf_graph_read_image(g, image, &desc, &id), KF_ERROR_INVALID_ARGUMENT,
               "kf_interpolation_t");
  desc = KF_IMAGE_READ_DESC_INIT;
  set_raw(&desc.border, -1);
  EXPECT_FAILS(kf_graph_read_image(g, image, &desc, &id), KF_ERROR_INVALID_ARGUMENT, "kf_border_t");
  desc = KF_IMAGE_READ_DESC_INIT;
  set_raw(&desc.color_standard, 2);
  EXPECT_FAILS(kf_graph_read_image(g, image, &desc, &id), KF_ERROR_INVALID_ARGUMENT,
               "kf_color_standard_t");
  desc = KF_IMAGE_READ_DESC_INIT;
  desc.struct_size = 4;
  EXPECT_FAILS(kf_graph_read_image(g, image, &desc, &id), KF_ERROR_INVALID_ARGUMENT,
               "KF_IMAGE_READ_DESC_INIT");
  desc = KF_IMAGE_READ_DESC_INIT;
  desc.border_value = std::nan("");
  EXPECT_FAILS(kf_graph_read_image(g, image, &desc, &id), KF_ERROR_INVALID_ARGUMENT,
               "gives uint8 values");
  for (double v : {300.0, -1.0, 1.5}) {  // values a u8 read cannot hold (-1 had become 255)
    desc.border_value = v;
    EXPECT_FAILS(kf_graph_read_image(g, image, &desc, &id), KF_ERROR_INVALID_ARGUMENT,
                 "cannot hold it");
  }
  EXPECT_EQ(id, kUntouched);
  desc.interpolation = KF_INTERP_BILINEAR;  // a float32 read may have any border value
  EXPECT_GE(read(image, desc), 0);
}

TEST_F(GraphTest, ReadDtypesFollowTheInterpolation) {
  const int32_t image = image_input(KF_DTYPE_UINT8, 4);
  int32_t id = kUntouched;
  kf_image_read_desc_t desc = KF_IMAGE_READ_DESC_INIT;
  desc.interpolation = KF_INTERP_NEAREST;
  EXPECT_FAILS(kf_graph_unary(g, KF_UNARY_EXP, read(image, desc), &id), KF_ERROR_DTYPE_MISMATCH,
               "is uint8");
  desc.interpolation = KF_INTERP_BILINEAR;
  desc.keep_aspect_ratio = 1;
  EXPECT_GE(unary(KF_UNARY_EXP, read(image, desc)), 0);  // bilinear gives float32

  kf_graph_t* image_graph = g;
  KF_ASSERT_OK(kf_graph_create(ctx, &g));
  const int32_t frame = nv12_input();
  const int32_t rgb = read(frame);  // 3 channels, float32
  EXPECT_GE(unary(KF_UNARY_SQRT, rgb), 0);
  KF_EXPECT_ERR(kf_graph_color_convert(g, rgb, KF_COLOR_RGB_TO_GRAY, &id), KF_SUCCESS);
  kf_graph_destroy(image_graph);
}

TEST_F(GraphTest, ChannelsBroadcastInImageGraphs) {
  const int32_t rgba = read(image_input(KF_DTYPE_FLOAT32, 4));
  int32_t id = kUntouched;
  EXPECT_GE(binary(KF_BINARY_MUL, rgba, constant({1, 2, 3, 4})), 0);
  EXPECT_GE(binary(KF_BINARY_MUL, rgba, scalar(2.0)), 0);
  EXPECT_FAILS(kf_graph_binary(g, KF_BINARY_MUL, rgba, constant({1, 2, 3}), &id),
               KF_ERROR_SHAPE_MISMATCH, "has 3 channels, which does not broadcast with 4");
  const int32_t gray = made_color(made_color(rgba, KF_COLOR_RGBA_TO_RGB), KF_COLOR_RGB_TO_GRAY);
  EXPECT_GE(binary(KF_BINARY_SUB, rgba, gray), 0);  // 1 channel broadcasts against 4
  EXPECT_FAILS(kf_graph_where(g, gray, rgba, constant({0, 0}), &id), KF_ERROR_SHAPE_MISMATCH,
               "has 2 channels");
  EXPECT_EQ(id, kUntouched);
}

TEST_F(GraphTest, ColorConversionChannelsAndDtypes) {
  const int32_t rgb = read(image_input(KF_DTYPE_UINT8, 3));
  int32_t id = kUntouched;
  struct Case {
    kf_color_conversion_t conversion;
    bool from_rgb;  // else needs 4 channels
  };
  for (const Case& c : {Case{KF_COLOR_RGB_TO_BGR, true}, Case{KF_COLOR_RGBA_TO_BGRA, false},
                        Case{KF_COLOR_RGB_TO_GRAY, true}, Case{KF_COLOR_BGR_TO_GRAY, true},
                        Case{KF_COLOR_RGBA_TO_RGB, false}, Case{KF_COLOR_RGB_TO_RGBA, true},
                        Case{KF_COLOR_RGBA_TO_BGR, false}, Case{KF_COLOR_BGR_TO_RGBA, true}}) {
    if (c.from_rgb) {
      EXPECT_GE(made_color(rgb, c.conversion), 0);
    } else {
      EXPECT_FAILS(kf_graph_color_convert(g, rgb, c.conversion, &id), KF_ERROR_SHAPE_MISMATCH,
                   "needs a 4-channel value, but x (node 1) has 3 channels");
    }
  }
  EXPECT_FAILS(color_raw(g, rgb, 8, &id), KF_ERROR_INVALID_ARGUMENT, "kf_color_conversion_t");
  // Gray of an integer value is float32; swaps and alpha keep the dtype.
  EXPECT_GE(unary(KF_UNARY_LOG, made_color(rgb, KF_COLOR_RGB_TO_GRAY)), 0);
  EXPECT_FAILS(kf_graph_unary(g, KF_UNARY_LOG, made_color(rgb, KF_COLOR_RGB_TO_RGBA), &id),
               KF_ERROR_DTYPE_MISMATCH, "uint8");
  EXPECT_FAILS(kf_graph_unary(g, KF_UNARY_LOG, made_color(rgb, KF_COLOR_RGB_TO_BGR), &id),
               KF_ERROR_DTYPE_MISMATCH, "uint8");
  EXPECT_EQ(id, kUntouched);
}

TEST_F(GraphTest, NormalizeValidatesItsValues) {
  const int32_t rgb = read(image_input(KF_DTYPE_UINT8, 3));
  const double mean[3] = {0.485, 0.456, 0.406};
  const double std_ok[3] = {0.229, 0.224, 0.225};
  int32_t id = kUntouched;
  EXPECT_FAILS(kf_graph_normalize(g, rgb, 1.0, nullptr, std_ok, &id), KF_ERROR_INVALID_ARGUMENT,
               "mean is NULL");
  EXPECT_FAILS(kf_graph_normalize(g, rgb, 1.0, mean, nullptr, &id), KF_ERROR_INVALID_ARGUMENT,
               "std is NULL");
  const double std_zero[3] = {0.229, 0.0, 0.225};
  EXPECT_FAILS(kf_graph_normalize(g, rgb, 1.0, mean, std_zero, &id), KF_ERROR_INVALID_ARGUMENT,
               "std[1] is 0");
  const double std_inf[3] = {0.229, 0.2, std::numeric_limits<double>::infinity()};
  EXPECT_FAILS(kf_graph_normalize(g, rgb, 1.0, mean, std_inf, &id), KF_ERROR_INVALID_ARGUMENT,
               "std[2] is inf");
  const double mean_nan[3] = {0.1, std::nan(""), 0.3};
  EXPECT_FAILS(kf_graph_normalize(g, rgb, 1.0, mean_nan, std_ok, &id), KF_ERROR_INVALID_ARGUMENT,
               "mean[1] is nan");
  EXPECT_FAILS(kf_graph_normalize(g, rgb, std::nan(""), mean, std_ok, &id),
               KF_ERROR_INVALID_ARGUMENT, "scale is nan");
  EXPECT_EQ(id, kUntouched);
  KF_ASSERT_OK(kf_graph_normalize(g, rgb, 1.0 / 255, mean, std_ok, &id));
  EXPECT_GE(unary(KF_UNARY_EXP, id), 0);  // u8 in, float32 out
}

// ---- outputs

TEST_F(GraphTest, OutputRules) {
  const int32_t x = tensor_input(KF_DTYPE_FLOAT32, 2);
  const int32_t y = unary(KF_UNARY_ABS, x);
  int32_t index = kUntouched;
  EXPECT_FAILS(kf_graph_output(g, x, nullptr, &index), KF_ERROR_INVALID_ARGUMENT,
               "node 0 is an input");
  EXPECT_FAILS(kf_graph_output(g, 7, nullptr, &index), KF_ERROR_INVALID_ARGUMENT, "does not exist");
  kf_graph_output_desc_t d = KF_GRAPH_OUTPUT_DESC_INIT;
  d.layout = KF_OUTPUT_PLANAR;
  EXPECT_FAILS(kf_graph_output(g, y, &d, &index), KF_ERROR_INVALID_ARGUMENT,
               "belong to image graphs");
  d = KF_GRAPH_OUTPUT_DESC_INIT;
  d.batched = 1;
  EXPECT_FAILS(kf_graph_output(g, y, &d, &index), KF_ERROR_INVALID_ARGUMENT,
               "belong to image graphs");
  d = KF_GRAPH_OUTPUT_DESC_INIT;
  set_raw(&d.layout, 2);
  EXPECT_FAILS(kf_graph_output(g, y, &d, &index), KF_ERROR_INVALID_ARGUMENT, "kf_output_layout_t");
  d = KF_GRAPH_OUTPUT_DESC_INIT;
  d.struct_size = 0;
  EXPECT_FAILS(kf_graph_output(g, y, &d, &index), KF_ERROR_INVALID_ARGUMENT,
               "KF_GRAPH_OUTPUT_DESC_INIT");
  EXPECT_EQ(index, kUntouched);
  KF_ASSERT_OK(kf_graph_output(g, y, nullptr, &index));
  EXPECT_EQ(index, 0);
  KF_ASSERT_OK(kf_graph_output(g, y, nullptr, nullptr));
  KF_ASSERT_OK(kf_graph_output(g, unary(KF_UNARY_NEG, x), nullptr, &index));
  EXPECT_EQ(index, 2);
}

// ---- compile

TEST_F(GraphTest, CompileChecksGraphAndOptions) {
  const int32_t x = tensor_input(KF_DTYPE_FLOAT32, 1);
  const int32_t y = binary(KF_BINARY_ADD, x, scalar(1.0));
  kf_fused_kernel_t* k = reinterpret_cast<kf_fused_kernel_t*>(0x1);
  EXPECT_FAILS(kf_graph_compile(g, nullptr, &k), KF_ERROR_INVALID_ARGUMENT, "no outputs");
  size_t length = 0;
  EXPECT_FAILS(kf_graph_get_source(g, nullptr, nullptr, 0, &length), KF_ERROR_INVALID_ARGUMENT,
               "no outputs");
  EXPECT_FAILS(kf_graph_compile_for_arch(g, nullptr, 90, nullptr, nullptr),
               KF_ERROR_INVALID_ARGUMENT, "no outputs");
  output(y);
  kf_compile_options_t o = KF_COMPILE_OPTIONS_INIT;
  o.struct_size = 4;
  EXPECT_FAILS(kf_graph_compile(g, &o, &k), KF_ERROR_INVALID_ARGUMENT, "KF_COMPILE_OPTIONS_INIT");
  o = KF_COMPILE_OPTIONS_INIT;
  o.max_items = 0;
  EXPECT_FAILS(kf_graph_compile(g, &o, &k), KF_ERROR_INVALID_ARGUMENT, "max_items is 0");
  o = KF_COMPILE_OPTIONS_INIT;
  o.flags = 4;
  EXPECT_FAILS(kf_graph_compile(g, &o, &k), KF_ERROR_INVALID_ARGUMENT, "flags is 0x4");
  EXPECT_FAILS(kf_graph_compile(g, nullptr, nullptr), KF_ERROR_INVALID_ARGUMENT, "out is NULL");
  EXPECT_FAILS(kf_graph_compile(nullptr, nullptr, &k), KF_ERROR_INVALID_HANDLE, "g is NULL");
  EXPECT_EQ(k, reinterpret_cast<kf_fused_kernel_t*>(0x1));
  EXPECT_FAILS(kf_graph_compile_for_arch(g, nullptr, 49, nullptr, nullptr),
               KF_ERROR_INVALID_ARGUMENT, "sm is 49");
  // The generated kernels need sm_80 (NVRTC's ptxas refused sm_75's with a log about max.NaN).
  EXPECT_FAILS(kf_graph_compile_for_arch(g, nullptr, 75, nullptr, nullptr),
               KF_ERROR_INVALID_ARGUMENT, "need sm_80");
  EXPECT_FAILS(kf_graph_get_source(g, nullptr, nullptr, 0, nullptr), KF_ERROR_INVALID_ARGUMENT,
               "length is NULL");
}

TEST_F(GraphTest, KernelInfoAndOrigin) {
  const int32_t a = tensor_input(KF_DTYPE_FLOAT32, 2);
  const int32_t b = tensor_input(KF_DTYPE_FLOAT32, 1);
  output(binary(KF_BINARY_ADD, a, b));
  output(binary(KF_BINARY_MUL, a, b));
  kf_fused_kernel_t* first = compile(g, 3);
  ASSERT_NE(first, nullptr);
  const kf_fused_kernel_info_t i = info(first);
  EXPECT_EQ(i.origin, KF_KERNEL_COMPILED);
  EXPECT_EQ(i.n_inputs, 2);
  EXPECT_EQ(i.n_outputs, 2);
  EXPECT_EQ(i.max_items, 3);
  EXPECT_GE(i.compile_ms, 0.0);
  EXPECT_NE(i.structure_hash, 0u);
  EXPECT_EQ(info(compile(g, 3)).origin, KF_KERNEL_MEMORY_CACHE);
  EXPECT_EQ(info(compile(g, 3, KF_COMPILE_NO_MEMORY_CACHE)).origin, KF_KERNEL_COMPILED);
  EXPECT_NE(info(compile(g, 4)).structure_hash, i.structure_hash);  // capacity is structure

  kf_fused_kernel_info_t small{};
  small.struct_size = sizeof(small) - 8;
  EXPECT_FAILS(kf_fused_kernel_get_info(first, &small), KF_ERROR_VERSION_MISMATCH, "struct_size");
  EXPECT_FAILS(kf_fused_kernel_get_info(first, nullptr), KF_ERROR_INVALID_ARGUMENT, "info is NULL");

  // A CPU kernel has no CUDA source: the empty string.
  size_t length = 0;
  KF_ASSERT_OK(kf_fused_kernel_get_source(first, nullptr, 0, &length));
  EXPECT_EQ(length, 1u);
  char text[4] = {'x', 'x', 'x', 'x'};
  KF_ASSERT_OK(kf_fused_kernel_get_source(first, text, sizeof text, &length));
  EXPECT_EQ(text[0], '\0');
}

// Without a device to measure (a CPU context), the layout judges a tensor graph heavy from 4
// element_cost units per byte moved (core/fusion/kernel_params.cpp): the benchmark's f32 chain
// of 11 ops (21 units over 8 bytes) runs in one pass, two vectors a thread, and its chain of 16
// (33 units) in looping blocks, one vector a thread; both as bf16 (4 bytes) loop.
TEST_F(GraphTest, HeavyGraphsLoopAtTheDefaultBalance) {
  auto chain_source = [&](kf_dtype_t dtype, int n_ops) {
    kf_graph_t* h = nullptr;
    EXPECT_EQ(kf_graph_create(ctx, &h), KF_SUCCESS);
    const struct {
      int kind;  // 0 binary with a scalar, 1 unary, 2 ReLU
      int op;
      double value;
    } steps[] = {{0, KF_BINARY_MUL, 1.5},   {0, KF_BINARY_ADD, 0.25},
                 {0, KF_BINARY_MAX, -1.0},  {0, KF_BINARY_SUB, 0.5},
                 {0, KF_BINARY_MIN, 2.5},   {1, KF_UNARY_NEG, 0},
                 {0, KF_BINARY_MUL, 0.75},  {0, KF_BINARY_ADD, 0.375},
                 {1, KF_UNARY_ABS, 0},      {0, KF_BINARY_ADD, 1.0},
                 {1, KF_UNARY_RSQRT, 0},    {0, KF_BINARY_MUL, 2.0},
                 {0, KF_BINARY_SUB, 0.5},   {2, 0, 0},
                 {0, KF_BINARY_DIV, 0.625}, {0, KF_BINARY_MAX, 0.125}};
    int32_t v = tensor_input(dtype, 2, h);
    for (int k = 0; k < n_ops; ++k) {
      if (steps[k].kind == 0) {
        v = binary(static_cast<kf_binary_op_t>(steps[k].op), v, scalar(steps[k].value, h), h);
      } else if (steps[k].kind == 1) {
        EXPECT_EQ(kf_graph_unary(h, static_cast<kf_unary_op_t>(steps[k].op), v, &v), KF_SUCCESS);
      } else {
        EXPECT_EQ(kf_graph_activation(h, KF_ACTIVATION_RELU, v, &v), KF_SUCCESS);
      }
    }
    output(v, KF_OUTPUT_AS_IS, 0, h);
    size_t length = 0;
    EXPECT_EQ(kf_graph_get_source(h, nullptr, nullptr, 0, &length), KF_SUCCESS);
    std::string source(length, '\0');
    EXPECT_EQ(kf_graph_get_source(h, nullptr, &source[0], length, &length), KF_SUCCESS);
    kf_graph_destroy(h);
    return source;
  };
  const std::string one_pass = "constexpr int kUnroll = 2;";
  const std::string looping = "constexpr int kUnroll = 1;";
  EXPECT_NE(chain_source(KF_DTYPE_FLOAT32, 4).find(one_pass), std::string::npos);
  EXPECT_NE(chain_source(KF_DTYPE_FLOAT32, 11).find(one_pass), std::string::npos);
  EXPECT_NE(chain_source(KF_DTYPE_FLOAT32, 16).find(looping), std::string::npos);
  EXPECT_NE(chain_source(KF_DTYPE_BFLOAT16, 11).find(looping), std::string::npos);
  EXPECT_NE(chain_source(KF_DTYPE_BFLOAT16, 16).find(looping), std::string::npos);
}

TEST_F(GraphTest, GraphSourceIsAvailableEverywhere) {
  const int32_t x = tensor_input(KF_DTYPE_FLOAT32, 1);
  output(unary(KF_UNARY_EXP, x));
  size_t length = 0;
  KF_ASSERT_OK(kf_graph_get_source(g, nullptr, nullptr, 0, &length));
  ASSERT_GT(length, 1u);
  std::string source(length, '\0');
  size_t small = 0;
  EXPECT_FAILS(kf_graph_get_source(g, nullptr, &source[0], length - 1, &small),
               KF_ERROR_INVALID_ARGUMENT, "buffer holds");
  EXPECT_EQ(small, length);  // the length is reported even when the buffer is too small
  KF_ASSERT_OK(kf_graph_get_source(g, nullptr, &source[0], length, &length));
  EXPECT_EQ(source.size(), length);
  EXPECT_EQ(source.back(), '\0');
  EXPECT_EQ(std::strlen(source.c_str()) + 1, length);
#if !defined(KF_TEST_NVRTC)
  // A CPU-only build generates source but has no NVRTC to compile it.
  size_t cubin_bytes = 123;
  kf_kernel_origin_t origin = KF_KERNEL_MEMORY_CACHE;
  EXPECT_FAILS(kf_graph_compile_for_arch(g, nullptr, 90, &cubin_bytes, &origin),
               KF_ERROR_NOT_SUPPORTED, "no CUDA backend");
  EXPECT_EQ(cubin_bytes, 123u);
  EXPECT_EQ(origin, KF_KERNEL_MEMORY_CACHE);
#endif
}

// Graphs that differ only in values share a structure (and a cached kernel); graphs that
// differ in structure do not.
TEST_F(GraphTest, StructureHashIgnoresValues) {
  struct Variant {
    kf_dtype_t dtype = KF_DTYPE_UINT8;
    double factor = 2.0;
    double mean = 0.5;
    double border = 0.0;
    kf_interpolation_t interpolation = KF_INTERP_BILINEAR;
    kf_binary_op_t op = KF_BINARY_MUL;
    kf_output_layout_t layout = KF_OUTPUT_PLANAR;
    int32_t channels = 3;
  };
  auto hash_of = [&](const Variant& v, kf_kernel_origin_t* origin) -> uint64_t {
    kf_graph_t* graph = nullptr;
    EXPECT_EQ(kf_graph_create(ctx, &graph), KF_SUCCESS);
    const int32_t image = image_input(v.dtype, v.channels, graph);
    kf_image_read_desc_t desc = KF_IMAGE_READ_DESC_INIT;
    desc.interpolation = v.interpolation;
    desc.border_value = v.border;
    desc.crop = 1;
    int32_t pixel = -1, scaled = -1, factor = -1, normalized = -1;
    EXPECT_EQ(kf_graph_read_image(graph, image, &desc, &pixel), KF_SUCCESS);
    EXPECT_EQ(kf_graph_scalar(graph, v.factor, &factor), KF_SUCCESS);
    EXPECT_EQ(kf_graph_binary(graph, v.op, pixel, factor, &scaled), KF_SUCCESS)
        << kf_get_last_error_message();
    const std::vector<double> mean(static_cast<size_t>(v.channels), v.mean);
    const std::vector<double> stdev(static_cast<size_t>(v.channels), 0.25);
    EXPECT_EQ(kf_graph_normalize(graph, scaled, 1.0, mean.data(), stdev.data(), &normalized),
              KF_SUCCESS);
    output(normalized, v.layout, 1, graph);
    kf_fused_kernel_t* k = compile(graph, 8);
    kf_graph_destroy(graph);
    if (k == nullptr) return 0;
    const kf_fused_kernel_info_t i = info(k);
    if (origin != nullptr) *origin = i.origin;
    return i.structure_hash;
  };
  kf_kernel_origin_t origin = KF_KERNEL_DISK_CACHE;
  const Variant base;
  const uint64_t h = hash_of(base, &origin);
  EXPECT_EQ(origin, KF_KERNEL_COMPILED);
  Variant values = base;
  values.factor = 3.5;
  values.mean = -1.25;
  values.border = 7.0;
  EXPECT_EQ(hash_of(values, &origin), h);
  EXPECT_EQ(origin, KF_KERNEL_MEMORY_CACHE);  // no rebuild for other values

  std::vector<Variant> structural(6, base);
  structural[0].dtype = KF_DTYPE_FLOAT32;
  structural[1].interpolation = KF_INTERP_NEAREST;
  structural[2].op = KF_BINARY_ADD;
  structural[3].layout = KF_OUTPUT_AS_IS;
  structural[4].channels = 4;
  structural[5].interpolation = KF_INTERP_NONE;
  for (size_t i = 0; i < structural.size(); ++i) {
    EXPECT_NE(hash_of(structural[i], &origin), h) << "variant " << i;
    EXPECT_EQ(origin, KF_KERNEL_COMPILED) << "variant " << i;
  }
}

// ---- structs from newer headers

// What a caller built against newer headers passes: the library's layout, then a field this
// library does not have, with struct_size covering both.
template <class T>
struct Newer {
  T known;
  uint64_t unknown;
};

template <class T>
Newer<T> newer(const T& init, uint64_t unknown) {
  static_assert(sizeof(T) % alignof(uint64_t) == 0, "no padding between the layouts");
  Newer<T> n{};
  n.known = init;
  n.known.struct_size = sizeof(n);
  n.unknown = unknown;
  return n;
}

// The unknown field reads as its default while it is zero (as a newer _INIT leaves it), and any
// other value is refused, never dropped: graph.h's descriptors, the compile options and the
// launch arguments (the configs are in context_test and stream_event_test).
TEST_F(GraphTest, NewerStructsAreReadWhileTheirUnknownFieldsAreZero) {
  int32_t x = kUntouched;
  kf_graph_input_desc_t in = KF_GRAPH_INPUT_DESC_INIT;
  in.rank = 1;
  Newer<kf_graph_input_desc_t> in_newer = newer(in, 1);
  EXPECT_FAILS(kf_graph_input(g, &in_newer.known, &x), KF_ERROR_VERSION_MISMATCH,
               "desc->struct_size is 32, and its byte 24, past the 24 bytes");
  EXPECT_EQ(x, kUntouched);
  in_newer.unknown = 0;
  KF_ASSERT_OK(kf_graph_input(g, &in_newer.known, &x));

  int32_t index = kUntouched;
  const int32_t y = binary(KF_BINARY_MUL, x, scalar(3.0));
  const kf_graph_output_desc_t out_init = KF_GRAPH_OUTPUT_DESC_INIT;
  Newer<kf_graph_output_desc_t> out_newer = newer(out_init, uint64_t{1} << 63);
  EXPECT_FAILS(kf_graph_output(g, y, &out_newer.known, &index), KF_ERROR_VERSION_MISMATCH,
               "is not zero: the caller's headers are newer");
  EXPECT_EQ(index, kUntouched);
  out_newer.unknown = 0;
  KF_ASSERT_OK(kf_graph_output(g, y, &out_newer.known, &index));
  EXPECT_EQ(index, 0);

  const kf_compile_options_t options_init = KF_COMPILE_OPTIONS_INIT;
  Newer<kf_compile_options_t> options = newer(options_init, 2);
  kf_fused_kernel_t* k = nullptr;
  EXPECT_FAILS(kf_graph_compile(g, &options.known, &k), KF_ERROR_VERSION_MISMATCH,
               "options->struct_size");
  size_t length = 0;
  EXPECT_FAILS(kf_graph_get_source(g, &options.known, nullptr, 0, &length),
               KF_ERROR_VERSION_MISMATCH, "options->struct_size");
  EXPECT_EQ(k, nullptr);
  options.unknown = 0;
  KF_ASSERT_OK(kf_graph_compile(g, &options.known, &k));
  kernels.push_back(k);

  Tensor a = make_tensor(ctx, KF_DTYPE_FLOAT32, {7});
  Tensor out = make_tensor(ctx, KF_DTYPE_FLOAT32, {7});
  const std::vector<double> av = {0.5, -1.25, 2.0, 3.5, -0.75, 1.0, -2.5};
  upload(a, av);
  kf_test::poison(out);
  const kf_tensor_t* inputs[1] = {a};
  kf_tensor_t* outputs[1] = {out};
  kf_launch_args_t args_init = KF_LAUNCH_ARGS_INIT;
  args_init.inputs = inputs;
  args_init.outputs = outputs;
  Newer<kf_launch_args_t> args = newer(args_init, 0x100);
  EXPECT_FAILS(kf_fused_kernel_launch(k, &args.known, nullptr), KF_ERROR_VERSION_MISMATCH,
               "args->struct_size");
  args.unknown = 0;
  args.known.struct_size = size_t{1} << 40;  // uninitialised, say: refused before reading past
  EXPECT_FAILS(kf_fused_kernel_launch(k, &args.known, nullptr), KF_ERROR_VERSION_MISMATCH,
               "larger than any layout (at most 1024 bytes)");
  args.known.struct_size = sizeof(args);
  KF_ASSERT_OK(kf_fused_kernel_launch(k, &args.known, nullptr));
  std::vector<double> want;
  for (double v : av) want.push_back(3.0 * v);
  kf_test::expect_close(download(out), want, 0.0, "3 * a");

  // An image read's descriptor, on an image graph.
  kf_graph_t* images = nullptr;
  KF_ASSERT_OK(kf_graph_create(ctx, &images));
  const int32_t image = image_input(KF_DTYPE_UINT8, 3, images);
  const kf_image_read_desc_t read_init = KF_IMAGE_READ_DESC_INIT;
  Newer<kf_image_read_desc_t> read_newer = newer(read_init, 9);
  int32_t pixel = kUntouched;
  EXPECT_FAILS(kf_graph_read_image(images, image, &read_newer.known, &pixel),
               KF_ERROR_VERSION_MISMATCH, "desc->struct_size");
  EXPECT_EQ(pixel, kUntouched);
  read_newer.unknown = 0;
  EXPECT_EQ(kf_graph_read_image(images, image, &read_newer.known, &pixel), KF_SUCCESS)
      << kf_get_last_error_message();
  EXPECT_NE(pixel, kUntouched);
  KF_ASSERT_OK(kf_graph_destroy(images));
}

// ---- launch: tensor graphs

class TensorLaunchTest : public GraphTest {
 protected:
  // out = x * factor + y, x [rank 2] f32, y [rank 1] f32.
  void SetUp() override {
    GraphTest::SetUp();
    x = tensor_input(KF_DTYPE_FLOAT32, 2);
    y = tensor_input(KF_DTYPE_FLOAT32, 1);
    factor = scalar(2.0);
    output(binary(KF_BINARY_ADD, binary(KF_BINARY_MUL, x, factor), y));
    k = compile(g, 2);
    ASSERT_NE(k, nullptr);
  }
  kf_result_t launch(std::vector<const kf_tensor_t*> inputs, std::vector<kf_tensor_t*> outputs,
                     std::vector<kf_fused_value_t> values = {}, int32_t n_items = 1) {
    kf_launch_args_t args = KF_LAUNCH_ARGS_INIT;
    args.n_items = n_items;
    args.inputs = inputs.data();
    args.outputs = outputs.data();
    args.values = values.empty() ? nullptr : values.data();
    args.n_values = values.size();
    return kf_fused_kernel_launch(k, &args, nullptr);
  }
  int32_t x = -1, y = -1, factor = -1;
  kf_fused_kernel_t* k = nullptr;
};

TEST_F(TensorLaunchTest, BroadcastsAndAppliesValueOverrides) {
  Tensor a = make_tensor(ctx, KF_DTYPE_FLOAT32, {3, 5});
  Tensor b = make_tensor(ctx, KF_DTYPE_FLOAT32, {5});
  Tensor out = make_tensor(ctx, KF_DTYPE_FLOAT32, {3, 5});
  const std::vector<double> av =
      kf_test::round_to_dtype(kf_test::random_values(15, 1), KF_DTYPE_FLOAT32);
  const std::vector<double> bv =
      kf_test::round_to_dtype(kf_test::random_values(5, 2), KF_DTYPE_FLOAT32);
  upload(a, av);
  upload(b, bv);
  for (double f : {2.0, -0.75}) {
    kf_test::poison(out);
    std::vector<kf_fused_value_t> values;
    if (f != 2.0) values.push_back(kf_fused_value_t{factor, 0, f});
    KF_ASSERT_OK(launch({a, b}, {out}, values));
    std::vector<double> want(15);
    for (size_t i = 0; i < 15; ++i)
      want[i] = static_cast<float>(static_cast<float>(av[i] * f) + static_cast<float>(bv[i % 5]));
    kf_test::expect_close(download(out), want, 1e-6, "x * factor + y");
  }
}

TEST_F(TensorLaunchTest, ItemsHaveTheirOwnShapes) {
  Tensor a0 = make_tensor(ctx, KF_DTYPE_FLOAT32, {2, 3});
  Tensor b0 = make_tensor(ctx, KF_DTYPE_FLOAT32, {1});
  Tensor o0 = make_tensor(ctx, KF_DTYPE_FLOAT32, {2, 3});
  Tensor a1 = make_tensor(ctx, KF_DTYPE_FLOAT32, {1, 4});
  Tensor b1 = make_tensor(ctx, KF_DTYPE_FLOAT32, {4});
  Tensor o1 = make_tensor(ctx, KF_DTYPE_FLOAT32, {1, 4});
  upload(a0, {1, 2, 3, 4, 5, 6});
  upload(b0, {10});
  upload(a1, {-1, -2, -3, -4});
  upload(b1, {1, 2, 3, 4});
  kf_test::poison(o0);
  kf_test::poison(o1);
  KF_ASSERT_OK(launch({a0, b0, a1, b1}, {o0, o1}, {}, 2));
  kf_test::expect_close(download(o0), {12, 14, 16, 18, 20, 22}, 0, "item 0");
  kf_test::expect_close(download(o1), {-1, -2, -3, -4}, 0, "item 1");
  EXPECT_FAILS(launch({a0, b0, a1, b1}, {o0, o1}, {}, 3), KF_ERROR_INVALID_ARGUMENT,
               "n_items is 3; this kernel runs 1 to 2 items");
  EXPECT_FAILS(launch({a0, b0}, {o0}, {}, 0), KF_ERROR_INVALID_ARGUMENT, "n_items is 0");
}

TEST_F(TensorLaunchTest, StridedInputsAndEmptyItems) {
  // x is a transposed view: [3, 2] over a [2, 3] buffer.
  Tensor base = make_tensor(ctx, KF_DTYPE_FLOAT32, {2, 3});
  upload(base, {1, 2, 3, 4, 5, 6});
  kf_tensor_t* view = nullptr;
  const kf_tensor_desc_t vd = make_desc(KF_DTYPE_FLOAT32, {3, 2}, {1, 3});
  KF_ASSERT_OK(kf_tensor_create_view(base, &vd, 0, &view));
  Tensor transposed(view);
  Tensor b = make_tensor(ctx, KF_DTYPE_FLOAT32, {2});
  upload(b, {0.5, -0.5});
  Tensor out = make_tensor(ctx, KF_DTYPE_FLOAT32, {3, 2});
  kf_test::poison(out);
  KF_ASSERT_OK(launch({transposed, b}, {out}));
  kf_test::expect_close(download(out), {2.5, 7.5, 4.5, 9.5, 6.5, 11.5}, 0, "transposed");

  Tensor empty = make_tensor(ctx, KF_DTYPE_FLOAT32, {0, 2});
  Tensor empty_out = make_tensor(ctx, KF_DTYPE_FLOAT32, {0, 2});
  KF_EXPECT_ERR(launch({empty, b}, {empty_out}), KF_SUCCESS);
}

TEST_F(TensorLaunchTest, TensorsAreValidated) {
  Tensor a = make_tensor(ctx, KF_DTYPE_FLOAT32, {3, 5});
  Tensor b = make_tensor(ctx, KF_DTYPE_FLOAT32, {5});
  Tensor out = make_tensor(ctx, KF_DTYPE_FLOAT32, {3, 5});
  Tensor a_f64 = make_tensor(ctx, KF_DTYPE_FLOAT64, {3, 5});
  Tensor b_rank2 = make_tensor(ctx, KF_DTYPE_FLOAT32, {1, 5});
  Tensor b_wide = make_tensor(ctx, KF_DTYPE_FLOAT32, {4});
  Tensor out_small = make_tensor(ctx, KF_DTYPE_FLOAT32, {1, 5});

  EXPECT_FAILS(launch({a_f64, b}, {out}), KF_ERROR_DTYPE_MISMATCH,
               "input 0 of item 0 is a float64 tensor, but the graph declares float32");
  EXPECT_FAILS(launch({a, b_rank2}, {out}), KF_ERROR_SHAPE_MISMATCH,
               "input 1 of item 0 has rank 2 (shape [1,5]), but the graph declares rank 1");
  EXPECT_FAILS(launch({a, b_wide}, {out}), KF_ERROR_SHAPE_MISMATCH,
               "input 1 of item 0 has shape [4], which does not broadcast with [3,5]");
  EXPECT_FAILS(launch({a, b}, {out_small}), KF_ERROR_SHAPE_MISMATCH,
               "output 0 of item 0 has shape [1,5], but the broadcast shape");
  EXPECT_FAILS(launch({a, nullptr}, {out}), KF_ERROR_INVALID_HANDLE,
               "args->inputs[1] is NULL; expected a tensor (input 1 of item 0)");
  EXPECT_FAILS(launch({a, b}, {nullptr}), KF_ERROR_INVALID_HANDLE,
               "args->outputs[0] is NULL; expected a tensor (output 0 of item 0)");

  kf_tensor_t* destroyed = nullptr;
  const kf_tensor_desc_t bd = make_desc(KF_DTYPE_FLOAT32, {5});
  KF_ASSERT_OK(kf_tensor_create(ctx, &bd, &destroyed));
  KF_ASSERT_OK(kf_tensor_destroy(destroyed));
  EXPECT_FAILS(launch({a, destroyed}, {out}), KF_ERROR_INVALID_HANDLE, "not a live tensor");

  kf_test::Context other;
  Tensor foreign = make_tensor(other, KF_DTYPE_FLOAT32, {5});
  EXPECT_FAILS(launch({a, foreign}, {out}), KF_ERROR_DEVICE_MISMATCH,
               "tensor 'args->inputs[1]' belongs to another context (input 1 of item 0)");
  kf_stream_t* foreign_stream = nullptr;
  KF_ASSERT_OK(kf_stream_create(other, nullptr, &foreign_stream));
  const kf_tensor_t* inputs[2] = {a, b};
  kf_tensor_t* outputs[1] = {out};
  kf_launch_args_t args = KF_LAUNCH_ARGS_INIT;
  args.inputs = inputs;
  args.outputs = outputs;
  EXPECT_FAILS(kf_fused_kernel_launch(k, &args, foreign_stream), KF_ERROR_DEVICE_MISMATCH,
               "another context");
  KF_ASSERT_OK(kf_stream_destroy(foreign_stream));

  EXPECT_FAILS(kf_fused_kernel_launch(k, nullptr, nullptr), KF_ERROR_INVALID_ARGUMENT,
               "args is NULL");
  args.struct_size = 8;
  EXPECT_FAILS(kf_fused_kernel_launch(k, &args, nullptr), KF_ERROR_INVALID_ARGUMENT,
               "KF_LAUNCH_ARGS_INIT");
  args = KF_LAUNCH_ARGS_INIT;
  args.outputs = outputs;
  EXPECT_FAILS(kf_fused_kernel_launch(k, &args, nullptr), KF_ERROR_INVALID_ARGUMENT,
               "args->inputs is NULL");
  args.inputs = inputs;
  args.outputs = nullptr;
  EXPECT_FAILS(kf_fused_kernel_launch(k, &args, nullptr), KF_ERROR_INVALID_ARGUMENT,
               "args->outputs is NULL");
  args.outputs = outputs;
  const kf_rect_t crop = {0, 0, 1, 1};
  args.crops = &crop;
  EXPECT_FAILS(kf_fused_kernel_launch(k, &args, nullptr), KF_ERROR_INVALID_ARGUMENT,
               "no read of this graph crops");
  EXPECT_FAILS(kf_fused_kernel_launch(nullptr, &args, nullptr), KF_ERROR_INVALID_HANDLE,
               "k is NULL");
}

TEST_F(TensorLaunchTest, OutputsMustNotOverlap) {
  Tensor a = make_tensor(ctx, KF_DTYPE_FLOAT32, {3, 5});
  Tensor b = make_tensor(ctx, KF_DTYPE_FLOAT32, {5});
  EXPECT_FAILS(launch({a, b}, {a}), KF_ERROR_INVALID_ARGUMENT,
               "output 0 of item 0 overlaps input 0 of item 0 (the same tensor)");
  // Two views of one buffer, rows 0..2 read and rows 1..3 written.
  Tensor big = make_tensor(ctx, KF_DTYPE_FLOAT32, {4, 5});
  kf_tensor_t* head_view = nullptr;
  kf_tensor_t* tail_view = nullptr;
  const kf_tensor_desc_t rd = make_desc(KF_DTYPE_FLOAT32, {3, 5});
  KF_ASSERT_OK(kf_tensor_create_view(big, &rd, 0, &head_view));
  KF_ASSERT_OK(kf_tensor_create_view(big, &rd, 5, &tail_view));
  Tensor head(head_view), tail(tail_view);
  EXPECT_FAILS(launch({head, b}, {tail}), KF_ERROR_INVALID_ARGUMENT,
               "output 0 of item 0 overlaps input 0 of item 0: outputs must not share memory");
  // Two items writing one tensor.
  Tensor out = make_tensor(ctx, KF_DTYPE_FLOAT32, {3, 5});
  EXPECT_FAILS(launch({a, b, a, b}, {out, out}, {}, 2), KF_ERROR_INVALID_ARGUMENT,
               "output 0 of item 0 overlaps output 0 of item 1 (the same tensor)");
  // Writing through a broadcast (stride 0) view or a self-overlapping one is refused.
  kf_tensor_t* bcast = nullptr;
  const kf_tensor_desc_t bcd = make_desc(KF_DTYPE_FLOAT32, {3, 5}, {0, 1});
  KF_ASSERT_OK(kf_tensor_create_view(big, &bcd, 0, &bcast));
  Tensor broadcast_view(bcast);
  EXPECT_FAILS(launch({a, b}, {broadcast_view}), KF_ERROR_INVALID_ARGUMENT, "stride 0");
  kf_tensor_t* folded = nullptr;
  const kf_tensor_desc_t fd = make_desc(KF_DTYPE_FLOAT32, {3, 5}, {2, 1});
  KF_ASSERT_OK(kf_tensor_create_view(big, &fd, 0, &folded));
  Tensor self_overlap(folded);
  EXPECT_FAILS(launch({a, b}, {self_overlap}), KF_ERROR_INVALID_ARGUMENT, "overlapping elements");
  // Inputs may share memory with each other.
  kf_tensor_t* row = nullptr;
  const kf_tensor_desc_t row_desc = make_desc(KF_DTYPE_FLOAT32, {5});
  KF_ASSERT_OK(kf_tensor_create_view(a, &row_desc, 0, &row));
  Tensor first_row(row);
  KF_EXPECT_ERR(launch({a, first_row}, {out}), KF_SUCCESS);
}

// One immutable kernel launched from several threads at once, each with its own tensors, shapes
// and factor: every result is that thread's own.
TEST_F(TensorLaunchTest, ConcurrentLaunchesFromManyThreads) {
  constexpr int kThreads = 4;
  constexpr int kRounds = 50;
  std::vector<std::string> failures(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const int64_t rows = 1 + t, cols = 3 + 2 * t;
      kf_tensor_desc_t xd = make_desc(KF_DTYPE_FLOAT32, {rows, cols});
      kf_tensor_desc_t yd = make_desc(KF_DTYPE_FLOAT32, {cols});
      kf_tensor_t *a = nullptr, *b = nullptr, *out = nullptr;
      if (kf_tensor_create(ctx, &xd, &a) != KF_SUCCESS || kf_tensor_create(ctx, &yd, &b) ||
          kf_tensor_create(ctx, &xd, &out)) {
        failures[t] = "tensor creation failed";
        return;
      }
      std::vector<float> av(static_cast<size_t>(rows * cols)), bv(static_cast<size_t>(cols));
      for (size_t i = 0; i < av.size(); ++i) av[i] = static_cast<float>(i) - 2.5f * t;
      for (size_t i = 0; i < bv.size(); ++i) bv[i] = 0.25f * static_cast<float>(i + t);
      kf_tensor_copy_from_host(a, av.data(), av.size() * sizeof(float), nullptr);
      kf_tensor_copy_from_host(b, bv.data(), bv.size() * sizeof(float), nullptr);
      std::vector<float> got(av.size());
      for (int round = 0; round < kRounds && failures[t].empty(); ++round) {
        const double f = 0.5 * (t + 1) + round;
        const kf_tensor_t* inputs[2] = {a, b};
        kf_tensor_t* outputs[1] = {out};
        const kf_fused_value_t value = {factor, 0, f};
        kf_launch_args_t args = KF_LAUNCH_ARGS_INIT;
        args.inputs = inputs;
        args.outputs = outputs;
        args.values = &value;
        args.n_values = 1;
        if (kf_fused_kernel_launch(k, &args, nullptr) != KF_SUCCESS) {
          failures[t] = kf_get_last_error_message();
          break;
        }
        kf_tensor_copy_to_host(out, got.data(), got.size() * sizeof(float), nullptr);
        for (size_t i = 0; i < got.size(); ++i) {
          const float want =
              static_cast<float>(av[i] * static_cast<float>(f)) + bv[i % static_cast<size_t>(cols)];
          if (got[i] != want) {
            failures[t] = "round " + std::to_string(round) + " element " + std::to_string(i) +
                          ": " + std::to_string(got[i]) + " != " + std::to_string(want);
            break;
          }
        }
      }
      kf_tensor_destroy(a);
      kf_tensor_destroy(b);
      kf_tensor_destroy(out);
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], "") << "thread " << t;
}

TEST_F(TensorLaunchTest, ValueOverridesAreChecked) {
  Tensor a = make_tensor(ctx, KF_DTYPE_FLOAT32, {2, 2});
  Tensor b = make_tensor(ctx, KF_DTYPE_FLOAT32, {2});
  Tensor out = make_tensor(ctx, KF_DTYPE_FLOAT32, {2, 2});
  EXPECT_FAILS(launch({a, b}, {out}, {{99, 0, 1.0}}), KF_ERROR_INVALID_ARGUMENT,
               "args->values[0] names node 99, which does not exist");
  EXPECT_FAILS(launch({a, b}, {out}, {{factor, 1, 1.0}}), KF_ERROR_INVALID_ARGUMENT,
               "names value 1 of node 2, which has 1 launch value");
  EXPECT_FAILS(launch({a, b}, {out}, {{x, 0, 1.0}}), KF_ERROR_INVALID_ARGUMENT,
               "which has 0 launch values");
  // A float operand takes any value, NaN included.
  KF_EXPECT_ERR(launch({a, b}, {out}, {{factor, 0, std::nan("")}}), KF_SUCCESS);
  kf_launch_args_t args = KF_LAUNCH_ARGS_INIT;
  const kf_tensor_t* inputs[2] = {a, b};
  kf_tensor_t* outputs[1] = {out};
  args.inputs = inputs;
  args.outputs = outputs;
  args.n_values = 1;
  EXPECT_FAILS(kf_fused_kernel_launch(k, &args, nullptr), KF_ERROR_INVALID_ARGUMENT,
               "args->values is NULL");
}

TEST_F(GraphTest, IntegerValueOverridesMustBeIntegers) {
  const int32_t x = tensor_input(KF_DTYPE_INT32, 1);
  const int32_t offset = scalar(3.0);
  output(binary(KF_BINARY_ADD, x, offset));
  kf_fused_kernel_t* k = compile();
  ASSERT_NE(k, nullptr);
  Tensor a = make_tensor(ctx, KF_DTYPE_INT32, {4});
  Tensor out = make_tensor(ctx, KF_DTYPE_INT32, {4});
  upload(a, {1, -2, 3, 100});
  const kf_tensor_t* inputs[1] = {a};
  kf_tensor_t* outputs[1] = {out};
  kf_launch_args_t args = KF_LAUNCH_ARGS_INIT;
  args.inputs = inputs;
  args.outputs = outputs;
  kf_fused_value_t value = {offset, 0, std::nan("")};
  args.values = &value;
  args.n_values = 1;
  EXPECT_FAILS(kf_fused_kernel_launch(k, &args, nullptr), KF_ERROR_INVALID_ARGUMENT,
               "value of node 1 is nan, but the node is used as an integer value");
  value.value = -10.0;
  kf_test::poison(out);
  KF_ASSERT_OK(kf_fused_kernel_launch(k, &args, nullptr));
  kf_test::expect_close(download(out), {-9, -12, -7, 90}, 0, "x + offset override");
  args.n_values = 0;
  kf_test::poison(out);
  KF_ASSERT_OK(kf_fused_kernel_launch(k, &args, nullptr));
  kf_test::expect_close(download(out), {4, 1, 6, 103}, 0, "x + offset default");
}

TEST_F(GraphTest, KernelOutlivesItsGraphAndIgnoresLaterChanges) {
  const int32_t x = tensor_input(KF_DTYPE_FLOAT64, 1);
  output(unary(KF_UNARY_SQUARE, x));
  kf_fused_kernel_t* k = compile();
  ASSERT_NE(k, nullptr);
  output(unary(KF_UNARY_NEG, x));  // the kernel froze the graph at compile time
  EXPECT_EQ(info(k).n_outputs, 1);
  KF_ASSERT_OK(kf_graph_destroy(g));
  g = nullptr;
  Tensor a = make_tensor(ctx, KF_DTYPE_FLOAT64, {3});
  Tensor out = make_tensor(ctx, KF_DTYPE_FLOAT64, {3});
  upload(a, {1.5, -2, 3});
  const kf_tensor_t* inputs[1] = {a};
  kf_tensor_t* outputs[1] = {out};
  kf_launch_args_t args = KF_LAUNCH_ARGS_INIT;
  args.inputs = inputs;
  args.outputs = outputs;
  kf_test::poison(out);
  KF_ASSERT_OK(kf_fused_kernel_launch(k, &args, nullptr));
  kf_test::expect_close(download(out), {2.25, 4, 9}, 0, "square");
}

// ---- launch: image graphs

class ImageLaunchTest : public GraphTest {
 protected:
  // A u8 RGB frame, cropped (no resize), normalised, written planar into one [N, 3, H, W] f32.
  void SetUp() override {
    GraphTest::SetUp();
    image = image_input(KF_DTYPE_UINT8, 3);
    kf_image_read_desc_t desc = KF_IMAGE_READ_DESC_INIT;
    desc.crop = 1;
    desc.border_value = 0.0;
    const int32_t pixel = read(image, desc);
    const double mean[3] = {10, 20, 30};
    const double stdev[3] = {2, 4, 8};
    KF_ASSERT_OK(kf_graph_normalize(g, pixel, 1.0, mean, stdev, &normalized));
    output(normalized, KF_OUTPUT_PLANAR, 1);
    k = compile(g, 4);
    ASSERT_NE(k, nullptr);
    Tensor made = make_tensor(ctx, KF_DTYPE_UINT8, {kH, kW, 3});
    std::swap(frame.t, made.t);
    frame_values.resize(kH * kW * 3);
    for (size_t i = 0; i < frame_values.size(); ++i) frame_values[i] = (i * 37 + 11) % 256;
    upload(frame, frame_values);
  }
  kf_result_t launch(std::vector<const kf_tensor_t*> inputs, std::vector<kf_tensor_t*> outputs,
                     std::vector<kf_rect_t> crops, std::vector<kf_fused_value_t> values = {}) {
    kf_launch_args_t args = KF_LAUNCH_ARGS_INIT;
    args.n_items = static_cast<int32_t>(outputs.size());
    args.inputs = inputs.data();
    args.outputs = outputs.data();
    args.crops = crops.empty() ? nullptr : crops.data();
    args.values = values.empty() ? nullptr : values.data();
    args.n_values = values.size();
    return kf_fused_kernel_launch(k, &args, nullptr);
  }
  // (v - mean[c]) / std[c] of the frame pixel (x, y), or of the border value 0 outside.
  double expected(int64_t x, int64_t y, int c, const double* mean, const double* stdev) const {
    const bool inside = x >= 0 && y >= 0 && x < kW && y < kH;
    const double v = inside ? frame_values[static_cast<size_t>((y * kW + x) * 3 + c)] : 0.0;
    return static_cast<float>((static_cast<float>(v) - static_cast<float>(mean[c])) /
                              static_cast<float>(stdev[c]));
  }
  static constexpr int64_t kH = 6, kW = 7;
  int32_t image = -1, normalized = -1;
  kf_fused_kernel_t* k = nullptr;
  Tensor frame;
  std::vector<double> frame_values;
};

TEST_F(ImageLaunchTest, CropsPerItemIntoOneBatchedPlanarOutput) {
  Tensor batch = make_tensor(ctx, KF_DTYPE_FLOAT32, {3, 3, 2, 3});  // N=3 >= 2 items
  kf_test::poison(batch);
  const std::vector<kf_rect_t> crops = {{1, 2, 3, 2}, {5, 5, 3, 2}};  // the second leaves the frame
  const double stdev[3] = {2, 4, 8};
  const double mean2[3] = {10, -5, 30};  // mean[1] overridden
  KF_ASSERT_OK(launch({frame, frame}, {batch, batch}, crops, {{normalized, 2, -5.0}}));
  const std::vector<double> got = download(batch);
  for (int item = 0; item < 2; ++item) {
    for (int c = 0; c < 3; ++c) {
      for (int y = 0; y < 2; ++y) {
        for (int x = 0; x < 3; ++x) {
          const size_t at = static_cast<size_t>(((item * 3 + c) * 2 + y) * 3 + x);
          const double want = expected(crops[item].x + x, crops[item].y + y, c, mean2, stdev);
          EXPECT_NEAR(got[at], want, 1e-5 * std::max(1.0, std::fabs(want)))
              << "item " << item << " c " << c << " y " << y << " x " << x;
        }
      }
    }
  }
  // Item 2 of the batch was not launched: still poisoned.
  EXPECT_TRUE(std::isnan(got[2 * 18]));
}

TEST_F(ImageLaunchTest, ImagesOutputsAndCropsAreValidated) {
  Tensor batch = make_tensor(ctx, KF_DTYPE_FLOAT32, {2, 3, 2, 3});
  Tensor other_batch = make_tensor(ctx, KF_DTYPE_FLOAT32, {2, 3, 2, 3});
  Tensor small_batch = make_tensor(ctx, KF_DTYPE_FLOAT32, {1, 3, 2, 3});
  Tensor hwc_batch = make_tensor(ctx, KF_DTYPE_FLOAT32, {2, 2, 3, 3});
  Tensor gray = make_tensor(ctx, KF_DTYPE_UINT8, {kH, kW, 1});
  Tensor flat = make_tensor(ctx, KF_DTYPE_UINT8, {kH, kW * 3});
  const kf_rect_t crop = {0, 0, 3, 2};
  EXPECT_FAILS(launch({frame}, {batch}, {}), KF_ERROR_INVALID_ARGUMENT, "args->crops is NULL");
  EXPECT_FAILS(launch({frame}, {batch}, {{0, 0, 0, 2}}), KF_ERROR_INVALID_ARGUMENT,
               "args->crops[0] is 0 x 2");
  EXPECT_FAILS(launch({gray}, {batch}, {crop}), KF_ERROR_SHAPE_MISMATCH,
               "input 0 of item 0 has shape [6,7,1], but the graph declares an image [H, W, 3]");
  EXPECT_FAILS(launch({flat}, {batch}, {crop}), KF_ERROR_SHAPE_MISMATCH, "[H, W, 3]");
  EXPECT_FAILS(launch({frame, frame}, {small_batch, small_batch}, {crop, crop}),
               KF_ERROR_SHAPE_MISMATCH, "needs N >= n_items (2)");
  EXPECT_FAILS(launch({frame}, {hwc_batch}, {crop}), KF_ERROR_SHAPE_MISMATCH,
               "writes it as [N, C, H, W] with C = 3");
  EXPECT_FAILS(launch({frame, frame}, {batch, other_batch}, {crop, crop}),
               KF_ERROR_INVALID_ARGUMENT, "same tensor in every item");
  EXPECT_FAILS(launch({batch}, {batch}, {crop}), KF_ERROR_DTYPE_MISMATCH,
               "is a float32 tensor, but the graph declares uint8");
  EXPECT_FAILS(launch({frame}, {batch}, {crop}, {{normalized, 4, 0.0}}), KF_ERROR_INVALID_ARGUMENT,
               "std[0] of node 2 is 0");
  EXPECT_FAILS(launch({frame}, {batch}, {crop}, {{normalized, 7, 0.0}}), KF_ERROR_INVALID_ARGUMENT,
               "which has 7 launch values");
  EXPECT_FAILS(launch({frame}, {batch}, {crop}, {{normalized, 1, INFINITY}}),
               KF_ERROR_INVALID_ARGUMENT, "mean[0] of node 2 is inf");
  KF_EXPECT_ERR(launch({frame}, {batch}, {crop}), KF_SUCCESS);
}

TEST_F(GraphTest, Nv12FramesAreValidated) {
  const int32_t frame = nv12_input();
  output(read(frame));  // RGB, float32, 3 channels
  kf_fused_kernel_t* k = compile();
  ASSERT_NE(k, nullptr);
  Tensor out = make_tensor(ctx, KF_DTYPE_FLOAT32, {2, 2, 3});
  kf_tensor_t* outputs[1] = {out};
  kf_launch_args_t args = KF_LAUNCH_ARGS_INIT;
  args.outputs = outputs;
  for (const std::vector<int64_t>& bad :
       {std::vector<int64_t>{8, 8}, std::vector<int64_t>{9, 7}, std::vector<int64_t>{9, 8, 1}}) {
    Tensor t = make_tensor(ctx, KF_DTYPE_UINT8, bad);
    const kf_tensor_t* inputs[1] = {t};
    args.inputs = inputs;
    EXPECT_FAILS(kf_fused_kernel_launch(k, &args, nullptr), KF_ERROR_SHAPE_MISMATCH,
                 "an NV12 frame is [H * 3 / 2, W] with H and W even");
  }
  // A valid 6 x 8 frame of distinct bytes: the output is its top-left 2 x 2 in RGB, BT.601
  // video range (the read's defaults), worked out here in float64.
  std::vector<double> frame_bytes(72);
  for (size_t i = 0; i < frame_bytes.size(); ++i) frame_bytes[i] = 16 + (i * 37) % 220;
  Tensor good = make_tensor(ctx, KF_DTYPE_UINT8, {9, 8});
  upload(good, frame_bytes);
  std::vector<double> want;
  const double kr = 0.299, kb = 0.114, kg = 1 - kr - kb;
  for (int y = 0; y < 2; ++y) {
    for (int x = 0; x < 2; ++x) {
      const double luma = (frame_bytes[static_cast<size_t>(y * 8 + x)] - 16) * 255 / 219;
      const size_t uv = static_cast<size_t>(6 + y / 2) * 8 + static_cast<size_t>(x / 2 * 2);
      const double u = (frame_bytes[uv] - 128) * 255 / 224,
                   v = (frame_bytes[uv + 1] - 128) * 255 / 224;
      for (double c :
           {luma + 2 * (1 - kr) * v, luma - 2 * kb * (1 - kb) / kg * u - 2 * kr * (1 - kr) / kg * v,
            luma + 2 * (1 - kb) * u})
        want.push_back(std::clamp(c, 0.0, 255.0));
    }
  }
  const kf_tensor_t* inputs[1] = {good};
  args.inputs = inputs;
  kf_test::poison(out);
  KF_ASSERT_OK(kf_fused_kernel_launch(k, &args, nullptr));
  kf_test::expect_close(download(out), want, 1e-4, "RGB of the valid frame");
}

TEST_F(GraphTest, ImageOutputsOfAnItemShareASize) {
  const int32_t image = image_input(KF_DTYPE_FLOAT32, 1);
  const int32_t pixel = read(image);
  output(unary(KF_UNARY_NEG, pixel));
  output(unary(KF_UNARY_ABS, pixel), KF_OUTPUT_PLANAR);
  kf_fused_kernel_t* k = compile();
  ASSERT_NE(k, nullptr);
  Tensor frame = make_tensor(ctx, KF_DTYPE_FLOAT32, {3, 4, 1});
  upload(frame, {1, -2, 3, -4, 5, -6, 7, -8, 9, -10, 11, -12});
  Tensor hwc = make_tensor(ctx, KF_DTYPE_FLOAT32, {2, 3, 1});
  Tensor chw = make_tensor(ctx, KF_DTYPE_FLOAT32, {1, 2, 2});
  const kf_tensor_t* inputs[1] = {frame};
  kf_tensor_t* outputs[2] = {hwc, chw};
  kf_launch_args_t args = KF_LAUNCH_ARGS_INIT;
  args.inputs = inputs;
  args.outputs = outputs;
  EXPECT_FAILS(kf_fused_kernel_launch(k, &args, nullptr), KF_ERROR_SHAPE_MISMATCH,
               "output 1 of item 0 is 2 x 2 (H x W), but output 0 of the item is 2 x 3");
  Tensor chw_ok = make_tensor(ctx, KF_DTYPE_FLOAT32, {1, 2, 3});
  outputs[1] = chw_ok;
  kf_test::poison(hwc);
  kf_test::poison(chw_ok);
  KF_ASSERT_OK(kf_fused_kernel_launch(k, &args, nullptr));
  // No crop: the read covers the whole image from (0, 0); the output is its top-left 2 x 3.
  kf_test::expect_close(download(hwc), {-1, 2, -3, -5, 6, -7}, 0, "neg");
  kf_test::expect_close(download(chw_ok), {1, 2, 3, 5, 6, 7}, 0, "abs");
}

}  // namespace
