// The elementwise family's internal interface: the C entry (elementwise.cpp) validates its
// arguments and reduces them to a Plan; the backends (cpu.cpp, cuda.cu) execute a Plan and trust
// it.
#pragma once

#include <cstdint>

#include "core/math/activation.hpp"
#include "core/math/binary.hpp"
#include "core/math/numeric.hpp"
#include "core/ops/dispatch.hpp"
#include "kernel_fusion/types.h"

namespace kf {
class ThreadPool;
}

namespace kf::elementwise {

// How b (and a, out) are laid out once broadcast, sorted and coalesced; each backend has a fast
// path for the first three.
enum class Layout {
  contiguous,  // a, b, out dense, same order: out[i] = f(a[i], b[i])
  scalar,      // a, out dense; b one element: out[i] = f(a[i], b[0])
  bias,     // a, out dense [rows, row_length]; b one dense row: out[i] = f(a[i], b[i % row_length])
  strided,  // anything else: up to KF_MAX_DIMS dims, element strides per tensor (0 = broadcast)
};

struct Plan {
  math::BinaryOp op = math::BinaryOp::add;
  math::Activation act = math::Activation::none;
  kf_dtype_t dtype = KF_DTYPE_FLOAT32;
  Layout layout = Layout::strided;
  int64_t count = 0;       // elements of out (> 0: empty ops never reach a backend)
  int64_t row_length = 0;  // bias only: b's element count

  // Coalesced iteration space, outermost first. Filled for every layout; for the dense layouts it
  // is the 1-D (or bias 2-D) description of the same walk. Only the first ndim entries are set:
  // the rest are left unwritten, as zeroing 256 bytes was a tenth of the validation's host time.
  int32_t ndim = 0;
  int64_t shape[KF_MAX_DIMS];
  int64_t a_strides[KF_MAX_DIMS];
  int64_t b_strides[KF_MAX_DIMS];
  int64_t out_strides[KF_MAX_DIMS];
  // 1 + the largest element offset each tensor reaches in this walk (for 32-bit index selection).
  int64_t a_extent = 0, b_extent = 0, out_extent = 0;

  const void* a = nullptr;  // first element of each tensor
  const void* b = nullptr;
  void* out = nullptr;  // may equal a (exact in-place); never overlaps b
};

// The fused scalar operation both backends apply: widen to the compute type, op, activation,
// round back to storage.
template <class S, class Op, class Act>
struct FusedOp {
  using Traits = math::StorageTraits<S>;
  using T = typename Traits::compute_type;
  static KF_HOST_DEVICE S compute(T x, T y) {
    return Traits::from_compute(Act{}(Op{}(x, y), typename math::PrimitivesFor<S>::type{}));
  }
  static KF_HOST_DEVICE S apply(S x, S y) {
    return compute(Traits::to_compute(x), Traits::to_compute(y));
  }
};

// Calls fn with the functor of op.
template <class Fn>
void dispatch_op(math::BinaryOp op, Fn&& fn) {
  if (op == math::BinaryOp::mul)
    fn(math::Mul{});
  else
    fn(math::Add{});
}

// The whole C entry of out = act(a op b): validates (messages name a, b and out), plans and runs.
// Entries that are this op under another name (kf_fused_bias_activation) check their own
// parameters first, under their own names, then call it.
void run(math::BinaryOp op, kf_context_t* ctx, const kf_tensor_t* a, const kf_tensor_t* b,
         kf_tensor_t* out, int32_t act, kf_stream_t* s);

void run_cpu(const Plan& plan, ThreadPool& threads);

#if defined(KF_WITH_CUDA)
// Enqueues the op on native_stream (a cudaStream_t) of device_id; never synchronises or allocates.
// Throws KF_ERROR_CUDA if the launch fails.
void run_cuda(const Plan& plan, int32_t device_id, void* native_stream);
#endif

}  // namespace kf::elementwise
