// kf-bench's output: the header naming card, software and ceiling, the results table, the
// targets of PERF.md, and the JSON file.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "bench/cases.hpp"
#include "bench/fusion_cases.hpp"
#include "bench/op_cases.hpp"
#include "bench/timing.hpp"

namespace kf_bench {

// A device copy of the same traffic as a group of rows, with their buffer rotation: what a
// kernel moving those bytes can reach at that size (launch and ramp-up included).
struct SameSizeCopy {
  double traffic_bytes = 0;  // read + written, as the rows count it
  int sets = 1;
  CopyCeiling copy;
};

// Whether a seed row's traffic is the copy's (within 1 %: the norms add their weights) with the
// same buffer rotation.
inline bool same_size(const SameSizeCopy& c, const OpResult& r) {
  return c.sets == r.buffer_sets && r.bytes >= 0.99 * c.traffic_bytes &&
         r.bytes <= 1.01 * c.traffic_bytes;
}

struct RunInfo {
  std::string date;      // UTC, ISO 8601
  std::string software;  // library version, and the CUDA runtime and driver when present
  std::string note;      // why this backend was chosen, when not obvious; may be empty
  kf_device_properties_t device{};
  int iters = 0;
  int warmup = 0;
  bool quick = false;
  bool checked = true;  // false under --no-check: no output was compared with its reference
  // Options::narrowed_elementwise and narrowed_ops: the options that left default rows out.
  std::string narrowed_elementwise;
  std::string narrowed_ops;
  CopyCeiling ceiling;
  std::vector<SameSizeCopy> seed_copies;  // one per distinct (traffic, sets) of the seed op rows
};

// Current UTC time as "2026-11-26T12:34:56Z".
std::string utc_now();

void print_header(const RunInfo& info);
void print_table_header();
void print_row(const CaseResult& result, double ceiling_gbps);
void print_host_cost(const HostCostResult& host_cost);
// Compares the results with the targets (PERF.md) for the backend that ran: PASS or MISS, or
// "not evaluated" under --no-check or when options left some of the default rows out.
void print_targets(const RunInfo& info, const std::vector<CaseResult>& results,
                   const HostCostResult& host_cost);

// The ops section (--suite ops): its table and its targets.
void print_op_table_header();
void print_op_row(const OpResult& result, double ceiling_gbps);
// `left_out_targets`: the targets some of whose rows --filter or --lengths left out
// (OpCaseRunner); those, and all of them when info.narrowed_ops is set, read "not evaluated".
void print_op_targets(const RunInfo& info, const std::vector<OpResult>& results,
                      const std::set<std::string>& left_out_targets);

// Writes everything as one JSON object (the op cases under "op_rows", the fusion rows under
// "fusion_rows"); throws Failure when the file cannot be written.
void write_json(const std::string& path, const RunInfo& info,
                const std::vector<CaseResult>& results, const HostCostResult& host_cost,
                const std::vector<OpResult>& op_rows = {},
                const std::vector<FusionResult>& fusion_rows = {});

// JSON text of a string (quoted, escaped) and of a number (null when not finite).
std::string json_string(const std::string& text);
std::string json_number(double value);

}  // namespace kf_bench
