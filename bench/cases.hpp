// What kf-bench times: every op x activation x dtype x shape, fused and unfused, plus the bias
// (row broadcast) cases and the host cost of one asynchronous call. Unless --no-check, every
// output (fused, unfused, the host cost's) is checked against float64 on poisoned buffers.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bench/data.hpp"
#include "bench/options.hpp"
#include "bench/timing.hpp"

namespace kf_bench {

struct CaseResult {
  Op op = Op::kAdd;
  kf_activation_t act = KF_ACTIVATION_NONE;
  kf_dtype_t dtype = KF_DTYPE_FLOAT32;
  std::vector<int64_t> shape;    // of a and out
  std::vector<int64_t> b_shape;  // equal to shape, or [hidden] for a bias
  std::string size_class;        // "large" or "seed"
  int buffer_sets = 1;           // rotated so the data never fits in L2
  double bytes = 0;              // fused traffic: a, b and out once each
  double fused_us = 0;           // medians
  double unfused_us = 0;
  // CUDA seed rows: the fused op timed back to back (RunTimer::time_batches), median per run;
  // for reference, not a target (the targets use fused_us). 0 where not measured.
  double back_to_back_us = 0;
  std::string check = "skipped";  // "ok", "skipped", or what went wrong
  bool failed = false;

  bool is_bias() const { return b_shape.size() != shape.size(); }
  double gbps() const { return fused_us > 0 ? bytes / (fused_us * 1e3) : 0.0; }
  double speedup() const { return fused_us > 0 ? unfused_us / fused_us : 0.0; }
};

struct HostCostResult {
  int64_t calls = 0;
  int64_t elements = 0;
  int sync_every = 0;
  int64_t batches = 0;          // calls / sync_every batches, each timed on its own
  double us_per_call = 0;       // median over the batches of the host time per call inside the
                                // calls (drains excluded): the host cost
  double us_per_call_mean = 0;  // the same, averaged over all calls (OS noise included)
  double us_empty_launch = -1;  // CUDA: the same measurement (median) of an empty kernel's launch,
                                // in batches interleaved with the library's
  double us_empty_launch_driver = -1;     // ... launched with the driver's cuLaunchKernel
  double us_empty_launch_dependent = -1;  // ... with cuLaunchKernelEx as a dependent launch
                                          // (sm_90), the element-wise ops' path there
  std::string error;  // empty on success: a failed call, or (checked) an output mismatch
};

class CaseRunner {
 public:
  // `cache_bytes`: the last-level cache the data must outgrow (L2 on CUDA).
  CaseRunner(const Options& options, kf_context_t* ctx, kf_stream_t* stream,
             kf_device_type_t device, uint64_t cache_bytes);

  // Runs every configured case; `on_result` sees each result as soon as it is measured. Unless
  // --no-check, the fused and the unfused form each run once on poisoned outputs and are
  // spot-checked before any timing (a mismatch of the unfused one reads "unfused: ...").
  std::vector<CaseResult> run_all(const std::function<void(const CaseResult&)>& on_result);

  // Times options.host_calls back-to-back add+relu calls on a 256-element f32 tensor with the
  // host clock, synchronising every sync_every calls (excluded from the time). Unless
  // --no-check, `out` is poisoned before the calls and compared with relu(a + b) in float64
  // after them; a mismatch is the result's error.
  HostCostResult run_host_cost();

 private:
  struct ShapeSpec {
    std::string size_class;
    std::vector<int64_t> shape;
  };
  std::vector<ShapeSpec> shapes_for(kf_dtype_t dtype) const;
  void run_shape(kf_dtype_t dtype, const ShapeSpec& spec,
                 const std::function<void(const CaseResult&)>& on_result,
                 std::vector<CaseResult>* results);

  const Options& options_;
  kf_context_t* ctx_;
  kf_stream_t* stream_;
  uint64_t cache_bytes_;
  kf_device_type_t device_;
  RunTimer timer_;
};

}  // namespace kf_bench
