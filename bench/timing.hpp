// How kf-bench measures: per-run durations (device events on CUDA, the host clock on the CPU,
// where the backend finishes an op before returning), medians, and the copy ceiling the op
// times are compared with.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "bench/handles.hpp"

namespace kf_bench {

// Runs per batch where the seed rows (element-wise and ops suites) are also timed back to back
// (RunTimer::time_batches), and the ops suite's other CUDA rows in kFewBatches batches.
constexpr int kBackToBackRuns = 20;
constexpr int kFewBatches = 5;

// Times a piece of work enqueued on one stream.
class RunTimer {
 public:
  // `max_runs`: the most timed runs one call of time_runs() may ask for.
  RunTimer(kf_context_t* ctx, kf_stream_t* stream, kf_device_type_t device, int max_runs);

  // Calls body(i) `warmup` times, then `runs` times more, and returns each of the timed runs'
  // durations in microseconds. On CUDA the timed runs are enqueued back to back with an event
  // between each two, so the GPU never idles inside the measured region; on the CPU each run
  // is timed with the host clock around the call and a stream synchronisation.
  std::vector<double> time_runs(int warmup, int runs, const std::function<void(int)>& body);

  // CUDA only: `batches` batches of `per_batch` runs queued back to back, an event only before
  // and after each batch, so that nothing but the stream's order separates one run from the
  // next (an event between two kernels makes the second wait for the first to drain). Returns
  // each batch's time divided by per_batch, in microseconds. batches <= max_runs.
  std::vector<double> time_batches(int warmup, int batches, int per_batch,
                                   const std::function<void(int)>& body);

 private:
  kf_context_t* ctx_;
  kf_stream_t* stream_;
  kf_device_type_t device_;
  std::vector<Event> events_;
};

double median(std::vector<double> values);

// A copy measured in the same run: the bandwidth ceiling of memory-bound ops.
struct CopyCeiling {
  std::string method;  // e.g. "cudaMemcpyAsync D2D" or "memcpy, 16 threads"
  size_t bytes = 0;    // size of the copied buffer
  double median_us = 0;
  double gbps = 0;  // 2 * bytes / time: every byte is read once and written once
};

// Host memcpy of `bytes`, split over `threads` threads (the CPU backend's ceiling).
CopyCeiling measure_host_copy(size_t bytes, int threads, int warmup, int runs);

// Device-to-device cudaMemcpyAsync of `bytes` on CUDA device `device_id`, rotating through
// `sets` source/destination pairs (as the op rows rotate their buffer sets, so that a small copy
// is not served from L2). Throws when the CUDA runtime fails or the build has no CUDA support.
CopyCeiling measure_device_copy(int device_id, size_t bytes, int warmup, int runs, int sets = 1);

// "CUDA runtime 13.0, driver supports 13.0", or "" in a CPU-only build.
std::string cuda_version_string();

// The ways an empty kernel is launched for the host-cost floors: the runtime's <<<>>>, the
// driver's cuLaunchKernel, and the driver's cuLaunchKernelEx as a programmatic dependent launch
// (sm_90; the path the library's element-wise ops take there).
enum class LaunchPath { runtime, driver, driver_dependent };

// Host microseconds per launch of an empty kernel on native_stream (a cudaStream_t) over one
// batch of `launches`, timed inside the launches, then the stream drained; -1 on a CUDA error or
// where the path is not available (a dependent launch before sm_90). CUDA builds only.
double empty_launch_batch_us(void* native_stream, int64_t launches, LaunchPath path);

// Wall-clock time in microseconds since an arbitrary start.
double now_us();

}  // namespace kf_bench
