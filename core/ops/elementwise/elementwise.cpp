// C entries of the fused elementwise ops: out = act(a op b), b broadcast onto a. All validation
// happens here, once; the result is a Plan (broadcast strides, dims sorted and coalesced, layout
// classified) that a backend runs without further checks.
#include "core/ops/elementwise/elementwise.hpp"

#include <cstdint>
#include <cstring>
#include <utility>

#include "core/runtime/context.hpp"
#include "core/runtime/error.hpp"
#include "core/runtime/handle.hpp"
#include "core/runtime/tensor.hpp"
#include "kernel_fusion/ops.h"

namespace kf::elementwise {
namespace {

static_assert(static_cast<int>(math::Activation::none) == KF_ACTIVATION_NONE &&
                  static_cast<int>(math::Activation::relu) == KF_ACTIVATION_RELU &&
                  static_cast<int>(math::Activation::gelu) == KF_ACTIVATION_GELU &&
                  static_cast<int>(math::Activation::gelu_tanh) == KF_ACTIVATION_GELU_TANH &&
                  static_cast<int>(math::Activation::silu) == KF_ACTIVATION_SILU &&
                  static_cast<int>(math::Activation::tanh) == KF_ACTIVATION_TANH &&
                  static_cast<int>(math::Activation::sigmoid) == KF_ACTIVATION_SIGMOID &&
                  math::kActivationCount == KF_ACTIVATION_SIGMOID + 1,
              "math::Activation must mirror kf_activation_t");

const char* entry_name(math::BinaryOp op) {
  return op == math::BinaryOp::add ? "kf_fused_elementwise_add_activation"
                                   : "kf_fused_elementwise_mul_activation";
}

void check_dtypes(math::BinaryOp op, const kf_tensor_desc_t& a, const kf_tensor_desc_t& b,
                  const kf_tensor_desc_t& out) {
  KF_REQUIRE(is_floating(a.dtype), KF_ERROR_DTYPE_MISMATCH,
             "%s supports f32, f16, bf16 and f64, not dtype %s (tensor a)", entry_name(op),
             dtype_name(a.dtype));
  KF_REQUIRE(b.dtype == a.dtype, KF_ERROR_DTYPE_MISMATCH, "tensor b has dtype %s, but a has %s",
             dtype_name(b.dtype), dtype_name(a.dtype));
  KF_REQUIRE(out.dtype == a.dtype, KF_ERROR_DTYPE_MISMATCH, "tensor out has dtype %s, but a has %s",
             dtype_name(out.dtype), dtype_name(a.dtype));
}

// NumPy rules, one-sided: b's dims align with a's trailing dims and each is a's extent or 1.
void check_shapes(const kf_tensor_desc_t& a, const kf_tensor_desc_t& b,
                  const kf_tensor_desc_t& out) {
  bool broadcastable = b.ndim <= a.ndim;
  for (int32_t j = 0; broadcastable && j < b.ndim; ++j) {
    const int64_t extent = a.shape[j + a.ndim - b.ndim];
    broadcastable = b.shape[j] == extent || b.shape[j] == 1;
  }
  KF_REQUIRE(broadcastable, KF_ERROR_SHAPE_MISMATCH,
             "tensor b has shape %s, not broadcastable to %s", shape_string(b).c_str(),
             shape_string(a).c_str());
  bool same = out.ndim == a.ndim;
  for (int32_t i = 0; same && i < a.ndim; ++i) same = out.shape[i] == a.shape[i];
  KF_REQUIRE(same, KF_ERROR_SHAPE_MISMATCH,
             "tensor out has shape %s, but it must have a's shape %s", shape_string(out).c_str(),
             shape_string(a).c_str());
}

int64_t extent_of(const Plan& p, const int64_t* strides) {
  int64_t last = 0;
  for (int32_t d = 0; d < p.ndim; ++d) last += (p.shape[d] - 1) * strides[d];
  return last + 1;
}

// Broadcasts b's strides onto a's shape, drops extent-1 dims, orders dims by out's strides
// (outermost = largest), merges dims that are contiguous in all three tensors, then picks the
// layout. (That out never writes an element twice, require_writable has checked.)
Plan make_plan(math::BinaryOp op, math::Activation act, const kf_tensor_t* a, const kf_tensor_t* b,
               kf_tensor_t* out) {
  Plan p;
  p.op = op;
  p.act = act;
  p.dtype = a->desc.dtype;
  p.count = element_count(a->desc);
  p.a = a->data;
  p.b = b->data;
  p.out = out->data;
  if (p.count == 0) return p;

  const kf_tensor_desc_t& ad = a->desc;
  const kf_tensor_desc_t& bd = b->desc;
  const kf_tensor_desc_t& od = out->desc;
  const int32_t lead = ad.ndim - bd.ndim;
  for (int32_t i = 0; i < ad.ndim; ++i) {
    if (ad.shape[i] == 1) continue;
    const int32_t j = i - lead;
    p.shape[p.ndim] = ad.shape[i];
    p.a_strides[p.ndim] = ad.strides[i];
    p.b_strides[p.ndim] = (j < 0 || bd.shape[j] == 1) ? 0 : bd.strides[j];
    p.out_strides[p.ndim] = od.strides[i];
    ++p.ndim;
  }

  // Stable insertion sort, descending by out's stride (ties broken by a's): dense but permuted
  // tensors (a transposed pair) then become contiguous walks.
  auto outer_than = [&](int32_t x, int32_t y) {
    if (p.out_strides[x] != p.out_strides[y]) return p.out_strides[x] > p.out_strides[y];
    return p.a_strides[x] > p.a_strides[y];
  };
  auto swap_dims = [&](int32_t x, int32_t y) {
    std::swap(p.shape[x], p.shape[y]);
    std::swap(p.a_strides[x], p.a_strides[y]);
    std::swap(p.b_strides[x], p.b_strides[y]);
    std::swap(p.out_strides[x], p.out_strides[y]);
  };
  for (int32_t i = 1; i < p.ndim; ++i)
    for (int32_t k = i; k > 0 && outer_than(k, k - 1); --k) swap_dims(k, k - 1);

  int32_t merged = 0;
  for (int32_t d = 1; d < p.ndim; ++d) {
    const int64_t n = p.shape[d];
    if (p.a_strides[merged] == p.a_strides[d] * n && p.b_strides[merged] == p.b_strides[d] * n &&
        p.out_strides[merged] == p.out_strides[d] * n) {
      p.shape[merged] *= n;
      p.a_strides[merged] = p.a_strides[d];
      p.b_strides[merged] = p.b_strides[d];
      p.out_strides[merged] = p.out_strides[d];
    } else {
      ++merged;
      p.shape[merged] = p.shape[d];
      p.a_strides[merged] = p.a_strides[d];
      p.b_strides[merged] = p.b_strides[d];
      p.out_strides[merged] = p.out_strides[d];
    }
  }
  if (p.ndim == 0) {  // a single element
    p.shape[0] = 1;
    p.a_strides[0] = p.b_strides[0] = p.out_strides[0] = 1;
  }
  p.ndim = merged + 1;

  const bool dense_1d = p.ndim == 1 && p.a_strides[0] == 1 && p.out_strides[0] == 1;
  if (dense_1d && p.b_strides[0] == 1) {
    p.layout = Layout::contiguous;
  } else if (dense_1d && p.b_strides[0] == 0) {
    p.layout = Layout::scalar;
  } else if (p.ndim == 2 && p.a_strides[1] == 1 && p.out_strides[1] == 1 && p.b_strides[1] == 1 &&
             p.a_strides[0] == p.shape[1] && p.out_strides[0] == p.shape[1] &&
             p.b_strides[0] == 0) {
    p.layout = Layout::bias;
    p.row_length = p.shape[1];
  } else {
    p.layout = Layout::strided;
  }
  p.a_extent = extent_of(p, p.a_strides);
  p.b_extent = extent_of(p, p.b_strides);
  p.out_extent = extent_of(p, p.out_strides);
  return p;
}

}  // namespace

void run(math::BinaryOp op, kf_context_t* ctx_handle, const kf_tensor_t* a_handle,
         const kf_tensor_t* b_handle, kf_tensor_t* out_handle, int32_t act, kf_stream_t* s) {
  // The handles first, together (the stream only when given: NULL is the default stream), then
  // what each must be in this call.
  if (s != nullptr)
    check_handles({{ctx_handle, HandleKind::context, "ctx"},
                   {a_handle, HandleKind::tensor, "a"},
                   {b_handle, HandleKind::tensor, "b"},
                   {out_handle, HandleKind::tensor, "out"},
                   {s, HandleKind::stream, "s"}});
  else
    check_handles({{ctx_handle, HandleKind::context, "ctx"},
                   {a_handle, HandleKind::tensor, "a"},
                   {b_handle, HandleKind::tensor, "b"},
                   {out_handle, HandleKind::tensor, "out"}});
  kf_context_t* ctx = ctx_handle;
  const kf_tensor_t* a = a_handle;
  const kf_tensor_t* b = b_handle;
  kf_tensor_t* out = out_handle;
  require_in_context(a, ctx, "a");
  require_in_context(b, ctx, "b");
  require_in_context(out, ctx, "out");
  require_writable(out, "out");
  kf_stream_t* stream = resolve_checked_stream(ctx, s, "s");
  KF_REQUIRE_ARG(act >= 0 && act < math::kActivationCount,
                 "unknown activation %d (expected a kf_activation_t, 0..%d)", act,
                 math::kActivationCount - 1);
  check_dtypes(op, a->desc, b->desc, out->desc);
  check_shapes(a->desc, b->desc, out->desc);
  // Borrowed memory (kf_tensor_wrap, DLPack byte offsets) can start anywhere; no kernel can load
  // an element that straddles its natural alignment.
  // (Element sizes are powers of two: a mask, not a division, on the path of every call.)
  const uintptr_t misalignment = dtype_size(a->desc.dtype) - 1;
  for (const kf_tensor_t* t : {a, b, static_cast<const kf_tensor_t*>(out)}) {
    KF_REQUIRE_ARG((reinterpret_cast<uintptr_t>(t->data) & misalignment) == 0,
                   "tensor %s starts at %p, which is not aligned to its %zu-byte elements",
                   t == a   ? "a"
                   : t == b ? "b"
                            : "out",
                   t->data, dtype_size(t->desc.dtype));
  }
  KF_REQUIRE_ARG(!may_overlap(out, b), "tensor out overlaps input b; use a separate output");
  KF_REQUIRE_ARG(
      same_view(out, a) || !may_overlap(out, a),
      "tensor out partially overlaps input a; only the exact in-place form (out is a) is allowed");

  const Plan plan = make_plan(op, static_cast<math::Activation>(act), a, b, out);
  if (plan.count == 0) return;

  activate(ctx);  // CUDA: the context's device becomes current (this thread may be new to it)
  prepare_for_stream(a, stream);
  if (b != a) prepare_for_stream(b, stream);
  if (out != a) prepare_for_stream(out, stream);
  if (ctx->is_cuda()) {
#if defined(KF_WITH_CUDA)
    run_cuda(plan, ctx->device_id, stream->native);
#else
    fail(KF_ERROR_NOT_SUPPORTED, "%s: this build has no CUDA backend", entry_name(op));
#endif
  } else {
    KF_REQUIRE(ctx->threads != nullptr, KF_ERROR_INTERNAL, "CPU context without a thread pool");
    run_cpu(plan, *ctx->threads);
  }
}

namespace {

// A C caller may pass any int as a kf_activation_t; reading it through the enum type would be
// undefined in C++ for values outside the enumerators, so the bits are copied out unread.
int32_t raw_activation(const kf_activation_t* act) {
  static_assert(sizeof(kf_activation_t) == sizeof(int32_t),
                "kf_activation_t is passed as a 32-bit int");
  int32_t value;
  std::memcpy(&value, act, sizeof value);
  return value;
}

}  // namespace
}  // namespace kf::elementwise

extern "C" {

kf_result_t kf_fused_elementwise_add_activation(kf_context_t* ctx, const kf_tensor_t* a,
                                                const kf_tensor_t* b, kf_tensor_t* out,
                                                kf_activation_t act, kf_stream_t* s) {
  const int32_t activation = kf::elementwise::raw_activation(&act);
  return kf::api_call(
      [&] { kf::elementwise::run(kf::math::BinaryOp::add, ctx, a, b, out, activation, s); });
}

kf_result_t kf_fused_elementwise_mul_activation(kf_context_t* ctx, const kf_tensor_t* a,
                                                const kf_tensor_t* b, kf_tensor_t* out,
                                                kf_activation_t act, kf_stream_t* s) {
  const int32_t activation = kf::elementwise::raw_activation(&act);
  return kf::api_call(
      [&] { kf::elementwise::run(kf::math::BinaryOp::mul, ctx, a, b, out, activation, s); });
}

}  // extern "C"
