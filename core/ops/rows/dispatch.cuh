// The launch order shared by the row families' CUDA code (norms, softmax), each family giving its
// own kernels, and the storage types they serve. Include only from .cu files.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/math/numeric.hpp"
#include "core/runtime/cuda/launch.hpp"
#include "kernel_fusion/types.h"

namespace kf::rows {

// A row family's launcher for one storage type: whether it took the rows.
template <class Plan>
using RowLauncher = bool (*)(const Plan&, int32_t device, cudaStream_t);

// A family's register-cached launcher for rows of storage S loaded `bytes` at a time
// (row_vector_bytes in tile.cuh) narrower than 16-byte vectors: for 16-bit storage 8- and
// 4-byte vectors where they fit, else one element a load. Cached::template launch<V> is the
// family's launcher for V elements a load. The families build these for 16-bit storage in
// translation units of their own (cuda_f16_narrow.cu, cuda_bf16_narrow.cu), apart from the
// 16-byte form: each width instantiates every policy of every form.
template <class S, class Cached, class Plan>
RowLauncher<Plan> narrow_cached_launcher(int bytes) {
  if constexpr (sizeof(S) == 2) {
    if (bytes == 8) return &Cached::template launch<4>;
    if (bytes == 4) return &Cached::template launch<2>;
  }
  return &Cached::template launch<1>;
}

// The same for any width: 16-byte vectors, else narrow_cached_launcher's. For 16-bit storage the
// narrow ones come from narrow(S{}, bytes), the family's entry into the unit that builds them.
template <class S, class Cached, class Plan, class Narrow>
RowLauncher<Plan> cached_launcher(int bytes, Narrow narrow) {
  if constexpr (sizeof(S) == 2) {
    if (bytes != 16) return narrow(S{}, bytes);
    return &Cached::template launch<16 / sizeof(S)>;
  } else {
    if (bytes == 16) return &Cached::template launch<16 / sizeof(S)>;
    return narrow_cached_launcher<S, Cached, Plan>(bytes);
  }
}

// The streaming kernels a family gives launch_in_order, one for each kind of rows, and their
// block size.
template <class Plan>
struct StreamingKernels {
  void (*strided)(Plan);  // rows that are not dense (Plan::dense)
  void (*vectors)(Plan);  // dense rows whose row operands start in x's phase, row by row
  void (*dense)(Plan);    // the other dense rows
  int threads;
};

// Launches a family's kernel for p's rows, in its order of preference: the staged kernel (dense
// rows of 16-byte vectors, `bytes` == 16: row_vector_bytes in tile.cuh), else the family's
// `shifted` staged kernel where it has one (dense rows `in_phase` that are not rows of 16-byte
// vectors, staged from each row's first 16-byte boundary), else the register-cached
// kernel at `bytes` a load (cached_launcher, with the family's Cached and narrow entry), else a
// streaming kernel, which takes any rows (a block per row, up to about a million blocks): its
// vector form where `in_phase`. A failed launch throws KF_ERROR_CUDA from its launcher, which
// names what it launched (`what` for the streaming kernels). Every kernel is a dependent launch
// (launch_dependent): each begins with cuda::wait_prior_grid().
template <class S, class Cached, class Plan, class Narrow>
void launch_in_order(const Plan& p, int bytes, bool in_phase, int32_t device, cudaStream_t stream,
                     RowLauncher<Plan> staged, Narrow narrow,
                     const StreamingKernels<Plan>& streaming, const char* what,
                     RowLauncher<Plan> shifted = nullptr) {
  bool done = false;
  if (p.dense && bytes == 16) done = staged(p, device, stream);
  if (p.dense && bytes != 16 && in_phase && shifted) done = shifted(p, device, stream);
  if (p.dense && !done) done = cached_launcher<S, Cached, Plan>(bytes, narrow)(p, device, stream);
  if (!done) {
    const int64_t grid = p.walk.rows < 65535 * 16 ? p.walk.rows : 65535 * 16;
    cuda::launch_dependent(!p.dense   ? streaming.strided
                           : in_phase ? streaming.vectors
                                      : streaming.dense,
                           device, static_cast<unsigned>(grid), streaming.threads, stream, what, p);
  }
}

// Calls fn(S{}) with the storage type S of a float dtype (f16, bf16, f64; f32 otherwise).
template <class Fn>
void with_float_storage(kf_dtype_t dtype, Fn&& fn) {
  switch (dtype) {
    case KF_DTYPE_FLOAT16: return fn(math::half_t{});
    case KF_DTYPE_BFLOAT16: return fn(math::bfloat16_t{});
    case KF_DTYPE_FLOAT64: return fn(double{});
    default: return fn(float{});
  }
}

}  // namespace kf::rows
