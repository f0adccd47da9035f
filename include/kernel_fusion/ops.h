/**
 * @file ops.h
 * @brief Fixed fused operations.
 *
 * Every operation validates its arguments before choosing a backend, runs on the context's
 * device, is enqueued on @p s (NULL: the context's default stream) and is asynchronous on CUDA.
 * Half types (f16, bf16) are computed in f32.
 *
 * Overlap, in the errors below, is judged by the memory each view spans, from its lowest to its
 * highest byte: two views whose spans intersect overlap even where no element is shared (an
 * output on the even elements of a tensor whose odd elements are an input). "Exactly" means the
 * same memory, shape and strides: the in-place form of an op.
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

/* ---- bias + activation, GELU + dropout ------------------------------------------------------ */

/**
 * @brief out = act(x + bias), with the 1-D @p bias broadcast along @p x's last dimension (the
 *        seed op fused_bias_gelu is @p act = KF_ACTIVATION_GELU).
 *
 * All three tensors share one floating dtype (f32, f16, bf16, f64); any may be strided; @p out
 * must have @p x's shape and may be @p x itself (in place).
 *
 * @param ctx Context owning all tensors.
 * @param x Input, at least 1-D; its last extent is the hidden size.
 * @param bias Bias of shape [hidden].
 * @param out Result tensor, shape of @p x.
 * @param act Activation applied to the sum.
 * @param s Stream, or NULL for the context's default stream.
 * @retval KF_SUCCESS the op was enqueued.
 * @retval KF_ERROR_INVALID_HANDLE a handle is not live.
 * @retval KF_ERROR_DEVICE_MISMATCH a tensor or the stream belongs to another context.
 * @retval KF_ERROR_SHAPE_MISMATCH @p x is a scalar, @p bias is not [hidden], or @p out differs
 *         from @p x's shape.
 * @retval KF_ERROR_DTYPE_MISMATCH dtypes differ or are not floating point.
 * @retval KF_ERROR_INVALID_ARGUMENT unknown @p act; @p out overlaps @p bias, overlaps @p x other
 *         than exactly, writes one element twice (zero stride), or is read-only.
 */
KF_API kf_result_t kf_fused_bias_activation(kf_context_t* ctx, const kf_tensor_t* x,
                                            const kf_tensor_t* bias, kf_tensor_t* out,
                                            kf_activation_t act, kf_stream_t* s);

/**
 * @brief out = dropout(gelu(x)): each element is kept with probability 1 - @p p and then
 *        scaled by 1 / (1 - @p p), or set to exactly 0.
 *
 * The random numbers are curand's Philox4_32_10 stream, on every backend: element i (x's
 * row-major index, whatever the strides) uses half of the (i / 2)-th 32-bit number r that curand
 * returns after curand_init(seed, offset, 0) (that is, of word (i / 2) % 4 of the Philox block
 * with counter (i / 8, @p offset) and key @p seed): v = r & 0xffff for even i, v = r >> 16 for
 * odd i. It is kept when u = v * 2^-16 satisfies u >= @p p, so the drop probability is @p p
 * rounded up to a multiple of 2^-16 (p = 0.1 drops with probability 6554 / 65536 = 0.1000061);
 * kept elements are still scaled by exactly 1 / (1 - @p p). The mask therefore depends only on
 * (@p seed, @p offset, i): CPU and CUDA produce the same mask, and distinct offsets give
 * independent masks (use a new offset, or seed, per call).
 *
 * @p x and @p out share one floating dtype (f32, f16, bf16, f64), may be strided, and @p out may be
 * @p x itself (in place).
 *
 * @param ctx Context owning all tensors.
 * @param x Input.
 * @param out Result tensor, shape of @p x.
 * @param mask_out NULL, or a uint8 tensor of @p x's shape that receives 1 for kept and 0 for
 *        dropped elements (all ones when not training).
 * @param p Drop probability, in [0, 1).
 * @param training Nonzero: apply dropout. Zero: out = gelu(x) and nothing is dropped.
 * @param seed Philox key.
 * @param offset Philox subsequence; advance it between calls that share a seed.
 * @param s Stream, or NULL for the context's default stream.
 * @retval KF_SUCCESS the op was enqueued.
 * @retval KF_ERROR_INVALID_HANDLE a handle is not live.
 * @retval KF_ERROR_DEVICE_MISMATCH a tensor or the stream belongs to another context.
 * @retval KF_ERROR_SHAPE_MISMATCH @p out or @p mask_out differs from @p x's shape.
 * @retval KF_ERROR_DTYPE_MISMATCH @p x is not floating point, @p out's dtype differs, or
 *         @p mask_out is not uint8.
 * @retval KF_ERROR_INVALID_ARGUMENT @p p outside [0, 1) or NaN; @p out overlaps @p x other than
 *         exactly; @p mask_out overlaps @p x or @p out; an output writes one element twice or is
 *         read-only.
 */
KF_API kf_result_t kf_fused_gelu_dropout(kf_context_t* ctx, const kf_tensor_t* x, kf_tensor_t* out,
                                         kf_tensor_t* mask_out, double p, int32_t training,
                                         uint64_t seed, uint64_t offset, kf_stream_t* s);

/* ---- row-wise ops: norms and softmax ------------------------------------------------------ */

/**
 * @brief Layer norm over the last @p normalized_ndim dims of @p x, optional affine, then an
 *        activation: out = act((x - mean) * rstd * weight + bias), rstd = 1 / sqrt(var + eps).
 *
 * Each row (the elements of the last @p normalized_ndim dims for one index of the leading dims)
 * is normalized by its own mean and biased variance, accumulated in f32 (f64 for f64 data) with a
 * shifted two-pass scheme that stays accurate when the mean dwarfs the spread. The sums of a row
 * (and of its squared differences) are held in the compute type: a row whose sum passes f32's
 * range (about 3.4e38; e.g. four values of 3e38) or whose squared differences do (values of
 * 1e19 and more about their mean) gives 0, inf or NaN, not a normalised row. Any tensor may be
 * strided; @p out may be @p x itself (in place).
 *
 * @param ctx Context owning all tensors.
 * @param x Input, any floating dtype (f32, f16, bf16, f64), at least @p normalized_ndim dims.
 * @param weight Scale shaped like x's last @p normalized_ndim dims, x's dtype; NULL for 1.
 * @param bias Shift shaped like @p weight, x's dtype; NULL for 0.
 * @param out Result, x's shape and dtype.
 * @param mean_out Saved row means shaped like x's leading dims (0-d when all dims are
 *        normalized), f32 (f64 for f64 x); NULL to skip.
 * @param rstd_out Saved 1 / sqrt(var + eps), same shape and dtype as @p mean_out; NULL to skip.
 * @param normalized_ndim How many trailing dims form a row, 1 to x's ndim.
 * @param eps Added to the variance; positive, finite and normal in the compute type (f32 for
 *        f32, f16 and bf16 data: 1.2e-38 to 3.4e38; f64 for f64 data).
 * @param act Activation applied last.
 * @param s Stream, or NULL for the context's default stream.
 * @retval KF_ERROR_INVALID_HANDLE a handle is not live.
 * @retval KF_ERROR_DEVICE_MISMATCH a tensor or the stream belongs to another context.
 * @retval KF_ERROR_SHAPE_MISMATCH weight, bias, out or a statistics tensor has the wrong shape, or
 *         statistics were asked for rows with no elements.
 * @retval KF_ERROR_DTYPE_MISMATCH x is not floating point, or another tensor's dtype differs from
 *         the one required.
 * @retval KF_ERROR_INVALID_ARGUMENT @p normalized_ndim out of range; @p eps not positive, not
 *         finite or not normal in the compute type; unknown @p act; an output overlapping
 *         another operand (other than out being exactly x), writing one element twice,
 *         misaligned or read-only.
 */
KF_API kf_result_t kf_fused_layer_norm_activation(kf_context_t* ctx, const kf_tensor_t* x,
                                                  const kf_tensor_t* weight,
                                                  const kf_tensor_t* bias, kf_tensor_t* out,
                                                  kf_tensor_t* mean_out, kf_tensor_t* rstd_out,
                                                  int32_t normalized_ndim, double eps,
                                                  kf_activation_t act, kf_stream_t* s);

/**
 * @brief RMS norm over the last dim with an optional residual add, then an activation:
 *        h = x + residual (or x), out = act(h / sqrt(mean(h^2) + eps) * weight).
 *
 * The fused add + norm of transformer blocks: h is computed in f32 (f64 for f64 data) and rounded
 * to the tensors' dtype, written to @p residual_out when given, and that rounded h is what is
 * normalized (so the result does not depend on whether @p residual_out is given). The sum of
 * squares is held in the compute type: in f32 a row whose h^2 sum passes 3.4e38 (values of 1e19
 * and more) gives 0. Any tensor may be strided; @p out and @p residual_out may each be exactly
 * @p x or @p residual (in place), but not each other.
 *
 * @param ctx Context owning all tensors.
 * @param x Input, any floating dtype (f32, f16, bf16, f64), at least one dim.
 * @param residual Added to @p x before the norm, x's shape and dtype; NULL for none.
 * @param weight Scale of shape [x's last extent], x's dtype; NULL for 1.
 * @param out Result, x's shape and dtype.
 * @param residual_out Receives h = x + residual (x's shape and dtype); NULL to skip. Requires
 *        @p residual.
 * @param eps Added to the mean square; positive, finite and normal in the compute type (f32
 *        for f32, f16 and bf16 data: 1.2e-38 to 3.4e38; f64 for f64 data).
 * @param act Activation applied last.
 * @param s Stream, or NULL for the context's default stream.
 * @retval KF_ERROR_INVALID_HANDLE a handle is not live.
 * @retval KF_ERROR_DEVICE_MISMATCH a tensor or the stream belongs to another context.
 * @retval KF_ERROR_SHAPE_MISMATCH residual, weight, out or residual_out has the wrong shape.
 * @retval KF_ERROR_DTYPE_MISMATCH x is not floating point, or another tensor's dtype differs.
 * @retval KF_ERROR_INVALID_ARGUMENT @p eps not positive, not finite or not normal in the compute
 *         type; unknown @p act; @p residual_out without @p residual; an output overlapping
 *         another operand other than in the allowed in-place forms (out and residual_out may
 *         each be x or residual, never each other), writing one element twice, misaligned or
 *         read-only.
 */
KF_API kf_result_t kf_fused_rms_norm_activation(kf_context_t* ctx, const kf_tensor_t* x,
                                                const kf_tensor_t* residual,
                                                const kf_tensor_t* weight, kf_tensor_t* out,
                                                kf_tensor_t* residual_out, double eps,
                                                kf_activation_t act, kf_stream_t* s);

/**
 * @brief Scale-mask-softmax over the last dim: out = softmax(scale * x + mask), with an optional
 *        causal mask.
 *
 * For x of shape [..., Lq, Lk] (Lq = 1 for 1-D x), the causal mask hides position (i, j) when
 * j > i + (Lk - Lq): the diagonal is aligned to the bottom-right, so the last query row sees every
 * key (with Lq > Lk the first Lq - Lk rows see none). Hidden positions and -inf logits count as
 * exp(-inf) = 0; a row with every position hidden gives 0 everywhere, not NaN. A row with a NaN
 * logit at a position not hidden by the causal rule gives NaN everywhere, even where every other
 * position is hidden. The row maximum is subtracted before exponentiating; accumulation is in f32
 * (f64 for f64 data). Any tensor may be strided; @p out may be @p x itself (in place).
 *
 * @param ctx Context owning all tensors.
 * @param x Logits, any floating dtype (f32, f16, bf16, f64), at least one dim.
 * @param mask Additive mask broadcastable to x (NumPy rules; e.g. [Lk], [Lq,Lk], [B,1,Lq,Lk]),
 *        x's dtype, -inf to hide a position; NULL for none.
 * @param out Result, x's shape and dtype.
 * @param scale Multiplies x before the mask is added; finite in the compute type (f32 for f32,
 *        f16 and bf16 data: |scale| up to 3.4e38; f64 for f64 data).
 * @param causal Nonzero to apply the causal mask.
 * @param s Stream, or NULL for the context's default stream.
 * @retval KF_ERROR_INVALID_HANDLE a handle is not live.
 * @retval KF_ERROR_DEVICE_MISMATCH a tensor or the stream belongs to another context.
 * @retval KF_ERROR_SHAPE_MISMATCH @p mask is not broadcastable to x, or @p out differs from x's
 *         shape.
 * @retval KF_ERROR_DTYPE_MISMATCH x is not floating point, or mask or out has another dtype.
 * @retval KF_ERROR_INVALID_ARGUMENT @p scale is not finite in the compute type; @p out overlaps
 *         @p mask (even where mask is x), overlaps x other than exactly, writes one element
 *         twice, is misaligned or read-only.
 */
KF_API kf_result_t kf_fused_softmax(kf_context_t* ctx, const kf_tensor_t* x,
                                    const kf_tensor_t* mask, kf_tensor_t* out, double scale,
                                    int32_t causal, kf_stream_t* s);

/**
 * @brief out = log_softmax(scale * x + mask) over the last dim, computed as
 *        v - max - log(sum(exp(v - max))); fully masked rows give -inf. Same arguments, rules
 *        and errors as kf_fused_softmax().
 *
 * @param ctx Context owning all tensors.
 * @param x Logits, any floating dtype, at least one dim.
 * @param mask Additive mask broadcastable to x, x's dtype; NULL for none.
 * @param out Result, x's shape and dtype.
 * @param scale Multiplies x before the mask is added; finite in the compute type (f32 for f32,
 *        f16 and bf16 data: |scale| up to 3.4e38; f64 for f64 data).
 * @param causal Nonzero to apply the causal mask.
 * @param s Stream, or NULL for the context's default stream.
 * @return The same codes as kf_fused_softmax().
 */
KF_API kf_result_t kf_log_softmax(kf_context_t* ctx, const kf_tensor_t* x, const kf_tensor_t* mask,
                                  kf_tensor_t* out, double scale, int32_t causal, kf_stream_t* s);

/* ---- batch norm ------------------------------------------------------------------------------ */

/**
 * @brief Batch normalisation over every dim but the channel, then an activation (PyTorch's
 *        batch_norm semantics).
 *
 * x is [N, C, *spatial] (#KF_LAYOUT_NCHW) or [N, *spatial, C] (#KF_LAYOUT_NHWC), rank >= 2 (zero
 * or more spatial dims). Per channel c, over its n = N * prod(spatial) elements:
 * - inference (@p training == 0): out = act((x - running_mean[c]) / sqrt(running_var[c] + eps)
 *   * weight[c] + bias[c]); the running statistics are only read.
 * - training: mean and biased variance var = sum((x - mean)^2) / n of the batch normalise x, and
 *   the running statistics are updated in place: running_mean = (1 - momentum) * running_mean +
 *   momentum * mean, running_var = (1 - momentum) * running_var + momentum * var * n / (n - 1)
 *   (the unbiased variance). n must be at least 2 (as in PyTorch: one value per channel has no
 *   variance). The statistics are shifted sums, accurate for data whose mean dwarfs its spread.
 *
 * The per-channel tensors (weight, bias, running_mean, running_var) are 1-D [C] in the compute
 * type: f32 for f32, f16 and bf16 data, f64 for f64 data. Accumulation is in the same type. Any
 * tensor may be strided; @p out may be @p x itself (in place). On CUDA the call is asynchronous
 * and allocates nothing. Training on channels-first data whose channel runs fill whole 16-byte
 * vectors and whose channels fit in shared memory (on sm_90 a cluster of up to 16 blocks, about
 * 1.1 MiB a channel) holds each channel on chip and reads x once; other data is read twice, the
 * second time partly from L2.
 *
 * @param ctx Context owning all tensors.
 * @param x Input, any floating dtype (f32, f16, bf16, f64), rank >= 2.
 * @param weight Scale per channel, [C] in the compute type; NULL for 1.
 * @param bias Shift per channel, [C] in the compute type; NULL for 0.
 * @param running_mean Running mean per channel, [C] in the compute type. Read in inference
 *        (required); updated in training, where it must be writable, or NULL together with
 *        @p running_var to use batch statistics without tracking them.
 * @param running_var Running variance per channel, like @p running_mean.
 * @param out Result, x's shape and dtype.
 * @param training Nonzero to normalise with batch statistics and update the running ones.
 * @param momentum Weight of the batch statistics in the running update, in [0, 1].
 * @param eps Added to the variance; positive, finite and normal in the compute type (f32 for
 *        f32, f16 and bf16 data: 1.2e-38 to 3.4e38; f64 for f64 data).
 * @param act Activation applied last.
 * @param layout Where the channel dim is.
 * @param s Stream, or NULL for the context's default stream.
 * @retval KF_ERROR_INVALID_HANDLE a handle is not live.
 * @retval KF_ERROR_DEVICE_MISMATCH a tensor or the stream belongs to another context.
 * @retval KF_ERROR_SHAPE_MISMATCH x has rank < 2; a per-channel tensor is not [C]; @p out differs
 *         from x's shape.
 * @retval KF_ERROR_DTYPE_MISMATCH x is not floating point, out has another dtype, or a
 *         per-channel tensor is not in the compute type.
 * @retval KF_ERROR_INVALID_ARGUMENT @p eps is not positive, finite and normal in the compute
 *         type; @p momentum is outside
 *         [0, 1]; @p act or @p layout is unknown; a running statistic is NULL in inference, or
 *         only one is NULL in training; training with fewer than 2 values per channel; a written
 *         tensor (out, or the running statistics in training) is read-only, overlaps another
 *         operand (out may be x exactly), writes one element twice, or a tensor is misaligned.
 */
KF_API kf_result_t kf_fused_batch_norm_activation(
    kf_context_t* ctx, const kf_tensor_t* x, const kf_tensor_t* weight, const kf_tensor_t* bias,
    kf_tensor_t* running_mean, kf_tensor_t* running_var, kf_tensor_t* out, int32_t training,
    double momentum, double eps, kf_activation_t act, kf_layout_t layout, kf_stream_t* s);

/* ---- reductions ---------------------------------------------------------------------------- */

/**
 * @brief Reduces x over a set of axes: out = op(x) over @p axes, every other axis kept.
 *
 * Axes may be given in any order; a negative axis counts from the end (-1 is the last).
 * @p n_axes = 0 reduces every axis (@p axes is then ignored and may be NULL). With @p keepdim
 * nonzero the reduced axes stay in out's shape with extent 1; otherwise they are removed (a full
 * reduction without keepdim gives a 0-d tensor). Accumulation is in f32 (f64 for f64 data) with
 * blocked summation, and the result is rounded once to out's dtype. Results are deterministic: the
 * same call on the same device gives the same bits every time. Empty reductions follow
 * #kf_reduce_op_t (0 for sums, NaN for means, max/min refused). x may be strided; out may be
 * strided but must not overlap x.
 *
 * @param ctx Context owning both tensors.
 * @param x Input, any floating dtype (f32, f16, bf16, f64).
 * @param out Result, x's dtype, of the reduced shape (see @p keepdim).
 * @param op The reduction.
 * @param axes @p n_axes distinct axes of x, each in [-ndim, ndim); NULL only when @p n_axes is 0.
 * @param n_axes Number of entries of @p axes; 0 for every axis.
 * @param keepdim Nonzero to keep reduced axes as extent 1.
 * @param s Stream, or NULL for the context's default stream.
 * @retval KF_ERROR_INVALID_HANDLE a handle is not live.
 * @retval KF_ERROR_DEVICE_MISMATCH a tensor or the stream belongs to another context.
 * @retval KF_ERROR_SHAPE_MISMATCH out's shape is not the reduced shape (the message names it).
 * @retval KF_ERROR_DTYPE_MISMATCH x is not floating point, or out's dtype differs from x's.
 * @retval KF_ERROR_INVALID_ARGUMENT unknown @p op; an axis out of range or repeated; @p axes NULL
 *         with @p n_axes > 0, or @p n_axes negative; max or min over an empty axis; out overlapping
 *         x, writing one element twice, misaligned or read-only.
 */
KF_API kf_result_t kf_reduce(kf_context_t* ctx, const kf_tensor_t* x, kf_tensor_t* out,
                             kf_reduce_op_t op, const int32_t* axes, int32_t n_axes,
                             int32_t keepdim, kf_stream_t* s);

/**
 * @brief Sum of squares over one axis: kf_reduce() with #KF_REDUCE_SUM_SQUARES and axes = {dim}.
 *
 * @param ctx Context owning both tensors.
 * @param x Input, any floating dtype.
 * @param out Result, x's dtype, of the reduced shape.
 * @param dim The reduced axis, in [-ndim, ndim).
 * @param keepdim Nonzero to keep the reduced axis as extent 1.
 * @param s Stream, or NULL for the context's default stream.
 * @return The same codes as kf_reduce().
 */
KF_API kf_result_t kf_reduce_sum_squared(kf_context_t* ctx, const kf_tensor_t* x, kf_tensor_t* out,
                                         int32_t dim, int32_t keepdim, kf_stream_t* s);

/**
 * @brief Mean of absolute values over one axis: kf_reduce() with #KF_REDUCE_MEAN_ABS and
 *        axes = {dim}.
 *
 * @param ctx Context owning both tensors.
 * @param x Input, any floating dtype.
 * @param out Result, x's dtype, of the reduced shape.
 * @param dim The reduced axis, in [-ndim, ndim).
 * @param keepdim Nonzero to keep the reduced axis as extent 1.
 * @param s Stream, or NULL for the context's default stream.
 * @return The same codes as kf_reduce().
 */
KF_API kf_result_t kf_reduce_mean_abs(kf_context_t* ctx, const kf_tensor_t* x, kf_tensor_t* out,
                                      int32_t dim, int32_t keepdim, kf_stream_t* s);

#ifdef __cplusplus
}
#endif

#endif /* KERNEL_FUSION_OPS_H */
