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

// Warp-lane instructions the SMs of `device` can issue per byte its DRAM moves (four schedulers
// of 32 lanes per SM at the SM clock, against double-data-rate memory over the bus): about 10 on
// an H100 SXM, 6.8 on an H200. 0 when the device does not report its clocks. Queried once.
double issue_per_byte(int32_t device);

}  // namespace cuda
}  // namespace kf
