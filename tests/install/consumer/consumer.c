/* A user's program built against the *installed* library: runs one fused op and one fusion-engine
 * graph on the CPU and checks the results. Built by tests/install both with
 * find_package(KernelFusion) and with pkg-config. */
#include <kernel_fusion/kernel_fusion.h>

#include <math.h>
#include <stdio.h>

#define COUNT 6

int main(void) {
  const float a_host[COUNT] = {1.5f, -2.0f, 3.25f, -0.5f, 0.75f, -4.0f};
  const float b_host[3] = {0.25f, 1.0f, -1.0f};
  float out_host[COUNT];
  kf_context_config_t config = KF_CONTEXT_CONFIG_INIT;
  kf_tensor_desc_t desc = {2, {2, 3}, {0}, KF_DTYPE_FLOAT32};
  kf_tensor_desc_t row = {1, {3}, {0}, KF_DTYPE_FLOAT32};
  kf_context_t* ctx = NULL;
  kf_tensor_t *a = NULL, *b = NULL, *out = NULL;
  int i, bad = 0;

  if (kf_get_version() != KF_VERSION) {
    fprintf(stderr, "library version %u does not match the headers' %u\n",
            (unsigned)kf_get_version(), (unsigned)KF_VERSION);
    return 1;
  }
  config.device_type = KF_DEVICE_CPU;
  if (kf_context_create(&config, &ctx) != KF_SUCCESS ||
      kf_tensor_create(ctx, &desc, &a) != KF_SUCCESS ||
      kf_tensor_create(ctx, &row, &b) != KF_SUCCESS ||
      kf_tensor_create(ctx, &desc, &out) != KF_SUCCESS ||
      kf_tensor_copy_from_host(a, a_host, sizeof a_host, NULL) != KF_SUCCESS ||
      kf_tensor_copy_from_host(b, b_host, sizeof b_host, NULL) != KF_SUCCESS ||
      kf_fused_elementwise_add_activation(ctx, a, b, out, KF_ACTIVATION_RELU, NULL) != KF_SUCCESS ||
      kf_tensor_copy_to_host(out, out_host, sizeof out_host, NULL) != KF_SUCCESS) {
    fprintf(stderr, "a call failed: %s\n", kf_get_last_error_message());
    return 1;
  }
  for (i = 0; i < COUNT; ++i) {
    double sum = (double)a_host[i] + (double)b_host[i % 3];
    double expected = sum > 0.0 ? sum : 0.0;
    if (fabs((double)out_host[i] - expected) > 1e-6) {
      fprintf(stderr, "out[%d] = %g, expected %g\n", i, (double)out_host[i], expected);
      bad = 1;
    }
  }
  /* The fusion engine through the installed headers: out = a * 2 - 1 as one compiled graph. */
  {
    kf_graph_t* g = NULL;
    kf_fused_kernel_t* k = NULL;
    kf_graph_input_desc_t input = KF_GRAPH_INPUT_DESC_INIT;
    kf_launch_args_t args = KF_LAUNCH_ARGS_INIT;
    const kf_tensor_t* inputs[1];
    kf_tensor_t* outputs[1];
    int32_t x = -1, two = -1, one = -1, doubled = -1, result = -1;
    input.rank = 2;
    inputs[0] = a;
    outputs[0] = out;
    args.inputs = inputs;
    args.outputs = outputs;
    if (kf_graph_create(ctx, &g) != KF_SUCCESS || kf_graph_input(g, &input, &x) != KF_SUCCESS ||
        kf_graph_scalar(g, 2.0, &two) != KF_SUCCESS ||
        kf_graph_scalar(g, 1.0, &one) != KF_SUCCESS ||
        kf_graph_binary(g, KF_BINARY_MUL, x, two, &doubled) != KF_SUCCESS ||
        kf_graph_binary(g, KF_BINARY_SUB, doubled, one, &result) != KF_SUCCESS ||
        kf_graph_output(g, result, NULL, NULL) != KF_SUCCESS ||
        kf_graph_compile(g, NULL, &k) != KF_SUCCESS ||
        kf_fused_kernel_launch(k, &args, NULL) != KF_SUCCESS ||
        kf_tensor_copy_to_host(out, out_host, sizeof out_host, NULL) != KF_SUCCESS) {
      fprintf(stderr, "a fusion call failed: %s\n", kf_get_last_error_message());
      return 1;
    }
    for (i = 0; i < COUNT; ++i) {
      double expected = (double)a_host[i] * 2.0 - 1.0;
      if (fabs((double)out_host[i] - expected) > 1e-6) {
        fprintf(stderr, "fused graph: out[%d] = %g, expected %g\n", i, (double)out_host[i],
                expected);
        bad = 1;
      }
    }
    kf_fused_kernel_destroy(k);
    kf_graph_destroy(g);
  }
  kf_tensor_destroy(out);
  kf_tensor_destroy(b);
  kf_tensor_destroy(a);
  kf_context_destroy(ctx);
  if (bad) return 1;
  printf("consumer: relu(a + b) and the fused graph a * 2 - 1 correct with libkernel_fusion %u\n",
         (unsigned)kf_get_version());
  return 0;
}
