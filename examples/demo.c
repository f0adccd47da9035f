/*
 * demo.c: one MLP-style step through the KernelFusion C API.
 *
 *   h = GELU(x + bias)   bias: [hidden], broadcast over the rows
 *   y = SiLU(h * gate)
 *
 * Runs on the first CUDA device, or on the CPU when there is none (a NULL context config),
 * checks a few outputs against a float64 reference, and times each step fused against the
 * same work done as two library calls (the op alone into a temporary, then the activation as a
 * multiply by a one-element tensor holding 1), as kf-bench does. Exit status 1 on any error or
 * mismatch. For real measurements use kf-bench, which controls caches and takes medians.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernel_fusion/kernel_fusion.h"

enum { ROWS = 4096, HIDDEN = 1024, WARMUP_RUNS = 2, TIMED_RUNS = 10 };
#define COUNT ((size_t)ROWS * HIDDEN)

/* Reports a failed call with the library's message; returns 1 on success. */
static int ok(kf_result_t r, const char* what) {
  if (r == KF_SUCCESS) return 1;
  fprintf(stderr, "demo: %s failed: %s: %s\n", what, kf_result_string(r),
          kf_get_last_error_message());
  return 0;
}
#define CHECK(call)                    \
  do {                                 \
    if (!ok((call), #call)) goto done; \
  } while (0)

/* Uniform in +-[0.1, 2): never zero. */
static float random_value(uint64_t* state) {
  *state = *state * 6364136223846793005ull + 1442695040888963407ull;
  double u = (double)(*state >> 11) * (1.0 / 9007199254740992.0);
  double magnitude = 0.1 + 1.9 * u;
  return (float)((*state >> 3) & 1u ? -magnitude : magnitude);
}

static double gelu_reference(double v) { return 0.5 * v * (1.0 + erf(v / sqrt(2.0))); }
static double silu_reference(double v) { return v / (1.0 + exp(-v)); }

static kf_tensor_t* new_tensor(kf_context_t* ctx, int32_t ndim, int64_t d0, int64_t d1) {
  kf_tensor_desc_t desc = {0};
  kf_tensor_t* t = NULL;
  desc.ndim = ndim;
  desc.shape[0] = d0;
  desc.shape[1] = d1;
  desc.dtype = KF_DTYPE_FLOAT32;
  return ok(kf_tensor_create(ctx, &desc, &t), "kf_tensor_create") ? t : NULL;
}

typedef kf_result_t (*op_fn)(kf_context_t*, const kf_tensor_t*, const kf_tensor_t*, kf_tensor_t*,
                             kf_activation_t, kf_stream_t*);

/* Microseconds per run of out = act(a op b), fused (*fused_us) and as two calls (*unfused_us). */
static int time_step(kf_context_t* ctx, op_fn op, kf_activation_t act, kf_tensor_t* a,
                     kf_tensor_t* b, kf_tensor_t* out, kf_tensor_t* tmp, kf_tensor_t* one,
                     double* fused_us, double* unfused_us) {
  kf_event_t* start = NULL;
  kf_event_t* stop = NULL;
  int success = 0;
  for (int variant = 0; variant < 2; ++variant) {
    float ms = 0;
    if (start == NULL) CHECK(kf_event_create(ctx, &start));
    if (stop == NULL) CHECK(kf_event_create(ctx, &stop));
    for (int run = 0; run < WARMUP_RUNS + TIMED_RUNS; ++run) {
      if (run == WARMUP_RUNS) CHECK(kf_event_record(start, NULL));
      if (variant == 0) {
        CHECK(op(ctx, a, b, out, act, NULL));
      } else {
        CHECK(op(ctx, a, b, tmp, KF_ACTIVATION_NONE, NULL));
        CHECK(kf_fused_elementwise_mul_activation(ctx, tmp, one, out, act, NULL));
      }
    }
    CHECK(kf_event_record(stop, NULL));
    CHECK(kf_event_synchronize(stop));
    CHECK(kf_event_elapsed_ms(start, stop, &ms));
    *(variant == 0 ? fused_us : unfused_us) = 1000.0 * ms / TIMED_RUNS;
  }
  success = 1;
done:
  kf_event_destroy(start);
  kf_event_destroy(stop);
  return success;
}

int main(void) {
  int status = 1;
  kf_context_t* ctx = NULL;
  kf_tensor_t *x = NULL, *bias = NULL, *gate = NULL, *h = NULL, *y = NULL, *tmp = NULL, *one = NULL;
  float *x_host = malloc(COUNT * sizeof(float)), *gate_host = malloc(COUNT * sizeof(float));
  float *y_host = malloc(COUNT * sizeof(float)), bias_host[HIDDEN];
  const float one_host = 1.0f;
  kf_device_type_t device = KF_DEVICE_CPU;
  int32_t device_id = 0;
  kf_device_properties_t props = {0};
  uint64_t seed = 42;
  int mismatches = 0;
  double fused_us = 0, unfused_us = 0;

  if (x_host == NULL || gate_host == NULL || y_host == NULL) {
    fprintf(stderr, "demo: out of host memory\n");
    goto done;
  }
  for (size_t i = 0; i < COUNT; ++i) x_host[i] = random_value(&seed);
  for (size_t i = 0; i < COUNT; ++i) gate_host[i] = random_value(&seed);
  for (int i = 0; i < HIDDEN; ++i) bias_host[i] = random_value(&seed);

  /* NULL config: the first usable CUDA device, else the CPU backend. */
  CHECK(kf_context_create(NULL, &ctx));
  CHECK(kf_context_get_device(ctx, &device, &device_id));
  props.struct_size = sizeof props;
  CHECK(kf_get_device_properties(device, device_id, &props));
  printf("KernelFusion %u.%u.%u on %s (%s:%d)\n", (unsigned)(kf_get_version() / 10000),
         (unsigned)(kf_get_version() / 100 % 100), (unsigned)(kf_get_version() % 100), props.name,
         device == KF_DEVICE_CUDA ? "cuda" : "cpu", (int)device_id);

  if ((x = new_tensor(ctx, 2, ROWS, HIDDEN)) == NULL ||
      (gate = new_tensor(ctx, 2, ROWS, HIDDEN)) == NULL ||
      (h = new_tensor(ctx, 2, ROWS, HIDDEN)) == NULL ||
      (y = new_tensor(ctx, 2, ROWS, HIDDEN)) == NULL ||
      (tmp = new_tensor(ctx, 2, ROWS, HIDDEN)) == NULL ||
      (bias = new_tensor(ctx, 1, HIDDEN, 0)) == NULL || (one = new_tensor(ctx, 1, 1, 0)) == NULL) {
    goto done;
  }
  CHECK(kf_tensor_copy_from_host(x, x_host, COUNT * sizeof(float), NULL));
  CHECK(kf_tensor_copy_from_host(gate, gate_host, COUNT * sizeof(float), NULL));
  CHECK(kf_tensor_copy_from_host(bias, bias_host, sizeof bias_host, NULL));
  CHECK(kf_tensor_copy_from_host(one, &one_host, sizeof one_host, NULL));

  /* The pipeline: two fused calls, asynchronous on CUDA; the copy back waits for them. */
  CHECK(kf_fused_elementwise_add_activation(ctx, x, bias, h, KF_ACTIVATION_GELU, NULL));
  CHECK(kf_fused_elementwise_mul_activation(ctx, h, gate, y, KF_ACTIVATION_SILU, NULL));
  CHECK(kf_tensor_copy_to_host(y, y_host, COUNT * sizeof(float), NULL));

  for (size_t k = 0; k < 64; ++k) {
    const size_t i =
        k == 63 ? COUNT - 1 : (k * 2654435761u) % COUNT; /* spread over rows and columns */
    const double want =
        silu_reference(gelu_reference((double)x_host[i] + bias_host[i % HIDDEN]) * gate_host[i]);
    const double error = fabs(y_host[i] - want) / (fabs(want) > 1.0 ? fabs(want) : 1.0);
    if (!(error <= 1e-5)) {
      fprintf(stderr, "demo: y[%zu] = %.8g, float64 reference %.8g\n", i, (double)y_host[i], want);
      ++mismatches;
    }
  }
  printf("check: 64 outputs of y = SiLU(GELU(x + bias) * gate) vs float64: %s\n",
         mismatches == 0 ? "all within 1e-5" : "MISMATCH");
  if (mismatches > 0) goto done;

  printf("timing on [%d x %d] f32, mean of %d runs after %d warm-up runs:\n", ROWS, HIDDEN,
         TIMED_RUNS, WARMUP_RUNS);
  if (!time_step(ctx, kf_fused_elementwise_add_activation, KF_ACTIVATION_GELU, x, bias, h, tmp, one,
                 &fused_us, &unfused_us)) {
    goto done;
  }
  printf("  h = GELU(x + bias): fused %9.1f us, unfused %9.1f us (%.2fx)\n", fused_us, unfused_us,
         unfused_us / fused_us);
  if (!time_step(ctx, kf_fused_elementwise_mul_activation, KF_ACTIVATION_SILU, h, gate, y, tmp, one,
                 &fused_us, &unfused_us)) {
    goto done;
  }
  printf("  y = SiLU(h * gate): fused %9.1f us, unfused %9.1f us (%.2fx)\n", fused_us, unfused_us,
         unfused_us / fused_us);
  status = 0;

done:
  kf_tensor_destroy(x);
  kf_tensor_destroy(bias);
  kf_tensor_destroy(gate);
  kf_tensor_destroy(h);
  kf_tensor_destroy(y);
  kf_tensor_destroy(tmp);
  kf_tensor_destroy(one);
  kf_context_destroy(ctx);
  free(x_host);
  free(gate_host);
  free(y_host);
  return status;
}
