// The norm family's internal interface (layer norm and RMS norm, each followed by an
// activation): the C entries (norm.cpp) validate and reduce the call to a Plan; the backends
// (cpu.cpp, cuda.cu) execute it and trust it.
#pragma once

#include <cstdint>

#include "core/math/activation.hpp"
#include "core/ops/rows/rows.hpp"
#include "kernel_fusion/types.h"

namespace kf {
class MemoryPool;
struct GridScratch;
class ThreadPool;
}  // namespace kf

namespace kf::norm {

enum class Kind { layer, rms };

struct Plan {
  Kind kind = Kind::layer;
  kf_dtype_t dtype = KF_DTYPE_FLOAT32;
  math::Activation act = math::Activation::none;
  double eps = 0;
  rows::Walk walk;  // rows > 0 and row_length > 0 (empty calls never reach a backend)
  // Absent operands have data == nullptr. out and residual_out may be x or residual exactly;
  // mean and rstd are in the compute type (f32, or f64 for f64 data), layer norm only.
  rows::Operand x, residual, weight, bias, out, residual_out, mean, rstd;
  bool dense = false;  // every row operand (x, residual, weight, bias, out, residual_out) dense
  // CUDA only: the context's device pool and the op stream's grid scratch, for the grid-group
  // kernel's published partials (core/runtime/grid_scratch.hpp); the kernel is not taken without.
  MemoryPool* pool = nullptr;
  GridScratch* grid = nullptr;
};

void run_cpu(const Plan& plan, ThreadPool& threads);

#if defined(KF_WITH_CUDA)
// Enqueues the op on native_stream (a cudaStream_t) of the current device; never synchronises.
// Allocates only the grid-group kernel's scratch, stream-ordered from plan.pool (plan.grid's
// words, kept for the stream's later launches; per call while the stream is being captured).
// Throws KF_ERROR_CUDA if a launch fails.
void run_cuda(const Plan& plan, int32_t device_id, void* native_stream);
#endif

}  // namespace kf::norm
