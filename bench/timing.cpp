#include "bench/timing.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

namespace kf_bench {

RunTimer::RunTimer(kf_context_t* ctx, kf_stream_t* stream, kf_device_type_t device, int max_runs)
    : ctx_(ctx), stream_(stream), device_(device) {
  if (device_ != KF_DEVICE_CUDA) return;
  events_.resize(static_cast<size_t>(max_runs) + 1);
  for (Event& e : events_) check(kf_event_create(ctx_, e.out()), "kf_event_create");
}

std::vector<double> RunTimer::time_runs(int warmup, int runs,
                                        const std::function<void(int)>& body) {
  // The first call may load modules or grow the pool: keep it out of the queue that follows.
  if (warmup > 0) {
    body(0);
    check(kf_stream_synchronize(stream_), "kf_stream_synchronize");
  }
  // The remaining warm-up runs stay queued, so the device is busy when the timed runs start.
  for (int i = 1; i < warmup; ++i) body(i);

  std::vector<double> us(static_cast<size_t>(runs));
  if (device_ == KF_DEVICE_CUDA) {
    if (static_cast<size_t>(runs) + 1 > events_.size())
      throw Failure("more timed runs than events");
    check(kf_event_record(events_[0].get(), stream_), "kf_event_record");
    for (int i = 0; i < runs; ++i) {
      body(warmup + i);
      check(kf_event_record(events_[static_cast<size_t>(i) + 1].get(), stream_), "kf_event_record");
    }
    check(kf_event_synchronize(events_[static_cast<size_t>(runs)].get()), "kf_event_synchronize");
    for (int i = 0; i < runs; ++i) {
      float ms = 0;
      check(kf_event_elapsed_ms(events_[static_cast<size_t>(i)].get(),
                                events_[static_cast<size_t>(i) + 1].get(), &ms),
            "kf_event_elapsed_ms");
      us[static_cast<size_t>(i)] = 1000.0 * ms;
    }
  } else {
    check(kf_stream_synchronize(stream_), "kf_stream_synchronize");
    for (int i = 0; i < runs; ++i) {
      const double start = now_us();
      body(warmup + i);
      check(kf_stream_synchronize(stream_), "kf_stream_synchronize");
      us[static_cast<size_t>(i)] = now_us() - start;
    }
  }
  return us;
}

std::vector<double> RunTimer::time_batches(int warmup, int batches, int per_batch,
                                           const std::function<void(int)>& body) {
  if (device_ != KF_DEVICE_CUDA) throw Failure("back-to-back batches are timed on CUDA only");
  if (static_cast<size_t>(batches) + 1 > events_.size())
    throw Failure("more timed batches than events");
  for (int i = 0; i < warmup; ++i) body(i);
  check(kf_event_record(events_[0].get(), stream_), "kf_event_record");
  int run = warmup;
  for (int b = 0; b < batches; ++b) {
    for (int i = 0; i < per_batch; ++i) body(run++);
    check(kf_event_record(events_[static_cast<size_t>(b) + 1].get(), stream_), "kf_event_record");
  }
  check(kf_event_synchronize(events_[static_cast<size_t>(batches)].get()), "kf_event_synchronize");
  std::vector<double> us(static_cast<size_t>(batches));
  for (int b = 0; b < batches; ++b) {
    float ms = 0;
    check(kf_event_elapsed_ms(events_[static_cast<size_t>(b)].get(),
                              events_[static_cast<size_t>(b) + 1].get(), &ms),
          "kf_event_elapsed_ms");
    us[static_cast<size_t>(b)] = 1000.0 * ms / per_batch;
  }
  return us;
}

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
  double upper = values[mid];
  if (values.size() % 2 != 0) return upper;
  double lower =
      *std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid));
  return 0.5 * (lower + upper);
}

CopyCeiling measure_host_copy(size_t bytes, int threads, int warmup, int runs) {
  threads = std::max(threads, 1);
  std::vector<unsigned char> src(bytes, 0x5a);
  std::vector<unsigned char> dst(bytes, 0);  // touched now, so page faults stay out of the timing
  const size_t chunk = (bytes + static_cast<size_t>(threads) - 1) / static_cast<size_t>(threads);
  auto copy_once = [&] {
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      const size_t begin = std::min(bytes, static_cast<size_t>(t) * chunk);
      const size_t end = std::min(bytes, begin + chunk);
      workers.emplace_back(
          [&, begin, end] { std::memcpy(dst.data() + begin, src.data() + begin, end - begin); });
    }
    for (std::thread& w : workers) w.join();
  };
  for (int i = 0; i < warmup; ++i) copy_once();
  std::vector<double> us;
  for (int i = 0; i < runs; ++i) {
    const double start = now_us();
    copy_once();
    us.push_back(now_us() - start);
  }
  CopyCeiling c;
  c.method = "memcpy, " + std::to_string(threads) + " threads";
  c.bytes = bytes;
  c.median_us = median(us);
  c.gbps = c.median_us > 0 ? 2.0 * static_cast<double>(bytes) / (c.median_us * 1e3) : 0.0;
  return c;
}

double now_us() {
  using namespace std::chrono;
  return static_cast<double>(
             duration_cast<nanoseconds>(steady_clock::now().time_since_epoch()).count()) *
         1e-3;
}

#if !defined(KF_BENCH_WITH_CUDA)
CopyCeiling measure_device_copy(int, size_t, int, int, int) {
  throw Failure("kf-bench was built without CUDA support");
}
std::string cuda_version_string() { return ""; }
#endif

}  // namespace kf_bench
