// kf_fused_layer_norm_activation and kf_fused_rms_norm_activation against float64 references
// written here, for every dtype: odd row counts and lengths (each CUDA regime: warp, block and
// streaming rows), strided views, in place, saved statistics, large means, every error path.
// Outputs are poisoned (NaN) first; data is random from a printed seed (KF_TEST_SEED=<n>).
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#if defined(KF_TEST_CUDA)
#include <cuda_runtime.h>
#endif

#include "tests/ops/row_test_util.hpp"

namespace {

using namespace row_test;

struct LayerNormRef {
  std::vector<double> out, mean, rstd;
};

// Rows are the last `row_length` elements of each packed block; weight/bias may be empty.
LayerNormRef layer_norm_ref(const std::vector<double>& x, int64_t row_length,
                            const std::vector<double>& weight, const std::vector<double>& bias,
                            double eps, kf_activation_t act) {
  LayerNormRef r;
  const int64_t rows = static_cast<int64_t>(x.size()) / row_length;
  r.out.resize(x.size());
  for (int64_t row = 0; row < rows; ++row) {
    const double* v = x.data() + row * row_length;
    double mean = 0, var = 0;
    for (int64_t c = 0; c < row_length; ++c) mean += v[c];
    mean /= static_cast<double>(row_length);
    for (int64_t c = 0; c < row_length; ++c) var += (v[c] - mean) * (v[c] - mean);
    var /= static_cast<double>(row_length);
    const double rstd = 1.0 / std::sqrt(var + eps);
    r.mean.push_back(mean);
    r.rstd.push_back(rstd);
    for (int64_t c = 0; c < row_length; ++c) {
      double y = (v[c] - mean) * rstd;
      if (!weight.empty()) y *= weight[c];
      if (!bias.empty()) y += bias[c];
      r.out[row * row_length + c] = reference_activation(act, y);
    }
  }
  return r;
}

std::vector<double> rms_norm_ref(const std::vector<double>& h, int64_t row_length,
                                 const std::vector<double>& weight, double eps,
                                 kf_activation_t act) {
  std::vector<double> out(h.size());
  const int64_t rows = static_cast<int64_t>(h.size()) / row_length;
  for (int64_t row = 0; row < rows; ++row) {
    const double* v = h.data() + row * row_length;
    double squares = 0;
    for (int64_t c = 0; c < row_length; ++c) squares += v[c] * v[c];
    const double rstd = 1.0 / std::sqrt(squares / static_cast<double>(row_length) + eps);
    for (int64_t c = 0; c < row_length; ++c)
      out[row * row_length + c] =
          reference_activation(act, v[c] * rstd * (weight.empty() ? 1.0 : weight[c]));
  }
  return out;
}

kf_dtype_t stats_dtype(kf_dtype_t dtype) {
  return dtype == KF_DTYPE_FLOAT64 ? KF_DTYPE_FLOAT64 : KF_DTYPE_FLOAT32;
}

// Outputs are rounded once from an f32 (f64) result: half an ulp of the output, 2^-11 for f16 and
// 2^-8 for bf16, plus a few f32 ulps of arithmetic, inside kf_test's tolerances. The statistics
// are f32 (f64), so they are checked at f32's tolerance whatever x's dtype.
double tolerance(kf_dtype_t dtype) { return kf_test::tolerance(dtype); }

class NormTest : public row_test::DeviceFixture<::testing::TestWithParam<kf_dtype_t>> {
 protected:
  kf_dtype_t dtype() const { return GetParam(); }
  uint64_t seed(uint64_t salt) const {
    return base_seed() * 1000003u + static_cast<uint64_t>(dtype()) * 10007u + salt;
  }
  std::string label(const std::string& what, uint64_t s) const {
    return std::string(dtype_name(dtype())) + " " + what + " (seed " + std::to_string(s) + ")";
  }

  // Layer norm with a weight and a bias in place (out is x), against float64.
  void check_layer_norm_in_place(int64_t rows, int64_t length, kf_activation_t act, uint64_t s) {
    SCOPED_TRACE(
        label("layer norm in place " + std::to_string(rows) + " x " + std::to_string(length), s));
    Tensor x = tensor({rows, length}, dtype()), w = tensor({length}, dtype());
    Tensor b = tensor({length}, dtype());
    const auto xv = fill(x, dtype(), static_cast<size_t>(rows * length), s);
    const auto wv = fill(w, dtype(), static_cast<size_t>(length), s + 1);
    const auto bv = fill(b, dtype(), static_cast<size_t>(length), s + 2);
    KF_ASSERT_OK(
        kf_fused_layer_norm_activation(ctx(), x, w, b, x, nullptr, nullptr, 1, 1e-5, act, nullptr));
    kf_test::expect_close(kf_test::download(x), layer_norm_ref(xv, length, wv, bv, 1e-5, act).out,
                          tolerance(dtype()), "layer norm in place");
  }

  // x is uniform in center +- spread; first, when given, replaces the first element of every
  // `first_every`-th row (rows 0, first_every, ...).
  void check_layer_norm(int64_t rows, int64_t length, bool affine, kf_activation_t act,
                        uint64_t salt, double center = 0.0, double spread = 3.0,
                        const double* first = nullptr, int64_t first_every = 1) {
    const uint64_t s = seed(salt);
    const std::string what = label("layer norm rows " + std::to_string(rows) + " x " +
                                       std::to_string(length) + (affine ? " affine" : ""),
                                   s);
    SCOPED_TRACE(what);
    const size_t n = static_cast<size_t>(rows * length);
    Tensor x = tensor({rows, length}, dtype());
    Tensor out = tensor({rows, length}, dtype());
    Tensor w = tensor({length}, dtype()), b = tensor({length}, dtype());
    Tensor mean = tensor({rows}, stats_dtype(dtype())), rstd = tensor({rows}, stats_dtype(dtype()));
    std::vector<double> xv = kf_test::round_to_dtype(
        kf_test::random_values(n, s, center - spread, center + spread), dtype());
    if (first)
      for (int64_t row = 0; row < rows; row += first_every)
        xv[static_cast<size_t>(row * length)] = kf_test::round_to_dtype({*first}, dtype())[0];
    kf_test::upload(x, xv);
    std::vector<double> wv, bv;
    if (affine) {
      wv = fill(w, dtype(), static_cast<size_t>(length), s + 1);
      bv = fill(b, dtype(), static_cast<size_t>(length), s + 2);
    }
    kf_test::poison(out);
    kf_test::poison(mean);
    kf_test::poison(rstd);
    KF_ASSERT_OK(kf_fused_layer_norm_activation(ctx(), x, affine ? w.t : nullptr,
                                                affine ? b.t : nullptr, out, mean, rstd, 1, 1e-5,
                                                act, nullptr));
    const auto want = layer_norm_ref(xv, length, wv, bv, 1e-5, act);
    // A mean of 1e4 over a spread of 3 amplifies input rounding 1e4-fold: f64 keeps 1e-9 there,
    // and proportionally less for a smaller spread.
    const double out_tol =
        center != 0.0 && dtype() == KF_DTYPE_FLOAT64 ? 1e-9 * (3.0 / spread) : tolerance(dtype());
    kf_test::expect_close(kf_test::download(out), want.out, out_tol, what);
    const double stat_tol = tolerance(stats_dtype(dtype()));
    if (center != 0.0 && stats_dtype(dtype()) == KF_DTYPE_FLOAT32) {
      // About 1e4 f32's tolerance (0.1) exceeds the spread of the row (0.017 at the smallest):
      // the mean is compared as a distance from the center, to a few roundings of a value there.
      // (f64's, 1e-8 there, is already far below the spread.)
      expect_close_about(kf_test::download(mean), want.mean,
                         std::vector<double>(want.mean.size(), center), stats_dtype(dtype()), 4.0,
                         stat_tol, what + " mean");
    } else {
      kf_test::expect_close(kf_test::download(mean), want.mean, stat_tol, what + " mean");
    }
    // rstd of a length-1 row is 1/sqrt(eps): relative comparison.
    std::vector<double> got_rstd = kf_test::download(rstd), want_rstd = want.rstd;
    for (size_t i = 0; i < got_rstd.size(); ++i) {
      got_rstd[i] /= want_rstd[i];
      want_rstd[i] = 1.0;
    }
    kf_test::expect_close(got_rstd, want_rstd, stat_tol, what + " rstd");
  }

  void check_rms_norm(int64_t rows, int64_t length, bool residual, bool weight, kf_activation_t act,
                      uint64_t salt) {
    const uint64_t s = seed(salt);
    const std::string what = label("rms norm rows " + std::to_string(rows) + " x " +
                                       std::to_string(length) + (residual ? " residual" : ""),
                                   s);
    SCOPED_TRACE(what);
    const size_t n = static_cast<size_t>(rows * length);
    Tensor x = tensor({rows, length}, dtype()), r = tensor({rows, length}, dtype());
    Tensor out = tensor({rows, length}, dtype()), r_out = tensor({rows, length}, dtype());
    Tensor w = tensor({length}, dtype());
    const auto xv = fill(x, dtype(), n, s);
    std::vector<double> rv, wv;
    if (residual) rv = fill(r, dtype(), n, s + 1);
    if (weight) wv = fill(w, dtype(), static_cast<size_t>(length), s + 2);
    kf_test::poison(out);
    kf_test::poison(r_out);
    KF_ASSERT_OK(kf_fused_rms_norm_activation(ctx(), x, residual ? r.t : nullptr,
                                              weight ? w.t : nullptr, out,
                                              residual ? r_out.t : nullptr, 1e-6, act, nullptr));
    std::vector<double> h = xv;
    if (residual) {
      for (size_t i = 0; i < n; ++i) h[i] += rv[i];
      h = kf_test::round_to_dtype(h, dtype());  // the library normalises h as stored
    }
    kf_test::expect_close(kf_test::download(out), rms_norm_ref(h, length, wv, 1e-6, act),
                          tolerance(dtype()), what);
    if (residual)
      kf_test::expect_close(kf_test::download(r_out), h, tolerance(dtype()), what + " residual");
  }

  // The RMS norm with a residual and a weight in its other forms: in place (out is x and
  // residual_out is the residual, as in a transformer block), or into a fresh out without
  // residual_out (the norm of h all the same).
  void check_rms_norm_residual_form(int64_t rows, int64_t length, bool in_place,
                                    kf_activation_t act, uint64_t salt) {
    const uint64_t s = seed(salt);
    const std::string what = label(std::string("rms norm with a residual ") +
                                       (in_place ? "in place" : "without residual_out") + " rows " +
                                       std::to_string(rows) + " x " + std::to_string(length),
                                   s);
    SCOPED_TRACE(what);
    const size_t n = static_cast<size_t>(rows * length);
    Tensor x = tensor({rows, length}, dtype()), r = tensor({rows, length}, dtype());
    Tensor out = tensor({rows, length}, dtype()), w = tensor({length}, dtype());
    const auto xv = fill(x, dtype(), n, s);
    const auto rv = fill(r, dtype(), n, s + 1);
    const auto wv = fill(w, dtype(), static_cast<size_t>(length), s + 2);
    kf_test::poison(out);
    KF_ASSERT_OK(kf_fused_rms_norm_activation(ctx(), x, r, w, in_place ? x.t : out.t,
                                              in_place ? r.t : nullptr, 1e-6, act, nullptr));
    std::vector<double> h = xv;
    for (size_t i = 0; i < n; ++i) h[i] += rv[i];
    h = kf_test::round_to_dtype(h, dtype());
    if (in_place)
      kf_test::expect_close(kf_test::download(r), h, tolerance(dtype()), what + " residual");
    kf_test::expect_close(kf_test::download(in_place ? x : out),
                          rms_norm_ref(h, length, wv, 1e-6, act), tolerance(dtype()), what);
  }
};

const int64_t kRows[] = {1, 3, 7};
const int64_t kLengths[] = {1, 7, 33, 1023, 4097, 40000};

TEST_P(NormTest, LayerNormOddSizes) {
  uint64_t salt = 0;
  for (int64_t rows : kRows)
    for (int64_t length : kLengths)
      check_layer_norm(rows, length, (rows + length) % 2 == 0, KF_ACTIVATION_NONE, salt += 3);
  check_layer_norm(5, 256, true, KF_ACTIVATION_GELU, salt += 3);
  check_layer_norm(9, 96, true, KF_ACTIVATION_RELU, salt += 3);
  check_layer_norm(4, 2048, false, KF_ACTIVATION_SILU, salt += 3);
  check_layer_norm(300, 64, true, KF_ACTIVATION_TANH, salt += 3);  // many rows per launch
}

TEST_P(NormTest, RmsNormOddSizes) {
  uint64_t salt = 0;
  for (int64_t rows : kRows)
    for (int64_t length : kLengths)
      check_rms_norm(rows, length, length % 2 == 1, rows != 3, KF_ACTIVATION_NONE, salt += 3);
  check_rms_norm(5, 512, true, true, KF_ACTIVATION_SILU, salt += 3);
  check_rms_norm(300, 40, true, true, KF_ACTIVATION_GELU_TANH, salt += 3);
  check_rms_norm(2, 20000, false, true, KF_ACTIVATION_SIGMOID, salt += 3);
}

// Rows of whole 16-byte vectors whose length leaves the register-cached kernel's last chunks
// past the row's end (those load the row's last vector again and are left out of the sums),
// with more rows than a block takes (rows past the last in the final block), every affine form
// and the saved statistics.
TEST_P(NormTest, VectorRowsWithChunksPastTheEnd) {
  uint64_t salt = 500;
  for (int64_t length : {24, 40, 200, 520, 768, 776, 1000, 2056, 3000, 12000}) {
    check_layer_norm(37, length, true, KF_ACTIVATION_RELU, salt += 3);
    check_layer_norm(5, length, false, KF_ACTIVATION_NONE, salt += 3);
    check_rms_norm(37, length, false, true, KF_ACTIVATION_NONE, salt += 3);
    check_rms_norm(5, length, true, false, KF_ACTIVATION_SILU, salt += 3);
  }
}

// Mean 1e4, std about 1: a naive E[x^2] - E[x]^2 in f32 loses every digit here.
TEST_P(NormTest, LargeMean) {
  if (dtype() == KF_DTYPE_FLOAT16 || dtype() == KF_DTYPE_BFLOAT16)
    GTEST_SKIP() << "1e4 +- 3 is not representable beyond a few values in half types";
  for (int64_t length : {64, 1000, 4097, 40000, 262144})
    check_layer_norm(3, length, true, KF_ACTIVATION_NONE, 77 + length, 1e4);
}

// Mean 1e4, std 1e-2, in rows up to the CUDA register-cached kernel's longest (16K elements),
// then rows whose first element lies far out (about 25 and 75 standard deviations at 16K
// elements): statistics taken relative to a sample of the row, rather than to its mean, would
// lose the variance to cancellation there.
TEST_P(NormTest, LargeMeanSmallSpread) {
  if (dtype() == KF_DTYPE_FLOAT16 || dtype() == KF_DTYPE_BFLOAT16)
    GTEST_SKIP() << "1e4 +- 1e-2 is one value in half types";
  const double spread = 1e-2 * std::sqrt(3.0);  // uniform: std 1e-2
  uint64_t salt = 1500;
  for (int64_t length : {64, 1000, 1024, 4096, 5000, 16000, 16384})
    check_layer_norm(2, length, length % 2 == 0, KF_ACTIVATION_NONE, salt += 3, 1e4, spread);
  for (double offset : {0.3, 1.0}) {
    const double first = 1e4 + offset;
    for (int64_t length : {1000, 5000, 16384})
      check_layer_norm(2, length, false, KF_ACTIVATION_NONE, salt += 3, 1e4, spread, &first);
  }
  // Rows that CUDA splits over a cluster of 3 and of 16 blocks (f32), each block's statistics
  // taken about its own mean and combined about the first block's.
  for (int64_t length : {40000, 262144})
    check_layer_norm(2, length, true, KF_ACTIVATION_NONE, salt += 3, 1e4, spread);
}

// Rows whose first element lies far from the rest (250 over values in +-3: about 144 standard
// deviations; 7: about 4), in every dtype, over each CUDA regime's lengths (a few lanes, a warp
// and a block a row, the staged rows, and the streaming kernels: rows of 20001 and 20002 and the
// f64 rows past 8192). The streaming kernels take their sums about a row's first element and sum
// the row again about its mean where that element lies more than four deviations out; with only
// every other row so led, a launch takes both paths.
TEST_P(NormTest, FirstElementFarFromTheRest) {
  uint64_t salt = 1900;
  for (const double first : {250.0, 7.0})
    for (int64_t length : {24, 64, 768, 1024, 4096, 5000, 12288, 16384, 20001, 20002, 40000})
      for (int64_t every : {1, 2})
        check_layer_norm(every == 1 ? 5 : 6, length, every == 1, KF_ACTIVATION_NONE, salt += 3, 0.0,
                         3.0, &first, every);
}

// Row lengths that leave the last threads of each register-cached tile policy (1..32 lanes, a
// warp of 16 or 32 elements a thread, a block of 256 or 512 threads) with a partial vector set
// or nothing, and lengths where every thread holds equally many; odd lengths take scalar loads,
// even ones 16-byte vectors where they divide.
TEST_P(NormTest, LayerNormPartialLanes) {
  uint64_t salt = 1700;
  for (int64_t length :
       {1,    3,    7,    8,    9,    24,   63,   65,   96,   127,  256,  520,   768,   1000,
        1023, 1025, 1032, 1536, 2056, 3000, 4096, 4097, 5120, 6000, 8200, 12288, 12290, 16384})
    check_layer_norm(3, length, length % 3 == 0, KF_ACTIVATION_NONE, salt += 3);
  check_layer_norm(37, 24, true, KF_ACTIVATION_NONE, salt += 3);  // rows past the last group
}

TEST_P(NormTest, MultiDimNormalizedAndStridedViews) {
  const uint64_t s = seed(500);
  SCOPED_TRACE(label("strided", s));
  // x is a [3,5,33] view of a [5,3,35] base (leading dims transposed, rows sliced: offset 1);
  // normalized over the last 2 dims, with a [5,33] weight that is itself a strided view.
  Tensor x_base = tensor({5, 3, 35}, dtype());
  Tensor x = make_view(x_base, dtype(), {3, 5, 33}, {35, 105, 1}, 1);
  Tensor w_base = tensor({5, 66}, dtype());
  Tensor w = make_view(w_base, dtype(), {5, 33}, {66, 2}, 0);
  Tensor b = tensor({5, 33}, dtype());
  Tensor out_base = tensor({3, 5, 40}, dtype());
  Tensor out = make_view(out_base, dtype(), {3, 5, 33}, {200, 40, 1}, 3);
  Tensor mean_base = tensor({6}, stats_dtype(dtype()));
  Tensor mean = make_view(mean_base, stats_dtype(dtype()), {3}, {2}, 1);
  const auto xv =
      gather(fill(x_base, dtype(), 5 * 3 * 35, s), view_offsets({3, 5, 33}, {35, 105, 1}, 1));
  const auto wv = gather(fill(w_base, dtype(), 5 * 66, s + 1), view_offsets({5, 33}, {66, 2}, 0));
  const auto bv = fill(b, dtype(), 5 * 33, s + 2);
  kf_test::poison(out_base);
  kf_test::poison(mean_base);
  KF_ASSERT_OK(kf_fused_layer_norm_activation(ctx(), x, w, b, out, mean, nullptr, 2, 1e-5,
                                              KF_ACTIVATION_GELU, nullptr));
  const auto want = layer_norm_ref(xv, 5 * 33, wv, bv, 1e-5, KF_ACTIVATION_GELU);
  kf_test::expect_close(kf_test::download(out), want.out, tolerance(dtype()), "layer norm 2-D");
  kf_test::expect_close(kf_test::download(mean), want.mean, tolerance(stats_dtype(dtype())),
                        "layer norm 2-D mean");
  const auto whole = kf_test::download(out_base);
  std::vector<bool> inside(whole.size(), false);
  for (int64_t o : view_offsets({3, 5, 33}, {200, 40, 1}, 3)) inside[static_cast<size_t>(o)] = true;
  for (size_t i = 0; i < whole.size(); ++i)
    if (!inside[i]) {
      EXPECT_TRUE(std::isnan(whole[i])) << "element " << i << " outside out written";
    }
  EXPECT_TRUE(std::isnan(kf_test::download(mean_base)[0]));

  // RMS norm with a column-strided x (last-dim stride 2) and transposed leading dims for out.
  Tensor rx_base = tensor({4, 2 * 37}, dtype());
  Tensor rx = make_view(rx_base, dtype(), {4, 37}, {74, 2}, 1);
  Tensor res = tensor({4, 37}, dtype());
  Tensor rw = tensor({37}, dtype());
  Tensor rout = tensor({4, 37}, dtype());
  const auto rxv = gather(fill(rx_base, dtype(), 4 * 74, s + 3), view_offsets({4, 37}, {74, 2}, 1));
  const auto resv = fill(res, dtype(), 4 * 37, s + 4);
  const auto rwv = fill(rw, dtype(), 37, s + 5);
  kf_test::poison(rout);
  KF_ASSERT_OK(kf_fused_rms_norm_activation(ctx(), rx, res, rw, rout, nullptr, 1e-6,
                                            KF_ACTIVATION_NONE, nullptr));
  std::vector<double> h = rxv;
  for (size_t i = 0; i < h.size(); ++i) h[i] += resv[i];
  kf_test::expect_close(kf_test::download(rout), rms_norm_ref(h, 37, rwv, 1e-6, KF_ACTIVATION_NONE),
                        tolerance(dtype()), "rms norm strided");
}

// Leading dims that cannot merge (x is a [3,5,L] view of a [5,3,L'] base: transposed), with
// dense rows: the register-cached kernels then find each operand's row through the multi-dim
// row offset (core/ops/rows/rows.hpp). Every operand has its own leading layout: out and the
// residual transposed the other way, residual_out padded, the statistics a transposed [5,3].
// Lengths: 64 and 1024 take the 16-byte vector path (aligned pitch), 33 the scalar one; 8192
// is staged on CUDA for f32 (and for 16-bit rows with the residual), 40000 takes a cluster of
// blocks per row for f32, f16 and bf16.
TEST_P(NormTest, LeadingDimsThatDoNotMerge) {
  for (const int64_t length :
       {int64_t{64}, int64_t{1024}, int64_t{33}, int64_t{8192}, int64_t{40000}}) {
    const uint64_t s = seed(520 + static_cast<uint64_t>(length));
    SCOPED_TRACE(label("unmerged leading dims, rows of " + std::to_string(length), s));
    const int64_t pitch = length % 8 == 0 ? length + 8 : length + 3;
    const Shape shape = {3, 5, length};
    const Shape x_strides = {pitch, 3 * pitch, 1};    // base [5,3,pitch]
    const Shape r_strides = {pitch, 3 * pitch, 1};    // the residual alike, another base
    const Shape o_strides = {length, 3 * length, 1};  // out: dense rows, transposed
    const Shape ro_strides = {5 * pitch, pitch, 1};   // residual_out: padded rows, in order
    const Shape stat_strides = {1, 3};                // mean / rstd: a transposed [5,3]
    const int64_t x_offset = length % 8 == 0 ? 0 : 1;
    Tensor x_base = tensor({5, 3, pitch}, dtype()), r_base = tensor({5, 3, pitch}, dtype());
    Tensor out_base = tensor({5, 3, length}, dtype()), ro_base = tensor({3, 5, pitch}, dtype());
    Tensor mean_base = tensor({5, 3}, stats_dtype(dtype()));
    Tensor rstd_base = tensor({5, 3}, stats_dtype(dtype()));
    Tensor x = make_view(x_base, dtype(), shape, x_strides, x_offset);
    Tensor r = make_view(r_base, dtype(), shape, r_strides, 0);
    Tensor out = make_view(out_base, dtype(), shape, o_strides, 0);
    Tensor r_out = make_view(ro_base, dtype(), shape, ro_strides, 0);
    Tensor mean = make_view(mean_base, stats_dtype(dtype()), {3, 5}, stat_strides, 0);
    Tensor rstd = make_view(rstd_base, stats_dtype(dtype()), {3, 5}, stat_strides, 0);
    Tensor w = tensor({length}, dtype()), b = tensor({length}, dtype());
    const size_t base_n = static_cast<size_t>(5 * 3 * pitch);
    const auto xv =
        gather(fill(x_base, dtype(), base_n, s), view_offsets(shape, x_strides, x_offset));
    const auto rv = gather(fill(r_base, dtype(), base_n, s + 1), view_offsets(shape, r_strides, 0));
    const auto wv = fill(w, dtype(), static_cast<size_t>(length), s + 2);
    const auto bv = fill(b, dtype(), static_cast<size_t>(length), s + 3);

    kf_test::poison(out_base);
    kf_test::poison(mean_base);
    kf_test::poison(rstd_base);
    KF_ASSERT_OK(kf_fused_layer_norm_activation(ctx(), x, w, b, out, mean, rstd, 1, 1e-5,
                                                KF_ACTIVATION_RELU, nullptr));
    const auto ln = layer_norm_ref(xv, length, wv, bv, 1e-5, KF_ACTIVATION_RELU);
    kf_test::expect_close(gather(kf_test::download(out_base), view_offsets(shape, o_strides, 0)),
                          ln.out, tolerance(dtype()), "layer norm out");
    const double stat_tol = tolerance(stats_dtype(dtype()));
    kf_test::expect_close(
        gather(kf_test::download(mean_base), view_offsets({3, 5}, stat_strides, 0)), ln.mean,
        stat_tol, "layer norm mean");
    kf_test::expect_close(
        gather(kf_test::download(rstd_base), view_offsets({3, 5}, stat_strides, 0)), ln.rstd,
        stat_tol, "layer norm rstd");

    kf_test::poison(out_base);
    kf_test::poison(ro_base);
    KF_ASSERT_OK(kf_fused_rms_norm_activation(ctx(), x, r, w, out, r_out, 1e-6, KF_ACTIVATION_NONE,
                                              nullptr));
    std::vector<double> h = xv;
    for (size_t i = 0; i < h.size(); ++i) h[i] += rv[i];
    h = kf_test::round_to_dtype(h, dtype());
    kf_test::expect_close(gather(kf_test::download(out_base), view_offsets(shape, o_strides, 0)),
                          rms_norm_ref(h, length, wv, 1e-6, KF_ACTIVATION_NONE), tolerance(dtype()),
                          "rms norm out");
    kf_test::expect_close(gather(kf_test::download(ro_base), view_offsets(shape, ro_strides, 0)), h,
                          tolerance(dtype()), "rms norm residual_out");
  }
}

TEST_P(NormTest, InPlace) {
  const uint64_t s = seed(700);
  for (int64_t length : {33, 1023, 4097, 40000, 30523}) {
    SCOPED_TRACE(label("in place " + std::to_string(length), s + length));
    Tensor x = tensor({3, length}, dtype());
    const auto xv = fill(x, dtype(), static_cast<size_t>(3 * length), s + length);
    KF_ASSERT_OK(kf_fused_layer_norm_activation(ctx(), x, nullptr, nullptr, x, nullptr, nullptr, 1,
                                                1e-5, KF_ACTIVATION_NONE, nullptr));
    kf_test::expect_close(kf_test::download(x),
                          layer_norm_ref(xv, length, {}, {}, 1e-5, KF_ACTIVATION_NONE).out,
                          tolerance(dtype()), "layer norm in place");
    // RMS: out is x and residual_out is residual, the transformer-block form.
    Tensor a = tensor({3, length}, dtype()), r = tensor({3, length}, dtype());
    const auto av = fill(a, dtype(), static_cast<size_t>(3 * length), s + length + 1);
    const auto rv = fill(r, dtype(), static_cast<size_t>(3 * length), s + length + 2);
    KF_ASSERT_OK(kf_fused_rms_norm_activation(ctx(), a, r, nullptr, a, r, 1e-6, KF_ACTIVATION_NONE,
                                              nullptr));
    std::vector<double> h = av;
    for (size_t i = 0; i < h.size(); ++i) h[i] += rv[i];
    h = kf_test::round_to_dtype(h, dtype());
    kf_test::expect_close(kf_test::download(r), h, tolerance(dtype()), "rms residual in place");
    kf_test::expect_close(kf_test::download(a),
                          rms_norm_ref(h, length, {}, 1e-6, KF_ACTIVATION_NONE), tolerance(dtype()),
                          "rms out in place");
  }
}

// Row lengths on both sides of the CUDA backend's regime boundaries: staged rows (lanes per row
// up to 6 KiB, a block per row up to 64 KiB, a cluster of 2..16 blocks per row beyond, with and
// without a residual), the register-cached paths for lengths that do not fill 16-byte vectors
// (warp per row up to 1024, block per row up to 16K, 8K for f64; blocks of 96, 128, 160, 192, 256
// or 512 threads, each boundary on both sides), streaming beyond; vector widths (16 bytes = 2..8
// elements) and many rows per launch.
TEST_P(NormTest, RegimeBoundaries) {
  uint64_t salt = 900;
  for (int64_t length :
       {2,    8,    31,   32,    33,    64,    1023,  1024,  1025,  1536,  1537,
        1544, 2048, 2049, 2100,  2560,  2561,  3072,  3073,  4096,  4104,  5120,
        5128, 8192, 8193, 16383, 16384, 16385, 16388, 32768, 32776, 65544, 262144}) {
    check_layer_norm(3, length, length % 2 == 0, KF_ACTIVATION_NONE, salt += 3);
    check_rms_norm(3, length, true, length % 3 != 0, KF_ACTIVATION_NONE, salt += 3);
  }
  check_layer_norm(1000, 64, true, KF_ACTIVATION_GELU, salt += 3);
  check_rms_norm(777, 128, true, true, KF_ACTIVATION_SILU, salt += 3);
  // Rows of 4097..5120 (on CUDA, 320-thread blocks where the wide form applies) over more rows
  // than the resident grid holds blocks, so that each block walks several.
  check_layer_norm(900, 5000, true, KF_ACTIVATION_RELU, salt += 3);
  check_layer_norm(900, 4104, false, KF_ACTIVATION_NONE, salt += 3);
  check_rms_norm(900, 5120, false, true, KF_ACTIVATION_SILU, salt += 3);
  check_rms_norm(900, 5000, true, true, KF_ACTIVATION_NONE, salt += 3);
  // And past them, without a residual (rows of 5121..6144: on an H200, the RMS norm takes
  // 384-thread blocks at 16 elements, the layer norm 160 at 40 with the next row staged; rows of
  // 4097..5120 there: the layer norm 128 at 40).
  check_rms_norm(900, 5128, false, true, KF_ACTIVATION_NONE, salt += 3);
  check_rms_norm(700, 6144, false, false, KF_ACTIVATION_RELU, salt += 3);
  check_layer_norm(500, 5632, true, KF_ACTIVATION_RELU, salt += 3);
  // Rows of 8193..12288 of 16-byte vectors without a residual, over more rows than the resident
  // grid holds blocks (on an H200, the layer norm's rows of 8200 and 10248 take 224 threads at 40
  // and 48 elements, its bf16 rows of 10000 and its rows of 11000 256, two blocks an SM; the RMS
  // norm's rows of 10496 224 threads at 48; on an H100, the f32 rows of 8193..10240 and the RMS
  // norm's 16-bit ones take 320 threads at 32, in place).
  check_layer_norm(300, 8200, true, KF_ACTIVATION_RELU, salt += 3);
  check_rms_norm(300, 9000, false, true, KF_ACTIVATION_GELU, salt += 3);
  check_rms_norm(300, 8200, false, true, KF_ACTIVATION_NONE, salt += 3);
  check_layer_norm(300, 10000, false, KF_ACTIVATION_NONE, salt += 3);
  check_rms_norm(300, 10240, false, false, KF_ACTIVATION_SILU, salt += 3);
  check_layer_norm(300, 10248, true, KF_ACTIVATION_GELU, salt += 3);
  check_rms_norm(300, 12288, false, true, KF_ACTIVATION_RELU, salt += 3);
  check_layer_norm(300, 11000, true, KF_ACTIVATION_NONE, salt += 3);
  check_rms_norm(300, 10496, false, true, KF_ACTIVATION_RELU, salt += 3);
  // With a residual, rows of 4097..6144.
  check_rms_norm(300, 4104, true, true, KF_ACTIVATION_NONE, salt += 3);
  check_rms_norm(300, 5632, true, false, KF_ACTIVATION_RELU, salt += 3);
  check_rms_norm(300, 6144, true, true, KF_ACTIVATION_SILU, salt += 3);
}

// Rows that fill 8- or 4-byte vectors but not 16-byte ones (16-bit lengths of 4k + 2 and 8k + 4:
// on CUDA, 16-bit rows loaded four or two elements at a time; f32 rows of 4k + 2 element by
// element), across the register-cached policies (lanes, a warp, a block of 128..512 threads at
// 16, 24 or 32 elements a thread) and up to the longest cached row, with and without a residual
// and an affine; then longer ones (30522, 50257: on CUDA the streaming kernel's dense form).
TEST_P(NormTest, RowsOfNarrowVectors) {
  uint64_t salt = 2300;
  for (int64_t length : {4,    6,    12,   60,   100,  250,   516,   700,   1020,  1100,  2100,
                         3004, 4100, 5002, 6148, 8196, 10236, 12500, 16380, 16382, 30522, 50257}) {
    check_layer_norm(3, length, length % 3 != 0, KF_ACTIVATION_NONE, salt += 3);
    check_rms_norm(3, length, length % 4 == 0, true, KF_ACTIVATION_NONE, salt += 3);
  }
  check_rms_norm(300, 100, true, true, KF_ACTIVATION_SILU, salt += 3);
  check_layer_norm(300, 1100, true, KF_ACTIVATION_GELU, salt += 3);
  // Long rows with every operand (on CUDA, the streaming kernel's vector form; the weight and the
  // bias in the row's phase on some rows only).
  check_rms_norm(5, 30522, true, true, KF_ACTIVATION_SILU, salt += 3);
  check_layer_norm(5, 50257, true, KF_ACTIVATION_GELU, salt += 3);
  // Long rows whose x and out start at different distances from a 16-byte boundary (x at offset
  // 1 of a pitch of length + 1): on CUDA, the dense streaming kernel.
  {
    const int64_t rows = 4, length = 20001, pitch = length + 1;
    const uint64_t s = seed(salt += 3);
    SCOPED_TRACE(label("long rows, x and out out of phase", s));
    Tensor x_base = tensor({rows, pitch}, dtype()), out = tensor({rows, length}, dtype());
    Tensor x = make_view(x_base, dtype(), {rows, length}, {pitch, 1}, 1);
    Tensor w = tensor({length}, dtype());
    const auto xv = gather(fill(x_base, dtype(), static_cast<size_t>(rows * pitch), s),
                           view_offsets({rows, length}, {pitch, 1}, 1));
    const auto wv = fill(w, dtype(), static_cast<size_t>(length), s + 1);
    kf_test::poison(out);
    KF_ASSERT_OK(kf_fused_rms_norm_activation(ctx(), x, nullptr, w, out, nullptr, 1e-6,
                                              KF_ACTIVATION_NONE, nullptr));
    kf_test::expect_close(kf_test::download(out),
                          rms_norm_ref(xv, length, wv, 1e-6, KF_ACTIVATION_NONE),
                          tolerance(dtype()), "rms norm out of phase");
  }
}

// Rows longer than 16384 whose row operands start equally far from a 16-byte boundary, row by
// row, but do not all start on one (on CUDA, staged from each row's first 16-byte boundary, the
// head columns before it and the partial vector at the row's end taken apart, the weight and
// bias read at the row's columns): dense vocabulary rows, more of them than a GPU holds clusters
// at once, with and without a residual and an affine, and at a mean of 1e4 (the clustered layer
// norm's blocks merge their sums about their own means, the first block's with the head
// columns); then views at offsets 1 and 3 of a wider pitch, with a residual and its output and
// the layer norm's statistics, where nothing between the rows may be written.
TEST_P(NormTest, LongRowsOffTheirVectors) {
  const bool cuda = kf_test::device_under_test() == KF_DEVICE_CUDA;
  uint64_t salt = 2700;
  for (int64_t length : {16390, 30522, 50257}) {
    check_layer_norm(5, length, true, KF_ACTIVATION_GELU, salt += 3);
    check_layer_norm(3, length, false, KF_ACTIVATION_NONE, salt += 3);
    check_rms_norm(5, length, true, true, KF_ACTIVATION_SILU, salt += 3);
    check_rms_norm(5, length, false, true, KF_ACTIVATION_NONE, salt += 3);
    check_rms_norm(3, length, false, false, KF_ACTIVATION_RELU, salt += 3);
  }
  // More rows than the GPU holds blocks (16-bit rows of 30522: one rolling buffer a block, three
  // blocks an SM) or clusters at once.
  check_layer_norm(cuda ? 240 : 3, 50257, true, KF_ACTIVATION_GELU, salt += 3);
  check_rms_norm(cuda ? 240 : 3, 30522, true, true, KF_ACTIVATION_SILU, salt += 3);
  // 16-bit rows of 32..56 KiB in one rolling buffer a block: more rows than blocks fit at once
  // (three an SM), so that each block restages a next row while it finishes one.
  check_layer_norm(cuda ? 420 : 3, 20001, true, KF_ACTIVATION_GELU, salt += 3);
  check_layer_norm(cuda ? 420 : 3, 27001, false, KF_ACTIVATION_NONE, salt += 3, 1e4, 1.0);
  check_layer_norm(8, 50257, false, KF_ACTIVATION_NONE, salt += 3, 1e4, 1.0);
  check_layer_norm(8, 30522, true, KF_ACTIVATION_NONE, salt += 3, 1e4, 1.0);
  for (int64_t offset : {1, 3}) {
    for (int64_t length : {20001, 50257}) {
      const int64_t rows = cuda ? 40 : 4, pitch = length + 5;
      const uint64_t s = seed(salt += 3);
      const std::string what =
          label("rows of " + std::to_string(length) + " at offset " + std::to_string(offset), s);
      SCOPED_TRACE(what);
      const Shape shape{rows, length}, strides{pitch, 1};
      Tensor x_base = tensor({rows, pitch}, dtype()), r_base = tensor({rows, pitch}, dtype());
      Tensor out_base = tensor({rows, pitch}, dtype()), h_base = tensor({rows, pitch}, dtype());
      Tensor x = make_view(x_base, dtype(), shape, strides, offset);
      Tensor r = make_view(r_base, dtype(), shape, strides, offset);
      Tensor out = make_view(out_base, dtype(), shape, strides, offset);
      Tensor h_out = make_view(h_base, dtype(), shape, strides, offset);
      Tensor w = tensor({length}, dtype()), b = tensor({length}, dtype());
      Tensor mean = tensor({rows}, stats_dtype(dtype())),
             rstd = tensor({rows}, stats_dtype(dtype()));
      const auto offsets = view_offsets(shape, strides, offset);
      const size_t span = static_cast<size_t>(rows * pitch);
      const auto xv = gather(fill(x_base, dtype(), span, s), offsets);
      const auto rv = gather(fill(r_base, dtype(), span, s + 1), offsets);
      const auto wv = fill(w, dtype(), static_cast<size_t>(length), s + 2);
      const auto bv = fill(b, dtype(), static_cast<size_t>(length), s + 3);
      std::vector<bool> inside(span, false);
      for (int64_t o : offsets) inside[static_cast<size_t>(o)] = true;
      const auto expect_untouched = [&](const std::vector<double>& whole, const char* name) {
        size_t written = 0;
        for (size_t i = 0; i < whole.size(); ++i) written += !inside[i] && !std::isnan(whole[i]);
        EXPECT_EQ(written, 0u) << what << ": elements outside " << name << " written";
      };

      kf_test::poison(out_base);
      kf_test::poison(mean);
      kf_test::poison(rstd);
      KF_ASSERT_OK(kf_fused_layer_norm_activation(ctx(), x, w, b, out, mean, rstd, 1, 1e-5,
                                                  KF_ACTIVATION_NONE, nullptr));
      const auto want = layer_norm_ref(xv, length, wv, bv, 1e-5, KF_ACTIVATION_NONE);
      const auto whole = kf_test::download(out_base);
      kf_test::expect_close(gather(whole, offsets), want.out, tolerance(dtype()),
                            what + " layer norm");
      expect_untouched(whole, "the layer norm's out");
      const double stat_tol = tolerance(stats_dtype(dtype()));
      kf_test::expect_close(kf_test::download(mean), want.mean, stat_tol, what + " mean");
      kf_test::expect_close(kf_test::download(rstd), want.rstd, stat_tol, what + " rstd");

      kf_test::poison(out_base);
      kf_test::poison(h_base);
      KF_ASSERT_OK(kf_fused_rms_norm_activation(ctx(), x, r, w, out, h_out, 1e-6,
                                                KF_ACTIVATION_NONE, nullptr));
      std::vector<double> h = xv;
      for (size_t i = 0; i < h.size(); ++i) h[i] += rv[i];
      h = kf_test::round_to_dtype(h, dtype());
      const auto whole_out = kf_test::download(out_base), whole_h = kf_test::download(h_base);
      kf_test::expect_close(gather(whole_out, offsets),
                            rms_norm_ref(h, length, wv, 1e-6, KF_ACTIVATION_NONE),
                            tolerance(dtype()), what + " rms norm");
      kf_test::expect_close(gather(whole_h, offsets), h, tolerance(dtype()),
                            what + " rms norm residual out");
      expect_untouched(whole_out, "the RMS norm's out");
      expect_untouched(whole_h, "residual_out");
    }
  }
}

// Shifted staged rows (launch_shifted on CUDA) with a weight, a bias or both that start one or
// three elements into larger tensors, so off 16-byte boundaries, with both on them, and with both
// four elements in, ending where their tensors end: the kernel reads them an element at a time,
// at every phase of the rows (rows of 20001 and 50257 start at every 16-byte phase in turn).
TEST_P(NormTest, LongRowsOffTheirVectorsAffineOffItsVectors) {
  const bool cuda = kf_test::device_under_test() == KF_DEVICE_CUDA;
  uint64_t salt = 2900;
  for (int64_t length : {20001, 50257}) {
    using Offsets = std::pair<int64_t, int64_t>;  // the weight's and the bias's first elements
    for (const auto& [w_offset, b_offset] :
         {Offsets{1, 0}, Offsets{0, 3}, Offsets{3, 1}, Offsets{0, 0}, Offsets{4, 4}}) {
      const int64_t rows = cuda ? 40 : 3;
      const uint64_t s = seed(salt += 3);
      const std::string what =
          label("rows of " + std::to_string(length) + ", weight at " + std::to_string(w_offset) +
                    ", bias at " + std::to_string(b_offset),
                s);
      SCOPED_TRACE(what);
      const size_t n = static_cast<size_t>(rows * length), span = static_cast<size_t>(length + 4);
      Tensor x = tensor({rows, length}, dtype()), out = tensor({rows, length}, dtype());
      Tensor w_base = tensor({length + 4}, dtype()), b_base = tensor({length + 4}, dtype());
      Tensor w = make_view(w_base, dtype(), {length}, {1}, w_offset);
      Tensor b = make_view(b_base, dtype(), {length}, {1}, b_offset);
      const auto xv = fill(x, dtype(), n, s);
      const auto wv =
          gather(fill(w_base, dtype(), span, s + 1), view_offsets({length}, {1}, w_offset));
      const auto bv =
          gather(fill(b_base, dtype(), span, s + 2), view_offsets({length}, {1}, b_offset));

      kf_test::poison(out);
      KF_ASSERT_OK(kf_fused_layer_norm_activation(ctx(), x, w, b, out, nullptr, nullptr, 1, 1e-5,
                                                  KF_ACTIVATION_GELU, nullptr));
      kf_test::expect_close(kf_test::download(out),
                            layer_norm_ref(xv, length, wv, bv, 1e-5, KF_ACTIVATION_GELU).out,
                            tolerance(dtype()), what + " layer norm");

      kf_test::poison(out);
      KF_ASSERT_OK(kf_fused_rms_norm_activation(ctx(), x, nullptr, w, out, nullptr, 1e-6,
                                                KF_ACTIVATION_SILU, nullptr));
      kf_test::expect_close(kf_test::download(out),
                            rms_norm_ref(xv, length, wv, 1e-6, KF_ACTIVATION_SILU),
                            tolerance(dtype()), what + " rms norm");
    }
  }
}

// Rows that start on 8-byte but not 16-byte boundaries (16-bit rows of a pitch of length + 4):
// on CUDA the cached paths take 8-byte vectors, or element loads where a length does not fill
// them.
TEST_P(NormTest, RowStartsOffSixteenBytes) {
  for (int64_t length : {64, 1000, 4096, 4098}) {
    const uint64_t s = seed(2400 + length);
    SCOPED_TRACE(label("8-byte row starts " + std::to_string(length), s));
    const int64_t rows = 6, pitch = length + 4;
    Tensor x_base = tensor({rows, pitch}, dtype()), out_base = tensor({rows, pitch}, dtype());
    Tensor x = make_view(x_base, dtype(), {rows, length}, {pitch, 1}, 0);
    Tensor out = make_view(out_base, dtype(), {rows, length}, {pitch, 1}, 0);
    Tensor w = tensor({length}, dtype()), b = tensor({length}, dtype());
    const auto offsets = view_offsets({rows, length}, {pitch, 1}, 0);
    const auto xv = gather(fill(x_base, dtype(), static_cast<size_t>(rows * pitch), s), offsets);
    const auto wv = fill(w, dtype(), static_cast<size_t>(length), s + 2);
    const auto bv = fill(b, dtype(), static_cast<size_t>(length), s + 3);
    kf_test::poison(out_base);
    KF_ASSERT_OK(kf_fused_layer_norm_activation(ctx(), x, w, b, out, nullptr, nullptr, 1, 1e-5,
                                                KF_ACTIVATION_NONE, nullptr));
    const auto whole = kf_test::download(out_base);
    kf_test::expect_close(gather(whole, offsets),
                          layer_norm_ref(xv, length, wv, bv, 1e-5, KF_ACTIVATION_NONE).out,
                          tolerance(dtype()), "layer norm 8-byte row starts");
    std::vector<bool> inside(whole.size(), false);
    for (int64_t o : offsets) inside[static_cast<size_t>(o)] = true;
    for (size_t i = 0; i < whole.size(); ++i)
      if (!inside[i]) {
        EXPECT_TRUE(std::isnan(whole[i])) << "element " << i << " outside out written";
      }
    kf_test::poison(out_base);
    KF_ASSERT_OK(kf_fused_rms_norm_activation(ctx(), x, nullptr, w, out, nullptr, 1e-6,
                                              KF_ACTIVATION_NONE, nullptr));
    kf_test::expect_close(gather(kf_test::download(out_base), offsets),
                          rms_norm_ref(xv, length, wv, 1e-6, KF_ACTIVATION_NONE),
                          tolerance(dtype()), "rms norm 8-byte row starts");
  }
}

// Dense rows whose starts are not 16-byte aligned (a column slice at offset 1, and a row pitch
// that is not a multiple of 16 bytes): the cached paths must fall back to element loads.
TEST_P(NormTest, UnalignedRowStarts) {
  for (int64_t length : {32, 1024, 4096}) {
    const uint64_t s = seed(1200 + length);
    SCOPED_TRACE(label("unaligned " + std::to_string(length), s));
    const int64_t rows = 5, pitch = length + 1;
    Tensor x_base = tensor({rows, pitch}, dtype()), out_base = tensor({rows, pitch}, dtype());
    Tensor r_base = tensor({rows, pitch}, dtype());
    Tensor x = make_view(x_base, dtype(), {rows, length}, {pitch, 1}, 1);
    Tensor out = make_view(out_base, dtype(), {rows, length}, {pitch, 1}, 1);
    Tensor r = make_view(r_base, dtype(), {rows, length}, {pitch, 1}, 0);
    Tensor w = tensor({length}, dtype()), b = tensor({length}, dtype());
    const auto offsets_1 = view_offsets({rows, length}, {pitch, 1}, 1);
    const auto xv = gather(fill(x_base, dtype(), static_cast<size_t>(rows * pitch), s), offsets_1);
    const auto rv = gather(fill(r_base, dtype(), static_cast<size_t>(rows * pitch), s + 1),
                           view_offsets({rows, length}, {pitch, 1}, 0));
    const auto wv = fill(w, dtype(), static_cast<size_t>(length), s + 2);
    const auto bv = fill(b, dtype(), static_cast<size_t>(length), s + 3);
    kf_test::poison(out_base);
    KF_ASSERT_OK(kf_fused_layer_norm_activation(ctx(), x, w, b, out, nullptr, nullptr, 1, 1e-5,
                                                KF_ACTIVATION_NONE, nullptr));
    const auto got = gather(kf_test::download(out_base), offsets_1);
    kf_test::expect_close(got, layer_norm_ref(xv, length, wv, bv, 1e-5, KF_ACTIVATION_NONE).out,
                          tolerance(dtype()), "layer norm unaligned");
    kf_test::poison(out_base);
    KF_ASSERT_OK(kf_fused_rms_norm_activation(ctx(), x, r, w, out, nullptr, 1e-6,
                                              KF_ACTIVATION_NONE, nullptr));
    std::vector<double> h = xv;
    for (size_t i = 0; i < h.size(); ++i) h[i] += rv[i];
    h = kf_test::round_to_dtype(h, dtype());
    kf_test::expect_close(gather(kf_test::download(out_base), offsets_1),
                          rms_norm_ref(h, length, wv, 1e-6, KF_ACTIVATION_NONE), tolerance(dtype()),
                          "rms norm unaligned");
  }
}

// Rows that CUDA spreads over a block (16-bit rows of 769..1024 on some devices, 128 threads a
// row; rows of 2049..4096, 256 threads a row, the f16 form with a residual at three blocks per SM
// on some devices; rows of 4097..8192, 512 threads a row, two blocks per SM on some devices, or
// 256 threads a row at 24 elements a thread up to 6144 and, for the bf16 layer norm, at 32 from
// 6145: 6200 fills three quarters of that policy's slots), on a resident grid that fetches the
// next row while it works on the current one, with more rows than such a grid holds blocks (264
// to 1056 on 132 SMs), so blocks go on to further rows; with and without a residual. (The CPU
// backend, which has no such grid, checks fewer rows.)
TEST_P(NormTest, BlockRowsOverManySteps) {
  uint64_t salt = 1700;
  const bool cuda = kf_test::device_under_test() == KF_DEVICE_CUDA;
  for (int64_t length : {int64_t{3000}, int64_t{4096}, int64_t{1000}, int64_t{1024}, int64_t{5120},
                         int64_t{6144}, int64_t{6200}, int64_t{8192}}) {
    const int64_t rows = !cuda ? 60 : length <= 1024 ? 2200 : 700;
    check_rms_norm(rows, length, true, true, KF_ACTIVATION_NONE, salt += 3);
    check_rms_norm(rows, length, true, false, KF_ACTIVATION_GELU, salt += 3);
    check_rms_norm(rows, length, false, true, KF_ACTIVATION_NONE, salt += 3);
    check_layer_norm(rows, length, true, KF_ACTIVATION_RELU, salt += 3);
  }
  // Rows of 32 elements a thread over a block (on CUDA, 16-bit rows of 2561..4096 and
  // 8193..16384, which hold the next row's loads while working on one), walked over more than
  // two rows a block.
  for (int64_t length : {int64_t{3000}, int64_t{4096}, int64_t{16384}}) {
    const int64_t rows = !cuda ? 20 : length > 8192 ? 400 : 1500;
    check_rms_norm(rows, length, false, true, KF_ACTIVATION_NONE, salt += 3);
    check_layer_norm(rows, length, true, KF_ACTIVATION_RELU, salt += 3);
  }
  // The RMS norm with a residual over such rows (on CUDA, f32 and 16-bit rows of 8193..16384 take
  // the register-cached form with a residual, a 512-thread block a row), a row whose end falls
  // inside the last threads' chunks and a whole one, with more rows than the grid has blocks.
  for (int64_t length : {int64_t{12296}, int64_t{16384}}) {
    check_rms_norm(!cuda ? 5 : 400, length, true, true, KF_ACTIVATION_NONE, salt += 3);
    check_rms_norm(!cuda ? 5 : 400, length, true, false, KF_ACTIVATION_GELU, salt += 3);
  }
  // Rows of 1537..2048 without a residual over 2000 rows (on CUDA, f32 rows where a GPU holds
  // at least 1000 blocks of 128 threads, eight an SM, as the 132 SMs of an H100 or H200 do: a
  // resident grid whose blocks take one or two rows each, the second staged in shared memory
  // while the first is worked on, as for the 2048 x 2048 seed rows), then over 6000 rows (there,
  // a block a row in one pass); rows whose end falls inside the last threads' chunks (1540,
  // 1800) and whole ones, at a mean of 1e4 too (f32, f64), and in place. The CPU backend checks
  // fewer rows.
  for (int64_t length : {int64_t{1540}, int64_t{1800}, int64_t{2048}}) {
    const int64_t rows = !cuda ? 20 : 2000;
    check_rms_norm(rows, length, false, true, KF_ACTIVATION_NONE, salt += 3);
    check_rms_norm(rows, length, false, false, KF_ACTIVATION_GELU, salt += 3);
    check_layer_norm(rows, length, true, KF_ACTIVATION_RELU, salt += 3);
    // At a mean of 1e4 only where the dtype holds 1e4 +- 1 (as LargeMean).
    const bool wide = dtype() == KF_DTYPE_FLOAT32 || dtype() == KF_DTYPE_FLOAT64;
    check_layer_norm(rows, length, false, KF_ACTIVATION_NONE, salt += 3, wide ? 1e4 : 0.0, 1.0);
  }
  check_layer_norm_in_place(!cuda ? 20 : 2000, 2048, KF_ACTIVATION_SILU, seed(salt += 3));
  check_rms_norm(!cuda ? 20 : 6000, 2048, false, true, KF_ACTIVATION_NONE, salt += 3);
  check_layer_norm(!cuda ? 20 : 6000, 1800, true, KF_ACTIVATION_GELU, salt += 3);
}

// Layer norm with a weight and a bias over rows of 32 elements a thread over a block (on CUDA,
// 16-bit rows of 12289..16384 of 16-byte vectors: where the SMs are issue-lean, the build that
// copies the weight and bias into shared memory once a launch and reads them from there for every
// row). Rows whose end falls inside the last threads' chunks (12296, 15000, 16376) and whole ones,
// over more rows than the resident grid has blocks (on an H200 one block an SM, so each block
// takes two or three rows), then in place. The CPU backend checks fewer rows.
TEST_P(NormTest, LayerNormAffineOverLongBlockRows) {
  uint64_t salt = 4300;
  const bool cuda = kf_test::device_under_test() == KF_DEVICE_CUDA;
  const int64_t rows = cuda ? 300 : 5;
  for (int64_t length : {int64_t{12296}, int64_t{15000}, int64_t{16376}, int64_t{16384}})
    check_layer_norm(rows, length, true, KF_ACTIVATION_GELU, salt += 3);
  check_layer_norm_in_place(rows, 16384, KF_ACTIVATION_RELU, seed(salt += 3));
}

// RMS norm with a residual over rows that a block walks one to seven times: on CUDA the 16-bit
// rows of 1025..4096 run on a resident grid that fetches each block's next row while it works on
// the current one (on an H200, 264 blocks on 132 SMs: 300, 1000 and 1700 rows are one or two,
// three or four, and six or seven rows a block). With a weight and without, and in place (out is x,
// residual_out is residual, as in a transformer block). The CPU backend checks fewer rows.
TEST_P(NormTest, ResidualRowsOverManySteps) {
  uint64_t salt = 1850;
  const bool cuda = kf_test::device_under_test() == KF_DEVICE_CUDA;
  for (int64_t length : {int64_t{2048}, int64_t{3000}, int64_t{4096}, int64_t{1500}}) {
    for (int64_t rows : {int64_t{300}, int64_t{1000}, int64_t{1700}}) {
      if (!cuda && rows > 300) continue;
      check_rms_norm(cuda ? rows : 20, length, true, true, KF_ACTIVATION_NONE, salt += 3);
    }
    check_rms_norm(cuda ? 1000 : 20, length, true, false, KF_ACTIVATION_RELU, salt += 3);
    // In place, the transformer-block form: out is x and residual_out is residual.
    check_rms_norm_residual_form(cuda ? 1700 : 20, length, true, KF_ACTIVATION_NONE, salt += 3);
  }
}

// Rows of 16385..32767 elements, which CUDA stages in 16-bit types by one block in one rolling
// buffer (32..64 KiB: rows::StagedPolicy::rolling_row_bytes; the RMS norm's weight read from
// global memory; rows of 32768 take the grid-group kernel: GridGroupRows): more rows than a GPU
// holds blocks at once, with and without an affine, a residual (two operands: two buffers) and
// at a mean of 1e4.
TEST_P(NormTest, RowsOfOneRollingBuffer) {
  const int64_t rows = kf_test::device_under_test() == KF_DEVICE_CUDA ? 400 : 3;
  uint64_t salt = 2850;
  for (int64_t length : {16392, 24000, 32760}) {
    check_layer_norm(rows, length, true, KF_ACTIVATION_GELU, salt += 3);
    check_layer_norm(5, length, false, KF_ACTIVATION_NONE, salt += 3, 1e4, 1.0);
    check_rms_norm(rows, length, false, true, KF_ACTIVATION_SILU, salt += 3);
    check_rms_norm(5, length, false, false, KF_ACTIVATION_NONE, salt += 3);
    check_rms_norm(5, length, true, true, KF_ACTIVATION_RELU, salt += 3);
  }
}

// More rows past 64 KiB than a GPU holds clusters at once (on CUDA, several waves of clusters),
// with and without a residual.
TEST_P(NormTest, ManyLongRows) {
  uint64_t salt = 1950;
  for (int64_t length : {int64_t{65544}, int64_t{262144}}) {
    const int64_t rows = length > 100000 ? 20 : 40;
    check_layer_norm(rows, length, true, KF_ACTIVATION_NONE, salt += 3);
    check_rms_norm(rows, length, false, true, KF_ACTIVATION_NONE, salt += 3);
    check_rms_norm(rows, length, true, true, KF_ACTIVATION_NONE, salt += 3);
  }
}

// The RMS norm with a residual over rows of 0.8 to 3.2 MiB of both operands that are not a whole
// number of the grid-group kernel's shares. On CUDA (sm_90) they take its partial form (25, 31
// and 49 blocks of f32 rows of 200000, 250000 and 400000). Where that kernel cannot launch, the
// rows past what portable clusters of 128 KiB slices hold take up to 16 such slices in a cluster
// where the device holds one, the others the streaming kernel. More rows than the device holds
// groups; with a weight and without. The CPU backend checks fewer rows.
TEST_P(NormTest, ResidualRowsOfLargeSlices) {
  uint64_t salt = 3150;
  const int64_t rows = kf_test::device_under_test() == KF_DEVICE_CUDA ? 40 : 3;
  for (int64_t length : {int64_t{200000}, int64_t{250000}, int64_t{400000}}) {
    check_rms_norm(rows, length, true, true, KF_ACTIVATION_NONE, salt += 3);
    check_rms_norm(rows, length, true, false, KF_ACTIVATION_GELU, salt += 3);
  }
}

// More long rows than a GPU holds clusters at once: on CUDA the clusters stay resident and walk
// the rows, each block restaging its slice of the next row as it finishes the current one, and
// RMS norm alternating its cluster exchange slots. Rows of 262136, 8 short of a whole number of
// the grid-group kernel's shares (rows of 262144 take that kernel: GridGroupRows): f32 rows take
// clusters of 16 slices of 64 KiB (of 128 KiB with a residual), 16-bit ones 8 (16 with a
// residual or the RMS norm's resident weight). CUDA only: the CPU backend has no such loop, and
// the rows are large (64 x 262136).
TEST_P(NormTest, RowsPerResidentCluster) {
  if (kf_test::device_under_test() != KF_DEVICE_CUDA)
    GTEST_SKIP() << "the resident-cluster loop is of the CUDA backend";
  uint64_t salt = 2950;
  check_layer_norm(64, 262136, true, KF_ACTIVATION_RELU, salt += 3);
  check_rms_norm(64, 262136, false, true, KF_ACTIVATION_NONE, salt += 3);
  check_rms_norm(64, 262136, true, true, KF_ACTIVATION_NONE, salt += 3);
}

// Norm rows of 64 KiB and more without a residual, past what the register-cached kernel holds:
// on CUDA (sm_90) the grid-group kernel (a cooperative grid, each row over a group of blocks, the
// blocks' statistics exchanged through global memory): fewer rows than the grid holds groups,
// more (each block walks several rows), group sizes of 2 to 64 blocks, with and without a weight,
// with activations, and in place.
// CUDA only: the rows are large, and the CPU backend has one form for every length.
TEST_P(NormTest, GridGroupRows) {
  if (kf_test::device_under_test() != KF_DEVICE_CUDA)
    GTEST_SKIP() << "the grid-group rows are a form of the CUDA backend";
  uint64_t salt = 3950;
  // 32768: f32 rows of 128 KiB (the shortest f32 rows taken: those of 64 KiB run cached) and
  // 16-bit rows of 64 KiB (two blocks, the shortest taken).
  const std::vector<int64_t> lengths = {32768, 65536, 131072, 262144, 524288};
  for (int64_t length : lengths) {
    const int64_t many = length <= 262144 ? 70 : 30;
    check_rms_norm(3, length, false, true, KF_ACTIVATION_NONE, salt += 3);
    check_rms_norm(many, length, false, true, KF_ACTIVATION_SILU, salt += 3);
    check_rms_norm(many, length, false, false, KF_ACTIVATION_NONE, salt += 3);
    check_rms_norm(5, length, false, false, KF_ACTIVATION_GELU, salt += 3);
    // out is x.
    const uint64_t s = seed(salt += 3);
    SCOPED_TRACE(label("rms norm in place " + std::to_string(length), s));
    Tensor x = tensor({20, length}, dtype()), w = tensor({length}, dtype());
    const auto xv = fill(x, dtype(), static_cast<size_t>(20 * length), s);
    const auto wv = fill(w, dtype(), static_cast<size_t>(length), s + 1);
    KF_ASSERT_OK(kf_fused_rms_norm_activation(ctx(), x, nullptr, w, x, nullptr, 1e-6,
                                              KF_ACTIVATION_RELU, nullptr));
    kf_test::expect_close(kf_test::download(x),
                          rms_norm_ref(xv, length, wv, 1e-6, KF_ACTIVATION_RELU),
                          tolerance(dtype()), "rms norm in place");
  }
  // The layer norm's grid-group rows (up to 64 blocks a row: f32 rows of 524288, 16-bit rows of
  // 1048576), with the statistics written out.
  for (int64_t length : lengths) {
    const int64_t many = length <= 262144 ? 70 : 30;
    check_layer_norm(3, length, true, KF_ACTIVATION_NONE, salt += 3);
    check_layer_norm(many, length, true, KF_ACTIVATION_RELU, salt += 3);
    check_layer_norm(5, length, false, KF_ACTIVATION_GELU, salt += 3, 0.5, 2.0);
    check_layer_norm_in_place(20, length, KF_ACTIVATION_SILU, seed(salt += 3));
  }
  // The 16-bit layer norm's statistics in one pass on CUDA (each thread's values about its first
  // one, the lanes' parts merged by Chan's formula about lane 0's mean): rows at a mean far from
  // zero against their spread, and rows whose first element (lane 0's first value) lies far out,
  // up to FirstElementFarFromTheRest's 250 over values in +-3 (about lane 0's first value, the
  // merge lost the saved mean's low bits there); every dtype takes the last.
  const double far = 60.0, farther = 250.0;
  for (int64_t length : lengths) {
    if (length > 262144) break;
    if (dtype() == KF_DTYPE_FLOAT16 || dtype() == KF_DTYPE_BFLOAT16) {
      check_layer_norm(6, length, true, KF_ACTIVATION_NONE, salt += 3, 100.0, 1.0);
      check_layer_norm(6, length, false, KF_ACTIVATION_NONE, salt += 3, 0.0, 3.0, &far, 2);
    }
    check_layer_norm(6, length, true, KF_ACTIVATION_NONE, salt += 3, 0.0, 3.0, &farther, 2);
  }
  // A row whose first block's values lie far from the rest: its mean is the base of the others'.
  if (dtype() == KF_DTYPE_FLOAT32)
    for (int64_t length : {int64_t{262144}, int64_t{524288}}) {
      const uint64_t s = seed(salt += 3);
      SCOPED_TRACE(label("layer norm, first block apart " + std::to_string(length), s));
      Tensor x = tensor({4, length}, dtype()), out = tensor({4, length}, dtype());
      std::vector<double> xv = kf_test::round_to_dtype(
          kf_test::random_values(static_cast<size_t>(4 * length), s, -1.0, 1.0), dtype());
      for (int64_t r = 0; r < 4; ++r)
        for (int64_t c = 0; c < 8192; ++c) xv[static_cast<size_t>(r * length + c)] += 1e3;
      kf_test::upload(x, xv);
      kf_test::poison(out);
      KF_ASSERT_OK(kf_fused_layer_norm_activation(ctx(), x, nullptr, nullptr, out, nullptr, nullptr,
                                                  1, 1e-5, KF_ACTIVATION_NONE, nullptr));
      kf_test::expect_close(kf_test::download(out),
                            layer_norm_ref(xv, length, {}, {}, 1e-5, KF_ACTIVATION_NONE).out,
                            tolerance(dtype()), "layer norm, first block apart");
    }
}

// The RMS norm with a residual over rows that are a whole number of the grid-group kernel's
// shares, past what the register-cached kernel holds (f32 rows past 64 KiB, 16-bit rows from 64
// KiB): on CUDA (sm_90) its form with a residual (both operands staged, one block an SM, h
// written over the staged x and to residual_out): fewer rows than the grid holds groups and more,
// 2 to 64 blocks a row (f32 rows of 32768 to 524288, 16-bit rows of 32768 to 1048576), with a
// weight and without, with activations, with no residual_out, and in place (out is x,
// residual_out is the residual). CUDA only, as GridGroupRows.
TEST_P(NormTest, GridGroupRowsWithResidual) {
  if (kf_test::device_under_test() != KF_DEVICE_CUDA)
    GTEST_SKIP() << "the grid-group rows are a form of the CUDA backend";
  uint64_t salt = 4550;
  const bool narrow = dtype() != KF_DTYPE_FLOAT32;
  std::vector<int64_t> lengths = {32768, 65536, 131072, 262144, 524288};
  if (narrow) lengths.push_back(1048576);  // 16-bit rows of 64 blocks
  for (int64_t length : lengths) {
    const int64_t many = length <= 262144 ? 70 : length <= 524288 ? 30 : 5;
    check_rms_norm(3, length, true, true, KF_ACTIVATION_NONE, salt += 3);
    check_rms_norm(many, length, true, true, KF_ACTIVATION_SILU, salt += 3);
    check_rms_norm(many, length, true, false, KF_ACTIVATION_NONE, salt += 3);
    check_rms_norm_residual_form(9, length, false, KF_ACTIVATION_GELU, salt += 3);
    check_rms_norm_residual_form(20, length, true, KF_ACTIVATION_RELU, salt += 3);
  }
}

// Norm rows of 64 KiB and more in whole 16-byte vectors that are not a whole number of the
// grid-group kernel's 32 KiB shares, past what the register-cached kernel holds: on CUDA (sm_90)
// the kernel's partial form (launch_grid_rows), each row's vectors dealt evenly to as few blocks
// as hold them: the RMS norm's rows (f32 rows of 20000: 3 blocks of 1667, 1667 and 1666 vectors;
// 16-bit rows of 600000: 37 blocks, past the one-word-a-lane instance), the f32 layer norm's and
// RMS norm's with a residual from three shares (rows of 40008 on; the rows of 20000 keep their
// kernels, as the 16-bit layer norm's do; f32 rows of 600000 are past the layer norm's 64
// blocks). With a residual and without, with a weight and without, the layer norm with and
// without its affine, in place, at a mean far from zero and with a first element far out: fewer
// rows than the grid holds groups, and more. CUDA only, as GridGroupRows.
TEST_P(NormTest, GridGroupRowsOfPartialShares) {
  if (kf_test::device_under_test() != KF_DEVICE_CUDA)
    GTEST_SKIP() << "the grid-group rows are a form of the CUDA backend";
  uint64_t salt = 5150;
  const bool narrow = dtype() == KF_DTYPE_FLOAT16 || dtype() == KF_DTYPE_BFLOAT16;
  const double center = narrow ? 100.0 : 1e4, far = 250.0;
  for (int64_t length : {20000, 40008, 100000, 300000, 600000}) {
    const int64_t many = length <= 300000 ? 70 : 30;
    check_rms_norm(3, length, false, true, KF_ACTIVATION_NONE, salt += 3);
    check_rms_norm(many, length, false, true, KF_ACTIVATION_SILU, salt += 3);
    check_rms_norm(many, length, false, false, KF_ACTIVATION_NONE, salt += 3);
    check_rms_norm(3, length, true, true, KF_ACTIVATION_NONE, salt += 3);
    check_rms_norm(many, length, true, true, KF_ACTIVATION_GELU, salt += 3);
    check_rms_norm(many, length, true, false, KF_ACTIVATION_NONE, salt += 3);
    check_rms_norm_residual_form(9, length, false, KF_ACTIVATION_NONE, salt += 3);
    check_rms_norm_residual_form(20, length, true, KF_ACTIVATION_RELU, salt += 3);
    check_layer_norm(3, length, true, KF_ACTIVATION_NONE, salt += 3);
    check_layer_norm(many, length, true, KF_ACTIVATION_RELU, salt += 3);
    check_layer_norm(5, length, false, KF_ACTIVATION_GELU, salt += 3, 0.5, 2.0);
    check_layer_norm_in_place(20, length, KF_ACTIVATION_SILU, seed(salt += 3));
    check_layer_norm(6, length, true, KF_ACTIVATION_NONE, salt += 3, center, 1.0);
    check_layer_norm(6, length, true, KF_ACTIVATION_NONE, salt += 3, 0.0, 3.0, &far, 2);
  }
}

// The grid-group rows on streams of their own: each stream keeps its words for the partials and
// grows them for more rows (30 after 3 after 70), two streams take turns, and a stream is
// destroyed with its words. CUDA only, as GridGroupRows.
TEST_P(NormTest, GridGroupRowsOnSeveralStreams) {
  if (kf_test::device_under_test() != KF_DEVICE_CUDA)
    GTEST_SKIP() << "the grid-group rows are a form of the CUDA backend";
  kf_stream_t* streams[2] = {};
  KF_ASSERT_OK(kf_stream_create(ctx(), nullptr, &streams[0]));
  KF_ASSERT_OK(kf_stream_create(ctx(), nullptr, &streams[1]));
  uint64_t salt = 4100;
  const int64_t length = 262144;
  const int64_t counts[] = {3, 30, 70, 5};
  for (int k = 0; k < 4; ++k) {
    const int64_t rows = counts[k];
    const uint64_t s = seed(salt += 3);
    SCOPED_TRACE(
        label("rms norm rows " + std::to_string(rows) + " on stream " + std::to_string(k % 2), s));
    Tensor x = tensor({rows, length}, dtype()), w = tensor({length}, dtype());
    Tensor out = tensor({rows, length}, dtype());
    const auto xv = fill(x, dtype(), static_cast<size_t>(rows * length), s);
    const auto wv = fill(w, dtype(), static_cast<size_t>(length), s + 1);
    kf_test::poison(out);
    KF_ASSERT_OK(kf_fused_rms_norm_activation(ctx(), x, nullptr, w, out, nullptr, 1e-6,
                                              KF_ACTIVATION_NONE, streams[k % 2]));
    KF_ASSERT_OK(kf_stream_synchronize(streams[k % 2]));
    kf_test::expect_close(kf_test::download(out),
                          rms_norm_ref(xv, length, wv, 1e-6, KF_ACTIVATION_NONE),
                          tolerance(dtype()), "rms norm on a stream");
    if (k == 1) {  // the first stream goes, words and all; a new one takes its place
      KF_ASSERT_OK(kf_stream_destroy(streams[0]));
      KF_ASSERT_OK(kf_stream_create(ctx(), nullptr, &streams[0]));
    }
  }
  KF_ASSERT_OK(kf_stream_destroy(streams[0]));
  KF_ASSERT_OK(kf_stream_destroy(streams[1]));
}

#if defined(KF_TEST_CUDA)
// The grid-group rows captured into a CUDA graph: the captured launch gets words of its own,
// zeroed in the graph, so every replay waits for its own partials. Each replay normalises x in
// place, so a replay that took the last replay's partials would scale by the wrong sums; each
// is checked against float64 from the x it started with.
TEST_P(NormTest, GridGroupRowsCapturedIntoACudaGraph) {
  if (kf_test::device_under_test() != KF_DEVICE_CUDA)
    GTEST_SKIP() << "a CUDA graph needs the CUDA backend";
  const int64_t rows = 24, length = 262144;
  const uint64_t s = seed(4200);
  SCOPED_TRACE(label("rms norm captured", s));
  kf_stream_t* stream = nullptr;
  KF_ASSERT_OK(kf_stream_create(ctx(), nullptr, &stream));
  void* native = nullptr;
  KF_ASSERT_OK(kf_stream_get_native(stream, &native));
  const auto cs = static_cast<cudaStream_t>(native);
  Tensor x = tensor({rows, length}, dtype()), w = tensor({length}, dtype());
  std::vector<double> xv = fill(x, dtype(), static_cast<size_t>(rows * length), s);
  const auto wv = fill(w, dtype(), static_cast<size_t>(length), s + 1);
  // Once before the capture (the kernel's attributes set, its grid known), checked.
  KF_ASSERT_OK(kf_fused_rms_norm_activation(ctx(), x, nullptr, w, x, nullptr, 1e-6,
                                            KF_ACTIVATION_NONE, stream));
  KF_ASSERT_OK(kf_stream_synchronize(stream));
  std::vector<double> got = kf_test::download(x);
  kf_test::expect_close(got, rms_norm_ref(xv, length, wv, 1e-6, KF_ACTIVATION_NONE),
                        tolerance(dtype()), "before the capture");
  ASSERT_EQ(cudaStreamBeginCapture(cs, cudaStreamCaptureModeRelaxed), cudaSuccess);
  KF_ASSERT_OK(kf_fused_rms_norm_activation(ctx(), x, nullptr, w, x, nullptr, 1e-6,
                                            KF_ACTIVATION_NONE, stream));
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(cs, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int replay = 0; replay < 3; ++replay) {
    xv = got;
    ASSERT_EQ(cudaGraphLaunch(exec, cs), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(cs), cudaSuccess);
    got = kf_test::download(x);
    kf_test::expect_close(got, rms_norm_ref(xv, length, wv, 1e-6, KF_ACTIVATION_NONE),
                          tolerance(dtype()), "replay " + std::to_string(replay));
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  KF_ASSERT_OK(kf_stream_destroy(stream));
}
#endif

INSTANTIATE_TEST_SUITE_P(AllTypes, NormTest, row_test::float_dtypes(), row_test::dtype_param_name);

// ---- errors -------------------------------------------------------------------------------------

class NormErrors : public row_test::DeviceTest {};

TEST_F(NormErrors, LayerNorm) {
  Tensor x = tensor({4, 6}), out = tensor({4, 6}), w = tensor({6}), b = tensor({6});
  Tensor mean = tensor({4}), rstd = tensor({4});
  kf_test::poison(out);
  auto ln = [&](const kf_tensor_t* xx, const kf_tensor_t* ww, const kf_tensor_t* bb,
                kf_tensor_t* oo, kf_tensor_t* m, kf_tensor_t* r, int32_t nd, double eps,
                kf_activation_t act) {
    return kf_fused_layer_norm_activation(ctx(), xx, ww, bb, oo, m, r, nd, eps, act, nullptr);
  };
  const auto none = KF_ACTIVATION_NONE;
  KF_EXPECT_ERR(ln(x, w, b, out, mean, rstd, 0, 1e-5, none), KF_ERROR_INVALID_ARGUMENT);
  KF_EXPECT_ERR(ln(x, w, b, out, mean, rstd, 3, 1e-5, none), KF_ERROR_INVALID_ARGUMENT);
  KF_EXPECT_ERR(ln(x, w, b, out, mean, rstd, 1, 0.0, none), KF_ERROR_INVALID_ARGUMENT);
  KF_EXPECT_ERR(ln(x, w, b, out, mean, rstd, 1, -1e-5, none), KF_ERROR_INVALID_ARGUMENT);
  KF_EXPECT_ERR(ln(x, w, b, out, mean, rstd, 1, NAN, none), KF_ERROR_INVALID_ARGUMENT);
  KF_EXPECT_ERR(ln(x, w, b, out, mean, rstd, 1, INFINITY, none), KF_ERROR_INVALID_ARGUMENT);
  // eps must be normal and finite in the type the kernels compute in, f32 for f32 data: 1e-300
  // rounds to 0 there and 1e-40 to a subnormal, and a constant row's rstd came out infinite.
  for (double eps : {1e-300, 1e-40, 1e39})
    KF_EXPECT_ERR(ln(x, w, b, out, mean, rstd, 1, eps, none), KF_ERROR_INVALID_ARGUMENT);
  // f64 data takes it: constant rows normalise to 0.
  Tensor x64 = tensor({4, 6}, KF_DTYPE_FLOAT64), out64 = tensor({4, 6}, KF_DTYPE_FLOAT64);
  kf_test::upload(x64, std::vector<double>(24, 0.75));
  kf_test::poison(out64);
  KF_ASSERT_OK(ln(x64, nullptr, nullptr, out64, nullptr, nullptr, 1, 1e-300, none));
  for (double v : kf_test::download(out64)) EXPECT_EQ(v, 0.0);
  KF_EXPECT_ERR(ln(x, w, b, out, mean, rstd, 1, 1e-5, static_cast<kf_activation_t>(99)),
                KF_ERROR_INVALID_ARGUMENT);
  Tensor w_bad = tensor({5}), b_bad = tensor({4, 6}), out_bad = tensor({4, 7});
  Tensor mean_bad = tensor({4, 1}), w_f16 = tensor({6}, KF_DTYPE_FLOAT16);
  Tensor mean_f16 = tensor({4}, KF_DTYPE_FLOAT16), x_int = tensor({4, 6}, KF_DTYPE_INT32);
  KF_EXPECT_ERR(ln(x, w_bad, b, out, mean, rstd, 1, 1e-5, none), KF_ERROR_SHAPE_MISMATCH);
  KF_EXPECT_ERR(ln(x, w, b_bad, out, mean, rstd, 1, 1e-5, none), KF_ERROR_SHAPE_MISMATCH);
  KF_EXPECT_ERR(ln(x, w, b, out_bad, mean, rstd, 1, 1e-5, none), KF_ERROR_SHAPE_MISMATCH);
  KF_EXPECT_ERR(ln(x, w, b, out, mean_bad, rstd, 1, 1e-5, none), KF_ERROR_SHAPE_MISMATCH);
  KF_EXPECT_ERR(ln(x, w_f16, b, out, mean, rstd, 1, 1e-5, none), KF_ERROR_DTYPE_MISMATCH);
  KF_EXPECT_ERR(ln(x, w, b, out, mean_f16, rstd, 1, 1e-5, none), KF_ERROR_DTYPE_MISMATCH);
  KF_EXPECT_ERR(ln(x_int, nullptr, nullptr, out, nullptr, nullptr, 1, 1e-5, none),
                KF_ERROR_DTYPE_MISMATCH);
  KF_EXPECT_ERR(ln(x, w, b, w, nullptr, nullptr, 1, 1e-5, none), KF_ERROR_SHAPE_MISMATCH);
  // Overlaps: out on weight's storage, mean on rstd, out a different view of x.
  Tensor big = tensor({4, 12});
  Tensor x_view = row_test::make_view(big, KF_DTYPE_FLOAT32, {4, 6}, {12, 1}, 0);
  Tensor out_view = row_test::make_view(big, KF_DTYPE_FLOAT32, {4, 6}, {12, 1}, 1);
  KF_EXPECT_ERR(ln(x_view, nullptr, nullptr, out_view, nullptr, nullptr, 1, 1e-5, none),
                KF_ERROR_INVALID_ARGUMENT);
  KF_EXPECT_ERR(ln(x, w, b, out, mean, mean, 1, 1e-5, none), KF_ERROR_INVALID_ARGUMENT);
  // Outputs that write one element twice: out's rows over each other, mean_out of [2, 2] on
  // three elements (a layer norm over x of [2, 2, 6]).
  Tensor rows_span = tensor({24});
  Tensor out_folded = row_test::make_view(rows_span, KF_DTYPE_FLOAT32, {4, 6}, {4, 1}, 0);
  KF_EXPECT_ERR(ln(x, w, b, out_folded, nullptr, nullptr, 1, 1e-5, none),
                KF_ERROR_INVALID_ARGUMENT);
  Tensor x3 = tensor({2, 2, 6}), out3 = tensor({2, 2, 6}), three = tensor({3});
  Tensor mean_folded = row_test::make_view(three, KF_DTYPE_FLOAT32, {2, 2}, {1, 1}, 0);
  KF_EXPECT_ERR(ln(x3, w, b, out3, mean_folded, nullptr, 1, 1e-5, none), KF_ERROR_INVALID_ARGUMENT);
  // One tensor as x and as the weight: out may be x's view, but it is the weight's too.
  Tensor sq = tensor({6, 6}), sq_out = tensor({6, 6});
  KF_EXPECT_ERR(ln(sq, sq, nullptr, sq, nullptr, nullptr, 2, 1e-5, none),
                KF_ERROR_INVALID_ARGUMENT);
  KF_EXPECT_ERR(ln(sq, nullptr, sq, sq, nullptr, nullptr, 2, 1e-5, none),
                KF_ERROR_INVALID_ARGUMENT);
  KF_ASSERT_OK(ln(sq, sq, nullptr, sq_out, nullptr, nullptr, 2, 1e-5, none));
  KF_EXPECT_ERR(ln(nullptr, w, b, out, mean, rstd, 1, 1e-5, none), KF_ERROR_INVALID_HANDLE);
  KF_EXPECT_ERR(ln(x, w, b, nullptr, mean, rstd, 1, 1e-5, none), KF_ERROR_INVALID_HANDLE);
  for (double v : kf_test::download(out)) EXPECT_TRUE(std::isnan(v)) << "a failing call wrote out";
  // Empty leading dims are a no-op; empty rows with statistics are an error.
  Tensor e = tensor({0, 6}), eo = tensor({0, 6});
  KF_ASSERT_OK(ln(e, w, b, eo, nullptr, nullptr, 1, 1e-5, none));
  Tensor z = tensor({4, 0}), zo = tensor({4, 0});
  KF_EXPECT_ERR(ln(z, nullptr, nullptr, zo, mean, nullptr, 1, 1e-5, none), KF_ERROR_SHAPE_MISMATCH);
}

TEST_F(NormErrors, RmsNorm) {
  Tensor x = tensor({4, 6}), r = tensor({4, 6}), w = tensor({6}), out = tensor({4, 6});
  Tensor r_out = tensor({4, 6});
  auto rms = [&](const kf_tensor_t* xx, const kf_tensor_t* rr, const kf_tensor_t* ww,
                 kf_tensor_t* oo, kf_tensor_t* ro, double eps, kf_activation_t act) {
    return kf_fused_rms_norm_activation(ctx(), xx, rr, ww, oo, ro, eps, act, nullptr);
  };
  const auto none = KF_ACTIVATION_NONE;
  KF_EXPECT_ERR(rms(x, r, w, out, r_out, 0.0, none), KF_ERROR_INVALID_ARGUMENT);
  KF_EXPECT_ERR(rms(x, r, w, out, r_out, NAN, none), KF_ERROR_INVALID_ARGUMENT);
  KF_EXPECT_ERR(rms(x, r, w, out, r_out, 1e-46, none), KF_ERROR_INVALID_ARGUMENT);
  Tensor span = tensor({24});
  Tensor folded = row_test::make_view(span, KF_DTYPE_FLOAT32, {4, 6}, {3, 1}, 0);
  KF_EXPECT_ERR(rms(x, r, w, folded, nullptr, 1e-6, none), KF_ERROR_INVALID_ARGUMENT);
  KF_EXPECT_ERR(rms(x, r, w, out, folded, 1e-6, none), KF_ERROR_INVALID_ARGUMENT);
  KF_EXPECT_ERR(rms(x, r, w, out, r_out, 1e-6, static_cast<kf_activation_t>(-1)),
                KF_ERROR_INVALID_ARGUMENT);
  KF_EXPECT_ERR(rms(x, nullptr, w, out, r_out, 1e-6, none), KF_ERROR_INVALID_ARGUMENT);
  KF_EXPECT_ERR(rms(x, r, w, out, out, 1e-6, none), KF_ERROR_INVALID_ARGUMENT);
  // out and residual_out may each be x or the residual, never each other, even where they are
  // the view of the same one (h = x + residual would be lost).
  kf_test::poison(x);
  KF_EXPECT_ERR(rms(x, r, w, x, x, 1e-6, none), KF_ERROR_INVALID_ARGUMENT);
  KF_EXPECT_ERR(rms(x, r, w, r, r, 1e-6, none), KF_ERROR_INVALID_ARGUMENT);
  KF_EXPECT_ERR(rms(x, x, w, x, x, 1e-6, none), KF_ERROR_INVALID_ARGUMENT);
  for (double v : kf_test::download(x)) EXPECT_TRUE(std::isnan(v)) << "a failing call wrote x";
  // x as its own residual, and out and residual_out on x and on the residual, are in-place forms.
  KF_ASSERT_OK(rms(x, x, w, x, nullptr, 1e-6, none));
  KF_ASSERT_OK(rms(x, r, w, x, r, 1e-6, none));
  Tensor r_bad = tensor({4, 5}), w_bad = tensor({4, 6}), w_f64 = tensor({6}, KF_DTYPE_FLOAT64);
  KF_EXPECT_ERR(rms(x, r_bad, w, out, nullptr, 1e-6, none), KF_ERROR_SHAPE_MISMATCH);
  KF_EXPECT_ERR(rms(x, r, w_bad, out, nullptr, 1e-6, none), KF_ERROR_SHAPE_MISMATCH);
  KF_EXPECT_ERR(rms(x, r, w_f64, out, nullptr, 1e-6, none), KF_ERROR_DTYPE_MISMATCH);
  KF_EXPECT_ERR(rms(x, r, w, w, nullptr, 1e-6, none), KF_ERROR_SHAPE_MISMATCH);
  Tensor s = tensor({});
  KF_EXPECT_ERR(rms(s, nullptr, nullptr, s, nullptr, 1e-6, none), KF_ERROR_INVALID_ARGUMENT);
}

}  // namespace
