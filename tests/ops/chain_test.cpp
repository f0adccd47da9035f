// Every op family queued back to back on one stream, each call reading the previous call's
// output, without a synchronisation between them. On sm_90 the CUDA kernels are programmatic
// dependent launches (core/runtime/cuda/grid_dependency.cuh): a kernel may start while the one
// before it still runs and must wait for it before it reads anything. The reads are arranged so
// that early blocks of a call need what late blocks of the call before wrote (transposed views,
// rows taken from the two halves in turn, column statistics), and every buffer starts poisoned.
//
// The same chain runs on a CPU context, whose calls are ordered and whose ops are checked against
// float64 references in their own tests; the device under test must agree with it everywhere.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernel_fusion/kernel_fusion.h"
#include "tests/common/test_util.hpp"

namespace {

using kf_test::Tensor;

#if defined(KF_TEST_CUDA)
constexpr int64_t kN = 1024;  // several waves of blocks for every kernel
#else
constexpr int64_t kN = 256;
#endif
constexpr int kRounds = 3;

// What one chain leaves behind: every buffer, the reduction and the running statistics.
struct ChainResult {
  std::vector<std::vector<double>> buffers;
  std::vector<double> column_means, running_mean, running_var;
};

class Chain {
 public:
  explicit Chain(kf_context_t* ctx) : ctx_(ctx) {}

  // A view of t's [kN, kN] storage with the given shape and strides.
  Tensor view(kf_tensor_t* t, std::vector<int64_t> shape, std::vector<int64_t> strides) {
    const kf_tensor_desc_t desc = kf_test::make_desc(KF_DTYPE_FLOAT32, shape, strides);
    kf_tensor_t* v = nullptr;
    EXPECT_EQ(kf_tensor_create_view(t, &desc, 0, &v), KF_SUCCESS) << kf_get_last_error_message();
    return Tensor(v);
  }
  // Rows i and kN / 2 + i of t become rows 2i and 2i + 1: a call's first rows are the middle
  // rows of the buffer.
  Tensor halves(kf_tensor_t* t) { return view(t, {kN / 2, 2, kN}, {kN, kN * kN / 2, 1}); }
  Tensor halves_out(kf_tensor_t* t) { return view(t, {kN / 2, 2, kN}, {2 * kN, kN, 1}); }
  Tensor transposed(kf_tensor_t* t) { return view(t, {kN, kN}, {1, kN}); }

  ChainResult run(const std::vector<double>& x0, const std::vector<double>& vectors) {
    std::vector<Tensor> b;
    for (int i = 0; i < 7; ++i) {
      b.push_back(kf_test::make_tensor(ctx_, KF_DTYPE_FLOAT32, {kN, kN}));
      kf_test::poison(b.back());
    }
    kf_test::upload(b[0], x0);
    std::vector<Tensor> v;  // bias, ln weight, ln bias, rms weight, bn weight, bn bias
    for (size_t i = 0; i < 6; ++i) {
      v.push_back(kf_test::make_tensor(ctx_, KF_DTYPE_FLOAT32, {kN}));
      kf_test::upload(v.back(),
                      std::vector<double>(vectors.begin() + static_cast<int64_t>(i) * kN,
                                          vectors.begin() + static_cast<int64_t>(i + 1) * kN));
    }
    Tensor means = kf_test::make_tensor(ctx_, KF_DTYPE_FLOAT32, {kN});
    Tensor running_mean = kf_test::make_tensor(ctx_, KF_DTYPE_FLOAT32, {kN});
    Tensor running_var = kf_test::make_tensor(ctx_, KF_DTYPE_FLOAT32, {kN});
    kf_test::poison(means);
    kf_test::upload(running_mean, std::vector<double>(kN, 0.0));
    kf_test::upload(running_var, std::vector<double>(kN, 1.0));

    Tensor t0 = transposed(b[0]), h1 = halves(b[1]), h2_out = halves_out(b[2]);
    Tensor t2 = transposed(b[2]), h3 = halves(b[3]), h4_out = halves_out(b[4]);
    Tensor t4 = transposed(b[4]), t6 = transposed(b[6]);
    for (int round = 0; round < kRounds; ++round) {
      // Element-wise (strided kernel): b1 = GELU(b0^T + bias).
      ok(kf_fused_bias_activation(ctx_, t0, v[0], b[1], KF_ACTIVATION_GELU, nullptr),
         "bias + GELU");
      // Softmax over rows taken from the two halves (dense rows, two leading dims).
      ok(kf_fused_softmax(ctx_, h1, nullptr, h2_out, 1.0, 0, nullptr), "softmax");
      // Layer norm of the transpose (strided rows).
      ok(kf_fused_layer_norm_activation(ctx_, t2, v[1], v[2], b[3], nullptr, nullptr, 1, 1e-5,
                                        KF_ACTIVATION_NONE, nullptr),
         "layer norm");
      // RMS norm over rows from the two halves.
      ok(kf_fused_rms_norm_activation(ctx_, h3, nullptr, v[3], h4_out, nullptr, 1e-5,
                                      KF_ACTIVATION_SILU, nullptr),
         "RMS norm");
      // GELU + dropout of the transpose (the same mask on every backend).
      ok(kf_fused_gelu_dropout(ctx_, t4, b[5], nullptr, 0.1, 1, 1234, static_cast<uint64_t>(round),
                               nullptr),
         "GELU + dropout");
      // Batch norm, training: [N, C] channels first, each channel a column over all rows.
      ok(kf_fused_batch_norm_activation(ctx_, b[5], v[4], v[5], running_mean, running_var, b[6], 1,
                                        0.1, 1e-5, KF_ACTIVATION_NONE, KF_LAYOUT_NCHW, nullptr),
         "batch norm");
      // Column means (a reduction over dim 0: every row of the batch norm's output).
      const int32_t axis = 0;
      ok(kf_reduce(ctx_, b[6], means, KF_REDUCE_MEAN, &axis, 1, 0, nullptr), "column means");
      // The next round's input: b0 = b6^T + means (added along rows).
      ok(kf_fused_elementwise_add_activation(ctx_, t6, means, b[0], KF_ACTIVATION_NONE, nullptr),
         "add");
    }
    ChainResult r;
    for (const Tensor& t : b) r.buffers.push_back(kf_test::download(t));
    r.column_means = kf_test::download(means);
    r.running_mean = kf_test::download(running_mean);
    r.running_var = kf_test::download(running_var);
    return r;
  }

 private:
  void ok(kf_result_t r, const char* what) {
    EXPECT_EQ(r, KF_SUCCESS) << what << ": " << kf_get_last_error_message();
  }
  kf_context_t* ctx_;
};

TEST(OpChain, BackToBackCallsOfEveryFamilySeeEachOthersResults) {
  KF_REQUIRE_DEVICE();
  kf_test::Context device;
  ASSERT_NE(device.ctx, nullptr);
  kf_context_config_t config = KF_CONTEXT_CONFIG_INIT;
  config.device_type = KF_DEVICE_CPU;
  kf_context_t* cpu = nullptr;
  KF_ASSERT_OK(kf_context_create(&config, &cpu));

  std::mt19937_64 rng(20261129u);
  std::uniform_real_distribution<double> unit(-2.0, 2.0);
  std::vector<double> x0(static_cast<size_t>(kN * kN)), vectors(static_cast<size_t>(6 * kN));
  for (double& e : x0) e = static_cast<float>(unit(rng));
  for (double& e : vectors) e = static_cast<float>(0.5 * unit(rng));

  const ChainResult want = Chain(cpu).run(x0, vectors);
  for (int attempt = 0; attempt < 3; ++attempt) {
    SCOPED_TRACE("attempt " + std::to_string(attempt));
    const ChainResult got = Chain(device.ctx).run(x0, vectors);
    ASSERT_EQ(got.buffers.size(), want.buffers.size());
    const char* names[] = {"b0 (add)",        "b1 (bias + GELU)", "b2 (softmax)",
                           "b3 (layer norm)", "b4 (RMS norm)",    "b5 (GELU + dropout)",
                           "b6 (batch norm)"};
    for (size_t i = 0; i < got.buffers.size(); ++i)
      kf_test::expect_close(got.buffers[i], want.buffers[i], 2e-4, names[i]);
    kf_test::expect_close(got.column_means, want.column_means, 2e-4, "column means");
    kf_test::expect_close(got.running_mean, want.running_mean, 2e-4, "running mean");
    kf_test::expect_close(got.running_var, want.running_var, 2e-4, "running variance");
  }
  kf_context_destroy(cpu);
}

}  // namespace
