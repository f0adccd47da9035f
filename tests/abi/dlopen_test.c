/* A host that loads the library at run time, as plugin hosts and language bindings do: it
 * resolves only `kf_get_api` and calls everything through the versioned table. This program is
 * not linked against the library; argv[1] is its path.
 *
 * It checks the table header, that an unserved version gives NULL, creates a CPU context, runs
 * kf_fused_elementwise_add_activation (ReLU, with a broadcast row) on random non-zero data
 * against a float64 reference, checks an error path and its message, and builds, compiles and
 * launches a fusion graph. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_fusion/kernel_fusion.h"

#include "c_check.h"

/* Stops the test unless a call through the table succeeded. */
#define CHECK_OK(api, call)                                                             \
  do {                                                                                  \
    kf_result_t r_ = (call);                                                            \
    if (r_ != KF_SUCCESS) {                                                             \
      fprintf(stderr, "%s:%d: FAILED: %s returned %s: %s\n", __FILE__, __LINE__, #call, \
              (api)->result_string(r_), (api)->get_last_error_message());               \
      exit(1);                                                                          \
    }                                                                                   \
  } while (0)

enum { ROWS = 7, COLS = 129 };

/* Uniform in [-1, 1), never exactly zero; deterministic. */
static float random_value(unsigned long long* state) {
  float v;
  do {
    *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
    v = (float)((double)(*state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
  } while (v == 0.0f);
  return v;
}

int main(int argc, char** argv) {
  void* library;
  void* symbol;
  kf_get_api_fn get_api;
  const kf_api_t* api;
  kf_context_config_t config = KF_CONTEXT_CONFIG_INIT;
  kf_context_t* ctx = NULL;
  kf_tensor_desc_t a_desc = {2, {ROWS, COLS}, {0}, KF_DTYPE_FLOAT32};
  kf_tensor_desc_t b_desc = {1, {COLS}, {0}, KF_DTYPE_FLOAT32};
  kf_tensor_desc_t seen;
  kf_tensor_t* a = NULL;
  kf_tensor_t* b = NULL;
  kf_tensor_t* out = NULL;
  static float a_host[ROWS * COLS], b_host[COLS], out_host[ROWS * COLS];
  unsigned long long state = 12345;
  size_t i;
  kf_result_t r;
  const char* message;

  if (argc != 2) {
    fprintf(stderr, "usage: %s <path to libkernel_fusion.so>\n", argv[0]);
    return 2;
  }
  library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (library == NULL) {
    fprintf(stderr, "dlopen(%s): %s\n", argv[1], dlerror());
    return 1;
  }
  symbol = dlsym(library, "kf_get_api");
  if (symbol == NULL) {
    fprintf(stderr, "dlsym(kf_get_api): %s\n", dlerror());
    return 1;
  }
  /* POSIX guarantees the conversion; memcpy keeps ISO C quiet about it. */
  memcpy(&get_api, &symbol, sizeof get_api);

  CHECK(get_api(999) == NULL, "kf_get_api(999) must return NULL");
  CHECK(get_api(0) == NULL, "kf_get_api(0) must return NULL");
  api = get_api(KF_API_VERSION_1);
  if (api == NULL) {
    fprintf(stderr, "kf_get_api(KF_API_VERSION_1) returned NULL\n");
    return 1;
  }
  CHECK(api->abi_version == KF_API_VERSION_1, "abi_version %u", (unsigned)api->abi_version);
  CHECK(api->struct_size >= sizeof(kf_api_t), "struct_size %zu < %zu", api->struct_size,
        sizeof(kf_api_t));
  CHECK(api->get_version() == KF_VERSION, "library version %u, headers %u",
        (unsigned)api->get_version(), (unsigned)KF_VERSION);
  CHECK(get_api(KF_API_VERSION_1) == api, "the table must be static");

  for (i = 0; i < ROWS * COLS; ++i) a_host[i] = random_value(&state);
  for (i = 0; i < COLS; ++i) b_host[i] = random_value(&state);
  for (i = 0; i < ROWS * COLS; ++i) out_host[i] = NAN; /* poison */

  config.device_type = KF_DEVICE_CPU;
  CHECK_OK(api, api->context_create(&config, &ctx));
  CHECK_OK(api, api->tensor_create(ctx, &a_desc, &a));
  CHECK_OK(api, api->tensor_create(ctx, &b_desc, &b));
  CHECK_OK(api, api->tensor_create(ctx, &a_desc, &out));
  CHECK_OK(api, api->tensor_copy_from_host(a, a_host, sizeof a_host, NULL));
  CHECK_OK(api, api->tensor_copy_from_host(b, b_host, sizeof b_host, NULL));
  CHECK_OK(api, api->tensor_copy_from_host(out, out_host, sizeof out_host, NULL));
  CHECK_OK(api, api->fused_elementwise_add_activation(ctx, a, b, out, KF_ACTIVATION_RELU, NULL));
  CHECK_OK(api, api->tensor_copy_to_host(out, out_host, sizeof out_host, NULL));

  {
    size_t positives = 0;
    for (i = 0; i < ROWS * COLS; ++i) {
      double sum = (double)a_host[i] + (double)b_host[i % COLS];
      double expected = sum > 0.0 ? sum : 0.0;
      double tolerance = 1e-6 * fabs(expected) + 1e-7;
      positives += expected > 0.0;
      if (!(fabs((double)out_host[i] - expected) <= tolerance)) {
        CHECK(0, "out[%zu] = %.9g, expected %.9g", i, (double)out_host[i], expected);
        break;
      }
    }
    CHECK(positives > 0 && positives < ROWS * COLS, "data must exercise both sides of ReLU");
  }

  /* A member appended in 0.3.0: the output's values read back through a wrap with a stream. */
  {
    kf_stream_t* home = NULL;
    kf_tensor_t* wrapped = NULL;
    float twice[ROWS * COLS];
    CHECK_OK(api, api->stream_create(ctx, NULL, &home));
    CHECK_OK(api, api->tensor_wrap_async(ctx, &a_desc, out_host, sizeof out_host, NULL, NULL, home,
                                         &wrapped));
    CHECK_OK(api, api->tensor_copy_to_host(wrapped, twice, sizeof twice, home));
    CHECK_OK(api, api->stream_synchronize(home));
    CHECK(memcmp(twice, out_host, sizeof twice) == 0, "tensor_wrap_async reads the memory");
    CHECK_OK(api, api->tensor_destroy(wrapped));
    CHECK_OK(api, api->stream_destroy(home));
  }

  /* A destroyed handle is refused with a message, and the out-parameter stays untouched. */
  CHECK_OK(api, api->tensor_destroy(b));
  memset(&seen, 0x5a, sizeof seen);
  r = api->tensor_get_desc(b, &seen);
  CHECK(r == KF_ERROR_INVALID_HANDLE, "tensor_get_desc(destroyed) returned %s",
        api->result_string(r));
  CHECK(strcmp(api->result_string(r), "KF_ERROR_INVALID_HANDLE") == 0, "result_string: %s",
        api->result_string(r));
  message = api->get_last_error_message();
  CHECK(message != NULL && message[0] != '\0', "no error message after a failure");
  {
    unsigned char poison[sizeof seen];
    memset(poison, 0x5a, sizeof poison);
    CHECK(memcmp(&seen, poison, sizeof seen) == 0, "out-parameter written by a failing call");
  }
  r = api->fused_elementwise_add_activation(ctx, a, b, out, KF_ACTIVATION_RELU, NULL);
  CHECK(r == KF_ERROR_INVALID_HANDLE, "op with a destroyed input returned %s",
        api->result_string(r));
  printf("error path: %s: %s\n", api->result_string(r), api->get_last_error_message());

  /* A successful call clears the message. */
  CHECK_OK(api, api->tensor_get_desc(a, &seen));
  CHECK(strcmp(api->get_last_error_message(), "") == 0, "message not cleared by a success");
  CHECK(seen.ndim == 2 && seen.shape[0] == ROWS && seen.shape[1] == COLS, "desc of a");

  /* The fusion engine through the table: out = a * 2 (the default) and then a * -3 (an
   * override of the scalar's launch value). */
  {
    kf_graph_t* graph = NULL;
    kf_fused_kernel_t* kernel = NULL;
    kf_graph_input_desc_t input = KF_GRAPH_INPUT_DESC_INIT;
    kf_launch_args_t args = KF_LAUNCH_ARGS_INIT;
    kf_fused_value_t factor_override;
    const kf_tensor_t* inputs[1];
    kf_tensor_t* outputs[1];
    int32_t x_node, factor, product;
    int pass;
    input.rank = 2;
    CHECK_OK(api, api->graph_create(ctx, &graph));
    CHECK_OK(api, api->graph_input(graph, &input, &x_node));
    CHECK_OK(api, api->graph_scalar(graph, 2.0, &factor));
    CHECK_OK(api, api->graph_binary(graph, KF_BINARY_MUL, x_node, factor, &product));
    CHECK_OK(api, api->graph_output(graph, product, NULL, NULL));
    CHECK_OK(api, api->graph_compile(graph, NULL, &kernel));
    CHECK_OK(api, api->graph_destroy(graph));
    inputs[0] = a;
    outputs[0] = out;
    args.inputs = inputs;
    args.outputs = outputs;
    factor_override.node = factor;
    factor_override.index = 0;
    factor_override.value = -3.0;
    for (pass = 0; pass < 2; ++pass) {
      const float f = pass == 0 ? 2.0f : -3.0f;
      args.values = pass == 0 ? NULL : &factor_override;
      args.n_values = pass == 0 ? 0 : 1;
      CHECK_OK(api, api->fused_kernel_launch(kernel, &args, NULL));
      CHECK_OK(api, api->tensor_copy_to_host(out, out_host, sizeof out_host, NULL));
      for (i = 0; i < ROWS * COLS; ++i) {
        if (out_host[i] != a_host[i] * f) {
          CHECK(0, "fused out[%zu] = %.9g, expected %.9g", i, (double)out_host[i],
                (double)(a_host[i] * f));
          break;
        }
      }
    }
    CHECK_OK(api, api->fused_kernel_destroy(kernel));
  }

  CHECK_OK(api, api->tensor_destroy(out));
  CHECK_OK(api, api->tensor_destroy(a));
  CHECK_OK(api, api->context_destroy(ctx));
  CHECK(dlclose(library) == 0, "dlclose: %s", dlerror());

  if (failures != 0) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("dlopen test passed: %d x %d add+relu through kf_get_api\n", ROWS, COLS);
  return 0;
}
