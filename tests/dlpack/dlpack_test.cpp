// DLPack import and export on the device under test. Producer tensors are built from the
// library's own export (so the CUDA variant needs no cudart), copied into a counting wrapper whose
// shape, strides and fields each test may edit.
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tests/common/test_util.hpp"

namespace {

using namespace kf_test;
using Versioned = DLManagedTensorVersioned;
using Legacy = DLManagedTensor;

// A foreign producer: owns a kf export and counts how often the consumer calls its deleter.
template <class Managed>
struct Producer {
  Managed managed{};
  Versioned* source = nullptr;
  int* deleted = nullptr;
  int64_t shape[KF_MAX_DIMS + 2] = {};
  int64_t strides[KF_MAX_DIMS + 2] = {};

  static void release(Managed* self) {
    auto* p = static_cast<Producer*>(self->manager_ctx);
    ++*p->deleted;
    p->source->deleter(p->source);
    delete p;
  }
};

// Exports t and wraps it as a producer tensor whose deleter increments *deleted.
template <class Managed>
Managed* produce(kf_tensor_t* t, int* deleted) {
  Versioned* source = nullptr;
  kf_result_t r = kf_tensor_to_dlpack(t, &source);
  EXPECT_EQ(r, KF_SUCCESS) << kf_get_last_error_message();
  if (r != KF_SUCCESS) return nullptr;
  auto* p = new Producer<Managed>;
  p->source = source;
  p->deleted = deleted;
  p->managed.dl_tensor = source->dl_tensor;
  for (int32_t i = 0; i < source->dl_tensor.ndim; ++i) {
    p->shape[i] = source->dl_tensor.shape[i];
    p->strides[i] = source->dl_tensor.strides[i];
  }
  p->managed.dl_tensor.shape = p->shape;
  p->managed.dl_tensor.strides = p->strides;
  p->managed.manager_ctx = p;
  p->managed.deleter = &Producer<Managed>::release;
  if constexpr (std::is_same<Managed, Versioned>::value) {
    p->managed.version = {1, 0};
    p->managed.flags = 0;
  }
  return &p->managed;
}

kf_tensor_desc_t desc_of(const kf_tensor_t* t) {
  kf_tensor_desc_t d{};
  EXPECT_EQ(kf_tensor_get_desc(t, &d), KF_SUCCESS) << kf_get_last_error_message();
  return d;
}

void* data_of(const kf_tensor_t* t) {
  void* p = nullptr;
  EXPECT_EQ(kf_tensor_get_data(t, &p), KF_SUCCESS) << kf_get_last_error_message();
  return p;
}

std::vector<int64_t> shape_of(const kf_tensor_desc_t& d) { return {d.shape, d.shape + d.ndim}; }
std::vector<int64_t> strides_of(const kf_tensor_desc_t& d) {
  return {d.strides, d.strides + d.ndim};
}

// Elements of a packed row-major [rows, cols] matrix picked by a 2-D view.
std::vector<double> pick(const std::vector<double>& v, int64_t offset, int64_t rows, int64_t cols,
                         int64_t row_stride, int64_t col_stride) {
  std::vector<double> out;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      out.push_back(v[static_cast<size_t>(offset + i * row_stride + j * col_stride)]);
  return out;
}

class DlpackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    KF_REQUIRE_DEVICE();
    ctx_ = std::make_unique<Context>();
    ASSERT_NE(ctx_->ctx, nullptr);
  }
  kf_context_t* ctx() const { return ctx_->ctx; }
  bool cuda() const { return device_under_test() == KF_DEVICE_CUDA; }

  // A tensor filled with random non-zero values (returned in *values).
  Tensor filled(kf_dtype_t dtype, const std::vector<int64_t>& shape, std::vector<double>* values,
                uint64_t seed = 7) {
    bool integral = !(dtype == KF_DTYPE_FLOAT32 || dtype == KF_DTYPE_FLOAT16 ||
                      dtype == KF_DTYPE_BFLOAT16 || dtype == KF_DTYPE_FLOAT64);
    *values = round_to_dtype(random_values(static_cast<size_t>(numel(shape)), seed,
                                           integral ? 1.0 : -3.0, integral ? 100.0 : 3.0),
                             dtype);
    Tensor t = make_tensor(ctx(), dtype, shape);
    upload(t, *values);
    return t;
  }

 private:
  std::unique_ptr<Context> ctx_;
};

// ---------------------------------------------------------------- export

TEST_F(DlpackTest, ExportFillsEveryField) {
  std::vector<double> values;
  Tensor t = filled(KF_DTYPE_FLOAT32, {3, 5}, &values);
  Versioned* m = nullptr;
  KF_ASSERT_OK(kf_tensor_to_dlpack(t, &m));
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->version.major, 1u);
  EXPECT_EQ(m->version.minor, static_cast<uint32_t>(DLPACK_MINOR_VERSION));
  EXPECT_EQ(m->flags, 0u);
  ASSERT_NE(m->deleter, nullptr);
  const DLTensor& dl = m->dl_tensor;
  EXPECT_EQ(dl.device.device_type, cuda() ? kDLCUDA : kDLCPU);
  EXPECT_EQ(dl.device.device_id, 0);
  EXPECT_EQ(dl.ndim, 2);
  EXPECT_EQ(dl.dtype.code, kDLFloat);
  EXPECT_EQ(dl.dtype.bits, 32);
  EXPECT_EQ(dl.dtype.lanes, 1);
  ASSERT_NE(dl.shape, nullptr);
  ASSERT_NE(dl.strides, nullptr);
  EXPECT_EQ(std::vector<int64_t>(dl.shape, dl.shape + 2), (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(std::vector<int64_t>(dl.strides, dl.strides + 2), (std::vector<int64_t>{5, 1}));
  EXPECT_EQ(dl.byte_offset, 0u);
  EXPECT_EQ(dl.data, data_of(t));
  m->deleter(m);
}

TEST_F(DlpackTest, EveryDtypeRoundTripsWithoutCopying) {
  struct Case {
    kf_dtype_t dtype;
    uint8_t code, bits;
  };
  const Case cases[] = {{KF_DTYPE_FLOAT32, kDLFloat, 32},   {KF_DTYPE_FLOAT16, kDLFloat, 16},
                        {KF_DTYPE_BFLOAT16, kDLBfloat, 16}, {KF_DTYPE_FLOAT64, kDLFloat, 64},
                        {KF_DTYPE_INT8, kDLInt, 8},         {KF_DTYPE_UINT8, kDLUInt, 8},
                        {KF_DTYPE_INT32, kDLInt, 32},       {KF_DTYPE_INT64, kDLInt, 64}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.dtype);
    std::vector<double> values;
    Tensor src = filled(c.dtype, {7, 3}, &values, 11 + c.dtype);
    int deleted = 0;
    Versioned* m = produce<Versioned>(src, &deleted);
    ASSERT_NE(m, nullptr);
    EXPECT_EQ(m->dl_tensor.dtype.code, c.code);
    EXPECT_EQ(m->dl_tensor.dtype.bits, c.bits);
    EXPECT_EQ(m->dl_tensor.dtype.lanes, 1);
    kf_tensor_t* imported = nullptr;
    KF_ASSERT_OK(kf_tensor_from_dlpack(ctx(), m, &imported));
    Tensor guard(imported);
    EXPECT_EQ(desc_of(imported).dtype, c.dtype);
    EXPECT_EQ(shape_of(desc_of(imported)), (std::vector<int64_t>{7, 3}));
    EXPECT_EQ(data_of(imported), data_of(src));  // zero copy
    expect_close(download(imported), values, 0.0, "imported");
    kf_tensor_destroy(guard.t);
    guard.t = nullptr;
    EXPECT_EQ(deleted, 1);
  }
}

TEST_F(DlpackTest, StridedViewsRoundTrip) {
  std::vector<double> values;
  Tensor base = filled(KF_DTYPE_FLOAT32, {6, 8}, &values);
  struct Case {
    std::vector<int64_t> shape, strides;
    int64_t offset;
  };
  const Case cases[] = {{{3, 4}, {16, 2}, 1},   // every other row and column
                        {{8, 6}, {1, 8}, 0},    // transpose
                        {{5, 3}, {8, 1}, 10}};  // interior block
  for (const Case& c : cases) {
    kf_tensor_desc_t d = make_desc(KF_DTYPE_FLOAT32, c.shape, c.strides);
    kf_tensor_t* view = nullptr;
    KF_ASSERT_OK(kf_tensor_create_view(base, &d, c.offset, &view));
    Tensor view_guard(view);
    Versioned* m = nullptr;
    KF_ASSERT_OK(kf_tensor_to_dlpack(view, &m));
    EXPECT_EQ(std::vector<int64_t>(m->dl_tensor.strides, m->dl_tensor.strides + 2), c.strides);
    EXPECT_EQ(m->dl_tensor.data, static_cast<char*>(data_of(base)) + c.offset * 4);
    kf_tensor_t* imported = nullptr;
    KF_ASSERT_OK(kf_tensor_from_dlpack(ctx(), m, &imported));
    Tensor guard(imported);
    EXPECT_EQ(strides_of(desc_of(imported)), c.strides);
    expect_close(download(imported),
                 pick(values, c.offset, c.shape[0], c.shape[1], c.strides[0], c.strides[1]), 0.0,
                 "strided view");
  }
}

TEST_F(DlpackTest, ImportHonoursProducerStridesAndByteOffset) {
  std::vector<double> values;
  Tensor base = filled(KF_DTYPE_FLOAT32, {6, 8}, &values);
  int deleted = 0;
  Versioned* m = produce<Versioned>(base, &deleted);
  ASSERT_NE(m, nullptr);
  m->dl_tensor.shape[0] = 2;
  m->dl_tensor.shape[1] = 3;
  m->dl_tensor.strides[0] = 24;
  m->dl_tensor.strides[1] = 3;
  m->dl_tensor.byte_offset = 9 * sizeof(float);
  kf_tensor_t* imported = nullptr;
  KF_ASSERT_OK(kf_tensor_from_dlpack(ctx(), m, &imported));
  Tensor guard(imported);
  EXPECT_EQ(data_of(imported), static_cast<char*>(data_of(base)) + 9 * sizeof(float));
  EXPECT_EQ(strides_of(desc_of(imported)), (std::vector<int64_t>{24, 3}));
  expect_close(download(imported), pick(values, 9, 2, 3, 24, 3), 0.0, "byte_offset + strides");
}

TEST_F(DlpackTest, ByteOffsetIntoOneDimensionalBuffer) {
  std::vector<double> values;
  Tensor base = filled(KF_DTYPE_FLOAT64, {10}, &values);
  int deleted = 0;
  Versioned* m = produce<Versioned>(base, &deleted);
  ASSERT_NE(m, nullptr);
  m->dl_tensor.shape[0] = 7;
  m->dl_tensor.byte_offset = 3 * sizeof(double);
  kf_tensor_t* imported = nullptr;
  KF_ASSERT_OK(kf_tensor_from_dlpack(ctx(), m, &imported));
  expect_close(download(imported), std::vector<double>(values.begin() + 3, values.end()), 0.0,
               "offset");
  KF_ASSERT_OK(kf_tensor_destroy(imported));
  EXPECT_EQ(deleted, 1);
}

TEST_F(DlpackTest, NullStridesMeanCompactRowMajor) {
  std::vector<double> values;
  Tensor base = filled(KF_DTYPE_FLOAT16, {4, 5}, &values);
  int deleted = 0;
  Versioned* m = produce<Versioned>(base, &deleted);
  ASSERT_NE(m, nullptr);
  m->dl_tensor.strides = nullptr;
  kf_tensor_t* imported = nullptr;
  KF_ASSERT_OK(kf_tensor_from_dlpack(ctx(), m, &imported));
  Tensor guard(imported);
  EXPECT_EQ(strides_of(desc_of(imported)), (std::vector<int64_t>{5, 1}));
  expect_close(download(imported), values, 0.0, "NULL strides");
}

TEST_F(DlpackTest, AcceptsBroadcastAndArbitraryStridesOfSizeOneDims) {
  std::vector<double> values;
  Tensor row = filled(KF_DTYPE_FLOAT32, {4}, &values);
  int deleted = 0;
  Versioned* m = produce<Versioned>(row, &deleted);
  ASSERT_NE(m, nullptr);
  // [3, 1, 4] with a zero (broadcast) row stride and a meaningless stride on the size-1 dim.
  m->dl_tensor.ndim = 3;
  int64_t* shape = m->dl_tensor.shape;
  int64_t* strides = m->dl_tensor.strides;
  shape[0] = 3, shape[1] = 1, shape[2] = 4;
  // Negative too, as NumPy gives a reversed size-1 dim (np.ones((1, 4))[::-1]).
  strides[0] = 0, strides[1] = -7, strides[2] = 1;
  kf_tensor_t* imported = nullptr;
  KF_ASSERT_OK(kf_tensor_from_dlpack(ctx(), m, &imported));
  Tensor guard(imported);
  kf_tensor_desc_t d = desc_of(imported);
  EXPECT_EQ(shape_of(d), (std::vector<int64_t>{3, 1, 4}));
  EXPECT_EQ(d.strides[0], 0);
  EXPECT_EQ(d.strides[2], 1);
  std::vector<double> want;
  for (int i = 0; i < 3; ++i) want.insert(want.end(), values.begin(), values.end());
  expect_close(download(imported), want, 0.0, "broadcast rows");
}

TEST_F(DlpackTest, ScalarAndEmptyTensors) {
  std::vector<double> values;
  Tensor base = filled(KF_DTYPE_FLOAT32, {3}, &values);
  int deleted = 0;
  Versioned* scalar = produce<Versioned>(base, &deleted);
  ASSERT_NE(scalar, nullptr);
  scalar->dl_tensor.ndim = 0;
  scalar->dl_tensor.shape = nullptr;
  scalar->dl_tensor.strides = nullptr;
  scalar->dl_tensor.byte_offset = sizeof(float);
  kf_tensor_t* imported = nullptr;
  KF_ASSERT_OK(kf_tensor_from_dlpack(ctx(), scalar, &imported));
  EXPECT_EQ(desc_of(imported).ndim, 0);
  expect_close(download(imported), {values[1]}, 0.0, "scalar");
  KF_ASSERT_OK(kf_tensor_destroy(imported));
  EXPECT_EQ(deleted, 1);

  // An empty tensor may have NULL data.
  Versioned* empty = produce<Versioned>(base, &deleted);
  ASSERT_NE(empty, nullptr);
  empty->dl_tensor.ndim = 2;
  empty->dl_tensor.shape[0] = 0;
  empty->dl_tensor.shape[1] = 5;
  empty->dl_tensor.data = nullptr;
  imported = nullptr;
  KF_ASSERT_OK(kf_tensor_from_dlpack(ctx(), empty, &imported));
  EXPECT_EQ(shape_of(desc_of(imported)), (std::vector<int64_t>{0, 5}));
  KF_ASSERT_OK(kf_tensor_destroy(imported));
  EXPECT_EQ(deleted, 2);
}

TEST_F(DlpackTest, PinnedHostMemoryIsAcceptedByCpuContexts) {
  if (cuda()) GTEST_SKIP() << "CUDA contexts refuse kDLCUDAHost by design";
  std::vector<double> values;
  Tensor base = filled(KF_DTYPE_FLOAT32, {5}, &values);
  int deleted = 0;
  Versioned* m = produce<Versioned>(base, &deleted);
  ASSERT_NE(m, nullptr);
  m->dl_tensor.device = {kDLCUDAHost, 0};
  kf_tensor_t* imported = nullptr;
  KF_ASSERT_OK(kf_tensor_from_dlpack(ctx(), m, &imported));
  expect_close(download(imported), values, 0.0, "pinned");
  KF_ASSERT_OK(kf_tensor_destroy(imported));
  EXPECT_EQ(deleted, 1);
}

// ---------------------------------------------------------------- ownership

TEST_F(DlpackTest, DeleterRunsOnceAfterTheLastView) {
  std::vector<double> values;
  Tensor src = filled(KF_DTYPE_FLOAT32, {4, 6}, &values);
  int deleted = 0;
  Versioned* m = produce<Versioned>(src, &deleted);
  ASSERT_NE(m, nullptr);
  kf_tensor_t* imported = nullptr;
  KF_ASSERT_OK(kf_tensor_from_dlpack(ctx(), m, &imported));
  kf_tensor_desc_t d = make_desc(KF_DTYPE_FLOAT32, {2, 6});
  kf_tensor_t* view = nullptr;
  KF_ASSERT_OK(kf_tensor_create_view(imported, &d, 12, &view));
  KF_ASSERT_OK(kf_tensor_destroy(imported));
  EXPECT_EQ(deleted, 0);
  expect_close(download(view), std::vector<double>(values.begin() + 12, values.end()), 0.0,
               "view after base");
  KF_ASSERT_OK(kf_tensor_destroy(view));
  EXPECT_EQ(deleted, 1);
}

// The stream forms (kf_tensor_from_dlpack_async and its legacy twin): the import is the same
// tensor, read on its home stream and on another; the producer's deleter runs once, when the
// last tensor sharing the memory goes; a stream of another context or a destroyed one is refused,
// and the producer keeps its tensor.
TEST_F(DlpackTest, ImportsWithAHomeStream) {
  kf_stream_t *home = nullptr, *other = nullptr;
  KF_ASSERT_OK(kf_stream_create(ctx(), nullptr, &home));
  KF_ASSERT_OK(kf_stream_create(ctx(), nullptr, &other));
  std::vector<double> values;
  Tensor src = filled(KF_DTYPE_FLOAT32, {4, 6}, &values, 17);
  int deleted = 0;
  Versioned* m = produce<Versioned>(src, &deleted);
  ASSERT_NE(m, nullptr);
  kf_tensor_t* imported = nullptr;
  KF_ASSERT_OK(kf_tensor_from_dlpack_async(ctx(), m, home, &imported));
  EXPECT_EQ(data_of(imported), data_of(src));
  std::vector<float> got(24, -1.0f);
  KF_ASSERT_OK(kf_tensor_copy_to_host(imported, got.data(), got.size() * sizeof(float), other));
  KF_ASSERT_OK(kf_stream_synchronize(other));
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], values[i]) << "element " << i;
  kf_tensor_desc_t d = make_desc(KF_DTYPE_FLOAT32, {2, 6});
  kf_tensor_t* view = nullptr;
  KF_ASSERT_OK(kf_tensor_create_view(imported, &d, 12, &view));
  KF_ASSERT_OK(kf_tensor_destroy(imported));
  EXPECT_EQ(deleted, 0);
  KF_ASSERT_OK(kf_tensor_destroy(view));
  EXPECT_EQ(deleted, 1);

  Legacy* legacy = produce<Legacy>(src, &deleted);
  ASSERT_NE(legacy, nullptr);
  KF_ASSERT_OK(kf_tensor_from_dlpack_legacy_async(ctx(), legacy, other, &imported));
  expect_close(download(imported), values, 0.0, "legacy import on a stream");
  KF_ASSERT_OK(kf_tensor_destroy(imported));
  EXPECT_EQ(deleted, 2);

  // Refused streams: the producer still owns its tensor.
  Context other_context;
  kf_stream_t* foreign = nullptr;
  KF_ASSERT_OK(kf_stream_create(other_context.ctx, nullptr, &foreign));
  m = produce<Versioned>(src, &deleted);
  ASSERT_NE(m, nullptr);
  imported = reinterpret_cast<kf_tensor_t*>(uintptr_t{0x5a5a5a5a});
  KF_EXPECT_ERR(kf_tensor_from_dlpack_async(ctx(), m, foreign, &imported),
                KF_ERROR_DEVICE_MISMATCH);
  kf_stream_t* gone = nullptr;
  KF_ASSERT_OK(kf_stream_create(ctx(), nullptr, &gone));
  KF_ASSERT_OK(kf_stream_destroy(gone));
  KF_EXPECT_ERR(kf_tensor_from_dlpack_async(ctx(), m, gone, &imported), KF_ERROR_INVALID_HANDLE);
  EXPECT_EQ(imported, reinterpret_cast<kf_tensor_t*>(uintptr_t{0x5a5a5a5a}));
  EXPECT_EQ(deleted, 2);
  m->deleter(m);  // the producer's own release
  EXPECT_EQ(deleted, 3);
  legacy = produce<Legacy>(src, &deleted);
  ASSERT_NE(legacy, nullptr);
  KF_EXPECT_ERR(kf_tensor_from_dlpack_legacy_async(ctx(), legacy, foreign, &imported),
                KF_ERROR_DEVICE_MISMATCH);
  KF_EXPECT_ERR(kf_tensor_from_dlpack_legacy_async(ctx(), legacy, gone, &imported),
                KF_ERROR_INVALID_HANDLE);
  KF_EXPECT_ERR(kf_tensor_from_dlpack_legacy_async(ctx(), legacy, home, nullptr),
                KF_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(imported, reinterpret_cast<kf_tensor_t*>(uintptr_t{0x5a5a5a5a}));
  EXPECT_EQ(deleted, 3);
  legacy->deleter(legacy);
  EXPECT_EQ(deleted, 4);
  KF_ASSERT_OK(kf_stream_destroy(foreign));
  KF_ASSERT_OK(kf_stream_destroy(other));
  KF_ASSERT_OK(kf_stream_destroy(home));
}

TEST_F(DlpackTest, ReExportKeepsTheProducerAlive) {
  std::vector<double> values;
  Tensor src = filled(KF_DTYPE_FLOAT32, {9}, &values);
  int deleted = 0;
  Versioned* m = produce<Versioned>(src, &deleted);
  ASSERT_NE(m, nullptr);
  kf_tensor_t* imported = nullptr;
  KF_ASSERT_OK(kf_tensor_from_dlpack(ctx(), m, &imported));
  Legacy* again = nullptr;
  KF_ASSERT_OK(kf_tensor_to_dlpack_legacy(imported, &again));
  KF_ASSERT_OK(kf_tensor_destroy(imported));
  EXPECT_EQ(deleted, 0);
  again->deleter(again);
  EXPECT_EQ(deleted, 1);
}

TEST_F(DlpackTest, ContextDestroyReleasesImports) {
  std::vector<double> values;
  Tensor src = filled(KF_DTYPE_FLOAT32, {9}, &values);
  kf_context_config_t config = KF_CONTEXT_CONFIG_INIT;
  config.device_type = device_under_test();
  kf_context_t* other = nullptr;
  KF_ASSERT_OK(kf_context_create(&config, &other));
  int deleted = 0;
  Versioned* m = produce<Versioned>(src, &deleted);
  ASSERT_NE(m, nullptr);
  kf_tensor_t* imported = nullptr;
  KF_ASSERT_OK(kf_tensor_from_dlpack(other, m, &imported));
  KF_ASSERT_OK(kf_context_destroy(other));
  EXPECT_EQ(deleted, 1);
  KF_EXPECT_ERR(kf_tensor_destroy(imported), KF_ERROR_INVALID_HANDLE);
}

TEST_F(DlpackTest, ProducerWithoutDeleterIsAccepted) {
  std::vector<double> values;
  Tensor src = filled(KF_DTYPE_FLOAT32, {5}, &values);
  int deleted = 0;
  Versioned* m = produce<Versioned>(src, &deleted);
  ASSERT_NE(m, nullptr);
  m->deleter = nullptr;
  kf_tensor_t* imported = nullptr;
  KF_ASSERT_OK(kf_tensor_from_dlpack(ctx(), m, &imported));
  expect_close(download(imported), values, 0.0, "no deleter");
  KF_ASSERT_OK(kf_tensor_destroy(imported));
  Producer<Versioned>::release(m);  // the producer cleans up itself
  EXPECT_EQ(deleted, 1);
}

TEST_F(DlpackTest, ExportOutlivesTheSourceTensor) {
  std::vector<double> values;
  Tensor src = filled(KF_DTYPE_FLOAT32, {33}, &values);
  Versioned* m = nullptr;
  KF_ASSERT_OK(kf_tensor_to_dlpack(src, &m));
  KF_ASSERT_OK(kf_tensor_destroy(src.t));
  src.t = nullptr;
  if (!cuda()) {
    const float* host = static_cast<const float*>(m->dl_tensor.data);
    expect_close(std::vector<double>(host, host + 33), values, 0.0, "read through the export");
  }
  kf_tensor_t* imported = nullptr;
  KF_ASSERT_OK(kf_tensor_from_dlpack(ctx(), m, &imported));  // takes over the export's deleter
  expect_close(download(imported), values, 0.0, "after source destroyed");
  KF_ASSERT_OK(kf_tensor_destroy(imported));
}

TEST_F(DlpackTest, ExportOutlivesItsContext) {
  kf_context_config_t config = KF_CONTEXT_CONFIG_INIT;
  config.device_type = device_under_test();
  kf_context_t* other = nullptr;
  KF_ASSERT_OK(kf_context_create(&config, &other));
  std::vector<double> values = random_values(17, 5);
  kf_tensor_desc_t d = make_desc(KF_DTYPE_FLOAT64, {17});
  kf_tensor_t* t = nullptr;
  KF_ASSERT_OK(kf_tensor_create(other, &d, &t));
  upload(t, values);
  Versioned* m = nullptr;
  KF_ASSERT_OK(kf_tensor_to_dlpack(t, &m));
  KF_ASSERT_OK(kf_context_destroy(other));
  kf_tensor_t* imported = nullptr;
  KF_ASSERT_OK(kf_tensor_from_dlpack(ctx(), m, &imported));
  expect_close(download(imported), values, 0.0, "after context destroyed");
  KF_ASSERT_OK(kf_tensor_destroy(imported));
}

TEST_F(DlpackTest, ReadOnlyFlagRoundTrips) {
  std::vector<double> values;
  Tensor src = filled(KF_DTYPE_FLOAT32, {2, 3}, &values);
  int deleted = 0;
  Versioned* m = produce<Versioned>(src, &deleted);
  ASSERT_NE(m, nullptr);
  m->flags = DLPACK_FLAG_BITMASK_READ_ONLY | DLPACK_FLAG_BITMASK_IS_COPIED;
  kf_tensor_t* imported = nullptr;
  KF_ASSERT_OK(kf_tensor_from_dlpack(ctx(), m, &imported));
  Tensor guard(imported);
  Versioned* out = nullptr;
  KF_ASSERT_OK(kf_tensor_to_dlpack(imported, &out));
  EXPECT_EQ(out->flags, DLPACK_FLAG_BITMASK_READ_ONLY);
  out->deleter(out);

  // Views of a read-only tensor are read-only too.
  kf_tensor_desc_t d = make_desc(KF_DTYPE_FLOAT32, {3});
  kf_tensor_t* view = nullptr;
  KF_ASSERT_OK(kf_tensor_create_view(imported, &d, 3, &view));
  Tensor view_guard(view);
  KF_ASSERT_OK(kf_tensor_to_dlpack(view, &out));
  EXPECT_EQ(out->flags, DLPACK_FLAG_BITMASK_READ_ONLY);
  out->deleter(out);

  // A writable tensor exports without the flag.
  KF_ASSERT_OK(kf_tensor_to_dlpack(src, &out));
  EXPECT_EQ(out->flags, 0u);
  out->deleter(out);
}

TEST_F(DlpackTest, LegacyBothWays) {
  std::vector<double> values;
  Tensor src = filled(KF_DTYPE_BFLOAT16, {5, 7}, &values);
  Legacy* exported = nullptr;
  KF_ASSERT_OK(kf_tensor_to_dlpack_legacy(src, &exported));
  ASSERT_NE(exported, nullptr);
  EXPECT_EQ(exported->dl_tensor.device.device_type, cuda() ? kDLCUDA : kDLCPU);
  EXPECT_EQ(exported->dl_tensor.dtype.code, kDLBfloat);
  EXPECT_EQ(std::vector<int64_t>(exported->dl_tensor.strides, exported->dl_tensor.strides + 2),
            (std::vector<int64_t>{7, 1}));
  EXPECT_EQ(exported->dl_tensor.data, data_of(src));
  kf_tensor_t* imported = nullptr;
  KF_ASSERT_OK(kf_tensor_from_dlpack_legacy(ctx(), exported, &imported));
  expect_close(download(imported), values, 0.0, "legacy export -> legacy import");
  KF_ASSERT_OK(kf_tensor_destroy(imported));

  int deleted = 0;
  Legacy* m = produce<Legacy>(src, &deleted);
  ASSERT_NE(m, nullptr);
  m->dl_tensor.strides[0] = 14;  // every other row
  m->dl_tensor.shape[0] = 3;
  KF_ASSERT_OK(kf_tensor_from_dlpack_legacy(ctx(), m, &imported));
  EXPECT_EQ(strides_of(desc_of(imported)), (std::vector<int64_t>{14, 1}));
  kf_tensor_desc_t d = make_desc(KF_DTYPE_BFLOAT16, {3, 7}, {14, 1});
  kf_tensor_t* view = nullptr;
  KF_ASSERT_OK(kf_tensor_create_view(imported, &d, 0, &view));
  KF_ASSERT_OK(kf_tensor_destroy(imported));
  EXPECT_EQ(deleted, 0);
  expect_close(download(view), pick(values, 0, 3, 7, 14, 1), 0.0, "legacy producer");
  KF_ASSERT_OK(kf_tensor_destroy(view));
  EXPECT_EQ(deleted, 1);
}

// ---------------------------------------------------------------- errors

// Each import failure must leave ownership with the caller and *out untouched.
class DlpackErrorTest : public DlpackTest {
 protected:
  void SetUp() override {
    DlpackTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    Tensor t = filled(KF_DTYPE_FLOAT32, {4, 6}, &values_);
    std::swap(src_.t, t.t);
  }

  // Applies edit to a fresh producer tensor, expects the import to fail with code (and the message
  // to contain every word), then checks the import works again once the producer is restored.
  template <class Managed, class Edit>
  void expect_refused(kf_result_t code, Edit edit, const std::vector<const char*>& words = {}) {
    int deleted = 0;
    Managed* m = produce<Managed>(src_, &deleted);
    ASSERT_NE(m, nullptr);
    Managed pristine = *m;
    edit(m);
    kf_tensor_t* const sentinel = reinterpret_cast<kf_tensor_t*>(&deleted);
    kf_tensor_t* out = sentinel;
    kf_result_t r;
    if constexpr (std::is_same<Managed, Versioned>::value) {
      r = kf_tensor_from_dlpack(ctx(), m, &out);
    } else {
      r = kf_tensor_from_dlpack_legacy(ctx(), m, &out);
    }
    EXPECT_EQ(r, code) << kf_result_string(r) << ": " << kf_get_last_error_message();
    std::string message = kf_get_last_error_message();
    for (const char* w : words)
      EXPECT_NE(message.find(w), std::string::npos) << message << " lacks " << w;
    EXPECT_EQ(out, sentinel);
    EXPECT_EQ(deleted, 0);
    // Ownership stayed here: restore, import for real and release through the library.
    *m = pristine;
    for (int i = 0; i < 2; ++i) {
      m->dl_tensor.shape[i] = i == 0 ? 4 : 6;
      m->dl_tensor.strides[i] = i == 0 ? 6 : 1;
    }
    kf_tensor_t* ok = nullptr;
    if constexpr (std::is_same<Managed, Versioned>::value) {
      KF_ASSERT_OK(kf_tensor_from_dlpack(ctx(), m, &ok));
    } else {
      KF_ASSERT_OK(kf_tensor_from_dlpack_legacy(ctx(), m, &ok));
    }
    KF_ASSERT_OK(kf_tensor_destroy(ok));
    EXPECT_EQ(deleted, 1);
  }

  std::vector<double> values_;
  Tensor src_;
};

TEST_F(DlpackErrorTest, VersionMismatch) {
  expect_refused<Versioned>(KF_ERROR_VERSION_MISMATCH,
                            [](Versioned* m) {
                              m->version = {2, 0};
                            },
                            {"2.0"});
  expect_refused<Versioned>(KF_ERROR_VERSION_MISMATCH,
                            [](Versioned* m) {
                              m->version = {0, 8};
                            },
                            {"0.8"});
}

TEST_F(DlpackErrorTest, WrongDeviceType) {
  if (cuda()) {
    expect_refused<Versioned>(KF_ERROR_DEVICE_MISMATCH,
                              [](Versioned* m) {
                                m->dl_tensor.device = {kDLCPU, 0};
                              },
                              {"cpu", "cuda:0"});
    expect_refused<Versioned>(KF_ERROR_DEVICE_MISMATCH,
                              [](Versioned* m) {
                                m->dl_tensor.device = {kDLCUDAHost, 0};
                              },
                              {"cuda_host"});
  } else {
    expect_refused<Versioned>(KF_ERROR_DEVICE_MISMATCH,
                              [](Versioned* m) {
                                m->dl_tensor.device = {kDLCUDA, 0};
                              },
                              {"cuda:0", "cpu"});
    expect_refused<Versioned>(KF_ERROR_DEVICE_MISMATCH,
                              [](Versioned* m) {
                                m->dl_tensor.device = {kDLCUDAManaged, 0};
                              },
                              {"cuda_managed:0"});
  }
  expect_refused<Versioned>(KF_ERROR_DEVICE_MISMATCH,
                            [](Versioned* m) {
                              m->dl_tensor.device = {kDLROCM, 0};
                            },
                            {"rocm:0"});
  // A device type from a newer spec, stored as C would (99 is outside the C++ enum's range).
  expect_refused<Legacy>(KF_ERROR_DEVICE_MISMATCH,
                         [](Legacy* m) {
                           const int32_t unknown = 99;
                           static_assert(sizeof unknown == sizeof m->dl_tensor.device.device_type,
                                         "enum size");
                           std::memcpy(&m->dl_tensor.device.device_type, &unknown, sizeof unknown);
                         },
                         {"device type 99"});
}

TEST_F(DlpackErrorTest, DeviceIdRules) {
  if (cuda()) {
    expect_refused<Versioned>(KF_ERROR_DEVICE_MISMATCH,
                              [](Versioned* m) { m->dl_tensor.device.device_id += 1; },
                              {"cuda:1", "cuda:0"});
    return;
  }
  // Host memory has no meaningful ordinal: a CPU context ignores it.
  std::vector<double> values;
  Tensor base = filled(KF_DTYPE_FLOAT32, {3}, &values);
  int deleted = 0;
  Versioned* m = produce<Versioned>(base, &deleted);
  ASSERT_NE(m, nullptr);
  m->dl_tensor.device.device_id = 3;
  kf_tensor_t* imported = nullptr;
  KF_ASSERT_OK(kf_tensor_from_dlpack(ctx(), m, &imported));
  KF_ASSERT_OK(kf_tensor_destroy(imported));
  EXPECT_EQ(deleted, 1);
  expect_refused<Versioned>(KF_ERROR_DEVICE_MISMATCH,
                            [](Versioned* m) {
                              m->dl_tensor.device = {kDLCUDA, 1};
                            },
                            {"cuda:1", "cpu"});
}

TEST_F(DlpackErrorTest, UnsupportedDtypes) {
  struct Case {
    DLDataType dtype;
    const char* word;
  };
  const Case cases[] = {{{kDLComplex, 64, 1}, "complex"}, {{kDLBool, 8, 1}, "bool"},
                        {{kDLFloat, 32, 4}, "lanes 4"},   {{kDLFloat, 8, 1}, "bits 8"},
                        {{kDLInt, 16, 1}, "bits 16"},     {{kDLUInt, 32, 1}, "uint"},
                        {{kDLBfloat, 32, 1}, "bfloat"},   {{kDLOpaqueHandle, 64, 1}, "opaque"},
                        {{kDLFloat, 32, 0}, "lanes 0"}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.word);
    expect_refused<Versioned>(KF_ERROR_DTYPE_MISMATCH,
                              [&](Versioned* m) { m->dl_tensor.dtype = c.dtype; }, {c.word});
  }
  expect_refused<Legacy>(KF_ERROR_DTYPE_MISMATCH,
                         [](Legacy* m) {
                           m->dl_tensor.dtype = {kDLComplex, 128, 1};
                         },
                         {"code 5"});
}

TEST_F(DlpackErrorTest, BadShapes) {
  expect_refused<Versioned>(KF_ERROR_INVALID_ARGUMENT,
                            [](Versioned* m) {
                              m->dl_tensor.ndim = 9;
                              for (int i = 0; i < 9; ++i)
                                m->dl_tensor.shape[i] = 1, m->dl_tensor.strides[i] = 1;
                            },
                            {"ndim 9"});
  expect_refused<Versioned>(KF_ERROR_INVALID_ARGUMENT, [](Versioned* m) { m->dl_tensor.ndim = -1; },
                            {"ndim -1"});
  expect_refused<Versioned>(KF_ERROR_INVALID_ARGUMENT,
                            [](Versioned* m) { m->dl_tensor.shape[1] = -6; },
                            {"negative dimension"});
  expect_refused<Versioned>(KF_ERROR_INVALID_ARGUMENT,
                            [](Versioned* m) { m->dl_tensor.strides[0] = -6; },
                            {"negative stride"});
  expect_refused<Versioned>(KF_ERROR_INVALID_ARGUMENT,
                            [](Versioned* m) { m->dl_tensor.shape = nullptr; }, {"NULL shape"});
  expect_refused<Versioned>(KF_ERROR_INVALID_ARGUMENT,
                            [](Versioned* m) { m->dl_tensor.data = nullptr; }, {"NULL data"});
  expect_refused<Versioned>(KF_ERROR_INVALID_ARGUMENT,
                            [](Versioned* m) { m->dl_tensor.byte_offset = 2; }, {"aligned"});
  expect_refused<Versioned>(KF_ERROR_INVALID_ARGUMENT,
                            [](Versioned* m) {
                              m->dl_tensor.shape[0] = INT64_MAX / 2;
                              m->dl_tensor.strides[0] = 4;
                            },
                            {"DLPack"});
  expect_refused<Versioned>(KF_ERROR_NOT_SUPPORTED,
                            [](Versioned* m) {
                              m->dl_tensor.strides[0] = 0;
                              m->dl_tensor.strides[1] = 0;
                            },
                            {"broadcast"});
  expect_refused<Legacy>(KF_ERROR_INVALID_ARGUMENT, [](Legacy* m) { m->dl_tensor.strides[1] = -1; },
                         {"negative stride"});
}

TEST_F(DlpackErrorTest, NullArgumentsAndHandles) {
  int deleted = 0;
  Versioned* m = produce<Versioned>(src_, &deleted);
  ASSERT_NE(m, nullptr);
  kf_tensor_t* out = nullptr;
  KF_EXPECT_ERR(kf_tensor_from_dlpack(ctx(), nullptr, &out), KF_ERROR_INVALID_ARGUMENT);
  KF_EXPECT_ERR(kf_tensor_from_dlpack(ctx(), m, nullptr), KF_ERROR_INVALID_ARGUMENT);
  KF_EXPECT_ERR(kf_tensor_from_dlpack(nullptr, m, &out), KF_ERROR_INVALID_HANDLE);
  KF_EXPECT_ERR(kf_tensor_from_dlpack_legacy(ctx(), nullptr, &out), KF_ERROR_INVALID_ARGUMENT);
  kf_context_config_t config = KF_CONTEXT_CONFIG_INIT;
  config.device_type = device_under_test();
  kf_context_t* dead = nullptr;
  KF_ASSERT_OK(kf_context_create(&config, &dead));
  KF_ASSERT_OK(kf_context_destroy(dead));
  KF_EXPECT_ERR(kf_tensor_from_dlpack(dead, m, &out), KF_ERROR_INVALID_HANDLE);
  EXPECT_EQ(out, nullptr);
  EXPECT_EQ(deleted, 0);
  m->deleter(m);
  EXPECT_EQ(deleted, 1);

  Versioned* exported = nullptr;
  Legacy* legacy = nullptr;
  KF_EXPECT_ERR(kf_tensor_to_dlpack(nullptr, &exported), KF_ERROR_INVALID_HANDLE);
  KF_EXPECT_ERR(kf_tensor_to_dlpack(src_, nullptr), KF_ERROR_INVALID_ARGUMENT);
  KF_EXPECT_ERR(kf_tensor_to_dlpack_legacy(nullptr, &legacy), KF_ERROR_INVALID_HANDLE);
  KF_EXPECT_ERR(kf_tensor_to_dlpack_legacy(src_, nullptr), KF_ERROR_INVALID_ARGUMENT);
  kf_tensor_t* dead_tensor = make_tensor(ctx(), KF_DTYPE_FLOAT32, {2}).t;  // destroyed at once
  KF_EXPECT_ERR(kf_tensor_to_dlpack(dead_tensor, &exported), KF_ERROR_INVALID_HANDLE);
  EXPECT_EQ(exported, nullptr);
  EXPECT_EQ(legacy, nullptr);
}

}  // namespace
