// C entry of kf_fused_gelu_dropout: out = dropout(gelu(x)). All validation happens here, once;
// the result is a Plan that a backend runs without further checks.
#include "core/ops/dropout/dropout.hpp"

#include <cmath>
#include <cstdint>

#include "core/runtime/context.hpp"
#include "core/runtime/error.hpp"
#include "core/runtime/tensor.hpp"
#include "kernel_fusion/ops.h"

namespace kf::dropout {
namespace {

bool same_shape(const kf_tensor_desc_t& a, const kf_tensor_desc_t& b) {
  bool same = a.ndim == b.ndim;
  for (int32_t i = 0; same && i < a.ndim; ++i) same = a.shape[i] == b.shape[i];
  return same;
}

bool aligned_to_element(const kf_tensor_t* t) {
  return reinterpret_cast<uintptr_t>(t->data) % dtype_size(t->desc.dtype) == 0;
}

Plan make_plan(const kf_tensor_t* x, kf_tensor_t* out, kf_tensor_t* mask, double p,
               int32_t training, uint64_t seed, uint64_t offset) {
  Plan plan;
  plan.dtype = x->desc.dtype;
  plan.count = element_count(x->desc);
  plan.seed = seed;
  plan.offset = offset;
  plan.x = x->data;
  plan.out = out->data;
  plan.mask = mask ? static_cast<uint8_t*>(mask->data) : nullptr;
  if (training && p > 0.0) {
    // u = v * 2^-16 >= p  <=>  v >= ceil(p * 2^16), exact since p * 2^16 is exact in double;
    // in [1, 2^16] for p in (0, 1).
    plan.keep_threshold = static_cast<uint32_t>(std::ceil(std::ldexp(p, 16)));
    plan.scale = 1.0 / (1.0 - p);
  }
  if (plan.count == 0) return plan;

  // Row-major order is the RNG order, so dims are never reordered, only dropped and merged.
  for (int32_t i = 0; i < x->desc.ndim; ++i) {
    if (x->desc.shape[i] == 1) continue;
    plan.shape[plan.ndim] = x->desc.shape[i];
    plan.x_strides[plan.ndim] = x->desc.strides[i];
    plan.out_strides[plan.ndim] = out->desc.strides[i];
    plan.mask_strides[plan.ndim] = mask ? mask->desc.strides[i] : 0;
    ++plan.ndim;
  }
  if (plan.ndim == 0) {
    plan.ndim = 1;
    plan.shape[0] = 1;
    plan.x_strides[0] = plan.out_strides[0] = plan.mask_strides[0] = 1;
  }
  int32_t merged = 0;
  for (int32_t d = 1; d < plan.ndim; ++d) {
    const int64_t n = plan.shape[d];
    const bool mergeable = plan.x_strides[merged] == plan.x_strides[d] * n &&
                           plan.out_strides[merged] == plan.out_strides[d] * n &&
                           plan.mask_strides[merged] == plan.mask_strides[d] * n;
    if (!mergeable) ++merged;
    plan.shape[merged] = mergeable ? plan.shape[merged] * n : n;
    plan.x_strides[merged] = plan.x_strides[d];
    plan.out_strides[merged] = plan.out_strides[d];
    plan.mask_strides[merged] = plan.mask_strides[d];
  }
  plan.ndim = merged + 1;
  plan.contiguous = plan.ndim == 1 && plan.x_strides[0] == 1 && plan.out_strides[0] == 1 &&
                    (!mask || plan.mask_strides[0] == 1);
  return plan;
}

void run(kf_context_t* ctx_handle, const kf_tensor_t* x_handle, kf_tensor_t* out_handle,
         kf_tensor_t* mask_handle, double p, int32_t training, uint64_t seed, uint64_t offset,
         kf_stream_t* s) {
  kf_context_t* ctx = checked_context(ctx_handle, "ctx");
  const kf_tensor_t* x = checked_tensor(x_handle, ctx, "x");
  kf_tensor_t* out = checked_output(out_handle, ctx, "out");
  kf_tensor_t* mask = mask_handle ? checked_output(mask_handle, ctx, "mask_out") : nullptr;
  kf_stream_t* stream = resolve_stream(ctx, s, "s");
  KF_REQUIRE_ARG(p >= 0.0 && p < 1.0,
                 "dropout probability p = %g is outside [0, 1) (p = 1 would drop everything and "
                 "scale by infinity)",
                 p);
  KF_REQUIRE(is_floating(x->desc.dtype), KF_ERROR_DTYPE_MISMATCH,
             "kf_fused_gelu_dropout supports f32, f16, bf16 and f64, not dtype %s (tensor x)",
             dtype_name(x->desc.dtype));
  KF_REQUIRE(out->desc.dtype == x->desc.dtype, KF_ERROR_DTYPE_MISMATCH,
             "tensor out has dtype %s, but x has %s", dtype_name(out->desc.dtype),
             dtype_name(x->desc.dtype));
  KF_REQUIRE(same_shape(out->desc, x->desc), KF_ERROR_SHAPE_MISMATCH,
             "tensor out has shape %s, but it must have x's shape %s",
             shape_string(out->desc).c_str(), shape_string(x->desc).c_str());
  if (mask) {
    KF_REQUIRE(mask->desc.dtype == KF_DTYPE_UINT8, KF_ERROR_DTYPE_MISMATCH,
               "tensor mask_out has dtype %s, but a dropout mask is uint8 (1 = kept)",
               dtype_name(mask->desc.dtype));
    KF_REQUIRE(same_shape(mask->desc, x->desc), KF_ERROR_SHAPE_MISMATCH,
               "tensor mask_out has shape %s, but it must have x's shape %s",
               shape_string(mask->desc).c_str(), shape_string(x->desc).c_str());
  }
  KF_REQUIRE_ARG(aligned_to_element(x) && aligned_to_element(out),
                 "tensor %s starts at %p, which is not aligned to its %zu-byte elements",
                 aligned_to_element(x) ? "out" : "x", aligned_to_element(x) ? out->data : x->data,
                 dtype_size(x->desc.dtype));
  KF_REQUIRE_ARG(
      same_view(out, x) || !may_overlap(out, x),
      "tensor out partially overlaps input x; only the exact in-place form (out is x) is allowed");
  if (mask) {
    KF_REQUIRE_ARG(!may_overlap(mask, x), "tensor mask_out overlaps input x");
    KF_REQUIRE_ARG(!may_overlap(mask, out), "tensor mask_out overlaps output out");
  }

  const Plan plan = make_plan(x, out, mask, p, training, seed, offset);
  if (plan.count == 0) return;

  activate(ctx);
  prepare_for_stream(x, stream);
  if (out != x) prepare_for_stream(out, stream);
  if (mask) prepare_for_stream(mask, stream);
  if (ctx->is_cuda()) {
#if defined(KF_WITH_CUDA)
    run_cuda(plan, ctx->device_id, stream->native);
#else
    fail(KF_ERROR_NOT_SUPPORTED, "kf_fused_gelu_dropout: this build has no CUDA backend");
#endif
  } else {
    KF_REQUIRE(ctx->threads != nullptr, KF_ERROR_INTERNAL, "CPU context without a thread pool");
    run_cpu(plan, *ctx->threads);
  }
}

}  // namespace
}  // namespace kf::dropout

extern "C" {

kf_result_t kf_fused_gelu_dropout(kf_context_t* ctx, const kf_tensor_t* x, kf_tensor_t* out,
                                  kf_tensor_t* mask_out, double p, int32_t training, uint64_t seed,
                                  uint64_t offset, kf_stream_t* s) {
  return kf::api_call(
      [&] { kf::dropout::run(ctx, x, out, mask_out, p, training, seed, offset, s); });
}

}  // extern "C"
