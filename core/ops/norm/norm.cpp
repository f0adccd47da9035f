// C entries of the norm family: kf_fused_layer_norm_activation and kf_fused_rms_norm_activation.
// All validation happens here, once; the result is a Plan the backends run without checks.
#include "core/ops/norm/norm.hpp"

#include <cstdint>

#include "core/runtime/context.hpp"
#include "core/runtime/error.hpp"
#include "core/runtime/tensor.hpp"
#include "kernel_fusion/ops.h"

namespace kf::norm {
namespace {

using rows::Named;

kf_dtype_t stats_dtype(kf_dtype_t dtype) {
  return dtype == KF_DTYPE_FLOAT64 ? KF_DTYPE_FLOAT64 : KF_DTYPE_FLOAT32;
}

void require_dtype(const Named& t, kf_dtype_t dtype, const char* x_name) {
  if (!t.tensor) return;
  KF_REQUIRE(t.tensor->desc.dtype == dtype, KF_ERROR_DTYPE_MISMATCH,
             "tensor %s has dtype %s, but %s has %s", t.name, dtype_name(t.tensor->desc.dtype),
             x_name, dtype_name(dtype));
}

// Runs the plan on ctx's backend; on CUDA it first gives the plan the context's pool and the
// stream's grid words (Plan::pool, Plan::grid).
void run_plan(kf_context_t* ctx, kf_stream_t* stream, Plan& plan, const Named* tensors,
              int32_t count, const char* entry) {
  if (plan.walk.rows == 0 || plan.walk.row_length == 0) return;
  rows::prepare(ctx, stream, tensors, count);
  if (ctx->is_cuda()) {
#if defined(KF_WITH_CUDA)
    plan.pool = ctx->pool.get();
    plan.grid = &stream->grid;
    run_cuda(plan, ctx->device_id, stream->native);
#else
    fail(KF_ERROR_NOT_SUPPORTED, "%s: this build has no CUDA backend", entry);
#endif
  } else {
    KF_REQUIRE(ctx->threads != nullptr, KF_ERROR_INTERNAL, "CPU context without a thread pool");
    run_cpu(plan, *ctx->threads);
  }
}

void set_dense(Plan& p) {
  p.dense = true;
  for (const rows::Operand* o : {&p.x, &p.residual, &p.weight, &p.bias, &p.out, &p.residual_out})
    if (o->data && !rows::dense_rows(p.walk, *o)) p.dense = false;
}

void layer_norm(kf_context_t* ctx_handle, const kf_tensor_t* x_handle,
                const kf_tensor_t* weight_handle, const kf_tensor_t* bias_handle,
                kf_tensor_t* out_handle, kf_tensor_t* mean_handle, kf_tensor_t* rstd_handle,
                int32_t normalized_ndim, double eps, const kf_activation_t& act_value,
                kf_stream_t* s) {
  const char* entry = "kf_fused_layer_norm_activation";
  kf_context_t* ctx = checked_context(ctx_handle, "ctx");
  const kf_tensor_t* x = checked_tensor(x_handle, ctx, "x");
  const kf_tensor_t* weight =
      weight_handle ? checked_tensor(weight_handle, ctx, "weight") : nullptr;
  const kf_tensor_t* bias = bias_handle ? checked_tensor(bias_handle, ctx, "bias") : nullptr;
  kf_tensor_t* out = checked_output(out_handle, ctx, "out");
  kf_tensor_t* mean = mean_handle ? checked_output(mean_handle, ctx, "mean_out") : nullptr;
  kf_tensor_t* rstd = rstd_handle ? checked_output(rstd_handle, ctx, "rstd_out") : nullptr;
  kf_stream_t* stream = resolve_stream(ctx, s, "s");
  const int32_t act = rows::checked_activation(act_value);
  rows::require_eps(entry, eps, x->desc.dtype);

  const kf_tensor_desc_t& xd = x->desc;
  KF_REQUIRE(is_floating(xd.dtype), KF_ERROR_DTYPE_MISMATCH,
             "%s supports f32, f16, bf16 and f64, not dtype %s (tensor x)", entry,
             dtype_name(xd.dtype));
  KF_REQUIRE_ARG(xd.ndim >= 1 && normalized_ndim >= 1 && normalized_ndim <= xd.ndim,
                 "%s: normalized_ndim is %d, but it must be in [1, %d] for x of shape %s", entry,
                 normalized_ndim, xd.ndim, shape_string(xd).c_str());
  const int32_t split = xd.ndim - normalized_ndim;
  const Named inputs[] = {{x, "x"}, {weight, "weight"}, {bias, "bias"}};
  for (const Named& t : {inputs[1], inputs[2], Named{out, "out"}}) require_dtype(t, xd.dtype, "x");
  for (const Named& t : {Named{mean, "mean_out"}, Named{rstd, "rstd_out"}}) {
    KF_REQUIRE(!t.tensor || t.tensor->desc.dtype == stats_dtype(xd.dtype), KF_ERROR_DTYPE_MISMATCH,
               "tensor %s has dtype %s, but statistics of %s data are stored as %s", t.name,
               dtype_name(t.tensor->desc.dtype), dtype_name(xd.dtype),
               dtype_name(stats_dtype(xd.dtype)));
  }
  if (weight)
    rows::require_shape(weight, "weight", xd, "x", split, normalized_ndim, "the last dims");
  if (bias) rows::require_shape(bias, "bias", xd, "x", split, normalized_ndim, "the last dims");
  rows::require_shape(out, "out", xd, "x", 0, xd.ndim, "the shape");
  if (mean) rows::require_shape(mean, "mean_out", xd, "x", 0, split, "the leading dims");
  if (rstd) rows::require_shape(rstd, "rstd_out", xd, "x", 0, split, "the leading dims");
  const Named all[] = {inputs[0],    inputs[1],          inputs[2],
                       {out, "out"}, {mean, "mean_out"}, {rstd, "rstd_out"}};
  rows::require_aligned(all, 6);
  rows::require_disjoint(all[3], all, 3, 1);  // out may be x exactly
  rows::require_disjoint(all[4], all, 4, 0);
  rows::require_disjoint(all[5], all, 5, 0);
  if (xd.ndim > split) {
    bool empty_rows = false;
    for (int32_t d = split; d < xd.ndim; ++d) empty_rows = empty_rows || xd.shape[d] == 0;
    int64_t leading = 1;
    for (int32_t d = 0; d < split; ++d) leading *= xd.shape[d];
    KF_REQUIRE(!(empty_rows && leading > 0 && (mean || rstd)), KF_ERROR_SHAPE_MISMATCH,
               "%s: x of shape %s has empty rows, whose statistics are undefined", entry,
               shape_string(xd).c_str());
  }

  Plan p;
  p.kind = Kind::layer;
  p.dtype = xd.dtype;
  p.act = static_cast<math::Activation>(act);
  p.eps = eps;
  rows::WalkInput walk[6] = {};
  int32_t n = 0;
  auto add = [&](rows::Operand& o, const kf_tensor_t* t, int32_t first, bool whole) {
    if (!t) return;
    o.data = t->data;
    walk[n].operand = &o;
    if (whole)
      rows::broadcast_strides(xd, t, walk[n].strides);
    else
      rows::placed_strides(xd, t, first, walk[n].strides);
    ++n;
  };
  add(p.x, x, 0, true);
  add(p.out, out, 0, true);
  add(p.weight, weight, split, false);
  add(p.bias, bias, split, false);
  add(p.mean, mean, 0, false);
  add(p.rstd, rstd, 0, false);
  p.walk = rows::make_walk(xd, split, walk, n);
  set_dense(p);
  run_plan(ctx, stream, p, all, 6, entry);
}

void rms_norm(kf_context_t* ctx_handle, const kf_tensor_t* x_handle,
              const kf_tensor_t* residual_handle, const kf_tensor_t* weight_handle,
              kf_tensor_t* out_handle, kf_tensor_t* residual_out_handle, double eps,
              const kf_activation_t& act_value, kf_stream_t* s) {
  const char* entry = "kf_fused_rms_norm_activation";
  kf_context_t* ctx = checked_context(ctx_handle, "ctx");
  const kf_tensor_t* x = checked_tensor(x_handle, ctx, "x");
  const kf_tensor_t* residual =
      residual_handle ? checked_tensor(residual_handle, ctx, "residual") : nullptr;
  const kf_tensor_t* weight =
      weight_handle ? checked_tensor(weight_handle, ctx, "weight") : nullptr;
  kf_tensor_t* out = checked_output(out_handle, ctx, "out");
  kf_tensor_t* residual_out =
      residual_out_handle ? checked_output(residual_out_handle, ctx, "residual_out") : nullptr;
  kf_stream_t* stream = resolve_stream(ctx, s, "s");
  const int32_t act = rows::checked_activation(act_value);
  rows::require_eps(entry, eps, x->desc.dtype);

  const kf_tensor_desc_t& xd = x->desc;
  KF_REQUIRE(is_floating(xd.dtype), KF_ERROR_DTYPE_MISMATCH,
             "%s supports f32, f16, bf16 and f64, not dtype %s (tensor x)", entry,
             dtype_name(xd.dtype));
  KF_REQUIRE_ARG(xd.ndim >= 1, "%s: x must have at least one dim (the normalized one)", entry);
  KF_REQUIRE_ARG(residual || !residual_out,
                 "%s: residual_out is given but residual is NULL (h = x + residual is only "
                 "formed with a residual)",
                 entry);
  const int32_t split = xd.ndim - 1;
  const Named all[] = {{x, "x"},
                       {residual, "residual"},
                       {weight, "weight"},
                       {out, "out"},
                       {residual_out, "residual_out"}};
  for (int32_t i = 1; i < 5; ++i) require_dtype(all[i], xd.dtype, "x");
  if (residual) rows::require_shape(residual, "residual", xd, "x", 0, xd.ndim, "the shape");
  if (weight) rows::require_shape(weight, "weight", xd, "x", split, 1, "the last dim");
  rows::require_shape(out, "out", xd, "x", 0, xd.ndim, "the shape");
  if (residual_out)
    rows::require_shape(residual_out, "residual_out", xd, "x", 0, xd.ndim, "the shape");
  rows::require_aligned(all, 5);
  rows::require_disjoint(all[3], all, 3, 2);  // out may be x or residual exactly
  rows::require_disjoint(all[4], all, 4, 2);  // residual_out likewise, never out

  Plan p;
  p.kind = Kind::rms;
  p.dtype = xd.dtype;
  p.act = static_cast<math::Activation>(act);
  p.eps = eps;
  rows::WalkInput walk[5] = {};
  int32_t n = 0;
  auto add = [&](rows::Operand& o, const kf_tensor_t* t, bool whole) {
    if (!t) return;
    o.data = t->data;
    walk[n].operand = &o;
    if (whole)
      rows::broadcast_strides(xd, t, walk[n].strides);
    else
      rows::placed_strides(xd, t, split, walk[n].strides);
    ++n;
  };
  add(p.x, x, true);
  add(p.residual, residual, true);
  add(p.weight, weight, false);
  add(p.out, out, true);
  add(p.residual_out, residual_out, true);
  p.walk = rows::make_walk(xd, split, walk, n);
  set_dense(p);
  run_plan(ctx, stream, p, all, 5, entry);
}

}  // namespace
}  // namespace kf::norm

extern "C" {

kf_result_t kf_fused_layer_norm_activation(kf_context_t* ctx, const kf_tensor_t* x,
                                           const kf_tensor_t* weight, const kf_tensor_t* bias,
                                           kf_tensor_t* out, kf_tensor_t* mean_out,
                                           kf_tensor_t* rstd_out, int32_t normalized_ndim,
                                           double eps, kf_activation_t act, kf_stream_t* s) {
  return kf::api_call([&] {
    kf::norm::layer_norm(ctx, x, weight, bias, out, mean_out, rstd_out, normalized_ndim, eps, act,
                         s);
  });
}

kf_result_t kf_fused_rms_norm_activation(kf_context_t* ctx, const kf_tensor_t* x,
                                         const kf_tensor_t* residual, const kf_tensor_t* weight,
                                         kf_tensor_t* out, kf_tensor_t* residual_out, double eps,
                                         kf_activation_t act, kf_stream_t* s) {
  return kf::api_call(
      [&] { kf::norm::rms_norm(ctx, x, residual, weight, out, residual_out, eps, act, s); });
}

}  // extern "C"
