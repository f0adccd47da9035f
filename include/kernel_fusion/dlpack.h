/**
 * @file dlpack.h
 * @brief DLPack structures (layouts from the DLPack 1.x specification) and zero-copy exchange.
 *
 * The structures are declared under DLPack's own include guard, so this header and an upstream
 * `dlpack.h` can be included in either order without conflicting definitions.
 */
#ifndef KERNEL_FUSION_DLPACK_H
#define KERNEL_FUSION_DLPACK_H

#include "kernel_fusion/types.h"

#ifndef DLPACK_DLPACK_H_
/** @brief DLPack's own include guard: set here or by an upstream `dlpack.h`, whichever comes first.
 */
#define DLPACK_DLPACK_H_

#ifdef __cplusplus
extern "C" {
#endif

/** @brief DLPack major version these layouts follow. */
#define DLPACK_MAJOR_VERSION 1
/** @brief DLPack minor version these layouts follow. */
#define DLPACK_MINOR_VERSION 0

/** @brief DLPack version pair. */
typedef struct {
  uint32_t major; /**< Major version; a different major means an incompatible ABI. */
  uint32_t minor; /**< Minor version. */
} DLPackVersion;

/** @brief DLPack device kinds (values fixed by the specification). */
typedef enum {
  kDLCPU = 1,          /**< Host memory. */
  kDLCUDA = 2,         /**< CUDA device memory. */
  kDLCUDAHost = 3,     /**< Pinned host memory. */
  kDLOpenCL = 4,       /**< OpenCL. */
  kDLVulkan = 7,       /**< Vulkan. */
  kDLMetal = 8,        /**< Metal. */
  kDLVPI = 9,          /**< Verilog simulator. */
  kDLROCM = 10,        /**< ROCm device memory. */
  kDLROCMHost = 11,    /**< ROCm pinned host memory. */
  kDLExtDev = 12,      /**< Reserved extension device. */
  kDLCUDAManaged = 13, /**< CUDA managed memory. */
  kDLOneAPI = 14,      /**< oneAPI unified shared memory. */
  kDLWebGPU = 15,      /**< WebGPU. */
  kDLHexagon = 16,     /**< Qualcomm Hexagon. */
  kDLMAIA = 17         /**< Microsoft MAIA. */
} DLDeviceType;

/** @brief A device: kind and ordinal. */
typedef struct {
  DLDeviceType device_type; /**< Kind. */
  int32_t device_id;        /**< Ordinal. */
} DLDevice;

/** @brief DLPack type codes. */
typedef enum {
  kDLInt = 0U,          /**< Signed integer. */
  kDLUInt = 1U,         /**< Unsigned integer. */
  kDLFloat = 2U,        /**< IEEE float. */
  kDLOpaqueHandle = 3U, /**< Opaque handle. */
  kDLBfloat = 4U,       /**< bfloat16. */
  kDLComplex = 5U,      /**< Complex. */
  kDLBool = 6U          /**< Boolean. */
} DLDataTypeCode;

/** @brief Element type: code, bits and vector lanes. */
typedef struct {
  uint8_t code;   /**< A DLDataTypeCode. */
  uint8_t bits;   /**< Bits per lane. */
  uint16_t lanes; /**< Lanes (1 for scalars). */
} DLDataType;

/** @brief A borrowed n-dimensional array. */
typedef struct {
  void* data;           /**< Base pointer (device or host). */
  DLDevice device;      /**< Where data lives. */
  int32_t ndim;         /**< Rank. */
  DLDataType dtype;     /**< Element type. */
  int64_t* shape;       /**< ndim extents. */
  int64_t* strides;     /**< ndim element strides, or NULL for compact row-major. */
  uint64_t byte_offset; /**< Offset from data to the first element, in bytes. */
} DLTensor;

/** @brief Legacy (pre-1.0) managed tensor. */
typedef struct DLManagedTensor {
  DLTensor dl_tensor;                            /**< The array. */
  void* manager_ctx;                             /**< Producer state. */
  void (*deleter)(struct DLManagedTensor* self); /**< Called once by the consumer when done. */
} DLManagedTensor;

/** @brief Flag: the consumer must not write through the tensor. */
#define DLPACK_FLAG_BITMASK_READ_ONLY (1UL << 0UL)
/** @brief Flag: the producer copied the data for this exchange. */
#define DLPACK_FLAG_BITMASK_IS_COPIED (1UL << 1UL)

/** @brief Versioned (1.x) managed tensor. */
typedef struct DLManagedTensorVersioned {
  DLPackVersion version; /**< Producer's DLPack version. */
  void* manager_ctx;     /**< Producer state. */
  void (*deleter)(
      struct DLManagedTensorVersioned* self); /**< Called once by the consumer when done. */
  uint64_t flags;                             /**< DLPACK_FLAG_BITMASK_* bits. */
  DLTensor dl_tensor;                         /**< The array. */
} DLManagedTensorVersioned;

#ifdef __cplusplus
}
#endif

#endif /* DLPACK_DLPACK_H_ */

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief Imports a DLPack 1.x tensor without copying.
 *
 * On success the new tensor owns @p managed: its deleter is called exactly once, when the last
 * kf tensor sharing the memory is destroyed. On failure ownership stays with the caller.
 * A read-only tensor (DLPACK_FLAG_BITMASK_READ_ONLY) cannot be an operation's output.
 * @param ctx Context on the tensor's device.
 * @param managed The producer's tensor.
 * @param[out] out The imported tensor.
 * @retval KF_ERROR_VERSION_MISMATCH the producer's major version is not 1.
 * @retval KF_ERROR_DEVICE_MISMATCH the memory is not on the context's device.
 * @retval KF_ERROR_DTYPE_MISMATCH the element type has no kf_dtype_t (complex, bool, lanes > 1
 * ...).
 * @retval KF_ERROR_INVALID_ARGUMENT a NULL pointer, ndim over KF_MAX_DIMS, a negative extent, a
 *         negative stride on a dimension of more than one element (a size-1 dimension's stride
 *         is never used, so any is taken), data misaligned for its elements.
 * @retval KF_ERROR_NOT_SUPPORTED every stride is zero (a fully broadcast scalar).
 */
KF_API kf_result_t kf_tensor_from_dlpack(kf_context_t* ctx, DLManagedTensorVersioned* managed,
                                         kf_tensor_t** out);

/**
 * @brief Imports a legacy (unversioned) DLPack tensor; same contract as kf_tensor_from_dlpack().
 * @param ctx Context on the tensor's device.
 * @param managed The producer's tensor; owned by the new tensor on success.
 * @param[out] out The imported tensor.
 * @return The same codes as kf_tensor_from_dlpack() (except KF_ERROR_VERSION_MISMATCH).
 */
KF_API kf_result_t kf_tensor_from_dlpack_legacy(kf_context_t* ctx, DLManagedTensor* managed,
                                                kf_tensor_t** out);

/**
 * @brief kf_tensor_from_dlpack() with stream @p s as the imported tensor's home stream.
 *
 * For a producer that made its data ready on the consumer's stream, as the Python
 * `__dlpack__(stream=...)` protocol asks: the tensor's contents are taken to be ready in @p s's
 * order, a use on another stream of the context waits for the work enqueued on @p s before this
 * call, and the producer's deleter runs once the work of every stream of the context has
 * finished (kf_tensor_wrap_async()).
 * @param ctx Context on the tensor's device.
 * @param managed The producer's tensor; owned by the new tensor on success.
 * @param s Home stream, or NULL for the default stream (then exactly kf_tensor_from_dlpack()).
 * @param[out] out The imported tensor.
 * @return The same codes as kf_tensor_from_dlpack(); KF_ERROR_INVALID_HANDLE also for a stream
 *         that is not live, KF_ERROR_DEVICE_MISMATCH for a stream of another context.
 */
KF_API kf_result_t kf_tensor_from_dlpack_async(kf_context_t* ctx, DLManagedTensorVersioned* managed,
                                               kf_stream_t* s, kf_tensor_t** out);

/**
 * @brief kf_tensor_from_dlpack_legacy() with stream @p s as the imported tensor's home stream;
 *        same contract as kf_tensor_from_dlpack_async().
 * @param ctx Context on the tensor's device.
 * @param managed The producer's tensor; owned by the new tensor on success.
 * @param s Home stream, or NULL for the default stream.
 * @param[out] out The imported tensor.
 * @return The same codes as kf_tensor_from_dlpack_async() (except KF_ERROR_VERSION_MISMATCH).
 */
KF_API kf_result_t kf_tensor_from_dlpack_legacy_async(kf_context_t* ctx, DLManagedTensor* managed,
                                                      kf_stream_t* s, kf_tensor_t** out);

/**
 * @brief Exports a tensor as a DLPack 1.x tensor sharing its memory.
 *
 * The memory stays valid until the consumer calls the returned deleter, even if @p t is destroyed
 * first. Strides are always filled in.
 * @param t Tensor to export.
 * @param[out] out The DLPack tensor; the consumer calls its deleter once when done.
 * @retval KF_ERROR_INVALID_HANDLE @p t is not live.
 * @retval KF_ERROR_INVALID_ARGUMENT @p out is NULL.
 */
KF_API kf_result_t kf_tensor_to_dlpack(const kf_tensor_t* t, DLManagedTensorVersioned** out);

/**
 * @brief Exports a tensor as a legacy DLPack tensor; same contract as kf_tensor_to_dlpack().
 * @param t Tensor to export.
 * @param[out] out The legacy DLPack tensor; the consumer calls its deleter once when done.
 * @return The same codes as kf_tensor_to_dlpack().
 */
KF_API kf_result_t kf_tensor_to_dlpack_legacy(const kf_tensor_t* t, DLManagedTensor** out);

#ifdef __cplusplus
}
#endif

#endif /* KERNEL_FUSION_DLPACK_H */
