// Per-device facts the kernels' launch code asks for on every call (SM count, compute
// capability), queried from the runtime once per device and cached. Include only where
// KF_WITH_CUDA is set.
#pragma once

#include <atomic>
#include <cstdint>

namespace kf {
namespace cuda {

// Devices whose once_per_device answers are kept; answers about devices past them are computed
// at every call.
inline constexpr int32_t kKeptDevices = 64;

// compute()'s answer about `device`, computed once per device and kept in `kept` (a slot a
// device, T{} while unknown): the launch code's queries and one-time kernel set-up, which depend
// on the device and nothing else. compute must not answer T{} (it would be asked again). Two
// threads may both compute the first answer; they get the same one.
template <class T, class Compute>
T once_per_device(std::atomic<T> (&kept)[kKeptDevices], int32_t device, Compute&& compute) {
  const bool keeps = device >= 0 && device < kKeptDevices;
  if (keeps) {
    if (const T known = kept[device].load(std::memory_order_acquire); known != T{}) return known;
  }
  const T answer = compute();
  if (keeps) kept[device].store(answer, std::memory_order_release);
  return answer;
}

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
