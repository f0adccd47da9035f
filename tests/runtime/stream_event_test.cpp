// Streams and events: priorities, native handles, synchronisation, cross-stream ordering, timing.
#include <chrono>
#include <string>
#include <thread>

#include "tests/common/test_util.hpp"

namespace {

using kf_test::device_under_test;

kf_stream_t* const kSentinelStream = reinterpret_cast<kf_stream_t*>(uintptr_t{0x5a5a5a5a});
kf_event_t* const kSentinelEvent = reinterpret_cast<kf_event_t*>(uintptr_t{0x5a5a5a5a});

TEST(Stream, CreateDefaultsAndQueries) {
  KF_REQUIRE_DEVICE();
  kf_test::Context ctx;
  kf_stream_t* s = nullptr;
  KF_ASSERT_OK(kf_stream_create(ctx, nullptr, &s));
  int32_t priority = 77;
  KF_ASSERT_OK(kf_stream_get_priority(s, &priority));
  EXPECT_EQ(priority, 0);
  void* native = reinterpret_cast<void*>(1);
  KF_ASSERT_OK(kf_stream_get_native(s, &native));
  if (device_under_test() == KF_DEVICE_CPU) {
    EXPECT_EQ(native, nullptr);
  } else {
    EXPECT_NE(native, nullptr);
  }
  KF_ASSERT_OK(kf_stream_synchronize(s));
  KF_ASSERT_OK(kf_stream_destroy(s));
}

TEST(Stream, PrioritiesAreClampedToTheDeviceRange) {
  KF_REQUIRE_DEVICE();
  kf_test::Context ctx;
  int32_t least = 0, greatest = 0;
  KF_ASSERT_OK(kf_context_get_stream_priority_range(ctx, &least, &greatest));
  kf_stream_config_t config = KF_STREAM_CONFIG_INIT;
  for (int32_t requested : {-1000, greatest, 0, least, 1000}) {
    config.priority = requested;
    kf_stream_t* s = nullptr;
    KF_ASSERT_OK(kf_stream_create(ctx, &config, &s));
    int32_t priority = 77;
    KF_ASSERT_OK(kf_stream_get_priority(s, &priority));
    int32_t expected = requested < greatest ? greatest : requested > least ? least : requested;
    EXPECT_EQ(priority, expected) << "requested " << requested;
    KF_ASSERT_OK(kf_stream_destroy(s));
  }
  config.priority = 0;
  config.flags = 0;  // a blocking stream
  kf_stream_t* s = nullptr;
  KF_ASSERT_OK(kf_stream_create(ctx, &config, &s));
  KF_ASSERT_OK(kf_stream_destroy(s));
}

TEST(Stream, CreateErrors) {
  KF_REQUIRE_DEVICE();
  kf_test::Context ctx;
  kf_stream_config_t config = KF_STREAM_CONFIG_INIT;
  KF_EXPECT_ERR(kf_stream_create(ctx, &config, nullptr), KF_ERROR_INVALID_ARGUMENT);
  kf_stream_t* s = kSentinelStream;
  KF_EXPECT_ERR(kf_stream_create(nullptr, &config, &s), KF_ERROR_INVALID_HANDLE);
  config.struct_size = 4;
  KF_EXPECT_ERR(kf_stream_create(ctx, &config, &s), KF_ERROR_VERSION_MISMATCH);
  config = KF_STREAM_CONFIG_INIT;
  config.flags = 0x80;
  KF_EXPECT_ERR(kf_stream_create(ctx, &config, &s), KF_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(s, kSentinelStream);
  // An older layout without flags gets the default flags.
  config = KF_STREAM_CONFIG_INIT;
  config.struct_size = offsetof(kf_stream_config_t, priority) + sizeof(int32_t);
  config.flags = 0xdead;  // beyond the caller's layout: ignored
  KF_ASSERT_OK(kf_stream_create(ctx, &config, &s));
  KF_ASSERT_OK(kf_stream_destroy(s));
  // A newer layout: read while the fields unknown here are zero, refused when one is set.
  struct Newer {
    kf_stream_config_t base;
    uint32_t future_flags[2];
  } newer{};
  newer.base = KF_STREAM_CONFIG_INIT;
  newer.base.struct_size = sizeof(newer);
  KF_ASSERT_OK(kf_stream_create(ctx, &newer.base, &s));
  KF_ASSERT_OK(kf_stream_destroy(s));
  s = kSentinelStream;
  newer.future_flags[1] = 1;
  KF_EXPECT_ERR(kf_stream_create(ctx, &newer.base, &s), KF_ERROR_VERSION_MISMATCH);
  EXPECT_NE(std::string(kf_get_last_error_message()).find("its byte 20, past the 16 bytes"),
            std::string::npos)
      << kf_get_last_error_message();
  EXPECT_EQ(s, kSentinelStream);
}

TEST(Stream, HandleChecks) {
  KF_REQUIRE_DEVICE();
  kf_test::Context ctx;
  kf_stream_t* s = nullptr;
  KF_ASSERT_OK(kf_stream_create(ctx, nullptr, &s));
  void* native = reinterpret_cast<void*>(1);
  KF_EXPECT_ERR(kf_stream_get_native(s, nullptr), KF_ERROR_INVALID_ARGUMENT);
  KF_EXPECT_ERR(kf_stream_get_priority(s, nullptr), KF_ERROR_INVALID_ARGUMENT);
  KF_ASSERT_OK(kf_stream_destroy(s));
  KF_EXPECT_ERR(kf_stream_destroy(s), KF_ERROR_INVALID_HANDLE);
  KF_EXPECT_ERR(kf_stream_synchronize(s), KF_ERROR_INVALID_HANDLE);
  KF_EXPECT_ERR(kf_stream_get_native(s, &native), KF_ERROR_INVALID_HANDLE);
  EXPECT_EQ(native, reinterpret_cast<void*>(1));
  KF_EXPECT_ERR(kf_stream_synchronize(nullptr), KF_ERROR_INVALID_HANDLE);
  // A context or tensor passed as a stream.
  KF_EXPECT_ERR(kf_stream_synchronize(reinterpret_cast<kf_stream_t*>(ctx.ctx)),
                KF_ERROR_INVALID_HANDLE);
  kf_test::Tensor t = kf_test::make_tensor(ctx, KF_DTYPE_FLOAT32, {4});
  KF_EXPECT_ERR(kf_stream_destroy(reinterpret_cast<kf_stream_t*>(t.t)), KF_ERROR_INVALID_HANDLE);
  EXPECT_NE(std::string(kf_get_last_error_message()).find("tensor"), std::string::npos);
}

TEST(Stream, WrapNative) {
  KF_REQUIRE_DEVICE();
  kf_test::Context ctx;
  kf_stream_t* owner = nullptr;
  KF_ASSERT_OK(kf_stream_create(ctx, nullptr, &owner));
  void* native = nullptr;
  KF_ASSERT_OK(kf_stream_get_native(owner, &native));
  kf_stream_t* wrapped = kSentinelStream;
  if (device_under_test() == KF_DEVICE_CPU) {
    KF_EXPECT_ERR(kf_stream_wrap_native(ctx, native, &wrapped), KF_ERROR_NOT_SUPPORTED);
    EXPECT_EQ(wrapped, kSentinelStream);
    KF_ASSERT_OK(kf_stream_destroy(owner));
    return;
  }
  KF_EXPECT_ERR(kf_stream_wrap_native(ctx, native, nullptr), KF_ERROR_INVALID_ARGUMENT);
  KF_ASSERT_OK(kf_stream_wrap_native(ctx, native, &wrapped));
  void* got = nullptr;
  KF_ASSERT_OK(kf_stream_get_native(wrapped, &got));
  EXPECT_EQ(got, native);
  // Work on the wrapper, then destroying it leaves the native stream usable.
  kf_test::Tensor t = kf_test::make_tensor(ctx, KF_DTYPE_FLOAT32, {33});
  std::vector<float> in(33), out(33);
  for (size_t i = 0; i < in.size(); ++i) in[i] = 0.5f * static_cast<float>(i) - 3.0f;
  KF_ASSERT_OK(kf_tensor_copy_from_host(t, in.data(), sizeof(float) * in.size(), wrapped));
  KF_ASSERT_OK(kf_stream_destroy(wrapped));
  KF_ASSERT_OK(kf_stream_synchronize(owner));
  KF_ASSERT_OK(kf_tensor_copy_to_host(t, out.data(), sizeof(float) * out.size(), owner));
  EXPECT_EQ(in, out);
  // The legacy default stream (NULL) can be wrapped too.
  KF_ASSERT_OK(kf_stream_wrap_native(ctx, nullptr, &wrapped));
  KF_ASSERT_OK(kf_stream_synchronize(wrapped));
  KF_ASSERT_OK(kf_stream_destroy(wrapped));
  KF_ASSERT_OK(kf_stream_destroy(owner));
}

TEST(Stream, ForeignContextStreamIsDeviceMismatch) {
  KF_REQUIRE_DEVICE();
  kf_test::Context a, b;
  kf_stream_t* sb = nullptr;
  KF_ASSERT_OK(kf_stream_create(b, nullptr, &sb));
  kf_test::Tensor t = kf_test::make_tensor(a, KF_DTYPE_FLOAT32, {4});
  float values[4] = {1, 2, 3, 4};
  KF_EXPECT_ERR(kf_tensor_copy_from_host(t, values, sizeof(values), sb), KF_ERROR_DEVICE_MISMATCH);
  kf_tensor_desc_t desc = kf_test::make_desc(KF_DTYPE_FLOAT32, {4});
  kf_tensor_t* out = reinterpret_cast<kf_tensor_t*>(uintptr_t{0x5a5a5a5a});
  KF_EXPECT_ERR(kf_tensor_create_async(a, &desc, sb, &out), KF_ERROR_DEVICE_MISMATCH);
  EXPECT_EQ(out, reinterpret_cast<kf_tensor_t*>(uintptr_t{0x5a5a5a5a}));
  kf_event_t* ea = nullptr;
  KF_ASSERT_OK(kf_event_create(a, &ea));
  KF_EXPECT_ERR(kf_event_record(ea, sb), KF_ERROR_DEVICE_MISMATCH);
  KF_EXPECT_ERR(kf_stream_wait_event(sb, ea), KF_ERROR_DEVICE_MISMATCH);
  KF_ASSERT_OK(kf_event_destroy(ea));
  KF_ASSERT_OK(kf_stream_destroy(sb));
}

TEST(Stream, DestroyingAHomeStreamKeepsItsTensorsUsable) {
  KF_REQUIRE_DEVICE();
  kf_test::Context ctx;
  kf_stream_t* s = nullptr;
  KF_ASSERT_OK(kf_stream_create(ctx, nullptr, &s));
  kf_tensor_desc_t desc = kf_test::make_desc(KF_DTYPE_FLOAT64, {5, 3});
  kf_tensor_t* t = nullptr;
  KF_ASSERT_OK(kf_tensor_create_async(ctx, &desc, s, &t));
  std::vector<double> values = kf_test::random_values(15, 3);
  kf_test::upload(t, values);  // on the default stream: waits for the allocation on s
  KF_ASSERT_OK(kf_stream_destroy(s));
  kf_test::expect_close(kf_test::download(t), values, 0.0, "after home stream destroyed");
  KF_ASSERT_OK(kf_tensor_destroy(t));
}

TEST(Event, RecordSynchronizeQuery) {
  KF_REQUIRE_DEVICE();
  kf_test::Context ctx;
  kf_event_t* e = nullptr;
  KF_ASSERT_OK(kf_event_create(ctx, &e));
  int32_t complete = 77;
  KF_ASSERT_OK(kf_event_query(e, &complete));  // never recorded: complete
  EXPECT_EQ(complete, 1);
  KF_ASSERT_OK(kf_event_synchronize(e));
  KF_ASSERT_OK(kf_event_record(e, nullptr));
  KF_ASSERT_OK(kf_event_synchronize(e));
  complete = 77;
  KF_ASSERT_OK(kf_event_query(e, &complete));
  EXPECT_EQ(complete, 1);
  kf_stream_t* s = nullptr;
  KF_ASSERT_OK(kf_stream_create(ctx, nullptr, &s));
  KF_ASSERT_OK(kf_event_record(e, s));
  KF_ASSERT_OK(kf_stream_wait_event(s, e));
  KF_ASSERT_OK(kf_stream_synchronize(s));
  KF_ASSERT_OK(kf_stream_destroy(s));
  KF_ASSERT_OK(kf_event_destroy(e));
}

TEST(Event, Errors) {
  KF_REQUIRE_DEVICE();
  kf_test::Context ctx, other;
  kf_event_t* e = kSentinelEvent;
  KF_EXPECT_ERR(kf_event_create(ctx, nullptr), KF_ERROR_INVALID_ARGUMENT);
  KF_EXPECT_ERR(kf_event_create(nullptr, &e), KF_ERROR_INVALID_HANDLE);
  EXPECT_EQ(e, kSentinelEvent);
  kf_event_t *a = nullptr, *b = nullptr, *foreign = nullptr;
  KF_ASSERT_OK(kf_event_create(ctx, &a));
  KF_ASSERT_OK(kf_event_create(ctx, &b));
  KF_ASSERT_OK(kf_event_create(other, &foreign));
  float ms = -7.0f;
  KF_EXPECT_ERR(kf_event_elapsed_ms(a, b, &ms), KF_ERROR_INVALID_ARGUMENT);  // never recorded
  KF_ASSERT_OK(kf_event_record(a, nullptr));
  KF_EXPECT_ERR(kf_event_elapsed_ms(a, b, &ms), KF_ERROR_INVALID_ARGUMENT);  // end never recorded
  KF_ASSERT_OK(kf_event_record(b, nullptr));
  KF_EXPECT_ERR(kf_event_elapsed_ms(a, b, nullptr), KF_ERROR_INVALID_ARGUMENT);
  KF_ASSERT_OK(kf_event_record(foreign, nullptr));
  KF_EXPECT_ERR(kf_event_elapsed_ms(a, foreign, &ms), KF_ERROR_DEVICE_MISMATCH);
  EXPECT_EQ(ms, -7.0f);
  int32_t complete = 77;
  KF_EXPECT_ERR(kf_event_query(a, nullptr), KF_ERROR_INVALID_ARGUMENT);
  KF_ASSERT_OK(kf_event_destroy(a));
  KF_EXPECT_ERR(kf_event_destroy(a), KF_ERROR_INVALID_HANDLE);
  KF_EXPECT_ERR(kf_event_record(a, nullptr), KF_ERROR_INVALID_HANDLE);
  KF_EXPECT_ERR(kf_event_synchronize(a), KF_ERROR_INVALID_HANDLE);
  KF_EXPECT_ERR(kf_event_query(a, &complete), KF_ERROR_INVALID_HANDLE);
  EXPECT_EQ(complete, 77);
  KF_EXPECT_ERR(kf_event_elapsed_ms(a, b, &ms), KF_ERROR_INVALID_HANDLE);
  KF_EXPECT_ERR(kf_stream_wait_event(nullptr, b), KF_ERROR_INVALID_HANDLE);
  // A stream passed as an event.
  kf_stream_t* s = nullptr;
  KF_ASSERT_OK(kf_stream_create(ctx, nullptr, &s));
  KF_EXPECT_ERR(kf_event_destroy(reinterpret_cast<kf_event_t*>(s)), KF_ERROR_INVALID_HANDLE);
  KF_EXPECT_ERR(kf_stream_wait_event(s, reinterpret_cast<kf_event_t*>(s)), KF_ERROR_INVALID_HANDLE);
  EXPECT_NE(std::string(kf_get_last_error_message()).find("is a stream, not an event"),
            std::string::npos)
      << kf_get_last_error_message();
  KF_EXPECT_ERR(kf_stream_synchronize(reinterpret_cast<kf_stream_t*>(b)), KF_ERROR_INVALID_HANDLE);
  EXPECT_NE(std::string(kf_get_last_error_message()).find("is an event, not a stream"),
            std::string::npos)
      << kf_get_last_error_message();
  KF_ASSERT_OK(kf_stream_destroy(s));
  KF_ASSERT_OK(kf_event_destroy(b));
  KF_ASSERT_OK(kf_event_destroy(foreign));
}

TEST(Event, TimingIsMonotonic) {
  KF_REQUIRE_DEVICE();
  kf_test::Context ctx;
  kf_event_t *start = nullptr, *end = nullptr;
  KF_ASSERT_OK(kf_event_create(ctx, &start));
  KF_ASSERT_OK(kf_event_create(ctx, &end));
  kf_test::Tensor t = kf_test::make_tensor(ctx, KF_DTYPE_FLOAT32, {1 << 20});
  std::vector<float> data(1 << 20, 1.5f);
  KF_ASSERT_OK(kf_event_record(start, nullptr));
  KF_ASSERT_OK(kf_tensor_copy_from_host(t, data.data(), data.size() * sizeof(float), nullptr));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  KF_ASSERT_OK(kf_event_record(end, nullptr));
  float ms = -1.0f;
  KF_ASSERT_OK(kf_event_elapsed_ms(start, end, &ms));
  // The end is recorded after the sleep: on the CPU the host clock includes it; on CUDA the
  // device takes the end event only once it is enqueued, 20 ms after the start on an idle stream.
  EXPECT_GE(ms, 15.0f);
  KF_ASSERT_OK(kf_event_destroy(start));
  KF_ASSERT_OK(kf_event_destroy(end));
}

TEST(Event, CrossStreamOrdering) {
  KF_REQUIRE_DEVICE();
  kf_test::Context ctx;
  kf_stream_t *producer = nullptr, *consumer = nullptr;
  kf_stream_config_t urgent = KF_STREAM_CONFIG_INIT;
  urgent.priority = -100;
  KF_ASSERT_OK(kf_stream_create(ctx, nullptr, &producer));
  KF_ASSERT_OK(kf_stream_create(ctx, &urgent, &consumer));
  kf_event_t* written = nullptr;
  KF_ASSERT_OK(kf_event_create(ctx, &written));
  kf_tensor_desc_t desc = kf_test::make_desc(KF_DTYPE_INT32, {4097});
  for (int round = 0; round < 4; ++round) {
    kf_tensor_t* t = nullptr;
    KF_ASSERT_OK(kf_tensor_create_async(ctx, &desc, producer, &t));
    std::vector<int32_t> in(4097), out(4097, -1);
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int32_t>(i * 7 + round);
    KF_ASSERT_OK(kf_tensor_copy_from_host(t, in.data(), in.size() * 4, producer));
    KF_ASSERT_OK(kf_event_record(written, producer));
    KF_ASSERT_OK(kf_stream_wait_event(consumer, written));
    KF_ASSERT_OK(kf_tensor_copy_to_host(t, out.data(), out.size() * 4, consumer));
    EXPECT_EQ(in, out) << "round " << round;
    KF_ASSERT_OK(kf_tensor_destroy(t));  // ordered after both streams' work
  }
  KF_ASSERT_OK(kf_event_destroy(written));
  KF_ASSERT_OK(kf_stream_destroy(producer));
  KF_ASSERT_OK(kf_stream_destroy(consumer));
  KF_ASSERT_OK(kf_context_synchronize(ctx));
}

}  // namespace
