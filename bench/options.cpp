#include "bench/options.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <sstream>
#include <utility>

namespace kf_bench {
namespace {

constexpr const char* kUsage = R"(usage: kf-bench [options]

Times kf_fused_elementwise_{add,mul}_activation against the same work done unfused (two library
calls: the op without activation into a temporary, then the activation as a multiply by a
one-element tensor holding 1), and compares the fused time with a device-to-device copy measured
in the same run. Uses the first CUDA device when there is one, else the CPU backend.

  --cpu             force the CPU backend
  --cuda            require the CUDA backend; exit 77 (CTest: skipped) when no GPU is present
  --quick           short smoke run: small shapes, every float dtype, few runs
  --iters N         timed runs per case, median reported (default 100 on CUDA, 20 on the CPU)
  --warmup N        untimed runs before them (default 10 on CUDA, 3 on the CPU)
  --ops LIST        comma-separated: add,mul (default both)
  --acts LIST       none,relu,gelu,gelu_tanh,silu,tanh,sigmoid (default relu,gelu,silu)
  --all-acts        every activation
  --dtypes LIST     f32,f16,bf16,f64 (default f32,f16,bf16 on CUDA, f32 on the CPU)
  --sizes LIST      large: [rows, 4096] of --large-mib per tensor; seed: [2048,2048] and
                    [32,512,768] (default large,seed on CUDA, large on the CPU)
  --large-mib N     MiB per tensor of the large shape (default 256 on CUDA; 64, i.e. 16M f32
                    elements, on the CPU)
  --no-bias         skip the bias cases (b = [hidden] broadcast over the rows, add only)
  --host-calls N    calls timed by the host-cost measurement (default 100000 on CUDA, 20000 on
                    the CPU; 0 skips it)
  --no-check        skip the float64 checks of the outputs (fused, unfused, host cost, op and
                    fusion cases); no target is then evaluated
  --suite NAME      elementwise (default): the cases above; ops: every fused op of issue 3
                    (bias+activation, gelu+dropout, layer/rms norm, softmax, log-softmax,
                    batch norm, reductions), each case sized to move at least --large-mib MiB
                    (each input read once, each output written once); fusion: the fusion
                    engine (issue 4): elementwise chains of 1..16 ops, 50 crops in one launch vs
                    crop by crop, 1000 crops resized and normalised in one launch, NVRTC compile
                    and cache times, each against its target; all: every suite
  --filter LIST     ops suite: only the cases of these ops (e.g. softmax,rms_norm); fusion
                    suite: only these sections (compile,chain,crops,resize)
  --lengths LIST    ops suite: the row lengths of the norm and softmax cases (default
                    64,1024,4096,16384,262144), each sized as those are; when given, the
                    log-softmax and the RMS norm with a residual run at each of them too,
                    and the other fixed-shape row cases (the causal form, the seeds) are
                    left out. "sweep" names 29 lengths from 64 to 262144: powers of two, lengths
                    just past a policy's capacity (8200, 10000, 20000) and vocabulary rows
                    (30522, 32000, 50257)
  --json FILE       also write every result as JSON (op cases under "op_rows", fusion rows
                    under "fusion_rows"; "rows_left_out_by" names the options that left a
                    suite's default rows out, null when none did)
  -h, --help        this text

The targets (PERF.md) are over the default rows: where --ops, --acts, --dtypes or --no-bias
leave a default row of the elementwise suite out (--dtypes: of the ops suite too), or --filter
or --lengths one of a target's rows, the target line reads "not evaluated" and names them.
The elementwise targets judge only rows of their size and dtypes: on CUDA f32, f16 and bf16
tensors of >= 256 MiB (and the seed shapes), on the CPU f32 tensors of >= 16M elements; rows of
another size (--large-mib) or dtype (f64) are measured but not judged. So are the ops suite's
rows under 256 MiB of traffic, and its column reduction at any shape but 8192 x 8192.
)";

int usage_error(const std::string& message) {
  std::fprintf(stderr, "kf-bench: %s\n(kf-bench --help lists the options)\n", message.c_str());
  return 2;
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    if (!item.empty()) items.push_back(item);
  }
  return items;
}

bool parse_number(const std::string& text, double min_value, double* out) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !(value >= min_value)) return false;
  *out = value;
  return true;
}

template <typename T>
bool parse_list(const std::string& text, bool (*parse_one)(const std::string&, T*),
                std::vector<T>* out) {
  out->clear();
  for (const std::string& name : split_list(text)) {
    T value;
    if (!parse_one(name, &value)) return false;
    out->push_back(value);
  }
  return !out->empty();
}

// Fills an empty (not given) list with `defaults`; returns whether a given list lacks one of them.
template <typename T>
bool fill_or_compare(const std::vector<T>& defaults, std::vector<T>* list) {
  if (list->empty()) {
    *list = defaults;
    return false;
  }
  return std::any_of(defaults.begin(), defaults.end(), [&](const T& item) {
    return std::find(list->begin(), list->end(), item) == list->end();
  });
}

// "--ops, --no-bias": the names of the options marked true.
std::string narrowed_names(const std::vector<std::pair<const char*, bool>>& options) {
  std::string names;
  for (const auto& option : options) {
    if (option.second) names += (names.empty() ? "" : ", ") + std::string(option.first);
  }
  return names;
}

}  // namespace

int parse_options(int argc, char** argv, Options* options) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](std::string* out) {
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    std::string text;
    double number = 0;
    if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (arg == "--cpu") {
      options->force_cpu = true;
    } else if (arg == "--cuda") {
      options->require_cuda = true;
    } else if (arg == "--quick") {
      options->quick = true;
    } else if (arg == "--no-bias") {
      options->bias_cases = false;
    } else if (arg == "--no-check") {
      options->check = false;
    } else if (arg == "--all-acts") {
      options->acts = all_activations();
    } else if (arg == "--iters" || arg == "--warmup" || arg == "--large-mib" ||
               arg == "--host-calls") {
      const double min_value = arg == "--iters" ? 1 : (arg == "--large-mib" ? 0.001 : 0);
      if (!value(&text) || !parse_number(text, min_value, &number))
        return usage_error(arg + " needs a number");
      if (arg == "--iters") options->iters = static_cast<int>(number);
      if (arg == "--warmup") options->warmup = static_cast<int>(number);
      if (arg == "--large-mib") options->large_mib = number;
      if (arg == "--host-calls") options->host_calls = static_cast<int64_t>(number);
    } else if (arg == "--ops") {
      if (!value(&text) || !parse_list<Op>(text, parse_op, &options->ops))
        return usage_error("--ops takes add,mul");
    } else if (arg == "--acts") {
      if (!value(&text) || !parse_list<kf_activation_t>(text, parse_activation, &options->acts)) {
        return usage_error("--acts takes names from none,relu,gelu,gelu_tanh,silu,tanh,sigmoid");
      }
    } else if (arg == "--dtypes") {
      if (!value(&text) || !parse_list<kf_dtype_t>(text, parse_dtype, &options->dtypes)) {
        return usage_error("--dtypes takes names from f32,f16,bf16,f64");
      }
    } else if (arg == "--sizes") {
      if (!value(&text)) return usage_error("--sizes takes large,seed");
      options->sizes = split_list(text);
      for (const std::string& s : options->sizes) {
        if (s != "large" && s != "seed") return usage_error("--sizes takes large,seed");
      }
      if (options->sizes.empty()) return usage_error("--sizes takes large,seed");
    } else if (arg == "--suite") {
      if (!value(&text) ||
          (text != "elementwise" && text != "ops" && text != "fusion" && text != "all"))
        return usage_error("--suite takes elementwise, ops, fusion or all");
      options->suite = text;
    } else if (arg == "--filter") {
      static const char* const kOpNames[] = {
          "bias_activation", "gelu_dropout", "softmax", "log_softmax", "layer_norm", "rms_norm",
          "batch_norm",      "reduce",       "compile", "chain",       "crops",      "resize"};
      const std::string names =
          "bias_activation,gelu_dropout,softmax,log_softmax,layer_norm,rms_norm,batch_norm,reduce "
          "(ops suite), compile,chain,crops,resize (fusion suite)";
      if (!value(&text) || text.empty()) return usage_error("--filter takes names from " + names);
      options->filter = split_list(text);
      for (const std::string& name : options->filter) {
        if (std::find(std::begin(kOpNames), std::end(kOpNames), name) == std::end(kOpNames))
          return usage_error("--filter: unknown name " + name + " (names: " + names + ")");
      }
    } else if (arg == "--lengths") {
      options->lengths.clear();
      bool ok = value(&text);
      if (ok && text == "sweep") {
        options->lengths.assign(std::begin(kSweepLengths), std::end(kSweepLengths));
      } else if (ok) {
        for (const std::string& item : split_list(text)) {
          double length = 0;
          // (A bound first: converting a double past int64_t's range is undefined.)
          if (!parse_number(item, 1, &length) || length > 1e12 ||
              length != static_cast<double>(static_cast<int64_t>(length))) {
            ok = false;
            break;
          }
          options->lengths.push_back(static_cast<int64_t>(length));
        }
      }
      if (!ok || options->lengths.empty())
        return usage_error(
            "--lengths takes positive whole row lengths, e.g. 4096,262144, or \"sweep\"");
    } else if (arg == "--json") {
      if (!value(&text)) return usage_error("--json needs a file name");
      options->json_path = text;
    } else {
      return usage_error("unknown option " + arg);
    }
  }
  if (options->force_cpu && options->require_cuda)
    return usage_error("--cpu and --cuda exclude each other");
  return kGoOn;
}

void resolve_defaults(kf_device_type_t device, Options* options) {
  const bool cuda = device == KF_DEVICE_CUDA;
  if (options->iters < 0) options->iters = options->quick ? 3 : (cuda ? 100 : 20);
  if (options->warmup < 0) options->warmup = options->quick ? 1 : (cuda ? 10 : 3);
  if (options->large_mib < 0) options->large_mib = options->quick ? 0.25 : (cuda ? 256 : 64);
  if (options->host_calls < 0)
    options->host_calls = options->quick ? 1000 : (cuda ? 100000 : 20000);
  const bool cuda_or_quick = cuda || options->quick;
  const bool ops_narrowed = fill_or_compare({Op::kAdd, Op::kMul}, &options->ops);
  const bool acts_narrowed =
      fill_or_compare({KF_ACTIVATION_RELU, KF_ACTIVATION_GELU, KF_ACTIVATION_SILU}, &options->acts);
  const bool dtypes_narrowed = fill_or_compare(
      cuda_or_quick ? std::vector<kf_dtype_t>{KF_DTYPE_FLOAT32, KF_DTYPE_FLOAT16, KF_DTYPE_BFLOAT16}
                    : std::vector<kf_dtype_t>{KF_DTYPE_FLOAT32},
      &options->dtypes);
  if (options->sizes.empty()) {
    if (cuda_or_quick) {
      options->sizes = {"large", "seed"};
    } else {
      options->sizes = {"large"};
    }
  }
  options->narrowed_elementwise = narrowed_names({{"--ops", ops_narrowed},
                                                  {"--acts", acts_narrowed},
                                                  {"--dtypes", dtypes_narrowed},
                                                  {"--no-bias", !options->bias_cases}});
  options->narrowed_ops = narrowed_names({{"--dtypes", dtypes_narrowed}});
}

}  // namespace kf_bench
