// C entry of the batch norm family: kf_fused_batch_norm_activation. All validation happens here,
// once; the result is a Plan the backends run without checks.
#include "core/ops/batch_norm/batch_norm.hpp"

#include <cstdint>

#include "core/runtime/context.hpp"
#include "core/runtime/error.hpp"
#include "core/runtime/tensor.hpp"
#include "kernel_fusion/ops.h"

namespace kf::batch_norm {
namespace {

constexpr const char* kEntry = "kf_fused_batch_norm_activation";

kf_dtype_t compute_dtype(kf_dtype_t dtype) {
  return dtype == KF_DTYPE_FLOAT64 ? KF_DTYPE_FLOAT64 : KF_DTYPE_FLOAT32;
}

void require_channel_tensor(const kf_tensor_t* t, const char* name, int64_t channels,
                            kf_dtype_t x_dtype) {
  if (!t) return;
  const kf_dtype_t want = compute_dtype(x_dtype);
  KF_REQUIRE(t->desc.dtype == want, KF_ERROR_DTYPE_MISMATCH,
             "%s: tensor %s has dtype %s, but per-channel tensors of %s data must be %s", kEntry,
             name, dtype_name(t->desc.dtype), dtype_name(x_dtype), dtype_name(want));
  KF_REQUIRE(t->desc.ndim == 1 && t->desc.shape[0] == channels, KF_ERROR_SHAPE_MISMATCH,
             "%s: tensor %s has shape %s, but it must be [%lld] (one value per channel)", kEntry,
             name, shape_string(t->desc).c_str(), static_cast<long long>(channels));
}

Channel channel_of(const kf_tensor_t* t) {
  Channel c;
  if (t) {
    c.data = t->data;
    c.stride = t->desc.strides[0];
  }
  return c;
}

void batch_norm(kf_context_t* ctx_handle, const kf_tensor_t* x_handle,
                const kf_tensor_t* weight_handle, const kf_tensor_t* bias_handle,
                kf_tensor_t* mean_handle, kf_tensor_t* var_handle, kf_tensor_t* out_handle,
                int32_t training, double momentum, double eps, const kf_activation_t& act_value,
                const kf_layout_t& layout_value, kf_stream_t* s) {
  kf_context_t* ctx = checked_context(ctx_handle, "ctx");
  const kf_tensor_t* x = checked_tensor(x_handle, ctx, "x");
  const kf_tensor_t* weight =
      weight_handle ? checked_tensor(weight_handle, ctx, "weight") : nullptr;
  const kf_tensor_t* bias = bias_handle ? checked_tensor(bias_handle, ctx, "bias") : nullptr;
  // Training writes the running statistics, so they must be writable there.
  const kf_tensor_t* running_mean = nullptr;
  const kf_tensor_t* running_var = nullptr;
  if (training) {
    if (mean_handle) running_mean = checked_output(mean_handle, ctx, "running_mean");
    if (var_handle) running_var = checked_output(var_handle, ctx, "running_var");
    KF_REQUIRE_ARG(!running_mean == !running_var,
                   "%s: in training, running_mean and running_var are both given (updated) or "
                   "both NULL (not tracked), not one of them",
                   kEntry);
  } else {
    KF_REQUIRE_ARG(mean_handle && var_handle,
                   "%s: inference (training == 0) normalises with the running statistics, but "
                   "running_%s is NULL",
                   kEntry, mean_handle ? "var" : "mean");
    running_mean = checked_tensor(mean_handle, ctx, "running_mean");
    running_var = checked_tensor(var_handle, ctx, "running_var");
  }
  kf_tensor_t* out = checked_output(out_handle, ctx, "out");
  kf_stream_t* stream = resolve_stream(ctx, s, "s");
  const int32_t act = rows::checked_activation(act_value);
  const int32_t layout = raw_enum(layout_value);
  KF_REQUIRE_ARG(layout == KF_LAYOUT_NCHW || layout == KF_LAYOUT_NHWC,
                 "%s: unknown layout %d (expected KF_LAYOUT_NCHW = 0 or KF_LAYOUT_NHWC = 1)",
                 kEntry, layout);
  rows::require_eps(kEntry, eps, x->desc.dtype);
  KF_REQUIRE_ARG(momentum >= 0 && momentum <= 1, "%s: momentum must be in [0, 1], not %g", kEntry,
                 momentum);

  const kf_tensor_desc_t& xd = x->desc;
  KF_REQUIRE(is_floating(xd.dtype), KF_ERROR_DTYPE_MISMATCH,
             "%s supports f32, f16, bf16 and f64, not dtype %s (tensor x)", kEntry,
             dtype_name(xd.dtype));
  KF_REQUIRE(xd.ndim >= 2, KF_ERROR_SHAPE_MISMATCH,
             "%s: x has shape %s, but it must have at least 2 dims ([N, C, *spatial] or "
             "[N, *spatial, C])",
             kEntry, shape_string(xd).c_str());
  KF_REQUIRE(out->desc.dtype == xd.dtype, KF_ERROR_DTYPE_MISMATCH,
             "%s: tensor out has dtype %s, but x has %s", kEntry, dtype_name(out->desc.dtype),
             dtype_name(xd.dtype));
  rows::require_shape(out, "out", xd, "x", 0, xd.ndim, "the shape");
  const int32_t channel_dim = layout == KF_LAYOUT_NCHW ? 1 : xd.ndim - 1;
  const int64_t channels = xd.shape[channel_dim];
  require_channel_tensor(weight, "weight", channels, xd.dtype);
  require_channel_tensor(bias, "bias", channels, xd.dtype);
  require_channel_tensor(running_mean, "running_mean", channels, xd.dtype);
  require_channel_tensor(running_var, "running_var", channels, xd.dtype);
  const int64_t count = channels == 0 ? 0 : element_count(xd) / channels;
  KF_REQUIRE_ARG(!training || channels == 0 || count >= 2,
                 "%s: training needs more than one value per channel, but x of shape %s has %lld "
                 "(batch statistics of one value have no variance)",
                 kEntry, shape_string(xd).c_str(), static_cast<long long>(count));

  const rows::Named all[] = {{x, "x"},
                             {weight, "weight"},
                             {bias, "bias"},
                             {out, "out"},
                             {running_mean, "running_mean"},
                             {running_var, "running_var"}};
  rows::require_aligned(all, 6);
  // out may be x exactly; written running statistics overlap nothing.
  rows::require_disjoint(all[3], all, 3, 1);
  if (training) {
    rows::require_disjoint(all[4], all, 4, 0);
    rows::require_disjoint(all[5], all, 5, 0);
  } else {
    rows::require_disjoint(all[3], all + 4, 2, 0);
  }

  Plan p;
  p.dtype = xd.dtype;
  p.act = static_cast<math::Activation>(act);
  p.eps = eps;
  p.momentum = momentum;
  p.training = training != 0;
  p.channels = channels;
  p.count = count;
  p.weight = channel_of(weight);
  p.bias = channel_of(bias);
  p.running_mean = channel_of(running_mean);
  p.running_var = channel_of(running_var);

  // Per-channel walk: x's dims with the channel dim first.
  kf_tensor_desc_t moved = xd;
  rows::WalkInput by_channel[2] = {{&p.x_c, {}}, {&p.out_c, {}}};
  moved.shape[0] = xd.shape[channel_dim];
  by_channel[0].strides[0] = xd.strides[channel_dim];
  by_channel[1].strides[0] = out->desc.strides[channel_dim];
  for (int32_t d = 0, k = 1; d < xd.ndim; ++d) {
    if (d == channel_dim) continue;
    moved.shape[k] = xd.shape[d];
    by_channel[0].strides[k] = xd.strides[d];
    by_channel[1].strides[k] = out->desc.strides[d];
    ++k;
  }
  p.x_c.data = x->data;
  p.out_c.data = out->data;
  p.by_channel = rows::make_walk(moved, 1, by_channel, 2);

  // Element walk: every dim is a column dim of one row.
  rows::WalkInput elements[2] = {{&p.x_e, {}}, {&p.out_e, {}}};
  for (int32_t d = 0; d < xd.ndim; ++d) {
    elements[0].strides[d] = xd.strides[d];
    elements[1].strides[d] = out->desc.strides[d];
  }
  p.x_e.data = x->data;
  p.out_e.data = out->data;
  p.elements = rows::make_walk(xd, 0, elements, 2);
  for (int32_t d = channel_dim + 1; d < xd.ndim; ++d) p.channel_inner *= xd.shape[d];
  p.dense = rows::dense_rows(p.elements, p.x_e) && rows::dense_rows(p.elements, p.out_e);
  p.channels_last = p.by_channel.outer_ndim == 1 && p.x_c.outer[0] == 1 && p.out_c.outer[0] == 1;

  if (channels == 0 || count == 0) return;
  rows::prepare(ctx, stream, all, 6);
  if (ctx->is_cuda()) {
#if defined(KF_WITH_CUDA)
    run_cuda(p, ctx->device_id, stream->native);
#else
    fail(KF_ERROR_NOT_SUPPORTED, "%s: this build has no CUDA backend", kEntry);
#endif
  } else {
    KF_REQUIRE(ctx->threads != nullptr, KF_ERROR_INTERNAL, "CPU context without a thread pool");
    run_cpu(p, *ctx->threads);
  }
}

}  // namespace
}  // namespace kf::batch_norm

extern "C" {

kf_result_t kf_fused_batch_norm_activation(kf_context_t* ctx, const kf_tensor_t* x,
                                           const kf_tensor_t* weight, const kf_tensor_t* bias,
                                           kf_tensor_t* running_mean, kf_tensor_t* running_var,
                                           kf_tensor_t* out, int32_t training, double momentum,
                                           double eps, kf_activation_t act, kf_layout_t layout,
                                           kf_stream_t* s) {
  return kf::api_call([&] {
    kf::batch_norm::batch_norm(ctx, x, weight, bias, running_mean, running_var, out, training,
                               momentum, eps, act, layout, s);
  });
}

}  // extern "C"
