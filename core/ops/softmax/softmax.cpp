// C entries of the softmax family: kf_fused_softmax and kf_log_softmax. All validation happens
// here, once; the result is a Plan the backends run without checks.
#include "core/ops/softmax/softmax.hpp"

#include <cstdint>

#include "core/runtime/context.hpp"
#include "core/runtime/error.hpp"
#include "core/runtime/tensor.hpp"
#include "kernel_fusion/ops.h"

namespace kf::softmax {
namespace {

using rows::Named;

void run(bool log, kf_context_t* ctx_handle, const kf_tensor_t* x_handle,
         const kf_tensor_t* mask_handle, kf_tensor_t* out_handle, double scale, int32_t causal,
         kf_stream_t* s) {
  const char* entry = log ? "kf_log_softmax" : "kf_fused_softmax";
  kf_context_t* ctx = checked_context(ctx_handle, "ctx");
  const kf_tensor_t* x = checked_tensor(x_handle, ctx, "x");
  const kf_tensor_t* mask = mask_handle ? checked_tensor(mask_handle, ctx, "mask") : nullptr;
  kf_tensor_t* out = checked_output(out_handle, ctx, "out");
  kf_stream_t* stream = resolve_stream(ctx, s, "s");
  rows::require_scale(entry, scale, x->desc.dtype);

  const kf_tensor_desc_t& xd = x->desc;
  KF_REQUIRE(is_floating(xd.dtype), KF_ERROR_DTYPE_MISMATCH,
             "%s supports f32, f16, bf16 and f64, not dtype %s (tensor x)", entry,
             dtype_name(xd.dtype));
  KF_REQUIRE_ARG(xd.ndim >= 1, "%s: x must have at least one dim (the softmax dim)", entry);
  for (const Named& t : {Named{mask, "mask"}, Named{out, "out"}}) {
    KF_REQUIRE(!t.tensor || t.tensor->desc.dtype == xd.dtype, KF_ERROR_DTYPE_MISMATCH,
               "tensor %s has dtype %s, but x has %s", t.name, dtype_name(t.tensor->desc.dtype),
               dtype_name(xd.dtype));
  }
  if (mask) {
    const kf_tensor_desc_t& md = mask->desc;
    bool broadcastable = md.ndim <= xd.ndim;
    for (int32_t j = 0; broadcastable && j < md.ndim; ++j) {
      const int64_t extent = xd.shape[j + xd.ndim - md.ndim];
      broadcastable = md.shape[j] == extent || md.shape[j] == 1;
    }
    KF_REQUIRE(broadcastable, KF_ERROR_SHAPE_MISMATCH,
               "tensor mask has shape %s, not broadcastable to x's shape %s",
               shape_string(md).c_str(), shape_string(xd).c_str());
  }
  rows::require_shape(out, "out", xd, "x", 0, xd.ndim, "the shape");
  const Named all[] = {{x, "x"}, {mask, "mask"}, {out, "out"}};
  rows::require_aligned(all, 3);
  rows::require_disjoint(all[2], all, 2, 1);  // out may be x exactly

  Plan p;
  p.dtype = xd.dtype;
  p.log = log;
  p.causal = causal != 0;
  p.scale = scale;
  p.query_rows = xd.ndim >= 2 ? xd.shape[xd.ndim - 2] : 1;
  p.diagonal = xd.shape[xd.ndim - 1] - p.query_rows;
  rows::WalkInput walk[3] = {};
  int32_t n = 0;
  auto add = [&](rows::Operand& o, const kf_tensor_t* t) {
    if (!t) return;
    o.data = t->data;
    walk[n].operand = &o;
    rows::broadcast_strides(xd, t, walk[n].strides);
    ++n;
  };
  add(p.x, x);
  add(p.out, out);
  add(p.mask, mask);
  p.walk = rows::make_walk(xd, xd.ndim - 1, walk, n);
  p.dense = rows::dense_rows(p.walk, p.x) && rows::dense_rows(p.walk, p.out) &&
            (!mask || rows::dense_rows(p.walk, p.mask));
  if (p.walk.rows == 0 || p.walk.row_length == 0) return;

  rows::prepare(ctx, stream, all, 3);
  if (ctx->is_cuda()) {
#if defined(KF_WITH_CUDA)
    p.pool = ctx->pool.get();
    p.grid = &stream->grid;
    run_cuda(p, ctx->device_id, stream->native);
#else
    fail(KF_ERROR_NOT_SUPPORTED, "%s: this build has no CUDA backend", entry);
#endif
  } else {
    KF_REQUIRE(ctx->threads != nullptr, KF_ERROR_INTERNAL, "CPU context without a thread pool");
    run_cpu(p, *ctx->threads);
  }
}

}  // namespace
}  // namespace kf::softmax

extern "C" {

kf_result_t kf_fused_softmax(kf_context_t* ctx, const kf_tensor_t* x, const kf_tensor_t* mask,
                             kf_tensor_t* out, double scale, int32_t causal, kf_stream_t* s) {
  return kf::api_call([&] { kf::softmax::run(false, ctx, x, mask, out, scale, causal, s); });
}

kf_result_t kf_log_softmax(kf_context_t* ctx, const kf_tensor_t* x, const kf_tensor_t* mask,
                           kf_tensor_t* out, double scale, int32_t causal, kf_stream_t* s) {
  return kf::api_call([&] { kf::softmax::run(true, ctx, x, mask, out, scale, causal, s); });
}

}  // extern "C"
