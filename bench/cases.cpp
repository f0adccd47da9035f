#include "bench/cases.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "bench/handles.hpp"
#include "bench/tensors.hpp"

namespace kf_bench {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr int64_t kLargeHidden = 4096;
constexpr size_t kSpotCheckSamples = 4096;

using OpFunction = kf_result_t (*)(kf_context_t*, const kf_tensor_t*, const kf_tensor_t*,
                                   kf_tensor_t*, kf_activation_t, kf_stream_t*);

OpFunction op_function(Op op) {
  return op == Op::kAdd ? kf_fused_elementwise_add_activation : kf_fused_elementwise_mul_activation;
}

double combine(Op op, double a, double b) { return op == Op::kAdd ? a + b : a * b; }

// One set of buffers; the timed runs rotate through several when one set would fit in L2.
struct BufferSet {
  Tensor a, b, out, tmp;
};

// The inputs of one dtype and shape: host copies (for the reference) and the device buffers.
struct ShapeData {
  std::vector<unsigned char> a, b, bias;
  std::vector<BufferSet> sets;
  Tensor bias_tensor;  // [hidden], shared by all sets, as a layer's bias is
  Tensor one;          // [1] holding 1: the unfused activation pass multiplies by it
};

// "" when `got` is within `dtype`'s tolerance of `want` (relative, with a floor of 1), else a
// description of element `index`'s mismatch. NaN is a mismatch.
std::string mismatch(kf_dtype_t dtype, size_t index, double got, double want) {
  const double error = std::fabs(got - want) / std::max(1.0, std::fabs(want));
  if (error <= tolerance(dtype)) return "";
  char text[160];
  std::snprintf(text, sizeof text, "MISMATCH out[%zu] = %.6g, float64 reference %.6g", index, got,
                want);
  return text;
}

// Compares about kSpotCheckSamples elements of the output (the last one included) with the
// float64 reference. Returns "ok" or a description of the first mismatch.
std::string spot_check(const CaseResult& r, const ShapeData& data, kf_tensor_t* out,
                       kf_stream_t* stream, std::vector<unsigned char>* scratch) {
  const size_t count = static_cast<size_t>(element_count(r.shape));
  scratch->resize(count * kf_dtype_size(r.dtype));
  check(kf_tensor_copy_to_host(out, scratch->data(), scratch->size(), stream),
        "kf_tensor_copy_to_host");
  const size_t hidden = static_cast<size_t>(r.shape.back());
  const size_t step = sample_step(count, kSpotCheckSamples);
  auto mismatch_at = [&](size_t i) {
    const double a = element_at(data.a, r.dtype, i);
    const double b =
        r.is_bias() ? element_at(data.bias, r.dtype, i % hidden) : element_at(data.b, r.dtype, i);
    const double want = reference_activation(r.act, combine(r.op, a, b));
    return mismatch(r.dtype, i, element_at(*scratch, r.dtype, i), want);
  };
  for (size_t i = 0; i < count; i += step) {
    std::string problem = mismatch_at(i);
    if (!problem.empty()) return problem;
  }
  std::string problem = mismatch_at(count - 1);
  if (!problem.empty()) return problem;
  return "ok";
}

}  // namespace

CaseRunner::CaseRunner(const Options& options, kf_context_t* ctx, kf_stream_t* stream,
                       kf_device_type_t device, uint64_t cache_bytes)
    : options_(options),
      ctx_(ctx),
      stream_(stream),
      cache_bytes_(cache_bytes),
      device_(device),
      timer_(ctx, stream, device, options.iters) {}

std::vector<CaseRunner::ShapeSpec> CaseRunner::shapes_for(kf_dtype_t dtype) const {
  std::vector<ShapeSpec> shapes;
  for (const std::string& size : options_.sizes) {
    if (size == "large") {
      const double row_bytes =
          static_cast<double>(kLargeHidden * static_cast<int64_t>(kf_dtype_size(dtype)));
      const int64_t rows =
          std::max<int64_t>(1, static_cast<int64_t>(options_.large_mib * kMiB / row_bytes));
      shapes.push_back({"large", {rows, kLargeHidden}});
    } else if (options_.quick) {
      shapes.push_back({"odd", {3, 17, 129}});  // odd extents catch tail handling
    } else {
      shapes.push_back({"seed", {2048, 2048}});
      shapes.push_back({"seed", {32, 512, 768}});
    }
  }
  return shapes;
}

std::vector<CaseResult> CaseRunner::run_all(
    const std::function<void(const CaseResult&)>& on_result) {
  std::vector<CaseResult> results;
  for (kf_dtype_t dtype : options_.dtypes) {
    for (const ShapeSpec& spec : shapes_for(dtype)) run_shape(dtype, spec, on_result, &results);
  }
  return results;
}

void CaseRunner::run_shape(kf_dtype_t dtype, const ShapeSpec& spec,
                           const std::function<void(const CaseResult&)>& on_result,
                           std::vector<CaseResult>* results) {
  const int64_t count = element_count(spec.shape);
  const int64_t hidden = spec.shape.back();
  const double element_size = static_cast<double>(kf_dtype_size(dtype));

  // The cases of this shape, all measured on the same data.
  std::vector<CaseResult> cases;
  auto add_case = [&](Op op, kf_activation_t act, std::vector<int64_t> b_shape, int64_t b_count) {
    CaseResult r;
    r.op = op;
    r.act = act;
    r.dtype = dtype;
    r.shape = spec.shape;
    r.b_shape = std::move(b_shape);
    r.size_class = spec.size_class;
    r.bytes = element_size * static_cast<double>(2 * count + b_count);
    cases.push_back(r);
  };
  for (Op op : options_.ops) {
    for (kf_activation_t act : options_.acts) add_case(op, act, spec.shape, count);
  }
  if (options_.bias_cases) {
    for (kf_activation_t act : options_.acts) add_case(Op::kAdd, act, {hidden}, hidden);
  }

  // Enough buffer sets that one pass over them is at least 4x the cache, within a memory
  // budget (each set also holds the unfused temporary).
  const double set_bytes = 3.0 * element_size * static_cast<double>(count);
  const int sets = rotation_sets(set_bytes, 4.0 / 3.0 * set_bytes, cache_bytes_, options_.quick);

  ShapeData data;
  try {
    const uint64_t seed = 1000 * static_cast<uint64_t>(dtype) + static_cast<uint64_t>(count);
    data.a = random_elements(dtype, static_cast<size_t>(count), seed + 1);
    data.b = random_elements(dtype, static_cast<size_t>(count), seed + 2);
    data.bias = random_elements(dtype, static_cast<size_t>(hidden), seed + 3);
    for (int s = 0; s < sets; ++s) {
      BufferSet set;
      set.a = make_tensor(ctx_, dtype, spec.shape);
      set.b = make_tensor(ctx_, dtype, spec.shape);
      set.out = make_tensor(ctx_, dtype, spec.shape);
      set.tmp = make_tensor(ctx_, dtype, spec.shape);
      upload(set.a.get(), data.a, stream_);
      upload(set.b.get(), data.b, stream_);
      data.sets.push_back(std::move(set));
    }
    data.bias_tensor = make_tensor(ctx_, dtype, {hidden});
    upload(data.bias_tensor.get(), data.bias, stream_);
    data.one = make_tensor(ctx_, dtype, {1});
    upload(data.one.get(), filled_elements(dtype, 1, 1.0), stream_);
  } catch (const Failure& e) {
    for (CaseResult& r : cases) {
      r.failed = true;
      r.check = std::string("setup failed: ") + e.what();
      on_result(r);
      results->push_back(r);
    }
    return;
  }

  std::vector<unsigned char> scratch;
  for (CaseResult& r : cases) {
    r.buffer_sets = sets;
    const OpFunction op = op_function(r.op);
    const kf_activation_t act = r.act;
    const bool bias = r.is_bias();
    auto set_for = [&](int run) -> const BufferSet& {
      return data.sets[static_cast<size_t>(run % sets)];
    };
    auto fused = [&](int run) {
      const BufferSet& set = set_for(run);
      check(op(ctx_, set.a.get(), bias ? data.bias_tensor.get() : set.b.get(), set.out.get(), act,
               stream_),
            "fused op");
    };
    // The same work as two library calls: the op into a temporary, then the activation alone.
    auto unfused = [&](int run) {
      const BufferSet& set = set_for(run);
      check(op(ctx_, set.a.get(), bias ? data.bias_tensor.get() : set.b.get(), set.tmp.get(),
               KF_ACTIVATION_NONE, stream_),
            "unfused op");
      check(kf_fused_elementwise_mul_activation(ctx_, set.tmp.get(), data.one.get(), set.out.get(),
                                                act, stream_),
            "unfused activation");
    };
    // Every set runs at least once before timing: first touches of fresh memory stay out.
    const int warmup = std::max(options_.warmup, sets);
    try {
      if (options_.check) {  // one run of each on poisoned outputs, before any timing
        const BufferSet& set = data.sets[0];
        poison(set.out.get(), stream_);
        fused(0);
        r.check = spot_check(r, data, set.out.get(), stream_, &scratch);
        r.failed = r.check != "ok";
        poison(set.out.get(), stream_);
        poison(set.tmp.get(), stream_);
        unfused(0);
        const std::string unfused_check = spot_check(r, data, set.out.get(), stream_, &scratch);
        if (unfused_check != "ok") {
          r.check = (r.failed ? r.check + "; " : std::string()) + "unfused: " + unfused_check;
          r.failed = true;
        }
      }
      r.fused_us = median(timer_.time_runs(warmup, options_.iters, fused));
      r.unfused_us = median(timer_.time_runs(warmup, options_.iters, unfused));
      if (device_ == KF_DEVICE_CUDA && r.size_class == "seed")
        r.back_to_back_us =
            median(timer_.time_batches(warmup, options_.iters, kBackToBackRuns, fused));
    } catch (const Failure& e) {
      r.failed = true;
      r.check = std::string("error: ") + e.what();
      kf_stream_synchronize(stream_);  // drain what was enqueued; its own error adds nothing
    }
    on_result(r);
    results->push_back(r);
  }
}

HostCostResult CaseRunner::run_host_cost() {
  HostCostResult result;
  result.calls = options_.host_calls;
  result.elements = 256;
  // Drained often enough that the launch queue never fills: a full queue would make a call wait
  // for the GPU, and the number would measure kernel throughput instead of the call's host cost.
  result.sync_every = 200;
  try {
    const std::vector<int64_t> shape = {result.elements};
    Tensor a = make_tensor(ctx_, KF_DTYPE_FLOAT32, shape);
    Tensor b = make_tensor(ctx_, KF_DTYPE_FLOAT32, shape);
    Tensor out = make_tensor(ctx_, KF_DTYPE_FLOAT32, shape);
    const size_t count = static_cast<size_t>(result.elements);
    const std::vector<unsigned char> a_host = random_elements(KF_DTYPE_FLOAT32, count, 7);
    const std::vector<unsigned char> b_host = random_elements(KF_DTYPE_FLOAT32, count, 8);
    upload(a.get(), a_host, stream_);
    upload(b.get(), b_host, stream_);
    // Poisoned once: after the rounds, every element must have been written by some call.
    if (options_.check) poison(out.get(), stream_);
    void* native = nullptr;
#if defined(KF_BENCH_WITH_CUDA)
    if (kf_stream_get_native(stream_, &native) != KF_SUCCESS) native = nullptr;
#endif
    // One round: a batch of library calls (host time per call inside the batch, the drain
    // excluded), then on CUDA a batch of empty-kernel launches through <<<>>>, one through
    // cuLaunchKernel and (sm_90) one through cuLaunchKernelEx as a dependent launch, timed the
    // same way. Interleaved rounds let the floors and the library
    // see the same machine: on these virtualised hosts the floors drift by ~0.5 us over seconds.
    std::vector<double> per_call, per_empty, per_empty_driver, per_empty_dependent;
    bool floors_ok = native != nullptr;
    auto round = [&](int64_t batch, bool keep) {
      const double start = now_us();
      for (int64_t i = 0; i < batch; ++i)
        check(kf_fused_elementwise_add_activation(ctx_, a.get(), b.get(), out.get(),
                                                  KF_ACTIVATION_RELU, stream_),
              "kf_fused_elementwise_add_activation");
      const double us = (now_us() - start) / static_cast<double>(batch);
      check(kf_stream_synchronize(stream_), "kf_stream_synchronize");
      if (keep) per_call.push_back(us);
#if defined(KF_BENCH_WITH_CUDA)
      if (floors_ok) {
        const double empty = empty_launch_batch_us(native, batch, LaunchPath::runtime);
        const double driver = empty_launch_batch_us(native, batch, LaunchPath::driver);
        const double dependent = empty_launch_batch_us(native, batch, LaunchPath::driver_dependent);
        if (keep && dependent > 0) per_empty_dependent.push_back(dependent);
        floors_ok = empty > 0 && driver > 0;
        if (keep) {
          per_empty.push_back(empty);
          per_empty_driver.push_back(driver);
        }
      }
#endif
    };
    auto rounds = [&](int64_t calls, bool keep) {
      for (int64_t done = 0; done < calls; done += result.sync_every)
        round(std::min<int64_t>(result.sync_every, calls - done), keep);
    };
    rounds(std::min<int64_t>(result.calls, 1000), /*keep=*/false);  // warm-up
    if (result.calls > 0) {
      rounds(result.calls, /*keep=*/true);
      result.batches = static_cast<int64_t>(per_call.size());
      result.us_per_call = median(per_call);
      double sum = 0;
      for (size_t i = 0; i < per_call.size(); ++i) {
        const int64_t batch = std::min<int64_t>(
            result.sync_every, result.calls - static_cast<int64_t>(i) * result.sync_every);
        sum += per_call[i] * static_cast<double>(batch);
      }
      result.us_per_call_mean = sum / static_cast<double>(result.calls);
      if (floors_ok && !per_empty.empty()) {
        result.us_empty_launch = median(per_empty);
        result.us_empty_launch_driver = median(per_empty_driver);
        if (!per_empty_dependent.empty())
          result.us_empty_launch_dependent = median(per_empty_dependent);
      }
    }
    if (options_.check) {
      const std::vector<unsigned char> got = download(out.get(), count * sizeof(float), stream_);
      for (size_t i = 0; i < count && result.error.empty(); ++i) {
        const double sum =
            element_at(a_host, KF_DTYPE_FLOAT32, i) + element_at(b_host, KF_DTYPE_FLOAT32, i);
        result.error = mismatch(KF_DTYPE_FLOAT32, i, element_at(got, KF_DTYPE_FLOAT32, i),
                                reference_activation(KF_ACTIVATION_RELU, sum));
      }
    }
  } catch (const Failure& e) {
    result.error = e.what();
  }
  return result;
}

}  // namespace kf_bench
