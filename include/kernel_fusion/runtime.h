/**
 * @file runtime.h
 * @brief Library information, errors, devices, contexts, streams, events and tensors.
 *
 * Ordering model: every operation is enqueued on a stream (NULL means the context's default
 * stream) and is asynchronous on CUDA. On the CPU backend work runs before the call returns, and
 * streams and events keep the same meaning.
 *
 * Device memory model: a tensor's memory is allocated and released in stream order on its home
 * stream (the context's default stream for kf_tensor_create(), the given stream for
 * kf_tensor_create_async()). Operations on another stream of the same context wait for the
 * allocation automatically; kf_tensor_destroy() orders the release after all work already
 * enqueued on every stream of the context, so a tensor may be destroyed right after its last use
 * was enqueued. Two exceptions: a stream being captured into a CUDA graph is not waited for (its
 * captured work, and eager work enqueued on it before the capture began: synchronise a stream
 * before beginning a capture on it if tensors its earlier work uses may be destroyed meanwhile),
 * and another thread's `cudaStreamPerThread` wrapper, which no other thread can name: a release
 * that would have to wait for it waits for the whole device.
 *
 * Threads: a context may be used from many threads at once; a stream by one thread at a time. An
 * event may be recorded by one thread while others wait on it or query it; timing it while it is
 * recorded again may find it not ready on CUDA (#KF_ERROR_CUDA, as cudaEventElapsedTime).
 * Destroying an object is its last use: no other thread may be inside a call with it then (for a
 * context: with it or anything of it: streams, events, tensors, graphs, kernels), as with any
 * handle that is freed. Calls made after the destroy returned fail with #KF_ERROR_INVALID_HANDLE.
 */
#ifndef KERNEL_FUSION_RUNTIME_H
#define KERNEL_FUSION_RUNTIME_H

#include "kernel_fusion/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- library */

/**
 * @brief Names a result code.
 * @param r Any value; unknown ones are accepted.
 * @return A static string such as "KF_ERROR_INVALID_HANDLE"; "KF_ERROR_UNKNOWN" for other values.
 */
KF_API const char* kf_result_string(kf_result_t r);

/**
 * @brief The message of the last failing call on this thread.
 * @return A thread-local string, "" when the last call succeeded. Valid until the next call on
 *         this thread. The calls that cannot fail (kf_result_string(), kf_get_version(),
 *         kf_dtype_size() and this one) leave it as it is, so that a result's name and its
 *         message can be read in either order.
 */
KF_API const char* kf_get_last_error_message(void);

/**
 * @brief The version of the loaded library (compare with #KF_VERSION of the headers).
 * @return `major*10000 + minor*100 + patch`.
 */
KF_API uint32_t kf_get_version(void);

/* ---------------------------------------------------------------- devices */

/**
 * @brief Counts the usable devices of a type.
 * @param type Device type.
 * @param[out] count 1 for the CPU; the CUDA device count (0 without driver or GPU).
 * @retval KF_ERROR_INVALID_ARGUMENT @p count is NULL or @p type is unknown.
 */
KF_API kf_result_t kf_get_device_count(kf_device_type_t type, int32_t* count);

/**
 * @brief Describes one device.
 * @param type Device type.
 * @param device_id Ordinal (0 for the CPU).
 * @param[in,out] props Caller sets struct_size; the library fills the fields that fit.
 * @retval KF_ERROR_INVALID_ARGUMENT @p props is NULL, its struct_size is too small, or @p device_id
 * is out of range.
 * @retval KF_ERROR_NO_DEVICE CUDA was asked for and no device is usable.
 */
KF_API kf_result_t kf_get_device_properties(kf_device_type_t type, int32_t device_id,
                                            kf_device_properties_t* props);

/* ---------------------------------------------------------------- contexts */

/**
 * @brief Creates a context on one device.
 * @param config Options, or NULL for the first usable CUDA device, else the CPU.
 * @param[out] out The new context.
 * @retval KF_ERROR_INVALID_ARGUMENT @p out is NULL, or the config is malformed.
 * @retval KF_ERROR_VERSION_MISMATCH config->struct_size is smaller than any layout served, or
 *         the config sets a field this library does not know ("Versioned structs", types.h).
 * @retval KF_ERROR_NO_DEVICE CUDA was asked for and no usable device exists (no driver, no GPU,
 *         or a CPU-only build).
 */
KF_API kf_result_t kf_context_create(const kf_context_config_t* config, kf_context_t** out);

/**
 * @brief Destroys a context after finishing its work. NULL is a no-op.
 *
 * Streams, events and tensors still alive become invalid handles; borrowed memory deleters of
 * such tensors are called.
 * @param ctx Context to destroy, or NULL.
 * @retval KF_ERROR_INVALID_HANDLE @p ctx is not a live context.
 */
KF_API kf_result_t kf_context_destroy(kf_context_t* ctx);

/**
 * @brief Reports the device of a context.
 * @param ctx Context.
 * @param[out] type Device type (may be NULL).
 * @param[out] device_id Device ordinal (may be NULL).
 * @retval KF_ERROR_INVALID_HANDLE @p ctx is not a live context.
 */
KF_API kf_result_t kf_context_get_device(const kf_context_t* ctx, kf_device_type_t* type,
                                         int32_t* device_id);

/**
 * @brief Waits until all work on every stream of the context has finished.
 *
 * A stream being captured into a CUDA graph is left alone (its captured work runs when the graph
 * is launched; waiting for it would invalidate the capture). Work enqueued through another
 * thread's `cudaStreamPerThread` wrapper is waited for with the whole device.
 * @param ctx Context.
 * @retval KF_ERROR_INVALID_HANDLE @p ctx is not a live context.
 * @retval KF_ERROR_CUDA a kernel failed; the message names the CUDA error.
 */
KF_API kf_result_t kf_context_synchronize(kf_context_t* ctx);

/**
 * @brief The range of stream priorities on the context's device (CUDA convention: lower is more
 * urgent).
 * @param ctx Context.
 * @param[out] least Least urgent priority (may be NULL).
 * @param[out] greatest Most urgent priority (may be NULL).
 * @retval KF_ERROR_INVALID_HANDLE @p ctx is not a live context.
 */
KF_API kf_result_t kf_context_get_stream_priority_range(const kf_context_t* ctx, int32_t* least,
                                                        int32_t* greatest);

/**
 * @brief Reads the memory pool's statistics.
 * @param ctx Context.
 * @param[in,out] stats Caller sets struct_size; the library fills the fields that fit.
 * @retval KF_ERROR_INVALID_HANDLE @p ctx is not a live context.
 * @retval KF_ERROR_INVALID_ARGUMENT @p stats is NULL or its struct_size is too small.
 */
KF_API kf_result_t kf_context_get_memory_stats(const kf_context_t* ctx, kf_memory_stats_t* stats);

/**
 * @brief Resets peak_in_use_bytes to the current in_use_bytes.
 * @param ctx Context.
 * @retval KF_ERROR_INVALID_HANDLE @p ctx is not a live context.
 */
KF_API kf_result_t kf_context_reset_peak_memory(kf_context_t* ctx);

/**
 * @brief Returns cached, unused pool memory to the system until at most @p keep_bytes stay reserved
 *        beyond the blocks in use (reserved_bytes of kf_memory_stats_t). Waits for pending frees.
 * @param ctx Context.
 * @param keep_bytes Cached bytes that may stay reserved; 0 releases everything unused.
 * @retval KF_ERROR_INVALID_HANDLE @p ctx is not a live context.
 */
KF_API kf_result_t kf_context_trim_memory(kf_context_t* ctx, uint64_t keep_bytes);

/* ---------------------------------------------------------------- streams */

/**
 * @brief Creates a stream.
 * @param ctx Context.
 * @param config Options, or NULL for #KF_STREAM_CONFIG_INIT. The priority is clamped to the
 * device's range.
 * @param[out] out The new stream.
 * @retval KF_ERROR_INVALID_HANDLE @p ctx is not a live context.
 * @retval KF_ERROR_INVALID_ARGUMENT @p out is NULL or flags has unknown bits.
 * @retval KF_ERROR_VERSION_MISMATCH config->struct_size is too small, or the config sets a field
 *         this library does not know ("Versioned structs", types.h).
 */
KF_API kf_result_t kf_stream_create(kf_context_t* ctx, const kf_stream_config_t* config,
                                    kf_stream_t** out);

/**
 * @brief Wraps a native stream owned by someone else (a `cudaStream_t`, e.g. a framework's
 *        current stream). The native stream is not destroyed with the wrapper.
 * @param ctx A CUDA context on the device the stream belongs to.
 * @param native_stream The `cudaStream_t` (NULL means the legacy default stream).
 *        `cudaStreamPerThread` is the per-thread default stream of whichever thread enqueues
 *        work on the wrapper: use such a wrapper from the thread that wrapped it. The library
 *        never names it from another thread: releases and context-wide waits there wait for the
 *        whole device instead, when work was enqueued through it.
 * @param[out] out The wrapper.
 * @retval KF_ERROR_NOT_SUPPORTED @p ctx is a CPU context.
 * @retval KF_ERROR_DEVICE_MISMATCH the stream belongs to another device.
 */
KF_API kf_result_t kf_stream_wrap_native(kf_context_t* ctx, void* native_stream, kf_stream_t** out);

/**
 * @brief The native handle of a stream (`cudaStream_t` on CUDA, NULL on the CPU).
 * @param s Stream.
 * @param[out] out The native handle.
 * @retval KF_ERROR_INVALID_HANDLE @p s is not a live stream.
 * @retval KF_ERROR_INVALID_ARGUMENT @p out is NULL.
 */
KF_API kf_result_t kf_stream_get_native(const kf_stream_t* s, void** out);

/**
 * @brief The effective (clamped) priority of a stream.
 * @param s Stream.
 * @param[out] priority The priority the stream runs with.
 * @retval KF_ERROR_INVALID_HANDLE @p s is not a live stream.
 * @retval KF_ERROR_INVALID_ARGUMENT @p priority is NULL.
 */
KF_API kf_result_t kf_stream_get_priority(const kf_stream_t* s, int32_t* priority);

/**
 * @brief Destroys a stream after its pending work is enqueued (not necessarily finished).
 * @param s Stream to destroy.
 * @retval KF_ERROR_INVALID_HANDLE @p s is not a live stream.
 */
KF_API kf_result_t kf_stream_destroy(kf_stream_t* s);

/**
 * @brief Blocks until all work on the stream has finished.
 * @param s Stream.
 * @retval KF_ERROR_INVALID_HANDLE @p s is not a live stream.
 * @retval KF_ERROR_CUDA a kernel failed.
 */
KF_API kf_result_t kf_stream_synchronize(kf_stream_t* s);

/**
 * @brief Makes future work on @p s wait until @p e has completed (no host blocking).
 * @param s Stream that waits.
 * @param e Event waited for; an event never recorded is already complete.
 * @retval KF_ERROR_INVALID_HANDLE @p s or @p e is not live.
 * @retval KF_ERROR_DEVICE_MISMATCH they belong to different contexts.
 */
KF_API kf_result_t kf_stream_wait_event(kf_stream_t* s, kf_event_t* e);

/* ---------------------------------------------------------------- events */

/**
 * @brief Creates an event that can time work.
 * @param ctx Context.
 * @param[out] out The new event.
 * @retval KF_ERROR_INVALID_HANDLE @p ctx is not a live context.
 * @retval KF_ERROR_INVALID_ARGUMENT @p out is NULL.
 */
KF_API kf_result_t kf_event_create(kf_context_t* ctx, kf_event_t** out);

/**
 * @brief Records the event at the current end of a stream (NULL: the default stream).
 * @param e Event.
 * @param s Stream of the event's context, or NULL for the default stream.
 * @retval KF_ERROR_INVALID_HANDLE @p e or @p s is not live.
 * @retval KF_ERROR_DEVICE_MISMATCH they belong to different contexts.
 */
KF_API kf_result_t kf_event_record(kf_event_t* e, kf_stream_t* s);

/**
 * @brief Blocks until the work before the event's last record has finished.
 * @param e Event.
 * @retval KF_ERROR_INVALID_HANDLE @p e is not live.
 */
KF_API kf_result_t kf_event_synchronize(kf_event_t* e);

/**
 * @brief Tells, without blocking, whether the event has completed.
 * @param e Event.
 * @param[out] complete 1 when complete (or never recorded), else 0.
 * @retval KF_ERROR_INVALID_HANDLE @p e is not live.
 * @retval KF_ERROR_INVALID_ARGUMENT @p complete is NULL.
 */
KF_API kf_result_t kf_event_query(kf_event_t* e, int32_t* complete);

/**
 * @brief Milliseconds between two completed, recorded events.
 * @param start Event recorded first.
 * @param end Event recorded later.
 * @param[out] ms Elapsed time in milliseconds.
 * @retval KF_ERROR_INVALID_HANDLE an event is not live.
 * @retval KF_ERROR_INVALID_ARGUMENT @p ms is NULL, or an event was never recorded.
 * @retval KF_ERROR_DEVICE_MISMATCH the events belong to different contexts.
 */
KF_API kf_result_t kf_event_elapsed_ms(kf_event_t* start, kf_event_t* end, float* ms);

/**
 * @brief Destroys an event.
 * @param e Event to destroy.
 * @retval KF_ERROR_INVALID_HANDLE @p e is not live.
 */
KF_API kf_result_t kf_event_destroy(kf_event_t* e);

/* ---------------------------------------------------------------- tensors */

/**
 * @brief Allocates a tensor from the context's pool (home stream: the default stream).
 *
 * Non-zero strides allocate enough memory for the furthest element they reach.
 * @param ctx Context whose pool provides the memory.
 * @param desc Shape, strides (all zero: contiguous row-major) and dtype.
 * @param[out] out The new tensor; its contents are uninitialised.
 * @retval KF_ERROR_INVALID_HANDLE @p ctx is not live.
 * @retval KF_ERROR_INVALID_ARGUMENT @p desc or @p out is NULL; ndim outside 0..8; a negative
 *         dimension or stride; an unknown dtype; a byte size that overflows (of the memory the
 *         strides reach, or of the elements packed).
 * @retval KF_ERROR_OUT_OF_MEMORY the pool is exhausted or the context's limit would be exceeded.
 */
KF_API kf_result_t kf_tensor_create(kf_context_t* ctx, const kf_tensor_desc_t* desc,
                                    kf_tensor_t** out);

/**
 * @brief Like kf_tensor_create(), with allocation (and later release) ordered on stream @p s.
 * @param ctx Context whose pool provides the memory.
 * @param desc Shape, strides (all zero: contiguous row-major) and dtype.
 * @param s Home stream of the tensor, or NULL for the default stream.
 * @param[out] out The new tensor; its contents are uninitialised.
 * @return The same codes as kf_tensor_create(); KF_ERROR_INVALID_HANDLE also for a stream that
 *         is not live, KF_ERROR_DEVICE_MISMATCH for a stream of another context.
 */
KF_API kf_result_t kf_tensor_create_async(kf_context_t* ctx, const kf_tensor_desc_t* desc,
                                          kf_stream_t* s, kf_tensor_t** out);

/**
 * @brief Wraps memory owned by the caller as a tensor, without copying.
 *
 * @param ctx Context whose device holds the memory (host memory for a CPU context).
 * @param desc Shape, strides and dtype of the view.
 * @param data First element.
 * @param capacity_bytes Bytes valid from @p data; every element the desc reaches must lie inside.
 * @param deleter Called exactly once, with @p data and @p user_data, when the last tensor sharing
 *        this memory is destroyed; NULL to keep ownership. Not called if this call fails. If
 *        that destroy happens while the tensor's home stream is being captured into a CUDA
 *        graph, the graph still reads the memory at every replay: the deleter is then called
 *        once the graph, and every executable graph made from it, has been destroyed and their
 *        launches have finished, by whichever call of the library's tensor or context functions
 *        comes next (in that call's thread). A deleter called while a stream is being captured
 *        in the global mode may not make the calls such a capture refuses (cudaFree among
 *        them), or that capture is invalidated.
 * @param user_data Passed to @p deleter.
 * @param[out] out The new tensor.
 * @retval KF_ERROR_INVALID_ARGUMENT NULL @p data with a non-empty shape or a nonzero
 *         @p capacity_bytes; strides that reach past @p capacity_bytes; the same errors as
 *         kf_tensor_create().
 */
KF_API kf_result_t kf_tensor_wrap(kf_context_t* ctx, const kf_tensor_desc_t* desc, void* data,
                                  size_t capacity_bytes, kf_deleter_fn deleter, void* user_data,
                                  kf_tensor_t** out);

/**
 * @brief Like kf_tensor_wrap(), with stream @p s as the tensor's home stream.
 *
 * The caller promises that the memory's contents are ready in @p s's order as of this call (the
 * producer's work that writes them is enqueued on @p s, or has finished): work enqueued on @p s
 * afterwards may read them, and a use on any other stream of the context first waits for the
 * work enqueued on @p s before this call (an event recorded here; on the CPU every stream is
 * ordered already). The release is ordered on @p s after the work of every stream of the
 * context, and the deleter runs once that work has finished, as kf_tensor_wrap() says for the
 * default stream; if @p s is being captured into a CUDA graph then, the graph holds the memory
 * as kf_tensor_wrap() describes. The DLPack consumer's form is kf_tensor_from_dlpack_async().
 * @param ctx Context whose device holds the memory (host memory for a CPU context).
 * @param desc Shape, strides and dtype of the view.
 * @param data First element.
 * @param capacity_bytes Bytes valid from @p data; every element the desc reaches must lie inside.
 * @param deleter As for kf_tensor_wrap(); NULL to keep ownership.
 * @param user_data Passed to @p deleter.
 * @param s Home stream of the tensor, or NULL: then exactly kf_tensor_wrap() (the default
 *        stream, and no event recorded).
 * @param[out] out The new tensor.
 * @return The same codes as kf_tensor_wrap(); KF_ERROR_INVALID_HANDLE also for a stream that is
 *         not live, KF_ERROR_DEVICE_MISMATCH for a stream of another context.
 */
KF_API kf_result_t kf_tensor_wrap_async(kf_context_t* ctx, const kf_tensor_desc_t* desc, void* data,
                                        size_t capacity_bytes, kf_deleter_fn deleter,
                                        void* user_data, kf_stream_t* s, kf_tensor_t** out);

/**
 * @brief Creates a view sharing another tensor's memory (slices, transposes, broadcasts).
 *
 * @param base The tensor whose memory is shared; it may be destroyed before the view.
 * @param desc The view's shape and element strides (all zero: contiguous); dtype must match @p
 * base.
 * @param offset_elements Offset of the view's first element from @p base's first element.
 * @param[out] out The view.
 * @retval KF_ERROR_INVALID_ARGUMENT the view reaches outside @p base's memory, or a negative
 * offset.
 * @retval KF_ERROR_DTYPE_MISMATCH desc->dtype differs from @p base's dtype.
 */
KF_API kf_result_t kf_tensor_create_view(const kf_tensor_t* base, const kf_tensor_desc_t* desc,
                                         int64_t offset_elements, kf_tensor_t** out);

/**
 * @brief Destroys a tensor; its memory returns to the pool (or its deleter runs) once no view uses
 * it.
 *
 * A tensor destroyed while its home stream is being captured into a CUDA graph, and allocated
 * before that capture began, stays allocated for the graph's replays: its memory returns to the
 * pool once the graph and every executable graph made from it have been destroyed and their
 * launches have finished (counted in use until then). A tensor allocated inside the capture is
 * freed by the graph itself, after the captured work that uses it.
 * @param t Tensor to destroy, or NULL.
 * @retval KF_ERROR_INVALID_HANDLE @p t is not a live tensor. NULL is a no-op.
 */
KF_API kf_result_t kf_tensor_destroy(kf_tensor_t* t);

/**
 * @brief Reads a tensor's descriptor; strides are always filled in (never all zero for ndim > 0).
 * @param t Tensor.
 * @param[out] out The descriptor.
 * @retval KF_ERROR_INVALID_HANDLE @p t is not live.
 * @retval KF_ERROR_INVALID_ARGUMENT @p out is NULL.
 */
KF_API kf_result_t kf_tensor_get_desc(const kf_tensor_t* t, kf_tensor_desc_t* out);

/**
 * @brief The address of the tensor's first element (device or host memory).
 * @param t Tensor.
 * @param[out] out The address.
 * @retval KF_ERROR_INVALID_HANDLE @p t is not live.
 * @retval KF_ERROR_INVALID_ARGUMENT @p out is NULL.
 */
KF_API kf_result_t kf_tensor_get_data(const kf_tensor_t* t, void** out);

/**
 * @brief The device holding a tensor's memory.
 * @param t Tensor.
 * @param[out] type Device type (may be NULL).
 * @param[out] device_id Device ordinal (may be NULL).
 * @retval KF_ERROR_INVALID_HANDLE @p t is not live.
 */
KF_API kf_result_t kf_tensor_get_device(const kf_tensor_t* t, kf_device_type_t* type,
                                        int32_t* device_id);

/**
 * @brief The context a tensor belongs to.
 * @param t Tensor.
 * @param[out] out The context (not a new reference: do not destroy it on the tensor's behalf).
 * @retval KF_ERROR_INVALID_HANDLE @p t is not live.
 * @retval KF_ERROR_INVALID_ARGUMENT @p out is NULL.
 */
KF_API kf_result_t kf_tensor_get_context(const kf_tensor_t* t, kf_context_t** out);

/**
 * @brief Copies packed row-major host data into a tensor (which may be strided), ordered on
 *        @p s (NULL: default stream). Blocks the host until the copy has finished.
 * @param dst Destination tensor; must be writable.
 * @param src Host memory holding the elements in row-major order.
 * @param bytes Must equal the element count times the element size.
 * @param s Stream of the tensor's context, or NULL for the default stream.
 * @retval KF_ERROR_INVALID_HANDLE @p dst or @p s is not live.
 * @retval KF_ERROR_INVALID_ARGUMENT @p src is NULL with a non-zero size, or @p bytes does not
 * match.
 */
KF_API kf_result_t kf_tensor_copy_from_host(kf_tensor_t* dst, const void* src, size_t bytes,
                                            kf_stream_t* s);

/**
 * @brief Copies a tensor (which may be strided) into packed row-major host memory, ordered on
 *        @p s (NULL: default stream). Blocks the host until the copy has finished.
 * @param src Source tensor.
 * @param dst Host memory receiving the elements in row-major order.
 * @param bytes Must equal the element count times the element size.
 * @param s Stream of the tensor's context, or NULL for the default stream.
 * @retval KF_ERROR_INVALID_HANDLE @p src or @p s is not live.
 * @retval KF_ERROR_INVALID_ARGUMENT @p dst is NULL with a non-zero size, or @p bytes does not
 * match.
 */
KF_API kf_result_t kf_tensor_copy_to_host(const kf_tensor_t* src, void* dst, size_t bytes,
                                          kf_stream_t* s);

/**
 * @brief The size of one element of a dtype.
 * @param dtype Element type.
 * @return Bytes per element, or 0 for an unknown dtype (no error message is set).
 */
KF_API size_t kf_dtype_size(kf_dtype_t dtype);

#ifdef __cplusplus
}
#endif

#endif /* KERNEL_FUSION_RUNTIME_H */
