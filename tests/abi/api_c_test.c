/* The C API used from plain C, as a C program would (after oneDNN's tests/api.c): library
 * information, devices, a CPU context, streams, events, tensors, views, borrowed memory, both
 * fused ops against a float64 reference, a fusion graph, memory statistics and error reporting. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_fusion/kernel_fusion.h"

#include "c_check.h"

/* Stops the test unless the call succeeded. */
#define CHECK_OK(call)                                                                  \
  do {                                                                                  \
    kf_result_t r_ = (call);                                                            \
    if (r_ != KF_SUCCESS) {                                                             \
      fprintf(stderr, "%s:%d: FAILED: %s returned %s: %s\n", __FILE__, __LINE__, #call, \
              kf_result_string(r_), kf_get_last_error_message());                       \
      exit(1);                                                                          \
    }                                                                                   \
  } while (0)

/* The call fails with `code` and leaves a message. */
#define CHECK_ERROR(call, code)                                                             \
  do {                                                                                      \
    kf_result_t r_ = (call);                                                                \
    CHECK(r_ == (code), "%s returned %s, expected %s", #call, kf_result_string(r_), #code); \
    CHECK(kf_get_last_error_message()[0] != '\0', "%s left no message", #call);             \
  } while (0)

/* Uniform in [-2, 2), never exactly zero; deterministic. */
static unsigned long long rng_state = 0x9e3779b97f4a7c15ULL;
static float random_value(void) {
  float v;
  do {
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    v = (float)((double)(rng_state >> 11) / 9007199254740992.0 * 4.0 - 2.0);
  } while (v == 0.0f);
  return v;
}

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

static int close_enough(float got, double expected) {
  return fabs((double)got - expected) <= 1e-5 * fabs(expected) + 1e-6;
}

static void test_library(void) {
  static const kf_result_t codes[] = {KF_SUCCESS,
                                      KF_ERROR_INVALID_ARGUMENT,
                                      KF_ERROR_INVALID_HANDLE,
                                      KF_ERROR_OUT_OF_MEMORY,
                                      KF_ERROR_NOT_SUPPORTED,
                                      KF_ERROR_SHAPE_MISMATCH,
                                      KF_ERROR_DTYPE_MISMATCH,
                                      KF_ERROR_DEVICE_MISMATCH,
                                      KF_ERROR_NO_DEVICE,
                                      KF_ERROR_CUDA,
                                      KF_ERROR_VERSION_MISMATCH,
                                      KF_ERROR_INTERNAL};
  static const char* const names[] = {"KF_SUCCESS",
                                      "KF_ERROR_INVALID_ARGUMENT",
                                      "KF_ERROR_INVALID_HANDLE",
                                      "KF_ERROR_OUT_OF_MEMORY",
                                      "KF_ERROR_NOT_SUPPORTED",
                                      "KF_ERROR_SHAPE_MISMATCH",
                                      "KF_ERROR_DTYPE_MISMATCH",
                                      "KF_ERROR_DEVICE_MISMATCH",
                                      "KF_ERROR_NO_DEVICE",
                                      "KF_ERROR_CUDA",
                                      "KF_ERROR_VERSION_MISMATCH",
                                      "KF_ERROR_INTERNAL"};
  size_t i;
  for (i = 0; i < sizeof codes / sizeof codes[0]; ++i) {
    CHECK(strcmp(kf_result_string(codes[i]), names[i]) == 0, "kf_result_string(%d) = %s",
          (int)codes[i], kf_result_string(codes[i]));
  }
  CHECK(strcmp(kf_result_string((kf_result_t)12345), "KF_ERROR_UNKNOWN") == 0, "unknown code: %s",
        kf_result_string((kf_result_t)12345));
  CHECK(kf_get_version() == KF_VERSION, "version %u, headers %u", (unsigned)kf_get_version(),
        (unsigned)KF_VERSION);
  CHECK(kf_dtype_size(KF_DTYPE_FLOAT32) == 4 && kf_dtype_size(KF_DTYPE_FLOAT16) == 2 &&
            kf_dtype_size(KF_DTYPE_BFLOAT16) == 2 && kf_dtype_size(KF_DTYPE_FLOAT64) == 8 &&
            kf_dtype_size(KF_DTYPE_INT8) == 1 && kf_dtype_size(KF_DTYPE_INT64) == 8,
        "kf_dtype_size");
  CHECK(kf_dtype_size((kf_dtype_t)99) == 0, "kf_dtype_size of an unknown dtype");
}

static void test_devices(void) {
  int32_t count = -1;
  kf_device_properties_t props = KF_DEVICE_PROPERTIES_INIT;
  CHECK_OK(kf_get_device_count(KF_DEVICE_CPU, &count));
  CHECK(count == 1, "CPU device count %d", (int)count);
  CHECK_ERROR(kf_get_device_count(KF_DEVICE_CPU, NULL), KF_ERROR_INVALID_ARGUMENT);
  CHECK(props.struct_size == sizeof props, "KF_DEVICE_PROPERTIES_INIT sets struct_size");
  CHECK_OK(kf_get_device_properties(KF_DEVICE_CPU, 0, &props));
  CHECK(props.device_type == KF_DEVICE_CPU, "CPU properties: device_type %d",
        (int)props.device_type);
  CHECK(props.name[0] != '\0', "CPU properties: empty name");
  CHECK(props.multiprocessor_count >= 1, "CPU properties: %d cores",
        (int)props.multiprocessor_count);
  CHECK_ERROR(kf_get_device_properties(KF_DEVICE_CPU, 1, &props), KF_ERROR_INVALID_ARGUMENT);
}

/* out = act(a op b) for a [rows, cols] tensor and a broadcast [cols] row, via a transposed view
 * of `a` so that the op reads a non-contiguous input. */
static void test_ops(kf_context_t* ctx, kf_stream_t* stream) {
  enum { ROWS = 5, COLS = 33 };
  static float a_host[COLS * ROWS]; /* stored as [COLS, ROWS]; the op reads its transpose */
  static float b_host[COLS];
  static float out_host[ROWS * COLS];
  kf_tensor_desc_t storage_desc = {2, {COLS, ROWS}, {0}, KF_DTYPE_FLOAT32};
  kf_tensor_desc_t view_desc = {2, {ROWS, COLS}, {1, ROWS}, KF_DTYPE_FLOAT32};
  kf_tensor_desc_t row_desc = {1, {COLS}, {0}, KF_DTYPE_FLOAT32};
  kf_tensor_desc_t out_desc = {2, {ROWS, COLS}, {0}, KF_DTYPE_FLOAT32};
  kf_tensor_desc_t bad_desc = {1, {COLS + 1}, {0}, KF_DTYPE_FLOAT32};
  kf_tensor_desc_t seen;
  kf_tensor_t *storage, *a, *b, *out, *bad;
  size_t r, c;

  for (r = 0; r < COLS * ROWS; ++r) a_host[r] = random_value();
  for (c = 0; c < COLS; ++c) b_host[c] = random_value();

  CHECK_OK(kf_tensor_create(ctx, &storage_desc, &storage));
  CHECK_OK(kf_tensor_create_view(storage, &view_desc, 0, &a));
  CHECK_OK(kf_tensor_create(ctx, &row_desc, &b));
  CHECK_OK(kf_tensor_create_async(ctx, &out_desc, stream, &out));
  CHECK_OK(kf_tensor_copy_from_host(storage, a_host, sizeof a_host, stream));
  CHECK_OK(kf_tensor_copy_from_host(b, b_host, sizeof b_host, NULL));

  CHECK_OK(kf_tensor_get_desc(a, &seen));
  CHECK(seen.ndim == 2 && seen.shape[0] == ROWS && seen.strides[0] == 1 && seen.strides[1] == ROWS,
        "view desc: ndim %d strides [%lld, %lld]", (int)seen.ndim, (long long)seen.strides[0],
        (long long)seen.strides[1]);

  CHECK_OK(kf_fused_elementwise_add_activation(ctx, a, b, out, KF_ACTIVATION_SIGMOID, stream));
  CHECK_OK(kf_tensor_copy_to_host(out, out_host, sizeof out_host, stream));
  for (r = 0; r < ROWS; ++r) {
    for (c = 0; c < COLS; ++c) {
      double expected = sigmoid((double)a_host[c * ROWS + r] + (double)b_host[c]);
      CHECK(close_enough(out_host[r * COLS + c], expected),
            "add+sigmoid [%zu,%zu] = %.9g, want %.9g", r, c, (double)out_host[r * COLS + c],
            expected);
    }
  }

  /* In place: out = relu(out * b). */
  CHECK_OK(kf_fused_elementwise_mul_activation(ctx, out, b, out, KF_ACTIVATION_RELU, NULL));
  {
    static float prev[ROWS * COLS];
    memcpy(prev, out_host, sizeof prev);
    CHECK_OK(kf_tensor_copy_to_host(out, out_host, sizeof out_host, NULL));
    for (r = 0; r < ROWS * COLS; ++r) {
      double product = (double)prev[r] * (double)b_host[r % COLS];
      double expected = product > 0.0 ? product : 0.0;
      CHECK(close_enough(out_host[r], expected), "mul+relu [%zu] = %.9g, want %.9g", r,
            (double)out_host[r], expected);
    }
  }

  /* Errors: not broadcastable, wrong byte count, unknown activation. */
  CHECK_OK(kf_tensor_create(ctx, &bad_desc, &bad));
  CHECK_ERROR(kf_fused_elementwise_add_activation(ctx, a, bad, out, KF_ACTIVATION_NONE, NULL),
              KF_ERROR_SHAPE_MISMATCH);
  CHECK(strstr(kf_get_last_error_message(), "[34]") != NULL ||
            strstr(kf_get_last_error_message(), "34") != NULL,
        "the shape message should name the shape: %s", kf_get_last_error_message());
  CHECK_ERROR(kf_tensor_copy_to_host(out, out_host, sizeof out_host - 1, NULL),
              KF_ERROR_INVALID_ARGUMENT);
  CHECK_ERROR(kf_fused_elementwise_add_activation(ctx, a, b, out, (kf_activation_t)77, NULL),
              KF_ERROR_INVALID_ARGUMENT);

  /* The view outlives its base. */
  CHECK_OK(kf_tensor_destroy(storage));
  CHECK_OK(kf_tensor_get_desc(a, &seen));
  CHECK_OK(kf_tensor_destroy(a));
  CHECK_OK(kf_tensor_destroy(b));
  CHECK_OK(kf_tensor_destroy(bad));
  CHECK_OK(kf_tensor_destroy(out));
}

static int deleter_calls = 0;
static void count_deleter(void* data, void* user_data) {
  CHECK(data == user_data, "deleter arguments");
  ++deleter_calls;
}

static void test_borrowed_memory(kf_context_t* ctx) {
  static float host[12];
  kf_tensor_desc_t desc = {2, {3, 4}, {0}, KF_DTYPE_FLOAT32};
  kf_tensor_t* t = NULL;
  kf_tensor_t* view = NULL;
  kf_tensor_desc_t row = {1, {4}, {0}, KF_DTYPE_FLOAT32};
  void* data = NULL;
  kf_context_t* owner = NULL;
  kf_device_type_t type = KF_DEVICE_CUDA;
  int32_t id = -1;

  CHECK_ERROR(kf_tensor_wrap(ctx, &desc, host, sizeof host - 4, count_deleter, host, &t),
              KF_ERROR_INVALID_ARGUMENT);
  CHECK(t == NULL && deleter_calls == 0, "a failed wrap must not touch out or call the deleter");
  CHECK_OK(kf_tensor_wrap(ctx, &desc, host, sizeof host, count_deleter, host, &t));
  CHECK_OK(kf_tensor_get_data(t, &data));
  CHECK(data == (void*)host, "kf_tensor_get_data of a wrapped tensor");
  CHECK_OK(kf_tensor_get_context(t, &owner));
  CHECK(owner == ctx, "kf_tensor_get_context");
  CHECK_OK(kf_tensor_get_device(t, &type, &id));
  CHECK(type == KF_DEVICE_CPU && id == 0, "kf_tensor_get_device");
  CHECK_OK(kf_tensor_create_view(t, &row, 8, &view)); /* the last row */
  {
    kf_tensor_t* outside = NULL;
    CHECK_ERROR(kf_tensor_create_view(t, &row, 9, &outside), KF_ERROR_INVALID_ARGUMENT);
    CHECK(outside == NULL, "a failing call wrote its out-parameter");
  }
  CHECK_OK(kf_tensor_destroy(t));
  CHECK(deleter_calls == 0, "deleter ran while a view still uses the memory");
  CHECK_OK(kf_tensor_destroy(view));
  CHECK(deleter_calls == 1, "deleter ran %d times, expected once", deleter_calls);

  /* The same memory with a home stream (kf_tensor_wrap_async). */
  {
    kf_stream_t* home = NULL;
    float back[12];
    int i;
    CHECK_OK(kf_stream_create(ctx, NULL, &home));
    CHECK_OK(kf_tensor_wrap_async(ctx, &desc, host, sizeof host, count_deleter, host, home, &t));
    for (i = 0; i < 12; ++i) back[i] = (float)(3 * i + 1);
    CHECK_OK(kf_tensor_copy_from_host(t, back, sizeof back, home));
    CHECK_OK(kf_stream_synchronize(home));
    CHECK(host[11] == 34.0f, "a write through the tensor of kf_tensor_wrap_async");
    CHECK_OK(kf_tensor_destroy(t));
    CHECK(deleter_calls == 2, "deleter ran %d times in all, expected twice", deleter_calls);
    CHECK_OK(kf_stream_destroy(home));
  }
}

static void test_streams_and_events(kf_context_t* ctx, kf_stream_t** stream_out) {
  kf_stream_config_t config = KF_STREAM_CONFIG_INIT;
  kf_stream_t* stream = NULL;
  kf_event_t *start = NULL, *end = NULL;
  int32_t least = 1, greatest = 1, priority = 1, complete = -1;
  void* native = (void*)&config;
  float ms = -1.0f;

  CHECK_OK(kf_context_get_stream_priority_range(ctx, &least, &greatest));
  CHECK(greatest <= least, "priority range [%d, %d]", (int)greatest, (int)least);
  config.priority = -1000; /* clamped */
  CHECK_OK(kf_stream_create(ctx, &config, &stream));
  CHECK_OK(kf_stream_get_priority(stream, &priority));
  CHECK(priority == greatest, "priority %d not clamped to %d", (int)priority, (int)greatest);
  CHECK_OK(kf_stream_get_native(stream, &native));
  CHECK(native == NULL, "a CPU stream has no native handle");
  {
    kf_stream_t* wrapped = NULL;
    CHECK_ERROR(kf_stream_wrap_native(ctx, NULL, &wrapped), KF_ERROR_NOT_SUPPORTED);
    CHECK(wrapped == NULL, "a failing call wrote its out-parameter");
  }

  CHECK_OK(kf_event_create(ctx, &start));
  CHECK_OK(kf_event_create(ctx, &end));
  CHECK_OK(kf_event_query(start, &complete));
  CHECK(complete == 1, "an unrecorded event is complete");
  CHECK_ERROR(kf_event_elapsed_ms(start, end, &ms), KF_ERROR_INVALID_ARGUMENT);
  CHECK_OK(kf_event_record(start, stream));
  CHECK_OK(kf_event_record(end, NULL));
  CHECK_OK(kf_stream_wait_event(stream, end));
  CHECK_OK(kf_event_synchronize(end));
  CHECK_OK(kf_stream_synchronize(stream));
  CHECK_OK(kf_event_elapsed_ms(start, end, &ms));
  CHECK(ms >= 0.0f, "elapsed %f ms", (double)ms);
  CHECK_OK(kf_event_destroy(start));
  CHECK_OK(kf_event_destroy(end));
  CHECK_ERROR(kf_event_record(end, NULL), KF_ERROR_INVALID_HANDLE);
  *stream_out = stream;
}

static void test_memory_stats(kf_context_t* ctx) {
  kf_memory_stats_t stats = KF_MEMORY_STATS_INIT;
  kf_tensor_desc_t desc = {1, {1000}, {0}, KF_DTYPE_FLOAT64};
  kf_tensor_t* t = NULL;
  uint64_t before;
  CHECK(stats.struct_size == sizeof stats, "KF_MEMORY_STATS_INIT sets struct_size");
  CHECK_OK(kf_context_get_memory_stats(ctx, &stats));
  before = stats.in_use_bytes;
  CHECK_OK(kf_tensor_create(ctx, &desc, &t));
  CHECK_OK(kf_context_get_memory_stats(ctx, &stats));
  CHECK(stats.in_use_bytes >= before + 8000, "in_use %llu after an 8000-byte tensor",
        (unsigned long long)stats.in_use_bytes);
  CHECK(stats.peak_in_use_bytes >= stats.in_use_bytes, "peak below in use");
  CHECK(stats.reserved_bytes >= stats.in_use_bytes, "reserved below in use");
  CHECK_OK(kf_tensor_destroy(t));
  CHECK_OK(kf_context_reset_peak_memory(ctx));
  CHECK_OK(kf_context_trim_memory(ctx, 0));
  CHECK_OK(kf_context_get_memory_stats(ctx, &stats));
  CHECK(stats.in_use_bytes == before, "in_use %llu after destroy, was %llu",
        (unsigned long long)stats.in_use_bytes, (unsigned long long)before);
  stats.struct_size = 1;
  CHECK_ERROR(kf_context_get_memory_stats(ctx, &stats), KF_ERROR_INVALID_ARGUMENT);
}

static void test_errors(kf_context_t* ctx) {
  kf_tensor_desc_t desc = {1, {4}, {0}, KF_DTYPE_FLOAT32};
  kf_tensor_desc_t too_many = {9, {1}, {0}, KF_DTYPE_FLOAT32};
  kf_tensor_desc_t negative = {1, {-1}, {0}, KF_DTYPE_FLOAT32};
  kf_tensor_desc_t huge = {2, {INT64_C(1) << 40, INT64_C(1) << 40}, {0}, KF_DTYPE_FLOAT32};
  kf_tensor_t* sentinel = (kf_tensor_t*)&desc;
  kf_tensor_t* t = sentinel;
  kf_context_t* dead = NULL;
  kf_context_config_t config = KF_CONTEXT_CONFIG_INIT;

  CHECK_ERROR(kf_tensor_create(ctx, &too_many, &t), KF_ERROR_INVALID_ARGUMENT);
  CHECK_ERROR(kf_tensor_create(ctx, &negative, &t), KF_ERROR_INVALID_ARGUMENT);
  CHECK_ERROR(kf_tensor_create(ctx, &huge, &t), KF_ERROR_INVALID_ARGUMENT);
  CHECK_ERROR(kf_tensor_create(ctx, NULL, &t), KF_ERROR_INVALID_ARGUMENT);
  CHECK_ERROR(kf_tensor_create(ctx, &desc, NULL), KF_ERROR_INVALID_ARGUMENT);
  CHECK(t == sentinel, "a failing call wrote its out-parameter");
  CHECK_ERROR(kf_tensor_destroy((kf_tensor_t*)ctx), KF_ERROR_INVALID_HANDLE);
  CHECK_OK(kf_tensor_destroy(NULL));
  CHECK_OK(kf_context_destroy(NULL));
  CHECK(kf_get_last_error_message()[0] == '\0', "a successful call clears the message");

  config.device_type = KF_DEVICE_CPU;
  CHECK_OK(kf_context_create(&config, &dead));
  CHECK_OK(kf_context_destroy(dead));
  CHECK_ERROR(kf_tensor_create(dead, &desc, &t), KF_ERROR_INVALID_HANDLE);
  CHECK_ERROR(kf_context_destroy(dead), KF_ERROR_INVALID_HANDLE);
  config.struct_size = 1;
  CHECK_ERROR(kf_context_create(&config, &dead), KF_ERROR_VERSION_MISMATCH);
}

/* The fusion engine from C: out = relu(x * factor + y) with y broadcast over rows, compiled for
 * two items and launched with a value override in the second launch; then one builder error. */
static void test_fusion_graph(kf_context_t* ctx, kf_stream_t* stream) {
  enum { ROWS = 3, COLS = 5 };
  static float x_host[ROWS * COLS], y_host[COLS], out_host[ROWS * COLS];
  kf_tensor_desc_t xd = {2, {ROWS, COLS}, {0}, KF_DTYPE_FLOAT32};
  kf_tensor_desc_t yd = {1, {COLS}, {0}, KF_DTYPE_FLOAT32};
  kf_graph_input_desc_t input = KF_GRAPH_INPUT_DESC_INIT;
  kf_compile_options_t options = KF_COMPILE_OPTIONS_INIT;
  kf_launch_args_t args = KF_LAUNCH_ARGS_INIT;
  kf_fused_kernel_info_t info = KF_FUSED_KERNEL_INFO_INIT;
  kf_fused_value_t override_factor;
  kf_graph_t* graph = NULL;
  kf_fused_kernel_t* kernel = NULL;
  kf_tensor_t *x = NULL, *y = NULL, *out = NULL;
  const kf_tensor_t* inputs[2];
  kf_tensor_t* outputs[1];
  int32_t xn, yn, factor, product, sum, result, index = -1, bad = -1;
  double factors[2] = {2.0, -0.5};
  int pass, i;

  for (i = 0; i < ROWS * COLS; ++i) x_host[i] = random_value();
  for (i = 0; i < COLS; ++i) y_host[i] = random_value();
  CHECK_OK(kf_tensor_create(ctx, &xd, &x));
  CHECK_OK(kf_tensor_create(ctx, &yd, &y));
  CHECK_OK(kf_tensor_create(ctx, &xd, &out));
  CHECK_OK(kf_tensor_copy_from_host(x, x_host, sizeof x_host, stream));
  CHECK_OK(kf_tensor_copy_from_host(y, y_host, sizeof y_host, stream));

  CHECK_OK(kf_graph_create(ctx, &graph));
  input.rank = 2;
  CHECK_OK(kf_graph_input(graph, &input, &xn));
  input.rank = 1;
  CHECK_OK(kf_graph_input(graph, &input, &yn));
  CHECK_OK(kf_graph_scalar(graph, factors[0], &factor));
  CHECK_OK(kf_graph_binary(graph, KF_BINARY_MUL, xn, factor, &product));
  CHECK_OK(kf_graph_binary(graph, KF_BINARY_ADD, product, yn, &sum));
  CHECK_OK(kf_graph_activation(graph, KF_ACTIVATION_RELU, sum, &result));
  CHECK_OK(kf_graph_output(graph, result, NULL, &index));
  CHECK(index == 0, "first output has index %d", (int)index);
  options.max_items = 2;
  CHECK_OK(kf_graph_compile(graph, &options, &kernel));
  CHECK_OK(kf_graph_destroy(graph)); /* the kernel keeps what it needs */

  CHECK(info.struct_size == sizeof info, "KF_FUSED_KERNEL_INFO_INIT sets struct_size");
  CHECK_OK(kf_fused_kernel_get_info(kernel, &info));
  CHECK(info.n_inputs == 2 && info.n_outputs == 1 && info.max_items == 2,
        "kernel info: %d inputs, %d outputs, %d items", (int)info.n_inputs, (int)info.n_outputs,
        (int)info.max_items);

  inputs[0] = x;
  inputs[1] = y;
  outputs[0] = out;
  args.inputs = inputs;
  args.outputs = outputs;
  override_factor.node = factor;
  override_factor.index = 0;
  override_factor.value = factors[1];
  for (pass = 0; pass < 2; ++pass) {
    args.values = pass == 0 ? NULL : &override_factor;
    args.n_values = pass == 0 ? 0 : 1;
    memset(out_host, 0xFF, sizeof out_host); /* NaN: an element the launch leaves shows */
    CHECK_OK(kf_tensor_copy_from_host(out, out_host, sizeof out_host, stream));
    CHECK_OK(kf_fused_kernel_launch(kernel, &args, stream));
    CHECK_OK(kf_tensor_copy_to_host(out, out_host, sizeof out_host, stream));
    for (i = 0; i < ROWS * COLS; ++i) {
      double want = (float)((float)(x_host[i] * factors[pass]) + y_host[i % COLS]);
      if (want < 0.0) want = 0.0;
      CHECK(close_enough(out_host[i], want), "fused graph pass %d [%d]: %g, expected %g", pass, i,
            (double)out_host[i], want);
    }
  }
  args.n_items = 3;
  CHECK_ERROR(kf_fused_kernel_launch(kernel, &args, stream), KF_ERROR_INVALID_ARGUMENT);
  CHECK_OK(kf_fused_kernel_destroy(kernel));
  CHECK_ERROR(kf_fused_kernel_destroy(kernel), KF_ERROR_INVALID_HANDLE);

  CHECK_OK(kf_graph_create(ctx, &graph));
  input.dtype = KF_DTYPE_INT32;
  CHECK_OK(kf_graph_input(graph, &input, &xn));
  CHECK_ERROR(kf_graph_unary(graph, KF_UNARY_SQRT, xn, &bad), KF_ERROR_DTYPE_MISMATCH);
  CHECK(bad == -1, "a failing call wrote its out-parameter (%d)", (int)bad);
  CHECK_OK(kf_graph_destroy(graph));

  CHECK_OK(kf_tensor_destroy(x));
  CHECK_OK(kf_tensor_destroy(y));
  CHECK_OK(kf_tensor_destroy(out));
}

int main(void) {
  kf_context_config_t config = KF_CONTEXT_CONFIG_INIT;
  kf_context_t* ctx = NULL;
  kf_stream_t* stream = NULL;
  kf_device_type_t type = KF_DEVICE_CUDA;
  int32_t id = -1;

  test_library();
  test_devices();

  config.device_type = KF_DEVICE_CPU;
  config.cpu_threads = 2;
  CHECK_OK(kf_context_create(&config, &ctx));
  CHECK_OK(kf_context_get_device(ctx, &type, &id));
  CHECK(type == KF_DEVICE_CPU && id == 0, "context device %d:%d", (int)type, (int)id);

  test_streams_and_events(ctx, &stream);
  test_ops(ctx, stream);
  test_fusion_graph(ctx, stream);
  test_borrowed_memory(ctx);
  test_memory_stats(ctx);
  test_errors(ctx);

  CHECK_OK(kf_stream_destroy(stream));
  CHECK_OK(kf_context_synchronize(ctx));
  CHECK_OK(kf_context_destroy(ctx));

  if (failures != 0) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("C API test passed\n");
  return 0;
}
