// kf_fused_gelu_dropout: the Philox generator against the published Random123 known answers, the
// mask against one computed here from that generator (keep element i when u >= p), values
// against float64 GELU references, the kept fraction within 5 sigma, determinism per
// (seed, offset), strided views, in place, inference mode, and every error path. The CUDA build
// also compares every CUDA mask with the CPU backend's for the same seed and offset.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/math/philox.hpp"
#include "tests/common/test_util.hpp"
#include "tests/ops/row_test_util.hpp"

namespace {

using kf_test::Tensor;
using row_test::base_seed;
using row_test::dtype_name;
using row_test::fill;
using row_test::make_view;
using row_test::shape_str;
using row_test::view_offsets;
using Shape = std::vector<int64_t>;

double gelu(double x) { return row_test::reference_activation(KF_ACTIVATION_GELU, x); }

// The documented rule: element i keeps when v * 2^-16 >= p, v the low (even i) or high (odd i)
// 16 bits of r_(i / 2), r_j the j-th number of curand's Philox4_32_10 sequence after
// curand_init(seed, offset, 0).
// Elements first .. first + n - 1.
std::vector<double> reference_mask(size_t n, double p, uint64_t seed, uint64_t offset,
                                   uint64_t first = 0) {
  std::vector<double> mask(n);
  for (size_t k = 0; k < n; ++k) {
    const uint64_t i = first + k;
    const uint32_t r = kf::math::philox_block(seed, offset, i / 8).v[(i / 2) % 4];
    const double u = std::ldexp(static_cast<double>(i % 2 == 0 ? r & 0xffffu : r >> 16), -16);
    mask[k] = u >= p ? 1.0 : 0.0;
  }
  return mask;
}

// Checks out and mask (both row-major, as downloaded) against x, p and the expected mask.
void expect_dropout(const std::vector<double>& x, const std::vector<double>& out,
                    const std::vector<double>& mask, const std::vector<double>& want_mask, double p,
                    kf_dtype_t dtype, const std::string& what) {
  ASSERT_EQ(out.size(), x.size()) << what;
  ASSERT_EQ(mask.size(), x.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < x.size() && reported < 8; ++i) {
    bool ok = mask[i] == want_mask[i];
    if (ok && mask[i] == 0.0) ok = out[i] == 0.0 && !std::signbit(out[i]);
    if (ok && mask[i] == 1.0) {
      const double want = gelu(x[i]) / (1.0 - p);
      ok = std::fabs(out[i] - want) <= kf_test::tolerance(dtype) * std::max(1.0, std::fabs(want));
    }
    if (!ok) {
      ++reported;
      ADD_FAILURE() << what << ": element " << i << " x=" << x[i] << " out=" << out[i]
                    << " mask=" << mask[i] << " want mask " << want_mask[i] << " gelu/(1-p) "
                    << gelu(x[i]) / (1.0 - p);
    }
  }
}

// ---- the generator itself ----------------------------------------------------------------------

// Random123's kat_vectors, the three philox4x32 10 lines: counter (4 words), key (2 words), result.
TEST(Philox, Random123KnownAnswers) {
  struct Case {
    kf::math::PhiloxWords counter;
    unsigned int key[2];
    unsigned int want[4];
  };
  const Case cases[] = {
      {{{0, 0, 0, 0}}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Case& c : cases) {
    const kf::math::PhiloxWords got = kf::math::philox4x32_10(c.counter, c.key[0], c.key[1]);
    for (int k = 0; k < 4; ++k) EXPECT_EQ(got.v[k], c.want[k]) << "word " << k;
  }
}

// curand_init(seed, subsequence, offset) puts the seed in the key (low word first) and the
// subsequence in the counter's high half; block b is counter (b low, b high, subsequence).
TEST(Philox, CurandLayout) {
  const uint64_t seed = 0x299f31d0a4093822ull;
  const uint64_t subsequence = 0x0370734413198a2eull;
  const uint64_t block = 0x85a308d3243f6a88ull;
  const kf::math::PhiloxWords got = kf::math::philox_block(seed, subsequence, block);
  const unsigned int want[4] = {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1};
  for (int k = 0; k < 4; ++k) EXPECT_EQ(got.v[k], want[k]) << "word " << k;
}

// ---- numeric tests, per dtype -----------------------------------------------------------------

class DropoutNumeric : public row_test::DeviceFixture<::testing::TestWithParam<kf_dtype_t>> {
 protected:
  kf_dtype_t dtype() const { return GetParam(); }
  uint64_t seed(uint64_t salt) const {
    return base_seed() * 1000003u + static_cast<uint64_t>(dtype()) * 10007u + salt;
  }

  // Runs the op on fresh dense tensors of shape; checks out and mask; returns the mask.
  std::vector<double> check_dense(const Shape& shape, double p, int32_t training, uint64_t rng_seed,
                                  uint64_t offset, uint64_t data_seed) {
    const std::string what = std::string(dtype_name(dtype())) + " " + shape_str(shape) +
                             " p=" + std::to_string(p) + " training=" + std::to_string(training) +
                             " seed=" + std::to_string(rng_seed) +
                             " offset=" + std::to_string(offset);
    SCOPED_TRACE(what);
    const size_t n = static_cast<size_t>(kf_test::numel(shape));
    Tensor x = kf_test::make_tensor(ctx(), dtype(), shape);
    Tensor out = kf_test::make_tensor(ctx(), dtype(), shape);
    Tensor mask = kf_test::make_tensor(ctx(), KF_DTYPE_UINT8, shape);
    const auto xv = fill(x, dtype(), n, data_seed);
    kf_test::poison(out);
    kf_test::poison(mask);
    const kf_result_t r =
        kf_fused_gelu_dropout(ctx(), x, out, mask, p, training, rng_seed, offset, nullptr);
    EXPECT_EQ(r, KF_SUCCESS) << kf_get_last_error_message();
    if (r != KF_SUCCESS) return {};
    auto mv = kf_test::download(mask);
    const auto want_mask =
        training ? reference_mask(n, p, rng_seed, offset) : std::vector<double>(n, 1.0);
    expect_dropout(xv, kf_test::download(out), mv, want_mask, training ? p : 0.0, dtype(), what);
    return mv;
  }
};

TEST_P(DropoutNumeric, OddSizesAndProbabilities) {
  const std::vector<Shape> shapes = {{1}, {7}, {1023}, {4097}, {3, 5, 7}, {}, {2, 1, 33}};
  uint64_t salt = 0;
  for (double p : {0.1, 0.5, 0.9})
    for (const Shape& shape : shapes) {
      ++salt;
      check_dense(shape, p, 1, seed(salt), salt * 3, seed(salt + 1000));
    }
}

TEST_P(DropoutNumeric, ZeroProbabilityAndInference) {
  // p = 0: every element kept, out = gelu(x) (scale 1); training = 0: the same, whatever p.
  for (const Shape& shape : {Shape{1023}, Shape{7, 9}}) {
    const auto m0 = check_dense(shape, 0.0, 1, seed(1), 5, seed(2));
    const auto m1 = check_dense(shape, 0.5, 0, seed(1), 5, seed(3));
    for (double v : m0) EXPECT_EQ(v, 1.0);
    for (double v : m1) EXPECT_EQ(v, 1.0);
  }
}

TEST_P(DropoutNumeric, DeterministicPerSeedAndOffset) {
  const Shape shape{4097};
  const auto a = check_dense(shape, 0.5, 1, 42, 7, seed(1));
  const auto b = check_dense(shape, 0.5, 1, 42, 7, seed(2));  // other data, same mask
  const auto other_offset = check_dense(shape, 0.5, 1, 42, 8, seed(1));
  const auto other_seed = check_dense(shape, 0.5, 1, 43, 7, seed(1));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, other_offset);
  EXPECT_NE(a, other_seed);
  // Independent masks agree on about half the elements, far from all.
  size_t agree = 0;
  for (size_t i = 0; i < a.size(); ++i) agree += a[i] == other_offset[i];
  EXPECT_LT(agree, a.size() * 6 / 10);
}

TEST_P(DropoutNumeric, MaskIsOptionalAndInPlace) {
  const Shape shape{5, 211};
  const size_t n = 5 * 211;
  const double p = 0.3;
  Tensor x = kf_test::make_tensor(ctx(), dtype(), shape);
  const auto xv = fill(x, dtype(), n, seed(9));
  KF_ASSERT_OK(kf_fused_gelu_dropout(ctx(), x, x, nullptr, p, 1, 11, 3, nullptr));
  const auto want_mask = reference_mask(n, p, 11, 3);
  const auto out = kf_test::download(x);
  std::vector<double> mask(n);
  for (size_t i = 0; i < n; ++i) mask[i] = out[i] == 0.0 ? 0.0 : 1.0;  // gelu(x) != 0 for x != 0
  expect_dropout(xv, out, mask, want_mask, p, dtype(), "in place, no mask");
}

// p = 0 and inference without a mask: the kernels that draw nothing, in their copy of the loop
// that stores no mask bytes (cuda.cu, MaskStores); out = gelu(x).
TEST_P(DropoutNumeric, NoDrawsWithoutMask) {
  uint64_t salt = 40;
  for (const Shape& shape : {Shape{4097}, Shape{3, 1000003}})
    for (const auto& [p, training] : {std::pair<double, int32_t>{0.0, 1}, {0.5, 0}}) {
      const size_t n = static_cast<size_t>(kf_test::numel(shape));
      SCOPED_TRACE(shape_str(shape) + " p=" + std::to_string(p));
      Tensor x = kf_test::make_tensor(ctx(), dtype(), shape);
      Tensor out = kf_test::make_tensor(ctx(), dtype(), shape);
      const auto xv = fill(x, dtype(), n, seed(++salt));
      kf_test::poison(out);
      KF_ASSERT_OK(kf_fused_gelu_dropout(ctx(), x, out, nullptr, p, training, 9, 2, nullptr));
      const std::vector<double> all(n, 1.0);
      expect_dropout(xv, kf_test::download(out), all, all, 0.0, dtype(), "no draws, no mask");
    }
}

TEST_P(DropoutNumeric, StridedViews) {
  // x transposed, out a row slice of a larger tensor, mask a strided view: the mask follows x's
  // row-major index, not memory order.
  const double p = 0.4;
  const Shape shape{5, 7};
  Tensor x_base = kf_test::make_tensor(ctx(), dtype(), {7, 5});
  Tensor out_base = kf_test::make_tensor(ctx(), dtype(), {6, 9});
  Tensor mask_base = kf_test::make_tensor(ctx(), KF_DTYPE_UINT8, {5, 14});
  Tensor x = make_view(x_base, dtype(), shape, {1, 5}, 0);
  Tensor out = make_view(out_base, dtype(), shape, {9, 1}, 10);
  Tensor mask = make_view(mask_base, KF_DTYPE_UINT8, shape, {14, 2}, 1);
  ASSERT_TRUE(x.t && out.t && mask.t);
  const auto base_values = fill(x_base, dtype(), 35, seed(4));
  std::vector<double> xv;
  for (int64_t o : view_offsets(shape, {1, 5}, 0)) xv.push_back(base_values[size_t(o)]);
  kf_test::poison(out_base);
  kf_test::poison(mask_base);
  KF_ASSERT_OK(kf_fused_gelu_dropout(ctx(), x, out, mask, p, 1, 77, 1, nullptr));
  expect_dropout(xv, kf_test::download(out), kf_test::download(mask), reference_mask(35, p, 77, 1),
                 p, dtype(), "strided");
  const auto whole = kf_test::download(out_base);
  std::vector<bool> inside(whole.size(), false);
  for (int64_t o : view_offsets(shape, {9, 1}, 10)) inside[size_t(o)] = true;
  for (size_t i = 0; i < whole.size(); ++i)
    if (!inside[i]) {
      EXPECT_TRUE(std::isnan(whole[i])) << "out element " << i << " written";
    }
  const auto whole_mask = kf_test::download(mask_base);
  std::vector<bool> in_mask(whole_mask.size(), false);
  for (int64_t o : view_offsets(shape, {14, 2}, 1)) in_mask[size_t(o)] = true;
  for (size_t i = 0; i < whole_mask.size(); ++i)
    if (!in_mask[i]) {
      EXPECT_EQ(whole_mask[i], 255.0) << "mask element " << i << " written";
    }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, DropoutNumeric, row_test::float_dtypes(),
                         row_test::dtype_param_name);

// ---- statistics, large tensors, CPU vs CUDA -----------------------------------------------------

class Dropout : public row_test::DeviceTest {};

TEST_F(Dropout, KeptFractionWithinFiveSigma) {
  const int64_t n = int64_t{1} << 20;
  Tensor x = tensor({n}), out = tensor({n}), mask = tensor({n}, KF_DTYPE_UINT8);
  fill(x, KF_DTYPE_FLOAT32, size_t(n), base_seed());
  uint64_t offset = 0;
  for (double p : {0.1, 0.5, 0.9}) {
    KF_ASSERT_OK(kf_fused_gelu_dropout(ctx(), x, out, mask, p, 1, base_seed(), ++offset, nullptr));
    double kept = 0;
    for (double v : kf_test::download(mask)) kept += v;
    const double mean = double(n) * (1.0 - p), sigma = std::sqrt(double(n) * p * (1.0 - p));
    EXPECT_LE(std::fabs(kept - mean), 5.0 * sigma) << "p=" << p << " kept " << kept;
  }
}

// Many grid-stride passes on CUDA, many tasks on the CPU, a tail that fills no vector.
TEST_F(Dropout, LargeTensors) {
  const int64_t n = 3000017;
  for (kf_dtype_t dtype : {KF_DTYPE_FLOAT32, KF_DTYPE_FLOAT16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor x = tensor({n}, dtype), out = tensor({n}, dtype), mask = tensor({n}, KF_DTYPE_UINT8);
    const auto xv = fill(x, dtype, size_t(n), base_seed() + 5);
    kf_test::poison(out);
    kf_test::poison(mask);
    KF_ASSERT_OK(kf_fused_gelu_dropout(ctx(), x, out, mask, 0.25, 1, 1234, 99, nullptr));
    expect_dropout(xv, kf_test::download(out), kf_test::download(mask),
                   reference_mask(size_t(n), 0.25, 1234, 99), 0.25, dtype, "large");
  }
}

// Several steps a thread in CUDA's vector kernel for the types whose groups of four take half a
// Philox block: there a lane pair shares its draws over two steps (cuda.cu, vector_kernel's
// kPaired), so the masks must match the reference rule at a pair's second step and at a lone last
// step as well as at the first. On 132 SMs f32 takes three steps a thread here (1.62 M threads of
// the grid, 3.4 M groups) and f64 three (0.54 M threads, 1.1 M groups); the last block ends inside
// a warp. On the CPU, a large run of one path.
TEST_F(Dropout, ManyStepsAThreadInGroupsOfFour) {
  for (const auto& [dtype, n] : {std::pair<kf_dtype_t, int64_t>{KF_DTYPE_FLOAT32, 13500007},
                                 std::pair<kf_dtype_t, int64_t>{KF_DTYPE_FLOAT64, 4500003}}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor x = tensor({n}, dtype), out = tensor({n}, dtype), mask = tensor({n}, KF_DTYPE_UINT8);
    const auto xv = fill(x, dtype, size_t(n), base_seed() + 11);
    kf_test::poison(out);
    kf_test::poison(mask);
    KF_ASSERT_OK(kf_fused_gelu_dropout(ctx(), x, out, mask, 0.3, 1, 4321, 7, nullptr));
    expect_dropout(xv, kf_test::download(out), kf_test::download(mask),
                   reference_mask(size_t(n), 0.3, 4321, 7), 0.3, dtype, "many steps");
  }
}

// Several steps a thread in CUDA's loaded 16-bit vector kernel, with a mask and without: the
// loop is copied for the two (cuda.cu, MaskStores), and bf16 widens its words with multiplies
// (bf16::widen_pairs_fma). On 132 SMs the grid holds 2.7 M threads of eight elements a step, so
// 60 M elements take three steps a thread, and the last block ends inside a warp. The call
// without a mask must write the same bits as the call with one; the mask must follow the
// reference rule. The CPU backend has one path and runs a smaller tensor.
TEST_F(Dropout, SixteenBitManyStepsWithAndWithoutMask) {
  const bool cuda = kf_test::device_under_test() == KF_DEVICE_CUDA;
  const int64_t n = cuda ? 60000013 : 1000013;
  for (kf_dtype_t dtype : {KF_DTYPE_FLOAT16, KF_DTYPE_BFLOAT16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor x = tensor({n}, dtype), out = tensor({n}, dtype), bare = tensor({n}, dtype);
    Tensor mask = tensor({n}, KF_DTYPE_UINT8);
    const auto xv = fill(x, dtype, size_t(n), base_seed() + 13);
    kf_test::poison(out);
    kf_test::poison(bare);
    kf_test::poison(mask);
    KF_ASSERT_OK(kf_fused_gelu_dropout(ctx(), x, out, mask, 0.2, 1, 777, 5, nullptr));
    KF_ASSERT_OK(kf_fused_gelu_dropout(ctx(), x, bare, nullptr, 0.2, 1, 777, 5, nullptr));
    const auto with_mask = kf_test::download(out);
    expect_dropout(xv, with_mask, kf_test::download(mask), reference_mask(size_t(n), 0.2, 777, 5),
                   0.2, dtype, "many steps, with a mask");
    const auto without = kf_test::download(bare);
    size_t differ = 0;
    for (size_t i = 0; i < without.size(); ++i)
      differ +=
          !(without[i] == with_mask[i] && std::signbit(without[i]) == std::signbit(with_mask[i]));
    EXPECT_EQ(differ, 0u) << "elements where the call without a mask wrote other values";
  }
}

// Past 2^31 Philox blocks the vector kernel indexes groups and blocks in 64 bits (cuda.cu,
// vector_kernel's kWide); below, in 32. An f16 tensor of 2^33 + 8005 elements (2^30 + 1000
// groups of eight and a tail of five) takes the 64-bit form: 17 GB of x and of out and 8.6 GB of
// mask. x repeats one random chunk; windows of out and mask are poisoned, and checked against the
// reference after the call: at the start, around 2^31 and 2^32 elements, on both sides of element
// 2^33 (group 2^30), and at the end with the tail. CUDA only (the CPU backend has one path);
// skipped where the device cannot hold the tensors (any other failure to create them fails).
// "Huge" in the name keeps it out of .ci/gpu.sh's sanitizer runs.
TEST_F(Dropout, HugeTensorIndexedIn64Bits) {
  if (kf_test::device_under_test() != KF_DEVICE_CUDA)
    GTEST_SKIP() << "the 64-bit indices are the CUDA vector kernel's";
  const kf_dtype_t dtype = KF_DTYPE_FLOAT16;
  const int64_t n = (int64_t{1} << 33) + 8005;
  const int64_t chunk = int64_t{1} << 24;  // x repeats these values
  // x, out and mask, in that order; only a lack of memory skips.
  std::vector<Tensor> tensors;
  for (kf_dtype_t type : {dtype, dtype, KF_DTYPE_UINT8}) {
    const kf_tensor_desc_t desc = kf_test::make_desc(type, {n});
    kf_tensor_t* t = nullptr;
    const kf_result_t r = kf_tensor_create(ctx(), &desc, &t);
    if (r == KF_ERROR_OUT_OF_MEMORY)
      GTEST_SKIP() << "the device cannot hold x, out and mask: " << kf_get_last_error_message();
    ASSERT_EQ(r, KF_SUCCESS) << kf_get_last_error_message();
    tensors.emplace_back(t);
  }
  const Tensor &x = tensors[0], &out = tensors[1], &mask = tensors[2];

  const std::vector<double> values = kf_test::round_to_dtype(
      kf_test::random_values(size_t(chunk), base_seed() + 29, -4.0, 4.0), dtype);
  const std::vector<unsigned char> packed = kf_test::encode(values, dtype);
  for (int64_t at = 0; at < n; at += chunk) {
    const int64_t count = std::min(chunk, n - at);
    Tensor part = make_view(x, dtype, {count}, {1}, at);
    ASSERT_EQ(kf_tensor_copy_from_host(part, packed.data(), size_t(count) * kf_dtype_size(dtype),
                                       nullptr),
              KF_SUCCESS)
        << kf_get_last_error_message();
  }
  const int64_t window = 4096;
  std::vector<int64_t> starts{0,
                              (int64_t{1} << 31) - window / 2,
                              (int64_t{1} << 32) - window / 2,
                              (int64_t{1} << 33) - window / 2,
                              (int64_t{1} << 33) - 3 * window,
                              n - window};
  for (int64_t s : starts) {
    kf_test::poison(make_view(out, dtype, {window}, {1}, s));
    kf_test::poison(make_view(mask, KF_DTYPE_UINT8, {window}, {1}, s));
  }
  const double p = 0.3;
  const uint64_t seed = 0x5EED5EEDull, offset = 77;
  KF_ASSERT_OK(kf_fused_gelu_dropout(ctx(), x, out, mask, p, 1, seed, offset, nullptr));
  for (int64_t s : starts) {
    std::vector<double> xs(static_cast<size_t>(window));
    for (int64_t k = 0; k < window; ++k) xs[size_t(k)] = values[size_t((s + k) % chunk)];
    expect_dropout(xs, kf_test::download(make_view(out, dtype, {window}, {1}, s)),
                   kf_test::download(make_view(mask, KF_DTYPE_UINT8, {window}, {1}, s)),
                   reference_mask(size_t(window), p, seed, offset, uint64_t(s)), p, dtype,
                   "elements from " + std::to_string(s));
  }
}

// The device under test against a CPU context, for the same seed and offset: identical masks and
// (to tolerance) identical values, on the vector path and the strided path; both masks also
// against the reference. Outputs poisoned before each call. (On the CPU build this would compare
// the CPU with itself; the other tests hold the CPU to the reference.)
TEST_F(Dropout, SameMaskAsCpu) {
  if (kf_test::device_under_test() != KF_DEVICE_CUDA)
    GTEST_SKIP() << "compares the CUDA backend with the CPU backend";
  kf_context_config_t config = KF_CONTEXT_CONFIG_INIT;
  config.device_type = KF_DEVICE_CPU;
  kf_context_t* cpu = nullptr;
  KF_ASSERT_OK(kf_context_create(&config, &cpu));
  const Shape shape{33, 1001};
  const size_t n = 33 * 1001;
  for (kf_dtype_t dtype :
       {KF_DTYPE_FLOAT32, KF_DTYPE_FLOAT16, KF_DTYPE_BFLOAT16, KF_DTYPE_FLOAT64}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor x = tensor(shape, dtype), out = tensor(shape, dtype);
    Tensor mask = tensor(shape, KF_DTYPE_UINT8);
    Tensor cx = kf_test::make_tensor(cpu, dtype, shape),
           cout = kf_test::make_tensor(cpu, dtype, shape);
    Tensor cmask = kf_test::make_tensor(cpu, KF_DTYPE_UINT8, shape);
    const auto xv = fill(x, dtype, n, base_seed() + 17);
    kf_test::upload(cx, xv);
    for (uint64_t offset : {uint64_t{0}, uint64_t{1} << 40}) {
      for (kf_tensor_t* t : {out.t, mask.t, cout.t, cmask.t}) kf_test::poison(t);
      KF_ASSERT_OK(kf_fused_gelu_dropout(ctx(), x, out, mask, 0.35, 1, 0xC0FFEE, offset, nullptr));
      KF_ASSERT_OK(kf_fused_gelu_dropout(cpu, cx, cout, cmask, 0.35, 1, 0xC0FFEE, offset, nullptr));
      const auto device_mask = kf_test::download(mask);
      EXPECT_EQ(device_mask, kf_test::download(cmask)) << "offset " << offset;
      EXPECT_EQ(device_mask, reference_mask(n, 0.35, 0xC0FFEE, offset)) << "offset " << offset;
      kf_test::expect_close(kf_test::download(out), kf_test::download(cout),
                            kf_test::tolerance(dtype), "device vs CPU");
    }
    // A transposed view (strided kernel) gives the same mask as the dense CPU run of its values.
    Tensor base = tensor({1001, 33}, dtype);
    Tensor xt = make_view(base, dtype, shape, {1, 33}, 0);
    kf_test::upload(xt, xv);
    for (kf_tensor_t* t : {out.t, mask.t, cout.t, cmask.t}) kf_test::poison(t);
    KF_ASSERT_OK(kf_fused_gelu_dropout(ctx(), xt, out, mask, 0.35, 1, 0xC0FFEE, 0, nullptr));
    KF_ASSERT_OK(kf_fused_gelu_dropout(cpu, cx, cout, cmask, 0.35, 1, 0xC0FFEE, 0, nullptr));
    EXPECT_EQ(kf_test::download(mask), kf_test::download(cmask)) << "strided";
  }
  kf_context_destroy(cpu);
}

// The CPU backend splits x into one range per thread, and three threads over 3 * 16384 + 5
// elements start two of the ranges inside a Philox block (at 16386 and 32772): each range's
// first chunk must take its uniforms from the middle of that block's words.
TEST_F(Dropout, CpuRangesStartingInsideABlock) {
  kf_context_config_t config = KF_CONTEXT_CONFIG_INIT;
  config.device_type = KF_DEVICE_CPU;
  config.cpu_threads = 3;
  kf_context_t* cpu = nullptr;
  KF_ASSERT_OK(kf_context_create(&config, &cpu));
  const size_t n = 3 * 16384 + 5;
  const Shape shape{static_cast<int64_t>(n)};
  for (kf_dtype_t dtype : {KF_DTYPE_FLOAT32, KF_DTYPE_BFLOAT16}) {
    const std::string what = std::string("cpu threads=3 ") + dtype_name(dtype);
    Tensor x = kf_test::make_tensor(cpu, dtype, shape),
           out = kf_test::make_tensor(cpu, dtype, shape);
    Tensor mask = kf_test::make_tensor(cpu, KF_DTYPE_UINT8, shape);
    const auto xv = fill(x, dtype, n, base_seed() + 29);
    kf_test::poison(out);
    kf_test::poison(mask);
    KF_ASSERT_OK(kf_fused_gelu_dropout(cpu, x, out, mask, 0.3, 1, 0xBEEF, 77, nullptr));
    expect_dropout(xv, kf_test::download(out), kf_test::download(mask),
                   reference_mask(n, 0.3, 0xBEEF, 77), 0.3, dtype, what);
  }
  kf_context_destroy(cpu);
}

TEST_F(Dropout, EmptyTensorsSucceed) {
  Tensor x = tensor({0, 5}), out = tensor({0, 5}), mask = tensor({0, 5}, KF_DTYPE_UINT8);
  KF_ASSERT_OK(kf_fused_gelu_dropout(ctx(), x, out, mask, 0.5, 1, 1, 1, nullptr));
}

// ---- every error path; a failing call leaves out and mask untouched ---------------------------

TEST_F(Dropout, Errors) {
  Tensor x = tensor({3, 7}), out = tensor({3, 7}), mask = tensor({3, 7}, KF_DTYPE_UINT8);
  // Returns the failure's message (read before the checks, which make successful calls).
  auto expect = [&](kf_result_t code, kf_context_t* c, const kf_tensor_t* xx, kf_tensor_t* o,
                    kf_tensor_t* m, double p, kf_stream_t* s, const std::string& what) {
    SCOPED_TRACE(what);
    // The tensors the call was given (a substitute out or mask included) and the fixture's.
    std::vector<kf_tensor_t*> watched = {out, mask};
    for (kf_tensor_t* t : {o, m})
      if (t != nullptr && t != out.t && t != mask.t) watched.push_back(t);
    for (kf_tensor_t* t : watched) kf_test::poison(t);  // 0xFF bytes
    KF_EXPECT_ERR(kf_fused_gelu_dropout(c, xx, o, m, p, 1, 1, 0, s), code);
    std::string message = kf_get_last_error_message();
    for (kf_tensor_t* t : watched) {
      kf_tensor_desc_t d;
      EXPECT_EQ(kf_tensor_get_desc(t, &d), KF_SUCCESS);
      // 0xFF bytes: NaN in a float dtype, 255 in u8, -1 in i8.
      for (double v : kf_test::download(t)) {
        if (d.dtype == KF_DTYPE_UINT8) {
          EXPECT_EQ(v, 255.0) << what << ": a mask written";
        } else if (d.dtype == KF_DTYPE_INT8) {
          EXPECT_EQ(v, -1.0) << what << ": a mask written";
        } else {
          EXPECT_TRUE(std::isnan(v)) << what << ": an output written";
        }
      }
    }
    return message;
  };
  const std::string p_message =
      expect(KF_ERROR_INVALID_ARGUMENT, ctx(), x, out, mask, -0.1, nullptr, "p < 0");
  EXPECT_NE(p_message.find("[0, 1)"), std::string::npos) << p_message;
  expect(KF_ERROR_INVALID_ARGUMENT, ctx(), x, out, mask, 1.0, nullptr, "p = 1");
  expect(KF_ERROR_INVALID_ARGUMENT, ctx(), x, out, mask, 1.5, nullptr, "p > 1");
  expect(KF_ERROR_INVALID_ARGUMENT, ctx(), x, out, mask, std::nan(""), nullptr, "p NaN");
  expect(KF_ERROR_INVALID_ARGUMENT, ctx(), x, out, mask, -INFINITY, nullptr, "p -inf");

  Tensor xi = tensor({3, 7}, KF_DTYPE_INT32), out16 = tensor({3, 7}, KF_DTYPE_FLOAT16);
  Tensor mask_f = tensor({3, 7}), mask_i8 = tensor({3, 7}, KF_DTYPE_INT8);
  Tensor mask_shape = tensor({7, 3}, KF_DTYPE_UINT8), out_shape = tensor({21});
  expect(KF_ERROR_DTYPE_MISMATCH, ctx(), xi, out, mask, 0.5, nullptr, "x int32");
  expect(KF_ERROR_DTYPE_MISMATCH, ctx(), x, out16, mask, 0.5, nullptr, "out f16");
  expect(KF_ERROR_DTYPE_MISMATCH, ctx(), x, out, mask_f, 0.5, nullptr, "mask f32");
  expect(KF_ERROR_DTYPE_MISMATCH, ctx(), x, out, mask_i8, 0.5, nullptr, "mask int8");
  expect(KF_ERROR_SHAPE_MISMATCH, ctx(), x, out, mask_shape, 0.5, nullptr, "mask shape");
  expect(KF_ERROR_SHAPE_MISMATCH, ctx(), x, out_shape, mask, 0.5, nullptr, "out shape");

  expect(KF_ERROR_INVALID_HANDLE, nullptr, x, out, mask, 0.5, nullptr, "NULL ctx");
  expect(KF_ERROR_INVALID_HANDLE, ctx(), nullptr, out, mask, 0.5, nullptr, "NULL x");
  expect(KF_ERROR_INVALID_HANDLE, ctx(), x, nullptr, mask, 0.5, nullptr, "NULL out");

  kf_test::Context other;
  ASSERT_NE(other.ctx, nullptr);
  Tensor foreign_x = kf_test::make_tensor(other, KF_DTYPE_FLOAT32, {3, 7});
  Tensor foreign_mask = kf_test::make_tensor(other, KF_DTYPE_UINT8, {3, 7});
  expect(KF_ERROR_DEVICE_MISMATCH, ctx(), foreign_x, out, mask, 0.5, nullptr, "x foreign");
  expect(KF_ERROR_DEVICE_MISMATCH, ctx(), x, out, foreign_mask, 0.5, nullptr, "mask foreign");
  kf_stream_t* stream = nullptr;
  KF_ASSERT_OK(kf_stream_create(other, nullptr, &stream));
  expect(KF_ERROR_DEVICE_MISMATCH, ctx(), x, out, mask, 0.5, stream, "stream foreign");
  KF_ASSERT_OK(kf_stream_destroy(stream));

  // Overlaps: out partially over x; mask inside out's bytes.
  Tensor base = tensor({4, 7});
  Tensor x_view = make_view(base, KF_DTYPE_FLOAT32, {3, 7}, {7, 1}, 0);
  Tensor out_view = make_view(base, KF_DTYPE_FLOAT32, {3, 7}, {7, 1}, 7);
  KF_EXPECT_ERR(kf_fused_gelu_dropout(ctx(), x_view, out_view, nullptr, 0.5, 1, 1, 0, nullptr),
                KF_ERROR_INVALID_ARGUMENT);
  // mask_out over x's bytes (only borrowed memory can alias across dtypes; the check is the
  // entry's, the same for every backend, so a CPU context shows it).
  kf_context_config_t config = KF_CONTEXT_CONFIG_INIT;
  config.device_type = KF_DEVICE_CPU;
  kf_context_t* cpu = nullptr;
  KF_ASSERT_OK(kf_context_create(&config, &cpu));
  std::vector<float> memory(21, 1.0f);
  const kf_tensor_desc_t x_desc = kf_test::make_desc(KF_DTYPE_FLOAT32, {3, 7});
  const kf_tensor_desc_t mask_desc = kf_test::make_desc(KF_DTYPE_UINT8, {3, 7});
  kf_tensor_t *wrapped_x = nullptr, *wrapped_mask = nullptr;
  KF_ASSERT_OK(kf_tensor_wrap(cpu, &x_desc, memory.data(), memory.size() * sizeof(float), nullptr,
                              nullptr, &wrapped_x));
  KF_ASSERT_OK(
      kf_tensor_wrap(cpu, &mask_desc, memory.data() + 1, 21, nullptr, nullptr, &wrapped_mask));
  kf_tensor_t* cpu_out = nullptr;
  const kf_tensor_desc_t out_desc = kf_test::make_desc(KF_DTYPE_FLOAT32, {3, 7});
  KF_ASSERT_OK(kf_tensor_create(cpu, &out_desc, &cpu_out));
  KF_EXPECT_ERR(kf_fused_gelu_dropout(cpu, wrapped_x, cpu_out, wrapped_mask, 0.5, 1, 1, 0, nullptr),
                KF_ERROR_INVALID_ARGUMENT);
  KF_EXPECT_ERR(kf_fused_gelu_dropout(cpu, cpu_out, wrapped_x, wrapped_mask, 0.5, 1, 1, 0, nullptr),
                KF_ERROR_INVALID_ARGUMENT);
  for (float v : memory) EXPECT_EQ(v, 1.0f) << "a failing call wrote borrowed memory";
  kf_tensor_destroy(wrapped_mask);
  kf_tensor_destroy(wrapped_x);
  kf_tensor_destroy(cpu_out);
  kf_context_destroy(cpu);
}

}  // namespace
