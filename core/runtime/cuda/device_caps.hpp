// Per-device facts the kernels' launch code asks for on every call (SM count, compute
// capability), queried from the runtime once per device and cached. Include only where
// KF_WITH_CUDA is set.
#pragma once

#include <cstdint>

namespace kf {
namespace cuda {

// Streaming multiprocessors of `device`. Throws kf::Error(KF_ERROR_CUDA) if the query fails.
int sm_count(int32_t device);

// Major compute capability of `device` (9 on H100/H200). Throws kf::Error(KF_ERROR_CUDA).
int compute_major(int32_t device);

}  // namespace cuda
}  // namespace kf
