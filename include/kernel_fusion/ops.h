/**
 * @file ops.h
 * @brief Fixed fused operations.
 *
 * Every operation validates its arguments before choosing a backend, runs on the context's
 * device, is enqueued on @p s (NULL: the context's default stream) and is asynchronous on CUDA.
 * Half types (f16, bf16) are computed in f32.
 */
#ifndef KERNEL_FUSION_OPS_H
#define KERNEL_FUSION_OPS_H

#include "kernel_fusion/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief out = act(a + b), with @p b broadcast onto @p a (NumPy rules: trailing dimensions
 *        aligned, each of b's extents equal to a's or 1; b may have fewer dimensions).
 *
 * All three tensors share one floating dtype (f32, f16, bf16, f64); any may be strided;
 * @p out must have @p a's shape and may be @p a itself (in place).
 *
 * @param ctx Context owning all tensors.
 * @param a First operand; its shape is the output shape.
 * @param b Second operand, broadcastable to @p a.
 * @param out Result tensor, shape of @p a.
 * @param act Activation applied to the sum.
 * @param s Stream, or NULL for the context's default stream.
 * @retval KF_ERROR_INVALID_HANDLE a handle is not live.
 * @retval KF_ERROR_DEVICE_MISMATCH a tensor or the stream belongs to another context.
 * @retval KF_ERROR_SHAPE_MISMATCH @p b is not broadcastable to @p a, or @p out differs from @p a's
 * shape.
 * @retval KF_ERROR_DTYPE_MISMATCH dtypes differ or are not floating point.
 * @retval KF_ERROR_INVALID_ARGUMENT unknown @p act; @p out overlaps @p b, overlaps @p a other than
 *         exactly, writes one element twice (zero stride), or is read-only.
 */
KF_API kf_result_t kf_fused_elementwise_add_activation(kf_context_t* ctx, const kf_tensor_t* a,
                                                       const kf_tensor_t* b, kf_tensor_t* out,
                                                       kf_activation_t act, kf_stream_t* s);

/**
 * @brief out = act(a * b), with @p b broadcast onto @p a. Same rules and errors as
 *        kf_fused_elementwise_add_activation().
 *
 * @param ctx Context owning all tensors.
 * @param a First operand; its shape is the output shape.
 * @param b Second operand, broadcastable to @p a.
 * @param out Result tensor, shape of @p a.
 * @param act Activation applied to the product.
 * @param s Stream, or NULL for the context's default stream.
 * @return The same codes as kf_fused_elementwise_add_activation().
 */
KF_API kf_result_t kf_fused_elementwise_mul_activation(kf_context_t* ctx, const kf_tensor_t* a,
                                                       const kf_tensor_t* b, kf_tensor_t* out,
                                                       kf_activation_t act, kf_stream_t* s);

#ifdef __cplusplus
}
#endif

#endif /* KERNEL_FUSION_OPS_H */
