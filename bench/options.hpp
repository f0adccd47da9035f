// kf-bench's command line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/data.hpp"

namespace kf_bench {

// `--lengths sweep`: 29 row lengths across the "every row length from 64 to 262144", the
// default five among them: powers of two, lengths just past a policy's capacity (8200, 10000,
// 20000), odd lengths, and vocabulary rows (30522 and 50257 fill no 16-byte vectors, 32000 does).
inline constexpr int64_t kSweepLengths[] = {
    64,    100,   256,   500,   1000,  1024,  2000,   2048,   3000,  4096,
    5000,  5120,  6144,  7000,  8192,  8200,  10000,  12288,  14336, 16384,
    20000, 30522, 32000, 32768, 50257, 65536, 100000, 131072, 262144};

struct Options {
  bool force_cpu = false;     // --cpu
  bool require_cuda = false;  // --cuda
  bool quick = false;         // --quick
  bool bias_cases = true;     // --no-bias clears it
  bool check = true;          // --no-check clears it
  // Values below zero, and empty lists, mean "the default for the device" (resolve_defaults).
  int iters = -1;
  int warmup = -1;
  double large_mib = -1;
  int64_t host_calls = -1;
  std::vector<Op> ops;
  std::vector<kf_activation_t> acts;
  std::vector<kf_dtype_t> dtypes;
  std::vector<std::string> sizes;  // "large", "seed"
  std::vector<std::string>
      filter;  // --filter: ops-suite ops and fusion-suite sections listed (all if empty)
  std::vector<int64_t> lengths;  // --lengths: the row ops' row lengths (the default set if empty)
  std::string json_path;
  std::string suite = "elementwise";  // --suite: "elementwise", "ops", "fusion" or "all"
  // Set by resolve_defaults: the options that left some of a suite's default rows out, as
  // "--ops, --no-bias", empty when none did. The targets are over the default rows, so a
  // narrowed suite's target lines give no verdict.
  std::string narrowed_elementwise;  // by --ops, --acts, --dtypes, --no-bias
  std::string narrowed_ops;          // by --dtypes (--filter and --lengths: OpCaseRunner)

  bool elementwise_suite() const { return suite == "elementwise" || suite == "all"; }
  bool ops_suite() const { return suite == "ops" || suite == "all"; }
  bool fusion_suite() const { return suite == "fusion" || suite == "all"; }
};

// parse_options() returns this when the program should go on.
constexpr int kGoOn = -1;

// Parses argv into `options`. Returns kGoOn, or the exit code to stop with: 0 after --help,
// 2 after a usage error (with a message on stderr).
int parse_options(int argc, char** argv, Options* options);

// Fills every "default" field for the backend that will run (CUDA or the CPU), and names in
// narrowed_elementwise / narrowed_ops the options whose lists lack an item of the default list
// (--all-acts narrows nothing) and --no-bias. A list is the user's when it is not empty yet.
void resolve_defaults(kf_device_type_t device, Options* options);

}  // namespace kf_bench
