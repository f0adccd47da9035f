/*
 * fusion_demo.c: the fusion engine through the C API (docs/fusion.md).
 *
 *   frame (u8 RGB, H x W x 3) -> N crops, each bilinear-resized to 16 x 16
 *     -> ImageNet normalisation -> one [N, 3, 16, 16] f32 tensor
 *
 * One graph, compiled once into one kernel, launched once for all N crops: no cropped or
 * resized image is ever written. Then the same kernel runs again with other boxes and fewer of
 * them, which needs no recompile (rectangles and the item count are launch values).
 *
 * Runs on the first CUDA device, or on the CPU when there is none (a NULL context config), and
 * checks every output value against a float64 reference written out below. Exit status 1 on any
 * error or mismatch.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernel_fusion/kernel_fusion.h"

enum { FRAME_W = 96, FRAME_H = 64, SIDE = 16, CAPACITY = 6 };
#define PLANE (SIDE * SIDE)

static const double kMean[3] = {0.485, 0.456, 0.406};
static const double kStd[3] = {0.229, 0.224, 0.225};

/* Reports a failed call with the library's message; returns 1 on success. */
static int ok(kf_result_t r, const char* what) {
  if (r == KF_SUCCESS) return 1;
  fprintf(stderr, "fusion_demo: %s failed: %s: %s\n", what, kf_result_string(r),
          kf_get_last_error_message());
  return 0;
}
#define CHECK(call)                    \
  do {                                 \
    if (!ok((call), #call)) goto done; \
  } while (0)

static int clamp_int(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

/* Channel c of crop-space pixel (i, j), with replicate borders in crop space, then image space. */
static double crop_pixel(const unsigned char* frame, kf_rect_t box, int i, int j, int c) {
  const int x = clamp_int(box.x + clamp_int(i, 0, box.width - 1), 0, FRAME_W - 1);
  const int y = clamp_int(box.y + clamp_int(j, 0, box.height - 1), 0, FRAME_H - 1);
  return frame[(y * FRAME_W + x) * 3 + c];
}

/* The float64 reference of output (c, y, x) of one box: half-pixel-centre bilinear, then
   (v / 255 - mean) / std. */
static double reference(const unsigned char* frame, kf_rect_t box, int c, int y, int x) {
  const double u = (x + 0.5) * box.width / SIDE - 0.5, v = (y + 0.5) * box.height / SIDE - 0.5;
  const int i = (int)floor(u), j = (int)floor(v);
  const double a = u - i, b = v - j;
  const double top =
      (1 - a) * crop_pixel(frame, box, i, j, c) + a * crop_pixel(frame, box, i + 1, j, c);
  const double bottom =
      (1 - a) * crop_pixel(frame, box, i, j + 1, c) + a * crop_pixel(frame, box, i + 1, j + 1, c);
  return (((1 - b) * top + b * bottom) / 255.0 - kMean[c]) / kStd[c];
}

/* Builds and compiles the pipeline for up to CAPACITY crops per launch. */
static kf_fused_kernel_t* build_kernel(kf_context_t* ctx) {
  kf_graph_t* g = NULL;
  kf_fused_kernel_t* kernel = NULL;
  kf_graph_input_desc_t input = KF_GRAPH_INPUT_DESC_INIT;
  kf_image_read_desc_t read = KF_IMAGE_READ_DESC_INIT;
  kf_graph_output_desc_t output = KF_GRAPH_OUTPUT_DESC_INIT;
  kf_compile_options_t options = KF_COMPILE_OPTIONS_INIT;
  kf_fused_kernel_info_t info = {0};
  int32_t image = -1, pixel = -1, normalized = -1;

  input.kind = KF_INPUT_IMAGE; /* [H, W, 3] u8 */
  input.dtype = KF_DTYPE_UINT8;
  input.rank = 3;
  input.channels = 3;
  read.crop = 1;                           /* each launch item gives its rectangle */
  read.interpolation = KF_INTERP_BILINEAR; /* resized to the output's 16 x 16 */
  read.border = KF_BORDER_REPLICATE;       /* boxes may reach outside the frame */
  output.layout = KF_OUTPUT_PLANAR;        /* [N, 3, H, W] */
  output.batched = 1;                      /* item i writes index i */
  options.max_items = CAPACITY;

  CHECK(kf_graph_create(ctx, &g));
  CHECK(kf_graph_input(g, &input, &image));
  CHECK(kf_graph_read_image(g, image, &read, &pixel));
  CHECK(kf_graph_normalize(g, pixel, 1.0 / 255.0, kMean, kStd, &normalized));
  CHECK(kf_graph_output(g, normalized, &output, NULL));
  CHECK(kf_graph_compile(g, &options, &kernel));

  info.struct_size = sizeof info;
  CHECK(kf_fused_kernel_get_info(kernel, &info));
  printf("compiled: %s in %.1f ms, up to %d items per launch\n",
         info.origin == KF_KERNEL_COMPILED     ? "generated"
         : info.origin == KF_KERNEL_DISK_CACHE ? "loaded from the disk cache"
                                               : "found in the memory cache",
         info.compile_ms, (int)info.max_items);
done:
  kf_graph_destroy(g);
  return kernel;
}

/* Runs the kernel on n boxes into batch, copies the result back and checks every value;
   returns the number of mismatches, or -1 when a call failed. */
static int run_and_check(const kf_fused_kernel_t* kernel, const kf_tensor_t* frame_tensor,
                         kf_tensor_t* batch, const unsigned char* frame, const kf_rect_t* boxes,
                         int n) {
  const kf_tensor_t* inputs[CAPACITY];
  kf_tensor_t* outputs[CAPACITY];
  static float result[CAPACITY * 3 * PLANE];
  kf_launch_args_t args = KF_LAUNCH_ARGS_INIT;
  double worst = 0;
  int mismatches = 0, i, c, k;

  for (i = 0; i < n; ++i) {
    inputs[i] = frame_tensor; /* every item reads the same frame */
    outputs[i] = batch;       /* a batched output: the same tensor for every item */
  }
  for (k = 0; k < CAPACITY * 3 * PLANE; ++k) result[k] = NAN; /* poison: catch unwritten values */
  if (!ok(kf_tensor_copy_from_host(batch, result, sizeof result, NULL), "poisoning the batch"))
    return -1;
  args.n_items = n;
  args.inputs = inputs;
  args.outputs = outputs;
  args.crops = boxes;
  if (!ok(kf_fused_kernel_launch(kernel, &args, NULL), "kf_fused_kernel_launch") ||
      !ok(kf_tensor_copy_to_host(batch, result, sizeof result, NULL), "kf_tensor_copy_to_host"))
    return -1;

  for (i = 0; i < n; ++i) {
    for (c = 0; c < 3; ++c) {
      for (k = 0; k < PLANE; ++k) {
        const double want = reference(frame, boxes[i], c, k / SIDE, k % SIDE);
        const double got = result[(i * 3 + c) * PLANE + k];
        const double error = fabs(got - want);
        /* The engine computes coordinates and weights in f32: allow 5e-4, three hundredths of a
           grey level (one grey level is 1/255/std, about 0.017). */
        if (!(error <= 5e-4)) {
          if (mismatches++ < 5)
            fprintf(stderr, "mismatch: box %d channel %d pixel (%d, %d): %.6f, reference %.6f\n", i,
                    c, k % SIDE, k / SIDE, got, want);
        } else if (error > worst) {
          worst = error;
        }
      }
    }
  }
  printf("%d crops -> [%d, 3, %d, %d]: %s (largest difference from float64: %.2e)\n", n, n, SIDE,
         SIDE, mismatches == 0 ? "matches the reference" : "MISMATCH", worst);
  return mismatches;
}

int main(void) {
  int status = 1;
  kf_context_t* ctx = NULL;
  kf_fused_kernel_t* kernel = NULL;
  kf_tensor_t *frame_tensor = NULL, *batch = NULL;
  kf_tensor_desc_t desc = {0};
  kf_device_type_t device = KF_DEVICE_CPU;
  int32_t device_id = 0;
  static unsigned char frame[FRAME_H * FRAME_W * 3];
  /* Boxes of several sizes (up- and down-scaling), two reaching outside the frame. */
  const kf_rect_t boxes[CAPACITY] = {{0, 0, 32, 32},   {40, 10, 50, 30}, {70, 40, 40, 40},
                                     {-8, 50, 20, 24}, {5, 5, 8, 8},     {20, 20, 60, 40}};
  const kf_rect_t other_boxes[3] = {{1, 2, 93, 61}, {30, 30, 7, 12}, {60, 0, 36, 64}};
  uint32_t state = 12345;
  int i, first, second;

  for (i = 0; i < FRAME_H * FRAME_W * 3; ++i) { /* a deterministic pattern of every byte value */
    state = state * 1664525u + 1013904223u;
    frame[i] = (unsigned char)(state >> 24);
  }

  /* NULL config: the first usable CUDA device, else the CPU backend. */
  CHECK(kf_context_create(NULL, &ctx));
  CHECK(kf_context_get_device(ctx, &device, &device_id));
  printf("fusion demo on %s:%d\n", device == KF_DEVICE_CUDA ? "cuda" : "cpu", (int)device_id);

  desc.ndim = 3;
  desc.dtype = KF_DTYPE_UINT8;
  desc.shape[0] = FRAME_H;
  desc.shape[1] = FRAME_W;
  desc.shape[2] = 3;
  CHECK(kf_tensor_create(ctx, &desc, &frame_tensor));
  CHECK(kf_tensor_copy_from_host(frame_tensor, frame, sizeof frame, NULL));
  desc.ndim = 4;
  desc.dtype = KF_DTYPE_FLOAT32;
  desc.shape[0] = CAPACITY;
  desc.shape[1] = 3;
  desc.shape[2] = SIDE;
  desc.shape[3] = SIDE;
  CHECK(kf_tensor_create(ctx, &desc, &batch));

  kernel = build_kernel(ctx);
  if (kernel == NULL) goto done;
  first = run_and_check(kernel, frame_tensor, batch, frame, boxes, CAPACITY);
  /* Other rectangles, fewer items: launch values only, the same kernel. */
  second = run_and_check(kernel, frame_tensor, batch, frame, other_boxes, 3);
  if (first == 0 && second == 0) status = 0;

done:
  kf_fused_kernel_destroy(kernel);
  kf_tensor_destroy(batch);
  kf_tensor_destroy(frame_tensor);
  kf_context_destroy(ctx);
  if (status != 0) fprintf(stderr, "fusion_demo: FAILED\n");
  return status;
}
