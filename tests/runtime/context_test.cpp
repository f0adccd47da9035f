// Contexts: creation from configs of every layout, devices, teardown of children, handle checks.
#include <dlfcn.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/common/test_util.hpp"

namespace {

using kf_test::device_under_test;

kf_context_t* const kSentinelContext = reinterpret_cast<kf_context_t*>(uintptr_t{0x5a5a5a5a});

int32_t cuda_device_count() {
  int32_t count = 0;
  EXPECT_EQ(kf_get_device_count(KF_DEVICE_CUDA, &count), KF_SUCCESS);
  return count;
}

TEST(Context, CreateOnDeviceUnderTest) {
  KF_REQUIRE_DEVICE();
  kf_context_config_t config = KF_CONTEXT_CONFIG_INIT;
  config.device_type = device_under_test();
  kf_context_t* ctx = nullptr;
  KF_ASSERT_OK(kf_context_create(&config, &ctx));
  kf_device_type_t type = static_cast<kf_device_type_t>(-1);
  int32_t id = -1;
  KF_ASSERT_OK(kf_context_get_device(ctx, &type, &id));
  EXPECT_EQ(type, device_under_test());
  EXPECT_EQ(id, 0);
  KF_ASSERT_OK(kf_context_get_device(ctx, nullptr, nullptr));
  KF_ASSERT_OK(kf_context_synchronize(ctx));
  KF_ASSERT_OK(kf_context_destroy(ctx));
}

TEST(Context, NullConfigPicksCudaWhenPresentElseCpu) {
  kf_context_t* ctx = nullptr;
  KF_ASSERT_OK(kf_context_create(nullptr, &ctx));
  kf_device_type_t type;
  KF_ASSERT_OK(kf_context_get_device(ctx, &type, nullptr));
  EXPECT_EQ(type, cuda_device_count() > 0 ? KF_DEVICE_CUDA : KF_DEVICE_CPU);
  KF_ASSERT_OK(kf_context_destroy(ctx));
}

TEST(Context, CudaWithoutDeviceIsNoDevice) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  kf_context_config_t config = KF_CONTEXT_CONFIG_INIT;
  config.device_type = KF_DEVICE_CUDA;
  kf_context_t* ctx = kSentinelContext;
  // Also in a CPU-only build: no usable CUDA device either way.
  KF_EXPECT_ERR(kf_context_create(&config, &ctx), KF_ERROR_NO_DEVICE);
  EXPECT_EQ(ctx, kSentinelContext);
  EXPECT_NE(std::string(kf_get_last_error_message()).find("CUDA"), std::string::npos);
}

TEST(Context, CudaDeviceIdOutOfRange) {
  int32_t count = cuda_device_count();
  if (count == 0) GTEST_SKIP() << "no CUDA device present";
  kf_context_config_t config = KF_CONTEXT_CONFIG_INIT;
  config.device_type = KF_DEVICE_CUDA;
  config.device_id = count;
  kf_context_t* ctx = kSentinelContext;
  KF_EXPECT_ERR(kf_context_create(&config, &ctx), KF_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(ctx, kSentinelContext);
}

// Some work on a CPU context, then the driver's own answer to whether this process holds a CUDA
// primary context (the CUDA runtime creates one when first used): 0 when it does not, 3 when it
// does, 1 or 2 when the work or the driver query failed. Run in a fresh process.
int cpu_work_then_primary_context_state() {
  kf_context_config_t config = KF_CONTEXT_CONFIG_INIT;
  config.device_type = KF_DEVICE_CPU;
  kf_context_t* ctx = nullptr;
  if (kf_context_create(&config, &ctx) != KF_SUCCESS) return 1;
  const kf_tensor_desc_t desc = kf_test::make_desc(KF_DTYPE_FLOAT32, {3, 5});
  const std::vector<float> host = {1.5f,  -2.0f, 0.25f, 3.0f, -0.5f, 1.0f,   2.0f, -1.25f,
                                   0.75f, 4.0f,  -3.5f, 0.5f, 1.75f, -0.25f, 2.5f};
  std::vector<float> back(host.size(), -7.0f);
  kf_stream_t* s = nullptr;
  kf_event_t* e = nullptr;
  kf_tensor_t* a = nullptr;
  kf_tensor_t* out = nullptr;
  float ms = 0;
  // Braced initialisers run in order; after a failure the later calls get null handles and
  // fail cleanly too.
  const kf_result_t results[] = {
      kf_stream_create(ctx, nullptr, &s),
      kf_event_create(ctx, &e),
      kf_tensor_create(ctx, &desc, &a),
      kf_tensor_create(ctx, &desc, &out),
      kf_tensor_copy_from_host(a, host.data(), host.size() * sizeof(float), s),
      kf_event_record(e, s),
      kf_fused_elementwise_add_activation(ctx, a, a, out, KF_ACTIVATION_RELU, s),
      kf_stream_wait_event(s, e),
      kf_event_synchronize(e),
      kf_event_elapsed_ms(e, e, &ms),
      kf_stream_synchronize(s),
      kf_context_synchronize(ctx),
      kf_tensor_copy_to_host(out, back.data(), back.size() * sizeof(float), s),
      kf_tensor_destroy(a),
      kf_event_destroy(e),
      kf_stream_destroy(s),
      kf_context_trim_memory(ctx, 0)};
  bool ok = std::all_of(std::begin(results), std::end(results),
                        [](kf_result_t r) { return r == KF_SUCCESS; });
  for (size_t i = 0; ok && i < host.size(); ++i) ok = back[i] == std::max(2 * host[i], 0.0f);
  ok = kf_context_destroy(ctx) == KF_SUCCESS && ok;  // the output tensor with it
  if (!ok) return 1;
  // The driver API, reached the way the CUDA runtime reaches it (this test does not link it).
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver == nullptr) return 2;
  using InitFn = int (*)(unsigned);
  using DeviceGetFn = int (*)(int*, int);
  using StateFn = int (*)(int, unsigned*, int*);
  const auto init = reinterpret_cast<InitFn>(dlsym(driver, "cuInit"));
  const auto device_get = reinterpret_cast<DeviceGetFn>(dlsym(driver, "cuDeviceGet"));
  const auto state = reinterpret_cast<StateFn>(dlsym(driver, "cuDevicePrimaryCtxGetState"));
  int device = -1, active = -1;
  unsigned flags = 0;
  if (init == nullptr || device_get == nullptr || state == nullptr || init(0) != 0 ||
      device_get(&device, 0) != 0 || state(device, &flags, &active) != 0)
    return 2;
  return active == 0 ? 0 : 3;
}

// A CPU context used and destroyed in a process on a GPU machine leaves the GPU alone: no CUDA
// primary context (kf_context_destroy once waited for a CPU context's streams through
// cudaStreamSynchronize(nullptr), which created one: about 0.2 s and device memory per process,
// seconds when many such processes start together). Runs in the CPU variant, on a machine
// with a CUDA device (elsewhere there is nothing to observe), in a death-test child: a fresh
// process whose only CUDA use before the work is the device count of the test's first line.
TEST(Context, CpuContextLeavesTheGpuAlone) {
  if (device_under_test() != KF_DEVICE_CPU) GTEST_SKIP() << "checked by the CPU variant";
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device here to leave alone";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::exit(cpu_work_then_primary_context_state()), testing::ExitedWithCode(0), "")
      << "exit 3: the process holds a CUDA primary context after CPU-only work; 1: the work "
         "failed; 2: the driver API could not be queried";
}

TEST(Context, CreateErrorsLeaveOutUntouched) {
  kf_context_config_t config = KF_CONTEXT_CONFIG_INIT;
  KF_EXPECT_ERR(kf_context_create(&config, nullptr), KF_ERROR_INVALID_ARGUMENT);
  kf_context_t* ctx = kSentinelContext;

  config.struct_size = sizeof(size_t);
  KF_EXPECT_ERR(kf_context_create(&config, &ctx), KF_ERROR_VERSION_MISMATCH);
  config.struct_size = 0;
  KF_EXPECT_ERR(kf_context_create(&config, &ctx), KF_ERROR_VERSION_MISMATCH);

  config = KF_CONTEXT_CONFIG_INIT;
  config.device_id = 1;
  KF_EXPECT_ERR(kf_context_create(&config, &ctx), KF_ERROR_INVALID_ARGUMENT);
  config = KF_CONTEXT_CONFIG_INIT;
  config.device_type = static_cast<kf_device_type_t>(7);
  KF_EXPECT_ERR(kf_context_create(&config, &ctx), KF_ERROR_INVALID_ARGUMENT);
  config = KF_CONTEXT_CONFIG_INIT;
  config.cpu_threads = -2;
  KF_EXPECT_ERR(kf_context_create(&config, &ctx), KF_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(ctx, kSentinelContext);
}

TEST(Context, OlderConfigLayoutReadsOnlyWhatFits) {
  KF_REQUIRE_DEVICE();
  // A caller compiled against a layout that ends after device_id: the garbage after it is ignored.
  kf_context_config_t config;
  std::memset(&config, 0x7f, sizeof(config));
  config.struct_size = offsetof(kf_context_config_t, device_id) + sizeof(int32_t);
  config.device_type = device_under_test();
  config.device_id = 0;
  kf_context_t* ctx = nullptr;
  KF_ASSERT_OK(kf_context_create(&config, &ctx));
  kf_memory_stats_t stats{};
  stats.struct_size = sizeof(stats);
  KF_ASSERT_OK(kf_context_get_memory_stats(ctx, &stats));
  EXPECT_EQ(stats.limit_bytes, 0u);
  KF_ASSERT_OK(kf_context_destroy(ctx));

  // A newer, larger layout is read while its fields unknown here are zero, as its _INIT leaves
  // them; a value there asks for something this library does not have, and is refused.
  struct Newer {
    kf_context_config_t base;
    uint64_t future_field;
  } newer{};
  newer.base = KF_CONTEXT_CONFIG_INIT;
  newer.base.struct_size = sizeof(newer);
  newer.base.device_type = device_under_test();
  KF_ASSERT_OK(kf_context_create(&newer.base, &ctx));
  KF_ASSERT_OK(kf_context_destroy(ctx));
  ctx = kSentinelContext;
  newer.future_field = 123;
  KF_EXPECT_ERR(kf_context_create(&newer.base, &ctx), KF_ERROR_VERSION_MISMATCH);
  EXPECT_NE(
      std::string(kf_get_last_error_message()).find("config->struct_size is 40, and its byte 32"),
      std::string::npos)
      << kf_get_last_error_message();
  EXPECT_EQ(ctx, kSentinelContext);
}

TEST(Context, CpuThreadsConfig) {
  kf_context_config_t config = KF_CONTEXT_CONFIG_INIT;
  config.cpu_threads = 3;
  kf_context_t* ctx = nullptr;
  KF_ASSERT_OK(kf_context_create(&config, &ctx));
  KF_ASSERT_OK(kf_context_destroy(ctx));
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define KF_TEST_UNDER_SANITIZER 1
#endif

// In a child process: caps the address space just above what the process uses, so that no thread
// stack can be mapped, and asks for 4096 CPU threads. 0 when that gives KF_ERROR_OUT_OF_MEMORY
// with the documented message and no context.
int create_with_refused_threads() {
  long pages = 0;
  FILE* statm = std::fopen("/proc/self/statm", "r");
  if (statm == nullptr) return 2;
  const int read = std::fscanf(statm, "%ld", &pages);
  std::fclose(statm);
  if (read != 1) return 2;
  const rlim_t cap = static_cast<rlim_t>(pages) * 4096 + (rlim_t{256} << 20);
  struct rlimit limit;
  limit.rlim_cur = cap;
  limit.rlim_max = cap;
  if (setrlimit(RLIMIT_AS, &limit) != 0) return 3;
  kf_context_config_t config = KF_CONTEXT_CONFIG_INIT;
  config.cpu_threads = 4096;  // 8 MiB stacks: far past the cap
  kf_context_t* ctx = nullptr;
  const kf_result_t r = kf_context_create(&config, &ctx);
  const std::string message = kf_get_last_error_message();
  std::fprintf(stderr, "%s: %s\n", kf_result_string(r), message.c_str());
  const bool documented =
      message.find("could not start the CPU backend's 4096 threads") != std::string::npos;
  return r == KF_ERROR_OUT_OF_MEMORY && ctx == nullptr && documented ? 0 : 1;
}

// Threads the system refuses are a resource the caller can ask less of: KF_ERROR_OUT_OF_MEMORY
// with what happened, not KF_ERROR_INTERNAL ("a bug in the library").
TEST(Context, RefusedWorkerThreadsAreOutOfMemory) {
#if defined(KF_TEST_UNDER_SANITIZER)
  GTEST_SKIP() << "the sanitizers reserve address space that the cap would take away";
#else
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::_Exit(create_with_refused_threads()), ::testing::ExitedWithCode(0),
              "KF_ERROR_OUT_OF_MEMORY: could not start");
#endif
}

TEST(Context, DestroyChecksHandles) {
  KF_REQUIRE_DEVICE();
  KF_ASSERT_OK(kf_context_destroy(nullptr));
  kf_test::Context holder;
  ASSERT_NE(holder.ctx, nullptr);
  kf_context_t* ctx = nullptr;
  kf_context_config_t config = KF_CONTEXT_CONFIG_INIT;
  KF_ASSERT_OK(kf_context_create(&config, &ctx));
  KF_ASSERT_OK(kf_context_destroy(ctx));
  KF_EXPECT_ERR(kf_context_destroy(ctx), KF_ERROR_INVALID_HANDLE);  // destroyed
  KF_EXPECT_ERR(kf_context_synchronize(ctx), KF_ERROR_INVALID_HANDLE);
  int not_a_handle = 0;
  KF_EXPECT_ERR(kf_context_destroy(reinterpret_cast<kf_context_t*>(&not_a_handle)),
                KF_ERROR_INVALID_HANDLE);
  // Wrong kind: a stream passed as a context.
  kf_stream_t* s = nullptr;
  KF_ASSERT_OK(kf_stream_create(holder, nullptr, &s));
  KF_EXPECT_ERR(kf_context_destroy(reinterpret_cast<kf_context_t*>(s)), KF_ERROR_INVALID_HANDLE);
  EXPECT_NE(std::string(kf_get_last_error_message()).find("stream"), std::string::npos);
  KF_ASSERT_OK(kf_stream_destroy(s));
}

TEST(Context, QueriesCheckHandles) {
  kf_context_t* bogus = kSentinelContext;
  kf_device_type_t type = KF_DEVICE_CUDA;  // sentinel
  KF_EXPECT_ERR(kf_context_get_device(bogus, &type, nullptr), KF_ERROR_INVALID_HANDLE);
  EXPECT_EQ(type, KF_DEVICE_CUDA);
  int32_t least = 77, greatest = 77;
  KF_EXPECT_ERR(kf_context_get_stream_priority_range(bogus, &least, &greatest),
                KF_ERROR_INVALID_HANDLE);
  EXPECT_EQ(least, 77);
  kf_memory_stats_t stats{};
  stats.struct_size = sizeof(stats);
  KF_EXPECT_ERR(kf_context_get_memory_stats(bogus, &stats), KF_ERROR_INVALID_HANDLE);
  KF_EXPECT_ERR(kf_context_reset_peak_memory(bogus), KF_ERROR_INVALID_HANDLE);
  KF_EXPECT_ERR(kf_context_trim_memory(bogus, 0), KF_ERROR_INVALID_HANDLE);
  KF_EXPECT_ERR(kf_context_synchronize(nullptr), KF_ERROR_INVALID_HANDLE);
}

TEST(Context, PriorityRange) {
  KF_REQUIRE_DEVICE();
  kf_test::Context ctx;
  int32_t least = 77, greatest = 77;
  KF_ASSERT_OK(kf_context_get_stream_priority_range(ctx, &least, &greatest));
  EXPECT_GE(least, greatest);
  if (device_under_test() == KF_DEVICE_CPU) {
    EXPECT_EQ(least, 0);
    EXPECT_EQ(greatest, 0);
  }
  KF_ASSERT_OK(kf_context_get_stream_priority_range(ctx, nullptr, nullptr));
}

void count_deleter(void* /*data*/, void* user_data) { ++*static_cast<int*>(user_data); }

TEST(Context, DestroyReleasesEveryChild) {
  KF_REQUIRE_DEVICE();
  kf_context_config_t config = KF_CONTEXT_CONFIG_INIT;
  config.device_type = device_under_test();
  kf_context_t* ctx = nullptr;
  KF_ASSERT_OK(kf_context_create(&config, &ctx));
  kf_stream_t* s = nullptr;
  kf_event_t* e = nullptr;
  kf_tensor_t* t = nullptr;
  kf_tensor_t* view = nullptr;
  kf_tensor_t* wrapped = nullptr;
  KF_ASSERT_OK(kf_stream_create(ctx, nullptr, &s));
  KF_ASSERT_OK(kf_event_create(ctx, &e));
  KF_ASSERT_OK(kf_event_record(e, s));
  kf_tensor_desc_t desc = kf_test::make_desc(KF_DTYPE_FLOAT32, {16, 4});
  KF_ASSERT_OK(kf_tensor_create_async(ctx, &desc, s, &t));
  kf_tensor_desc_t row = kf_test::make_desc(KF_DTYPE_FLOAT32, {4});
  KF_ASSERT_OK(kf_tensor_create_view(t, &row, 8, &view));
  void* memory = nullptr;
  KF_ASSERT_OK(kf_tensor_get_data(t, &memory));
  int deleted = 0;
  KF_ASSERT_OK(
      kf_tensor_wrap(ctx, &row, memory, 16 * sizeof(float), &count_deleter, &deleted, &wrapped));
  KF_ASSERT_OK(kf_context_destroy(ctx));
  EXPECT_EQ(deleted, 1);
  KF_EXPECT_ERR(kf_stream_destroy(s), KF_ERROR_INVALID_HANDLE);
  KF_EXPECT_ERR(kf_event_destroy(e), KF_ERROR_INVALID_HANDLE);
  KF_EXPECT_ERR(kf_tensor_destroy(t), KF_ERROR_INVALID_HANDLE);
  KF_EXPECT_ERR(kf_tensor_destroy(view), KF_ERROR_INVALID_HANDLE);
  KF_EXPECT_ERR(kf_tensor_destroy(wrapped), KF_ERROR_INVALID_HANDLE);
  EXPECT_EQ(deleted, 1);
}

}  // namespace
