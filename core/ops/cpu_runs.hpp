// Runs of storage-type elements widened to their compute type and narrowed back, on the CPU:
// f16/bf16 to float and back (f32 and f64 copied), contiguous or `stride` elements apart. The
// loops vectorise (numeric.hpp's host conversions are branch-free) and are built for AVX-512,
// AVX2 and baseline x86-64 (KF_CPU_CLONES). Shared by the CPU ops that compute 16-bit data in
// float blocks (elementwise, the row-wise families, batch norm, dropout).
#pragma once

#include <cstdint>

#include "core/math/numeric.hpp"
#include "core/runtime/cpu_clones.hpp"

namespace kf {

template <class S>
KF_CPU_CLONES void widen_run(const S* src, int64_t stride, math::compute_t<S>* dst, int64_t n) {
  using Traits = math::StorageTraits<S>;
  if (stride == 1) {
    for (int64_t i = 0; i < n; ++i) dst[i] = Traits::to_compute(src[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = Traits::to_compute(src[i * stride]);
  }
}

template <class S>
KF_CPU_CLONES void narrow_run(const math::compute_t<S>* src, S* dst, int64_t stride, int64_t n) {
  using Traits = math::StorageTraits<S>;
  if (stride == 1) {
    for (int64_t i = 0; i < n; ++i) dst[i] = Traits::from_compute(src[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i * stride] = Traits::from_compute(src[i]);
  }
}

}  // namespace kf
