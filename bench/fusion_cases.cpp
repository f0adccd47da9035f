// The fusion section's runner, the elementwise-chain rows and the compile rows; the image rows
// are in fusion_image_cases.cpp, the printing in fusion_report.cpp.
#include "bench/fusion_cases.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <utility>

#include "bench/data.hpp"
#include "bench/fusion_check.hpp"
#include "bench/fusion_graph.hpp"
#include "bench/tensors.hpp"

namespace kf_bench {
namespace {

constexpr size_t kSamples = 4096;  // outputs compared with the float64 reference per check

// One step of the elementwise chain: a binary op with a scalar, a unary op or an activation.
struct ChainStep {
  enum Kind { kBinary, kUnary, kActivation } kind;
  int op;
  double scalar;  // kBinary only; exactly representable in bf16, so no dtype rounds it
};

// The chain of N ops is the first N steps. Values stay within about +-3 on inputs in +-[0.25, 2).
constexpr ChainStep kChain[] = {
    {ChainStep::kBinary, KF_BINARY_MUL, 1.5},   {ChainStep::kBinary, KF_BINARY_ADD, 0.25},
    {ChainStep::kBinary, KF_BINARY_MAX, -1.0},  {ChainStep::kBinary, KF_BINARY_SUB, 0.5},
    {ChainStep::kBinary, KF_BINARY_MIN, 2.5},   {ChainStep::kUnary, KF_UNARY_NEG, 0},
    {ChainStep::kBinary, KF_BINARY_MUL, 0.75},  {ChainStep::kBinary, KF_BINARY_ADD, 0.375},
    {ChainStep::kUnary, KF_UNARY_ABS, 0},       {ChainStep::kBinary, KF_BINARY_ADD, 1.0},
    {ChainStep::kUnary, KF_UNARY_RSQRT, 0},     {ChainStep::kBinary, KF_BINARY_MUL, 2.0},
    {ChainStep::kBinary, KF_BINARY_SUB, 0.5},   {ChainStep::kActivation, KF_ACTIVATION_RELU, 0},
    {ChainStep::kBinary, KF_BINARY_DIV, 0.625}, {ChainStep::kBinary, KF_BINARY_MAX, 0.125}};
constexpr int kChainLengths[] = {1, 4, 11, 16};

double apply_step(const ChainStep& s, double x) {
  switch (s.kind) {
    case ChainStep::kUnary:
      switch (s.op) {
        case KF_UNARY_NEG: return -x;
        case KF_UNARY_ABS: return std::fabs(x);
        default: return 1.0 / std::sqrt(x);  // KF_UNARY_RSQRT
      }
    case ChainStep::kActivation: return reference_activation(static_cast<kf_activation_t>(s.op), x);
    case ChainStep::kBinary: break;
  }
  switch (s.op) {
    case KF_BINARY_MUL: return x * s.scalar;
    case KF_BINARY_ADD: return x + s.scalar;
    case KF_BINARY_SUB: return x - s.scalar;
    case KF_BINARY_DIV: return x / s.scalar;
    case KF_BINARY_MIN: return std::min(x, s.scalar);
    default: return std::max(x, s.scalar);  // KF_BINARY_MAX
  }
}

int32_t add_step(Graph& g, const ChainStep& s, int32_t x) {
  switch (s.kind) {
    case ChainStep::kUnary: return g.unary(static_cast<kf_unary_op_t>(s.op), x);
    case ChainStep::kActivation: return g.activation(static_cast<kf_activation_t>(s.op), x);
    case ChainStep::kBinary: break;
  }
  return g.binary(static_cast<kf_binary_op_t>(s.op), x, g.scalar(s.scalar));
}

// Compares about kSamples elements of `out` (the last one included) with the chain's first
// `n_ops` steps applied to `x` in float64.
std::string check_chain(const std::vector<unsigned char>& x, const kf_tensor_t* out,
                        kf_dtype_t dtype, size_t count, int n_ops, double tol,
                        kf_stream_t* stream) {
  const std::vector<unsigned char> got = download(out, count * kf_dtype_size(dtype), stream);
  auto problem_at = [&](size_t i) {
    double want = element_at(x, dtype, i);
    for (int k = 0; k < n_ops; ++k) want = apply_step(kChain[k], want);
    return mismatch("out", i, element_at(got, dtype, i), want, tol);
  };
  const size_t step = sample_step(count, kSamples);
  for (size_t i = 0; i < count; i += step) {
    const std::string problem = problem_at(i);
    if (!problem.empty()) return problem;
  }
  const std::string last = problem_at(count - 1);
  if (!last.empty()) return last;
  return "ok";
}

std::string dims_text(const std::vector<int64_t>& shape) {
  std::string text;
  for (size_t i = 0; i < shape.size(); ++i) text += (i > 0 ? "x" : "") + std::to_string(shape[i]);
  return text;
}

// The 10-op graph of the compile rows: x [rows, cols] f32 and y [cols] f32 (broadcast) ->
// mul, add y, GELU, sub, clamp, mul y, exp, > 1, where, cast to bf16. Returns the output node.
int32_t build_ten_op_graph(Graph& g) {
  const int32_t x = g.tensor_input(KF_DTYPE_FLOAT32, 2);
  const int32_t y = g.tensor_input(KF_DTYPE_FLOAT32, 1);
  int32_t v = g.binary(KF_BINARY_MUL, x, g.scalar(0.5));           // 1
  v = g.binary(KF_BINARY_ADD, v, y);                               // 2
  v = g.activation(KF_ACTIVATION_GELU, v);                         // 3
  v = g.binary(KF_BINARY_SUB, v, g.scalar(0.25));                  // 4
  const int32_t c = g.clamp(v, g.scalar(-1.0), g.scalar(1.5));     // 5
  const int32_t m = g.binary(KF_BINARY_MUL, c, y);                 // 6
  const int32_t e = g.unary(KF_UNARY_EXP, m);                      // 7
  const int32_t gt = g.binary(KF_BINARY_GT, e, g.scalar(1.0));     // 8
  const int32_t w = g.where(gt, e, m);                             // 9
  const int32_t out = g.cast(w, KF_DTYPE_BFLOAT16, KF_CAST_WRAP);  // 10
  g.output(out);
  return out;
}

double ten_op_reference(double x, double y) {
  double v = reference_activation(KF_ACTIVATION_GELU, x * 0.5 + y) - 0.25;
  v = std::min(std::max(v, -1.0), 1.5) * y;
  const double e = std::exp(v);
  return e > 1.0 ? e : v;
}

}  // namespace

// ---- the kernel cache directory --------------------------------------------------------------

FusionCacheDir::FusionCacheDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern =
      std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/kf-bench-cache-XXXXXX";
  std::vector<char> name(pattern.begin(), pattern.end());
  name.push_back('\0');
  if (mkdtemp(name.data()) == nullptr) throw Failure("cannot create a directory " + pattern);
  path_ = name.data();
  setenv("KF_CACHE_DIR", path_.c_str(), 1);
}

FusionCacheDir::~FusionCacheDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

void FusionCacheDir::clear() const {
  std::error_code ignored;
  for (const auto& entry : std::filesystem::directory_iterator(path_, ignored))
    std::filesystem::remove_all(entry.path(), ignored);
}

int FusionCacheDir::file_count() const {
  int files = 0;
  std::error_code ignored;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(path_, ignored))
    files += entry.is_regular_file() ? 1 : 0;
  return files;
}

// ---- the runner ------------------------------------------------------------------------------

FusionCaseRunner::FusionCaseRunner(const Options& options, kf_context_t* ctx, kf_stream_t* stream,
                                   kf_device_type_t device, uint64_t cache_bytes,
                                   double ceiling_gbps, const FusionCacheDir* cache_dir)
    : options_(options),
      ctx_(ctx),
      stream_(stream),
      device_(device),
      cache_bytes_(cache_bytes),
      ceiling_gbps_(ceiling_gbps),
      cache_dir_(cache_dir),
      timer_(ctx, stream, device, options.iters) {}

std::vector<FusionResult> FusionCaseRunner::run_all(const Emit& on_result) {
  results_.clear();
  left_out_sections_.clear();
  auto emit = [&](const FusionResult& r) {
    on_result(r);
    results_.push_back(r);
  };
  // Compile rows first: the first cold compile of the process is then the first NVRTC call.
  const std::vector<std::pair<const char*, std::function<void()>>> sections = {
      {"compile", [&] { run_compile(emit); }},
      {"chain", [&] { run_chains(emit); }},
      {"crops", [&] { run_crops(emit); }},
      {"resize", [&] { run_resize_batch(emit); }}};
  for (const auto& section : sections) {
    if (!options_.filter.empty() && std::find(options_.filter.begin(), options_.filter.end(),
                                              section.first) == options_.filter.end()) {
      left_out_sections_.push_back(section.first);
      continue;
    }
    try {
      section.second();
    } catch (const std::runtime_error& e) {
      FusionResult r;
      r.name = section.first;
      r.variant = "setup";
      r.failed = true;
      r.verdict = "MISS";
      r.check = std::string("error: ") + e.what();
      kf_stream_synchronize(stream_);  // drain what was enqueued; its own error adds nothing
      emit(r);
    }
  }
  return results_;
}

void FusionCaseRunner::judge(FusionResult* r, const std::string& target,
                             const std::string& measured, bool met) const {
  r->target = target;
  r->measured = measured;
  if (r->failed) {
    r->verdict = "MISS";
  } else if (options_.quick || !options_.check) {
    r->verdict = "not evaluated";  // too small to mean anything, or the output was not checked
  } else {
    r->verdict = met ? "PASS" : "MISS";
  }
}

void FusionCaseRunner::time_hidden_launch(int runs, const std::function<void(int)>& body,
                                          double* device_us, double* host_us) {
  *device_us = 0;
  *host_us = 0;
  if (!cuda()) return;
  // The cover: adds of two f32 tensors (the library's fixed op), enough of them per run that
  // the device is still busy with them when the host has finished enqueuing body.
  const int64_t cover_elements = options_.quick ? (1 << 20) : (32 << 20);
  if (cover_.empty()) {
    for (int i = 0; i < 3; ++i)
      cover_.push_back(make_tensor(ctx_, KF_DTYPE_FLOAT32, {cover_elements}));
    const auto zeros = filled_elements(KF_DTYPE_FLOAT32, static_cast<size_t>(cover_elements), 0.0);
    upload(cover_[0].get(), zeros, stream_);
    upload(cover_[1].get(), zeros, stream_);
  }
  auto cover = [&] {
    check(kf_fused_elementwise_add_activation(ctx_, cover_[0].get(), cover_[1].get(),
                                              cover_[2].get(), KF_ACTIVATION_NONE, stream_),
          "cover add");
  };
  const size_t needed = 2 * static_cast<size_t>(runs);
  while (events_.size() < needed) {
    events_.emplace_back();
    check(kf_event_create(ctx_, events_.back().out()), "kf_event_create");
  }
  auto elapsed_us = [&](size_t a, size_t b) {
    float ms = 0;
    check(kf_event_elapsed_ms(events_[a].get(), events_[b].get(), &ms), "kf_event_elapsed_ms");
    return 1000.0 * ms;
  };
  // How long one cover takes, and how many make about a millisecond.
  cover();
  check(kf_event_record(events_[0].get(), stream_), "kf_event_record");
  cover();
  check(kf_event_record(events_[1].get(), stream_), "kf_event_record");
  check(kf_event_synchronize(events_[1].get()), "kf_event_synchronize");
  const double cover_us = std::max(1.0, elapsed_us(0, 1));
  const int covers = std::clamp(static_cast<int>(std::ceil(1000.0 / cover_us)), 1, 64);

  std::vector<double> device(static_cast<size_t>(runs)), host(static_cast<size_t>(runs));
  constexpr int kDrainEvery = 16;  // keeps the launch queue short, so no enqueue ever blocks
  for (int first = 0; first < runs; first += kDrainEvery) {
    const int last = std::min(runs, first + kDrainEvery);
    for (int i = first; i < last; ++i) {
      for (int c = 0; c < covers; ++c) cover();
      const size_t e = 2 * static_cast<size_t>(i);
      check(kf_event_record(events_[e].get(), stream_), "kf_event_record");
      const double start = now_us();
      body(i);
      host[static_cast<size_t>(i)] = now_us() - start;
      check(kf_event_record(events_[e + 1].get(), stream_), "kf_event_record");
    }
    check(kf_stream_synchronize(stream_), "kf_stream_synchronize");
    for (int i = first; i < last; ++i) {
      const size_t e = 2 * static_cast<size_t>(i);
      device[static_cast<size_t>(i)] = elapsed_us(e, e + 1);
    }
  }
  *host_us = median(host);
  // A host slower than the cover would let the device idle inside the bracket.
  if (*host_us < 0.8 * cover_us * covers) *device_us = median(device);
}

void FusionCaseRunner::time_pair(int warmup, const std::function<void(int)>& fused,
                                 const std::function<void(int)>& unfused, double* fused_us,
                                 double* unfused_us) {
  const int rounds = options_.iters >= 8 ? 4 : 1;
  const int runs = (options_.iters + rounds - 1) / rounds;
  std::vector<double> a, b;
  for (int round = 0; round < rounds; ++round) {
    // The first round's warm-up touches every buffer set; later ones only refill the queue.
    const int round_warmup = round == 0 ? warmup : std::min(warmup, 2);
    for (double us : timer_.time_runs(round_warmup, runs, fused)) a.push_back(us);
    for (double us : timer_.time_runs(round_warmup, runs, unfused)) b.push_back(us);
  }
  *fused_us = median(a);
  *unfused_us = median(b);
}

// ---- elementwise chains ----------------------------------------------------------------------

void FusionCaseRunner::run_chains(const Emit& emit) {
  std::vector<int64_t> shape = {8192, 8192};  // issue 4's shape
  if (options_.quick) {
    shape = {129, 257};  // odd extents catch tail handling
  } else if (!cuda()) {
    shape = {4096, 4096};  // PERF.md's CPU size: 16M elements
  }
  std::vector<kf_dtype_t> dtypes = {KF_DTYPE_FLOAT32, KF_DTYPE_BFLOAT16};
  if (!cuda() && !options_.quick) dtypes = {KF_DTYPE_FLOAT32};
  const size_t count = static_cast<size_t>(element_count(shape));

  for (kf_dtype_t dtype : dtypes) {
    const double es = static_cast<double>(kf_dtype_size(dtype));
    const double traffic = 2.0 * es * static_cast<double>(count);
    const int sets = rotation_sets(traffic, traffic, cache_bytes_, options_.quick);
    const std::vector<unsigned char> x = random_elements(dtype, count, 4000 + dtype);
    std::vector<Tensor> in, out;
    for (int s = 0; s < sets; ++s) {
      in.push_back(make_tensor(ctx_, dtype, shape));
      out.push_back(make_tensor(ctx_, dtype, shape));
      upload(in.back().get(), x, stream_);
    }
    // Op by op: one kernel per step (generated by the engine too), through two temporaries.
    Tensor tmp[2] = {make_tensor(ctx_, dtype, shape), make_tensor(ctx_, dtype, shape)};
    std::vector<FusedKernel> single;
    for (const ChainStep& step : kChain) {
      Graph g = new_graph(ctx_);
      g.output(add_step(g, step, g.tensor_input(dtype, 2)));
      single.push_back(g.compile());
    }

    double time_n1 = 0;
    bool chain_failed = false;
    for (int n_ops : kChainLengths) {
      FusionResult r;
      r.name = "chain";
      r.variant = std::string(dtype_name(dtype)) + " N=" + std::to_string(n_ops);
      r.shape = dims_text(shape);
      r.bytes = traffic;
      if (sets > 1 && !options_.quick) r.note = std::to_string(sets) + " buffer sets rotated";
      try {
        Graph g = new_graph(ctx_);
        int32_t v = g.tensor_input(dtype, 2);
        for (int k = 0; k < n_ops; ++k) v = add_step(g, kChain[k], v);
        g.output(v);
        const FusedKernel fused = g.compile();
        auto run_fused = [&](int run) {
          const size_t s = static_cast<size_t>(run % sets);
          launch(fused.get(), 1, {in[s].get()}, {out[s].get()}, nullptr, stream_);
        };
        auto run_unfused = [&](int run) {
          const size_t s = static_cast<size_t>(run % sets);
          const kf_tensor_t* src = in[s].get();
          for (int k = 0; k < n_ops; ++k) {
            kf_tensor_t* dst = k == n_ops - 1 ? out[s].get() : tmp[k % 2].get();
            launch(single[static_cast<size_t>(k)].get(), 1, {src}, {dst}, nullptr, stream_);
            src = dst;
          }
        };
        const double tol = tolerance(dtype);
        if (options_.check) {  // before any timing, on poisoned outputs
          poison(out[0].get(), stream_);
          run_fused(0);
          r.check = check_chain(x, out[0].get(), dtype, count, n_ops, tol, stream_);
          if (r.check == "ok") {
            // Op by op rounds every intermediate to the dtype: the error grows with N.
            poison(out[0].get(), stream_);
            run_unfused(0);
            const std::string unfused =
                check_chain(x, out[0].get(), dtype, count, n_ops, tol * n_ops, stream_);
            if (unfused != "ok") r.check = "op by op: " + unfused;
          }
          r.failed = r.check != "ok";
        }
        const int warmup = std::max(options_.warmup, sets);
        time_pair(warmup, run_fused, run_unfused, &r.us, &r.baseline_us);
      } catch (const std::runtime_error& e) {
        r.failed = true;
        r.check = std::string("error: ") + e.what();
        kf_stream_synchronize(stream_);
      }
      if (n_ops == 1) time_n1 = r.us;
      if (time_n1 > 0 && r.us > 0) r.ratio = r.us / time_n1;
      if (cuda()) {
        const double pct = ceiling_gbps_ > 0 ? 100.0 * r.gbps() / ceiling_gbps_ : 0.0;
        judge(&r, ">= 90% of copy", format("%.1f%% of copy", pct), pct >= 90.0);
      } else if (n_ops > 1) {
        judge(&r, "CPU: >= 1.5x op by op", format("%.2fx", r.speedup()), r.speedup() >= 1.5);
      }
      chain_failed = chain_failed || r.failed;
      emit(r);
    }
    // Flat in N: the longest chain costs no more than the shortest (within 10%); a ratio of
    // rows of which one failed (N = 1 included) means nothing.
    const FusionResult& longest = results_.back();
    FusionResult flat;
    flat.name = "chain";
    flat.variant = std::string(dtype_name(dtype)) + " flat in N";
    flat.shape = dims_text(shape);
    flat.ratio = longest.ratio;
    flat.failed = chain_failed || longest.ratio <= 0;
    flat.check = flat.failed ? "a chain row failed" : "-";
    flat.note = format("time(N=16) / time(N=1) = %.3f", flat.ratio);
    if (cuda())
      judge(&flat, "time(N=16)/time(N=1) <= 1.10", format("%.3f", flat.ratio), flat.ratio <= 1.10);
    emit(flat);
  }
}

// ---- compile and cache -----------------------------------------------------------------------

void FusionCaseRunner::run_compile(const Emit& emit) {
  const bool quick = options_.quick;
  const int cold_runs = quick ? 1 : 10;
  const int disk_runs = quick ? 2 : 20;
  const int64_t hit_runs = quick ? 200 : 20000;
  constexpr int kDrainEvery = 200;
  const std::string shape = "10 ops, 16x16 f32 -> bf16";

  Graph g = new_graph(ctx_);
  build_ten_op_graph(g);
  const std::vector<int64_t> x_shape = {16, 16}, y_shape = {16};
  const std::vector<unsigned char> x = random_elements(KF_DTYPE_FLOAT32, 256, 71);
  const std::vector<unsigned char> y = random_elements(KF_DTYPE_FLOAT32, 16, 72);
  Tensor xt = make_tensor(ctx_, KF_DTYPE_FLOAT32, x_shape);
  Tensor yt = make_tensor(ctx_, KF_DTYPE_FLOAT32, y_shape);
  Tensor out = make_tensor(ctx_, KF_DTYPE_BFLOAT16, x_shape);
  upload(xt.get(), x, stream_);
  upload(yt.get(), y, stream_);
  const std::vector<const kf_tensor_t*> inputs = {xt.get(), yt.get()};
  const std::vector<kf_tensor_t*> outputs = {out.get()};

  // Host milliseconds of one kf_graph_compile with `flags`; the kernel's origin in *origin.
  // The kernel of one kf_graph_compile with `flags`, and the host milliseconds it took.
  auto timed_compile = [&](uint32_t flags, double* ms) {
    kf_compile_options_t options = KF_COMPILE_OPTIONS_INIT;
    options.flags = flags;
    kf_fused_kernel_t* raw = nullptr;
    const double start = now_us();
    check(kf_graph_compile(g.get(), &options, &raw), "kf_graph_compile");
    *ms = (now_us() - start) * 1e-3;
    return FusedKernel(raw);
  };
  // Runs `runs` compiles; the row fails when one of them came from elsewhere than `expected`.
  auto time_compiles = [&](FusionResult* r, int runs, uint32_t flags, kf_kernel_origin_t expected,
                           bool clear_first) {
    std::vector<double> ms(static_cast<size_t>(runs));
    for (size_t i = 0; i < ms.size(); ++i) {
      if (clear_first) cache_dir_->clear();
      const kf_kernel_origin_t origin = kernel_origin(timed_compile(flags, &ms[i]).get());
      if (origin != expected && !r->failed) {
        r->failed = true;
        r->check = std::string("kernel came from the ") + origin_name(origin) + ", not the " +
                   origin_name(expected);
      }
    }
    r->us = 1e3 * median(ms);
  };

  // The process's first compile of this graph (on CUDA its first NVRTC call, start-up
  // included: these rows run first); its result is checked on a poisoned output.
  double first_ms = 0;
  cache_dir_->clear();
  const FusedKernel first = timed_compile(KF_COMPILE_NO_MEMORY_CACHE, &first_ms);
  std::string checked = "skipped";
  if (options_.check) {
    const FusedKernel& kernel = first;
    poison(out.get(), stream_);
    launch(kernel.get(), 1, inputs, outputs, nullptr, stream_);
    const std::vector<unsigned char> got = download(out.get(), 256 * 2, stream_);
    checked = "ok";
    for (size_t i = 0; i < 256 && checked == "ok"; ++i) {
      const double want = ten_op_reference(element_at(x, KF_DTYPE_FLOAT32, i),
                                           element_at(y, KF_DTYPE_FLOAT32, i % 16));
      const std::string problem = mismatch("out", i, element_at(got, KF_DTYPE_BFLOAT16, i), want,
                                           tolerance(KF_DTYPE_BFLOAT16));
      if (!problem.empty()) checked = problem;
    }
  }

  // A row of this section, failed from the start when the kernel's result was wrong.
  auto compile_row = [&](const char* variant) {
    FusionResult r;
    r.name = "compile";
    r.variant = variant;
    r.shape = shape;
    r.check = checked;
    r.failed = checked != "ok" && checked != "skipped";
    return r;
  };
  FusionResult cold = compile_row(cuda() ? "cold: NVRTC, empty disk" : "CPU executor build");
  if (cuda()) {
    time_compiles(&cold, cold_runs, KF_COMPILE_NO_MEMORY_CACHE, KF_KERNEL_COMPILED, true);
    cold.note = format("median of %.0f; the process's first NVRTC compile took %.1f ms", cold_runs,
                       first_ms);
    judge(&cold, "<= 300 ms", format("%.1f ms", cold.us * 1e-3), cold.us <= 300e3);
  } else {
    time_compiles(&cold, cold_runs, KF_COMPILE_NO_MEMORY_CACHE, KF_KERNEL_COMPILED, false);
    cold.note = "CPU contexts generate no code; no target";
  }
  emit(cold);

  if (cuda()) {
    FusionResult disk = compile_row("disk-cache hit");
    const int files = cache_dir_->file_count();
    if (files == 0 && !disk.failed) {
      disk.failed = true;
      disk.check = "the cold compile wrote nothing to " + cache_dir_->path() +
                   (std::getenv("KF_CACHE_DISABLE") != nullptr ? " (KF_CACHE_DISABLE is set)" : "");
    }
    if (!disk.failed)
      time_compiles(&disk, disk_runs, KF_COMPILE_NO_MEMORY_CACHE, KF_KERNEL_DISK_CACHE, false);
    disk.note = format("median of %.0f, memory cache bypassed; %.0f file(s) in the cache",
                       disk_runs, files);
    judge(&disk, "<= 5 ms", format("%.2f ms", disk.us * 1e-3), disk.us > 0 && disk.us <= 5e3);
    emit(disk);
  }

  // In-memory hit + launch: host clock around kf_graph_compile and kf_fused_kernel_launch.
  FusionResult hit = compile_row("memory hit + launch");
  try {
    kf_compile_options_t options = KF_COMPILE_OPTIONS_INIT;
    kf_launch_args_t args = KF_LAUNCH_ARGS_INIT;
    args.inputs = inputs.data();
    args.outputs = outputs.data();
    for (int i = 0; i < 3; ++i) g.compile();  // the first may come from disk; later ones must not
    std::vector<double> host, destroy;
    host.reserve(static_cast<size_t>(hit_runs));
    for (int64_t i = 0; i < hit_runs; ++i) {
      kf_fused_kernel_t* kernel = nullptr;
      const double start = now_us();
      const kf_result_t compiled = kf_graph_compile(g.get(), &options, &kernel);
      const kf_result_t launched =
          compiled == KF_SUCCESS ? kf_fused_kernel_launch(kernel, &args, stream_) : compiled;
      const double middle = now_us();
      if (compiled == KF_SUCCESS && (i == 0 || i == hit_runs - 1) &&
          kernel_origin(kernel) != KF_KERNEL_MEMORY_CACHE && !hit.failed) {
        hit.failed = true;
        hit.check = std::string("kernel came from the ") + origin_name(kernel_origin(kernel)) +
                    ", not the memory cache";
      }
      const double before_destroy = now_us();
      kf_fused_kernel_destroy(kernel);
      destroy.push_back(now_us() - before_destroy);
      check(launched, "kf_graph_compile + kf_fused_kernel_launch");
      host.push_back(middle - start);
      if ((i + 1) % kDrainEvery == 0)
        check(kf_stream_synchronize(stream_), "kf_stream_synchronize");
    }
    check(kf_stream_synchronize(stream_), "kf_stream_synchronize");
    hit.us = median(host);
    std::sort(host.begin(), host.end());
    hit.note = format("median of %.0f (p90 %.2f us); destroying the handle adds %.2f us",
                      static_cast<double>(hit_runs), host[host.size() * 9 / 10], median(destroy));
  } catch (const std::runtime_error& e) {
    hit.failed = true;
    hit.check = std::string("error: ") + e.what();
    kf_stream_synchronize(stream_);
  }
  if (cuda()) {
    judge(&hit, "<= 5 us host", format("%.2f us", hit.us), hit.us > 0 && hit.us <= 5.0);
  } else {
    hit.note += "; CPU: the launch runs the work; no target";
  }
  emit(hit);
}

}  // namespace kf_bench
