// The reduction family's internal interface: the C entries (reduce.cpp) validate and reduce the
// call to a Plan; the backends (cpu.cpp, cuda.cu) execute it and trust it.
//
// A Plan describes x as kept dims (one output each) and reduced dims, extent-1 dims dropped, all
// dims ordered by x's stride (outermost first) and neighbours of the same kind that are
// contiguous merged. Two dense-ish shapes get fast paths:
//   rows:    one kept dim (or none) and one reduced dim of x stride 1 — each output reduces a
//            contiguous row (reduce-last);
//   columns: [outer,] reduced, inner — the innermost dim is kept with x stride 1, so consecutive
//            outputs read consecutive elements of each reduced row (reduce-non-last).
// Everything else (several reduced dims that do not merge, transposed inputs, ...) is strided.
#pragma once

#include <cstdint>

#include "core/math/numeric.hpp"
#include "core/math/reduce.hpp"
#include "core/ops/dispatch.hpp"
#include "kernel_fusion/types.h"

namespace kf {
class ThreadPool;
}

namespace kf::reduce {

using math::reduction::Op;

enum class Layout { rows, columns, strided };

struct Plan {
  Op op = Op::sum;
  kf_dtype_t dtype = KF_DTYPE_FLOAT32;
  Layout layout = Layout::strided;
  int64_t outputs = 0;  // elements of out (> 0: empty outputs never reach a backend)
  int64_t reduced = 0;  // elements reduced into each output (0: an empty sum or mean)

  // Kept dims, outermost first (row-major order over them numbers the outputs).
  int32_t kept_ndim = 0;
  int64_t kept_shape[KF_MAX_DIMS] = {};
  int64_t x_kept[KF_MAX_DIMS] = {};    // x's strides over the kept dims
  int64_t out_kept[KF_MAX_DIMS] = {};  // out's strides over the kept dims
  // Reduced dims, outermost first.
  int32_t red_ndim = 0;
  int64_t red_shape[KF_MAX_DIMS] = {};
  int64_t x_red[KF_MAX_DIMS] = {};

  // rows: `outputs` rows of `reduced` contiguous elements, row r at x + r * row_stride, its
  // result at out + r * out_stride.
  // columns: `outer` blocks of `reduced` rows of `inner` contiguous elements; element (o, r, c) at
  // x + o * outer_stride + r * row_stride + c, result (o, c) at out + o * out_outer + c *
  // out_stride.
  int64_t outer = 1, inner = 1;
  int64_t row_stride = 0, outer_stride = 0;
  int64_t out_stride = 0, out_outer = 0;

  const void* x = nullptr;
  void* out = nullptr;  // never overlaps x
};

// Element offset of output `index` in x (kept dims only) and in out.
KF_HOST_DEVICE void output_offsets(const Plan& p, int64_t index, int64_t* x_offset,
                                   int64_t* out_offset) {
  int64_t xo = 0, oo = 0;
  for (int32_t d = p.kept_ndim - 1; d >= 0; --d) {
    const int64_t q = index / p.kept_shape[d];
    const int64_t i = index - q * p.kept_shape[d];
    xo += i * p.x_kept[d];
    oo += i * p.out_kept[d];
    index = q;
  }
  *x_offset = xo;
  *out_offset = oo;
}

// Element offset in x of element `index` of an output's reduced walk (row-major over the reduced
// dims), relative to the output's first element.
KF_HOST_DEVICE int64_t reduced_offset(const Plan& p, int64_t index) {
  int64_t offset = 0;
  for (int32_t d = p.red_ndim - 1; d >= 0; --d) {
    const int64_t q = index / p.red_shape[d];
    offset += (index - q * p.red_shape[d]) * p.x_red[d];
    index = q;
  }
  return offset;
}

void run_cpu(const Plan& plan, ThreadPool& threads);

#if defined(KF_WITH_CUDA)
// Enqueues the reduction on native_stream (a cudaStream_t) of the current device; never
// synchronises or allocates. Throws KF_ERROR_CUDA if a launch fails.
void run_cuda(const Plan& plan, int32_t device_id, void* native_stream);
#endif

}  // namespace kf::reduce
