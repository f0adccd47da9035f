/**
 * @file types.h
 * @brief Result codes, enumerations, opaque handles and descriptors shared by the whole C API.
 */
#ifndef KERNEL_FUSION_TYPES_H
#define KERNEL_FUSION_TYPES_H

#include <stddef.h>
#include <stdint.h>

/** @brief Major version; it is also the SONAME suffix (`libkernel_fusion.so.0`). */
#define KF_VERSION_MAJOR 0
/** @brief Minor version: incremented when functions are appended. */
#define KF_VERSION_MINOR 3
/** @brief Patch version. */
#define KF_VERSION_PATCH 0
/** @brief The version encoded as `major*10000 + minor*100 + patch`, as kf_get_version() returns it.
 */
#define KF_VERSION (KF_VERSION_MAJOR * 10000 + KF_VERSION_MINOR * 100 + KF_VERSION_PATCH)

#if defined(_WIN32)
#define KF_API __declspec(dllimport)
#elif defined(__GNUC__) || defined(__clang__)
/** @brief Marks a function exported from libkernel_fusion. */
#define KF_API __attribute__((visibility("default")))
#else
#define KF_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief Status of every exported function.
 *
 * On failure, out-parameters are left untouched and kf_get_last_error_message() describes the
 * problem. Values are stable; new codes are only appended.
 */
typedef enum kf_result_t {
  KF_SUCCESS = 0, /**< The call succeeded. */
  KF_ERROR_INVALID_ARGUMENT =
      1, /**< A parameter is out of range, NULL where not allowed, or inconsistent. */
  KF_ERROR_INVALID_HANDLE = 2, /**< A handle is NULL, destroyed, or of the wrong kind. */
  KF_ERROR_OUT_OF_MEMORY =
      3, /**< An allocation failed or would exceed the context's memory limit. */
  KF_ERROR_NOT_SUPPORTED =
      4, /**< The request is valid but not supported by this build or device. */
  KF_ERROR_SHAPE_MISMATCH =
      5, /**< Tensor shapes are incompatible (not broadcastable, wrong size ...). */
  KF_ERROR_DTYPE_MISMATCH =
      6, /**< Tensor dtypes are incompatible or unsupported by the operation. */
  KF_ERROR_DEVICE_MISMATCH = 7,   /**< Objects live on different devices or contexts. */
  KF_ERROR_NO_DEVICE = 8,         /**< No usable CUDA device (or no driver) for the request. */
  KF_ERROR_CUDA = 9,              /**< The CUDA runtime reported an error; the message names it. */
  KF_ERROR_VERSION_MISMATCH = 10, /**< A requested ABI or struct version is not served. */
  KF_ERROR_INTERNAL = 11,         /**< A bug in the library: please report the message. */
  KF_ERROR_COMPILE = 12 /**< Run-time compilation (NVRTC) failed; the message holds its log. */
} kf_result_t;

/** @brief Kind of device a context, tensor or stream belongs to. */
typedef enum kf_device_type_t {
  KF_DEVICE_CPU = 0, /**< Host memory, executed by the CPU backend. */
  KF_DEVICE_CUDA = 1 /**< An NVIDIA GPU, executed by the CUDA backend. */
} kf_device_type_t;

/** @brief Element types. */
typedef enum kf_dtype_t {
  KF_DTYPE_FLOAT32 = 0,  /**< IEEE 754 binary32. */
  KF_DTYPE_FLOAT16 = 1,  /**< IEEE 754 binary16. */
  KF_DTYPE_BFLOAT16 = 2, /**< bfloat16 (8-bit exponent, 7-bit mantissa). */
  KF_DTYPE_FLOAT64 = 3,  /**< IEEE 754 binary64. */
  KF_DTYPE_INT8 = 4,     /**< Signed 8-bit integer. */
  KF_DTYPE_UINT8 = 5,    /**< Unsigned 8-bit integer. */
  KF_DTYPE_INT32 = 6,    /**< Signed 32-bit integer. */
  KF_DTYPE_INT64 = 7     /**< Signed 64-bit integer. */
} kf_dtype_t;

/**
 * @brief Activation applied by fused operations.
 *
 * Accuracy: within a few units in the last place of the result where the result is not small
 * against x. Where it is (the negative tails), the error stays near that of |x| instead: GELU's
 * 0.5 x (1 + erf(x / sqrt 2)) cancels there (in f32, GELU(-4) is 1.6e-3 off relatively and
 * GELU(-6) gives 0 for -5.9e-9; the tanh form gives -0 from about -5), and in f32 sigmoid and
 * SiLU give 0 below about -87, where the true values are subnormal.
 */
typedef enum kf_activation_t {
  KF_ACTIVATION_NONE = 0,      /**< Identity. */
  KF_ACTIVATION_RELU = 1,      /**< max(x, +0): -0 and negatives give +0, NaN stays NaN. */
  KF_ACTIVATION_GELU = 2,      /**< x * Phi(x), exact (erf) form. */
  KF_ACTIVATION_GELU_TANH = 3, /**< GELU, tanh approximation. */
  KF_ACTIVATION_SILU = 4,      /**< x * sigmoid(x). */
  KF_ACTIVATION_TANH = 5,      /**< tanh(x). */
  KF_ACTIVATION_SIGMOID = 6    /**< 1 / (1 + exp(-x)). */
} kf_activation_t;

/** @brief Largest rank a tensor may have. */
#define KF_MAX_DIMS 8

/**
 * @brief Shape, strides and element type of a tensor.
 *
 * Strides are in elements. All strides zero means contiguous row-major. Strides must be
 * non-negative; a zero stride on a dimension larger than one (a broadcast view) is allowed only
 * for tensors that are read.
 */
typedef struct kf_tensor_desc_t {
  int32_t ndim;                 /**< Rank, 0 (a scalar) to KF_MAX_DIMS. */
  int64_t shape[KF_MAX_DIMS];   /**< Extent of each dimension; entries past ndim are ignored. */
  int64_t strides[KF_MAX_DIMS]; /**< Element strides, or all zero for contiguous row-major. */
  kf_dtype_t dtype;             /**< Element type. */
} kf_tensor_desc_t;

/** @brief A library context: one device, its memory pool and default stream. Opaque. */
typedef struct kf_context_t kf_context_t;
/** @brief An ordered queue of work on a context's device. Opaque. */
typedef struct kf_stream_t kf_stream_t;
/** @brief A point in a stream, for ordering and timing. Opaque. */
typedef struct kf_event_t kf_event_t;
/** @brief An n-dimensional array in a context's memory (owned, a view, or borrowed). Opaque. */
typedef struct kf_tensor_t kf_tensor_t;

/*
 * Versioned structs. Structs passed to the library start with `struct_size`, set by their
 * `..._INIT` initialiser, so that a program and a library built from different headers agree:
 * - A struct passed in (the configs here, and graph.h's descriptors, options and launch
 *   arguments) may be larger than the library's layout, as when the program's headers are newer.
 *   Fields the library does not know are ignored only while their bytes are zero, which is how
 *   the initialiser leaves them; a nonzero byte there asks for something this library cannot do,
 *   and the call fails with KF_ERROR_VERSION_MISMATCH. Each function's documentation says which
 *   error a struct_size below the smallest layout served gives.
 * - A struct the library fills (kf_device_properties_t, kf_memory_stats_t,
 *   kf_fused_kernel_info_t) is filled up to the smaller of the two layouts; bytes past the
 *   library's layout are left as the caller set them (zero, from the initialiser).
 */

/**
 * @brief Context creation options. Initialise with #KF_CONTEXT_CONFIG_INIT.
 */
typedef struct kf_context_config_t {
  size_t struct_size; /**< sizeof(kf_context_config_t); lets the library read older layouts. */
  kf_device_type_t device_type; /**< Which backend. */
  int32_t device_id;            /**< CUDA device ordinal; must be 0 for the CPU. */
  /** Cap on the memory pool; 0 means no limit. An allocation past it fails with
      #KF_ERROR_OUT_OF_MEMORY. The CPU pool caps the bytes it reserves (under a limit, its blocks
      are the tensors' sizes rounded up to 64 bytes); the CUDA pool caps the bytes in use and
      gives cached blocks back to stay near the cap (CUDA's pool may hold more while frees on
      other streams are pending). */
  uint64_t memory_limit_bytes;
  int32_t cpu_threads; /**< Worker threads of the CPU backend; 0 means one per core. */
} kf_context_config_t;

/** @brief Default context options: the CPU backend, no memory limit, every core. */
#define KF_CONTEXT_CONFIG_INIT \
  { sizeof(kf_context_config_t), KF_DEVICE_CPU, 0, 0, 0 }

/** @brief Stream flag: the stream does not synchronise with the legacy CUDA default stream. */
#define KF_STREAM_NON_BLOCKING 1u

/**
 * @brief Stream creation options. Initialise with #KF_STREAM_CONFIG_INIT.
 */
typedef struct kf_stream_config_t {
  size_t struct_size; /**< sizeof(kf_stream_config_t). */
  int32_t priority;   /**< CUDA convention: lower is more urgent; clamped to the device's range. */
  uint32_t flags;     /**< Bitwise OR of KF_STREAM_* flags. */
} kf_stream_config_t;

/** @brief Default stream options: priority 0, non-blocking. */
#define KF_STREAM_CONFIG_INIT \
  { sizeof(kf_stream_config_t), 0, KF_STREAM_NON_BLOCKING }

/** @brief Properties of one device, filled by kf_get_device_properties(). */
typedef struct kf_device_properties_t {
  size_t struct_size;               /**< sizeof(kf_device_properties_t), set by the caller. */
  char name[256];                   /**< UTF-8, NUL-terminated device name. */
  kf_device_type_t device_type;     /**< Backend of the device. */
  int32_t device_id;                /**< Ordinal. */
  int32_t compute_capability_major; /**< CUDA compute capability (0 for the CPU). */
  int32_t compute_capability_minor; /**< CUDA compute capability (0 for the CPU). */
  int32_t multiprocessor_count;     /**< SMs on CUDA; logical cores on the CPU. */
  uint64_t total_memory_bytes;      /**< Global memory (CUDA) or physical memory (CPU). */
  uint64_t l2_cache_bytes;          /**< L2 size on CUDA; 0 when unknown. */
  int32_t stream_priority_least;    /**< Least urgent stream priority (numerically largest). */
  int32_t stream_priority_greatest; /**< Most urgent stream priority (numerically smallest). */
} kf_device_properties_t;

/** @brief kf_device_properties_t ready to be filled: struct_size set, the rest zero. */
#define KF_DEVICE_PROPERTIES_INIT \
  { sizeof(kf_device_properties_t), "", KF_DEVICE_CPU, 0, 0, 0, 0, 0, 0, 0, 0 }

/** @brief Memory statistics of a context's pool, filled by kf_context_get_memory_stats(). */
typedef struct kf_memory_stats_t {
  size_t struct_size;    /**< sizeof(kf_memory_stats_t), set by the caller. */
  uint64_t in_use_bytes; /**< Bytes held by live tensors created by the context. */
  /** Bytes the pool holds from the system: the blocks of live tensors, which round their sizes
      up (on the CPU to 64-byte multiples, and without a limit to size classes up to 25 %
      larger), and the cached blocks. */
  uint64_t reserved_bytes;
  uint64_t peak_in_use_bytes; /**< Highest in_use_bytes since creation or the last reset. */
  uint64_t limit_bytes;       /**< The configured limit; 0 means none. */
  uint64_t allocation_count;  /**< Live allocations. */
} kf_memory_stats_t;

/** @brief kf_memory_stats_t ready to be filled: struct_size set, the rest zero. */
#define KF_MEMORY_STATS_INIT \
  { sizeof(kf_memory_stats_t), 0, 0, 0, 0, 0 }

/**
 * @brief Releases borrowed memory; called exactly once when the last tensor using it is destroyed.
 * @param data The pointer that was wrapped.
 * @param user_data The value passed alongside the deleter.
 */
typedef void (*kf_deleter_fn)(void* data, void* user_data);

/**
 * @brief Reduction applied by kf_reduce() to the elements of each output.
 *
 * Sums accumulate in f32 (f64 for f64 data). An empty reduction (a reduced extent of 0) gives 0
 * for the sums and the L2 norm and NaN for the means (0/0, as NumPy); max and min of an empty set
 * are refused. NaN inputs propagate through every reduction, max and min included. Sums of
 * squares (and the L2 norm) are formed unscaled: in f32 they overflow to inf once the sum of
 * squares passes 3.4e38 (1000 values of 1e20, whose L2 norm 3.2e21 is finite), and underflow to 0
 * below 1e-45.
 */
typedef enum kf_reduce_op_t {
  KF_REDUCE_SUM = 0,         /**< sum(x). */
  KF_REDUCE_MEAN = 1,        /**< sum(x) / n. */
  KF_REDUCE_MAX = 2,         /**< max(x). */
  KF_REDUCE_MIN = 3,         /**< min(x). */
  KF_REDUCE_SUM_SQUARES = 4, /**< sum(x * x). */
  KF_REDUCE_MEAN_ABS = 5,    /**< sum(|x|) / n. */
  KF_REDUCE_L2_NORM = 6      /**< sqrt(sum(x * x)). */
} kf_reduce_op_t;

/**
 * @brief Memory layout of an image-like tensor: where its channel dim is.
 *
 * For x of rank r >= 2 with N the batch dim: #KF_LAYOUT_NCHW is [N, C, *spatial] (the channel is
 * dim 1), #KF_LAYOUT_NHWC is [N, *spatial, C] (the channel is the last dim). Any number of
 * spatial dims (zero or more) is allowed. The layout names the dims' meaning, not their strides:
 * either kind of tensor may be strided.
 */
typedef enum kf_layout_t {
  KF_LAYOUT_NCHW = 0, /**< Channels first: [N, C, *spatial]. */
  KF_LAYOUT_NHWC = 1  /**< Channels last: [N, *spatial, C]. */
} kf_layout_t;

#ifdef __cplusplus
}
#endif

#endif /* KERNEL_FUSION_TYPES_H */
