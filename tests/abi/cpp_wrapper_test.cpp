// The header-only C++ wrapper (kernel_fusion.hpp) on the CPU: ownership, errors as exceptions,
// streams, events, views and both ops against a float64 reference.
#include "kernel_fusion/kernel_fusion.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace kf = kernel_fusion;

namespace {

static_assert(!std::is_copy_constructible<kf::Context>::value, "handles are move-only");
static_assert(!std::is_copy_assignable<kf::Tensor>::value, "handles are move-only");
static_assert(std::is_nothrow_move_constructible<kf::Stream>::value, "moves never throw");
static_assert(std::is_nothrow_move_assignable<kf::Event>::value, "moves never throw");
static_assert(!std::is_copy_constructible<kf::Graph>::value, "handles are move-only");
static_assert(std::is_nothrow_move_assignable<kf::FusedKernel>::value, "moves never throw");

std::vector<float> random_values(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> values(count);
  for (float& v : values) {
    do {
      v = dist(rng);
    } while (v == 0.0f);
  }
  return values;
}

double gelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

TEST(CppWrapper, AddActivationMatchesReference) {
  kf::Context ctx = kf::Context::cpu(2);
  EXPECT_EQ(ctx.device_type(), KF_DEVICE_CPU);
  EXPECT_EQ(ctx.device_id(), 0);
  const int64_t rows = 7, cols = 1023;
  kf::Tensor a(ctx, {rows, cols});
  kf::Tensor b(ctx, {cols});
  kf::Tensor out(ctx, {rows, cols});
  EXPECT_EQ(a.shape(), (std::vector<int64_t>{rows, cols}));
  EXPECT_EQ(a.strides(), (std::vector<int64_t>{cols, 1}));
  EXPECT_EQ(a.numel(), rows * cols);
  EXPECT_EQ(a.nbytes(), static_cast<size_t>(rows * cols) * sizeof(float));
  EXPECT_EQ(a.dtype(), KF_DTYPE_FLOAT32);
  EXPECT_EQ(a.device_type(), KF_DEVICE_CPU);
  EXPECT_NE(a.data(), nullptr);

  const std::vector<float> a_host = random_values(rows * cols, 1);
  const std::vector<float> b_host = random_values(cols, 2);
  a.copy_from(a_host);
  b.copy_from(b_host);
  out.copy_from(std::vector<float>(rows * cols, NAN));  // poison

  kf::fused_elementwise_add_activation(ctx, a, b, out, KF_ACTIVATION_GELU);
  const std::vector<float> result = out.to_vector<float>();
  for (int64_t i = 0; i < rows * cols; ++i) {
    const double expected = gelu(double(a_host[i]) + double(b_host[i % cols]));
    ASSERT_NEAR(result[i], expected, 1e-5 * std::fabs(expected) + 1e-6) << "element " << i;
  }
}

TEST(CppWrapper, MulActivationOnStreamWithEvents) {
  kf::Context ctx = kf::Context::cpu();
  const auto range = ctx.stream_priority_range();
  kf::Stream stream(ctx, range.second);
  EXPECT_EQ(stream.priority(), range.second);
  EXPECT_EQ(stream.native(), nullptr);

  kf::Tensor a = kf::Tensor::create_async(ctx, kf::make_desc({3, 5}), stream);
  kf::Tensor b(ctx, {1, 5});
  const std::vector<float> a_host = random_values(15, 3);
  const std::vector<float> b_host = random_values(5, 4);
  a.copy_from(a_host, &stream);
  b.copy_from(b_host);

  kf::Event start(ctx), end(ctx);
  EXPECT_TRUE(start.query());
  start.record(&stream);
  kf::fused_elementwise_mul_activation(ctx, a, b, a, KF_ACTIVATION_TANH, &stream);  // in place
  end.record(&stream);
  kf::Stream other(ctx);
  other.wait(end);
  other.synchronize();
  end.synchronize();
  EXPECT_TRUE(end.query());
  EXPECT_GE(kf::Event::elapsed_ms(start, end), 0.0f);

  const std::vector<float> result = a.to_vector<float>(&stream);
  for (int i = 0; i < 15; ++i) {
    const double expected = std::tanh(double(a_host[i]) * double(b_host[i % 5]));
    EXPECT_NEAR(result[i], expected, 1e-5 * std::fabs(expected) + 1e-6) << "element " << i;
  }
  stream.synchronize();
  ctx.synchronize();
}

TEST(CppWrapper, ViewsAndBorrowedMemory) {
  kf::Context ctx = kf::Context::cpu();
  std::vector<double> storage(12);
  for (size_t i = 0; i < storage.size(); ++i) storage[i] = double(i) + 0.5;
  static int deleted = 0;
  deleted = 0;
  {
    kf::Tensor borrowed =
        kf::Tensor::wrap(ctx, kf::make_desc({3, 4}, KF_DTYPE_FLOAT64), storage.data(),
                         storage.size() * sizeof(double), [](void*, void*) { ++deleted; });
    EXPECT_EQ(borrowed.data(), storage.data());
    // The transpose, a non-contiguous view.
    kf::Tensor transposed = borrowed.view(kf::make_desc({4, 3}, KF_DTYPE_FLOAT64, {1, 4}));
    const std::vector<double> t = transposed.to_vector<double>();
    for (int r = 0; r < 4; ++r) {
      for (int c = 0; c < 3; ++c) EXPECT_EQ(t[r * 3 + c], storage[c * 4 + r]);
    }
    kf::Tensor last_row = borrowed.view(kf::make_desc({4}, KF_DTYPE_FLOAT64), 8);
    EXPECT_EQ(last_row.to_vector<double>(), (std::vector<double>{8.5, 9.5, 10.5, 11.5}));
    EXPECT_EQ(deleted, 0);
  }
  EXPECT_EQ(deleted, 1) << "the deleter runs once, when the last view is gone";
}

// Borrowed memory and a DLPack import with a home stream (Tensor::wrap_async,
// Tensor::from_dlpack_async): the same memory, read on that stream; a stream of another context
// throws, and the producer keeps its tensor.
TEST(CppWrapper, BorrowedMemoryWithAHomeStream) {
  kf::Context ctx = kf::Context::cpu();
  kf::Stream stream(ctx);
  std::vector<float> storage = random_values(6, 9);
  static int deleted = 0;
  deleted = 0;
  {
    kf::Tensor borrowed = kf::Tensor::wrap_async(ctx, kf::make_desc({2, 3}), storage.data(),
                                                 storage.size() * sizeof(float), stream,
                                                 [](void*, void*) { ++deleted; });
    EXPECT_EQ(borrowed.data(), storage.data());
    EXPECT_EQ(borrowed.to_vector<float>(&stream), storage);
    DLManagedTensorVersioned* exported = nullptr;
    ASSERT_EQ(kf_tensor_to_dlpack(borrowed.get(), &exported), KF_SUCCESS);
    kf::Tensor imported = kf::Tensor::from_dlpack_async(ctx, exported, stream);
    EXPECT_EQ(imported.data(), storage.data());
    EXPECT_EQ(imported.to_vector<float>(&stream), storage);

    kf::Context other = kf::Context::cpu();
    kf::Stream foreign(other);
    ASSERT_EQ(kf_tensor_to_dlpack(borrowed.get(), &exported), KF_SUCCESS);
    try {
      kf::Tensor refused = kf::Tensor::from_dlpack_async(ctx, exported, foreign);
      ADD_FAILURE() << "a stream of another context was taken";
    } catch (const kf::Error& e) {
      EXPECT_EQ(e.code(), KF_ERROR_DEVICE_MISMATCH);
    }
    exported->deleter(exported);  // still the caller's after the refusal
    EXPECT_EQ(deleted, 0);
  }
  EXPECT_EQ(deleted, 1) << "the deleter runs once, when the import and the wrap are gone";
}

TEST(CppWrapper, FailuresThrowErrorWithCodeAndMessage) {
  kf::Context ctx = kf::Context::cpu();
  kf::Tensor a(ctx, {3, 4});
  kf::Tensor b(ctx, {5});
  kf::Tensor out(ctx, {3, 4});
  try {
    kf::fused_elementwise_add_activation(ctx, a, b, out);
    FAIL() << "a non-broadcastable operand must throw";
  } catch (const kf::Error& e) {
    EXPECT_EQ(e.code(), KF_ERROR_SHAPE_MISMATCH);
    EXPECT_FALSE(e.message().empty());
    EXPECT_NE(std::string(e.what()).find("KF_ERROR_SHAPE_MISMATCH"), std::string::npos) << e.what();
  }
  EXPECT_THROW(a.to_vector<double>(), kf::Error);  // element size mismatch
  EXPECT_THROW(kf::make_desc(std::vector<int64_t>(9, 1)), kf::Error);
  try {
    kf::Tensor bad(ctx, {-1});
    FAIL() << "a negative dimension must throw";
  } catch (const kf::Error& e) {
    EXPECT_EQ(e.code(), KF_ERROR_INVALID_ARGUMENT);
  }
  int32_t cuda_devices = 0;
  ASSERT_EQ(kf_get_device_count(KF_DEVICE_CUDA, &cuda_devices), KF_SUCCESS);
  if (cuda_devices == 0) {
    try {
      kf::Context gpu = kf::Context::cuda();
      FAIL() << "a CUDA context without a GPU must throw";
    } catch (const kf::Error& e) {
      EXPECT_TRUE(e.code() == KF_ERROR_NO_DEVICE || e.code() == KF_ERROR_NOT_SUPPORTED) << e.what();
    }
  }
}

TEST(CppWrapper, OwnershipMovesAndReleases) {
  kf::Context ctx = kf::Context::cpu();
  kf::Tensor a(ctx, {2});
  kf_tensor_t* handle = a.get();
  kf::Tensor moved = std::move(a);
  EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): a moved-from wrapper is empty
  EXPECT_EQ(moved.get(), handle);
  kf::Tensor assigned;
  assigned = std::move(moved);
  EXPECT_EQ(assigned.get(), handle);

  kf_tensor_t* raw = assigned.release();
  EXPECT_FALSE(assigned);
  kf::Tensor adopted(raw);  // destroys the handle at scope exit
  kf_tensor_desc_t desc{};
  EXPECT_EQ(kf_tensor_get_desc(raw, &desc), KF_SUCCESS);

  kf::Tensor replaced(ctx, {4});
  kf_tensor_t* old = replaced.get();
  replaced = kf::Tensor(ctx, {8});
  EXPECT_EQ(kf_tensor_get_desc(old, &desc), KF_ERROR_INVALID_HANDLE)
      << "assignment destroys the old tensor";

  // Children whose context is gone are destroyed harmlessly by their wrappers.
  kf::Context short_lived = kf::Context::cpu();
  kf::Tensor orphan(short_lived, {3});
  kf::Stream orphan_stream(short_lived);
  short_lived = kf::Context();
  EXPECT_FALSE(short_lived);
}

TEST(CppWrapper, MemoryStats) {
  kf::Context ctx = kf::Context::cpu(1, 1 << 20);
  const uint64_t before = ctx.memory_stats().in_use_bytes;
  {
    kf::Tensor t(ctx, {1024}, KF_DTYPE_FLOAT64);
    const kf_memory_stats_t stats = ctx.memory_stats();
    EXPECT_GE(stats.in_use_bytes, before + 8192);
    EXPECT_EQ(stats.limit_bytes, uint64_t{1} << 20);
    try {
      kf::Tensor too_big(ctx, {1 << 20}, KF_DTYPE_FLOAT64);
      FAIL() << "a tensor over the limit must throw";
    } catch (const kf::Error& e) {
      EXPECT_EQ(e.code(), KF_ERROR_OUT_OF_MEMORY);
    }
  }
  ctx.reset_peak_memory();
  ctx.trim_memory();
  EXPECT_EQ(ctx.memory_stats().in_use_bytes, before);
  EXPECT_GT(kf::version(), 0u);
}

TEST(CppWrapper, FusionGraphCompilesAndLaunches) {
  kf::Context ctx = kf::Context::cpu(2);
  kf::Graph graph(ctx);
  const int32_t x = graph.tensor_input(KF_DTYPE_FLOAT32, 2);
  const int32_t half = graph.scalar(0.5);
  const int32_t y = graph.activation(KF_ACTIVATION_GELU, graph.binary(KF_BINARY_MUL, x, half));
  EXPECT_EQ(graph.output(y), 0);
  EXPECT_FALSE(graph.source().empty());
  kf::FusedKernel kernel = graph.compile(2);
  EXPECT_EQ(kernel.info().max_items, 2);
  EXPECT_EQ(kernel.info().n_inputs, 1);
  EXPECT_EQ(kernel.source(), "");  // CPU kernels have no CUDA source

  kf::Tensor in(ctx, {3, 4});
  kf::Tensor out(ctx, {3, 4});
  const std::vector<float> host = random_values(12, 7);
  in.copy_from(host);
  kernel.launch({in.get()}, {out.get()}, 1, {{half, 0, 2.0}});  // the factor becomes 2
  const std::vector<float> result = out.to_vector<float>();
  for (size_t i = 0; i < host.size(); ++i)
    EXPECT_NEAR(result[i], gelu(2.0 * host[i]),
                1e-5 * std::max(1.0, std::fabs(gelu(2.0 * host[i]))));

  // Lists shorter (or longer) than n_items take are refused before the C call, which would read
  // past their ends.
  kf::Tensor other(ctx, {3, 4});
  const std::vector<float> before = other.to_vector<float>();
  auto expect_refused = [&](const std::vector<const kf_tensor_t*>& inputs,
                            const std::vector<kf_tensor_t*>& outputs, int32_t n_items,
                            const std::vector<kf_rect_t>& crops, const char* what) {
    try {
      kernel.launch(inputs, outputs, n_items, {}, crops);
      ADD_FAILURE() << what << " was launched";
    } catch (const kf::Error& e) {
      EXPECT_EQ(e.code(), KF_ERROR_INVALID_ARGUMENT) << what;
      EXPECT_NE(e.message().find("items take"), std::string::npos) << e.message();
    }
  };
  expect_refused({in.get()}, {out.get()}, 2, {}, "one item's lists for two items");
  expect_refused({in.get(), in.get()}, {out.get()}, 2, {}, "two inputs, one output");
  expect_refused({in.get(), in.get()}, {out.get(), other.get()}, 1, {}, "two items' lists");
  expect_refused({in.get()}, {out.get()}, 1, {kf_rect_t{0, 0, 1, 1}, kf_rect_t{0, 0, 1, 1}},
                 "two crops for one item");
  expect_refused({}, {}, 0, {}, "no items");
  EXPECT_EQ(other.to_vector<float>(), before);

  // Rule violations throw with the library's code and message.
  const int32_t i32 = graph.tensor_input(KF_DTYPE_INT32, 1);
  try {
    graph.binary(KF_BINARY_ADD, x, i32);
    ADD_FAILURE() << "mixed dtypes were accepted";
  } catch (const kf::Error& e) {
    EXPECT_EQ(e.code(), KF_ERROR_DTYPE_MISMATCH);
    EXPECT_NE(e.message().find("cast"), std::string::npos) << e.message();
  }
  // Too few normalize values reach the library as a missing channel.
  kf::Graph image_graph(ctx);
  const int32_t rgb = image_graph.read_image(image_graph.image_input(KF_DTYPE_UINT8, 3));
  try {
    image_graph.normalize(rgb, 1.0, {0.5}, {0.25});
    ADD_FAILURE() << "one mean for three channels was accepted";
  } catch (const kf::Error& e) {
    EXPECT_EQ(e.code(), KF_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(e.message().find("mean[1] is nan"), std::string::npos) << e.message();
  }
  EXPECT_GE(image_graph.normalize(rgb, 1.0, {1, 2, 3}, {4, 5, 6}), 0);
}

}  // namespace
