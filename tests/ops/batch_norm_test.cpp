// kf_fused_batch_norm_activation against a float64 reference written here, for every dtype:
// NCHW and NHWC, ranks 2 to 4 with odd extents, strided views of x and out (including a
// channels-last view described as NCHW), in place, inference and training (running statistics
// checked against the update formula), large means, with and without affine parameters and
// running statistics, every activation, every error path. Outputs are poisoned (NaN) first; data
// is random from a printed seed (KF_TEST_SEED=<n>).
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "tests/ops/row_test_util.hpp"

namespace {

using namespace row_test;

kf_dtype_t stats_dtype(kf_dtype_t dtype) {
  return dtype == KF_DTYPE_FLOAT64 ? KF_DTYPE_FLOAT64 : KF_DTYPE_FLOAT32;
}

struct BatchNormRef {
  std::vector<double> out, running_mean, running_var;
};

// x packed row-major over `shape`; weight/bias empty for absent; running_* empty for absent
// (training only).
BatchNormRef batch_norm_ref(const std::vector<double>& x, const Shape& shape, kf_layout_t layout,
                            const std::vector<double>& weight, const std::vector<double>& bias,
                            const std::vector<double>& running_mean,
                            const std::vector<double>& running_var, bool training, double momentum,
                            double eps, kf_activation_t act) {
  const size_t channel_dim = layout == KF_LAYOUT_NCHW ? 1 : shape.size() - 1;
  const int64_t channels = shape[channel_dim];
  int64_t inner = 1;
  for (size_t d = channel_dim + 1; d < shape.size(); ++d) inner *= shape[d];
  auto channel = [&](size_t e) { return static_cast<size_t>((e / inner) % channels); };
  const size_t nc = static_cast<size_t>(channels);
  std::vector<double> mean(nc, 0.0), var(nc, 0.0), count(nc, 0.0);
  BatchNormRef r{std::vector<double>(x.size()), running_mean, running_var};
  if (training) {
    for (size_t e = 0; e < x.size(); ++e) {
      mean[channel(e)] += x[e];
      count[channel(e)] += 1;
    }
    for (size_t c = 0; c < nc; ++c) mean[c] /= count[c];
    for (size_t e = 0; e < x.size(); ++e)
      var[channel(e)] += (x[e] - mean[channel(e)]) * (x[e] - mean[channel(e)]);
    for (size_t c = 0; c < nc; ++c) {
      var[c] /= count[c];
      if (!running_mean.empty()) {
        r.running_mean[c] = (1 - momentum) * running_mean[c] + momentum * mean[c];
        r.running_var[c] =
            (1 - momentum) * running_var[c] + momentum * var[c] * count[c] / (count[c] - 1);
      }
    }
  } else {
    mean = running_mean;
    var = running_var;
  }
  for (size_t e = 0; e < x.size(); ++e) {
    const size_t c = channel(e);
    double y = (x[e] - mean[c]) / std::sqrt(var[c] + eps);
    if (!weight.empty()) y *= weight[c];
    if (!bias.empty()) y += bias[c];
    r.out[e] = reference_activation(act, y);
  }
  return r;
}

struct Case {
  Shape shape;
  kf_layout_t layout = KF_LAYOUT_NCHW;
  bool training = false;
  bool affine = true;
  bool running = true;  // running statistics given (always in inference)
  kf_activation_t act = KF_ACTIVATION_NONE;
  double center = 0.0;  // mean of x (and of the running mean)
  double momentum = 0.1;
  double lead = 0.0;  // when not 0: every other channel's first element is center + lead
};

std::string describe(const Case& c) {
  return shape_str(c.shape) + (c.layout == KF_LAYOUT_NCHW ? " NCHW" : " NHWC") +
         (c.training ? " training" : " inference") + (c.affine ? " affine" : "") +
         (c.running ? "" : " untracked") + " act " + std::to_string(static_cast<int>(c.act)) +
         (c.center != 0.0 ? " center " + std::to_string(c.center) : "");
}

class BatchNormTest : public row_test::DeviceFixture<::testing::TestWithParam<kf_dtype_t>> {
 protected:
  kf_dtype_t dtype() const { return GetParam(); }
  kf_dtype_t stats() const { return stats_dtype(dtype()); }
  uint64_t seed(uint64_t salt) const {
    return base_seed() * 1000003u + static_cast<uint64_t>(dtype()) * 10007u + salt;
  }
  // Output tolerance: one rounding of the result to the dtype plus f32 arithmetic. A mean of 1e4
  // over a spread of 1 amplifies f32 rounding of the statistics 1e4-fold relative to the mean, not
  // to the output: f64 keeps 1e-9 there, f32 stays within its tolerance (shifted statistics).
  double out_tolerance(const Case& c) const {
    if (c.center != 0.0 && dtype() == KF_DTYPE_FLOAT64) return 1e-9;
    return kf_test::tolerance(dtype());
  }

  // Runs one case on packed tensors (or with x == out when in_place) and checks out and the
  // running statistics.
  void check(const Case& c, uint64_t salt, bool in_place = false) {
    const uint64_t s = seed(salt);
    const std::string what = std::string(dtype_name(dtype())) + " " + describe(c) +
                             (in_place ? " in place" : "") + " (seed " + std::to_string(s) + ")";
    SCOPED_TRACE(what);
    const int64_t channels = c.layout == KF_LAYOUT_NCHW ? c.shape[1] : c.shape.back();
    const size_t n = static_cast<size_t>(kf_test::numel(c.shape));
    const size_t nc = static_cast<size_t>(channels);
    Tensor x = tensor(c.shape, dtype());
    Tensor out_owned = tensor(c.shape, dtype());
    kf_tensor_t* out = in_place ? x.t : out_owned.t;
    Tensor w = tensor({channels}, stats()), b = tensor({channels}, stats());
    Tensor rm = tensor({channels}, stats()), rv = tensor({channels}, stats());
    auto xv = fill(x, dtype(), n, s, c.center - 3.0, c.center + 3.0);
    if (c.lead != 0.0) {  // channel ch's first element: (0, ch, 0, ...) in NCHW, ch in NHWC
      const size_t plane =
          c.layout == KF_LAYOUT_NCHW ? n / static_cast<size_t>(c.shape[0]) / nc : 1;
      for (size_t ch = 0; ch < nc; ch += 2)
        xv[ch * plane] = kf_test::round_to_dtype({c.center + c.lead}, dtype())[0];
      kf_test::upload(x, xv);
    }
    std::vector<double> wv, bv, rmv, rvv;
    if (c.affine) {
      wv = fill(w, stats(), nc, s + 1, 0.5, 2.0);
      bv = fill(b, stats(), nc, s + 2);
    }
    const bool running = c.running || !c.training;
    if (running) {
      rmv = fill(rm, stats(), nc, s + 3, c.center - 1.0, c.center + 1.0);
      rvv = fill(rv, stats(), nc, s + 4, 0.5, 2.5);
    }
    if (!in_place) kf_test::poison(out);
    KF_ASSERT_OK(kf_fused_batch_norm_activation(ctx(), x, c.affine ? w.t : nullptr,
                                                c.affine ? b.t : nullptr, running ? rm.t : nullptr,
                                                running ? rv.t : nullptr, out, c.training ? 1 : 0,
                                                c.momentum, 1e-5, c.act, c.layout, nullptr));
    const auto want = batch_norm_ref(xv, c.shape, c.layout, wv, bv, rmv, rvv, c.training,
                                     c.momentum, 1e-5, c.act);
    kf_test::expect_close(kf_test::download(out), want.out, out_tolerance(c), what);
    if (running) {
      // Statistics are f32 (f64 for f64 data) whatever x's dtype: f32's tolerance (f64's).
      const double tol = kf_test::tolerance(stats());
      if (c.center != 0.0 && stats() == KF_DTYPE_FLOAT32) {
        // About 1e4 f32's tolerance (0.1) exceeds the whole update (momentum times a distance of
        // about 1): the update itself is compared, to a few roundings of a value near 1e4. (f64's,
        // 1e-8 there, is already far below the update.)
        expect_close_about(kf_test::download(rm), want.running_mean, rmv, stats(), 4.0, tol,
                           what + " running_mean");
      } else {
        kf_test::expect_close(kf_test::download(rm), want.running_mean, tol,
                              what + " running_mean");
      }
      kf_test::expect_close(kf_test::download(rv), want.running_var, tol, what + " running_var");
    }
  }
};

// {5, 6, 3, 2}: channels-first runs shorter than a vector (the CPU backend's element-by-element
// pass).
const Shape kShapes[] = {{1, 3, 1, 1}, {2, 5, 7, 9},    {3, 4, 17},
                         {4, 16},      {2, 3, 5, 6, 3}, {5, 6, 3, 2}};

TEST_P(BatchNormTest, Inference) {
  uint64_t salt = 0;
  for (const Shape& shape : kShapes)
    for (kf_layout_t layout : {KF_LAYOUT_NCHW, KF_LAYOUT_NHWC})
      for (bool affine : {true, false}) {
        Case c;
        c.shape = shape;
        c.layout = layout;
        c.affine = affine;
        check(c, salt += 11);
      }
}

TEST_P(BatchNormTest, Training) {
  uint64_t salt = 100;
  for (const Shape& shape : kShapes) {
    for (kf_layout_t layout : {KF_LAYOUT_NCHW, KF_LAYOUT_NHWC})
      for (bool affine : {true, false}) {
        const int64_t channels = layout == KF_LAYOUT_NCHW ? shape[1] : shape.back();
        if (kf_test::numel(shape) / channels < 2) continue;  // [1,3,1,1] NCHW: an error
        Case c;
        c.shape = shape;
        c.layout = layout;
        c.training = true;
        c.affine = affine;
        c.momentum = affine ? 0.1 : 0.3;
        check(c, salt += 11);
      }
  }
  // Channels-last with many channels (the CUDA backend's per-32-channel blocks), odd channel count.
  for (int64_t channels : {32, 40, 77}) {
    Case c;
    c.shape = {3, 5, 7, channels};
    c.layout = KF_LAYOUT_NHWC;
    c.training = true;
    check(c, salt += 11);
  }
  // Momentum at its ends: 0 keeps the running statistics, 1 replaces them.
  for (double momentum : {0.0, 1.0}) {
    Case c;
    c.shape = {4, 6, 5};
    c.training = true;
    c.momentum = momentum;
    check(c, salt += 11);
  }
  // Larger reductions: more elements per channel than a block has threads.
  Case big;
  big.shape = {8, 3, 33, 31};
  big.training = true;
  check(big, salt += 11);
  big.layout = KF_LAYOUT_NHWC;
  big.shape = {8, 33, 31, 48};
  check(big, salt += 11);
  // More elements a channel (1057806) than the CPU backend holds at a time (2^20): its statistics
  // gather the channel in two pieces per pass, the second starting inside the second image.
  Case longer;
  longer.shape = {2, 2, 1031, 513};
  longer.training = true;
  check(longer, salt += 11);
  // Channels last with 7 channels over 45633 elements: the CPU backend's second task of 32768
  // elements starts inside a row of channels, in training and inference.
  for (int training : {1, 0}) {
    Case few;
    few.shape = {3, 41, 53, 7};
    few.layout = KF_LAYOUT_NHWC;
    few.training = training != 0;
    check(few, salt += 11);
  }
}

// Dense tensors whose channel runs fill whole 16-byte vectors (the CUDA backend's vector
// inference kernel, and training staged in shared memory: one block per channel, or a cluster
// of blocks for the larger channels), NCHW and NHWC, every activation family member once.
TEST_P(BatchNormTest, VectorLayouts) {
  uint64_t salt = 700;
  const Shape nchw[] = {{3, 6, 8, 8}, {2, 5, 16, 40}, {1, 4, 16, 16}, {16, 3, 64, 64}};
  const kf_activation_t acts[] = {KF_ACTIVATION_NONE, KF_ACTIVATION_RELU, KF_ACTIVATION_GELU,
                                  KF_ACTIVATION_SILU};
  int i = 0;
  for (const Shape& shape : nchw)
    for (bool training : {false, true}) {
      Case c;
      c.shape = shape;
      c.training = training;
      c.act = acts[i++ % 4];
      check(c, salt += 11);
    }
  for (bool training : {false, true}) {
    Case c;
    c.shape = {2, 4, 4, 16};
    c.layout = KF_LAYOUT_NHWC;
    c.training = training;
    c.act = KF_ACTIVATION_RELU;
    check(c, salt += 11);
    c.shape = {3, 32, 8, 8};  // NCHW in place, untracked statistics
    c.layout = KF_LAYOUT_NCHW;
    c.running = !training;
    check(c, salt += 11, true);
  }
  // A channel of 64K elements around 1e4 (shifted sums across a cluster's blocks).
  if (dtype() == KF_DTYPE_FLOAT32 || dtype() == KF_DTYPE_FLOAT64) {
    Case c;
    c.shape = {16, 2, 64, 64};
    c.training = true;
    c.center = 1e4;
    check(c, salt += 11);
  }
}

// More channels than a GPU holds staging clusters at once (800 channels of 19200 elements: by the
// rule f32 takes clusters of 3 blocks (2 of larger slices on an H200), 16-bit ones of 2, a few
// hundred of them resident on an H100 or H200): on CUDA the clusters stay resident and walk the
// channels, each block restaging its slice of the next channel as it finishes the current one,
// alternating its cluster exchange slots. Then 128 channels of 160000 elements: every staged
// type's rule is 9 blocks a channel (f32 in 72 KiB slices, f16 and bf16 in 36 KiB ones), an odd
// split past 8, which launch_staged_training replaces by an even one where the SMs are not
// rows::tile_issue_lean (the H100; split_by_rounds: there are more channels than clusters of 9
// resident at once, at most 88 for 16-bit data); other devices keep their rule. CUDA only: the CPU
// backend has no such loop, and the tensors are large.
TEST_P(BatchNormTest, ChannelsPerResidentCluster) {
  if (kf_test::device_under_test() != KF_DEVICE_CUDA)
    GTEST_SKIP() << "the resident-cluster loop is of the CUDA backend";
  Case c;
  c.training = true;
  c.act = KF_ACTIVATION_RELU;
  c.shape = {2, 800, 96, 100};
  check(c, 3100);
  c.shape = {16, 128, 100, 100};
  check(c, 3200);
}

// Training where every other channel's first element lies far from the rest (250 over values in
// +-3: about 144 standard deviations; 7: about 4), through each training kernel of the CUDA
// backend: a block per channel (NCHW rows of 9), that split over a cluster (few channels of 63 x
// 65), staged in shared memory (NCHW rows of 16-byte vectors), staged over a cluster (few
// channels of 64 x 64) and a block per 32 channels (NHWC with 40 channels). The kernels take
// their sums about a channel's first element and sum the channel again about its mean where
// that element lies more than four deviations out.
TEST_P(BatchNormTest, ChannelLedFarOut) {
  uint64_t salt = 700;
  for (double lead : {250.0, 7.0})
    for (Case c :
         {Case{{2, 5, 7, 9}, KF_LAYOUT_NCHW, true}, Case{{16, 2, 63, 65}, KF_LAYOUT_NCHW, true},
          Case{{2, 6, 8, 16}, KF_LAYOUT_NCHW, true}, Case{{16, 2, 64, 64}, KF_LAYOUT_NCHW, true},
          Case{{2, 3, 5, 40}, KF_LAYOUT_NHWC, true}}) {
      c.lead = lead;
      check(c, salt += 11);
    }
}

TEST_P(BatchNormTest, UntrackedRunningStatistics) {
  Case c;
  c.shape = {3, 4, 17};
  c.training = true;
  c.running = false;
  check(c, 300);
  c.layout = KF_LAYOUT_NHWC;
  check(c, 301);
}

// Every activation through inference and through each training kernel of the CUDA backend:
// a block per channel (NCHW rows of 9), staged in shared memory (NCHW rows of 16-byte vectors)
// and a block per 32 channels (NHWC with 40 channels). Their output loops keep one copy for
// none, one for ReLU and one shared by the rest.
TEST_P(BatchNormTest, Activations) {
  uint64_t salt = 400;
  struct Layout {
    kf_layout_t layout;
    Shape shape;
  };
  const Layout layouts[] = {{KF_LAYOUT_NCHW, {2, 5, 7, 9}},
                            {KF_LAYOUT_NCHW, {2, 4, 8, 16}},
                            {KF_LAYOUT_NHWC, {2, 3, 5, 40}}};
  for (kf_activation_t act :
       {KF_ACTIVATION_NONE, KF_ACTIVATION_RELU, KF_ACTIVATION_GELU, KF_ACTIVATION_GELU_TANH,
        KF_ACTIVATION_SILU, KF_ACTIVATION_TANH, KF_ACTIVATION_SIGMOID})
    for (bool training : {false, true})
      for (const Layout& l : layouts) {
        Case c;
        c.shape = l.shape;
        c.layout = l.layout;
        c.training = training;
        c.act = act;
        check(c, salt += 11);
      }
}

// Mean 1e4, std about 1: a naive E[x^2] - E[x]^2 in f32 loses every digit here.
TEST_P(BatchNormTest, LargeMean) {
  if (dtype() == KF_DTYPE_FLOAT16 || dtype() == KF_DTYPE_BFLOAT16)
    GTEST_SKIP() << "1e4 +- 3 is not representable beyond a few values in half types";
  uint64_t salt = 500;
  for (bool training : {true, false})
    for (kf_layout_t layout : {KF_LAYOUT_NCHW, KF_LAYOUT_NHWC}) {
      Case c;
      c.shape = {8, 6, 25, 33};
      if (layout == KF_LAYOUT_NHWC) c.shape = {8, 25, 33, 40};
      c.layout = layout;
      c.training = training;
      c.center = 1e4;
      check(c, salt += 11);
    }
  // Channels-last statistics of few channels on a large mean: 6 channels. The CPU backend sums
  // them a group of whole rows at a time (about 64 accumulators wide), over 26 blocks of
  // positions, each block but the last ending with rows past a whole group; on CUDA the
  // few-channel kernels.
  {
    Case c;
    c.shape = {8, 25, 33, 6};
    c.layout = KF_LAYOUT_NHWC;
    c.training = true;
    c.center = 1e4;
    check(c, salt += 11);
  }
}

TEST_P(BatchNormTest, InPlace) {
  uint64_t salt = 600;
  for (bool training : {false, true})
    for (kf_layout_t layout : {KF_LAYOUT_NCHW, KF_LAYOUT_NHWC}) {
      Case c;
      c.shape = {3, 36, 5, 7};
      c.layout = layout;
      c.training = training;
      c.act = KF_ACTIVATION_SILU;
      check(c, salt += 11, true);
    }
}

// x and out as strided views: x is NHWC memory described as NCHW (channel stride 1), sliced with
// an offset; out has padded rows; weight and the running statistics are strided too.
TEST_P(BatchNormTest, StridedViews) {
  const uint64_t s = seed(700);
  for (bool training : {false, true}) {
    const std::string what = std::string(dtype_name(dtype())) + " strided" +
                             (training ? " training" : " inference") + " (seed " +
                             std::to_string(s) + ")";
    SCOPED_TRACE(what);
    // x: [2, 37, 5, 6] NCHW over a [2, 5, 6, 40] channels-last base, channels 1..37.
    const Shape shape{2, 37, 5, 6};
    const Shape x_strides{5 * 6 * 40, 1, 6 * 40, 40};
    Tensor x_base = tensor({2, 5, 6, 40}, dtype());
    Tensor x = make_view(x_base, dtype(), shape, x_strides, 1);
    const auto xv =
        gather(fill(x_base, dtype(), 2 * 5 * 6 * 40, s), view_offsets(shape, x_strides, 1));
    // out: [2, 37, 5, 6] with each 6-row padded to 8, offset 3.
    const Shape out_strides{37 * 5 * 8, 5 * 8, 8, 1};
    Tensor out_base = tensor({2 * 37 * 5 * 8 + 3}, dtype());
    Tensor out = make_view(out_base, dtype(), shape, out_strides, 3);
    Tensor w_base = tensor({74}, stats()), rm_base = tensor({111}, stats());
    Tensor w = make_view(w_base, stats(), {37}, {2}, 1);
    Tensor rm = make_view(rm_base, stats(), {37}, {3}, 2);
    Tensor b = tensor({37}, stats()), rv = tensor({37}, stats());
    const auto wv = gather(fill(w_base, stats(), 74, s + 1, 0.5, 2.0), view_offsets({37}, {2}, 1));
    const auto rmv = gather(fill(rm_base, stats(), 111, s + 2), view_offsets({37}, {3}, 2));
    const auto bv = fill(b, stats(), 37, s + 3);
    const auto rvv = fill(rv, stats(), 37, s + 4, 0.5, 2.5);
    kf_test::poison(out_base);
    KF_ASSERT_OK(kf_fused_batch_norm_activation(ctx(), x, w, b, rm, rv, out, training ? 1 : 0, 0.2,
                                                1e-3, KF_ACTIVATION_GELU, KF_LAYOUT_NCHW, nullptr));
    const auto want = batch_norm_ref(xv, shape, KF_LAYOUT_NCHW, wv, bv, rmv, rvv, training, 0.2,
                                     1e-3, KF_ACTIVATION_GELU);
    kf_test::expect_close(kf_test::download(out), want.out, kf_test::tolerance(dtype()), what);
    const double tol = kf_test::tolerance(stats());
    kf_test::expect_close(kf_test::download(rm), want.running_mean, tol, what + " running_mean");
    kf_test::expect_close(kf_test::download(rv), want.running_var, tol, what + " running_var");
    const auto whole = kf_test::download(out_base);
    std::vector<bool> inside(whole.size(), false);
    for (int64_t o : view_offsets(shape, out_strides, 3)) inside[static_cast<size_t>(o)] = true;
    for (size_t i = 0; i < whole.size(); ++i)
      if (!inside[i]) {
        EXPECT_TRUE(std::isnan(whole[i])) << "element " << i << " outside out written";
      }
  }
  // NHWC x with a strided (every other) position dim, out packed.
  {
    const Shape shape{3, 4, 9, 5};
    const Shape x_strides{8 * 9 * 5, 2 * 9 * 5, 5, 1};
    Tensor x_base = tensor({3, 8, 9, 5}, dtype());
    Tensor x = make_view(x_base, dtype(), shape, x_strides, 0);
    const auto xv =
        gather(fill(x_base, dtype(), 3 * 8 * 9 * 5, s + 5), view_offsets(shape, x_strides, 0));
    Tensor out = tensor(shape, dtype());
    kf_test::poison(out);
    KF_ASSERT_OK(kf_fused_batch_norm_activation(ctx(), x, nullptr, nullptr, nullptr, nullptr, out,
                                                1, 0.1, 1e-5, KF_ACTIVATION_RELU, KF_LAYOUT_NHWC,
                                                nullptr));
    const auto want = batch_norm_ref(xv, shape, KF_LAYOUT_NHWC, {}, {}, {}, {}, true, 0.1, 1e-5,
                                     KF_ACTIVATION_RELU);
    kf_test::expect_close(kf_test::download(out), want.out, kf_test::tolerance(dtype()),
                          "NHWC strided training");
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, BatchNormTest, row_test::float_dtypes(),
                         row_test::dtype_param_name);

// ---- 2^32 elements --------------------------------------------------------------------------

class BatchNormHuge : public row_test::DeviceTest {};

// Inference over 2^32 - 64 elements, just under 2^32, that the vector kernel does not take (x is
// a broadcast view): the CUDA backend's element kernel must index them in 64 bits. Its 32-bit
// form stepped e += 2^20 past 2^32 and wrapped back to each thread's first element, so the
// launch never ended. "Huge" in the name keeps it out of .ci/gpu.sh's sanitizer runs (out is
// 8 GiB of f16).
TEST_F(BatchNormHuge, InferenceJustUnderTwoToThe32Elements) {
  if (kf_test::device_under_test() != KF_DEVICE_CUDA)
    GTEST_SKIP() << "the 32-bit index bound is the CUDA kernel's; the CPU would take minutes";
  const kf_dtype_t dtype = KF_DTYPE_FLOAT16;
  const int64_t channels = 64, plane = (int64_t{1} << 26) - 1;  // 2^32 - 64 elements
  const Shape shape{1, channels, plane};
  Tensor x_values = tensor({channels}, dtype);
  const auto xv = fill(x_values, dtype, size_t(channels), base_seed() + 41);
  Tensor x = make_view(x_values, dtype, shape, {0, 1, 0}, 0);  // x[0, c, p] = xv[c]
  const kf_tensor_desc_t desc = kf_test::make_desc(dtype, shape);
  kf_tensor_t* out_handle = nullptr;
  const kf_result_t r = kf_tensor_create(ctx(), &desc, &out_handle);
  if (r == KF_ERROR_OUT_OF_MEMORY)
    GTEST_SKIP() << "the device cannot hold out: " << kf_get_last_error_message();
  ASSERT_EQ(r, KF_SUCCESS) << kf_get_last_error_message();
  Tensor out(out_handle);
  Tensor w = tensor({channels}, KF_DTYPE_FLOAT32), b = tensor({channels}, KF_DTYPE_FLOAT32);
  Tensor rm = tensor({channels}, KF_DTYPE_FLOAT32), rv = tensor({channels}, KF_DTYPE_FLOAT32);
  const auto wv = fill(w, KF_DTYPE_FLOAT32, size_t(channels), base_seed() + 42, 0.5, 2.0);
  const auto bv = fill(b, KF_DTYPE_FLOAT32, size_t(channels), base_seed() + 43);
  const auto rmv = fill(rm, KF_DTYPE_FLOAT32, size_t(channels), base_seed() + 44);
  const auto rvv = fill(rv, KF_DTYPE_FLOAT32, size_t(channels), base_seed() + 45, 0.5, 2.5);
  // Windows of every channel at the start, a third of the way in and the end of each plane;
  // the last element is 2^32 - 65.
  const int64_t window = 512;
  const std::vector<int64_t> starts{0, plane / 3, plane - window};
  for (int64_t at : starts)
    kf_test::poison(make_view(out, dtype, {channels, window}, {plane, 1}, at));
  KF_ASSERT_OK(kf_fused_batch_norm_activation(ctx(), x, w, b, rm, rv, out, 0, 0.1, 1e-5,
                                              KF_ACTIVATION_SILU, KF_LAYOUT_NCHW, nullptr));
  std::vector<double> want;
  for (int64_t c = 0; c < channels; ++c) {
    const size_t k = static_cast<size_t>(c);
    const double y = (xv[k] - rmv[k]) / std::sqrt(rvv[k] + 1e-5) * wv[k] + bv[k];
    want.insert(want.end(), size_t(window), reference_activation(KF_ACTIVATION_SILU, y));
  }
  for (int64_t at : starts) {
    kf_test::expect_close(
        kf_test::download(make_view(out, dtype, {channels, window}, {plane, 1}, at)), want,
        kf_test::tolerance(dtype), "out[:, " + std::to_string(at) + " +512]");
  }
}

// ---- errors -------------------------------------------------------------------------------------

class BatchNormErrors : public row_test::DeviceTest {};

TEST_F(BatchNormErrors, EveryCheck) {
  Tensor x = tensor({4, 6, 5}), out = tensor({4, 6, 5});
  Tensor w = tensor({6}), b = tensor({6}), rm = tensor({6}), rv = tensor({6});
  kf_test::upload(x, kf_test::random_values(120, 1));
  kf_test::upload(rm, kf_test::random_values(6, 2));
  kf_test::upload(rv, kf_test::random_values(6, 3, 0.5, 2.0));
  const std::vector<double> rm_before = kf_test::download(rm);
  kf_test::poison(out);
  const auto none = KF_ACTIVATION_NONE;
  const auto nchw = KF_LAYOUT_NCHW;
  auto bn = [&](kf_context_t* c, const kf_tensor_t* xx, const kf_tensor_t* ww,
                const kf_tensor_t* bb, kf_tensor_t* m, kf_tensor_t* v, kf_tensor_t* oo,
                int32_t training, double momentum, double eps, kf_activation_t act,
                kf_layout_t layout) {
    return kf_fused_batch_norm_activation(c, xx, ww, bb, m, v, oo, training, momentum, eps, act,
                                          layout, nullptr);
  };
  kf_context_t* c = ctx();
  // Handles.
  KF_EXPECT_ERR(bn(nullptr, x, w, b, rm, rv, out, 1, 0.1, 1e-5, none, nchw),
                KF_ERROR_INVALID_HANDLE);
  KF_EXPECT_ERR(bn(c, nullptr, w, b, rm, rv, out, 1, 0.1, 1e-5, none, nchw),
                KF_ERROR_INVALID_HANDLE);
  KF_EXPECT_ERR(bn(c, x, w, b, rm, rv, nullptr, 1, 0.1, 1e-5, none, nchw), KF_ERROR_INVALID_HANDLE);
  // Scalars and enums.
  // eps also normal and finite in f32, which f32 data is computed in.
  for (double eps :
       {0.0, -1e-5, static_cast<double>(NAN), static_cast<double>(INFINITY), 1e-300, 1e-40, 1e39})
    KF_EXPECT_ERR(bn(c, x, w, b, rm, rv, out, 1, 0.1, eps, none, nchw), KF_ERROR_INVALID_ARGUMENT);
  for (double momentum : {-0.1, 1.5, static_cast<double>(NAN)})
    KF_EXPECT_ERR(bn(c, x, w, b, rm, rv, out, 1, momentum, 1e-5, none, nchw),
                  KF_ERROR_INVALID_ARGUMENT);
  KF_EXPECT_ERR(bn(c, x, w, b, rm, rv, out, 1, 0.1, 1e-5, static_cast<kf_activation_t>(99), nchw),
                KF_ERROR_INVALID_ARGUMENT);
  KF_EXPECT_ERR(bn(c, x, w, b, rm, rv, out, 1, 0.1, 1e-5, none, static_cast<kf_layout_t>(2)),
                KF_ERROR_INVALID_ARGUMENT);
  KF_EXPECT_ERR(bn(c, x, w, b, rm, rv, out, 1, 0.1, 1e-5, none, static_cast<kf_layout_t>(-1)),
                KF_ERROR_INVALID_ARGUMENT);
  // Running statistics: required in inference, both or neither in training.
  KF_EXPECT_ERR(bn(c, x, w, b, nullptr, rv, out, 0, 0.1, 1e-5, none, nchw),
                KF_ERROR_INVALID_ARGUMENT);
  KF_EXPECT_ERR(bn(c, x, w, b, rm, nullptr, out, 0, 0.1, 1e-5, none, nchw),
                KF_ERROR_INVALID_ARGUMENT);
  KF_EXPECT_ERR(bn(c, x, w, b, rm, nullptr, out, 1, 0.1, 1e-5, none, nchw),
                KF_ERROR_INVALID_ARGUMENT);
  // Shapes.
  Tensor x1 = tensor({6}), out1 = tensor({6});
  KF_EXPECT_ERR(bn(c, x1, w, b, rm, rv, out1, 0, 0.1, 1e-5, none, nchw), KF_ERROR_SHAPE_MISMATCH);
  Tensor c5 = tensor({5}), c6x1 = tensor({6, 1}), out_bad = tensor({4, 6, 6});
  KF_EXPECT_ERR(bn(c, x, c5, b, rm, rv, out, 1, 0.1, 1e-5, none, nchw), KF_ERROR_SHAPE_MISMATCH);
  KF_EXPECT_ERR(bn(c, x, w, c6x1, rm, rv, out, 1, 0.1, 1e-5, none, nchw), KF_ERROR_SHAPE_MISMATCH);
  KF_EXPECT_ERR(bn(c, x, w, b, c5, rv, out, 0, 0.1, 1e-5, none, nchw), KF_ERROR_SHAPE_MISMATCH);
  KF_EXPECT_ERR(bn(c, x, w, b, rm, c5, out, 0, 0.1, 1e-5, none, nchw), KF_ERROR_SHAPE_MISMATCH);
  KF_EXPECT_ERR(bn(c, x, w, b, rm, rv, out_bad, 0, 0.1, 1e-5, none, nchw), KF_ERROR_SHAPE_MISMATCH);
  // NHWC makes C = 5: the [6] tensors no longer match.
  KF_EXPECT_ERR(bn(c, x, w, b, rm, rv, out, 0, 0.1, 1e-5, none, KF_LAYOUT_NHWC),
                KF_ERROR_SHAPE_MISMATCH);
  // Dtypes: x not floating, out another dtype, per-channel tensors not in the compute type.
  Tensor x_int = tensor({4, 6, 5}, KF_DTYPE_INT32), out_int = tensor({4, 6, 5}, KF_DTYPE_INT32);
  Tensor out_f16 = tensor({4, 6, 5}, KF_DTYPE_FLOAT16), w_f16 = tensor({6}, KF_DTYPE_FLOAT16);
  Tensor rm_f64 = tensor({6}, KF_DTYPE_FLOAT64);
  KF_EXPECT_ERR(bn(c, x_int, nullptr, nullptr, rm, rv, out_int, 0, 0.1, 1e-5, none, nchw),
                KF_ERROR_DTYPE_MISMATCH);
  KF_EXPECT_ERR(bn(c, x, w, b, rm, rv, out_f16, 0, 0.1, 1e-5, none, nchw), KF_ERROR_DTYPE_MISMATCH);
  KF_EXPECT_ERR(bn(c, x, w_f16, b, rm, rv, out, 0, 0.1, 1e-5, none, nchw), KF_ERROR_DTYPE_MISMATCH);
  KF_EXPECT_ERR(bn(c, x, w, b, rm_f64, rv, out, 0, 0.1, 1e-5, none, nchw), KF_ERROR_DTYPE_MISMATCH);
  // f16 data takes f32 statistics, not f16 ones.
  Tensor xh = tensor({4, 6, 5}, KF_DTYPE_FLOAT16), rm_f16 = tensor({6}, KF_DTYPE_FLOAT16);
  KF_EXPECT_ERR(bn(c, xh, nullptr, nullptr, rm_f16, rv, out_f16, 0, 0.1, 1e-5, none, nchw),
                KF_ERROR_DTYPE_MISMATCH);
  // Training with one value per channel.
  Tensor x_one = tensor({1, 6, 1}), out_one = tensor({1, 6, 1});
  KF_EXPECT_ERR(bn(c, x_one, w, b, rm, rv, out_one, 1, 0.1, 1e-5, none, nchw),
                KF_ERROR_INVALID_ARGUMENT);
  // Written running statistics must be writable: a read-only (DLPack import) running_var is an
  // error in training and a fine input in inference.
  Tensor rv_copy = tensor({6});
  kf_test::upload(rv_copy, kf_test::random_values(6, 4, 0.5, 2.0));
  DLManagedTensorVersioned* exported = nullptr;
  KF_ASSERT_OK(kf_tensor_to_dlpack(rv_copy, &exported));
  exported->flags |= DLPACK_FLAG_BITMASK_READ_ONLY;
  kf_tensor_t* imported = nullptr;
  const kf_result_t r = kf_tensor_from_dlpack(ctx(), exported, &imported);
  if (r != KF_SUCCESS) exported->deleter(exported);
  KF_ASSERT_OK(r);
  Tensor read_only(imported);
  KF_EXPECT_ERR(bn(c, x, w, b, rm, read_only, out, 1, 0.1, 1e-5, none, nchw),
                KF_ERROR_INVALID_ARGUMENT);
  // Overlaps: out on x partially, running stats on each other or on out, out on weight.
  Tensor big = tensor({4 * 6 * 5 + 1});
  Tensor x_view = make_view(big, KF_DTYPE_FLOAT32, {4, 6, 5}, {30, 5, 1}, 0);
  Tensor out_view = make_view(big, KF_DTYPE_FLOAT32, {4, 6, 5}, {30, 5, 1}, 1);
  KF_EXPECT_ERR(bn(c, x_view, w, b, rm, rv, out_view, 0, 0.1, 1e-5, none, nchw),
                KF_ERROR_INVALID_ARGUMENT);
  KF_EXPECT_ERR(bn(c, x, w, b, rm, rm, out, 1, 0.1, 1e-5, none, nchw), KF_ERROR_INVALID_ARGUMENT);
  KF_EXPECT_ERR(bn(c, x, w, b, w, rv, out, 1, 0.1, 1e-5, none, nchw), KF_ERROR_INVALID_ARGUMENT);
  Tensor stats12 = tensor({12});
  Tensor x_small = make_view(stats12, KF_DTYPE_FLOAT32, {2, 3}, {3, 1}, 6);
  Tensor out_small = tensor({2, 3}), w3 = tensor({3}),
         rm3 = make_view(stats12, KF_DTYPE_FLOAT32, {3}, {1}, 6);
  Tensor rv3 = tensor({3});
  KF_EXPECT_ERR(bn(c, x_small, w3, nullptr, rm3, rv3, out_small, 1, 0.1, 1e-5, none, nchw),
                KF_ERROR_INVALID_ARGUMENT);  // running_mean is x's memory
  Tensor o12 = tensor({12});
  Tensor out_on_stats = make_view(o12, KF_DTYPE_FLOAT32, {2, 3}, {3, 1}, 0);
  Tensor rm_on_out = make_view(o12, KF_DTYPE_FLOAT32, {3}, {1}, 3);
  KF_EXPECT_ERR(
      bn(c, out_small, w3, nullptr, rm_on_out, rv3, out_on_stats, 0, 0.1, 1e-5, none, nchw),
      KF_ERROR_INVALID_ARGUMENT);  // out overwrites a running statistic it reads
  KF_EXPECT_ERR(bn(c, x, w, b, rm, rv, w, 0, 0.1, 1e-5, none, nchw), KF_ERROR_SHAPE_MISMATCH);
  // An output that writes one element twice: out's channels folded over each other.
  Tensor span = tensor({4 * 6 * 5});
  Tensor out_folded = make_view(span, KF_DTYPE_FLOAT32, {4, 6, 5}, {30, 4, 1}, 0);
  KF_EXPECT_ERR(bn(c, x, w, b, rm, rv, out_folded, 1, 0.1, 1e-5, none, nchw),
                KF_ERROR_INVALID_ARGUMENT);
  KF_EXPECT_ERR(bn(c, x, w, b, rm, rv, out_folded, 0, 0.1, 1e-5, none, nchw),
                KF_ERROR_INVALID_ARGUMENT);
  // Nothing was written by any failing call.
  for (double v : kf_test::download(out)) EXPECT_TRUE(std::isnan(v)) << "a failing call wrote out";
  EXPECT_EQ(kf_test::download(rm), rm_before) << "a failing call updated running_mean";
  // Empty tensors are a no-op, in inference and (with no channels) in training.
  Tensor e = tensor({0, 6, 5}), eo = tensor({0, 6, 5});
  KF_ASSERT_OK(bn(c, e, w, b, rm, rv, eo, 0, 0.1, 1e-5, none, nchw));
  KF_EXPECT_ERR(bn(c, e, w, b, rm, rv, eo, 1, 0.1, 1e-5, none, nchw), KF_ERROR_INVALID_ARGUMENT);
  Tensor z = tensor({4, 0, 5}), zo = tensor({4, 0, 5}), zc = tensor({0});
  KF_ASSERT_OK(bn(c, z, nullptr, nullptr, zc, zc, zo, 0, 0.1, 1e-5, none, nchw));
  KF_ASSERT_OK(bn(c, z, nullptr, nullptr, nullptr, nullptr, zo, 1, 0.1, 1e-5, none, nchw));
  EXPECT_EQ(kf_test::download(rm), rm_before);
  // A read-only running statistic is a valid input in inference.
  KF_ASSERT_OK(bn(c, x, w, b, rm, read_only, out, 0, 0.1, 1e-5, none, nchw));
}

}  // namespace
