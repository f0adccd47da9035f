// kf_reduce, kf_reduce_sum_squared and kf_reduce_mean_abs against float64 references written here,
// for every dtype and op: odd extents (1, 7, 1023, 4097), every subset of axes of a 3-D tensor,
// keepdim both ways, negative axes, transposed and sliced inputs, strided outputs, large sums
// (blocked accumulation keeps f32 at 1e-5), empty reductions, NaN propagation, determinism and
// every error path. Outputs are poisoned (NaN) first; data is random from a printed seed
// (KF_TEST_SEED=<n>), never zero, negative and positive.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tests/ops/row_test_util.hpp"

namespace {

using namespace row_test;

const kf_reduce_op_t kOps[] = {KF_REDUCE_SUM,    KF_REDUCE_MEAN,        KF_REDUCE_MAX,
                               KF_REDUCE_MIN,    KF_REDUCE_SUM_SQUARES, KF_REDUCE_MEAN_ABS,
                               KF_REDUCE_L2_NORM};

const char* op_name(kf_reduce_op_t op) {
  switch (op) {
    case KF_REDUCE_SUM: return "sum";
    case KF_REDUCE_MEAN: return "mean";
    case KF_REDUCE_MAX: return "max";
    case KF_REDUCE_MIN: return "min";
    case KF_REDUCE_SUM_SQUARES: return "sum_squares";
    case KF_REDUCE_MEAN_ABS: return "mean_abs";
    case KF_REDUCE_L2_NORM: return "l2_norm";
  }
  return "?";
}

// The reduced dims of a shape for the given axes (empty: every dim).
std::vector<bool> reduced_dims(size_t ndim, const std::vector<int32_t>& axes) {
  std::vector<bool> reduced(ndim, axes.empty());
  for (int32_t a : axes)
    reduced[static_cast<size_t>(a < 0 ? a + static_cast<int32_t>(ndim) : a)] = true;
  return reduced;
}

Shape out_shape(const Shape& shape, const std::vector<bool>& reduced, bool keepdim) {
  Shape out;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (!reduced[d])
      out.push_back(shape[d]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}

// x packed row-major over shape; the result packed row-major over the kept dims.
std::vector<double> reference(const std::vector<double>& x, const Shape& shape,
                              const std::vector<bool>& reduced, kf_reduce_op_t op) {
  int64_t outputs = 1, count = 1;
  for (size_t d = 0; d < shape.size(); ++d) (reduced[d] ? count : outputs) *= shape[d];
  // Sums in long double: summed one after another in double, a million values of 0.1 came out
  // 1.5e-11 off, past f64's tolerance, while the library's blocked sums were within 3e-15.
  std::vector<long double> sum(static_cast<size_t>(outputs), 0.0L), squares = sum, abs = sum;
  std::vector<double> max(sum.size(), -INFINITY), min(sum.size(), INFINITY);
  for (size_t i = 0; i < x.size(); ++i) {
    int64_t rest = static_cast<int64_t>(i), o = 0, scale = 1;
    for (size_t d = shape.size(); d-- > 0;) {
      const int64_t index = rest % shape[d];
      rest /= shape[d];
      if (!reduced[d]) {
        o += index * scale;
        scale *= shape[d];
      }
    }
    const double v = x[i];
    sum[o] += v;
    squares[o] += static_cast<long double>(v) * v;
    abs[o] += std::fabs(v);
    max[o] = std::fmax(max[o], v);
    min[o] = std::fmin(min[o], v);
  }
  std::vector<double> out(sum.size());
  const long double n = static_cast<long double>(count);
  for (size_t o = 0; o < out.size(); ++o) {
    switch (op) {
      case KF_REDUCE_SUM: out[o] = static_cast<double>(sum[o]); break;
      case KF_REDUCE_MEAN: out[o] = static_cast<double>(sum[o] / n); break;
      case KF_REDUCE_MAX: out[o] = max[o]; break;
      case KF_REDUCE_MIN: out[o] = min[o]; break;
      case KF_REDUCE_SUM_SQUARES: out[o] = static_cast<double>(squares[o]); break;
      case KF_REDUCE_MEAN_ABS: out[o] = static_cast<double>(abs[o] / n); break;
      case KF_REDUCE_L2_NORM: out[o] = static_cast<double>(std::sqrt(squares[o])); break;
    }
  }
  return out;
}

std::string axes_str(const std::vector<int32_t>& axes) {
  if (axes.empty()) return "(all)";
  std::string s = "(";
  for (size_t i = 0; i < axes.size(); ++i) s += (i ? "," : "") + std::to_string(axes[i]);
  return s + ")";
}

class ReduceTest : public row_test::DeviceFixture<::testing::TestWithParam<kf_dtype_t>> {
 protected:
  kf_dtype_t dtype() const { return GetParam(); }
  uint64_t seed(uint64_t salt) const {
    return base_seed() * 1000003u + static_cast<uint64_t>(dtype()) * 10007u + salt;
  }
  Tensor tensor(const Shape& shape) { return kf_test::make_tensor(ctx(), dtype(), shape); }

  // Reduces x (values xv, packed over shape) with every op and both keepdims, checking each.
  void check_all_ops(const Tensor& x, const Shape& shape, const std::vector<double>& xv,
                     const std::vector<int32_t>& axes, const std::string& what) {
    for (kf_reduce_op_t op : kOps)
      for (int keepdim = 0; keepdim < 2; ++keepdim) check(x, shape, xv, axes, op, keepdim, what);
  }

  void check(const Tensor& x, const Shape& shape, const std::vector<double>& xv,
             const std::vector<int32_t>& axes, kf_reduce_op_t op, int keepdim,
             const std::string& what) {
    const std::string label = std::string(dtype_name(dtype())) + " " + op_name(op) + " of " + what +
                              " " + shape_str(shape) + " over " + axes_str(axes) +
                              " keepdim=" + std::to_string(keepdim);
    SCOPED_TRACE(label);
    const std::vector<bool> reduced = reduced_dims(shape.size(), axes);
    Tensor out = tensor(out_shape(shape, reduced, keepdim != 0));
    kf_test::poison(out);
    KF_ASSERT_OK(kf_reduce(ctx(), x, out, op, axes.empty() ? nullptr : axes.data(),
                           static_cast<int32_t>(axes.size()), keepdim, nullptr));
    std::vector<double> got = kf_test::download(out);
    std::vector<double> want = saturated(reference(xv, shape, reduced, op));
    // A sum's rounding error grows with the magnitudes summed, not with the result, which can
    // cancel to near zero: a well-ordered sum of n terms is off by about eps * sqrt(n) * mean|x|.
    // Sums and means are therefore allowed tol * max(1, |want|, sqrt(n) * mean|x|) (divided by n
    // for the mean); dividing both sides by max(1, that scale) gives expect_close that bound.
    if (op == KF_REDUCE_SUM || op == KF_REDUCE_MEAN) {
      const std::vector<double> mean_abs = reference(xv, shape, reduced, KF_REDUCE_MEAN_ABS);
      double n = 1;
      for (size_t d = 0; d < shape.size(); ++d)
        if (reduced[d]) n *= static_cast<double>(shape[d]);
      for (size_t o = 0; o < want.size(); ++o) {
        const double magnitude =
            op == KF_REDUCE_SUM ? std::sqrt(n) * mean_abs[o] : mean_abs[o] / std::sqrt(n);
        const double scale = std::max(1.0, magnitude);
        got[o] /= scale;
        want[o] /= scale;
      }
    }
    expect_close_inf(got, want, kf_test::tolerance(dtype()), label);
  }

  // Results beyond the dtype's range (f16 sums past 65504) are expected to be infinite.
  std::vector<double> saturated(std::vector<double> want) const {
    const std::vector<double> rounded = kf_test::round_to_dtype(want, dtype());
    for (size_t i = 0; i < want.size(); ++i)
      if (std::isinf(rounded[i])) want[i] = rounded[i];
    return want;
  }

  // A packed random tensor of the given shape.
  Tensor random(const Shape& shape, uint64_t salt, std::vector<double>* values, double lo = -3.0,
                double hi = 3.0) {
    Tensor t = tensor(shape);
    *values = fill(t, dtype(), static_cast<size_t>(kf_test::numel(shape)), seed(salt), lo, hi);
    return t;
  }
};

TEST_P(ReduceTest, OneDimensional) {
  for (int64_t n : {1, 7, 1023, 4097}) {
    std::vector<double> xv;
    Tensor x = random({n}, static_cast<uint64_t>(n), &xv);
    check_all_ops(x, {n}, xv, {0}, "vector");
    check_all_ops(x, {n}, xv, {}, "vector");
    check_all_ops(x, {n}, xv, {-1}, "vector");
  }
}

TEST_P(ReduceTest, TwoDimensional) {
  for (const Shape& shape : {Shape{7, 1023}, Shape{33, 4097}, Shape{1023, 7}, Shape{4097, 5},
                             Shape{1, 7}, Shape{7, 1}, Shape{64, 256}}) {
    std::vector<double> xv;
    Tensor x = random(shape, static_cast<uint64_t>(shape[0] * 7 + shape[1]), &xv);
    for (const std::vector<int32_t>& axes :
         {std::vector<int32_t>{0}, std::vector<int32_t>{1}, std::vector<int32_t>{-1},
          std::vector<int32_t>{-2}, std::vector<int32_t>{1, 0}, std::vector<int32_t>{}})
      check_all_ops(x, shape, xv, axes, "matrix");
  }
}

TEST_P(ReduceTest, EverySubsetOfAxes) {
  for (const Shape& shape : {Shape{5, 7, 9}, Shape{3, 1, 4, 6}}) {
    std::vector<double> xv;
    Tensor x = random(shape, 57 + shape.size(), &xv);
    const int32_t ndim = static_cast<int32_t>(shape.size());
    for (int32_t mask = 1; mask < (1 << ndim); ++mask) {
      std::vector<int32_t> axes, negative;
      for (int32_t d = 0; d < ndim; ++d)
        if (mask & (1 << d)) {
          axes.push_back(d);
          negative.insert(negative.begin(), d - ndim);  // reversed order, counted from the end
        }
      check_all_ops(x, shape, xv, axes, "tensor");
      check(x, shape, xv, negative, KF_REDUCE_SUM, 0, "tensor (negative axes)");
      check(x, shape, xv, negative, KF_REDUCE_MAX, 1, "tensor (negative axes)");
    }
    check_all_ops(x, shape, xv, {}, "tensor");
  }
}

// Views of a packed base: a transpose, a slice of columns, a slice with a step, a broadcast.
TEST_P(ReduceTest, StridedInputs) {
  struct View {
    Shape base, shape, strides;
    int64_t offset;
    const char* name;
  };
  const View views[] = {
      {{9, 1023}, {1023, 9}, {1, 1023}, 0, "transposed"},
      {{20, 37}, {20, 13}, {37, 1}, 3, "column slice"},
      {{12, 40}, {6, 20}, {80, 2}, 1, "stepped slice"},
      {{5, 7, 9}, {9, 5, 7}, {1, 63, 9}, 0, "permuted"},
      {{6, 33}, {4, 6, 33}, {0, 33, 1}, 0, "broadcast"},
  };
  for (const View& v : views) {
    std::vector<double> base_values;
    Tensor base = random(v.base, 91 + static_cast<uint64_t>(v.offset), &base_values);
    Tensor x = make_view(base, dtype(), v.shape, v.strides, v.offset);
    const std::vector<double> xv = gather(base_values, view_offsets(v.shape, v.strides, v.offset));
    const int32_t ndim = static_cast<int32_t>(v.shape.size());
    for (int32_t mask = 1; mask < (1 << ndim); ++mask) {
      std::vector<int32_t> axes;
      for (int32_t d = 0; d < ndim; ++d)
        if (mask & (1 << d)) axes.push_back(d);
      check_all_ops(x, v.shape, xv, axes, v.name);
    }
  }
}

TEST_P(ReduceTest, StridedOutput) {
  std::vector<double> xv;
  Tensor x = random({37, 129}, 5, &xv);
  // out is every other element of a [2 * 129] buffer; then the transposed [129, 37] case.
  Tensor out_base = tensor({2 * 129});
  kf_test::poison(out_base);
  Tensor out = make_view(out_base, dtype(), {129}, {2}, 1);
  KF_EXPECT_ERR(kf_reduce(ctx(), x, out, KF_REDUCE_MEAN, nullptr, 0, 0, nullptr),
                KF_ERROR_SHAPE_MISMATCH);
  const int32_t axis0 = 0;
  KF_ASSERT_OK(kf_reduce(ctx(), x, out, KF_REDUCE_MEAN, &axis0, 1, 0, nullptr));
  const std::vector<double> got_all = kf_test::download(out_base);
  std::vector<double> got;
  for (size_t i = 1; i < got_all.size(); i += 2) got.push_back(got_all[i]);
  kf_test::expect_close(got, reference(xv, {37, 129}, {true, false}, KF_REDUCE_MEAN),
                        kf_test::tolerance(dtype()), "mean into a strided out");
  for (size_t i = 0; i < got_all.size(); i += 2) EXPECT_TRUE(std::isnan(got_all[i])) << i;

  Tensor out2_base = tensor({5, 37});
  kf_test::poison(out2_base);
  Tensor out2 = make_view(out2_base, dtype(), {37}, {5}, 2);  // column 2 of [37, 5]^T
  const int32_t axis1 = -1;
  KF_ASSERT_OK(kf_reduce(ctx(), x, out2, KF_REDUCE_L2_NORM, &axis1, 1, 0, nullptr));
  const std::vector<double> got2_all = kf_test::download(out2_base);
  std::vector<double> got2;
  for (int64_t r = 0; r < 37; ++r) got2.push_back(got2_all[static_cast<size_t>(r * 5 + 2)]);
  kf_test::expect_close(got2, reference(xv, {37, 129}, {false, true}, KF_REDUCE_L2_NORM),
                        kf_test::tolerance(dtype()), "l2 norm into a strided out");
}

// Millions of elements into one output, and 2048 x 2048 along each axis: blocked accumulation
// keeps f32 within 1e-5 without scaling the tolerance by the length.
TEST_P(ReduceTest, LargeReductions) {
  std::vector<double> xv;
  const Shape shape{2048, 2048};
  Tensor x = random(shape, 4242, &xv, -1.0, 3.0);
  for (kf_reduce_op_t op : {KF_REDUCE_SUM, KF_REDUCE_MEAN_ABS, KF_REDUCE_L2_NORM, KF_REDUCE_MAX}) {
    check(x, shape, xv, {}, op, 0, "large");
    check(x, shape, xv, {0}, op, 0, "large");
    check(x, shape, xv, {1}, op, 0, "large");
  }
  std::vector<double> yv;
  const Shape tall{1 << 20, 3};
  Tensor y = random(tall, 777, &yv, -1.0, 3.0);
  check(y, tall, yv, {0}, KF_REDUCE_SUM, 1, "tall");
  check(y, tall, yv, {0}, KF_REDUCE_MEAN, 0, "tall");
  // One value down tall columns: summed one block of rows after another into one total, each
  // addition's rounding leans the same way and the error grows with the rows (the CPU's f32
  // means over 2^20 rows were 1.5e-4 off before its blocks were grouped).
  const std::vector<double> tenths =
      kf_test::round_to_dtype(std::vector<double>(size_t{3} << 20, 0.1), dtype());
  Tensor c = tensor(tall);
  kf_test::upload(c, tenths);
  for (kf_reduce_op_t op :
       {KF_REDUCE_SUM, KF_REDUCE_MEAN, KF_REDUCE_SUM_SQUARES, KF_REDUCE_L2_NORM})
    check(c, tall, tenths, {0}, op, 0, "constant tall");
  // The same values through a view of two of the three columns, reduced whole: runs of two
  // elements, whose sums the CPU added one after another over a task's 2^15 elements (its f32
  // mean was 1.5e-4 off; folded in blocks, as dense runs are, it is as close as theirs).
  const Shape pairs{1 << 20, 2};
  kf_tensor_desc_t pairs_desc = kf_test::make_desc(dtype(), pairs, {3, 1});
  kf_tensor_t* pairs_view = nullptr;
  KF_ASSERT_OK(kf_tensor_create_view(c, &pairs_desc, 0, &pairs_view));
  const Tensor two_columns(pairs_view);
  const std::vector<double> pair_tenths(tenths.begin(), tenths.begin() + (size_t{2} << 20));
  for (kf_reduce_op_t op :
       {KF_REDUCE_SUM, KF_REDUCE_MEAN, KF_REDUCE_SUM_SQUARES, KF_REDUCE_L2_NORM}) {
    check(two_columns, pairs, pair_tenths, {}, op, 0, "constant column pairs");
    check(two_columns, pairs, pair_tenths, {1}, op, 0, "constant column pairs");
  }
  // The same value along two dense rows of 2^21 (on CUDA a block a row, 8192 elements a thread):
  // each thread's steps, and the strided view's lanes above, fold into groups before their
  // totals (each lane's 1024 parts added straight into its total left the f32 sum of squares of
  // the pairs 1.4e-5 off on an H100).
  const Shape long_rows{2, 1 << 21};
  Tensor r = tensor(long_rows);
  const std::vector<double> row_tenths(size_t{2} << 21, tenths[0]);
  kf_test::upload(r, row_tenths);
  for (kf_reduce_op_t op :
       {KF_REDUCE_SUM, KF_REDUCE_MEAN, KF_REDUCE_SUM_SQUARES, KF_REDUCE_L2_NORM})
    check(r, long_rows, row_tenths, {1}, op, 0, "constant long rows");
  // A few narrow column tiles over many rows: on sm_90 each tile's rows are split over a cluster
  // of blocks, each over a part of the rows that is not a whole number of loop steps.
  for (const Shape& split : {Shape{5000, 96}, Shape{6001, 96}}) {
    std::vector<double> zv;
    Tensor z = random(split, 4343, &zv, -1.0, 3.0);
    for (kf_reduce_op_t op : {KF_REDUCE_SUM, KF_REDUCE_MEAN_ABS, KF_REDUCE_MAX})
      check(z, split, zv, {0}, op, 0, "split rows");
  }
}

// The same call twice gives the same bits. (Both outputs poisoned with NaN first: an element
// neither call wrote compares unequal.)
TEST_P(ReduceTest, Deterministic) {
  std::vector<double> xv;
  const Shape shape{1500, 700};
  Tensor x = random(shape, 31337, &xv);
  for (const std::vector<int32_t>& axes :
       {std::vector<int32_t>{}, std::vector<int32_t>{0}, std::vector<int32_t>{1}}) {
    const Shape os = out_shape(shape, reduced_dims(2, axes), false);
    Tensor a = tensor(os), b = tensor(os);
    kf_test::poison(a);
    kf_test::poison(b);
    KF_ASSERT_OK(kf_reduce(ctx(), x, a, KF_REDUCE_SUM, axes.empty() ? nullptr : axes.data(),
                           static_cast<int32_t>(axes.size()), 0, nullptr));
    KF_ASSERT_OK(kf_reduce(ctx(), x, b, KF_REDUCE_SUM, axes.empty() ? nullptr : axes.data(),
                           static_cast<int32_t>(axes.size()), 0, nullptr));
    EXPECT_EQ(kf_test::download(a), kf_test::download(b)) << axes_str(axes);
  }
}

TEST_P(ReduceTest, SeedEntries) {
  std::vector<double> xv;
  const Shape shape{6, 1023};
  Tensor x = random(shape, 99, &xv);
  Tensor sq = tensor({6});
  kf_test::poison(sq);
  KF_ASSERT_OK(kf_reduce_sum_squared(ctx(), x, sq, -1, 0, nullptr));
  kf_test::expect_close(kf_test::download(sq),
                        reference(xv, shape, {false, true}, KF_REDUCE_SUM_SQUARES),
                        kf_test::tolerance(dtype()), "kf_reduce_sum_squared");
  Tensor ma = tensor({1, 1023});
  kf_test::poison(ma);
  KF_ASSERT_OK(kf_reduce_mean_abs(ctx(), x, ma, 0, 1, nullptr));
  kf_test::expect_close(kf_test::download(ma),
                        reference(xv, shape, {true, false}, KF_REDUCE_MEAN_ABS),
                        kf_test::tolerance(dtype()), "kf_reduce_mean_abs");
  KF_EXPECT_ERR(kf_reduce_mean_abs(ctx(), x, ma, 2, 1, nullptr), KF_ERROR_INVALID_ARGUMENT);
  KF_EXPECT_ERR(kf_reduce_sum_squared(ctx(), x, sq, -3, 0, nullptr), KF_ERROR_INVALID_ARGUMENT);
  KF_EXPECT_ERR(kf_reduce_sum_squared(ctx(), x, sq, 0, 0, nullptr), KF_ERROR_SHAPE_MISMATCH);
}

// Sums of nothing are 0, means NaN (as NumPy); no outputs is a no-op; max/min are refused.
TEST_P(ReduceTest, EmptyReductions) {
  Tensor x = tensor({0, 5});
  Tensor out = tensor({5});
  const int32_t axis0 = 0, axis1 = 1;
  for (kf_reduce_op_t op : {KF_REDUCE_SUM, KF_REDUCE_SUM_SQUARES, KF_REDUCE_L2_NORM}) {
    kf_test::poison(out);
    KF_ASSERT_OK(kf_reduce(ctx(), x, out, op, &axis0, 1, 0, nullptr));
    for (double v : kf_test::download(out)) EXPECT_EQ(v, 0.0) << op_name(op);
  }
  for (kf_reduce_op_t op : {KF_REDUCE_MEAN, KF_REDUCE_MEAN_ABS}) {
    kf_test::upload(out, std::vector<double>(5, 7.0));  // the poison would already be NaN
    KF_ASSERT_OK(kf_reduce(ctx(), x, out, op, &axis0, 1, 0, nullptr));
    for (double v : kf_test::download(out)) EXPECT_TRUE(std::isnan(v)) << op_name(op);
  }
  for (kf_reduce_op_t op : {KF_REDUCE_MAX, KF_REDUCE_MIN})
    KF_EXPECT_ERR(kf_reduce(ctx(), x, out, op, &axis0, 1, 0, nullptr), KF_ERROR_INVALID_ARGUMENT);
  Tensor none = tensor({0});
  KF_ASSERT_OK(kf_reduce(ctx(), x, none, KF_REDUCE_MAX, &axis1, 1, 0, nullptr));
}

TEST_P(ReduceTest, NanPropagates) {
  std::vector<double> xv =
      kf_test::round_to_dtype(kf_test::random_values(3 * 40, seed(3)), dtype());
  xv[40 + 17] = NAN;
  Tensor x = tensor({3, 40});
  kf_test::upload(x, xv);
  Tensor out = tensor({3});
  const int32_t axis = 1;
  for (kf_reduce_op_t op : kOps) {
    kf_test::poison(out);
    KF_ASSERT_OK(kf_reduce(ctx(), x, out, op, &axis, 1, 0, nullptr));
    const std::vector<double> got = kf_test::download(out);
    EXPECT_FALSE(std::isnan(got[0])) << op_name(op);
    EXPECT_TRUE(std::isnan(got[1])) << op_name(op);
    EXPECT_FALSE(std::isnan(got[2])) << op_name(op);
  }
}

TEST_P(ReduceTest, Errors) {
  std::vector<double> xv;
  Tensor x = random({3, 4}, 1, &xv);
  Tensor out = tensor({3});
  const int32_t axis1 = 1;
  // An out-of-range op is passed the way a C program (or ctypes) passes it: as a plain int.
  // Holding it in a kf_reduce_op_t variable in C++ would itself be undefined (and trips UBSan).
  using RawReduce = kf_result_t (*)(kf_context_t*, const kf_tensor_t*, kf_tensor_t*, int32_t,
                                    const int32_t*, int32_t, int32_t, kf_stream_t*);
  static_assert(sizeof(kf_reduce_op_t) == sizeof(int32_t), "enum passed as int32_t");
  const RawReduce reduce_raw = reinterpret_cast<RawReduce>(&kf_reduce);
  KF_EXPECT_ERR(kf_reduce(nullptr, x, out, KF_REDUCE_SUM, &axis1, 1, 0, nullptr),
                KF_ERROR_INVALID_HANDLE);
  KF_EXPECT_ERR(kf_reduce(ctx(), nullptr, out, KF_REDUCE_SUM, &axis1, 1, 0, nullptr),
                KF_ERROR_INVALID_HANDLE);
  KF_EXPECT_ERR(kf_reduce(ctx(), x, nullptr, KF_REDUCE_SUM, &axis1, 1, 0, nullptr),
                KF_ERROR_INVALID_HANDLE);
  for (int32_t bad_op : {99, -1})
    KF_EXPECT_ERR(reduce_raw(ctx(), x, out, bad_op, &axis1, 1, 0, nullptr),
                  KF_ERROR_INVALID_ARGUMENT);
  for (int32_t axis : {2, -3, 100}) {
    KF_EXPECT_ERR(kf_reduce(ctx(), x, out, KF_REDUCE_SUM, &axis, 1, 0, nullptr),
                  KF_ERROR_INVALID_ARGUMENT);
  }
  const int32_t duplicate[] = {1, -1};
  KF_EXPECT_ERR(kf_reduce(ctx(), x, out, KF_REDUCE_SUM, duplicate, 2, 0, nullptr),
                KF_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kf_get_last_error_message()).find("once"), std::string::npos)
      << kf_get_last_error_message();
  KF_EXPECT_ERR(kf_reduce(ctx(), x, out, KF_REDUCE_SUM, nullptr, 1, 0, nullptr),
                KF_ERROR_INVALID_ARGUMENT);
  KF_EXPECT_ERR(kf_reduce(ctx(), x, out, KF_REDUCE_SUM, &axis1, -1, 0, nullptr),
                KF_ERROR_INVALID_ARGUMENT);

  // Wrong out shapes; the message names the expected shape.
  KF_EXPECT_ERR(kf_reduce(ctx(), x, out, KF_REDUCE_SUM, &axis1, 1, 1, nullptr),
                KF_ERROR_SHAPE_MISMATCH);
  EXPECT_NE(std::string(kf_get_last_error_message()).find("[3,1]"), std::string::npos)
      << kf_get_last_error_message();
  Tensor wrong = tensor({4});
  KF_EXPECT_ERR(kf_reduce(ctx(), x, wrong, KF_REDUCE_SUM, &axis1, 1, 0, nullptr),
                KF_ERROR_SHAPE_MISMATCH);
  KF_EXPECT_ERR(kf_reduce(ctx(), x, out, KF_REDUCE_SUM, nullptr, 0, 0, nullptr),
                KF_ERROR_SHAPE_MISMATCH);
  EXPECT_NE(std::string(kf_get_last_error_message()).find("[]"), std::string::npos)
      << kf_get_last_error_message();

  // Dtypes.
  const kf_dtype_t other = dtype() == KF_DTYPE_FLOAT32 ? KF_DTYPE_FLOAT64 : KF_DTYPE_FLOAT32;
  Tensor out_other = kf_test::make_tensor(ctx(), other, {3});
  KF_EXPECT_ERR(kf_reduce(ctx(), x, out_other, KF_REDUCE_SUM, &axis1, 1, 0, nullptr),
                KF_ERROR_DTYPE_MISMATCH);
  Tensor xi = kf_test::make_tensor(ctx(), KF_DTYPE_INT32, {3, 4});
  Tensor oi = kf_test::make_tensor(ctx(), KF_DTYPE_INT32, {3});
  KF_EXPECT_ERR(kf_reduce(ctx(), xi, oi, KF_REDUCE_SUM, &axis1, 1, 0, nullptr),
                KF_ERROR_DTYPE_MISMATCH);

  // out overlapping x, and out writing one element twice.
  Tensor inside = make_view(x, dtype(), {3}, {4}, 0);
  KF_EXPECT_ERR(kf_reduce(ctx(), x, inside, KF_REDUCE_SUM, &axis1, 1, 0, nullptr),
                KF_ERROR_INVALID_ARGUMENT);
  Tensor base = tensor({4});
  Tensor twice = make_view(base, dtype(), {3, 2}, {1, 1}, 0);
  Tensor y = tensor({3, 2, 5});
  const int32_t last = -1;
  KF_EXPECT_ERR(kf_reduce(ctx(), y, twice, KF_REDUCE_SUM, &last, 1, 0, nullptr),
                KF_ERROR_INVALID_ARGUMENT);

  // Another context's tensor.
  kf_test::Context other_ctx;
  Tensor foreign = kf_test::make_tensor(other_ctx, dtype(), {3});
  KF_EXPECT_ERR(kf_reduce(ctx(), x, foreign, KF_REDUCE_SUM, &axis1, 1, 0, nullptr),
                KF_ERROR_DEVICE_MISMATCH);
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, ReduceTest, row_test::float_dtypes(),
                         row_test::dtype_param_name);

}  // namespace
