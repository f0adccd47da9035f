// The norm family's internal interface (layer norm and RMS norm, each followed by an
// activation): the C entries (norm.cpp) validate and reduce the call to a Plan; the backends
// (cpu.cpp, cuda.cu) execute it and trust it.
#pragma once

#include <cstdint>

#include "core/math/activation.hpp"
#include "core/ops/rows/rows.hpp"
#include "kernel_fusion/types.h"

namespace kf {
class ThreadPool;
}

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
};

void run_cpu(const Plan& plan, ThreadPool& threads);

#if defined(KF_WITH_CUDA)
// Enqueues the op on native_stream (a cudaStream_t) of the current device; never synchronises or
// allocates. Throws KF_ERROR_CUDA if a launch fails.
void run_cuda(const Plan& plan, int32_t device_id, void* native_stream);
#endif

}  // namespace kf::norm
