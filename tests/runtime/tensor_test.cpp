// Tensors: creation and validation, queries, copies (contiguous and strided), views, borrowed
// memory.
#include <cmath>
#include <cstddef>
#include <memory>
#include <vector>

#include "tests/common/test_util.hpp"

namespace {

using kf_test::device_under_test;
using kf_test::make_desc;

kf_tensor_t* const kSentinelTensor = reinterpret_cast<kf_tensor_t*>(uintptr_t{0x5a5a5a5a});

const kf_dtype_t kAllDtypes[] = {KF_DTYPE_FLOAT32, KF_DTYPE_FLOAT16, KF_DTYPE_BFLOAT16,
                                 KF_DTYPE_FLOAT64, KF_DTYPE_INT8,    KF_DTYPE_UINT8,
                                 KF_DTYPE_INT32,   KF_DTYPE_INT64};

// Random values that every dtype represents exactly (small integers for the integer types).
std::vector<double> values_for(kf_dtype_t dtype, size_t n, uint64_t seed) {
  std::vector<double> v =
      kf_test::random_values(n, seed, dtype == KF_DTYPE_UINT8 ? 1.0 : -100.0, 100.0);
  if (dtype == KF_DTYPE_INT8 || dtype == KF_DTYPE_UINT8 || dtype == KF_DTYPE_INT32 ||
      dtype == KF_DTYPE_INT64) {
    for (double& x : v) x = std::floor(x);
  }
  return kf_test::round_to_dtype(v, dtype);
}

TEST(Tensor, CreateQueriesAndRoundTripEveryDtype) {
  KF_REQUIRE_DEVICE();
  kf_test::Context ctx;
  for (kf_dtype_t dtype : kAllDtypes) {
    kf_test::Tensor t = kf_test::make_tensor(ctx, dtype, {7, 5, 3});
    kf_tensor_desc_t d{};
    KF_ASSERT_OK(kf_tensor_get_desc(t, &d));
    EXPECT_EQ(d.ndim, 3);
    EXPECT_EQ(d.dtype, dtype);
    EXPECT_EQ(d.strides[0], 15);
    EXPECT_EQ(d.strides[1], 3);
    EXPECT_EQ(d.strides[2], 1);
    void* data = nullptr;
    KF_ASSERT_OK(kf_tensor_get_data(t, &data));
    EXPECT_NE(data, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(data) % 64, 0u);
    kf_device_type_t type;
    int32_t id = -1;
    KF_ASSERT_OK(kf_tensor_get_device(t, &type, &id));
    EXPECT_EQ(type, device_under_test());
    EXPECT_EQ(id, 0);
    KF_ASSERT_OK(kf_tensor_get_device(t, nullptr, nullptr));
    kf_context_t* owner = nullptr;
    KF_ASSERT_OK(kf_tensor_get_context(t, &owner));
    EXPECT_EQ(owner, ctx.ctx);
    std::vector<double> values = values_for(dtype, 105, 11 + dtype);
    kf_test::upload(t, values);
    kf_test::expect_close(kf_test::download(t), values, 0.0, "round trip");
  }
}

TEST(Tensor, ScalarAndEmpty) {
  KF_REQUIRE_DEVICE();
  kf_test::Context ctx;
  kf_test::Tensor scalar = kf_test::make_tensor(ctx, KF_DTYPE_FLOAT64, {});
  kf_test::upload(scalar, {2.75});
  kf_test::expect_close(kf_test::download(scalar), {2.75}, 0.0, "scalar");

  kf_test::Tensor empty = kf_test::make_tensor(ctx, KF_DTYPE_FLOAT32, {3, 0, 2});
  kf_tensor_desc_t d{};
  KF_ASSERT_OK(kf_tensor_get_desc(empty, &d));
  EXPECT_EQ(d.shape[1], 0);
  KF_ASSERT_OK(kf_tensor_copy_from_host(empty, nullptr, 0, nullptr));
  KF_ASSERT_OK(kf_tensor_copy_to_host(empty, nullptr, 0, nullptr));
  kf_tensor_desc_t view_desc = make_desc(KF_DTYPE_FLOAT32, {0});
  kf_tensor_t* view = nullptr;
  KF_ASSERT_OK(kf_tensor_create_view(empty, &view_desc, 0, &view));
  KF_ASSERT_OK(kf_tensor_destroy(view));
}

TEST(Tensor, InvalidDescriptorsAreRefused) {
  KF_REQUIRE_DEVICE();
  kf_test::Context ctx;
  kf_tensor_t* t = kSentinelTensor;
  kf_tensor_desc_t d = make_desc(KF_DTYPE_FLOAT32, {4});
  KF_EXPECT_ERR(kf_tensor_create(ctx, nullptr, &t), KF_ERROR_INVALID_ARGUMENT);
  KF_EXPECT_ERR(kf_tensor_create(ctx, &d, nullptr), KF_ERROR_INVALID_ARGUMENT);
  KF_EXPECT_ERR(kf_tensor_create(nullptr, &d, &t), KF_ERROR_INVALID_HANDLE);
  d.ndim = -1;
  KF_EXPECT_ERR(kf_tensor_create(ctx, &d, &t), KF_ERROR_INVALID_ARGUMENT);
  d.ndim = KF_MAX_DIMS + 1;
  KF_EXPECT_ERR(kf_tensor_create(ctx, &d, &t), KF_ERROR_INVALID_ARGUMENT);
  d = make_desc(KF_DTYPE_FLOAT32, {4, -2});
  KF_EXPECT_ERR(kf_tensor_create(ctx, &d, &t), KF_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kf_get_last_error_message()).find("shape[1]"), std::string::npos);
  d = make_desc(KF_DTYPE_FLOAT32, {4, 2}, {2, -1});
  KF_EXPECT_ERR(kf_tensor_create(ctx, &d, &t), KF_ERROR_INVALID_ARGUMENT);
  d = make_desc(static_cast<kf_dtype_t>(99), {4});
  KF_EXPECT_ERR(kf_tensor_create(ctx, &d, &t), KF_ERROR_INVALID_ARGUMENT);
  d = make_desc(KF_DTYPE_FLOAT32, {int64_t{1} << 40, int64_t{1} << 40});  // element count overflows
  KF_EXPECT_ERR(kf_tensor_create(ctx, &d, &t), KF_ERROR_INVALID_ARGUMENT);
  d = make_desc(KF_DTYPE_FLOAT64, {int64_t{1} << 61});  // byte size overflows
  KF_EXPECT_ERR(kf_tensor_create(ctx, &d, &t), KF_ERROR_INVALID_ARGUMENT);
  d = make_desc(KF_DTYPE_FLOAT32, {3, 3}, {int64_t{1} << 62, 1});  // extent overflows
  KF_EXPECT_ERR(kf_tensor_create(ctx, &d, &t), KF_ERROR_INVALID_ARGUMENT);
  // A broadcast whose span is one element but whose packed bytes overflow: (2^61 + 1) * 8 wrapped
  // to 8, and kf_tensor_copy_to_host took an 8-byte buffer and wrote 2^61 + 1 elements to it.
  d = make_desc(KF_DTYPE_FLOAT64, {(int64_t{1} << 61) + 1, 1}, {0, 1});
  KF_EXPECT_ERR(kf_tensor_create(ctx, &d, &t), KF_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kf_get_last_error_message()).find("overflows"), std::string::npos);
  d = make_desc(KF_DTYPE_FLOAT32, {(int64_t{1} << 62) + 1, 1}, {0, 1});
  KF_EXPECT_ERR(kf_tensor_create(ctx, &d, &t), KF_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(t, kSentinelTensor);
  // All eight dimensions are fine.
  d = make_desc(KF_DTYPE_UINT8, {2, 1, 2, 1, 2, 1, 2, 3});
  KF_ASSERT_OK(kf_tensor_create(ctx, &d, &t));
  KF_ASSERT_OK(kf_tensor_destroy(t));
}

TEST(Tensor, HandleChecks) {
  KF_REQUIRE_DEVICE();
  kf_test::Context ctx;
  kf_tensor_desc_t d = make_desc(KF_DTYPE_FLOAT32, {4});
  kf_tensor_t* t = nullptr;
  KF_ASSERT_OK(kf_tensor_create(ctx, &d, &t));
  KF_EXPECT_ERR(kf_tensor_get_desc(t, nullptr), KF_ERROR_INVALID_ARGUMENT);
  KF_EXPECT_ERR(kf_tensor_get_data(t, nullptr), KF_ERROR_INVALID_ARGUMENT);
  KF_EXPECT_ERR(kf_tensor_get_context(t, nullptr), KF_ERROR_INVALID_ARGUMENT);
  KF_ASSERT_OK(kf_tensor_destroy(nullptr));
  KF_ASSERT_OK(kf_tensor_destroy(t));
  kf_tensor_desc_t out = make_desc(KF_DTYPE_INT8, {9});
  void* data = reinterpret_cast<void*>(1);
  kf_context_t* owner = reinterpret_cast<kf_context_t*>(1);
  kf_device_type_t type = KF_DEVICE_CUDA;  // sentinel
  float values[4] = {1, 2, 3, 4};
  KF_EXPECT_ERR(kf_tensor_destroy(t), KF_ERROR_INVALID_HANDLE);
  KF_EXPECT_ERR(kf_tensor_get_desc(t, &out), KF_ERROR_INVALID_HANDLE);
  KF_EXPECT_ERR(kf_tensor_get_data(t, &data), KF_ERROR_INVALID_HANDLE);
  KF_EXPECT_ERR(kf_tensor_get_device(t, &type, nullptr), KF_ERROR_INVALID_HANDLE);
  KF_EXPECT_ERR(kf_tensor_get_context(t, &owner), KF_ERROR_INVALID_HANDLE);
  KF_EXPECT_ERR(kf_tensor_copy_from_host(t, values, sizeof(values), nullptr),
                KF_ERROR_INVALID_HANDLE);
  KF_EXPECT_ERR(kf_tensor_copy_to_host(t, values, sizeof(values), nullptr),
                KF_ERROR_INVALID_HANDLE);
  KF_EXPECT_ERR(kf_tensor_create_view(t, &d, 0, &t), KF_ERROR_INVALID_HANDLE);
  EXPECT_EQ(out.ndim, 1);
  EXPECT_EQ(out.dtype, KF_DTYPE_INT8);
  EXPECT_EQ(data, reinterpret_cast<void*>(1));
  EXPECT_EQ(owner, reinterpret_cast<kf_context_t*>(1));
  EXPECT_EQ(type, KF_DEVICE_CUDA);
  // Wrong kind: a stream and a context passed as tensors.
  kf_stream_t* s = nullptr;
  KF_ASSERT_OK(kf_stream_create(ctx, nullptr, &s));
  KF_EXPECT_ERR(kf_tensor_get_desc(reinterpret_cast<kf_tensor_t*>(s), &out),
                KF_ERROR_INVALID_HANDLE);
  KF_EXPECT_ERR(kf_tensor_destroy(reinterpret_cast<kf_tensor_t*>(s)), KF_ERROR_INVALID_HANDLE);
  KF_EXPECT_ERR(
      kf_tensor_copy_from_host(reinterpret_cast<kf_tensor_t*>(ctx.ctx), values, 16, nullptr),
      KF_ERROR_INVALID_HANDLE);
  // A destroyed stream passed to a copy.
  kf_test::Tensor live = kf_test::make_tensor(ctx, KF_DTYPE_FLOAT32, {4});
  KF_ASSERT_OK(kf_stream_destroy(s));
  KF_EXPECT_ERR(kf_tensor_copy_from_host(live, values, sizeof(values), s), KF_ERROR_INVALID_HANDLE);
}

// A destroyed handle stays dead while new handles are made: their objects do not take its address
// (core/runtime/handle.hpp, retire_handle_memory), so a second destroy, or a call through the
// stale handle, is refused instead of reaching a new tensor (before, the next tensor of the same
// size came back at the destroyed one's address and a second destroy destroyed it).
TEST(Tensor, DestroyedHandleStaysDeadAmongNewOnes) {
  KF_REQUIRE_DEVICE();
  kf_test::Context ctx;
  const kf_tensor_desc_t d = make_desc(KF_DTYPE_FLOAT32, {4});
  kf_tensor_t* stale = nullptr;
  KF_ASSERT_OK(kf_tensor_create(ctx, &d, &stale));
  KF_ASSERT_OK(kf_tensor_destroy(stale));
  std::vector<kf_test::Tensor> fresh;
  for (int i = 0; i < 64; ++i) {
    kf_tensor_t* t = nullptr;
    KF_ASSERT_OK(kf_tensor_create(ctx, &d, &t));
    fresh.emplace_back(t);
    EXPECT_NE(t, stale) << "tensor " << i << " took the destroyed tensor's address";
  }
  kf_tensor_desc_t out{};
  KF_EXPECT_ERR(kf_tensor_get_desc(stale, &out), KF_ERROR_INVALID_HANDLE);
  KF_EXPECT_ERR(kf_tensor_destroy(stale), KF_ERROR_INVALID_HANDLE);
  for (const kf_test::Tensor& t : fresh) {
    KF_ASSERT_OK(kf_tensor_get_desc(t, &out));  // the new ones are all live
    EXPECT_EQ(out.shape[0], 4);
  }
  // Streams likewise.
  kf_stream_t* old_stream = nullptr;
  KF_ASSERT_OK(kf_stream_create(ctx, nullptr, &old_stream));
  KF_ASSERT_OK(kf_stream_destroy(old_stream));
  kf_stream_t* new_stream = nullptr;
  KF_ASSERT_OK(kf_stream_create(ctx, nullptr, &new_stream));
  EXPECT_NE(new_stream, old_stream);
  KF_EXPECT_ERR(kf_stream_destroy(old_stream), KF_ERROR_INVALID_HANDLE);
  KF_ASSERT_OK(kf_stream_destroy(new_stream));
}

TEST(Tensor, CopyArgumentErrors) {
  KF_REQUIRE_DEVICE();
  kf_test::Context ctx;
  kf_test::Tensor t = kf_test::make_tensor(ctx, KF_DTYPE_FLOAT32, {3, 4});
  std::vector<float> host(12, 1.0f);
  KF_EXPECT_ERR(kf_tensor_copy_from_host(t, host.data(), 40, nullptr), KF_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kf_get_last_error_message())
                .find("tensor 'dst' has 12 elements (48 bytes) but 40 bytes were given"),
            std::string::npos)
      << kf_get_last_error_message();
  KF_EXPECT_ERR(kf_tensor_copy_to_host(t, host.data(), 52, nullptr), KF_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kf_get_last_error_message()).find("tensor 'src' has 12 elements"),
            std::string::npos);
  KF_EXPECT_ERR(kf_tensor_copy_from_host(t, nullptr, 48, nullptr), KF_ERROR_INVALID_ARGUMENT);
  KF_EXPECT_ERR(kf_tensor_copy_to_host(t, nullptr, 48, nullptr), KF_ERROR_INVALID_ARGUMENT);
  kf_test::Context other;
  kf_test::Tensor foreign = kf_test::make_tensor(other, KF_DTYPE_FLOAT32, {3, 4});
  kf_stream_t* s = nullptr;
  KF_ASSERT_OK(kf_stream_create(ctx, nullptr, &s));
  KF_EXPECT_ERR(kf_tensor_copy_to_host(foreign, host.data(), 48, s), KF_ERROR_DEVICE_MISMATCH);
  KF_ASSERT_OK(kf_tensor_copy_to_host(t, host.data(), 48, s));
  KF_ASSERT_OK(kf_stream_destroy(s));
}

TEST(Tensor, ExplicitStridesAllocateTheirSpan) {
  KF_REQUIRE_DEVICE();
  kf_test::Context ctx;
  kf_tensor_desc_t d =
      make_desc(KF_DTYPE_FLOAT32, {3, 3}, {8, 2});  // reaches element 2*8 + 2*2 = 20
  kf_tensor_t* t = nullptr;
  KF_ASSERT_OK(kf_tensor_create(ctx, &d, &t));
  kf_memory_stats_t stats{};
  stats.struct_size = sizeof(stats);
  KF_ASSERT_OK(kf_context_get_memory_stats(ctx, &stats));
  EXPECT_GE(stats.in_use_bytes, 21u * sizeof(float));
  std::vector<double> values = values_for(KF_DTYPE_FLOAT32, 9, 5);
  kf_test::upload(t, values);
  kf_test::expect_close(kf_test::download(t), values, 0.0, "explicit strides");
  KF_ASSERT_OK(kf_tensor_destroy(t));
}

TEST(TensorView, TransposeSliceAndBroadcast) {
  KF_REQUIRE_DEVICE();
  kf_test::Context ctx;
  const int64_t rows = 5, cols = 7;
  kf_test::Tensor base = kf_test::make_tensor(ctx, KF_DTYPE_FLOAT64, {rows, cols});
  std::vector<double> values = values_for(KF_DTYPE_FLOAT64, rows * cols, 21);
  kf_test::upload(base, values);

  // Transpose.
  kf_tensor_desc_t d = make_desc(KF_DTYPE_FLOAT64, {cols, rows}, {1, cols});
  kf_tensor_t* transposed = nullptr;
  KF_ASSERT_OK(kf_tensor_create_view(base, &d, 0, &transposed));
  std::vector<double> want(rows * cols);
  for (int64_t i = 0; i < cols; ++i)
    for (int64_t j = 0; j < rows; ++j) want[i * rows + j] = values[j * cols + i];
  kf_test::expect_close(kf_test::download(transposed), want, 0.0, "transpose read");

  // Write through the transposed view, read the base.
  std::vector<double> written = values_for(KF_DTYPE_FLOAT64, rows * cols, 22);
  kf_test::upload(transposed, written);
  std::vector<double> base_want(rows * cols);
  for (int64_t i = 0; i < cols; ++i)
    for (int64_t j = 0; j < rows; ++j) base_want[j * cols + i] = written[i * rows + j];
  kf_test::expect_close(kf_test::download(base), base_want, 0.0, "transpose write");
  KF_ASSERT_OK(kf_tensor_destroy(transposed));

  // Slice rows 1..2, columns 2..4.
  d = make_desc(KF_DTYPE_FLOAT64, {2, 3}, {cols, 1});
  kf_tensor_t* slice = nullptr;
  KF_ASSERT_OK(kf_tensor_create_view(base, &d, 1 * cols + 2, &slice));
  std::vector<double> slice_want;
  for (int64_t i = 1; i < 3; ++i)
    for (int64_t j = 2; j < 5; ++j) slice_want.push_back(base_want[i * cols + j]);
  kf_test::expect_close(kf_test::download(slice), slice_want, 0.0, "slice");

  // A view of a view, offset relative to its base's first element: column 1 of the slice.
  kf_tensor_desc_t col = make_desc(KF_DTYPE_FLOAT64, {2}, {cols});
  kf_tensor_t* column = nullptr;
  KF_ASSERT_OK(kf_tensor_create_view(slice, &col, 1, &column));
  kf_test::expect_close(kf_test::download(column), {slice_want[1], slice_want[4]}, 0.0,
                        "view of view");
  KF_ASSERT_OK(kf_tensor_destroy(column));
  KF_ASSERT_OK(kf_tensor_destroy(slice));

  // Broadcast a row: readable, not writable.
  d = make_desc(KF_DTYPE_FLOAT64, {3, cols}, {0, 1});
  kf_tensor_t* broadcast = nullptr;
  KF_ASSERT_OK(kf_tensor_create_view(base, &d, cols, &broadcast));
  std::vector<double> row(base_want.begin() + cols, base_want.begin() + 2 * cols), bwant;
  for (int i = 0; i < 3; ++i) bwant.insert(bwant.end(), row.begin(), row.end());
  kf_test::expect_close(kf_test::download(broadcast), bwant, 0.0, "broadcast");
  std::vector<double> junk(3 * cols, 1.0);
  KF_EXPECT_ERR(kf_tensor_copy_from_host(broadcast, junk.data(), junk.size() * 8, nullptr),
                KF_ERROR_INVALID_ARGUMENT);
  KF_ASSERT_OK(kf_tensor_destroy(broadcast));
}

TEST(TensorView, StridedRoundTripEveryDtype) {
  KF_REQUIRE_DEVICE();
  kf_test::Context ctx;
  for (kf_dtype_t dtype : kAllDtypes) {
    // A [3,4,5] view with every dimension strided inside a [6,9,11] base (odd sizes, offset 13).
    kf_test::Tensor base = kf_test::make_tensor(ctx, dtype, {6, 9, 11});
    std::vector<double> base_values = values_for(dtype, 6 * 9 * 11, 100 + dtype);
    kf_test::upload(base, base_values);
    kf_tensor_desc_t d = make_desc(dtype, {3, 4, 5}, {2 * 99, 2 * 11, 2});
    kf_tensor_t* view = nullptr;
    KF_ASSERT_OK(kf_tensor_create_view(base, &d, 13, &view));
    std::vector<double> values = values_for(dtype, 60, 200 + dtype);
    kf_test::upload(view, values);
    kf_test::expect_close(kf_test::download(view), values, 0.0,
                          std::string("view ") + std::to_string(dtype));
    // Elements outside the view are untouched.
    std::vector<double> want = base_values;
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 4; ++j)
        for (int64_t k = 0; k < 5; ++k)
          want[13 + i * 198 + j * 22 + k * 2] = values[(i * 4 + j) * 5 + k];
    kf_test::expect_close(kf_test::download(base), want, 0.0,
                          std::string("base ") + std::to_string(dtype));
    KF_ASSERT_OK(kf_tensor_destroy(view));
  }
}

TEST(TensorView, Errors) {
  KF_REQUIRE_DEVICE();
  kf_test::Context ctx;
  kf_test::Tensor base = kf_test::make_tensor(ctx, KF_DTYPE_FLOAT32, {4, 4});
  kf_tensor_t* view = kSentinelTensor;
  kf_tensor_desc_t d = make_desc(KF_DTYPE_FLOAT32, {4, 4});
  KF_EXPECT_ERR(kf_tensor_create_view(base, &d, 1, &view),
                KF_ERROR_INVALID_ARGUMENT);  // one past the end
  KF_EXPECT_ERR(kf_tensor_create_view(base, &d, -1, &view), KF_ERROR_INVALID_ARGUMENT);
  KF_EXPECT_ERR(kf_tensor_create_view(base, nullptr, 0, &view), KF_ERROR_INVALID_ARGUMENT);
  KF_EXPECT_ERR(kf_tensor_create_view(base, &d, 0, nullptr), KF_ERROR_INVALID_ARGUMENT);
  kf_tensor_desc_t big = make_desc(KF_DTYPE_FLOAT32, {4, 4}, {5, 1});
  KF_EXPECT_ERR(kf_tensor_create_view(base, &big, 0, &view), KF_ERROR_INVALID_ARGUMENT);
  kf_tensor_desc_t huge = make_desc(KF_DTYPE_FLOAT32, {2}, {1});
  KF_EXPECT_ERR(kf_tensor_create_view(base, &huge, INT64_MAX, &view), KF_ERROR_INVALID_ARGUMENT);
  // (The message gave the wrapped byte count: "reaches 124 bytes ..., which holds 128".)
  EXPECT_NE(std::string(kf_get_last_error_message()).find("overflows"), std::string::npos)
      << kf_get_last_error_message();
  kf_tensor_desc_t other_dtype = make_desc(KF_DTYPE_INT32, {4, 4});
  KF_EXPECT_ERR(kf_tensor_create_view(base, &other_dtype, 0, &view), KF_ERROR_DTYPE_MISMATCH);
  KF_EXPECT_ERR(kf_tensor_create_view(nullptr, &d, 0, &view), KF_ERROR_INVALID_HANDLE);
  EXPECT_EQ(view, kSentinelTensor);
}

TEST(TensorView, OutlivesItsBase) {
  KF_REQUIRE_DEVICE();
  kf_test::Context ctx;
  kf_tensor_desc_t d = make_desc(KF_DTYPE_INT64, {10});
  kf_tensor_t* base = nullptr;
  KF_ASSERT_OK(kf_tensor_create(ctx, &d, &base));
  std::vector<double> values = values_for(KF_DTYPE_INT64, 10, 8);
  kf_test::upload(base, values);
  kf_tensor_desc_t half = make_desc(KF_DTYPE_INT64, {5}, {2});
  kf_tensor_t* view = nullptr;
  KF_ASSERT_OK(kf_tensor_create_view(base, &half, 1, &view));
  KF_ASSERT_OK(kf_tensor_destroy(base));
  kf_memory_stats_t stats{};
  stats.struct_size = sizeof(stats);
  KF_ASSERT_OK(kf_context_get_memory_stats(ctx, &stats));
  EXPECT_EQ(stats.allocation_count, 1u);  // the view keeps the block
  kf_test::expect_close(kf_test::download(view),
                        {values[1], values[3], values[5], values[7], values[9]}, 0.0,
                        "view after base destroyed");
  KF_ASSERT_OK(kf_tensor_destroy(view));
  KF_ASSERT_OK(kf_context_get_memory_stats(ctx, &stats));
  EXPECT_EQ(stats.allocation_count, 0u);
  EXPECT_EQ(stats.in_use_bytes, 0u);
}

// ---------------------------------------------------------------- borrowed memory

struct DeleterLog {
  int calls = 0;
  void* data = nullptr;
};

void log_deleter(void* data, void* user_data) {
  auto* log = static_cast<DeleterLog*>(user_data);
  ++log->calls;
  log->data = data;
}

// Memory of the device under test, owned by the fixture (another tensor's block).
class Wrap : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kf_test::device_available()) GTEST_SKIP() << "no CUDA device present";
    context_ = std::make_unique<kf_test::Context>();
    ctx_ = context_->ctx;
    ASSERT_NE(ctx_, nullptr);
    kf_tensor_desc_t d = make_desc(KF_DTYPE_FLOAT32, {64});
    ASSERT_EQ(kf_tensor_create(ctx_, &d, &owner_), KF_SUCCESS);
    ASSERT_EQ(kf_tensor_get_data(owner_, &memory_), KF_SUCCESS);
  }
  void TearDown() override {
    if (owner_ != nullptr) {
      EXPECT_EQ(kf_tensor_destroy(owner_), KF_SUCCESS);
    }
    context_.reset();
  }
  std::unique_ptr<kf_test::Context> context_;
  kf_context_t* ctx_ = nullptr;
  kf_tensor_t* owner_ = nullptr;
  void* memory_ = nullptr;
};

TEST_F(Wrap, DeleterRunsOnceWhenTheTensorGoes) {
  DeleterLog log;
  kf_tensor_desc_t d = make_desc(KF_DTYPE_FLOAT32, {8, 8});
  kf_tensor_t* t = nullptr;
  KF_ASSERT_OK(kf_tensor_wrap(ctx_, &d, memory_, 64 * sizeof(float), &log_deleter, &log, &t));
  void* data = nullptr;
  KF_ASSERT_OK(kf_tensor_get_data(t, &data));
  EXPECT_EQ(data, memory_);
  std::vector<double> values = values_for(KF_DTYPE_FLOAT32, 64, 4);
  kf_test::upload(t, values);
  kf_test::expect_close(kf_test::download(owner_), values, 0.0, "through the owner");
  EXPECT_EQ(log.calls, 0);
  KF_ASSERT_OK(kf_tensor_destroy(t));
  EXPECT_EQ(log.calls, 1);
  EXPECT_EQ(log.data, memory_);
}

TEST_F(Wrap, DeleterWaitsForTheLastView) {
  DeleterLog log;
  kf_tensor_desc_t d = make_desc(KF_DTYPE_FLOAT32, {64});
  kf_tensor_t* t = nullptr;
  KF_ASSERT_OK(kf_tensor_wrap(ctx_, &d, memory_, 64 * sizeof(float), &log_deleter, &log, &t));
  kf_tensor_desc_t strided = make_desc(KF_DTYPE_FLOAT32, {4, 4}, {16, 3});
  kf_tensor_t *v1 = nullptr, *v2 = nullptr;
  KF_ASSERT_OK(kf_tensor_create_view(t, &strided, 2, &v1));
  KF_ASSERT_OK(kf_tensor_create_view(v1, &strided, 1, &v2));
  KF_ASSERT_OK(kf_tensor_destroy(t));
  KF_ASSERT_OK(kf_tensor_destroy(v1));
  EXPECT_EQ(log.calls, 0);
  std::vector<double> values = values_for(KF_DTYPE_FLOAT32, 16, 6);
  kf_test::upload(v2, values);
  kf_test::expect_close(kf_test::download(v2), values, 0.0, "view of a destroyed wrap");
  KF_ASSERT_OK(kf_tensor_destroy(v2));
  EXPECT_EQ(log.calls, 1);
}

TEST_F(Wrap, FailureNeverCallsTheDeleter) {
  DeleterLog log;
  kf_tensor_t* t = kSentinelTensor;
  kf_tensor_desc_t d = make_desc(KF_DTYPE_FLOAT32, {8, 8});
  KF_EXPECT_ERR(kf_tensor_wrap(ctx_, &d, memory_, 63 * sizeof(float), &log_deleter, &log, &t),
                KF_ERROR_INVALID_ARGUMENT);  // capacity too small
  kf_tensor_desc_t strided = make_desc(KF_DTYPE_FLOAT32, {8, 8}, {9, 1});
  KF_EXPECT_ERR(kf_tensor_wrap(ctx_, &strided, memory_, 64 * sizeof(float), &log_deleter, &log, &t),
                KF_ERROR_INVALID_ARGUMENT);  // strides reach past the capacity
  KF_EXPECT_ERR(kf_tensor_wrap(ctx_, &d, nullptr, 64 * sizeof(float), &log_deleter, &log, &t),
                KF_ERROR_INVALID_ARGUMENT);
  // NULL memory with a capacity: an empty tensor's views were bounded by that capacity and
  // pointed at NULL + offset.
  kf_tensor_desc_t none = make_desc(KF_DTYPE_FLOAT32, {0});
  KF_EXPECT_ERR(kf_tensor_wrap(ctx_, &none, nullptr, 1000, &log_deleter, &log, &t),
                KF_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kf_get_last_error_message()).find("capacity_bytes"), std::string::npos);
  KF_EXPECT_ERR(kf_tensor_wrap(ctx_, &d, static_cast<char*>(memory_) + 2, 60 * sizeof(float),
                               &log_deleter, &log, &t),
                KF_ERROR_INVALID_ARGUMENT);  // misaligned
  KF_EXPECT_ERR(kf_tensor_wrap(ctx_, &d, memory_, 64 * sizeof(float), &log_deleter, &log, nullptr),
                KF_ERROR_INVALID_ARGUMENT);
  KF_EXPECT_ERR(kf_tensor_wrap(nullptr, &d, memory_, 64 * sizeof(float), &log_deleter, &log, &t),
                KF_ERROR_INVALID_HANDLE);
  kf_tensor_desc_t bad = make_desc(KF_DTYPE_FLOAT32, {-1});
  KF_EXPECT_ERR(kf_tensor_wrap(ctx_, &bad, memory_, 64 * sizeof(float), &log_deleter, &log, &t),
                KF_ERROR_INVALID_ARGUMENT);
  if (device_under_test() == KF_DEVICE_CUDA) {
    std::vector<float> host(64);
    KF_EXPECT_ERR(kf_tensor_wrap(ctx_, &d, host.data(), 64 * sizeof(float), &log_deleter, &log, &t),
                  KF_ERROR_INVALID_ARGUMENT);  // host memory in a CUDA context
  }
  EXPECT_EQ(t, kSentinelTensor);
  EXPECT_EQ(log.calls, 0);
}

// kf_tensor_wrap_async: the same tensor as kf_tensor_wrap, with a home stream. Its contents are
// read and written through it on that stream and on others, its views share it, and its deleter
// runs once, when the last of them goes, after the work of every stream. (That a use on another
// stream waits for the home stream's earlier work is tested on CUDA in capture_test.cpp.)
TEST_F(Wrap, AsyncWithAHomeStream) {
  kf_stream_t *home = nullptr, *other = nullptr;
  KF_ASSERT_OK(kf_stream_create(ctx_, nullptr, &home));
  KF_ASSERT_OK(kf_stream_create(ctx_, nullptr, &other));
  DeleterLog log;
  kf_tensor_desc_t d = make_desc(KF_DTYPE_FLOAT32, {8, 8});
  kf_tensor_t* t = nullptr;
  KF_ASSERT_OK(
      kf_tensor_wrap_async(ctx_, &d, memory_, 64 * sizeof(float), &log_deleter, &log, home, &t));
  std::vector<double> values = values_for(KF_DTYPE_FLOAT32, 64, 8);
  std::vector<float> packed(values.begin(), values.end());
  KF_ASSERT_OK(kf_tensor_copy_from_host(t, packed.data(), packed.size() * sizeof(float), home));
  kf_tensor_desc_t column = make_desc(KF_DTYPE_FLOAT32, {8}, {8});
  kf_tensor_t* view = nullptr;
  KF_ASSERT_OK(kf_tensor_create_view(t, &column, 3, &view));  // column 3
  std::vector<float> got(8, -1.0f);
  KF_ASSERT_OK(kf_tensor_copy_to_host(view, got.data(), got.size() * sizeof(float), other));
  KF_ASSERT_OK(kf_stream_synchronize(other));
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], packed[8 * i + 3]) << "row " << i;
  kf_test::expect_close(kf_test::download(owner_), values, 0.0, "through the owner");
  KF_ASSERT_OK(kf_tensor_destroy(t));
  EXPECT_EQ(log.calls, 0) << "a view still shares the memory";
  KF_ASSERT_OK(kf_tensor_destroy(view));
  EXPECT_EQ(log.calls, 1);
  EXPECT_EQ(log.data, memory_);
  // A NULL stream is kf_tensor_wrap's default stream; no deleter, an empty tensor.
  KF_ASSERT_OK(
      kf_tensor_wrap_async(ctx_, &d, memory_, 64 * sizeof(float), nullptr, nullptr, nullptr, &t));
  kf_test::expect_close(kf_test::download(t), values, 0.0, "wrapped on the default stream");
  KF_ASSERT_OK(kf_tensor_destroy(t));
  kf_tensor_desc_t empty = make_desc(KF_DTYPE_FLOAT32, {0, 5});
  KF_ASSERT_OK(kf_tensor_wrap_async(ctx_, &empty, nullptr, 0, nullptr, nullptr, home, &t));
  KF_ASSERT_OK(kf_tensor_destroy(t));
  KF_ASSERT_OK(kf_stream_destroy(other));
  KF_ASSERT_OK(kf_stream_destroy(home));
}

// Its home stream must be a live stream of the same context; a refused wrap leaves `out` and the
// deleter alone.
TEST_F(Wrap, AsyncRefusesAStreamItCannotUse) {
  DeleterLog log;
  kf_tensor_desc_t d = make_desc(KF_DTYPE_FLOAT32, {64});
  kf_tensor_t* t = kSentinelTensor;
  kf_test::Context other_context;
  kf_stream_t* foreign = nullptr;
  KF_ASSERT_OK(kf_stream_create(other_context, nullptr, &foreign));
  KF_EXPECT_ERR(
      kf_tensor_wrap_async(ctx_, &d, memory_, 64 * sizeof(float), &log_deleter, &log, foreign, &t),
      KF_ERROR_DEVICE_MISMATCH);
  KF_ASSERT_OK(kf_stream_destroy(foreign));
  kf_stream_t* gone = nullptr;
  KF_ASSERT_OK(kf_stream_create(ctx_, nullptr, &gone));
  KF_ASSERT_OK(kf_stream_destroy(gone));
  KF_EXPECT_ERR(
      kf_tensor_wrap_async(ctx_, &d, memory_, 64 * sizeof(float), &log_deleter, &log, gone, &t),
      KF_ERROR_INVALID_HANDLE);
  EXPECT_EQ(t, kSentinelTensor);
  EXPECT_EQ(log.calls, 0);
}

TEST(WrapHost, PlainHostMemory) {
  if (device_under_test() != KF_DEVICE_CPU) GTEST_SKIP() << "host memory is for CPU contexts";
  kf_test::Context ctx;
  std::vector<int32_t> memory(12, 0);
  kf_tensor_desc_t d = make_desc(KF_DTYPE_INT32, {3, 4});
  kf_tensor_t* t = nullptr;
  DeleterLog log;
  KF_ASSERT_OK(kf_tensor_wrap(ctx, &d, memory.data(), memory.size() * 4, &log_deleter, &log, &t));
  int32_t in[12] = {5, -1, 7, 9, 11, 13, -17, 19, 23, 29, 31, 37};
  KF_ASSERT_OK(kf_tensor_copy_from_host(t, in, sizeof(in), nullptr));
  EXPECT_EQ(memory[6], -17);
  KF_ASSERT_OK(kf_tensor_destroy(t));
  EXPECT_EQ(log.calls, 1);
  EXPECT_EQ(log.data, memory.data());
}

// A deleter that destroys the tensor it kept alive (the owner of the wrapped memory), run by
// kf_context_destroy: the owner must not be destroyed twice (it was, when the context deleted
// its tensors one by one and the owner was still a live handle for the deleter's call).
struct KeepAlive {
  kf_tensor_t* owner;
  int calls = 0;
  kf_result_t destroyed = KF_SUCCESS;
};

void destroy_owner(void* /*data*/, void* user_data) {
  auto* k = static_cast<KeepAlive*>(user_data);
  ++k->calls;
  k->destroyed = kf_tensor_destroy(k->owner);
}

TEST(WrapDeleter, MayCallTheLibraryWhileTheContextGoes) {
  KF_REQUIRE_DEVICE();
  // The context deletes its tensors in no set order: a few tensors more or fewer vary it.
  for (int fillers = 0; fillers < 8; ++fillers) {
    kf_test::Context context;
    kf_context_t* ctx = context.ctx;
    kf_tensor_desc_t d = make_desc(KF_DTYPE_FLOAT32, {16});
    kf_tensor_t *owner = nullptr, *wrapped = nullptr, *filler = nullptr;
    for (int i = 0; i < fillers; ++i) KF_ASSERT_OK(kf_tensor_create(ctx, &d, &filler));
    KF_ASSERT_OK(kf_tensor_create(ctx, &d, &owner));
    KeepAlive keep{owner};
    void* memory = nullptr;
    KF_ASSERT_OK(kf_tensor_get_data(owner, &memory));
    KF_ASSERT_OK(
        kf_tensor_wrap(ctx, &d, memory, 16 * sizeof(float), &destroy_owner, &keep, &wrapped));
    context.ctx = nullptr;
    KF_ASSERT_OK(kf_context_destroy(ctx));
    EXPECT_EQ(keep.calls, 1);
    // Every tensor of the context died as a handle before any was deleted.
    EXPECT_EQ(keep.destroyed, KF_ERROR_INVALID_HANDLE) << fillers << " other tensors";
  }
}

TEST_F(Wrap, WithoutDeleterAndEmpty) {
  kf_tensor_desc_t d = make_desc(KF_DTYPE_FLOAT32, {64});
  kf_tensor_t* t = nullptr;
  KF_ASSERT_OK(kf_tensor_wrap(ctx_, &d, memory_, 64 * sizeof(float), nullptr, nullptr, &t));
  KF_ASSERT_OK(kf_tensor_destroy(t));
  kf_tensor_desc_t empty = make_desc(KF_DTYPE_FLOAT32, {0, 5});
  KF_ASSERT_OK(kf_tensor_wrap(ctx_, &empty, nullptr, 0, nullptr, nullptr, &t));
  KF_ASSERT_OK(kf_tensor_destroy(t));
}

}  // namespace
