// kf-bench: times the fused elementwise ops against the same work done unfused, on CUDA when a
// GPU is present (else on the CPU backend), next to a copy ceiling measured in the same run.
// `kf-bench --help` lists the options; README.md shows how to run it.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <thread>

#include <unistd.h>

#include "bench/cases.hpp"
#include "bench/fusion_cases.hpp"
#include "bench/op_cases.hpp"
#include "bench/options.hpp"
#include "bench/report.hpp"
#include "bench/timing.hpp"

namespace kf_bench {
namespace {

constexpr int kExitSkipped = 77;  // CTest's SKIP_RETURN_CODE for --cuda without a GPU
constexpr double kMiB = 1024.0 * 1024.0;

// The backend to run on, or -1 (with a message) when --cuda finds no GPU.
int choose_device(const Options& options, std::string* note) {
  if (options.force_cpu) return KF_DEVICE_CPU;
  int32_t cuda_devices = 0;
  if (kf_get_device_count(KF_DEVICE_CUDA, &cuda_devices) != KF_SUCCESS) cuda_devices = 0;
  if (cuda_devices > 0) return KF_DEVICE_CUDA;
  if (options.require_cuda) return -1;
  *note = "no usable CUDA device (or a CPU-only build): running the CPU backend";
  return KF_DEVICE_CPU;
}

// The cache the benchmark data must outgrow: L2 on CUDA; on the CPU the last level, which the
// library does not report (glibc's figure). 64 MiB where neither is known.
uint64_t cache_to_outgrow(const kf_device_properties_t& device) {
  uint64_t last_level = static_cast<uint64_t>(64 * kMiB);
  if (device.device_type == KF_DEVICE_CUDA) {
    return device.l2_cache_bytes > 0 ? device.l2_cache_bytes : last_level;
  }
#if defined(_SC_LEVEL3_CACHE_SIZE)
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (l3 > 0) last_level = static_cast<uint64_t>(l3);
#endif
  return std::max(last_level, device.l2_cache_bytes);
}

std::string software_string() {
  const uint32_t v = kf_get_version();
  std::string text = "libkernel_fusion " + std::to_string(v / 10000) + "." +
                     std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
  const std::string cuda = cuda_version_string();
  return cuda.empty() ? text + " (CPU-only kf-bench build)" : text + "; " + cuda;
}

int run(int argc, char** argv) {
  Options options;
  const int parsed = parse_options(argc, argv, &options);
  if (parsed != kGoOn) return parsed;

  RunInfo info;
  const int device = choose_device(options, &info.note);
  if (device < 0) {
    std::printf("kf-bench: --cuda given and no usable CUDA device: skipped\n");
    return kExitSkipped;
  }
  const auto device_type = static_cast<kf_device_type_t>(device);
  resolve_defaults(device_type, &options);
  // The fusion rows compile into a kernel cache of their own (KF_CACHE_DIR), set before the
  // library's first compile.
  std::unique_ptr<FusionCacheDir> fusion_cache;
  if (options.fusion_suite()) fusion_cache = std::make_unique<FusionCacheDir>();

  Context ctx;
  kf_context_config_t config = KF_CONTEXT_CONFIG_INIT;
  config.device_type = device_type;
  check(kf_context_create(&config, ctx.out()), "kf_context_create");
  Stream stream;
  check(kf_stream_create(ctx.get(), nullptr, stream.out()), "kf_stream_create");

  info.date = utc_now();
  info.software = software_string();
  info.iters = options.iters;
  info.warmup = options.warmup;
  info.quick = options.quick;
  info.checked = options.check;
  info.narrowed_elementwise = options.narrowed_elementwise;
  info.narrowed_ops = options.narrowed_ops;
  info.device.struct_size = sizeof info.device;
  check(kf_get_device_properties(device_type, 0, &info.device), "kf_get_device_properties");

  // The ceiling: a copy at least as large as the large tensors and at least 4x the last-level
  // cache (L2 on CUDA; on the CPU L3, which a copy sized by L2 could sit in). --quick measures
  // nothing and keeps to L2, so that a smoke run does not copy gigabytes on a large CPU.
  const uint64_t cache_bytes = cache_to_outgrow(info.device);
  const size_t large_bytes = static_cast<size_t>(options.large_mib * kMiB);
  const size_t ceiling_bytes =
      std::max<size_t>(large_bytes, 4 * (options.quick ? info.device.l2_cache_bytes : cache_bytes));
  if (device_type == KF_DEVICE_CUDA) {
    info.ceiling =
        measure_device_copy(0, ceiling_bytes, options.warmup, std::max(options.iters, 20));
  } else {
    const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    info.ceiling =
        measure_host_copy(ceiling_bytes, threads, options.warmup, std::max(options.iters, 5));
  }
  print_header(info);

  CaseRunner runner(options, ctx.get(), stream.get(), device_type, cache_bytes);
  std::vector<CaseResult> results;
  HostCostResult host_cost;
  if (options.elementwise_suite()) {
    print_table_header();
    results = runner.run_all([&](const CaseResult& r) { print_row(r, info.ceiling.gbps); });
    if (options.host_calls > 0) host_cost = runner.run_host_cost();
    print_host_cost(host_cost);
    print_targets(info, results, host_cost);
  }
  std::vector<OpResult> op_rows;
  if (options.ops_suite()) {
    OpCaseRunner op_runner(options, ctx.get(), stream.get(), device_type, cache_bytes);
    print_op_table_header();
    op_rows = op_runner.run_all([&](const OpResult& r) { print_op_row(r, info.ceiling.gbps); });
    if (device_type == KF_DEVICE_CUDA && !options.quick) {
      for (const OpResult& r : op_rows) {
        if (r.target != "seed") continue;
        const auto same = [&](const SameSizeCopy& c) { return same_size(c, r); };
        if (std::any_of(info.seed_copies.begin(), info.seed_copies.end(), same)) continue;
        SameSizeCopy c;
        c.traffic_bytes = r.bytes;
        c.sets = r.buffer_sets;
        const size_t half = static_cast<size_t>(r.bytes / 2) / 16 * 16;
        c.copy = measure_device_copy(0, half, options.warmup, std::max(options.iters, 20), c.sets);
        info.seed_copies.push_back(c);
      }
    }
    print_op_targets(info, op_rows, op_runner.left_out_targets());
  }
  std::vector<FusionResult> fusion_rows;
  if (options.fusion_suite()) {
    FusionCaseRunner fusion_runner(options, ctx.get(), stream.get(), device_type,
                                   cache_to_outgrow(info.device), info.ceiling.gbps,
                                   fusion_cache.get());
    print_fusion_header(device_type, *fusion_cache, options.check);
    fusion_rows = fusion_runner.run_all(
        [&](const FusionResult& r) { print_fusion_row(r, info.ceiling.gbps); });
    print_fusion_targets(options, fusion_runner.left_out_sections(), fusion_rows);
  }

  if (!options.json_path.empty()) {
    write_json(options.json_path, info, results, host_cost, op_rows, fusion_rows);
    std::printf("\nwrote %s\n", options.json_path.c_str());
  }
  const long failures =
      std::count_if(results.begin(), results.end(), [](const CaseResult& r) { return r.failed; }) +
      std::count_if(op_rows.begin(), op_rows.end(), [](const OpResult& r) { return r.failed; }) +
      std::count_if(fusion_rows.begin(), fusion_rows.end(),
                    [](const FusionResult& r) { return r.failed; });
  if (failures > 0 || !host_cost.error.empty()) {
    std::printf("\nkf-bench: %ld case(s) failed%s\n", failures,
                host_cost.error.empty() ? "" : ", host cost failed");
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace kf_bench

int main(int argc, char** argv) {
  try {
    return kf_bench::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kf-bench: error: %s\n", e.what());
    return 1;
  }
}
