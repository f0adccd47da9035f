#include "bench/op_cases.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>

#include "bench/data.hpp"
#include "bench/handles.hpp"
#include "bench/tensors.hpp"

namespace kf_bench {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr int64_t kHidden = 4096;
constexpr size_t kSamples = 1024;  // outputs compared per checked row (or per tensor)
constexpr double kEps = 1e-5;
constexpr double kMomentum = 0.1;  // batch norm training's weight of the batch statistics
constexpr double kDropP = 0.1;

// What one case holds: host inputs (the reference reads them), one group of tensors per buffer
// set (inputs first, as the case's setup orders them) and tensors every set shares.
struct State {
  std::vector<std::vector<unsigned char>> host;
  std::vector<std::vector<Tensor>> sets;
  std::vector<Tensor> shared;
  kf_tensor_t* set(int run, size_t index) const {
    return sets[static_cast<size_t>(run) % sets.size()][index].get();
  }
};

bool selected(const Options& options, const std::string& op) {
  return options.filter.empty() ||
         std::find(options.filter.begin(), options.filter.end(), op) != options.filter.end();
}

// "" when got matches want within `allowed`, else a description of the mismatch.
std::string compare(const char* what, size_t index, double got, double want, double allowed) {
  if (std::fabs(got - want) <= allowed) return "";  // NaN fails here too
  char text[200];
  std::snprintf(text, sizeof text, "MISMATCH %s[%zu] = %.6g, float64 reference %.6g", what, index,
                got, want);
  return text;
}

// The default allowance: the dtype's tolerance relative to max(1, |want|).
double allowed_for(kf_dtype_t dtype, double want) {
  return tolerance(dtype) * std::max(1.0, std::fabs(want));
}

// Rows checked in a row-wise op: first, one a third of the way in (not a power-of-two fraction,
// so that a causal softmax's middle row is not query 0 again), last.
std::vector<int64_t> checked_rows(int64_t rows) {
  std::vector<int64_t> picked = {0, rows / 3 + (rows > 3 ? 1 : 0), rows - 1};
  picked.erase(std::unique(picked.begin(), picked.end()), picked.end());
  return picked;
}

kf_dtype_t compute_dtype(kf_dtype_t dtype) {
  return dtype == KF_DTYPE_FLOAT64 ? KF_DTYPE_FLOAT64 : KF_DTYPE_FLOAT32;
}

uint64_t seed_for(kf_dtype_t dtype, int64_t count, int salt) {
  return 1000003ull * static_cast<uint64_t>(dtype) + static_cast<uint64_t>(count) * 31ull +
         static_cast<uint64_t>(salt);
}

}  // namespace

struct OpCaseRunner::Case {
  OpResult r;
  double allocated_bytes = 0;                 // per buffer set
  std::function<void(State*, int)> setup;     // fills host data and `sets` buffer sets
  std::function<void(State&, int)> body;      // one run on buffer set run % sets
  std::function<std::string(State&)> verify;  // checks buffer set 0 after one run of body
  std::vector<size_t> outputs;                // what body writes: indices into a buffer set
};

OpCaseRunner::OpCaseRunner(const Options& options, kf_context_t* ctx, kf_stream_t* stream,
                           kf_device_type_t device, uint64_t cache_bytes)
    : options_(options),
      ctx_(ctx),
      stream_(stream),
      device_(device),
      cache_bytes_(cache_bytes),
      target_bytes_(options.large_mib * kMiB),
      timer_(ctx, stream, device, options.iters) {}

int64_t OpCaseRunner::rows_for(kf_dtype_t dtype, int64_t row_length,
                               double bytes_per_element) const {
  const double row_bytes = bytes_per_element * static_cast<double>(kf_dtype_size(dtype)) *
                           static_cast<double>(row_length);
  return std::max<int64_t>(options_.quick ? 2 : 1,
                           static_cast<int64_t>(std::ceil(target_bytes_ / row_bytes)));
}

std::vector<OpResult> OpCaseRunner::run_all(const std::function<void(const OpResult&)>& on_result) {
  std::vector<OpResult> results;
  left_out_targets_.clear();
  for (kf_dtype_t dtype : options_.dtypes) {
    std::vector<Case> cases;
    add_bias_activation(dtype, &cases);
    add_gelu_dropout(dtype, &cases);
    add_row_ops(dtype, &cases);
    add_batch_norm(dtype, &cases);
    add_reductions(dtype, &cases);
    for (Case& c : cases) {
      if (selected(options_, c.r.op)) {
        run_case(&c, on_result, &results);
      } else if (!c.r.target.empty()) {
        left_out_targets_.insert(c.r.target);
      }
    }
  }
  return results;
}

void OpCaseRunner::run_case(Case* c, const std::function<void(const OpResult&)>& on_result,
                            std::vector<OpResult>* results) {
  OpResult& r = c->r;
  const int sets = rotation_sets(r.bytes, c->allocated_bytes, cache_bytes_, options_.quick);
  r.buffer_sets = sets;
  auto state = std::make_unique<State>();
  try {
    c->setup(state.get(), sets);
  } catch (const Failure& e) {
    r.failed = true;
    r.check = std::string("setup failed: ") + e.what();
    kf_stream_synchronize(stream_);
    on_result(r);
    results->push_back(r);
    return;
  }
  // Every set runs at least once before timing: first touches of fresh memory stay out.
  const int warmup = std::max(options_.warmup, sets);
  try {
    if (options_.check) {  // one run on poisoned outputs, before any timing
      for (size_t output : c->outputs) poison(state->sets[0][output].get(), stream_);
      c->body(*state, 0);
      r.check = c->verify(*state);
      r.failed = r.check.compare(0, 2, "ok") != 0;  // "ok" or "ok (details)"
    }
    const auto body = [&](int run) { c->body(*state, run); };
    r.us = median(timer_.time_runs(warmup, options_.iters, body));
    // Back to back as well (for reference): every batch of the seed rows, a few for the others.
    if (device_ == KF_DEVICE_CUDA)
      r.back_to_back_us = median(timer_.time_batches(
          warmup, r.target == "seed" ? options_.iters : std::min(options_.iters, kFewBatches),
          kBackToBackRuns, body));
  } catch (const Failure& e) {
    r.failed = true;
    r.check = std::string("error: ") + e.what();
  }
  kf_stream_synchronize(stream_);  // drain before the buffers go; its own error adds nothing
  state.reset();
  on_result(r);
  results->push_back(r);
}

// ---- bias + activation ----------------------------------------------------------------------

void OpCaseRunner::add_bias_activation(kf_dtype_t dtype, std::vector<Case>* cases) {
  const double es = static_cast<double>(kf_dtype_size(dtype));
  const int64_t rows = rows_for(dtype, kHidden, 2.0);
  const std::vector<int64_t> shape = {rows, kHidden};
  const int64_t count = rows * kHidden;
  const kf_activation_t act = KF_ACTIVATION_GELU;
  Case c;
  c.r.op = "bias_activation";
  c.r.variant = std::string("act=") + activation_name(act);
  c.r.target = "large";
  c.r.dtype = dtype;
  c.r.shape = shape;
  c.r.bytes = es * static_cast<double>(2 * count + kHidden);
  c.allocated_bytes = es * static_cast<double>(2 * count);
  c.setup = [=](State* s, int sets) {
    s->host.push_back(
        random_elements(dtype, static_cast<size_t>(count), seed_for(dtype, count, 1)));
    s->host.push_back(random_elements(dtype, kHidden, seed_for(dtype, count, 2)));
    s->shared.push_back(make_tensor(ctx_, dtype, {kHidden}));
    upload(s->shared[0].get(), s->host[1], stream_);
    for (int i = 0; i < sets; ++i) {
      std::vector<Tensor> set;
      set.push_back(make_tensor(ctx_, dtype, shape));
      set.push_back(make_tensor(ctx_, dtype, shape));
      upload(set[0].get(), s->host[0], stream_);
      s->sets.push_back(std::move(set));
    }
  };
  c.outputs = {1};
  c.body = [=](State& s, int run) {
    check(kf_fused_bias_activation(ctx_, s.set(run, 0), s.shared[0].get(), s.set(run, 1), act,
                                   stream_),
          "kf_fused_bias_activation");
  };
  c.verify = [=](State& s) -> std::string {
    const auto out =
        download(s.sets[0][1].get(), static_cast<size_t>(count) * kf_dtype_size(dtype), stream_);
    const size_t n = static_cast<size_t>(count);
    const size_t step = sample_step(n, kSamples);
    for (size_t i = 0; i < n; i += step) {
      const size_t j = i + (i / step) % step;  // vary the column
      if (j >= n) break;
      const double want = reference_activation(
          act, element_at(s.host[0], dtype, j) + element_at(s.host[1], dtype, j % kHidden));
      const std::string problem =
          compare("out", j, element_at(out, dtype, j), want, allowed_for(dtype, want));
      if (!problem.empty()) return problem;
    }
    return "ok";
  };
  cases->push_back(std::move(c));
}

// ---- GELU + dropout -------------------------------------------------------------------------

void OpCaseRunner::add_gelu_dropout(kf_dtype_t dtype, std::vector<Case>* cases) {
  const double es = static_cast<double>(kf_dtype_size(dtype));
  const int64_t rows = rows_for(dtype, kHidden, 2.0 + 1.0 / es);
  const std::vector<int64_t> shape = {rows, kHidden};
  const int64_t count = rows * kHidden;
  Case c;
  c.r.op = "gelu_dropout";
  c.r.variant = "p=0.1 train +mask";
  c.r.target = "large";
  c.r.dtype = dtype;
  c.r.shape = shape;
  c.r.bytes = (2.0 * es + 1.0) * static_cast<double>(count);
  c.allocated_bytes = c.r.bytes;
  c.setup = [=](State* s, int sets) {
    s->host.push_back(
        random_elements(dtype, static_cast<size_t>(count), seed_for(dtype, count, 3)));
    for (int i = 0; i < sets; ++i) {
      std::vector<Tensor> set;
      set.push_back(make_tensor(ctx_, dtype, shape));
      set.push_back(make_tensor(ctx_, dtype, shape));
      set.push_back(make_tensor(ctx_, KF_DTYPE_UINT8, shape));
      upload(set[0].get(), s->host[0], stream_);
      s->sets.push_back(std::move(set));
    }
  };
  c.outputs = {1, 2};  // out, mask
  c.body = [=](State& s, int run) {
    check(kf_fused_gelu_dropout(ctx_, s.set(run, 0), s.set(run, 1), s.set(run, 2), kDropP, 1, 1234,
                                0, stream_),
          "kf_fused_gelu_dropout");
  };
  c.verify = [=](State& s) -> std::string {
    const size_t n = static_cast<size_t>(count);
    const auto out = download(s.sets[0][1].get(), n * kf_dtype_size(dtype), stream_);
    const auto mask = download(s.sets[0][2].get(), n, stream_);
    size_t kept = 0;
    for (unsigned char m : mask) kept += m != 0 ? 1 : 0;
    const double fraction = static_cast<double>(kept) / static_cast<double>(n);
    const double sigma = std::sqrt(kDropP * (1.0 - kDropP) / static_cast<double>(n));
    if (std::fabs(fraction - (1.0 - kDropP)) > 6.0 * sigma + 1e-12) {
      char text[160];
      std::snprintf(text, sizeof text, "MISMATCH kept fraction %.5f, expected %.3f +- %.5f",
                    fraction, 1.0 - kDropP, 6.0 * sigma);
      return text;
    }
    const size_t step = sample_step(n, kSamples);
    for (size_t i = 0; i < n; i += step) {
      const double want =
          mask[i] != 0 ? reference_activation(KF_ACTIVATION_GELU, element_at(s.host[0], dtype, i)) /
                             (1.0 - kDropP)
                       : 0.0;
      const std::string problem =
          compare("out", i, element_at(out, dtype, i), want, allowed_for(dtype, want));
      if (!problem.empty()) return problem;
    }
    char text[64];
    std::snprintf(text, sizeof text, "ok (kept %.4f)", fraction);
    return text;
  };
  cases->push_back(std::move(c));
}

// ---- norms and softmax ----------------------------------------------------------------------

namespace {

enum class RowOp { kSoftmax, kLogSoftmax, kLayerNorm, kRmsNorm };

// Float64 reference of one row; `w` and `b` are null for the ops without them.
std::vector<double> reference_row(RowOp op, const std::vector<double>& x, const double* w,
                                  const double* b, kf_activation_t act) {
  const size_t n = x.size();
  std::vector<double> y(n);
  if (op == RowOp::kSoftmax || op == RowOp::kLogSoftmax) {
    const double m = *std::max_element(x.begin(), x.end());
    double sum = 0;
    for (double v : x) sum += std::exp(v - m);
    for (size_t i = 0; i < n; ++i)
      y[i] = op == RowOp::kSoftmax ? std::exp(x[i] - m) / sum : x[i] - m - std::log(sum);
    return y;
  }
  double mean = 0;
  if (op == RowOp::kLayerNorm) {
    for (double v : x) mean += v;
    mean /= static_cast<double>(n);
  }
  double sq = 0;
  for (double v : x) sq += (v - mean) * (v - mean);
  const double rstd = 1.0 / std::sqrt(sq / static_cast<double>(n) + kEps);
  for (size_t i = 0; i < n; ++i) {
    double v = (x[i] - mean) * rstd * (w ? w[i] : 1.0) + (b ? b[i] : 0.0);
    y[i] = reference_activation(act, v);
  }
  return y;
}

}  // namespace

void OpCaseRunner::add_row_ops(kf_dtype_t dtype, std::vector<Case>* cases) {
  struct Kind {
    RowOp op;
    const char* name;
    kf_activation_t act;
    int params;  // per-row parameter vectors (weight, bias)
  };
  const Kind softmax{RowOp::kSoftmax, "softmax", KF_ACTIVATION_NONE, 0};
  const Kind log_softmax{RowOp::kLogSoftmax, "log_softmax", KF_ACTIVATION_NONE, 0};
  const Kind layer_norm{RowOp::kLayerNorm, "layer_norm", KF_ACTIVATION_RELU, 2};
  const Kind rms_norm{RowOp::kRmsNorm, "rms_norm", KF_ACTIVATION_NONE, 1};
  // One case: a kind on a shape (the last extent is the row). `extra` adds the fused inputs of
  // the transformer forms: RMS norm reads a residual and writes residual_out; softmax adds a
  // [Lq, Lk] mask broadcast over the leading dims and the causal mask.
  struct Spec {
    Kind kind;
    std::vector<int64_t> shape;
    bool extra;
    const char* target;
  };
  // The rows of `lengths`, and with `fixed_forms` the fixed-shape cases too.
  const auto specs_for = [&](const std::vector<int64_t>& lengths, bool fixed_forms) {
    std::vector<Spec> specs;
    for (const Kind& kind : {softmax, layer_norm, rms_norm})
      for (int64_t length : lengths)
        specs.push_back({kind, {rows_for(dtype, length, 2.0), length}, false, "rows"});
    if (!fixed_forms) {
      // Chosen lengths: the log-softmax (its own output pass in each softmax kernel) and the RMS
      // norm with a residual at each of them too.
      for (int64_t length : lengths)
        specs.push_back({log_softmax, {rows_for(dtype, length, 2.0), length}, false, "rows"});
      for (int64_t length : lengths)
        specs.push_back({rms_norm, {rows_for(dtype, length, 4.0), length}, true, "large"});
      return specs;
    }
    // log-softmax shares softmax's kernels but for the output pass: one row length here (the
    // chosen lengths above take it at each).
    const int64_t mid = options_.quick ? 1027 : 4096;
    specs.push_back({log_softmax, {rows_for(dtype, mid, 2.0), mid}, false, "rows"});
    specs.push_back({rms_norm, {rows_for(dtype, mid, 4.0), mid}, true, "large"});
    const int64_t keys = options_.quick ? 36 : 2048;  // Lq = Lk
    // Its traffic counts only the visible half of x (add_case), about 1.5 elements a row element:
    // sized at 1.4 so that whole heads still come to 256 MiB.
    const int64_t heads = std::max<int64_t>(1, rows_for(dtype, keys, 1.4) / keys);
    specs.push_back({softmax, {heads, keys, keys}, true, "large"});
    if (!options_.quick) {
      // The seeds' shapes (PERF.md: >= 70% of copy).
      for (const Kind& kind : {softmax, layer_norm, rms_norm}) {
        specs.push_back({kind, {2048, 2048}, false, "seed"});
        specs.push_back({kind, {32, 512, 768}, false, "seed"});
      }
    }
    return specs;
  };
  const std::vector<Spec> defaults =
      specs_for(options_.quick ? std::vector<int64_t>{64, 1027, 16384}
                               : std::vector<int64_t>{64, 1024, 4096, 16384, 262144},
                true);
  // --lengths: only the rows of those lengths. A target that loses one of its default rows to
  // it cannot be judged.
  const bool chosen = !options_.lengths.empty();
  const std::vector<Spec> specs = chosen ? specs_for(options_.lengths, false) : defaults;
  for (const Spec& d : defaults) {
    const auto same = [&](const Spec& s) {
      return s.kind.op == d.kind.op && s.shape == d.shape && s.extra == d.extra;
    };
    if (std::none_of(specs.begin(), specs.end(), same)) left_out_targets_.insert(d.target);
  }
  // Adds one case (the body of the loop below).
  const auto add_case = [&](RowOp op, const char* name, kf_activation_t act, int params,
                            const std::vector<int64_t>& shape, bool extra, const char* target) {
    const double es = static_cast<double>(kf_dtype_size(dtype));
    const int64_t length = shape.back();
    const int64_t count = element_count(shape);
    const int64_t rows = count / length;
    const bool residual = extra && op == RowOp::kRmsNorm;
    const bool masked = extra && op != RowOp::kRmsNorm && op != RowOp::kLayerNorm;
    const int64_t queries = masked ? shape[shape.size() - 2] : 1;
    const int64_t mask_count = masked ? queries * length : 0;
    Case c;
    c.r.op = name;
    c.r.variant = op == RowOp::kLayerNorm ? "affine act=relu"
                  : op == RowOp::kRmsNorm ? (residual ? "weight +residual" : "weight")
                                          : (masked ? "mask+causal" : "scale=1");
    c.r.target = target;
    c.r.dtype = dtype;
    c.r.shape = shape;
    // x and out; the residual is read and residual_out written; the mask and the parameter
    // vectors are read once. The causal rule hides the columns past each query's diagonal
    // (bottom-right aligned): the kernels read neither those columns of x nor of the mask, so
    // only the visible ones count, and every output is written. (Counted whole, the masked f16
    // row read 97.5 % of copy on an H200, where the bytes it moves ran at about 72 %: 97.5 x 196
    // / 264 MiB.)
    int64_t visible = queries * length;  // of one [Lq, Lk] plane
    if (masked) {
      visible = 0;
      for (int64_t q = 0; q < queries; ++q)
        visible += std::clamp<int64_t>(q + (length - queries) + 1, 0, length);
    }
    const int64_t read_x = masked ? count / (queries * length) * visible : count;
    const int64_t read_mask = masked ? visible : 0;
    c.r.bytes = es * static_cast<double>((residual ? 4 : 2) * count - (count - read_x) +
                                         params * length + read_mask);
    c.allocated_bytes = es * static_cast<double>((residual ? 4 : 2) * count);
    c.setup = [=](State* s, int sets) {
      s->host.push_back(
          random_elements(dtype, static_cast<size_t>(count), seed_for(dtype, count, 4)));
      for (int p = 0; p < params; ++p) {
        s->host.push_back(
            random_elements(dtype, static_cast<size_t>(length), seed_for(dtype, length, 5 + p)));
        s->shared.push_back(make_tensor(ctx_, dtype, {length}));
        upload(s->shared.back().get(), s->host.back(), stream_);
      }
      if (masked) {
        s->host.push_back(
            random_elements(dtype, static_cast<size_t>(mask_count), seed_for(dtype, count, 8)));
        s->shared.push_back(make_tensor(ctx_, dtype, {queries, length}));
        upload(s->shared.back().get(), s->host.back(), stream_);
      }
      if (residual)
        s->host.push_back(
            random_elements(dtype, static_cast<size_t>(count), seed_for(dtype, count, 10)));
      for (int i = 0; i < sets; ++i) {
        std::vector<Tensor> set;
        set.push_back(make_tensor(ctx_, dtype, shape));  // x
        set.push_back(make_tensor(ctx_, dtype, shape));  // out
        upload(set[0].get(), s->host[0], stream_);
        if (residual) {
          set.push_back(make_tensor(ctx_, dtype, shape));  // residual
          set.push_back(make_tensor(ctx_, dtype, shape));  // residual_out
          upload(set[2].get(), s->host.back(), stream_);
        }
        s->sets.push_back(std::move(set));
      }
    };
    c.outputs = residual ? std::vector<size_t>{1, 3} : std::vector<size_t>{1};  // out, residual_out
    c.body = [=](State& s, int run) {
      kf_tensor_t* x = s.set(run, 0);
      kf_tensor_t* out = s.set(run, 1);
      switch (op) {
        case RowOp::kSoftmax:
          check(kf_fused_softmax(ctx_, x, masked ? s.shared[0].get() : nullptr, out, 1.0,
                                 masked ? 1 : 0, stream_),
                "kf_fused_softmax");
          break;
        case RowOp::kLogSoftmax:
          check(kf_log_softmax(ctx_, x, nullptr, out, 1.0, 0, stream_), "kf_log_softmax");
          break;
        case RowOp::kLayerNorm:
          check(kf_fused_layer_norm_activation(ctx_, x, s.shared[0].get(), s.shared[1].get(), out,
                                               nullptr, nullptr, 1, kEps, act, stream_),
                "kf_fused_layer_norm_activation");
          break;
        case RowOp::kRmsNorm:
          check(kf_fused_rms_norm_activation(
                    ctx_, x, residual ? s.set(run, 2) : nullptr, s.shared[0].get(), out,
                    residual ? s.set(run, 3) : nullptr, kEps, act, stream_),
                "kf_fused_rms_norm_activation");
          break;
      }
    };
    c.verify = [=](State& s) -> std::string {
      const size_t bytes = static_cast<size_t>(count) * kf_dtype_size(dtype);
      const auto out = download(s.sets[0][1].get(), bytes, stream_);
      const auto h_out =
          residual ? download(s.sets[0][3].get(), bytes, stream_) : std::vector<unsigned char>{};
      const size_t n = static_cast<size_t>(length);
      std::vector<double> w(n), b(n), x(n);
      for (size_t i = 0; i < n; ++i) {
        if (params > 0) w[i] = element_at(s.host[1], dtype, i);
        if (params > 1) b[i] = element_at(s.host[2], dtype, i);
      }
      // Softmax values shrink with the row length: compare relative to the value, with an
      // absolute floor at f16's subnormal spacing.
      const double floor = dtype == KF_DTYPE_FLOAT16 ? 6e-8 : 1e-30;
      const double minus_inf = -std::numeric_limits<double>::infinity();
      for (int64_t row : checked_rows(rows)) {
        const size_t base = static_cast<size_t>(row) * n;
        const int64_t query = row % queries;
        for (size_t i = 0; i < n; ++i) {
          x[i] = element_at(s.host[0], dtype, base + i);
          if (residual) {
            // h = x + residual, rounded to the storage type as residual_out holds it.
            x[i] = element_at(
                filled_elements(dtype, 1, x[i] + element_at(s.host.back(), dtype, base + i)), dtype,
                0);
            const std::string problem =
                compare("residual_out", base + i, element_at(h_out, dtype, base + i), x[i],
                        allowed_for(dtype, x[i]));
            if (!problem.empty()) return problem;
          }
          if (masked) {
            x[i] += element_at(s.host[1], dtype, static_cast<size_t>(query) * n + i);
            if (static_cast<int64_t>(i) > query) x[i] = minus_inf;  // causal, Lq = Lk
          }
        }
        const std::vector<double> want = reference_row(op, x, params > 0 ? w.data() : nullptr,
                                                       params > 1 ? b.data() : nullptr, act);
        const size_t step = sample_step(n, kSamples);
        for (size_t i = 0; i < n; i += step) {
          const double allowed = op == RowOp::kSoftmax
                                     ? tolerance(dtype) * std::fabs(want[i]) + floor
                                     : allowed_for(dtype, want[i]);
          const std::string problem =
              compare("out", base + i, element_at(out, dtype, base + i), want[i], allowed);
          if (!problem.empty()) return problem;
        }
      }
      return "ok";
    };
    cases->push_back(std::move(c));
  };
  for (const Spec& spec : specs)
    add_case(spec.kind.op, spec.kind.name, spec.kind.act, spec.kind.params, spec.shape, spec.extra,
             spec.target);
}

// ---- batch norm -----------------------------------------------------------------------------

void OpCaseRunner::add_batch_norm(kf_dtype_t dtype, std::vector<Case>* cases) {
  const double es = static_cast<double>(kf_dtype_size(dtype));
  const kf_dtype_t cdt = compute_dtype(dtype);
  const double cs = static_cast<double>(kf_dtype_size(cdt));
  int64_t channels = 256, height = 56, width = 56, batch = 32;
  if (options_.quick) {
    batch = 2, channels = 8, height = 5, width = 7;
  } else {
    const double per_image = 2.0 * es * static_cast<double>(channels * height * width);
    batch = std::max<int64_t>(32, static_cast<int64_t>(std::ceil(target_bytes_ / per_image)));
  }
  const std::vector<int64_t> shape = {batch, channels, height, width};
  const int64_t count = element_count(shape);
  const int64_t plane = height * width;
  const kf_activation_t act = KF_ACTIVATION_RELU;
  for (int training = 0; training <= 1; ++training) {
    Case c;
    c.r.op = "batch_norm";
    c.r.variant = training ? "NCHW train relu" : "NCHW infer relu";
    // Training is judged by the same traffic (x read once): the CUDA backend stages each channel
    // on chip (a cluster's shared memory) where its runs fill 16-byte vectors, as here.
    c.r.target = "large";
    c.r.dtype = dtype;
    c.r.shape = shape;
    // Inference reads 4 per-channel vectors; training reads weight, bias and the running
    // statistics and writes the statistics back.
    c.r.bytes = es * static_cast<double>(2 * count) +
                cs * static_cast<double>((training ? 6 : 4) * channels);
    c.allocated_bytes = es * static_cast<double>(2 * count);
    c.setup = [=](State* s, int sets) {
      s->host.push_back(
          random_elements(dtype, static_cast<size_t>(count), seed_for(dtype, count, 7)));
      s->host.push_back(random_elements(cdt, static_cast<size_t>(channels), 11));   // weight
      s->host.push_back(random_elements(cdt, static_cast<size_t>(channels), 12));   // bias
      s->host.push_back(random_elements(cdt, static_cast<size_t>(channels), 13));   // running mean
      s->host.push_back(filled_elements(cdt, static_cast<size_t>(channels), 1.5));  // running var
      for (size_t p = 1; p < 5; ++p) {
        s->shared.push_back(make_tensor(ctx_, cdt, {channels}));
        upload(s->shared.back().get(), s->host[p], stream_);
      }
      for (int i = 0; i < sets; ++i) {
        std::vector<Tensor> set;
        set.push_back(make_tensor(ctx_, dtype, shape));
        set.push_back(make_tensor(ctx_, dtype, shape));
        upload(set[0].get(), s->host[0], stream_);
        s->sets.push_back(std::move(set));
      }
    };
    c.outputs = {1};
    c.body = [=](State& s, int run) {
      check(
          kf_fused_batch_norm_activation(ctx_, s.set(run, 0), s.shared[0].get(), s.shared[1].get(),
                                         s.shared[2].get(), s.shared[3].get(), s.set(run, 1),
                                         training, kMomentum, kEps, act, KF_LAYOUT_NCHW, stream_),
          "kf_fused_batch_norm_activation");
    };
    c.verify = [=](State& s) -> std::string {
      const auto out =
          download(s.sets[0][1].get(), static_cast<size_t>(count) * kf_dtype_size(dtype), stream_);
      // verify follows one run, so the running statistics have taken exactly one update.
      const size_t stat_bytes = static_cast<size_t>(channels) * kf_dtype_size(cdt);
      const auto running_mean = download(s.shared[2].get(), stat_bytes, stream_);
      const auto running_var = download(s.shared[3].get(), stat_bytes, stream_);
      for (int64_t ch : checked_rows(channels)) {
        double mean = element_at(s.host[3], cdt, static_cast<size_t>(ch));
        double var = element_at(s.host[4], cdt, static_cast<size_t>(ch));
        auto index = [&](int64_t n, int64_t p) {
          return static_cast<size_t>((n * channels + ch) * plane + p);
        };
        if (training) {
          double sum = 0, sq = 0;
          for (int64_t n = 0; n < batch; ++n)
            for (int64_t p = 0; p < plane; ++p) sum += element_at(s.host[0], dtype, index(n, p));
          mean = sum / static_cast<double>(batch * plane);
          for (int64_t n = 0; n < batch; ++n)
            for (int64_t p = 0; p < plane; ++p) {
              const double d = element_at(s.host[0], dtype, index(n, p)) - mean;
              sq += d * d;
            }
          var = sq / static_cast<double>(batch * plane);
          const double n = static_cast<double>(batch * plane);
          const size_t c_at = static_cast<size_t>(ch);
          const double want_mean =
              (1 - kMomentum) * element_at(s.host[3], cdt, c_at) + kMomentum * mean;
          const double want_var =
              (1 - kMomentum) * element_at(s.host[4], cdt, c_at) + kMomentum * var * n / (n - 1);
          std::string problem = compare("running_mean", c_at, element_at(running_mean, cdt, c_at),
                                        want_mean, allowed_for(cdt, want_mean));
          if (problem.empty())
            problem = compare("running_var", c_at, element_at(running_var, cdt, c_at), want_var,
                              allowed_for(cdt, want_var));
          if (!problem.empty()) return problem;
        } else if (element_at(running_mean, cdt, static_cast<size_t>(ch)) != mean ||
                   element_at(running_var, cdt, static_cast<size_t>(ch)) != var) {
          return "inference changed the running statistics of channel " + std::to_string(ch);
        }
        const double scale =
            element_at(s.host[1], cdt, static_cast<size_t>(ch)) / std::sqrt(var + kEps);
        const double shift = element_at(s.host[2], cdt, static_cast<size_t>(ch));
        const int64_t step =
            static_cast<int64_t>(sample_step(static_cast<size_t>(batch * plane), kSamples));
        for (int64_t k = 0; k < batch * plane; k += step) {
          const size_t i = index(k / plane, k % plane);
          const double want =
              reference_activation(act, (element_at(s.host[0], dtype, i) - mean) * scale + shift);
          const std::string problem =
              compare("out", i, element_at(out, dtype, i), want, allowed_for(dtype, want));
          if (!problem.empty()) return problem;
        }
      }
      return "ok";
    };
    cases->push_back(std::move(c));
  }
}

// ---- reductions -----------------------------------------------------------------------------

void OpCaseRunner::add_reductions(kf_dtype_t dtype, std::vector<Case>* cases) {
  const double es = static_cast<double>(kf_dtype_size(dtype));
  struct Spec {
    const char* variant;
    kf_reduce_op_t op;
    int32_t axis;
    std::vector<int64_t> shape;
    const char* target;
  };
  std::vector<Spec> specs;
  if (options_.quick) {
    specs.push_back({"mean_abs dim=0", KF_REDUCE_MEAN_ABS, 0, {67, 129}, "reduce_dim0"});
    specs.push_back({"sum dim=-1", KF_REDUCE_SUM, -1, {33, 4099}, "large"});
  } else {
    // 8192 x 8192 (the shape) at the CUDA default of 256 MiB; scaled with --large-mib.
    const int64_t side = std::max<int64_t>(
        64, static_cast<int64_t>(8192.0 * std::sqrt(options_.large_mib / 256.0)) / 64 * 64);
    specs.push_back({"mean_abs dim=0", KF_REDUCE_MEAN_ABS, 0, {side, side}, "reduce_dim0"});
    specs.push_back(
        {"sum dim=-1", KF_REDUCE_SUM, -1, {rows_for(dtype, kHidden, 1.0), kHidden}, "large"});
  }
  for (const Spec& spec : specs) {
    const std::vector<int64_t> shape = spec.shape;
    const int64_t rows = shape[0], cols = shape[1];
    const int64_t count = rows * cols;
    const int64_t out_count = spec.axis == 0 ? cols : rows;
    Case c;
    c.r.op = "reduce";
    c.r.variant = spec.variant;
    c.r.target = spec.target;
    c.r.dtype = dtype;
    c.r.shape = shape;
    c.r.bytes = es * static_cast<double>(count + out_count);
    c.allocated_bytes = c.r.bytes;
    const kf_reduce_op_t op = spec.op;
    const int32_t axis = spec.axis;
    c.setup = [=](State* s, int sets) {
      s->host.push_back(
          random_elements(dtype, static_cast<size_t>(count), seed_for(dtype, count, 9)));
      for (int i = 0; i < sets; ++i) {
        std::vector<Tensor> set;
        set.push_back(make_tensor(ctx_, dtype, shape));
        set.push_back(make_tensor(ctx_, dtype, {out_count}));
        upload(set[0].get(), s->host[0], stream_);
        s->sets.push_back(std::move(set));
      }
    };
    c.outputs = {1};
    c.body = [=](State& s, int run) {
      if (op == KF_REDUCE_MEAN_ABS && axis == 0) {
        check(kf_reduce_mean_abs(ctx_, s.set(run, 0), s.set(run, 1), 0, 0, stream_),
              "kf_reduce_mean_abs");
      } else {
        check(kf_reduce(ctx_, s.set(run, 0), s.set(run, 1), op, &axis, 1, 0, stream_), "kf_reduce");
      }
    };
    c.verify = [=](State& s) -> std::string {
      const auto out = download(s.sets[0][1].get(),
                                static_cast<size_t>(out_count) * kf_dtype_size(dtype), stream_);
      const int64_t length = axis == 0 ? rows : cols;
      const int64_t step = static_cast<int64_t>(sample_step(static_cast<size_t>(out_count), 64));
      for (int64_t o = 0; o < out_count; o += step) {
        double sum = 0, sum_abs = 0;
        for (int64_t k = 0; k < length; ++k) {
          const size_t i = static_cast<size_t>(axis == 0 ? k * cols + o : o * cols + k);
          const double v = element_at(s.host[0], dtype, i);
          sum += op == KF_REDUCE_MEAN_ABS ? std::fabs(v) : v;
          sum_abs += std::fabs(v);
        }
        const double want = op == KF_REDUCE_MEAN_ABS ? sum / static_cast<double>(length) : sum;
        // Accumulation in f32 adds error in proportion to the sum of magnitudes.
        const double allowed =
            allowed_for(dtype, want) +
            1e-6 * sum_abs * (op == KF_REDUCE_MEAN_ABS ? 1.0 / static_cast<double>(length) : 1.0);
        const std::string problem =
            compare("out", static_cast<size_t>(o), element_at(out, dtype, static_cast<size_t>(o)),
                    want, allowed);
        if (!problem.empty()) return problem;
      }
      return "ok";
    };
    cases->push_back(std::move(c));
  }
}

}  // namespace kf_bench
