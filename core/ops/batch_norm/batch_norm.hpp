// The batch norm family's internal interface (batch norm followed by an activation): the C entry
// (batch_norm.cpp) validates and reduces the call to a Plan; the backends (cpu.cpp, cuda.cu)
// execute it and trust it.
#pragma once

#include <cstdint>

#include "core/math/activation.hpp"
#include "core/ops/rows/rows.hpp"
#include "kernel_fusion/types.h"

namespace kf {
class ThreadPool;
}

namespace kf::batch_norm {

// A [C] tensor in the compute type (f32, or f64 for f64 data); data == nullptr when absent.
struct Channel {
  void* data = nullptr;
  int64_t stride = 0;  // elements
};

struct Plan {
  kf_dtype_t dtype = KF_DTYPE_FLOAT32;
  math::Activation act = math::Activation::none;
  double eps = 0;
  double momentum = 0;
  bool training = false;
  int64_t channels = 0;  // C > 0 (empty calls never reach a backend)
  int64_t count = 0;     // n = N * prod(spatial) elements per channel, > 0 (>= 2 in training)

  // x and out seen per channel: rows::Walk over x's dims with the channel dim moved first, so
  // row c is channel c and its columns are the channel's n elements.
  rows::Walk by_channel;
  rows::Operand x_c, out_c;

  // x and out seen element by element in x's row-major order (one row of every element); the
  // channel of logical element e is (e / channel_inner) % channels.
  rows::Walk elements;
  rows::Operand x_e, out_e;
  int64_t channel_inner = 1;   // product of the dims after the channel dim (1 for NHWC)
  bool dense = false;          // x and out both contiguous, so element e is at offset e in each
  bool channels_last = false;  // the channel stride is 1 in x and out (C > 1)

  // Running statistics may be absent only in training (not tracked).
  Channel weight, bias, running_mean, running_var;
};

void run_cpu(const Plan& plan, ThreadPool& threads);

#if defined(KF_WITH_CUDA)
// Enqueues the op on native_stream (a cudaStream_t) of the current device; never synchronises or
// allocates. Throws KF_ERROR_CUDA if a launch fails.
void run_cuda(const Plan& plan, int32_t device_id, void* native_stream);
#endif

}  // namespace kf::batch_norm
