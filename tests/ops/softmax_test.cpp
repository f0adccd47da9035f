// kf_fused_softmax and kf_log_softmax against float64 references written here, for every dtype:
// odd sizes, broadcast masks, causal masking (including fully hidden rows), strided views, in
// place, and every error path. Outputs are poisoned first; data is random (KF_TEST_SEED=<n>).
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "tests/ops/row_test_util.hpp"

namespace {

using namespace row_test;

// Softmax of scale * x + mask (mask broadcast by NumPy rules), causal per the header's rule.
std::vector<double> softmax_ref(const std::vector<double>& x, const Shape& shape,
                                const std::vector<double>& mask, const Shape& mask_shape,
                                double scale, bool causal, bool log) {
  const int64_t lk = shape.back();
  const int64_t lq = shape.size() >= 2 ? shape[shape.size() - 2] : 1;
  const int64_t rows = static_cast<int64_t>(x.size()) / lk;
  std::vector<double> out(x.size());
  std::vector<int64_t> index(shape.size(), 0);
  const size_t lead = shape.size() - mask_shape.size();
  for (int64_t row = 0; row < rows; ++row) {
    std::vector<double> v(static_cast<size_t>(lk));
    for (int64_t c = 0; c < lk; ++c) {
      index.back() = c;
      double m = 0;
      if (!mask.empty()) {
        int64_t mi = 0;
        for (size_t j = 0; j < mask_shape.size(); ++j)
          mi = mi * mask_shape[j] + (mask_shape[j] == 1 ? 0 : index[lead + j]);
        m = mask[static_cast<size_t>(mi)];
      }
      v[c] = scale * x[row * lk + c] + m;
      if (causal && c > row % lq + (lk - lq)) v[c] = -INFINITY;
    }
    double max = -INFINITY;
    for (double e : v) max = std::max(max, e);
    double sum = 0;
    for (double e : v) sum += max == -INFINITY ? 0.0 : std::exp(e - max);
    for (int64_t c = 0; c < lk; ++c) {
      double y = max == -INFINITY ? (log ? -INFINITY : 0.0)
                                  : (log ? v[c] - max - std::log(sum) : std::exp(v[c] - max) / sum);
      out[row * lk + c] = y;
    }
    for (size_t d = shape.size() - 1; d-- > 0;) {  // advance the leading multi-index
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

// Softmax values against the reference. Other outputs are compared to within tol * max(1, |want|);
// softmax values lie below 1, about 1/n in a row of n, where that would be an absolute 1e-2
// (bf16) that an output of zeros passes for rows of a few hundred. Here the error is measured
// against max(|want|, 1 / n) instead, plus, in f16, half the spacing of its subnormals (2^-25:
// the values of rows past ~16k lie below f16's smallest normal). Log-softmax values (|y| about
// log n and up, -inf where hidden) keep the usual comparison.
void expect_softmax_close(const std::vector<double>& got, const std::vector<double>& want,
                          int64_t row_length, kf_dtype_t dtype, bool log, const std::string& what) {
  if (log) {
    expect_close_inf(got, want, kf_test::tolerance(dtype), what);
    return;
  }
  ASSERT_EQ(got.size(), want.size()) << what;
  const double tol = kf_test::tolerance(dtype);
  const double floor = dtype == KF_DTYPE_FLOAT16 ? 0x1p-25 : 0.0;
  const double smallest = 1.0 / static_cast<double>(std::max<int64_t>(row_length, 1));
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(got[i] - want[i]);
    if (err <= tol * std::max(std::fabs(want[i]), smallest) + floor) continue;  // NaN: not ok
    if (bad++ < 5)
      ADD_FAILURE() << what << ": element " << i << " got " << got[i] << " want " << want[i];
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size()
                     << " elements outside tolerance " << tol << " of max(|want|, " << smallest
                     << ")";
}

class SoftmaxTest : public row_test::DeviceFixture<::testing::TestWithParam<kf_dtype_t>> {
 protected:
  kf_dtype_t dtype() const { return GetParam(); }
  uint64_t seed(uint64_t salt) const {
    return base_seed() * 1000003u + static_cast<uint64_t>(dtype()) * 10007u + salt;
  }
  Tensor tensor(const Shape& shape) { return kf_test::make_tensor(ctx(), dtype(), shape); }

  // Both ops on a dense x, with an optional mask (every 5th element -inf when `holes`).
  void check(const Shape& shape, const Shape& mask_shape, bool use_mask, double scale, bool causal,
             uint64_t salt, bool holes = false) {
    const uint64_t s = seed(salt);
    const std::string what = std::string(dtype_name(dtype())) + " x " + shape_str(shape) +
                             (use_mask ? " mask " + shape_str(mask_shape) : "") +
                             (causal ? " causal" : "") + " (seed " + std::to_string(s) + ")";
    SCOPED_TRACE(what);
    Tensor x = tensor(shape), out = tensor(shape), mask = tensor(use_mask ? mask_shape : Shape{1});
    const auto xv = fill(x, dtype(), static_cast<size_t>(kf_test::numel(shape)), s);
    std::vector<double> mv;
    if (use_mask) {
      mv = fill(mask, dtype(), static_cast<size_t>(kf_test::numel(mask_shape)), s + 1);
      if (holes) {
        for (size_t i = 0; i < mv.size(); i += 5) mv[i] = -INFINITY;
        kf_test::upload(mask, mv);
      }
    }
    for (bool log : {false, true}) {
      kf_test::poison(out);
      auto fn = log ? kf_log_softmax : kf_fused_softmax;
      KF_ASSERT_OK(fn(ctx(), x, use_mask ? mask.t : nullptr, out, scale, causal, nullptr));
      expect_softmax_close(
          kf_test::download(out),
          softmax_ref(xv, shape, mv, use_mask ? mask_shape : Shape{}, scale, causal, log),
          shape.back(), dtype(), log, what + (log ? " log" : ""));
    }
  }
};

TEST_P(SoftmaxTest, OddSizes) {
  uint64_t salt = 0;
  for (int64_t rows : {1, 3, 7})
    for (int64_t length : {1, 7, 33, 1023, 4097, 40000})
      check({rows, length}, {}, false, 0.7, false, salt += 2);
  check({300, 64}, {}, false, 1.0, false, salt += 2);
  check({33}, {}, false, -2.0, false, salt += 2);
}

TEST_P(SoftmaxTest, MasksAndCausal) {
  uint64_t salt = 100;
  check({2, 3, 5, 33}, {33}, true, 0.5, false, salt += 2, true);
  check({2, 3, 5, 33}, {5, 33}, true, 0.5, true, salt += 2);
  check({2, 3, 5, 33}, {2, 1, 5, 33}, true, 1.0, true, salt += 2, true);
  check({2, 3, 5, 1}, {2, 1, 5, 1}, true, 1.0, false, salt += 2);
  check({2, 5, 7}, {5, 1}, true, 1.0, false, salt += 2);  // mask broadcast along the row
  check({4, 7}, {}, false, 1.0, true, salt += 2);         // Lq < Lk: last row sees all
  check({9, 4}, {}, false, 1.0, true, salt += 2);         // Lq > Lk: first 5 rows fully hidden
  check({3, 2, 1500}, {2, 1500}, true, 0.125, true, salt += 2);
  check({2, 4097}, {4097}, true, 1.0, true, salt += 2, true);
  // Square causal blocks (query q sees columns 0..q): most columns of early rows are hidden, and
  // the CUDA kernels neither load nor read them (rows of 1000: register-cached; rows of 16392
  // f32: staged over a cluster, where up to 63 columns at the end of the last block's slice
  // are hidden).
  check({2, 1000, 1000}, {1000, 1000}, true, 0.5, true, salt += 2, true);
  check({1000, 1000}, {}, false, 1.0, true, salt += 2);
  check({64, 16392}, {16392}, true, 1.0, true, salt += 2, true);
  check({64, 16392}, {}, false, 2.0, true, salt += 2);
  // Masked causal rows of a block each (on CUDA 2048 and 3000 f32 columns take blocks of 128 and
  // 192 threads, the 16-bit ones a resident grid whose blocks step through query indices), with
  // a mask of their own shape; Lq < Lk leaves every row some visible columns.
  check({2, 2048, 2048}, {2048, 2048}, true, 0.5, true, salt += 2, true);
  check({2, 1100, 3000}, {1100, 3000}, true, 1.0, true, salt += 2);
  // Scales of either sign and zero under the causal rule: hidden columns give 0 (log: -inf)
  // whatever scale * x would be. Rows of 256 and 2048 put the edge of the visible columns in
  // every lane and every vector of the CUDA kernels' chunks; a fully hidden row runs too (Lq > Lk).
  for (const double scale : {-1.5, 0.0}) {
    check({2, 256, 256}, {256, 256}, true, scale, true, salt += 2, true);
    check({2048, 2048}, {}, false, scale, true, salt += 2);
    check({20, 16}, {}, false, scale, true, salt += 2);
  }
}

TEST_P(SoftmaxTest, FullyMaskedRows) {
  const Shape shape{3, 37};
  Tensor x = tensor(shape), mask = tensor({3, 1}), out = tensor(shape);
  fill(x, dtype(), 3 * 37, seed(300));
  kf_test::upload(mask, {0.0, -INFINITY, 1.0});
  for (bool log : {false, true}) {
    kf_test::poison(out);
    KF_ASSERT_OK((log ? kf_log_softmax : kf_fused_softmax)(ctx(), x, mask, out, 1.0, 0, nullptr));
    const auto got = kf_test::download(out);
    for (int64_t c = 0; c < 37; ++c) {
      const double v = got[static_cast<size_t>(37 + c)];
      if (log)
        EXPECT_TRUE(std::isinf(v) && v < 0) << "log_softmax of a hidden row: " << v;
      else
        EXPECT_EQ(v, 0.0) << "softmax of a hidden row";
    }
    EXPECT_FALSE(std::isnan(got[0]));
  }
}

// A NaN logit makes its whole row NaN, also where every other logit is hidden (-inf): such rows
// gave 0 (log: -inf), as if fully masked, because the row's maximum skipped the NaN. Row 0: one
// NaN among finite logits; row 1: one NaN, the rest hidden by the mask; row 2: one NaN, the rest
// -inf in x; row 3: fully hidden by the mask (0, log -inf); row 4: finite. Without the mask (the
// CUDA kernels' mask-free forms: the scale folded into the exponent, the vector streaming rows,
// the grid-group rows) rows 1 and 3 are finite but for row 1's NaN. Lengths of every regime (on
// CUDA: warp and block rows, staged rows over a cluster, grid-group rows from 524288 (f32) and
// 1048576 (16-bit) on), the NaN at the start, in the middle and at the end.
TEST_P(SoftmaxTest, NanLogitsReachTheirRow) {
  const int64_t grid_length = dtype() == KF_DTYPE_FLOAT32 ? 524288 : 1048576;
  for (const int64_t length : {int64_t{37}, int64_t{1024}, int64_t{5000}, int64_t{10000},
                               int64_t{40000}, int64_t{262144}, grid_length}) {
    for (const int64_t at : {int64_t{0}, length / 2 + 1, length - 1}) {
      const Shape shape{5, length};
      Tensor x = tensor(shape), mask = tensor(shape), out = tensor(shape);
      std::vector<double> xv = fill(x, dtype(), static_cast<size_t>(5 * length), seed(380 + at));
      std::vector<double> mv(xv.size(), 0.0);
      auto element = [&](int64_t row, int64_t c) { return static_cast<size_t>(row * length + c); };
      for (int64_t c = 0; c < length; ++c) {
        mv[element(1, c)] = -INFINITY;
        xv[element(2, c)] = -INFINITY;
        mv[element(3, c)] = -INFINITY;
      }
      for (int64_t row = 0; row < 3; ++row) xv[element(row, at)] = NAN;
      mv[element(1, at)] = 0.0;
      kf_test::upload(x, xv);
      kf_test::upload(mask, mv);
      for (bool masked : {true, false}) {
        for (bool log : {false, true}) {
          SCOPED_TRACE(std::string(dtype_name(dtype())) + " rows of " + std::to_string(length) +
                       ", NaN at " + std::to_string(at) + (masked ? ", masked" : "") +
                       (log ? " log" : ""));
          kf_test::poison(out);
          KF_ASSERT_OK((log ? kf_log_softmax : kf_fused_softmax)(
              ctx(), x, masked ? mask.t : nullptr, out, 1.0, 0, nullptr));
          const auto got = kf_test::download(out);
          size_t not_nan = 0, wrong_hidden = 0;
          double sum3 = 0, sum4 = 0;
          for (int64_t c = 0; c < length; ++c) {
            for (int64_t row = 0; row < 3; ++row)
              not_nan += std::isnan(got[element(row, c)]) ? 0 : 1;
            const double y3 = got[element(3, c)], y4 = got[element(4, c)];
            if (masked) wrong_hidden += (log ? std::isinf(y3) && y3 < 0 : y3 == 0.0) ? 0 : 1;
            sum3 += log ? std::exp(y3) : y3;
            sum4 += log ? std::exp(y4) : y4;
          }
          EXPECT_EQ(not_nan, 0u) << "outputs of the rows holding a NaN that are not NaN";
          if (masked) {
            EXPECT_EQ(wrong_hidden, 0u) << "outputs of the fully hidden row";
          } else {
            EXPECT_NEAR(sum3, 1.0, 0.05) << "row 3's probabilities";
          }
          EXPECT_NEAR(sum4, 1.0, 0.05) << "the finite row's probabilities";
        }
      }
    }
  }
}

// Long rows (on CUDA a cluster of blocks per row: 3 blocks for f32, 2 for 16-bit rows) whose
// blocks see different things: a row with no mask, a fully masked row, and a row hidden for its
// first two thirds, so that some blocks see only -inf while the others hold the row's maximum
// and sum.
TEST_P(SoftmaxTest, MaskedBlocksOfLongRows) {
  const int64_t length = 40000;
  const Shape shape{3, length};
  Tensor x = tensor(shape), mask = tensor(shape), out = tensor(shape);
  const auto xv = fill(x, dtype(), static_cast<size_t>(3 * length), seed(350));
  std::vector<double> mv(static_cast<size_t>(3 * length), 0.0);
  for (int64_t c = 0; c < length; ++c) {
    mv[static_cast<size_t>(length + c)] = -INFINITY;
    mv[static_cast<size_t>(2 * length + c)] = c < 2 * length / 3 ? -INFINITY : 1.0;
  }
  kf_test::upload(mask, mv);
  for (bool log : {false, true}) {
    kf_test::poison(out);
    KF_ASSERT_OK((log ? kf_log_softmax : kf_fused_softmax)(ctx(), x, mask, out, 0.5, 0, nullptr));
    expect_softmax_close(kf_test::download(out), softmax_ref(xv, shape, mv, shape, 0.5, false, log),
                         length, dtype(), log, log ? "log softmax" : "softmax");
  }
}

// The same without a mask, from x itself (on CUDA f32 and 16-bit rows are staged over a
// cluster: rows of 40000 take 3 blocks in f32 and 2 in 16-bit, rows of 262144 16 and 8): a row
// of -inf, a row that is -inf for its first two thirds, and a row whose blocks' maxima lie far
// apart (the first third near +40, the rest near -40), so that each block's sum of exp, taken
// about its own maximum, is rescaled to the row's by a factor far from 1 (or by 0, where a block
// saw only -inf).
TEST_P(SoftmaxTest, InfiniteAndDistantBlocksOfLongRows) {
  for (const int64_t length : {int64_t{40000}, int64_t{262144}}) {
    const Shape shape{4, length};
    Tensor x = tensor(shape), out = tensor(shape);
    std::vector<double> xv = fill(x, dtype(), static_cast<size_t>(4 * length), seed(360 + length));
    for (int64_t c = 0; c < length; ++c) {
      xv[static_cast<size_t>(length + c)] = -INFINITY;
      if (c < 2 * length / 3) xv[static_cast<size_t>(2 * length + c)] = -INFINITY;
      xv[static_cast<size_t>(3 * length + c)] += c < length / 3 ? 40.0 : -40.0;
    }
    xv = kf_test::round_to_dtype(xv, dtype());
    kf_test::upload(x, xv);
    for (bool log : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(dtype())) + " rows of " + std::to_string(length) +
                   (log ? " log" : ""));
      kf_test::poison(out);
      KF_ASSERT_OK(
          (log ? kf_log_softmax : kf_fused_softmax)(ctx(), x, nullptr, out, 1.0, 0, nullptr));
      expect_softmax_close(kf_test::download(out), softmax_ref(xv, shape, {}, {}, 1.0, false, log),
                           length, dtype(), log, log ? "log softmax" : "softmax");
    }
  }
}

// Logits far from 0 (x in [1976, 2024]), in every regime: the exps are taken about maxima near
// 2000 and -1500, so each shift of the exponent, and each rescale of a block's or a warp's sum
// to the row's maximum, has to hold their low bits (on CUDA the 16-bit kernels fold log2 e and
// the scale into one multiply-add about the maximum's rounded product), and the log-softmax has
// to take v - max before it subtracts the log of the sum (v - (max + log sum) is off by up to
// 6e-5 in f32 there). The longest rows take the grid-group kernel (CUDA). The scale -0.75 runs
// about 200 in f32: the scaled logit is rounded to f32 before the softmax (as the CPU backend and
// a scale-then-softmax in f32 do), up to ulp(1500) / 2 = 6e-5 near 2000, above f32's tolerance.
TEST_P(SoftmaxTest, LogitsFarFromZero) {
  std::vector<int64_t> lengths{1000, 16384, 40000, 262144};
  if (kf_test::device_under_test() == KF_DEVICE_CUDA)
    lengths.push_back(dtype() == KF_DTYPE_FLOAT32 ? 524288 : 1048576);
  for (const int64_t length : lengths) {
    const Shape shape{3, length};
    const uint64_t s = seed(4200 + static_cast<uint64_t>(length));
    Tensor x = tensor(shape), out = tensor(shape);
    for (const double scale : {1.0, -0.75}) {
      const double center = dtype() == KF_DTYPE_FLOAT32 && scale != 1.0 ? 200 : 2000;
      std::vector<double> xv = kf_test::random_values(static_cast<size_t>(3 * length), s, -3, 3);
      for (double& v : xv) v = center + 8 * v;
      xv = kf_test::round_to_dtype(xv, dtype());
      kf_test::upload(x, xv);
      for (bool log : {false, true}) {
        const std::string what = std::string(dtype_name(dtype())) + " rows of " +
                                 std::to_string(length) + " about " + std::to_string(center) +
                                 " scale " + std::to_string(scale) + (log ? " log" : "") +
                                 " (seed " + std::to_string(s) + ")";
        kf_test::poison(out);
        KF_ASSERT_OK(
            (log ? kf_log_softmax : kf_fused_softmax)(ctx(), x, nullptr, out, scale, 0, nullptr));
        expect_softmax_close(kf_test::download(out),
                             softmax_ref(xv, shape, {}, {}, scale, false, log), length, dtype(),
                             log, what);
      }
    }
  }
}

TEST_P(SoftmaxTest, StridedAndInPlace) {
  const uint64_t s = seed(400);
  // x: [3,5,33] view of [5,3,40] (leading dims transposed, offset rows); out: column stride 2.
  Tensor x_base = tensor({5, 3, 40});
  Tensor x = make_view(x_base, dtype(), {3, 5, 33}, {40, 120, 1}, 2);
  Tensor out_base = tensor({3, 5, 66});
  Tensor out = make_view(out_base, dtype(), {3, 5, 33}, {330, 66, 2}, 1);
  Tensor mask_base = tensor({5, 34});
  Tensor mask = make_view(mask_base, dtype(), {5, 33}, {34, 1}, 1);
  const auto xv = gather(fill(x_base, dtype(), 600, s), view_offsets({3, 5, 33}, {40, 120, 1}, 2));
  const auto mv = gather(fill(mask_base, dtype(), 170, s + 1), view_offsets({5, 33}, {34, 1}, 1));
  kf_test::poison(out_base);
  KF_ASSERT_OK(kf_fused_softmax(ctx(), x, mask, out, 0.9, 1, nullptr));
  expect_softmax_close(kf_test::download(out),
                       softmax_ref(xv, {3, 5, 33}, mv, {5, 33}, 0.9, true, false), 33, dtype(),
                       false, "strided softmax");
  const auto whole = kf_test::download(out_base);
  std::vector<bool> inside(whole.size(), false);
  for (int64_t o : view_offsets({3, 5, 33}, {330, 66, 2}, 1)) inside[static_cast<size_t>(o)] = true;
  for (size_t i = 0; i < whole.size(); ++i)
    if (!inside[i]) {
      EXPECT_TRUE(std::isnan(whole[i])) << "element " << i << " outside out written";
    }

  for (int64_t length : {33, 4097, 40000}) {
    Tensor y = tensor({3, length});
    const auto yv = fill(y, dtype(), static_cast<size_t>(3 * length), s + length);
    KF_ASSERT_OK(kf_log_softmax(ctx(), y, nullptr, y, 1.0, 0, nullptr));
    kf_test::expect_close(kf_test::download(y),
                          softmax_ref(yv, {3, length}, {}, {}, 1.0, false, true),
                          kf_test::tolerance(dtype()), "log softmax in place");
  }
}

// Leading dims that cannot merge, with dense rows (x a [3,5,L] view of a [5,3,L'] base, out
// transposed the other way, a [5,L] mask with padded rows): the register-cached kernels find
// each row through the multi-dim row offset (core/ops/rows/rows.hpp), with the causal rule on.
// Lengths 64 and 1024 take the 16-byte vector path, 33 (rows at an odd offset) the scalar one,
// 40000 the staged path with a cluster of blocks per row (f32, f16, bf16); each length also
// without the mask, through those kernels' unmasked forms.
TEST_P(SoftmaxTest, LeadingDimsThatDoNotMerge) {
  for (const int64_t length : {int64_t{64}, int64_t{1024}, int64_t{33}, int64_t{40000}}) {
    const uint64_t s = seed(450 + static_cast<uint64_t>(length));
    SCOPED_TRACE(std::string(dtype_name(dtype())) + " rows of " + std::to_string(length) +
                 " (seed " + std::to_string(s) + ")");
    const int64_t pitch = length % 8 == 0 ? length + 8 : length + 3;
    const int64_t offset = length % 8 == 0 ? 0 : 1;
    const Shape shape = {3, 5, length};
    const Shape x_strides = {pitch, 3 * pitch, 1};
    const Shape o_strides = {length, 3 * length, 1};
    const Shape m_strides = {pitch, 1};
    Tensor x_base = tensor({5, 3, pitch}), out_base = tensor({5, 3, length});
    Tensor mask_base = tensor({5, pitch});
    Tensor x = make_view(x_base, dtype(), shape, x_strides, offset);
    Tensor out = make_view(out_base, dtype(), shape, o_strides, 0);
    Tensor mask = make_view(mask_base, dtype(), {5, length}, m_strides, offset);
    const auto xv = gather(fill(x_base, dtype(), static_cast<size_t>(15 * pitch), s),
                           view_offsets(shape, x_strides, offset));
    const auto mv = gather(fill(mask_base, dtype(), static_cast<size_t>(5 * pitch), s + 1),
                           view_offsets({5, length}, m_strides, offset));
    for (const bool log : {false, true}) {
      kf_test::poison(out_base);
      KF_ASSERT_OK(log ? kf_log_softmax(ctx(), x, mask, out, 0.75, 1, nullptr)
                       : kf_fused_softmax(ctx(), x, mask, out, 0.75, 1, nullptr));
      expect_softmax_close(gather(kf_test::download(out_base), view_offsets(shape, o_strides, 0)),
                           softmax_ref(xv, shape, mv, {5, length}, 0.75, true, log), length,
                           dtype(), log, log ? "log softmax" : "softmax");
    }
    // Without the mask or the causal rule (on CUDA, the kernels' unmasked instantiations).
    kf_test::poison(out_base);
    KF_ASSERT_OK(kf_fused_softmax(ctx(), x, nullptr, out, 0.75, 0, nullptr));
    expect_softmax_close(gather(kf_test::download(out_base), view_offsets(shape, o_strides, 0)),
                         softmax_ref(xv, shape, {}, {}, 0.75, false, false), length, dtype(), false,
                         "softmax without a mask");
  }
}

// Short rows, many of them (on CUDA: 16-bit rows of 33..64 of 16-byte vectors take two lanes a
// row on issue-lean GPUs such as the H200 and four elsewhere; the 16-bit rows run on a resident
// grid whose blocks walk two or more groups of rows here, the last group ragged; f32 and f64 and
// the 16-bit rows of narrower vectors take with_tile_policy's policies); softmax and log-softmax
// with a scale, and softmax in place.
TEST_P(SoftmaxTest, ShortRowsOverManySteps) {
  uint64_t salt = 2600;
  const bool cuda = kf_test::device_under_test() == KF_DEVICE_CUDA;
  for (int64_t length : {40, 48, 56, 64, 36, 60, 34}) {
    check({cuda ? 100003 : 301, length}, {}, false, 0.75, false, salt += 2);
    const int64_t rows = cuda ? 50001 : 101;
    const uint64_t s = seed(salt += 2);
    SCOPED_TRACE(std::string(dtype_name(dtype())) + " in place, rows of " + std::to_string(length));
    Tensor x = tensor({rows, length});
    const auto xv = fill(x, dtype(), static_cast<size_t>(rows * length), s);
    KF_ASSERT_OK(kf_fused_softmax(ctx(), x, nullptr, x, 1.0, 0, nullptr));
    expect_softmax_close(kf_test::download(x),
                         softmax_ref(xv, {rows, length}, {}, {}, 1.0, false, false), length,
                         dtype(), false, "softmax in place");
  }
}

// Row lengths on both sides of the CUDA backend's regime boundaries (see norm_test.cpp), with
// and without masks and the causal rule, plus rows whose starts are not 16-byte aligned.
TEST_P(SoftmaxTest, RegimeBoundaries) {
  uint64_t salt = 900;
  for (int64_t length :
       {2,     8,     31,    32,    33,    64,    520,   766,   768,   776,   1023,
        1024,  1025,  1536,  1537,  1544,  2048,  2049,  2100,  2560,  2561,  3072,
        3073,  4096,  4104,  5120,  5128,  6144,  6152,  8192,  8193,  10240, 10248,
        12288, 12296, 16383, 16384, 16385, 16388, 32768, 32776, 65544, 262144}) {
    check({3, length}, {}, false, 1.0, false, salt += 2);
    check({2, 3, length}, {3, length}, true, 0.5, true, salt += 2, true);
  }
  check({1000, 64}, {64}, true, 1.0, false, salt += 2);
  // Rows of 4097..5120 (on an H200, f32 rows of 4609..5120 take 320-thread blocks) over more rows
  // than the resident grid holds blocks, log-softmax and a scale included.
  check({900, 5000}, {}, false, 0.75, false, salt += 2);
  check({900, 4104}, {}, false, 1.0, false, salt += 2);
  // Rows of 8193..12288 of 16-byte vectors over more rows than the resident grid holds blocks
  // (f32 rows of 10241..12288: 512 threads at 32 elements on an H200, at 24 on an H100).
  check({300, 8200}, {}, false, 1.0, false, salt += 2);
  check({300, 11000}, {}, false, 0.75, false, salt += 2);
  check({300, 10000}, {}, false, 0.5, false, salt += 2);
  check({300, 10248}, {}, false, 1.0, true, salt += 2);
  check({300, 12288}, {}, false, 1.0, false, salt += 2);
  check({4, 200, 128}, {}, false, 0.125, true, salt += 2);

  for (int64_t length : {32, 1024, 4096}) {
    const uint64_t s = seed(1200 + length);
    SCOPED_TRACE(std::string(dtype_name(dtype())) + " unaligned " + std::to_string(length));
    const int64_t rows = 5, pitch = length + 1;
    Tensor x_base = tensor({rows, pitch}), out_base = tensor({rows, pitch});
    Tensor x = make_view(x_base, dtype(), {rows, length}, {pitch, 1}, 1);
    Tensor out = make_view(out_base, dtype(), {rows, length}, {pitch, 1}, 1);
    const auto offsets = view_offsets({rows, length}, {pitch, 1}, 1);
    const auto xv = gather(fill(x_base, dtype(), static_cast<size_t>(rows * pitch), s), offsets);
    kf_test::poison(out_base);
    KF_ASSERT_OK(kf_fused_softmax(ctx(), x, nullptr, out, 1.0, 0, nullptr));
    expect_softmax_close(gather(kf_test::download(out_base), offsets),
                         softmax_ref(xv, {rows, length}, {}, {}, 1.0, false, false), length,
                         dtype(), false, "softmax unaligned");
  }
}

// Rows that fill 8- or 4-byte vectors but not 16-byte ones (see norm_test.cpp's
// RowsOfNarrowVectors, with the longer rows of the streaming kernel's dense forms), with and
// without a mask and the causal rule, long rows in place and out of phase, and rows that start on
// 8-byte but not 16-byte boundaries (a pitch of length + 4).
TEST_P(SoftmaxTest, RowsOfNarrowVectors) {
  uint64_t salt = 2300;
  for (int64_t length : {4,    6,    12,   60,   100,  250,   516,   700,   1020,  1100,  2100,
                         3004, 4100, 5002, 6148, 8196, 10236, 12500, 16380, 16382, 30522, 50257}) {
    check({3, length}, {}, false, 1.0, false, salt += 2);
    check({2, 3, length}, {3, length}, true, 0.5, true, salt += 2, true);
  }
  check({300, 100}, {100}, true, 1.0, false, salt += 2);
  // Long rows without a mask (on CUDA, the streaming kernel's vector form): causal, several rows
  // a block on some devices, and in place, log-softmax included.
  check({2, 3, 50257}, {}, false, 0.5, true, salt += 2);
  check({kf_test::device_under_test() == KF_DEVICE_CUDA ? 700 : 20, 16388}, {}, false, 1.0, false,
        salt += 2);
  for (int64_t length : {16386, 30522, 50257}) {
    Tensor y = tensor({5, length});
    const auto yv = fill(y, dtype(), static_cast<size_t>(5 * length), seed(salt += 2));
    KF_ASSERT_OK(kf_log_softmax(ctx(), y, nullptr, y, 1.0, 0, nullptr));
    kf_test::expect_close(kf_test::download(y),
                          softmax_ref(yv, {5, length}, {}, {}, 1.0, false, true),
                          kf_test::tolerance(dtype()), "long log softmax in place");
  }
  // Long rows whose x and out start at different distances from a 16-byte boundary (x at offset
  // 1 of a pitch of length + 1, out dense): on CUDA, one element a load.
  {
    const int64_t rows = 5, length = 20001, pitch = length + 1;
    const uint64_t s = seed(salt += 2);
    SCOPED_TRACE(std::string(dtype_name(dtype())) + " long rows, x and out out of phase");
    Tensor x_base = tensor({rows, pitch}), out = tensor({rows, length});
    Tensor x = make_view(x_base, dtype(), {rows, length}, {pitch, 1}, 1);
    const auto xv = gather(fill(x_base, dtype(), static_cast<size_t>(rows * pitch), s),
                           view_offsets({rows, length}, {pitch, 1}, 1));
    kf_test::poison(out);
    KF_ASSERT_OK(kf_fused_softmax(ctx(), x, nullptr, out, 1.0, 0, nullptr));
    expect_softmax_close(kf_test::download(out),
                         softmax_ref(xv, {rows, length}, {}, {}, 1.0, false, false), length,
                         dtype(), false, "softmax out of phase");
  }

  for (int64_t length : {64, 1000, 4096, 4098}) {
    const uint64_t s = seed(2400 + length);
    SCOPED_TRACE(std::string(dtype_name(dtype())) + " 8-byte row starts " + std::to_string(length));
    const int64_t rows = 6, pitch = length + 4;
    Tensor x_base = tensor({rows, pitch}), out_base = tensor({rows, pitch});
    Tensor x = make_view(x_base, dtype(), {rows, length}, {pitch, 1}, 0);
    Tensor out = make_view(out_base, dtype(), {rows, length}, {pitch, 1}, 0);
    const auto offsets = view_offsets({rows, length}, {pitch, 1}, 0);
    const auto xv = gather(fill(x_base, dtype(), static_cast<size_t>(rows * pitch), s), offsets);
    kf_test::poison(out_base);
    KF_ASSERT_OK(kf_fused_softmax(ctx(), x, nullptr, out, 1.0, 0, nullptr));
    const auto whole = kf_test::download(out_base);
    expect_softmax_close(gather(whole, offsets),
                         softmax_ref(xv, {rows, length}, {}, {}, 1.0, false, false), length,
                         dtype(), false, "softmax 8-byte row starts");
    std::vector<bool> inside(whole.size(), false);
    for (int64_t o : offsets) inside[static_cast<size_t>(o)] = true;
    for (size_t i = 0; i < whole.size(); ++i)
      if (!inside[i]) {
        EXPECT_TRUE(std::isnan(whole[i])) << "element " << i << " outside out written";
      }
  }
}

// Rows longer than 16384 whose x and out start equally far from a 16-byte boundary, row by row,
// but whose rows do not all start on one (on CUDA, staged from each row's first 16-byte boundary:
// the few head columns before it and the partial vector at the row's end are taken apart):
// dense vocabulary rows, more of them than a GPU holds clusters at once; views at offsets 1 and 3
// of a wider pitch, where nothing between the rows may be written, with -inf over a row's head
// columns, its last columns, and a whole row; and in place.
TEST_P(SoftmaxTest, LongRowsOffTheirVectors) {
  const bool cuda = kf_test::device_under_test() == KF_DEVICE_CUDA;
  uint64_t salt = 2600;
  for (int64_t length : {16390, 30522, 50257})
    check({cuda && length > 16390 ? 240 : 4, length}, {}, false, 1.0, false, salt += 2);
  for (int64_t offset : {1, 3}) {
    for (int64_t length : {20001, 30522}) {
      const int64_t rows = cuda ? 60 : 5, pitch = length + 5;
      const uint64_t s = seed(salt += 2);
      const std::string what = std::string(dtype_name(dtype())) + " rows of " +
                               std::to_string(length) + " at offset " + std::to_string(offset) +
                               " (seed " + std::to_string(s) + ")";
      SCOPED_TRACE(what);
      Tensor x_base = tensor({rows, pitch}), out_base = tensor({rows, pitch});
      Tensor x = make_view(x_base, dtype(), {rows, length}, {pitch, 1}, offset);
      Tensor out = make_view(out_base, dtype(), {rows, length}, {pitch, 1}, offset);
      std::vector<double> base = kf_test::round_to_dtype(
          kf_test::random_values(static_cast<size_t>(rows * pitch), s), dtype());
      for (int64_t c = 0; c < 5; ++c) base[static_cast<size_t>(offset + c)] = -INFINITY;
      for (int64_t c = length - 5; c < length; ++c)
        base[static_cast<size_t>(pitch + offset + c)] = -INFINITY;
      for (int64_t c = 0; c < length; ++c)
        base[static_cast<size_t>(2 * pitch + offset + c)] = -INFINITY;
      kf_test::upload(x_base, base);
      const auto offsets = view_offsets({rows, length}, {pitch, 1}, offset);
      const auto xv = gather(base, offsets);
      for (bool log : {false, true}) {
        kf_test::poison(out_base);
        KF_ASSERT_OK(
            (log ? kf_log_softmax : kf_fused_softmax)(ctx(), x, nullptr, out, 1.0, 0, nullptr));
        const auto whole = kf_test::download(out_base);
        expect_softmax_close(gather(whole, offsets),
                             softmax_ref(xv, {rows, length}, {}, {}, 1.0, false, log), length,
                             dtype(), log, what + (log ? " log" : ""));
        std::vector<bool> inside(whole.size(), false);
        for (int64_t o : offsets) inside[static_cast<size_t>(o)] = true;
        size_t written = 0;
        for (size_t i = 0; i < whole.size(); ++i) written += !inside[i] && !std::isnan(whole[i]);
        EXPECT_EQ(written, 0u) << what << ": elements outside out written";
      }
    }
  }
  for (bool log : {false, true}) {
    const int64_t rows = cuda ? 100 : 4, length = 50257, pitch = length + 3;
    const uint64_t s = seed(salt += 2);
    SCOPED_TRACE(std::string(dtype_name(dtype())) + " rows of 50257 in place" +
                 (log ? " log" : "") + " (seed " + std::to_string(s) + ")");
    Tensor y_base = tensor({rows, pitch});
    Tensor y = make_view(y_base, dtype(), {rows, length}, {pitch, 1}, 2);
    const auto offsets = view_offsets({rows, length}, {pitch, 1}, 2);
    const auto yv = gather(fill(y_base, dtype(), static_cast<size_t>(rows * pitch), s), offsets);
    KF_ASSERT_OK((log ? kf_log_softmax : kf_fused_softmax)(ctx(), y, nullptr, y, 1.0, 0, nullptr));
    expect_softmax_close(gather(kf_test::download(y_base), offsets),
                         softmax_ref(yv, {rows, length}, {}, {}, 1.0, false, log), length, dtype(),
                         log, "in place");
  }
}

// More rows of a block each than a resident grid holds blocks, so blocks go on to further rows,
// with and without a mask: rows of 5120 and 6144 (f32, f16, bf16 without a mask: 256 threads a
// row at 24 elements a thread, of which 5120 fills five sixths) and of 8192 (512 threads a row,
// two blocks per SM on some devices).
TEST_P(SoftmaxTest, BlockRowsOverManySteps) {
  const int64_t rows = kf_test::device_under_test() == KF_DEVICE_CUDA ? 600 : 40;
  check({rows, 5120}, {}, false, 1.0, false, 1898);
  check({rows, 6144}, {}, false, 1.0, false, 1900);
  check({rows, 8192}, {}, false, 0.5, false, 1902);
  check({2, rows / 2, 8192}, {rows / 2, 8192}, true, 1.0, false, 1904);
  // Rows of 32 elements a thread over a block (on CUDA, 16-bit rows of 2561..4096 and
  // 8193..16384, which hold the next row's loads while working on one, or stage three rows
  // ahead in shared memory), walked over more than two rows a block; causal without a mask too.
  const bool cuda = kf_test::device_under_test() == KF_DEVICE_CUDA;
  check({cuda ? 1500 : 40, 3000}, {}, false, 1.0, false, 1906);
  check({cuda ? 1500 : 40, 4096}, {}, false, 0.5, false, 1908);
  check({cuda ? 400 : 20, 16384}, {}, false, 1.0, false, 1910);
  check({2, cuda ? 200 : 10, 16384}, {}, false, 1.0, true, 1912);
  // 16-bit rows of 8193..12288 at 24 elements a thread over 512 threads, which (as the rows of
  // 16384) stage three rows ahead in shared memory on devices that take the staging: more than
  // three rows a block, causal too, and a scale that is not 1.
  check({cuda ? 700 : 20, 12288}, {}, false, 0.75, false, 1914);
  check({2, cuda ? 350 : 10, 12288}, {}, false, 1.0, true, 1916);
  check({cuda ? 700 : 20, 8200}, {}, false, 1.0, false, 1918);
}

// Rows of 16385..32768 elements, which CUDA stages in 16-bit types by one block in one rolling
// buffer (32..64 KiB: rows::StagedPolicy::rolling_row_bytes): more rows than a GPU holds blocks
// at once, so that each block restages the next row slot by slot; with a mask and the causal
// rule; in f32 and f64, the register-cached or streaming kernels.
TEST_P(SoftmaxTest, RowsOfOneRollingBuffer) {
  const bool cuda = kf_test::device_under_test() == KF_DEVICE_CUDA;
  uint64_t salt = 2800;
  for (int64_t length : {16392, 24000, 32768}) {
    check({cuda ? 400 : 3, length}, {}, false, 1.0, false, salt += 2);
    check({2, cuda ? 200 : 2, length}, {cuda ? 200 : 2, length}, true, 0.5, true, salt += 2, true);
  }
}

// More rows past 64 KiB than a GPU holds clusters at once (on CUDA, several waves of clusters).
TEST_P(SoftmaxTest, ManyLongRows) {
  check({40, 65544}, {}, false, 1.0, false, 1950);
  check({20, 262144}, {}, false, 0.5, false, 1952);
}

// More long rows than a GPU holds clusters at once: on CUDA the clusters stay resident and walk
// the rows, each block restaging its slice of the next row as it finishes the current one (see
// NormTest.RowsPerResidentCluster). CUDA only: the CPU backend has no such loop.
TEST_P(SoftmaxTest, RowsPerResidentCluster) {
  if (kf_test::device_under_test() != KF_DEVICE_CUDA)
    GTEST_SKIP() << "the resident-cluster loop is of the CUDA backend";
  check({64, 262144}, {}, false, 0.75, false, 2950);
  check({2, 32, 262144}, {1, 262144}, true, 1.0, false, 2953, true);
}

// Rows without a mask longer than a cluster holds: on CUDA (sm_90) the grid-group kernel (a
// cooperative grid, each row over a group of blocks, the blocks' maxima and sums of exp exchanged
// through global memory): fewer rows than the grid holds groups and more, groups of 64 and 128
// blocks, scales of either sign, softmax and log-softmax, rows of -inf (0 / -inf, not NaN), in
// place. CUDA only, as RowsPerResidentCluster.
// The grid-group kernel takes the rows longer than a cluster holds (2 MiB: f32 rows of 524288,
// 16-bit rows of 1048576), and on the H100 16-bit rows of 32768..524288 and f32 rows of 65536
// and 131072 (softmax/cuda_staged.cuh, grid_before_clusters); the f32 rows of 262144 check the
// clusters' side of that line (the 16-bit ones: on the H200), as do the f32 rows of 32768 and
// 49152 in GridGroupRows. Two tests, so that the GPU proof's sanitizer shards (.ci/gpu.sh) can
// split them.
TEST_P(SoftmaxTest, GridGroupRowsBelowTheLine) {
  if (kf_test::device_under_test() != KF_DEVICE_CUDA)
    GTEST_SKIP() << "the grid-group rows are a form of the CUDA backend";
  check({3, 262144}, {}, false, 1.0, false, 3002);
  check({70, 262144}, {}, false, -0.75, false, 3004);
}

TEST_P(SoftmaxTest, GridGroupRows) {
  if (kf_test::device_under_test() != KF_DEVICE_CUDA)
    GTEST_SKIP() << "the grid-group rows are a form of the CUDA backend";
  uint64_t salt = 3004;
  for (int64_t length : {int64_t{524288}, int64_t{1048576}}) {
    check({3, length}, {}, false, 1.0, false, salt += 2);
    check({12, length}, {}, false, -0.75, false, salt += 2);
  }
  // The shorter rows the H100 hands it (8 and 16 blocks a row in f32, 2, 3, 4 and 8 in 16-bit;
  // the clusters elsewhere): more rows than an H100's grid holds groups of them (264 resident
  // blocks: 132 groups of two, 88 of three, 66 of four), and fewer.
  for (int64_t length : {int64_t{32768}, int64_t{49152}, int64_t{65536}, int64_t{131072}}) {
    check({length < 65536 ? 140 : 70, length}, {}, false, 1.0, false, salt += 2);
    check({5, length}, {}, false, -0.75, false, salt += 2);
  }
  // A row of nothing but -inf between ordinary rows, and a row whose first 16384 values (the
  // whole shares of its first blocks, so warps and blocks that see only -inf) are -inf.
  const int64_t rows = 5, length = dtype() == KF_DTYPE_FLOAT32 ? 524288 : 1048576;
  const uint64_t s = seed(salt += 2);
  SCOPED_TRACE("rows of -inf (seed " + std::to_string(s) + ")");
  Tensor x = tensor({rows, length}), out = tensor({rows, length});
  std::vector<double> xv = fill(x, dtype(), static_cast<size_t>(rows * length), s);
  for (int64_t c = 0; c < length; ++c) xv[static_cast<size_t>(2 * length + c)] = -INFINITY;
  for (int64_t c = 0; c < 16384; ++c) xv[static_cast<size_t>(3 * length + c)] = -INFINITY;
  kf_test::upload(x, xv);
  for (bool log : {false, true}) {
    kf_test::poison(out);
    auto fn = log ? kf_log_softmax : kf_fused_softmax;
    KF_ASSERT_OK(fn(ctx(), x, nullptr, out, 1.0, false, nullptr));
    expect_softmax_close(kf_test::download(out),
                         softmax_ref(xv, {rows, length}, {}, Shape{}, 1.0, false, log), length,
                         dtype(), log, log ? "rows of -inf, log" : "rows of -inf");
  }
  // In place: out is x.
  KF_ASSERT_OK(kf_fused_softmax(ctx(), x, nullptr, x, 1.0, false, nullptr));
  expect_softmax_close(kf_test::download(x),
                       softmax_ref(xv, {rows, length}, {}, Shape{}, 1.0, false, false), length,
                       dtype(), false, "in place");
}

INSTANTIATE_TEST_SUITE_P(AllTypes, SoftmaxTest, row_test::float_dtypes(),
                         row_test::dtype_param_name);

class SoftmaxErrors : public row_test::DeviceTest {};

TEST_F(SoftmaxErrors, EveryPath) {
  Tensor x = tensor({4, 6}), out = tensor({4, 6}), mask = tensor({6}), out_other = tensor({4, 6});
  kf_test::poison(out);
  for (auto fn : {kf_fused_softmax, kf_log_softmax}) {
    KF_EXPECT_ERR(fn(ctx(), x, mask, out, NAN, 0, nullptr), KF_ERROR_INVALID_ARGUMENT);
    KF_EXPECT_ERR(fn(ctx(), x, mask, out, INFINITY, 0, nullptr), KF_ERROR_INVALID_ARGUMENT);
    // Finite in f32 too, which f32 data is computed in (1e300 x: NaN); f64 data takes it.
    KF_EXPECT_ERR(fn(ctx(), x, mask, out, 1e300, 0, nullptr), KF_ERROR_INVALID_ARGUMENT);
    KF_EXPECT_ERR(fn(ctx(), x, mask, out, -1e39, 0, nullptr), KF_ERROR_INVALID_ARGUMENT);
    Tensor x64 = tensor({2, 3}, KF_DTYPE_FLOAT64), out64 = tensor({2, 3}, KF_DTYPE_FLOAT64);
    kf_test::upload(x64, {0.5, -1.0, 2.0, 1.5, 0.25, -2.0});
    kf_test::poison(out64);
    KF_ASSERT_OK(fn(ctx(), x64, nullptr, out64, 1e300, 0, nullptr));
    const std::vector<double> got64 = kf_test::download(out64);
    for (size_t i = 0; i < got64.size(); ++i) {
      // Each row's largest x takes all of it (log: 0 there, about -1e300 elsewhere).
      const bool top = i == 2 || i == 3;
      if (fn == kf_fused_softmax)
        EXPECT_EQ(got64[i], top ? 1.0 : 0.0) << "element " << i;
      else if (top)
        EXPECT_EQ(got64[i], 0.0) << "element " << i;
      else
        EXPECT_LT(got64[i], -1e299) << "element " << i;
    }
    Tensor mask_bad = tensor({4, 5}), mask_big = tensor({2, 4, 6}), out_bad = tensor({6, 4});
    KF_EXPECT_ERR(fn(ctx(), x, mask_bad, out, 1.0, 0, nullptr), KF_ERROR_SHAPE_MISMATCH);
    KF_EXPECT_ERR(fn(ctx(), x, mask_big, out, 1.0, 0, nullptr), KF_ERROR_SHAPE_MISMATCH);
    KF_EXPECT_ERR(fn(ctx(), x, mask, out_bad, 1.0, 0, nullptr), KF_ERROR_SHAPE_MISMATCH);
    Tensor mask_f16 = tensor({6}, KF_DTYPE_FLOAT16), out_f64 = tensor({4, 6}, KF_DTYPE_FLOAT64);
    Tensor x_int = tensor({4, 6}, KF_DTYPE_INT32);
    KF_EXPECT_ERR(fn(ctx(), x, mask_f16, out, 1.0, 0, nullptr), KF_ERROR_DTYPE_MISMATCH);
    KF_EXPECT_ERR(fn(ctx(), x, mask, out_f64, 1.0, 0, nullptr), KF_ERROR_DTYPE_MISMATCH);
    KF_EXPECT_ERR(fn(ctx(), x_int, nullptr, out, 1.0, 0, nullptr), KF_ERROR_DTYPE_MISMATCH);
    Tensor big = tensor({4, 12});
    Tensor xv = make_view(big, KF_DTYPE_FLOAT32, {4, 6}, {12, 1}, 0);
    Tensor ov = make_view(big, KF_DTYPE_FLOAT32, {4, 6}, {12, 1}, 3);
    KF_EXPECT_ERR(fn(ctx(), xv, nullptr, ov, 1.0, 0, nullptr), KF_ERROR_INVALID_ARGUMENT);
    Tensor m2 = tensor({4, 6});
    KF_EXPECT_ERR(fn(ctx(), x, m2, m2, 1.0, 0, nullptr), KF_ERROR_INVALID_ARGUMENT);
    // One tensor as x and as the mask: out may be x's view, never the mask's.
    KF_EXPECT_ERR(fn(ctx(), m2, m2, m2, 1.0, 0, nullptr), KF_ERROR_INVALID_ARGUMENT);
    KF_ASSERT_OK(fn(ctx(), m2, m2, out_other, 1.0, 0, nullptr));
    // out's rows over each other: one element written twice.
    Tensor span = tensor({20});
    Tensor folded = make_view(span, KF_DTYPE_FLOAT32, {4, 6}, {4, 1}, 0);
    KF_EXPECT_ERR(fn(ctx(), x, nullptr, folded, 1.0, 0, nullptr), KF_ERROR_INVALID_ARGUMENT);
    Tensor scalar = tensor({});
    KF_EXPECT_ERR(fn(ctx(), scalar, nullptr, scalar, 1.0, 0, nullptr), KF_ERROR_INVALID_ARGUMENT);
    KF_EXPECT_ERR(fn(nullptr, x, mask, out, 1.0, 0, nullptr), KF_ERROR_INVALID_HANDLE);
    KF_EXPECT_ERR(fn(ctx(), x, mask, nullptr, 1.0, 0, nullptr), KF_ERROR_INVALID_HANDLE);
  }
  for (double v : kf_test::download(out)) EXPECT_TRUE(std::isnan(v)) << "a failing call wrote out";
  Tensor e = tensor({0, 6}), eo = tensor({0, 6});
  KF_ASSERT_OK(kf_fused_softmax(ctx(), e, nullptr, eo, 1.0, 1, nullptr));
}

}  // namespace
