// C entry of kf_fused_bias_activation: out = act(x + bias), bias one row broadcast along x's last
// dim. It is the elementwise add under a narrower contract: this entry checks what that contract
// adds (bias is 1-D and exactly [hidden]) and names its own parameters in every message, then
// hands the call to the elementwise family, whose planner recognises the bias layout.
#include <cstdint>

#include "core/ops/elementwise/elementwise.hpp"
#include "core/runtime/context.hpp"
#include "core/runtime/error.hpp"
#include "core/runtime/tensor.hpp"
#include "kernel_fusion/ops.h"

namespace kf::bias_activation {
namespace {

void run(kf_context_t* ctx_handle, const kf_tensor_t* x_handle, const kf_tensor_t* bias_handle,
         kf_tensor_t* out_handle, int32_t act, kf_stream_t* s) {
  kf_context_t* ctx = checked_context(ctx_handle, "ctx");
  const kf_tensor_t* x = checked_tensor(x_handle, ctx, "x");
  const kf_tensor_t* bias = checked_tensor(bias_handle, ctx, "bias");
  kf_tensor_t* out = checked_output(out_handle, ctx, "out");
  resolve_stream(ctx, s, "s");
  KF_REQUIRE_ARG(act >= 0 && act < math::kActivationCount,
                 "unknown activation %d (expected a kf_activation_t, 0..%d)", act,
                 math::kActivationCount - 1);
  KF_REQUIRE(is_floating(x->desc.dtype), KF_ERROR_DTYPE_MISMATCH,
             "kf_fused_bias_activation supports f32, f16, bf16 and f64, not dtype %s (tensor x)",
             dtype_name(x->desc.dtype));
  KF_REQUIRE(bias->desc.dtype == x->desc.dtype, KF_ERROR_DTYPE_MISMATCH,
             "tensor bias has dtype %s, but x has %s", dtype_name(bias->desc.dtype),
             dtype_name(x->desc.dtype));
  KF_REQUIRE(out->desc.dtype == x->desc.dtype, KF_ERROR_DTYPE_MISMATCH,
             "tensor out has dtype %s, but x has %s", dtype_name(out->desc.dtype),
             dtype_name(x->desc.dtype));
  KF_REQUIRE(x->desc.ndim >= 1, KF_ERROR_SHAPE_MISMATCH,
             "tensor x is a scalar (shape []); a bias is added along x's last dim, so x needs one");
  const int64_t hidden = x->desc.shape[x->desc.ndim - 1];
  KF_REQUIRE(bias->desc.ndim == 1 && bias->desc.shape[0] == hidden, KF_ERROR_SHAPE_MISMATCH,
             "tensor bias has shape %s, expected [hidden] = [%lld] (x has shape %s)",
             shape_string(bias->desc).c_str(), static_cast<long long>(hidden),
             shape_string(x->desc).c_str());
  bool same = out->desc.ndim == x->desc.ndim;
  for (int32_t i = 0; same && i < x->desc.ndim; ++i) same = out->desc.shape[i] == x->desc.shape[i];
  KF_REQUIRE(same, KF_ERROR_SHAPE_MISMATCH,
             "tensor out has shape %s, but it must have x's shape %s",
             shape_string(out->desc).c_str(), shape_string(x->desc).c_str());
  KF_REQUIRE_ARG(!may_overlap(out, bias), "tensor out overlaps input bias; use a separate output");
  KF_REQUIRE_ARG(
      same_view(out, x) || !may_overlap(out, x),
      "tensor out partially overlaps input x; only the exact in-place form (out is x) is allowed");
  elementwise::run(math::BinaryOp::add, ctx, x, bias, out, act, s);
}

}  // namespace
}  // namespace kf::bias_activation

extern "C" {

kf_result_t kf_fused_bias_activation(kf_context_t* ctx, const kf_tensor_t* x,
                                     const kf_tensor_t* bias, kf_tensor_t* out, kf_activation_t act,
                                     kf_stream_t* s) {
  const int activation = kf::raw_enum(act);
  return kf::api_call([&] { kf::bias_activation::run(ctx, x, bias, out, activation, s); });
}

}  // extern "C"
