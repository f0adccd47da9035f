// Walk construction and the checks every row-wise entry shares.
#include "core/ops/rows/rows.hpp"

#include <cfloat>
#include <cmath>

#include "core/math/activation.hpp"
#include "core/runtime/context.hpp"
#include "core/runtime/error.hpp"
#include "core/runtime/tensor.hpp"

namespace kf::rows {
namespace {

// Drops extent-1 dims of [begin, end) and merges neighbours contiguous in every operand.
int32_t collapse(const kf_tensor_desc_t& x, int32_t begin, int32_t end, WalkInput* inputs,
                 int32_t count, int64_t* shape, bool outer) {
  int32_t n = 0;
  for (int32_t d = begin; d < end; ++d) {
    const int64_t extent = x.shape[d];
    if (extent == 1) continue;
    bool merge = n > 0;
    for (int32_t i = 0; merge && i < count; ++i) {
      const int64_t* previous = outer ? inputs[i].operand->outer : inputs[i].operand->inner;
      merge = previous[n - 1] == inputs[i].strides[d] * extent;
    }
    if (merge)
      shape[n - 1] *= extent;
    else
      shape[n++] = extent;
    for (int32_t i = 0; i < count; ++i) {
      int64_t* target = outer ? inputs[i].operand->outer : inputs[i].operand->inner;
      target[n - 1] = inputs[i].strides[d];
    }
  }
  return n;
}

}  // namespace

Walk make_walk(const kf_tensor_desc_t& x, int32_t split, WalkInput* inputs, int32_t count) {
  Walk w;
  w.outer_ndim = collapse(x, 0, split, inputs, count, w.outer_shape, true);
  w.inner_ndim = collapse(x, split, x.ndim, inputs, count, w.inner_shape, false);
  w.rows = 1;
  for (int32_t d = 0; d < w.outer_ndim; ++d) {
    w.rows *= w.outer_shape[d];
    if (w.outer_shape[d] >= 1 && w.outer_shape[d] < (int64_t{1} << 31)) {
      const DivMagic m = div_magic(static_cast<uint32_t>(w.outer_shape[d]));
      w.outer_multiplier[d] = m.multiplier;
      w.outer_shift[d] = m.shift;
    }
  }
  w.row_length = 1;
  for (int32_t d = 0; d < w.inner_ndim; ++d) w.row_length *= w.inner_shape[d];
  for (int32_t d = 0; d < split; ++d)
    if (x.shape[d] == 0) w.rows = 0;
  for (int32_t d = split; d < x.ndim; ++d)
    if (x.shape[d] == 0) w.row_length = 0;
  return w;
}

void broadcast_strides(const kf_tensor_desc_t& x, const kf_tensor_t* t, int64_t* strides) {
  const int32_t lead = x.ndim - t->desc.ndim;
  for (int32_t d = 0; d < x.ndim; ++d) {
    const int32_t j = d - lead;
    strides[d] = (j < 0 || t->desc.shape[j] == 1) ? 0 : t->desc.strides[j];
  }
}

void placed_strides(const kf_tensor_desc_t& x, const kf_tensor_t* t, int32_t first,
                    int64_t* strides) {
  for (int32_t d = 0; d < x.ndim; ++d) {
    const int32_t j = d - first;
    strides[d] = (j < 0 || j >= t->desc.ndim) ? 0 : t->desc.strides[j];
  }
}

void require_shape(const kf_tensor_t* t, const char* name, const kf_tensor_desc_t& x,
                   const char* x_name, int32_t first, int32_t count, const char* what) {
  bool same = t->desc.ndim == count;
  for (int32_t i = 0; same && i < count; ++i) same = t->desc.shape[i] == x.shape[first + i];
  if (same) return;
  kf_tensor_desc_t expected = x;
  expected.ndim = count;
  for (int32_t i = 0; i < count; ++i) expected.shape[i] = x.shape[first + i];
  fail(KF_ERROR_SHAPE_MISMATCH, "tensor %s has shape %s, but it must be %s %s of %s %s", name,
       shape_string(t->desc).c_str(), shape_string(expected).c_str(), what, x_name,
       shape_string(x).c_str());
}

void require_aligned(const Named* tensors, int32_t count) {
  for (int32_t i = 0; i < count; ++i) {
    const kf_tensor_t* t = tensors[i].tensor;
    if (!t) continue;
    KF_REQUIRE_ARG(reinterpret_cast<uintptr_t>(t->data) % dtype_size(t->desc.dtype) == 0,
                   "tensor %s starts at %p, which is not aligned to its %zu-byte elements",
                   tensors[i].name, t->data, dtype_size(t->desc.dtype));
  }
}

void require_disjoint(const Named& out, const Named* others, int32_t count, int32_t exact_first) {
  if (!out.tensor) return;
  for (int32_t i = 0; i < count; ++i) {
    const kf_tensor_t* t = others[i].tensor;
    if (!t || !may_overlap(out.tensor, t)) continue;
    const bool exact_allowed = i < exact_first;
    KF_REQUIRE_ARG(!exact_allowed || same_view(out.tensor, t),
                   "tensor %s partially overlaps input %s; only the exact in-place form (%s is %s) "
                   "is allowed",
                   out.name, others[i].name, out.name, others[i].name);
    KF_REQUIRE_ARG(exact_allowed, "tensor %s overlaps tensor %s; use a separate output", out.name,
                   others[i].name);
  }
}

void prepare(kf_context_t* ctx, kf_stream_t* s, const Named* tensors, int32_t count) {
  activate(ctx);
  for (int32_t i = 0; i < count; ++i) {
    if (tensors[i].tensor) prepare_for_stream(tensors[i].tensor, s);
  }
}

namespace {

const char* compute_type_name(kf_dtype_t dtype) {
  return dtype == KF_DTYPE_FLOAT64 ? "f64" : "f32";
}

}  // namespace

void require_eps(const char* entry, double eps, kf_dtype_t dtype) {
  const bool f64 = dtype == KF_DTYPE_FLOAT64;
  const double smallest = f64 ? DBL_MIN : FLT_MIN, largest = f64 ? DBL_MAX : FLT_MAX;
  KF_REQUIRE_ARG(eps >= smallest && eps <= largest,
                 "%s: eps must be positive, finite and normal in %s, which %s data is computed in "
                 "(%g to %g), not %g",
                 entry, compute_type_name(dtype), dtype_name(dtype), smallest, largest, eps);
}

void require_scale(const char* entry, double scale, kf_dtype_t dtype) {
  const double largest = dtype == KF_DTYPE_FLOAT64 ? DBL_MAX : FLT_MAX;
  KF_REQUIRE_ARG(std::fabs(scale) <= largest,
                 "%s: scale must be finite in %s, which %s data is computed in (|scale| up to "
                 "%g), not %g",
                 entry, compute_type_name(dtype), dtype_name(dtype), largest, scale);
}

int32_t checked_activation(const kf_activation_t& act) {
  const int32_t value = raw_enum(act);
  KF_REQUIRE_ARG(value >= 0 && value < math::kActivationCount,
                 "unknown activation %d (expected a kf_activation_t, 0..%d)", value,
                 math::kActivationCount - 1);
  return value;
}

}  // namespace kf::rows
