// The softmax family's internal interface (scale-mask-softmax and log-softmax over the last dim):
// the C entries (softmax.cpp) validate and reduce the call to a Plan; the backends (cpu.cpp,
// cuda.cu) execute it and trust it.
#pragma once

#include <cstdint>

#include "core/ops/rows/rows.hpp"
#include "kernel_fusion/types.h"

namespace kf {
class MemoryPool;
struct GridScratch;
class ThreadPool;
}  // namespace kf

namespace kf::softmax {

struct Plan {
  kf_dtype_t dtype = KF_DTYPE_FLOAT32;
  bool log = false;
  bool causal = false;
  double scale = 1;
  int64_t query_rows = 1;      // Lq: x's second-to-last extent (1 for 1-D x); row % Lq is the query
  int64_t diagonal = 0;        // Lk - Lq: (i, j) is hidden by the causal mask when j > i + diagonal
  rows::Walk walk;             // rows > 0 and row_length > 0
  rows::Operand x, mask, out;  // mask absent: data == nullptr; out may be x exactly
  bool dense = false;          // x, out (and mask, when present) have dense rows
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
void run_cuda(const Plan& plan, int32_t device_id, void* native_stream);
#endif

}  // namespace kf::softmax
