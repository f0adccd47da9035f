// The GELU + dropout family's internal interface: the C entry (dropout.cpp) validates its
// arguments and reduces them to a Plan; the backends (cpu.cpp, cuda.cu) execute a Plan and trust
// it.
//
// Random numbers: element i (x's row-major index) draws half i % 2 (0: the low 16 bits, 1: the
// high) of word (i / 2) % 4 of Philox block i / 8 in subsequence `offset` under `seed`
// (math::philox_block), i.e. of the (i / 2)-th number curand returns after curand_init(seed,
// offset, 0). It is kept when that half's uniform u = v * 2^-16 satisfies u >= p, tested exactly
// as v >= keep_threshold with keep_threshold = ceil(p * 2^16) (math::uniform16). The mask
// therefore depends only on (seed, offset, i): the same on every backend and for every layout of
// the tensors. Two elements a 32-bit number halve the Philox work of the 24-bit rule that came
// before (one number an element), which bound the 16-bit CUDA kernels (cuda.cu).
#pragma once

#include <cstdint>

#include "core/math/activation.hpp"
#include "core/math/numeric.hpp"
#include "core/math/philox.hpp"
#include "kernel_fusion/types.h"

namespace kf {
class ThreadPool;
}

namespace kf::dropout {

struct Plan {
  kf_dtype_t dtype = KF_DTYPE_FLOAT32;
  int64_t count = 0;  // elements of x (> 0: empty calls never reach a backend)
  uint64_t seed = 0;
  uint64_t offset = 0;          // the Philox subsequence
  uint32_t keep_threshold = 0;  // ceil(p * 2^16); 0 keeps every element (p == 0 or not training)
  double scale = 1.0;           // 1 / (1 - p) for kept elements
  bool contiguous = false;      // x, out (and mask) dense row-major: index == offset

  // x's shape with extent-1 dims dropped and dims merged where all tensors are contiguous across
  // them, outermost first; strides in elements (mask_strides unused without a mask).
  int32_t ndim = 0;
  int64_t shape[KF_MAX_DIMS] = {};
  int64_t x_strides[KF_MAX_DIMS] = {};
  int64_t out_strides[KF_MAX_DIMS] = {};
  int64_t mask_strides[KF_MAX_DIMS] = {};

  const void* x = nullptr;
  void* out = nullptr;      // may be x (exactly in place)
  uint8_t* mask = nullptr;  // nullable; 1 = kept
};

// The value of a kept element, gelu(x) * scale, computed in T. The scale rides in GELU's half:
// with h = (scale / 2) x, it is h (1 + erf(x / sqrt 2)) (math::Gelu's form), one multiply an
// element fewer than scaling gelu(x). half_scale = scale / 2, exact in every type (a power-of-two
// factor). P: the primitives of erf (math::Precise, or math::HalfStorage's shorter erf where the
// result is rounded to f16 or bf16, as the element-wise GELU kernels do).
template <class T, class P = math::Precise>
KF_HOST_DEVICE T kept_value(T x, T half_scale, P = {}) {
  return P::times_one_plus_erf(half_scale * x, x);
}

void run_cpu(const Plan& plan, ThreadPool& threads);

#if defined(KF_WITH_CUDA)
// Enqueues the op on native_stream (a cudaStream_t) of device_id; never synchronises or allocates.
void run_cuda(const Plan& plan, int32_t device_id, void* native_stream);
#endif

}  // namespace kf::dropout
