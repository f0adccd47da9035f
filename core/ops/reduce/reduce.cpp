// C entries of the reduction family: kf_reduce and the seed ops over it (kf_reduce_sum_squared,
// kf_reduce_mean_abs). All validation happens here, once; the result is a Plan (dims sorted by
// x's strides, merged, layout classified) that a backend runs without further checks.
#include "core/ops/reduce/reduce.hpp"

#include <cstdint>
#include <string>
#include <utility>

#include "core/runtime/context.hpp"
#include "core/runtime/error.hpp"
#include "core/runtime/tensor.hpp"
#include "kernel_fusion/ops.h"

namespace kf::reduce {
namespace {

static_assert(static_cast<int>(Op::sum) == KF_REDUCE_SUM &&
                  static_cast<int>(Op::mean) == KF_REDUCE_MEAN &&
                  static_cast<int>(Op::max) == KF_REDUCE_MAX &&
                  static_cast<int>(Op::min) == KF_REDUCE_MIN &&
                  static_cast<int>(Op::sum_squares) == KF_REDUCE_SUM_SQUARES &&
                  static_cast<int>(Op::mean_abs) == KF_REDUCE_MEAN_ABS &&
                  static_cast<int>(Op::l2_norm) == KF_REDUCE_L2_NORM &&
                  math::reduction::kOpCount == KF_REDUCE_L2_NORM + 1,
              "math::reduction::Op must mirror kf_reduce_op_t");

const char* op_name(Op op) {
  switch (op) {
    case Op::sum: return "sum";
    case Op::mean: return "mean";
    case Op::max: return "max";
    case Op::min: return "min";
    case Op::sum_squares: return "sum of squares";
    case Op::mean_abs: return "mean of abs";
    case Op::l2_norm: return "L2 norm";
  }
  return "?";
}

// What the call asked for, in the terms messages use.
struct Request {
  const char* entry = nullptr;
  bool single_dim = false;  // the seed entries take one `dim`, kf_reduce an `axes` array
  bool reduced[KF_MAX_DIMS] = {};
  std::string axes_text;  // "(0, -1)" as given, or "(all)"
};

// Normalises and checks the axes; fills req.reduced.
void check_axes(Request& req, const kf_tensor_desc_t& xd, const int32_t* axes, int32_t n_axes) {
  KF_REQUIRE_ARG(n_axes >= 0, "%s: n_axes is %d, but it must be >= 0 (0 reduces every axis)",
                 req.entry, n_axes);
  KF_REQUIRE_ARG(n_axes == 0 || axes != nullptr,
                 "%s: axes is NULL but n_axes is %d (pass NULL only with n_axes = 0)", req.entry,
                 n_axes);
  if (n_axes == 0) {
    for (int32_t d = 0; d < xd.ndim; ++d) req.reduced[d] = true;
    req.axes_text = "(all)";
    return;
  }
  const int32_t ndim = xd.ndim;
  req.axes_text = "(";
  int32_t given[KF_MAX_DIMS] = {};
  for (int32_t i = 0; i < n_axes; ++i) {
    const int32_t axis = axes[i];
    const std::string what = req.single_dim
                                 ? std::string("dim ") + std::to_string(axis)
                                 : "axes[" + std::to_string(i) + "] = " + std::to_string(axis);
    KF_REQUIRE_ARG(axis >= -ndim && axis < ndim,
                   "%s: %s is out of range for x of shape %s (expected %d..%d)", req.entry,
                   what.c_str(), shape_string(xd).c_str(), -ndim, ndim - 1);
    const int32_t d = axis < 0 ? axis + ndim : axis;
    if (req.reduced[d]) {
      int32_t first = 0;
      while (first < i && given[first] != d) ++first;
      fail(KF_ERROR_INVALID_ARGUMENT,
           "%s: axes[%d] = %d and axes[%d] = %d both name axis %d of x (shape %s); each axis may "
           "be given once",
           req.entry, first, axes[first], i, axis, d, shape_string(xd).c_str());
    }
    req.reduced[d] = true;
    given[i] = d;
    req.axes_text += (i ? ", " : "") + std::to_string(axis);
  }
  req.axes_text += ")";
}

void check_out_shape(const Request& req, const kf_tensor_desc_t& xd, const kf_tensor_desc_t& od,
                     bool keepdim) {
  kf_tensor_desc_t expected = xd;
  expected.ndim = 0;
  for (int32_t d = 0; d < xd.ndim; ++d) {
    if (!req.reduced[d])
      expected.shape[expected.ndim++] = xd.shape[d];
    else if (keepdim)
      expected.shape[expected.ndim++] = 1;
  }
  bool same = od.ndim == expected.ndim;
  for (int32_t d = 0; same && d < od.ndim; ++d) same = od.shape[d] == expected.shape[d];
  KF_REQUIRE(same, KF_ERROR_SHAPE_MISMATCH,
             "%s: tensor out has shape %s, but reducing x of shape %s over %s %s with keepdim=%d "
             "gives %s",
             req.entry, shape_string(od).c_str(), shape_string(xd).c_str(),
             req.single_dim ? "dim" : "axes", req.axes_text.c_str(), keepdim ? 1 : 0,
             shape_string(expected).c_str());
}

struct Dim {
  int64_t shape, x_stride, out_stride;
  bool reduced;
};

// Drops extent-1 dims, sorts by x's stride (outermost first, stable), merges contiguous
// neighbours of the same kind, then classifies the layout.
Plan make_plan(const Request& req, Op op, const kf_tensor_t* x, kf_tensor_t* out, bool keepdim,
               int64_t outputs, int64_t reduced) {
  Plan p;
  p.op = op;
  p.dtype = x->desc.dtype;
  p.outputs = outputs;
  p.reduced = reduced;
  p.x = x->data;
  p.out = out->data;

  const kf_tensor_desc_t& xd = x->desc;
  Dim dims[KF_MAX_DIMS];
  int32_t n = 0;
  int32_t out_dim = 0;
  for (int32_t d = 0; d < xd.ndim; ++d) {
    const bool is_reduced = req.reduced[d];
    const int64_t out_stride = is_reduced ? 0 : out->desc.strides[out_dim];
    if (!is_reduced || keepdim) ++out_dim;
    if (xd.shape[d] == 1) continue;
    if (is_reduced && reduced == 0) continue;  // an empty reduction reads nothing
    dims[n++] = Dim{xd.shape[d], xd.strides[d], out_stride, is_reduced};
  }
  for (int32_t i = 1; i < n; ++i)
    for (int32_t k = i; k > 0 && dims[k].x_stride > dims[k - 1].x_stride; --k)
      std::swap(dims[k], dims[k - 1]);

  int32_t merged = 0;
  for (int32_t i = 0; i < n; ++i) {
    const Dim& d = dims[i];
    Dim* previous = merged > 0 ? &dims[merged - 1] : nullptr;
    if (previous && previous->reduced == d.reduced && previous->x_stride == d.x_stride * d.shape &&
        (d.reduced || previous->out_stride == d.out_stride * d.shape)) {
      previous->shape *= d.shape;
      previous->x_stride = d.x_stride;
      previous->out_stride = d.out_stride;
    } else {
      dims[merged++] = d;
    }
  }
  n = merged;

  char kinds[KF_MAX_DIMS + 1] = {};  // "KRK" and so on, outermost first
  for (int32_t i = 0; i < n; ++i) {
    const Dim& d = dims[i];
    kinds[i] = d.reduced ? 'R' : 'K';
    if (d.reduced) {
      p.red_shape[p.red_ndim] = d.shape;
      p.x_red[p.red_ndim++] = d.x_stride;
    } else {
      p.kept_shape[p.kept_ndim] = d.shape;
      p.x_kept[p.kept_ndim] = d.x_stride;
      p.out_kept[p.kept_ndim++] = d.out_stride;
    }
  }

  const std::string pattern = kinds;
  if (reduced == 0) {
    p.layout = Layout::strided;
  } else if ((pattern == "R" || pattern == "KR" || pattern.empty()) &&
             (p.red_ndim == 0 || p.x_red[0] == 1)) {
    p.layout = Layout::rows;
    p.row_stride = p.kept_ndim ? p.x_kept[0] : 0;
    p.out_stride = p.kept_ndim ? p.out_kept[0] : 0;
  } else if ((pattern == "K" || pattern == "RK" || pattern == "KRK") &&
             p.x_kept[p.kept_ndim - 1] == 1) {
    p.layout = Layout::columns;  // "K": one row of columns, each reducing a single element
    p.inner = p.kept_shape[p.kept_ndim - 1];
    p.out_stride = p.out_kept[p.kept_ndim - 1];
    p.row_stride = p.red_ndim ? p.x_red[0] : 0;
    if (p.kept_ndim == 2) {
      p.outer = p.kept_shape[0];
      p.outer_stride = p.x_kept[0];
      p.out_outer = p.out_kept[0];
    }
  } else {
    p.layout = Layout::strided;
  }
  return p;
}

void run(const char* entry, bool single_dim, kf_context_t* ctx_handle, const kf_tensor_t* x_handle,
         kf_tensor_t* out_handle, int32_t op_value, const int32_t* axes, int32_t n_axes,
         int32_t keepdim, kf_stream_t* s) {
  kf_context_t* ctx = checked_context(ctx_handle, "ctx");
  const kf_tensor_t* x = checked_tensor(x_handle, ctx, "x");
  kf_tensor_t* out = checked_output(out_handle, ctx, "out");
  kf_stream_t* stream = resolve_stream(ctx, s, "s");
  KF_REQUIRE_ARG(op_value >= 0 && op_value < math::reduction::kOpCount,
                 "%s: unknown op %d (expected a kf_reduce_op_t, 0..%d)", entry, op_value,
                 math::reduction::kOpCount - 1);
  const Op op = static_cast<Op>(op_value);
  const kf_tensor_desc_t& xd = x->desc;
  KF_REQUIRE(is_floating(xd.dtype), KF_ERROR_DTYPE_MISMATCH,
             "%s supports f32, f16, bf16 and f64, not dtype %s (tensor x)", entry,
             dtype_name(xd.dtype));
  KF_REQUIRE(out->desc.dtype == xd.dtype, KF_ERROR_DTYPE_MISMATCH,
             "%s: tensor out has dtype %s, but x has %s", entry, dtype_name(out->desc.dtype),
             dtype_name(xd.dtype));

  Request req;
  req.entry = entry;
  req.single_dim = single_dim;
  check_axes(req, xd, axes, n_axes);
  check_out_shape(req, xd, out->desc, keepdim != 0);
  for (const kf_tensor_t* t : {x, static_cast<const kf_tensor_t*>(out)}) {
    KF_REQUIRE_ARG(reinterpret_cast<uintptr_t>(t->data) % dtype_size(t->desc.dtype) == 0,
                   "%s: tensor %s starts at %p, which is not aligned to its %zu-byte elements",
                   entry, t == x ? "x" : "out", t->data, dtype_size(t->desc.dtype));
  }
  KF_REQUIRE_ARG(!may_overlap(out, x), "%s: tensor out overlaps input x; use a separate output",
                 entry);

  int64_t outputs = 1, reduced = 1;
  for (int32_t d = 0; d < xd.ndim; ++d) (req.reduced[d] ? reduced : outputs) *= xd.shape[d];
  KF_REQUIRE_ARG(reduced > 0 || (op != Op::max && op != Op::min),
                 "%s: the %s of an empty set is undefined (x of shape %s has an empty reduced "
                 "axis among %s)",
                 entry, op_name(op), shape_string(xd).c_str(), req.axes_text.c_str());
  if (outputs == 0) return;

  const Plan plan = make_plan(req, op, x, out, keepdim != 0, outputs, reduced);
  activate(ctx);  // CUDA: the context's device becomes current (this thread may be new to it)
  prepare_for_stream(x, stream);
  prepare_for_stream(out, stream);
  if (ctx->is_cuda()) {
#if defined(KF_WITH_CUDA)
    run_cuda(plan, ctx->device_id, stream->native);
#else
    fail(KF_ERROR_NOT_SUPPORTED, "%s: this build has no CUDA backend", entry);
#endif
  } else {
    KF_REQUIRE(ctx->threads != nullptr, KF_ERROR_INTERNAL, "CPU context without a thread pool");
    run_cpu(plan, *ctx->threads);
  }
}

}  // namespace
}  // namespace kf::reduce

extern "C" {

kf_result_t kf_reduce(kf_context_t* ctx, const kf_tensor_t* x, kf_tensor_t* out, kf_reduce_op_t op,
                      const int32_t* axes, int32_t n_axes, int32_t keepdim, kf_stream_t* s) {
  const int op_value = kf::raw_enum(op);
  return kf::api_call([&] {
    kf::reduce::run("kf_reduce", false, ctx, x, out, op_value, axes, n_axes, keepdim, s);
  });
}

kf_result_t kf_reduce_sum_squared(kf_context_t* ctx, const kf_tensor_t* x, kf_tensor_t* out,
                                  int32_t dim, int32_t keepdim, kf_stream_t* s) {
  return kf::api_call([&] {
    kf::reduce::run("kf_reduce_sum_squared", true, ctx, x, out, KF_REDUCE_SUM_SQUARES, &dim, 1,
                    keepdim, s);
  });
}

kf_result_t kf_reduce_mean_abs(kf_context_t* ctx, const kf_tensor_t* x, kf_tensor_t* out,
                               int32_t dim, int32_t keepdim, kf_stream_t* s) {
  return kf::api_call([&] {
    kf::reduce::run("kf_reduce_mean_abs", true, ctx, x, out, KF_REDUCE_MEAN_ABS, &dim, 1, keepdim,
                    s);
  });
}

}  // extern "C"
