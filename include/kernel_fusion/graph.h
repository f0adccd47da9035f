/**
 * @file graph.h
 * @brief The fusion engine: compose operations at run time, compile them into one kernel, launch
 *        it many times.
 *
 * A graph (#kf_graph_t) is built in a context: declare inputs, add nodes, mark outputs. Node ids
 * are plain integers, returned by every builder call and valid in that graph only. Compiling a
 * graph gives an immutable #kf_fused_kernel_t: on a CUDA context, one CUDA kernel generated for
 * the whole graph, compiled with NVRTC for the context device and cached (in memory per context,
 * and on disk); on a CPU context, the CPU executor of the same graph, same semantics.
 *
 * **Structure and values.** Everything that changes the generated code is *structure*: the op
 * sequence, dtypes, ranks, channel counts, interpolation and border modes, colour conversions,
 * output layouts, the batch capacity. Structure keys the kernel cache. Everything else is a
 * *value*: scalar constants, normalisation mean/std, border values, crop rectangles, tensor sizes
 * and the number of batch items. Values are launch parameters: two graphs that differ only in
 * values share one compiled kernel, and a launch can override any value (#kf_fused_value_t).
 *
 * **Two kinds of graph.**
 * - A *tensor graph* has only #KF_INPUT_TENSOR inputs. It runs over the NumPy broadcast of its
 *   inputs' shapes (given at launch, any strides); every node value is one element.
 * - An *image graph* reads #KF_INPUT_IMAGE (HWC) or #KF_INPUT_NV12 inputs through
 *   kf_graph_read_image(). It runs over the pixels of its *output* (backwards fusion): each output
 *   pixel reads only the source pixels it needs, through the crop, resize and border rules of
 *   the read. A node value is a pixel of 1 to 4 channels; elementwise ops apply per channel, and a
 *   1-channel value broadcasts against a C-channel one.
 *
 * **Types.** A node's dtype is the dtype of its value. f16, bf16 and f32 values are computed and
 * held in f32, f64 in f64; a half value is rounded to its dtype only by a cast or a write.
 * Integer values are computed in 64 bits and wrapped to their dtype after every node (u8 200 +
 * u8 100 is u8 44), so integer results are bit-identical on CPU and CUDA. Binary ops need
 * operands of one dtype, except that a scalar/constant node (weakly typed) takes the dtype of the
 * other operand. exp, log, sqrt, rsqrt, pow and the activations need a floating dtype.
 *
 * **Horizontal fusion.** A kernel compiled with a batch capacity runs up to that many items in one
 * launch, each item with its own tensors, crop rectangle and output size.
 *
 * **Environment.** `KF_CACHE_DIR`: directory of the on-disk kernel cache (default
 * `$XDG_CACHE_HOME/kernel_fusion`, else `~/.cache/kernel_fusion`); `KF_CACHE_DISABLE=1` turns the
 * disk cache off. `KF_DUMP_SOURCE_DIR`: every generated CUDA source is also written there.
 *
 * **Cache sizes.** Neither cache evicts: a context keeps every structure it compiled (its
 * program, and on CUDA its loaded module) until the context is destroyed, also after
 * kf_fused_kernel_destroy(); the disk cache keeps one file (tens of KiB) per structure and
 * architecture until its directory is cleared. A program that builds unboundedly many distinct
 * structures should pass #KF_COMPILE_NO_MEMORY_CACHE or use short-lived contexts.
 */
#ifndef KERNEL_FUSION_GRAPH_H
#define KERNEL_FUSION_GRAPH_H

#include "kernel_fusion/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief A graph under construction (opaque; one thread at a time). */
typedef struct kf_graph_t kf_graph_t;
/** @brief A compiled graph (opaque, immutable; may be launched from many threads at once). */
typedef struct kf_fused_kernel_t kf_fused_kernel_t;

/** @brief What a graph input is. */
typedef enum kf_input_kind_t {
  KF_INPUT_TENSOR = 0, /**< A tensor of the declared rank, any shape and strides. */
  KF_INPUT_IMAGE = 1,  /**< An HWC image: a rank-3 tensor [H, W, channels], any strides. */
  KF_INPUT_NV12 = 2    /**< An NV12 frame: a u8 tensor [H * 3 / 2, W] (Y plane, then interleaved
                            UV at half resolution); H and W even. Reads give RGB. */
} kf_input_kind_t;

/** @brief Declaration of a graph input. Initialise with #KF_GRAPH_INPUT_DESC_INIT. */
typedef struct kf_graph_input_desc_t {
  size_t struct_size;   /**< sizeof(kf_graph_input_desc_t). */
  kf_input_kind_t kind; /**< Tensor, HWC image or NV12 frame. */
  kf_dtype_t dtype;     /**< Element dtype (NV12: #KF_DTYPE_UINT8). */
  int32_t rank;         /**< Tensors: 0..KF_MAX_DIMS. Images: 3. NV12: 2. */
  int32_t channels;     /**< Images: 1, 3 or 4. Tensors and NV12: ignored. */
} kf_graph_input_desc_t;

/** @brief Defaults: an f32 tensor of rank 1. */
#define KF_GRAPH_INPUT_DESC_INIT \
  { sizeof(kf_graph_input_desc_t), KF_INPUT_TENSOR, KF_DTYPE_FLOAT32, 1, 1 }

/** @brief Unary elementwise operations. */
typedef enum kf_unary_op_t {
  KF_UNARY_NEG = 0,   /**< -x (integers wrap). */
  KF_UNARY_ABS = 1,   /**< |x| (integers wrap: abs(INT8_MIN) is INT8_MIN). */
  KF_UNARY_EXP = 2,   /**< e^x (floating only). */
  KF_UNARY_LOG = 3,   /**< natural log (floating only). */
  KF_UNARY_SQRT = 4,  /**< square root (floating only). */
  KF_UNARY_RSQRT = 5, /**< 1 / sqrt(x) (floating only). */
  KF_UNARY_SQUARE = 6 /**< x * x (integers wrap). */
} kf_unary_op_t;

/** @brief Binary elementwise operations (NumPy broadcasting between the operands). */
typedef enum kf_binary_op_t {
  KF_BINARY_ADD = 0, /**< a + b. */
  KF_BINARY_SUB = 1, /**< a - b. */
  KF_BINARY_MUL = 2, /**< a * b. */
  KF_BINARY_DIV = 3, /**< a / b; integers truncate toward zero, and x / 0 is 0. */
  KF_BINARY_MIN = 4, /**< min(a, b); NaN if either is NaN. */
  KF_BINARY_MAX = 5, /**< max(a, b); NaN if either is NaN. */
  KF_BINARY_POW = 6, /**< a^b (floating only). */
  KF_BINARY_EQ = 7,  /**< a == b, as u8 0 or 1 (comparisons give #KF_DTYPE_UINT8). */
  KF_BINARY_NE = 8,  /**< a != b. */
  KF_BINARY_LT = 9,  /**< a < b. */
  KF_BINARY_LE = 10, /**< a <= b. */
  KF_BINARY_GT = 11, /**< a > b. */
  KF_BINARY_GE = 12  /**< a >= b. */
} kf_binary_op_t;

/** @brief How a cast treats values the target dtype cannot hold. */
typedef enum kf_cast_mode_t {
  /** Integer targets wrap modulo 2^bits; floating sources are first truncated toward zero (NaN
      gives 0, values beyond the int64 range are clamped to it). Narrower floating targets round
      to nearest and overflow to infinity. */
  KF_CAST_WRAP = 0,
  /** Clamp to the target's finite range (NaN gives 0 for integer targets); for integer targets,
      floating sources are truncated toward zero. A floating target rounds to nearest, as in
      #KF_CAST_WRAP, and clamps instead of overflowing to infinity. */
  KF_CAST_SATURATE = 1,
  /** As #KF_CAST_SATURATE, but for integer targets floating sources are rounded to the nearest
      integer (ties to even) instead of truncated: the usual way to write u8 pixels. Floating
      targets are as in #KF_CAST_SATURATE. */
  KF_CAST_SATURATE_ROUND = 2
} kf_cast_mode_t;

/** @brief Interpolation of an image read. */
typedef enum kf_interpolation_t {
  KF_INTERP_NONE = 0, /**< No resize: output pixel (x, y) reads source (crop.x + x, crop.y + y). */
  KF_INTERP_NEAREST = 1, /**< Resize the crop to the output size, nearest neighbour. */
  KF_INTERP_BILINEAR = 2 /**< Resize the crop to the output size, bilinear (half-pixel centres). */
} kf_interpolation_t;

/** @brief What a read returns for source coordinates outside the crop or the image. */
typedef enum kf_border_t {
  KF_BORDER_CONSTANT = 0,  /**< The border value (per channel, a launch value). */
  KF_BORDER_REPLICATE = 1, /**< The nearest edge pixel (aaa|abcd|ddd). */
  KF_BORDER_REFLECT = 2    /**< Mirrored, edge pixel not repeated (dcb|abcd|cba). */
} kf_border_t;

/** @brief YUV to RGB matrix of an NV12 read. */
typedef enum kf_color_standard_t {
  KF_COLOR_BT601 = 0, /**< ITU-R BT.601 (SD video). */
  KF_COLOR_BT709 = 1  /**< ITU-R BT.709 (HD video). */
} kf_color_standard_t;

/**
 * @brief How an image input is read. Initialise with #KF_IMAGE_READ_DESC_INIT.
 *
 * The read runs in output space: output pixel (x, y) of an item whose output is W x H maps to a
 * point of the item's crop rectangle (the whole image when `crop` is 0), which is sampled. A
 * sample outside the crop rectangle, or outside the image, follows `border`: the crop is
 * treated as an image of its own, whose pixels outside the source image follow the border
 * rule again. With `keep_aspect_ratio` the crop is scaled uniformly to fit, centred, and the
 * output pixels it does not cover get the border value.
 */
typedef struct kf_image_read_desc_t {
  size_t struct_size; /**< sizeof(kf_image_read_desc_t). */
  int32_t crop; /**< Nonzero: every launch item gives a rectangle (kf_launch_args_t::crops). */
  kf_interpolation_t interpolation;   /**< No resize, nearest or bilinear. */
  int32_t keep_aspect_ratio;          /**< Nonzero: letterbox (needs a resize). */
  kf_border_t border;                 /**< Reads outside the crop or image. */
  double border_value;                /**< Default border (and letterbox) value, every channel. */
  kf_color_standard_t color_standard; /**< NV12 inputs: the YUV matrix. */
  int32_t full_range;                 /**< NV12 inputs: nonzero for full-range YUV (0..255),
                                           zero for video range (Y 16..235, UV 16..240). */
} kf_image_read_desc_t;

/** @brief Defaults: whole image, no resize, constant 0 border, BT.601 video range. */
#define KF_IMAGE_READ_DESC_INIT \
  { sizeof(kf_image_read_desc_t), 0, KF_INTERP_NONE, 0, KF_BORDER_CONSTANT, 0.0, KF_COLOR_BT601, 0 }

/** @brief Channel conversions of pixel values. */
typedef enum kf_color_conversion_t {
  KF_COLOR_RGB_TO_BGR = 0,   /**< Swap channels 0 and 2 (also BGR to RGB); 3 channels. */
  KF_COLOR_RGBA_TO_BGRA = 1, /**< Swap channels 0 and 2, keep alpha (also BGRA to RGBA). */
  KF_COLOR_RGB_TO_GRAY = 2,  /**< 0.299 R + 0.587 G + 0.114 B: 3 channels to 1. */
  KF_COLOR_BGR_TO_GRAY = 3,  /**< The same weights, channels in BGR order. */
  KF_COLOR_RGBA_TO_RGB = 4,  /**< Drop alpha (also BGRA to BGR): 4 channels to 3. */
  KF_COLOR_RGB_TO_RGBA = 5,  /**< Append alpha (launch value 0; default 255 for u8, else 1). */
  KF_COLOR_RGBA_TO_BGR = 6,  /**< Drop alpha and swap (also BGRA to RGB). */
  KF_COLOR_BGR_TO_RGBA = 7   /**< Swap and append alpha (also RGB to BGRA). */
} kf_color_conversion_t;

/** @brief Layout of an output tensor. */
typedef enum kf_output_layout_t {
  /** Tensor graphs: the broadcast shape. Image graphs: HWC, [H, W, C] (or [N, H, W, C]). */
  KF_OUTPUT_AS_IS = 0,
  /** Image graphs only: planar, [C, H, W] (or [N, C, H, W]). */
  KF_OUTPUT_PLANAR = 1
} kf_output_layout_t;

/** @brief How a node is written. Initialise with #KF_GRAPH_OUTPUT_DESC_INIT. */
typedef struct kf_graph_output_desc_t {
  size_t struct_size;        /**< sizeof(kf_graph_output_desc_t). */
  kf_output_layout_t layout; /**< As-is (HWC) or planar (CHW). */
  int32_t batched;           /**< Image graphs: nonzero means one tensor with a leading N
                                  dimension for all items (item i writes index i); zero means
                                  one output tensor per item. */
} kf_graph_output_desc_t;

/** @brief Defaults: as-is, not batched. */
#define KF_GRAPH_OUTPUT_DESC_INIT \
  { sizeof(kf_graph_output_desc_t), KF_OUTPUT_AS_IS, 0 }

/** @brief Do not read or write the on-disk kernel cache for this compile. */
#define KF_COMPILE_NO_DISK_CACHE 1u
/** @brief Do not look up the context's in-memory cache (always generate and compile anew). */
#define KF_COMPILE_NO_MEMORY_CACHE 2u

/** @brief Compile options. Initialise with #KF_COMPILE_OPTIONS_INIT. */
typedef struct kf_compile_options_t {
  size_t struct_size; /**< sizeof(kf_compile_options_t). */
  int32_t max_items;  /**< Batch capacity: most items one launch may run (structure). */
  uint32_t flags;     /**< Bitwise OR of KF_COMPILE_* flags. */
} kf_compile_options_t;

/** @brief Defaults: one item per launch, both caches on. */
#define KF_COMPILE_OPTIONS_INIT \
  { sizeof(kf_compile_options_t), 1, 0u }

/** @brief Where a compiled kernel came from. */
typedef enum kf_kernel_origin_t {
  KF_KERNEL_COMPILED = 0,     /**< Built by this call (CUDA: generated and compiled by NVRTC;
                                   CPU: the executor prepared). */
  KF_KERNEL_MEMORY_CACHE = 1, /**< Found in the context's in-memory cache. */
  KF_KERNEL_DISK_CACHE = 2    /**< Machine code loaded from the on-disk cache (CUDA only). */
} kf_kernel_origin_t;

/** @brief Facts about a compiled kernel. Initialise struct_size before kf_fused_kernel_get_info().
 */
typedef struct kf_fused_kernel_info_t {
  size_t struct_size;        /**< sizeof(kf_fused_kernel_info_t). */
  kf_kernel_origin_t origin; /**< Where it came from. */
  double compile_ms;         /**< Host time kf_graph_compile() spent (generate + compile + load). */
  int32_t n_inputs;          /**< Tensors per item in kf_launch_args_t::inputs. */
  int32_t n_outputs;         /**< Tensors per item in kf_launch_args_t::outputs. */
  int32_t max_items;         /**< The batch capacity. */
  uint64_t structure_hash;   /**< Hash of the graph's structure (the in-memory cache key). */
} kf_fused_kernel_info_t;

/** @brief kf_fused_kernel_info_t ready to be filled: struct_size set, the rest zero. */
#define KF_FUSED_KERNEL_INFO_INIT \
  { sizeof(kf_fused_kernel_info_t), KF_KERNEL_COMPILED, 0.0, 0, 0, 0, 0 }

/** @brief A per-launch override of one value of a node. */
typedef struct kf_fused_value_t {
  int32_t node;  /**< The node that owns the value. */
  int32_t index; /**< Which of its values: scalar 0; constant c; normalize 0 = scale, 1 + c =
                      mean[c], 1 + C + c = std[c]; image read c = border value of channel c;
                      RGB to RGBA and BGR to RGBA 0 = alpha. */
  double value;  /**< The value for this launch. */
} kf_fused_value_t;

/** @brief A crop rectangle in source pixels (may extend outside the image). */
typedef struct kf_rect_t {
  int32_t x;      /**< Left column. */
  int32_t y;      /**< Top row. */
  int32_t width;  /**< Columns, >= 1. */
  int32_t height; /**< Rows, >= 1. */
} kf_rect_t;

/** @brief The tensors and values of one launch. Initialise with #KF_LAUNCH_ARGS_INIT. */
typedef struct kf_launch_args_t {
  size_t struct_size; /**< sizeof(kf_launch_args_t). */
  int32_t n_items;    /**< Items in this launch, 1..max_items. */
  const kf_tensor_t* const*
      inputs;                     /**< n_items * n_inputs, item-major, in declaration order; an
                                       item may repeat another's tensor (one frame, many crops). */
  kf_tensor_t* const* outputs;    /**< n_items * n_outputs, item-major, in marking order; a
                                       batched output is the same tensor in every item. */
  const kf_rect_t* crops;         /**< n_items rectangles when a read crops, else NULL. */
  const kf_fused_value_t* values; /**< Value overrides for this launch, or NULL. */
  size_t n_values;                /**< Entries in @ref values. */
} kf_launch_args_t;

/** @brief Defaults: one item, nothing bound. */
#define KF_LAUNCH_ARGS_INIT \
  { sizeof(kf_launch_args_t), 1, NULL, NULL, NULL, NULL, 0 }

/**
 * @brief Creates an empty graph in @p ctx.
 * @param ctx The context whose device the graph compiles for.
 * @param[out] out The new graph.
 * @retval KF_ERROR_INVALID_HANDLE @p ctx is not live.
 * @retval KF_ERROR_INVALID_ARGUMENT @p out is NULL.
 */
KF_API kf_result_t kf_graph_create(kf_context_t* ctx, kf_graph_t** out);

/**
 * @brief Destroys a graph (kernels compiled from it stay valid). NULL is a no-op.
 * @param g Graph to destroy, or NULL.
 * @retval KF_ERROR_INVALID_HANDLE @p g is not a live graph.
 */
KF_API kf_result_t kf_graph_destroy(kf_graph_t* g);

/*
 * Every builder call below fails with KF_ERROR_INVALID_HANDLE when g is not a live graph and
 * with KF_ERROR_INVALID_ARGUMENT when out_node is NULL, and leaves *out_node untouched on failure.
 * An operand must be an existing node; image and NV12 inputs can only be read
 * (kf_graph_read_image()), and an op needs at least one operand that is not a constant.
 */

/**
 * @brief Declares an input; inputs are bound at launch in declaration order.
 * @param g Graph.
 * @param desc The declaration.
 * @param[out] out_node The input's node id.
 * @retval KF_ERROR_INVALID_ARGUMENT bad @p desc (struct_size, kind, rank, channels), or mixing
 *         tensor inputs with image inputs.
 * @retval KF_ERROR_DTYPE_MISMATCH unknown dtype, or NV12 not u8.
 * @retval KF_ERROR_SHAPE_MISMATCH a tensor input after a constant of more than one channel.
 * @retval KF_ERROR_VERSION_MISMATCH @p desc sets a field this library does not know (struct_size
 *         past its layout, with nonzero bytes there: see "Versioned structs" in types.h).
 */
KF_API kf_result_t kf_graph_input(kf_graph_t* g, const kf_graph_input_desc_t* desc,
                                  int32_t* out_node);

/**
 * @brief A scalar constant: weakly typed (takes the dtype of the operand it meets), its value a
 *        launch value (index 0) with @p value as default. Where it meets an integer operand its
 *        value must be finite and inside the int64 range.
 * @param g Graph.
 * @param value Default value.
 * @param[out] out_node The constant's node id.
 * @retval KF_ERROR_INVALID_ARGUMENT @p out_node is NULL.
 */
KF_API kf_result_t kf_graph_scalar(kf_graph_t* g, double value, int32_t* out_node);

/**
 * @brief A per-channel constant of @p channels (1..4) values (image graphs; in tensor graphs only
 *        1 channel), weakly typed, launch values 0..channels-1 with @p values as defaults.
 * @param g Graph.
 * @param channels Number of values, 1 to 4.
 * @param values @p channels default values.
 * @param[out] out_node The constant's node id.
 * @retval KF_ERROR_INVALID_ARGUMENT bad @p channels, NULL @p values.
 */
KF_API kf_result_t kf_graph_constant(kf_graph_t* g, int32_t channels, const double* values,
                                     int32_t* out_node);

/**
 * @brief out = op(x).
 * @param g Graph.
 * @param op The operation.
 * @param x Operand.
 * @param[out] out_node The result's node id.
 * @retval KF_ERROR_INVALID_ARGUMENT unknown @p op or @p x; @p x is an unread image input or a
 *         constant.
 * @retval KF_ERROR_DTYPE_MISMATCH a floating-only op on an integer value.
 */
KF_API kf_result_t kf_graph_unary(kf_graph_t* g, kf_unary_op_t op, int32_t x, int32_t* out_node);

/**
 * @brief out = act(x), the same activation functions as the fixed ops.
 * @param g Graph.
 * @param act The activation.
 * @param x Operand.
 * @param[out] out_node The result's node id.
 * @retval KF_ERROR_INVALID_ARGUMENT unknown @p act or @p x; @p x is a constant.
 * @retval KF_ERROR_DTYPE_MISMATCH @p x is not floating.
 */
KF_API kf_result_t kf_graph_activation(kf_graph_t* g, kf_activation_t act, int32_t x,
                                       int32_t* out_node);

/**
 * @brief out = op(a, b), broadcasting (tensor graphs: NumPy rules at launch; image graphs: equal
 *        channel counts or one of them 1).
 * @param g Graph.
 * @param op The operation.
 * @param a First operand.
 * @param b Second operand.
 * @param[out] out_node The result's node id.
 * @retval KF_ERROR_INVALID_ARGUMENT unknown op or node; both operands are constants; a constant
 *         meeting an integer operand has a non-finite or out-of-range value.
 * @retval KF_ERROR_DTYPE_MISMATCH dtypes differ (cast one first), or pow on integers.
 * @retval KF_ERROR_SHAPE_MISMATCH channel counts that do not broadcast (or more than one
 *         channel in a tensor graph).
 */
KF_API kf_result_t kf_graph_binary(kf_graph_t* g, kf_binary_op_t op, int32_t a, int32_t b,
                                   int32_t* out_node);

/**
 * @brief out = min(max(x, lo), hi); @p lo and @p hi are nodes (usually scalars).
 * @param g Graph.
 * @param x Operand.
 * @param lo Lower bound.
 * @param hi Upper bound.
 * @param[out] out_node The result's node id.
 * @return The codes of kf_graph_binary().
 */
KF_API kf_result_t kf_graph_clamp(kf_graph_t* g, int32_t x, int32_t lo, int32_t hi,
                                  int32_t* out_node);

/**
 * @brief out = cond != 0 ? a : b. @p cond may have any dtype (NaN counts as true) but not be a
 *        constant; @p a and @p b share a dtype (one may be a constant).
 * @param g Graph.
 * @param cond Condition.
 * @param a Taken where @p cond is nonzero.
 * @param b Taken elsewhere.
 * @param[out] out_node The result's node id.
 * @return The codes of kf_graph_binary().
 */
KF_API kf_result_t kf_graph_where(kf_graph_t* g, int32_t cond, int32_t a, int32_t b,
                                  int32_t* out_node);

/**
 * @brief out = x converted to @p dtype under @p mode.
 * @param g Graph.
 * @param x Operand.
 * @param dtype Target dtype.
 * @param mode Wrap, saturate, or saturate with rounding.
 * @param[out] out_node The result's node id.
 * @retval KF_ERROR_INVALID_ARGUMENT unknown @p mode or @p x; @p x is a constant.
 * @retval KF_ERROR_DTYPE_MISMATCH unknown @p dtype.
 */
KF_API kf_result_t kf_graph_cast(kf_graph_t* g, int32_t x, kf_dtype_t dtype, kf_cast_mode_t mode,
                                 int32_t* out_node);

/**
 * @brief Reads an image or NV12 input at the output pixel: crop, resize, border (see
 *        #kf_image_read_desc_t). The value has the image's channels (NV12: 3, RGB); its dtype is
 *        the image's for #KF_INTERP_NONE and nearest, f32 for bilinear and for NV12 (f64 stays
 *        f64). Its launch values are the border value of each channel.
 * @param g Graph.
 * @param image An image or NV12 input node.
 * @param desc How to read.
 * @param[out] out_node The pixel value's node id.
 * @retval KF_ERROR_INVALID_ARGUMENT @p image is not an image input, bad @p desc (keep-aspect
 *         without a resize, unknown enums, a border value an integer read cannot hold).
 * @retval KF_ERROR_VERSION_MISMATCH @p desc sets a field this library does not know (struct_size
 *         past its layout, with nonzero bytes there: see "Versioned structs" in types.h).
 */
KF_API kf_result_t kf_graph_read_image(kf_graph_t* g, int32_t image,
                                       const kf_image_read_desc_t* desc, int32_t* out_node);

/**
 * @brief Converts the channels of a pixel value. Swaps and alpha drops keep the dtype; gray of
 *        an integer value is f32.
 * @param g Graph.
 * @param x Operand (image graphs).
 * @param conversion The conversion.
 * @param[out] out_node The result's node id.
 * @retval KF_ERROR_INVALID_ARGUMENT unknown @p conversion; a tensor graph.
 * @retval KF_ERROR_SHAPE_MISMATCH @p x has the wrong channel count for @p conversion.
 */
KF_API kf_result_t kf_graph_color_convert(kf_graph_t* g, int32_t x,
                                          kf_color_conversion_t conversion, int32_t* out_node);

/**
 * @brief Per-channel normalisation out[c] = (x[c] * scale - mean[c]) / std[c], computed in f32
 *        (f64 for f64 values); the result is f32 (f64). @p mean and @p std hold x's channel
 *        count of values; all are launch values with these defaults.
 * @param g Graph.
 * @param x Operand of C channels.
 * @param scale Scale applied first.
 * @param mean C means.
 * @param std C standard deviations.
 * @param[out] out_node The result's node id.
 * @retval KF_ERROR_INVALID_ARGUMENT NULL arrays; a std of zero or a non-finite value.
 */
KF_API kf_result_t kf_graph_normalize(kf_graph_t* g, int32_t x, double scale, const double* mean,
                                      const double* std, int32_t* out_node);

/**
 * @brief Marks @p node as an output; outputs are bound at launch in marking order.
 * @param g Graph.
 * @param node The node written.
 * @param desc Layout, or NULL for #KF_GRAPH_OUTPUT_DESC_INIT.
 * @param[out] out_index Position among the outputs, or NULL.
 * @retval KF_ERROR_INVALID_ARGUMENT unknown node, a constant or input node, planar/batched in a
 *         tensor graph, bad @p desc.
 * @retval KF_ERROR_VERSION_MISMATCH @p desc sets a field this library does not know (struct_size
 *         past its layout, with nonzero bytes there: see "Versioned structs" in types.h).
 */
KF_API kf_result_t kf_graph_output(kf_graph_t* g, int32_t node, const kf_graph_output_desc_t* desc,
                                   int32_t* out_index);

/**
 * @brief Compiles the graph for its context: looks up the in-memory cache, else the disk cache,
 *        else generates CUDA C++ and compiles it with NVRTC (CUDA contexts); builds the CPU
 *        executor (CPU contexts). Thread-safe: concurrent compiles of one structure give one
 *        kernel.
 * @param g Graph (later changes to it do not reach the kernel).
 * @param options NULL for #KF_COMPILE_OPTIONS_INIT.
 * @param[out] out The compiled kernel.
 * @retval KF_ERROR_INVALID_ARGUMENT no outputs; bad options; the per-launch parameter block of
 *         this capacity exceeds the kernel parameter limit (the message gives the largest).
 * @retval KF_ERROR_COMPILE NVRTC rejected the generated source (the message holds its log).
 * @retval KF_ERROR_NOT_SUPPORTED NVRTC is unavailable.
 * @retval KF_ERROR_VERSION_MISMATCH @p options sets a field this library does not know (struct_size
 *         past its layout, with nonzero bytes there: see "Versioned structs" in types.h).
 */
KF_API kf_result_t kf_graph_compile(kf_graph_t* g, const kf_compile_options_t* options,
                                    kf_fused_kernel_t** out);

/**
 * @brief Writes the CUDA C++ source generated for @p g (NUL-terminated) into @p buffer.
 *        Works in every context and build, with no GPU.
 * @param g Graph.
 * @param options NULL for #KF_COMPILE_OPTIONS_INIT.
 * @param buffer Destination, or NULL to ask only for the length.
 * @param capacity Bytes available in @p buffer.
 * @param[out] length Receives strlen(source) + 1; required.
 * @retval KF_ERROR_INVALID_ARGUMENT no outputs; @p length NULL; @p buffer too small (length is
 *         still set).
 * @retval KF_ERROR_VERSION_MISMATCH @p options sets a field this library does not know (struct_size
 *         past its layout, with nonzero bytes there: see "Versioned structs" in types.h).
 */
KF_API kf_result_t kf_graph_get_source(kf_graph_t* g, const kf_compile_options_t* options,
                                       char* buffer, size_t capacity, size_t* length);

/**
 * @brief Compiles the generated source with NVRTC for `sm_<sm>` (e.g. 80, 90) without loading
 *        it: needs no GPU. Used to check code generation ahead of time; it reads and fills the
 *        disk cache like kf_graph_compile() (unless the options say otherwise).
 * @param g Graph.
 * @param options NULL for #KF_COMPILE_OPTIONS_INIT.
 * @param sm Compute capability, major * 10 + minor: 80 or more (the generated kernels use sm_80's
 *        instructions); an architecture this NVRTC does not know is a compile error.
 * @param[out] cubin_bytes Receives the size of the machine code, or NULL.
 * @param[out] origin Receives #KF_KERNEL_COMPILED or #KF_KERNEL_DISK_CACHE, or NULL.
 * @retval KF_ERROR_INVALID_ARGUMENT no outputs; @p sm below 80.
 * @retval KF_ERROR_COMPILE NVRTC rejected the source (the message holds its log).
 * @retval KF_ERROR_NOT_SUPPORTED a CPU-only build, or NVRTC unavailable.
 * @retval KF_ERROR_VERSION_MISMATCH @p options sets a field this library does not know (struct_size
 *         past its layout, with nonzero bytes there: see "Versioned structs" in types.h).
 */
KF_API kf_result_t kf_graph_compile_for_arch(kf_graph_t* g, const kf_compile_options_t* options,
                                             int32_t sm, size_t* cubin_bytes,
                                             kf_kernel_origin_t* origin);

/**
 * @brief Destroys a compiled kernel (a launch in flight completes). NULL is a no-op.
 *
 * A CUDA graph that captured a launch of the kernel keeps what it needs to replay it: the
 * context's cache holds the compiled program (until the context is destroyed), or, for a kernel
 * compiled with #KF_COMPILE_NO_MEMORY_CACHE, the graph itself does (until it and every executable
 * graph made from it are destroyed and their launches have finished).
 * @param k Kernel to destroy, or NULL.
 * @retval KF_ERROR_INVALID_HANDLE @p k is not live.
 */
KF_API kf_result_t kf_fused_kernel_destroy(kf_fused_kernel_t* k);

/**
 * @brief Facts about @p k.
 * @param k Kernel.
 * @param[in,out] info Caller sets struct_size; the library fills the fields.
 * @retval KF_ERROR_INVALID_HANDLE @p k is not live.
 * @retval KF_ERROR_INVALID_ARGUMENT @p info is NULL.
 * @retval KF_ERROR_VERSION_MISMATCH @p info->struct_size is not served.
 */
KF_API kf_result_t kf_fused_kernel_get_info(const kf_fused_kernel_t* k,
                                            kf_fused_kernel_info_t* info);

/**
 * @brief The generated CUDA source of @p k (empty on CPU contexts), NUL-terminated.
 * @param k Kernel.
 * @param buffer Destination, or NULL to ask only for the length.
 * @param capacity Bytes available in @p buffer.
 * @param[out] length Receives strlen(source) + 1; required.
 * @retval KF_ERROR_INVALID_HANDLE @p k is not live.
 * @retval KF_ERROR_INVALID_ARGUMENT @p length NULL; @p buffer too small (length is still set).
 */
KF_API kf_result_t kf_fused_kernel_get_source(const kf_fused_kernel_t* k, char* buffer,
                                              size_t capacity, size_t* length);

/**
 * @brief Runs @p k on the items of @p args, enqueued on @p s (NULL: the context's default
 *        stream); asynchronous on CUDA.
 *
 * Tensor graphs: each item's inputs have their declared ranks and NumPy-broadcast together; its
 * outputs have exactly the broadcast shape. Image graphs: each item's output size (W, H) comes
 * from its output tensors (all of an item's outputs agree); a batched output has N >= n_items.
 * Tensors must be aligned to their element size. An item with no elements is skipped.
 * @param k Kernel.
 * @param args Tensors, crops and value overrides of every item.
 * @param s Stream, or NULL.
 * @retval KF_ERROR_INVALID_HANDLE @p k or a tensor is not live.
 * @retval KF_ERROR_INVALID_ARGUMENT n_items outside 1..max_items, NULL arrays, missing crops (or
 *         crops where no read crops), an unknown value override or one the value cannot take
 *         (a std of zero, a non-finite value where it must be finite), an empty crop, outputs
 *         overlapping inputs, each other or themselves, a read-only output.
 * @retval KF_ERROR_SHAPE_MISMATCH tensors whose rank or shape does not match the declaration; an
 *         empty image (H or W of 0) bound to an image input.
 * @retval KF_ERROR_DTYPE_MISMATCH a tensor of another dtype than declared.
 * @retval KF_ERROR_DEVICE_MISMATCH a tensor or stream of another context.
 * @retval KF_ERROR_NOT_SUPPORTED an image, NV12 frame or image output with more than 2^29 rows
 *         or columns.
 * @retval KF_ERROR_VERSION_MISMATCH @p args sets a field this library does not know (struct_size
 *         past its layout, with nonzero bytes there: see "Versioned structs" in types.h).
 */
KF_API kf_result_t kf_fused_kernel_launch(const kf_fused_kernel_t* k, const kf_launch_args_t* args,
                                          kf_stream_t* s);

#ifdef __cplusplus
}
#endif

#endif /* KERNEL_FUSION_GRAPH_H */
