#include "bench/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>

namespace kf_bench {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = 1024.0 * kMiB;

bool is_cuda(const RunInfo& info) { return info.device.device_type == KF_DEVICE_CUDA; }

std::string shape_text(const std::vector<int64_t>& shape, const char* separator) {
  std::string text;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) text += separator;
    text += std::to_string(shape[i]);
  }
  return text;
}

// Elements of the case's a (and out) tensor, and its bytes.
double tensor_elements(const CaseResult& r) {
  double n = 1;
  for (int64_t d : r.shape) n *= static_cast<double>(d);
  return n;
}
double tensor_bytes(const CaseResult& r) {
  return tensor_elements(r) * static_cast<double>(kf_dtype_size(r.dtype));
}

// The elementwise targets (issue 2) are stated for f32, f16 and bf16 on CUDA (f64 rows, which
// --dtypes can add, are measured but not judged) and for 16M f32 elements on the CPU.
bool cuda_target_dtype(kf_dtype_t dtype) {
  return dtype == KF_DTYPE_FLOAT32 || dtype == KF_DTYPE_FLOAT16 || dtype == KF_DTYPE_BFLOAT16;
}
constexpr double kCudaTargetTensorBytes = 256.0 * kMiB;
// The op targets (issue 3) are stated at 256 MiB of traffic (inputs read once, outputs written
// once), not per tensor.
constexpr double kOpTargetTrafficBytes = 256.0 * kMiB;
constexpr double kCpuTargetElements = 16.0 * 1024 * 1024;

double percent_of_copy(const CaseResult& r, double ceiling_gbps) {
  return ceiling_gbps > 0 ? 100.0 * r.gbps() / ceiling_gbps : 0.0;
}

std::string case_name(const CaseResult& r) {
  return std::string(r.is_bias() ? "bias-" : "") + op_name(r.op) + " " + activation_name(r.act) +
         " " + dtype_name(r.dtype) + " " + shape_text(r.shape, "x");
}

}  // namespace

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string json_number(double value) {
  if (!std::isfinite(value)) return "null";  // JSON has no NaN or infinity
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", value);
  return text;
}

namespace {

constexpr const char* kUnchecked = "--no-check: outputs not checked";

// A JSON string, or null for an empty one.
std::string json_or_null(const std::string& text) {
  return text.empty() ? "null" : json_string(text);
}

// Why a target's rows cannot be judged: --no-check first, then the options (comma-separated
// names) that left some of its rows out; empty when they can.
std::string unevaluated_reason(const RunInfo& info, const std::string& narrowing_options) {
  std::string reason = info.checked ? "" : kUnchecked;
  // PERF.md's method times the median of at least 100 runs (the CUDA default).
  if (is_cuda(info) && info.iters < 100)
    reason += std::string(reason.empty() ? "" : "; ") + "fewer than 100 timed runs (--iters " +
              std::to_string(info.iters) + ")";
  if (narrowing_options.empty()) return reason;
  return reason + (reason.empty() ? "" : "; ") + narrowing_options + " left some of its rows out";
}

// One target line: `met` of `total` rows, the worst row, and PASS or MISS; "not evaluated" when
// no row was measured or `unevaluated` says why the rows cannot be judged.
void print_target_line(const char* what, int met, int total, const std::string& worst,
                       const std::string& unevaluated) {
  if (total == 0) {
    std::printf("  %-48s not evaluated: no row of the target's size and dtypes was measured\n",
                what);
    return;
  }
  const std::string verdict = !unevaluated.empty() ? "not evaluated (" + unevaluated + ")"
                                                   : (met == total ? "PASS" : "MISS");
  std::printf("  %-48s %d/%d rows; lowest %s  %s\n", what, met, total, worst.c_str(),
              verdict.c_str());
}

}  // namespace

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

void print_header(const RunInfo& info) {
  const kf_device_properties_t& d = info.device;
  std::printf("kf-bench: fused elementwise ops vs the same work unfused, and the copy ceiling\n");
  std::printf("  date      %s\n", info.date.c_str());
  if (is_cuda(info)) {
    std::printf("  device    %s (cuda:%d, sm_%d%d, %d SMs, L2 %.1f MiB, %.1f GiB)\n", d.name,
                d.device_id, d.compute_capability_major, d.compute_capability_minor,
                d.multiprocessor_count, static_cast<double>(d.l2_cache_bytes) / kMiB,
                static_cast<double>(d.total_memory_bytes) / kGiB);
  } else {
    std::printf("  device    %s (cpu, %d logical cores, %.1f GiB)\n", d.name,
                d.multiprocessor_count, static_cast<double>(d.total_memory_bytes) / kGiB);
  }
  if (!info.note.empty()) std::printf("  note      %s\n", info.note.c_str());
  std::printf("  software  %s\n", info.software.c_str());
  std::printf("  timing    %s; median of %d runs after %d+ warm-up runs (one per buffer set)\n",
              is_cuda(info) ? "events between back-to-back runs" : "host clock around each call",
              info.iters, info.warmup);
  if (info.quick)
    std::printf("  quick     --quick: a smoke run of small shapes, not a measurement\n");
  if (!info.checked)
    std::printf("  check     --no-check: no output compared with float64; no target evaluated\n");
  std::printf("  ceiling   %s of %.0f MiB: %.1f GB/s (%.1f us; GB/s counts bytes read + written)\n",
              info.ceiling.method.c_str(), static_cast<double>(info.ceiling.bytes) / kMiB,
              info.ceiling.gbps, info.ceiling.median_us);
  std::printf(
      "  bytes     fused traffic: a and out once each, b once (a bias row counts once)\n\n");
}

void print_table_header() {
  std::printf("%-4s %-9s %-5s %-14s %-7s %4s %11s %9s %6s %11s %8s  %s\n", "op", "act", "dtype",
              "shape", "b", "sets", "fused(us)", "GB/s", "%copy", "unfused(us)", "speedup",
              "check");
  std::fflush(stdout);
}

void print_row(const CaseResult& r, double ceiling_gbps) {
  const std::string b = r.is_bias() ? "[" + shape_text(r.b_shape, ",") + "]" : "same";
  if (r.fused_us <= 0) {
    std::printf("%-4s %-9s %-5s %-14s %-7s %4d %11s %9s %6s %11s %8s  %s\n", op_name(r.op),
                activation_name(r.act), dtype_name(r.dtype), shape_text(r.shape, "x").c_str(),
                b.c_str(), r.buffer_sets, "-", "-", "-", "-", "-", r.check.c_str());
  } else {
    char unfused[32] = "-";
    char speedup[32] = "-";
    if (r.unfused_us > 0) {
      std::snprintf(unfused, sizeof unfused, "%.2f", r.unfused_us);
      std::snprintf(speedup, sizeof speedup, "%.2fx", r.speedup());
    }
    std::printf("%-4s %-9s %-5s %-14s %-7s %4d %11.2f %9.1f %6.1f %11s %8s  %s\n", op_name(r.op),
                activation_name(r.act), dtype_name(r.dtype), shape_text(r.shape, "x").c_str(),
                b.c_str(), r.buffer_sets, r.fused_us, r.gbps(), percent_of_copy(r, ceiling_gbps),
                unfused, speedup, r.check.c_str());
  }
  std::fflush(stdout);
}

void print_host_cost(const HostCostResult& h) {
  if (h.calls <= 0) return;
  if (!h.error.empty()) {
    std::printf("\nhost cost: failed: %s\n", h.error.c_str());
    return;
  }
  std::printf(
      "\nhost cost: %lld async add+relu calls on %lld f32 elements, draining the stream every %d "
      "calls:\n  %.3f us/call inside the calls (host cost: median of %lld batches; mean %.3f)\n",
      static_cast<long long>(h.calls), static_cast<long long>(h.elements), h.sync_every,
      h.us_per_call, static_cast<long long>(h.batches), h.us_per_call_mean);
  if (h.us_empty_launch >= 0)
    std::printf(
        "  %.3f us/call for an empty kernel launched with the CUDA runtime, timed the same way in "
        "batches interleaved with the library's (the floor under any op call)\n",
        h.us_empty_launch);
  if (h.us_empty_launch_driver >= 0)
    std::printf(
        "  %.3f us/call for the same empty kernel launched with the driver's cuLaunchKernel\n",
        h.us_empty_launch_driver);
  if (h.us_empty_launch_dependent >= 0)
    std::printf(
        "  %.3f us/call for an empty kernel launched with the driver's cuLaunchKernelEx as a "
        "programmatic dependent launch (the path the element-wise ops take on sm_90)\n",
        h.us_empty_launch_dependent);
}

void print_targets(const RunInfo& info, const std::vector<CaseResult>& results,
                   const HostCostResult& h) {
  std::printf("\ntargets (PERF.md):\n");
  if (info.quick) {
    std::printf("  not evaluated: --quick sizes are too small to mean anything\n");
    return;
  }
  const std::string unevaluated = unevaluated_reason(info, info.narrowed_elementwise);
  if (is_cuda(info)) {
    struct Tally {
      int met = 0, total = 0;
      double lowest = 1e300;
      std::string worst;
    };
    Tally large, seed;
    for (const CaseResult& r : results) {
      if (!cuda_target_dtype(r.dtype)) continue;
      Tally* t = tensor_bytes(r) >= kCudaTargetTensorBytes ? &large
                 : r.size_class == "seed"                  ? &seed
                                                           : nullptr;
      if (t == nullptr) continue;
      const double pct = r.failed ? 0.0 : percent_of_copy(r, info.ceiling.gbps);
      const double goal = t == &large ? 90.0 : 70.0;
      ++t->total;
      if (pct >= goal) ++t->met;
      if (pct < t->lowest) {
        t->lowest = pct;
        char text[160];
        std::snprintf(text, sizeof text, "%.1f%% (%s)", pct, case_name(r).c_str());
        t->worst = text;
      }
    }
    print_target_line(">= 90% of copy, tensors of >= 256 MiB", large.met, large.total, large.worst,
                      unevaluated);
    print_target_line(">= 70% of copy at the seeds' sizes", seed.met, seed.total, seed.worst,
                      unevaluated);
    // The same seed rows timed back to back: what a stream of such calls sustains, without the
    // drain that an event between every two runs forces.
    Tally back;
    for (const CaseResult& r : results) {
      if (!cuda_target_dtype(r.dtype) || r.size_class != "seed" || r.back_to_back_us <= 0) continue;
      const double pct = r.failed || info.ceiling.gbps <= 0
                             ? 0.0
                             : 100.0 * r.bytes / (r.back_to_back_us * 1e3) / info.ceiling.gbps;
      ++back.total;
      if (pct >= 70.0) ++back.met;
      if (pct < back.lowest) {
        back.lowest = pct;
        char text[160];
        std::snprintf(text, sizeof text, "%.1f%% (%s)", pct, case_name(r).c_str());
        back.worst = text;
      }
    }
    if (back.total > 0)
      std::printf(
          "  for reference, not a target: the seed rows timed back to back (%d runs between two "
          "events, median of the batches) >= 70%% of copy: %d/%d rows; lowest %s\n",
          kBackToBackRuns, back.met, back.total, back.worst.c_str());
  } else {
    int met = 0, total = 0;
    double lowest = 1e300;
    std::string worst;
    for (const CaseResult& r : results) {
      if (r.size_class != "large" || r.dtype != KF_DTYPE_FLOAT32 ||
          tensor_elements(r) < kCpuTargetElements)
        continue;
      const double speedup = r.failed ? 0.0 : r.speedup();
      ++total;
      if (speedup >= 1.5) ++met;
      if (speedup < lowest) {
        lowest = speedup;
        char text[160];
        std::snprintf(text, sizeof text, "%.2fx (%s)", speedup, case_name(r).c_str());
        worst = text;
      }
    }
    print_target_line("CPU: fused >= 1.5x unfused, f32, >= 16M elements", met, total, worst,
                      unevaluated);
  }
  if (h.calls > 0 && h.error.empty()) {
    const std::string verdict = !is_cuda(info)  ? "(CPU: includes the work itself)"
                                : !info.checked ? std::string("not evaluated (") + kUnchecked + ")"
                                : h.us_per_call <= 3.0 ? "PASS"
                                                       : "MISS";
    std::printf("  %-48s %.3f us  %s\n", "host cost of one async call <= 3 us", h.us_per_call,
                verdict.c_str());
  }
}

void print_op_table_header() {
  std::printf("\nops (--suite ops): traffic = each input read once + each output written once\n");
  std::printf("%-15s %-18s %-5s %-16s %4s %9s %11s %9s %6s  %s\n", "op", "variant", "dtype",
              "shape", "sets", "MiB", "time(us)", "GB/s", "%copy", "check");
  std::fflush(stdout);
}

void print_op_row(const OpResult& r, double ceiling_gbps) {
  const double pct = ceiling_gbps > 0 ? 100.0 * r.gbps() / ceiling_gbps : 0.0;
  if (r.us <= 0) {
    std::printf("%-15s %-18s %-5s %-16s %4d %9.1f %11s %9s %6s  %s\n", r.op.c_str(),
                r.variant.c_str(), dtype_name(r.dtype), shape_text(r.shape, "x").c_str(),
                r.buffer_sets, r.bytes / kMiB, "-", "-", "-", r.check.c_str());
  } else {
    std::printf("%-15s %-18s %-5s %-16s %4d %9.1f %11.2f %9.1f %6.1f  %s\n", r.op.c_str(),
                r.variant.c_str(), dtype_name(r.dtype), shape_text(r.shape, "x").c_str(),
                r.buffer_sets, r.bytes / kMiB, r.us, r.gbps(), pct, r.check.c_str());
  }
  std::fflush(stdout);
}

namespace {

// Keeps the lowest percentage seen over a target's rows and the text naming its row.
void note_worst(const OpResult& r, double pct, double* lowest, std::string* worst) {
  if (pct >= *lowest) return;
  *lowest = pct;
  char text[200];
  std::snprintf(text, sizeof text, "%.1f%% (%s %s %s %s)", pct, r.op.c_str(), r.variant.c_str(),
                dtype_name(r.dtype), shape_text(r.shape, "x").c_str());
  *worst = text;
}

}  // namespace

void print_op_targets(const RunInfo& info, const std::vector<OpResult>& results,
                      const std::set<std::string>& left_out_targets) {
  std::printf("\nop targets (PERF.md, issue 3):\n");
  if (info.quick) {
    std::printf("  not evaluated: --quick sizes are too small to mean anything\n");
    return;
  }
  if (!is_cuda(info)) {
    std::printf("  not evaluated: the bandwidth targets are for the CUDA backend\n");
    return;
  }
  struct Goal {
    const char* target;
    const char* what;
    double percent;
  };
  const Goal goals[] = {{"large", ">= 90% of copy at >= 256 MiB of traffic", 90.0},
                        {"rows", ">= 85% of copy, norms/softmax, rows 64..262144", 85.0},
                        {"reduce_dim0", ">= 85% of copy, mean |x| over dim 0", 85.0},
                        {"seed", ">= 70% of copy, norms/softmax at the seeds' shapes", 70.0}};
  for (const Goal& g : goals) {
    int met = 0, total = 0;
    double lowest = 1e300;
    std::string worst;
    const std::string target = g.target;
    for (const OpResult& r : results) {
      if (r.target != target || !cuda_target_dtype(r.dtype)) continue;  // f64 rows: shown only
      // Judged at the size the target names: 256 MiB of traffic or more for the large rows and
      // the row lengths (a smaller --large-mib measures them unjudged), the 8192 x 8192
      // for the column reduction (another --large-mib scales that shape).
      if ((target == "large" || target == "rows") && r.bytes < kOpTargetTrafficBytes) continue;
      if (target == "reduce_dim0" && r.shape != std::vector<int64_t>{8192, 8192}) continue;
      const double pct =
          r.failed || info.ceiling.gbps <= 0 ? 0.0 : 100.0 * r.gbps() / info.ceiling.gbps;
      ++total;
      if (pct >= g.percent) ++met;
      note_worst(r, pct, &lowest, &worst);
    }
    std::string narrowing = info.narrowed_ops;
    if (left_out_targets.count(g.target) > 0)
      narrowing += (narrowing.empty() ? "" : ", ") + std::string("--filter/--lengths");
    print_target_line(g.what, met, total, worst, unevaluated_reason(info, narrowing));
  }
  // The seed rows timed back to back: what a stream of such calls sustains (on sm_90 each kernel
  // then overlaps the end of the one before it), without the drain that an event between every
  // two runs forces.
  {
    int met = 0, total = 0;
    double lowest = 1e300;
    std::string worst;
    for (const OpResult& r : results) {
      if (r.target != "seed" || r.back_to_back_us <= 0) continue;
      const double pct = r.failed || info.ceiling.gbps <= 0
                             ? 0.0
                             : 100.0 * r.bytes / (r.back_to_back_us * 1e3) / info.ceiling.gbps;
      ++total;
      if (pct >= 70.0) ++met;
      note_worst(r, pct, &lowest, &worst);
    }
    if (total > 0)
      std::printf(
          "  for reference, not a target: the seed rows timed back to back (%d runs between two "
          "events, median of the batches) >= 70%% of copy: %d/%d rows; lowest %s\n",
          kBackToBackRuns, met, total, worst.c_str());
  }
  // The other rows timed back to back as well (kFewBatches batches): the rows whose calls run
  // furthest apart from a stream of them, where the drain between two timed calls costs most.
  {
    std::vector<const OpResult*> rows;
    for (const OpResult& r : results)
      if (r.target != "seed" && !r.failed && r.us > 0 && r.back_to_back_us > 0) rows.push_back(&r);
    std::sort(rows.begin(), rows.end(), [](const OpResult* a, const OpResult* b) {
      return a->us / a->back_to_back_us > b->us / b->back_to_back_us;
    });
    std::string largest;
    for (size_t i = 0; i < rows.size() && i < 3; ++i) {
      const OpResult& r = *rows[i];
      char text[200];
      std::snprintf(text, sizeof text, "%s%s %s %s %s %.2f us -> %.2f us", i == 0 ? "" : "; ",
                    r.op.c_str(), r.variant.c_str(), dtype_name(r.dtype),
                    shape_text(r.shape, "x").c_str(), r.us, r.back_to_back_us);
      largest += text;
    }
    if (!rows.empty())
      std::printf(
          "  for reference, not a target: the other rows timed back to back too (%d batches of "
          "%d runs; bench.json's back_to_back_us), per call -> back to back, the largest "
          "differences: %s\n",
          kFewBatches, kBackToBackRuns, largest.c_str());
  }
  if (info.seed_copies.empty()) return;
  // The seeds' traffic is small (16-96 MiB): a copy of that size does not reach the large
  // copy's bandwidth either (launch, ramp-up and drain are a larger share of it).
  std::printf(
      "  same-size copies (cudaMemcpyAsync of the seed rows' traffic, same buffer rotation):\n");
  int met = 0, total = 0;
  double lowest = 1e300;
  std::string worst;
  for (const SameSizeCopy& c : info.seed_copies) {
    std::printf("    %6.1f MiB, %2d sets: %8.2f us  %7.1f GB/s  %5.1f%% of the ceiling\n",
                c.traffic_bytes / kMiB, c.sets, c.copy.median_us, c.copy.gbps,
                info.ceiling.gbps > 0 ? 100.0 * c.copy.gbps / info.ceiling.gbps : 0.0);
  }
  for (const OpResult& r : results) {
    if (r.target != "seed") continue;
    for (const SameSizeCopy& c : info.seed_copies) {
      if (!same_size(c, r)) continue;
      const double pct = r.failed || c.copy.gbps <= 0 ? 0.0 : 100.0 * r.gbps() / c.copy.gbps;
      ++total;
      if (pct >= 70.0) ++met;
      note_worst(r, pct, &lowest, &worst);
      break;  // one copy per row
    }
  }
  std::printf(
      "  for reference, not a target: seed rows >= 70%% of their same-size copy: %d/%d rows; "
      "lowest %s\n",
      met, total, worst.c_str());
}

void write_json(const std::string& path, const RunInfo& info,
                const std::vector<CaseResult>& results, const HostCostResult& h,
                const std::vector<OpResult>& op_rows,
                const std::vector<FusionResult>& fusion_rows) {
  const kf_device_properties_t& d = info.device;
  std::ostringstream j;
  j << "{\n  \"tool\": \"kf-bench\",\n  \"date\": " << json_string(info.date)
    << ",\n  \"software\": " << json_string(info.software)
    << ",\n  \"quick\": " << (info.quick ? "true" : "false")
    << ",\n  \"checked\": " << (info.checked ? "true" : "false")
    << ",\n  \"rows_left_out_by\": {\"elementwise\": " << json_or_null(info.narrowed_elementwise)
    << ", \"ops\": " << json_or_null(info.narrowed_ops) << "}"
    << ",\n  \"device\": {\"backend\": " << json_string(is_cuda(info) ? "cuda" : "cpu")
    << ", \"name\": " << json_string(d.name) << ", \"id\": " << d.device_id
    << ", \"compute_capability\": \"" << d.compute_capability_major << "."
    << d.compute_capability_minor << "\", \"multiprocessors\": " << d.multiprocessor_count
    << ", \"l2_bytes\": " << d.l2_cache_bytes << ", \"memory_bytes\": " << d.total_memory_bytes
    << "},\n"
    << "  \"timing\": {\"method\": " << json_string(is_cuda(info) ? "events" : "host clock")
    << ", \"statistic\": \"median\", \"runs\": " << info.iters << ", \"warmup\": " << info.warmup
    << "},\n"
    << "  \"copy_ceiling\": {\"method\": " << json_string(info.ceiling.method)
    << ", \"bytes\": " << info.ceiling.bytes
    << ", \"median_us\": " << json_number(info.ceiling.median_us)
    << ", \"gbps\": " << json_number(info.ceiling.gbps) << "},\n  \"results\": [";
  for (size_t i = 0; i < results.size(); ++i) {
    const CaseResult& r = results[i];
    j << (i == 0 ? "\n" : ",\n") << "    {\"op\": \"" << op_name(r.op) << "\", \"activation\": \""
      << activation_name(r.act) << "\", \"dtype\": \"" << dtype_name(r.dtype) << "\", \"shape\": ["
      << shape_text(r.shape, ", ") << "], \"b_shape\": [" << shape_text(r.b_shape, ", ")
      << "], \"bias\": " << (r.is_bias() ? "true" : "false")
      << ", \"size_class\": " << json_string(r.size_class) << ", \"buffer_sets\": " << r.buffer_sets
      << ", \"bytes\": " << json_number(r.bytes) << ", \"fused_us\": " << json_number(r.fused_us)
      << ", \"gbps\": " << json_number(r.gbps())
      << ", \"percent_of_copy\": " << json_number(percent_of_copy(r, info.ceiling.gbps))
      << ", \"unfused_us\": " << json_number(r.unfused_us) << ", \"back_to_back_us\": "
      << (r.back_to_back_us > 0 ? json_number(r.back_to_back_us) : std::string("null"))
      << ", \"speedup\": " << json_number(r.speedup()) << ", \"check\": " << json_string(r.check)
      << ", \"failed\": " << (r.failed ? "true" : "false") << "}";
  }
  j << "\n  ],\n  \"host_cost\": ";
  if (h.calls <= 0) {
    j << "null";
  } else {
    j << "{\"calls\": " << h.calls << ", \"elements\": " << h.elements
      << ", \"sync_every\": " << h.sync_every << ", \"us_per_call\": " << json_number(h.us_per_call)
      << ", \"us_per_call_mean\": " << json_number(h.us_per_call_mean)
      << ", \"batches\": " << h.batches
      << ", \"us_empty_launch\": " << json_number(h.us_empty_launch)
      << ", \"us_empty_launch_driver\": " << json_number(h.us_empty_launch_driver)
      << ", \"us_empty_launch_dependent\": " << json_number(h.us_empty_launch_dependent)
      << ", \"error\": " << (h.error.empty() ? "null" : json_string(h.error)) << "}";
  }
  j << ",\n  \"op_rows\": [";
  for (size_t i = 0; i < op_rows.size(); ++i) {
    const OpResult& r = op_rows[i];
    j << (i == 0 ? "\n" : ",\n") << "    {\"op\": " << json_string(r.op)
      << ", \"variant\": " << json_string(r.variant) << ", \"dtype\": \"" << dtype_name(r.dtype)
      << "\", \"shape\": [" << shape_text(r.shape, ", ")
      << "], \"target\": " << json_string(r.target) << ", \"buffer_sets\": " << r.buffer_sets
      << ", \"bytes\": " << json_number(r.bytes) << ", \"us\": " << json_number(r.us)
      << ", \"gbps\": " << json_number(r.gbps()) << ", \"percent_of_copy\": "
      << json_number(info.ceiling.gbps > 0 ? 100.0 * r.gbps() / info.ceiling.gbps : 0.0)
      << ", \"back_to_back_us\": "
      << (r.back_to_back_us > 0 ? json_number(r.back_to_back_us) : std::string("null"))
      << ", \"check\": " << json_string(r.check)
      << ", \"failed\": " << (r.failed ? "true" : "false") << "}";
  }
  j << (op_rows.empty() ? "]" : "\n  ]");
  j << ",\n  \"seed_copies\": [";
  for (size_t i = 0; i < info.seed_copies.size(); ++i) {
    const SameSizeCopy& c = info.seed_copies[i];
    j << (i == 0 ? "" : ", ") << "{\"traffic_bytes\": " << json_number(c.traffic_bytes)
      << ", \"buffer_sets\": " << c.sets << ", \"us\": " << json_number(c.copy.median_us)
      << ", \"gbps\": " << json_number(c.copy.gbps) << "}";
  }
  j << "]";
  j << ",\n  \"fusion_rows\": " << fusion_rows_json(fusion_rows, info.ceiling.gbps) << "\n}\n";
  std::ofstream file(path);
  file << j.str();
  if (!file) throw Failure("cannot write " + path);
}

}  // namespace kf_bench
