// The ops section of kf-bench (--suite ops): every memory-bound fused op of issue 3 (bias +
// activation, GELU + dropout, layer/RMS norm, softmax, log-softmax, batch norm, reductions) timed
// on the same machinery as the elementwise cases, against the same-run copy ceiling.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "bench/options.hpp"
#include "bench/timing.hpp"

namespace kf_bench {

struct OpResult {
  std::string op;       // e.g. "softmax", "batch_norm", "reduce"
  std::string variant;  // what else distinguishes the row: activation, axis, training, ...
  std::string target;   // the PERF.md target class: "large" (>= 90%), "rows" / "reduce_dim0"
                        // (>= 85%), "seed" (>= 70%), or "" when the row is not held to one
  kf_dtype_t dtype = KF_DTYPE_FLOAT32;
  std::vector<int64_t> shape;  // of the (main) input
  int buffer_sets = 1;
  double bytes = 0;  // each input read once, each output written once
  double us = 0;     // median
  // CUDA rows: the op timed back to back (RunTimer::time_batches; every batch for the seed rows,
  // kFewBatches for the others), median per run; 0 when not measured. For reference: the targets
  // are judged on `us`.
  double back_to_back_us = 0;
  std::string check = "skipped";
  bool failed = false;

  double gbps() const { return us > 0 ? bytes / (us * 1e3) : 0.0; }
};

class OpCaseRunner {
 public:
  // `cache_bytes`: the last-level cache the data must outgrow (L2 on CUDA).
  OpCaseRunner(const Options& options, kf_context_t* ctx, kf_stream_t* stream,
               kf_device_type_t device, uint64_t cache_bytes);

  // Runs every op case; `on_result` sees each result as soon as it is measured.
  std::vector<OpResult> run_all(const std::function<void(const OpResult&)>& on_result);
  // The targets (OpResult::target) of which the last run_all left rows out (--filter, --lengths):
  // a verdict over the rows that ran would not be the target's.
  const std::set<std::string>& left_out_targets() const { return left_out_targets_; }

 private:
  struct Case;
  void run_case(Case* c, const std::function<void(const OpResult&)>& on_result,
                std::vector<OpResult>* results);
  // Rows of `row_length` elements so that one run moves at least the target traffic.
  int64_t rows_for(kf_dtype_t dtype, int64_t row_length, double bytes_per_element) const;

  void add_bias_activation(kf_dtype_t dtype, std::vector<Case>* cases);
  void add_gelu_dropout(kf_dtype_t dtype, std::vector<Case>* cases);
  void add_row_ops(kf_dtype_t dtype, std::vector<Case>* cases);
  void add_batch_norm(kf_dtype_t dtype, std::vector<Case>* cases);
  void add_reductions(kf_dtype_t dtype, std::vector<Case>* cases);

  const Options& options_;
  kf_context_t* ctx_;
  kf_stream_t* stream_;
  kf_device_type_t device_;
  uint64_t cache_bytes_;
  double target_bytes_;  // traffic of one run of each case
  RunTimer timer_;
  std::set<std::string> left_out_targets_;
};

}  // namespace kf_bench
