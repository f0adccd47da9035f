// Shared by the row-wise op families (norms, softmax): how a tensor is walked as rows. x's dims
// split into leading dims (one row per index) and row dims (the elements of a row); every other
// operand is described by its strides over the same dims (0 where it is broadcast), so weight
// (row dims only), saved statistics (leading dims only) and masks (broadcast anywhere) share one
// walk. Dims of extent 1 are dropped and neighbours that are contiguous in every operand are
// merged, so a dense tensor is one leading dim and one row dim. Rows are numbered in row-major
// order of the leading dims whatever the strides, so row % extent recovers a leading index.
#pragma once

#include <cstdint>

#include "core/math/host_device.hpp"
#include "core/ops/div_magic.hpp"
#include "kernel_fusion/types.h"

namespace kf {
class ThreadPool;
}

namespace kf::rows {

struct Walk {
  int64_t rows = 0;        // product of the leading extents
  int64_t row_length = 0;  // product of the row extents
  int32_t outer_ndim = 0;  // leading dims after merging, outermost first
  int32_t inner_ndim = 0;  // row dims after merging, outermost first
  int64_t outer_shape[KF_MAX_DIMS] = {};
  int64_t inner_shape[KF_MAX_DIMS] = {};
  // Division constants of the leading extents below 2^31 (core/ops/div_magic.hpp), for
  // row_offset_cold.
  uint32_t outer_multiplier[KF_MAX_DIMS] = {};
  uint32_t outer_shift[KF_MAX_DIMS] = {};
};

// One operand of a walk: its first element and its element strides over the walk's dims.
struct Operand {
  void* data = nullptr;  // nullptr: the operand is absent
  int64_t outer[KF_MAX_DIMS] = {};
  int64_t inner[KF_MAX_DIMS] = {};
};

// Element offset of `index` in row-major order over `ndim` extents with the given strides.
KF_HOST_DEVICE int64_t split_offset(int64_t index, int32_t ndim, const int64_t* shape,
                                    const int64_t* strides) {
  int64_t offset = 0;
  for (int32_t d = ndim - 1; d >= 0; --d) {
    const int64_t q = index / shape[d];
    offset += (index - q * shape[d]) * strides[d];
    index = q;
  }
  return offset;
}

// Element offset of row `row` (row-major over the leading dims).
KF_HOST_DEVICE int64_t row_offset(const Walk& w, const Operand& t, int64_t row) {
  if (w.outer_ndim == 1) return row * t.outer[0];  // the common case: no division
  return split_offset(row, w.outer_ndim, w.outer_shape, t.outer);
}

// row_offset for the register-cached kernels, which take one offset per operand per row and
// hold a row in registers meanwhile: the multi-dim case divides in 32 bits by the walk's
// multiply-high constants, in a loop that is not unrolled, so it stays short and inline.
// Both earlier forms cost those kernels registers: inlined 64-bit division loops made them
// several times longer than their hot path, and the same loop as a call (__noinline__) made
// every live row register a value to keep across a call: the f32 kernels spilled 16-56 bytes a
// thread and the 16-bit ones took 93-112 registers where 63-80 do without the call (sm_90,
// nvcc 13). The caller guarantees rows < kMaxColdRows (then every leading extent and index is
// below 2^31 too, where the constants are exact).
KF_HOST_DEVICE int64_t row_offset_cold(const Walk& w, const Operand& t, int64_t row) {
  if (w.outer_ndim == 1) return row * t.outer[0];
  uint32_t index = static_cast<uint32_t>(row);
  int64_t offset = 0;
#if defined(__CUDA_ARCH__)
#pragma unroll 1
#endif
  for (int32_t d = w.outer_ndim - 1; d >= 0; --d) {
    const uint32_t extent = static_cast<uint32_t>(w.outer_shape[d]);
    const uint32_t q = div_by(index, DivMagic{w.outer_multiplier[d], w.outer_shift[d]});
    offset += static_cast<int64_t>(index - q * extent) * t.outer[d];
    index = q;
  }
  return offset;
}

// The row counts row_offset_cold serves.
constexpr int64_t kMaxColdRows = int64_t{1} << 31;

// A row's place in a walk of up to two leading dims (rows < kMaxColdRows): hi = row /
// outer_shape[1] and lo = row % outer_shape[1] with two dims, else hi = 0 and lo = row. A kernel
// that walks rows by a fixed step keeps one a thread and advances it with an add and a compare,
// where row_offset_cold divides for every operand of every row: an [Lq, Lk] mask broadcast over
// the heads of [B, Lq, Lk] logits keeps the walk at two leading dims.
struct RowCursor {
  uint32_t hi = 0, lo = 0;
};

KF_HOST_DEVICE RowCursor row_cursor(const Walk& w, int64_t row) {
  const uint32_t index = static_cast<uint32_t>(row);
  if (w.outer_ndim != 2) return RowCursor{0, index};
  const uint32_t hi = div_by(index, DivMagic{w.outer_multiplier[1], w.outer_shift[1]});
  return RowCursor{hi, index - hi * static_cast<uint32_t>(w.outer_shape[1])};
}

// c moved on by `step` (row_cursor of the step's row count).
KF_HOST_DEVICE RowCursor advance(const Walk& w, RowCursor c, RowCursor step) {
  c.hi += step.hi;
  c.lo += step.lo;
  if (w.outer_ndim == 2 && c.lo >= static_cast<uint32_t>(w.outer_shape[1])) {
    c.lo -= static_cast<uint32_t>(w.outer_shape[1]);
    ++c.hi;
  }
  return c;
}

// Element offset of the row at c in operand t (row_offset_cold's value); `row` is that row's
// number, for walks of three or more leading dims.
KF_HOST_DEVICE int64_t row_offset_at(const Walk& w, const Operand& t, RowCursor c, int64_t row) {
  if (w.outer_ndim == 1) return int64_t{c.lo} * t.outer[0];
  if (w.outer_ndim == 2) return int64_t{c.hi} * t.outer[0] + int64_t{c.lo} * t.outer[1];
  return row_offset_cold(w, t, row);
}

// Element offset of column `col` of a row, relative to the row's first element.
KF_HOST_DEVICE int64_t col_offset(const Walk& w, const Operand& t, int64_t col) {
  if (w.inner_ndim == 1) return col * t.inner[0];
  return split_offset(col, w.inner_ndim, w.inner_shape, t.inner);
}

// col_offset, or col itself where the caller knows the operand's rows are dense (kDense).
template <bool kDense>
KF_HOST_DEVICE int64_t col_offset_as(const Walk& w, const Operand& t, int64_t col) {
  if constexpr (kDense) return col;
  return col_offset(w, t, col);
}

// True when an operand's rows are dense (column c at element c of the row).
KF_HOST_DEVICE bool dense_rows(const Walk& w, const Operand& t) {
  return w.inner_ndim == 0 || (w.inner_ndim == 1 && t.inner[0] == 1);
}

// Builds a walk over x's shape split at `split` (dims [0, split) lead). `strides[i]` are operand
// i's element strides over all of x's dims (already 0 where broadcast); operands[i]->data is kept.
struct WalkInput {
  Operand* operand;
  int64_t strides[KF_MAX_DIMS];
};
Walk make_walk(const kf_tensor_desc_t& x, int32_t split, WalkInput* inputs, int32_t count);

// Strides of t aligned to x's dims by NumPy rules (t's dims match x's trailing dims; extent-1
// dims and missing leading dims get stride 0). The caller checked broadcastability.
void broadcast_strides(const kf_tensor_desc_t& x, const kf_tensor_t* t, int64_t* strides);
// Strides of t over x's dims where t covers x's dims [first, first + t.ndim) exactly.
void placed_strides(const kf_tensor_desc_t& x, const kf_tensor_t* t, int32_t first,
                    int64_t* strides);

// ---- validation shared by the row-wise entries --------------------------------------------------

struct Named {
  const kf_tensor_t* tensor;  // may be nullptr (absent optional operand: skipped)
  const char* name;
};

// t's shape equals x's dims [first, first + count); message names both.
void require_shape(const kf_tensor_t* t, const char* name, const kf_tensor_desc_t& x,
                   const char* x_name, int32_t first, int32_t count, const char* what);
// Each tensor's data is aligned to its element size.
void require_aligned(const Named* tensors, int32_t count);
// `out` overlaps none of `others`, except that it may be exactly (same view) one of the first
// `exact_first` of them. Roles, not handles, decide: where one tensor is passed as two operands
// (x and the mask, say), out may be x's view only if it overlaps no operand past those first ones.
void require_disjoint(const Named& out, const Named* others, int32_t count, int32_t exact_first);

// Makes the context's device current and orders every present tensor after its allocation on s.
void prepare(kf_context_t* ctx, kf_stream_t* s, const Named* tensors, int32_t count);

// An eps for dtype's data: positive, finite and normal in the type the kernels compute in (f64
// for f64 data, f32 otherwise). A smaller one rounds to 0 or to a subnormal there (which the CUDA
// kernels flush to 0), so a constant row's variance + eps would be 0 and its outputs NaN; a
// larger one rounds to infinity. `entry` names the C entry in the message.
void require_eps(const char* entry, double eps, kf_dtype_t dtype);
// A scale for dtype's data: finite in the compute type (1e300 is infinite in f32, and a softmax
// of the products NaN).
void require_scale(const char* entry, double scale, kf_dtype_t dtype);

// Reads a kf_activation_t that came from C and checks it (INVALID_ARGUMENT when unknown).
int32_t checked_activation(const kf_activation_t& act);

}  // namespace kf::rows
