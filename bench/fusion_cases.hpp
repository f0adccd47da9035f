// The fusion-engine section of kf-bench (--suite fusion): the rows issue 4 asks for, timed on
// the same machinery as the other suites and checked against float64 before timing.
//   chain    an elementwise chain of N = 1, 4, 11, 16 ops, one generated kernel, vs the copy
//            ceiling (and vs the same ops run one by one, one generated kernel per op)
//   crops    50 crops of one u8 RGB frame -> cast -> mul -> sub -> div -> planar f32, one launch,
//            vs the same crop by crop with one single-op kernel per step
//   resize   1000 crops of random sizes -> bilinear 64x64 -> ImageNet normalisation ->
//            [1000, 3, 64, 64] f32 in one launch
//   compile  NVRTC cold compile, disk-cache hit, in-memory hit + launch (host clock)
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bench/handles.hpp"
#include "bench/options.hpp"
#include "bench/timing.hpp"

namespace kf_bench {

struct FusionResult {
  std::string name;        // "chain", "crops", "resize", "compile"
  std::string variant;     // what else distinguishes the row
  std::string shape;       // the data, in words ("8192x8192", "50 x 120x60 of 1920x1080x3")
  double bytes = 0;        // traffic of one run (inputs read once, outputs written once); 0: none
  double us = 0;           // median of one run (see FusionCaseRunner)
  double baseline_us = 0;  // the same work unfused (chain: op by op; crops: crop by crop)
  double ratio = 0;        // chain: time(N) / time(N = 1)
  double device_us = 0;    // CUDA: device time of one launch, the host's cost hidden
  double launch_host_us = 0;      // host time inside the launch call
  std::string target;             // what the row is held to, in words; empty when nothing
  std::string measured;           // the measurement the target judges, in words
  std::string verdict;            // "PASS", "MISS", "not evaluated" (--quick, --no-check), or
                                  // empty when the row has no target
  std::string check = "skipped";  // "ok", "skipped", or what went wrong
  std::string note;               // extra facts printed after the row
  bool failed = false;

  double gbps() const { return us > 0 && bytes > 0 ? bytes / (us * 1e3) : 0.0; }
  double speedup() const { return us > 0 && baseline_us > 0 ? baseline_us / us : 0.0; }
};

// The on-disk kernel cache kf-bench compiles into: a fresh temporary directory named by
// KF_CACHE_DIR for the whole run (so the cold-compile row starts empty and the user's cache is
// left alone), removed at exit. Construct it before the first library call.
class FusionCacheDir {
 public:
  FusionCacheDir();
  ~FusionCacheDir();
  FusionCacheDir(const FusionCacheDir&) = delete;
  FusionCacheDir& operator=(const FusionCacheDir&) = delete;

  const std::string& path() const { return path_; }
  // Removes every entry (the next compile that reads the disk cache misses).
  void clear() const;
  // Regular files below the directory.
  int file_count() const;

 private:
  std::string path_;
};

class FusionCaseRunner {
 public:
  // `cache_bytes`: the last-level cache the data must outgrow (L2 on CUDA); `ceiling_gbps`:
  // the copy ceiling measured in this run; `cache_dir`: the run's kernel cache directory.
  FusionCaseRunner(const Options& options, kf_context_t* ctx, kf_stream_t* stream,
                   kf_device_type_t device, uint64_t cache_bytes, double ceiling_gbps,
                   const FusionCacheDir* cache_dir);

  // Runs every fusion row; `on_result` sees each row as soon as it is measured.
  std::vector<FusionResult> run_all(const std::function<void(const FusionResult&)>& on_result);
  // The sections ("compile", "chain", ...) the last run_all left out (--filter).
  const std::vector<std::string>& left_out_sections() const { return left_out_sections_; }

 private:
  using Emit = std::function<void(const FusionResult&)>;
  void run_chains(const Emit& emit);
  void run_crops(const Emit& emit);
  void run_resize_batch(const Emit& emit);
  void run_compile(const Emit& emit);

  // CUDA only: median device time of body(run) with each run queued behind ~1 ms of other work
  // and bracketed by events, so the host's cost of enqueuing body is hidden; also the median
  // host time inside body. Both stay 0 on the CPU or when the host is slower than the cover.
  void time_hidden_launch(int runs, const std::function<void(int)>& body, double* device_us,
                          double* host_us);
  // Median times of `fused` and `unfused`, measured in alternating rounds so that a change of
  // the machine's load during the measurement (a shared CPU) touches both alike.
  void time_pair(int warmup, const std::function<void(int)>& fused,
                 const std::function<void(int)>& unfused, double* fused_us, double* unfused_us);
  bool cuda() const { return device_ == KF_DEVICE_CUDA; }
  // Sets the row's target and measurement, and PASS/MISS unless this is a --quick or a
  // --no-check run (then "not evaluated"); a failed row is a MISS.
  void judge(FusionResult* r, const std::string& target, const std::string& measured,
             bool met) const;

  const Options& options_;
  kf_context_t* ctx_;
  kf_stream_t* stream_;
  kf_device_type_t device_;
  uint64_t cache_bytes_;
  double ceiling_gbps_;
  const FusionCacheDir* cache_dir_;
  RunTimer timer_;
  std::vector<Tensor> cover_;  // time_hidden_launch's busy work
  std::vector<Event> events_;
  std::vector<FusionResult> results_;
  std::vector<std::string> left_out_sections_;
};

// The table, the targets and the JSON rows of the fusion section.
// `checked`: false under --no-check.
void print_fusion_header(kf_device_type_t device, const FusionCacheDir& cache_dir, bool checked);
void print_fusion_row(const FusionResult& r, double ceiling_gbps);
// `left_out_sections`: as FusionCaseRunner::left_out_sections().
void print_fusion_targets(const Options& options, const std::vector<std::string>& left_out_sections,
                          const std::vector<FusionResult>& rows);
// The rows as a JSON array (the value of "fusion_rows").
std::string fusion_rows_json(const std::vector<FusionResult>& rows, double ceiling_gbps);

}  // namespace kf_bench
