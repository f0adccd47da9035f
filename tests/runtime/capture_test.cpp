// The runtime under CUDA stream capture (CUDA only): what the library does on its own behalf
// while a stream of the context is being captured — a tensor's release ordered after every
// stream, temporaries created and destroyed inside the capture — must neither break the capture
// nor pull an eager stream into it, and the graph must compute what the calls asked for.
#include <cuda_runtime.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/common/test_util.hpp"

namespace {

using kf_test::Tensor;

constexpr int64_t kRows = 333, kCols = 257;

// Whole numbers (exact in f32 through a few additions), none zero.
std::vector<double> whole_values(size_t n, uint64_t seed) {
  std::vector<double> v = kf_test::random_values(n, seed, -50.0, 50.0);
  for (double& e : v) e = std::round(e) + (e < 0 ? -1.0 : 1.0);
  return v;
}

class Capture : public ::testing::Test {
 protected:
  void SetUp() override {
    KF_REQUIRE_DEVICE();
    KF_ASSERT_OK(kf_stream_create(ctx_, nullptr, &stream_));
    void* native = nullptr;
    KF_ASSERT_OK(kf_stream_get_native(stream_, &native));
    cs_ = static_cast<cudaStream_t>(native);
  }
  void TearDown() override {
    if (stream_ != nullptr) {
      EXPECT_EQ(kf_stream_destroy(stream_), KF_SUCCESS);
    }
  }
  // out = a + b on the test's stream.
  kf_result_t add(kf_tensor_t* a, kf_tensor_t* b, kf_tensor_t* out) {
    return kf_fused_elementwise_add_activation(ctx_, a, b, out, KF_ACTIVATION_NONE, stream_);
  }
  // Ends the capture begun on the test's stream and runs its graph `replays` times.
  void end_and_replay(int replays) {
    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamEndCapture(cs_, &graph), cudaSuccess);
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    for (int r = 0; r < replays; ++r) ASSERT_EQ(cudaGraphLaunch(exec, cs_), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(cs_), cudaSuccess);
    EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
    EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  }

  kf_test::Context ctx_;
  kf_stream_t* stream_ = nullptr;
  cudaStream_t cs_ = nullptr;
};

// A tensor of the default stream, used eagerly on the test's stream, destroyed while the test's
// stream is being captured (global mode). Its release may not record into the capture and make
// the default stream wait for it: that joins the default stream to the capture, and the capture
// ends unjoined or invalidated.
TEST_F(Capture, TensorDestroyedWhileAnotherStreamCaptures) {
  const size_t n = static_cast<size_t>(kRows * kCols);
  const std::vector<double> a = whole_values(n, 11), b = whole_values(n, 12);
  Tensor x = kf_test::make_tensor(ctx_, KF_DTYPE_FLOAT32, {kRows, kCols});
  Tensor y = kf_test::make_tensor(ctx_, KF_DTYPE_FLOAT32, {kRows, kCols});
  Tensor doomed = kf_test::make_tensor(ctx_, KF_DTYPE_FLOAT32, {kRows, kCols});
  kf_test::upload(x, a);
  kf_test::upload(doomed, b);
  // Eagerly: y = x + doomed on the test's stream (so the release has that stream to order after).
  KF_ASSERT_OK(add(x, doomed, y));
  KF_ASSERT_OK(kf_stream_synchronize(stream_));
  kf_test::poison(y);

  ASSERT_EQ(cudaStreamBeginCapture(cs_, cudaStreamCaptureModeGlobal), cudaSuccess);
  const kf_result_t captured = add(x, x, y);  // y = 2x, in the graph
  const kf_result_t destroyed = kf_tensor_destroy(doomed.t);
  doomed.t = nullptr;
  end_and_replay(2);
  KF_ASSERT_OK(captured);
  KF_ASSERT_OK(destroyed);
  std::vector<double> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = 2 * a[i];
  kf_test::expect_close(kf_test::download(y), want, 0.0, "y = 2x from the graph");
  // The context keeps working eagerly: the default stream did not join the capture.
  Tensor z = kf_test::make_tensor(ctx_, KF_DTYPE_FLOAT32, {kRows, kCols});
  KF_ASSERT_OK(kf_fused_elementwise_add_activation(ctx_, y, x, z, KF_ACTIVATION_NONE, nullptr));
  for (size_t i = 0; i < n; ++i) want[i] = 3 * a[i];
  kf_test::expect_close(kf_test::download(z), want, 0.0, "z = y + x, eagerly after the capture");
}

// A temporary created on the capturing stream and destroyed before the capture ends (the
// pattern of framework temporaries): its allocation and its release both belong to the graph,
// and every replay computes through it.
TEST_F(Capture, TemporaryCreatedAndDestroyedInsideTheCapture) {
  const size_t n = static_cast<size_t>(kRows * kCols);
  const std::vector<double> a = whole_values(n, 21), b = whole_values(n, 22);
  Tensor x = kf_test::make_tensor(ctx_, KF_DTYPE_FLOAT32, {kRows, kCols});
  Tensor bias = kf_test::make_tensor(ctx_, KF_DTYPE_FLOAT32, {kRows, kCols});
  Tensor y = kf_test::make_tensor(ctx_, KF_DTYPE_FLOAT32, {kRows, kCols});
  kf_test::upload(x, a);
  kf_test::upload(bias, b);
  KF_ASSERT_OK(add(x, bias, y));  // the warm-up: the kernel and its grid looked up
  KF_ASSERT_OK(kf_stream_synchronize(stream_));
  kf_test::poison(y);

  const kf_tensor_desc_t desc = kf_test::make_desc(KF_DTYPE_FLOAT32, {kRows, kCols});
  ASSERT_EQ(cudaStreamBeginCapture(cs_, cudaStreamCaptureModeGlobal), cudaSuccess);
  kf_tensor_t* tmp = nullptr;
  const kf_result_t created = kf_tensor_create_async(ctx_, &desc, stream_, &tmp);
  kf_result_t first = KF_ERROR_INTERNAL, second = KF_ERROR_INTERNAL, destroyed = KF_ERROR_INTERNAL;
  if (created == KF_SUCCESS) {
    first = add(x, bias, tmp);  // tmp = x + bias
    second = add(tmp, x, y);    // y = tmp + x
    destroyed = kf_tensor_destroy(tmp);
  }
  end_and_replay(3);
  KF_ASSERT_OK(created);
  KF_ASSERT_OK(first);
  KF_ASSERT_OK(second);
  KF_ASSERT_OK(destroyed);
  std::vector<double> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = 2 * a[i] + b[i];
  kf_test::expect_close(kf_test::download(y), want, 0.0, "y = (x + bias) + x from the graph");
  kf_memory_stats_t stats = KF_MEMORY_STATS_INIT;
  KF_ASSERT_OK(kf_context_get_memory_stats(ctx_, &stats));
  EXPECT_EQ(stats.allocation_count, 3u) << "x, bias and y; the temporary is gone";
}

// A tensor created on the capturing stream and kept: the graph allocates it, and after one
// replay it is used eagerly from another stream and destroyed there. Its allocation event was
// recorded in the capture, which CUDA refuses to query (cudaErrorCapturedEvent): the eager use
// may not ask about it.
TEST_F(Capture, TensorCreatedInACaptureIsUsableAfterItsReplay) {
  const size_t n = static_cast<size_t>(kRows * kCols);
  const std::vector<double> a = whole_values(n, 31), b = whole_values(n, 32);
  Tensor x = kf_test::make_tensor(ctx_, KF_DTYPE_FLOAT32, {kRows, kCols});
  Tensor bias = kf_test::make_tensor(ctx_, KF_DTYPE_FLOAT32, {kRows, kCols});
  Tensor y = kf_test::make_tensor(ctx_, KF_DTYPE_FLOAT32, {kRows, kCols});
  kf_test::upload(x, a);
  kf_test::upload(bias, b);
  KF_ASSERT_OK(add(x, bias, y));
  KF_ASSERT_OK(kf_fused_elementwise_add_activation(ctx_, x, bias, y, KF_ACTIVATION_NONE, nullptr));
  KF_ASSERT_OK(kf_stream_synchronize(stream_));
  KF_ASSERT_OK(kf_stream_synchronize(nullptr));
  kf_test::poison(y);

  const kf_tensor_desc_t desc = kf_test::make_desc(KF_DTYPE_FLOAT32, {kRows, kCols});
  ASSERT_EQ(cudaStreamBeginCapture(cs_, cudaStreamCaptureModeGlobal), cudaSuccess);
  kf_tensor_t* kept = nullptr;
  const kf_result_t created = kf_tensor_create_async(ctx_, &desc, stream_, &kept);
  const kf_result_t filled = created == KF_SUCCESS ? add(x, bias, kept) : KF_ERROR_INTERNAL;
  end_and_replay(1);
  KF_ASSERT_OK(created);
  Tensor owner(kept);
  KF_ASSERT_OK(filled);
  // Eagerly, on the default stream: y = kept + x.
  KF_ASSERT_OK(kf_fused_elementwise_add_activation(ctx_, kept, x, y, KF_ACTIVATION_NONE, nullptr));
  std::vector<double> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = 2 * a[i] + b[i];
  kf_test::expect_close(kf_test::download(y), want, 0.0, "y = kept + x, kept from the graph");
  KF_ASSERT_OK(kf_tensor_destroy(owner.t));
  owner.t = nullptr;
  KF_ASSERT_OK(kf_context_synchronize(ctx_));
}

}  // namespace
