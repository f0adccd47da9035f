/**
 * @file api.h
 * @brief Versioned function table for hosts that load the library with `dlopen`.
 *
 * A host resolves the single symbol `kf_get_api` and calls everything else through the table.
 * The table is append-only: a version's members never move (the library freezes their offsets
 * with static assertions), and later versions only add members at the end.
 */
#ifndef KERNEL_FUSION_API_H
#define KERNEL_FUSION_API_H

#include "kernel_fusion/dlpack.h"
#include "kernel_fusion/graph.h"
#include "kernel_fusion/ops.h"
#include "kernel_fusion/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief The first (and current) ABI version of the function table. */
#define KF_API_VERSION_1 1u
/** @brief The newest ABI version this header describes. */
#define KF_API_VERSION KF_API_VERSION_1

/** @brief Function table, version 1. Members are never reordered or removed. */
typedef struct kf_api_t {
  uint32_t abi_version; /**< The version the table was requested with. */
  uint32_t reserved;    /**< Zero. */
  size_t struct_size;   /**< sizeof the table as served: members past it are absent. */
  /* library */
  const char* (*result_string)(kf_result_t r); /**< kf_result_string(). */
  const char* (*get_last_error_message)(void); /**< kf_get_last_error_message(). */
  uint32_t (*get_version)(void);               /**< kf_get_version(). */
  /* devices */
  kf_result_t (*get_device_count)(kf_device_type_t, int32_t*); /**< kf_get_device_count(). */
  kf_result_t (*get_device_properties)(kf_device_type_t, int32_t,
                                       kf_device_properties_t*); /**< kf_get_device_properties(). */
  /* contexts */
  kf_result_t (*context_create)(const kf_context_config_t*,
                                kf_context_t**); /**< kf_context_create(). */
  kf_result_t (*context_destroy)(kf_context_t*); /**< kf_context_destroy(). */
  kf_result_t (*context_get_device)(const kf_context_t*, kf_device_type_t*,
                                    int32_t*);       /**< kf_context_get_device(). */
  kf_result_t (*context_synchronize)(kf_context_t*); /**< kf_context_synchronize(). */
  kf_result_t (*context_get_stream_priority_range)(
      const kf_context_t*, int32_t*, int32_t*); /**< kf_context_get_stream_priority_range(). */
  kf_result_t (*context_get_memory_stats)(
      const kf_context_t*, kf_memory_stats_t*);            /**< kf_context_get_memory_stats(). */
  kf_result_t (*context_reset_peak_memory)(kf_context_t*); /**< kf_context_reset_peak_memory(). */
  kf_result_t (*context_trim_memory)(kf_context_t*, uint64_t); /**< kf_context_trim_memory(). */
  /* streams */
  kf_result_t (*stream_create)(kf_context_t*, const kf_stream_config_t*,
                               kf_stream_t**); /**< kf_stream_create(). */
  kf_result_t (*stream_wrap_native)(kf_context_t*, void*,
                                    kf_stream_t**);             /**< kf_stream_wrap_native(). */
  kf_result_t (*stream_get_native)(const kf_stream_t*, void**); /**< kf_stream_get_native(). */
  kf_result_t (*stream_get_priority)(const kf_stream_t*,
                                     int32_t*);                /**< kf_stream_get_priority(). */
  kf_result_t (*stream_destroy)(kf_stream_t*);                 /**< kf_stream_destroy(). */
  kf_result_t (*stream_synchronize)(kf_stream_t*);             /**< kf_stream_synchronize(). */
  kf_result_t (*stream_wait_event)(kf_stream_t*, kf_event_t*); /**< kf_stream_wait_event(). */
  /* events */
  kf_result_t (*event_create)(kf_context_t*, kf_event_t**);          /**< kf_event_create(). */
  kf_result_t (*event_record)(kf_event_t*, kf_stream_t*);            /**< kf_event_record(). */
  kf_result_t (*event_synchronize)(kf_event_t*);                     /**< kf_event_synchronize(). */
  kf_result_t (*event_query)(kf_event_t*, int32_t*);                 /**< kf_event_query(). */
  kf_result_t (*event_elapsed_ms)(kf_event_t*, kf_event_t*, float*); /**< kf_event_elapsed_ms(). */
  kf_result_t (*event_destroy)(kf_event_t*);                         /**< kf_event_destroy(). */
  /* tensors */
  kf_result_t (*tensor_create)(kf_context_t*, const kf_tensor_desc_t*,
                               kf_tensor_t**); /**< kf_tensor_create(). */
  kf_result_t (*tensor_create_async)(kf_context_t*, const kf_tensor_desc_t*, kf_stream_t*,
                                     kf_tensor_t**); /**< kf_tensor_create_async(). */
  kf_result_t (*tensor_wrap)(kf_context_t*, const kf_tensor_desc_t*, void*, size_t, kf_deleter_fn,
                             void*, kf_tensor_t**); /**< kf_tensor_wrap(). */
  kf_result_t (*tensor_create_view)(const kf_tensor_t*, const kf_tensor_desc_t*, int64_t,
                                    kf_tensor_t**); /**< kf_tensor_create_view(). */
  kf_result_t (*tensor_destroy)(kf_tensor_t*);      /**< kf_tensor_destroy(). */
  kf_result_t (*tensor_get_desc)(const kf_tensor_t*,
                                 kf_tensor_desc_t*);          /**< kf_tensor_get_desc(). */
  kf_result_t (*tensor_get_data)(const kf_tensor_t*, void**); /**< kf_tensor_get_data(). */
  kf_result_t (*tensor_get_device)(const kf_tensor_t*, kf_device_type_t*,
                                   int32_t*); /**< kf_tensor_get_device(). */
  kf_result_t (*tensor_get_context)(const kf_tensor_t*,
                                    kf_context_t**); /**< kf_tensor_get_context(). */
  kf_result_t (*tensor_copy_from_host)(kf_tensor_t*, const void*, size_t,
                                       kf_stream_t*); /**< kf_tensor_copy_from_host(). */
  kf_result_t (*tensor_copy_to_host)(const kf_tensor_t*, void*, size_t,
                                     kf_stream_t*); /**< kf_tensor_copy_to_host(). */
  size_t (*dtype_size)(kf_dtype_t);                 /**< kf_dtype_size(). */
  /* DLPack */
  kf_result_t (*tensor_from_dlpack)(kf_context_t*, DLManagedTensorVersioned*,
                                    kf_tensor_t**); /**< kf_tensor_from_dlpack(). */
  kf_result_t (*tensor_from_dlpack_legacy)(kf_context_t*, DLManagedTensor*,
                                           kf_tensor_t**); /**< kf_tensor_from_dlpack_legacy(). */
  kf_result_t (*tensor_to_dlpack)(const kf_tensor_t*,
                                  DLManagedTensorVersioned**); /**< kf_tensor_to_dlpack(). */
  kf_result_t (*tensor_to_dlpack_legacy)(const kf_tensor_t*,
                                         DLManagedTensor**); /**< kf_tensor_to_dlpack_legacy(). */
  /* ops */
  kf_result_t (*fused_elementwise_add_activation)(
      kf_context_t*, const kf_tensor_t*, const kf_tensor_t*, kf_tensor_t*, kf_activation_t,
      kf_stream_t*); /**< kf_fused_elementwise_add_activation(). */
  kf_result_t (*fused_elementwise_mul_activation)(
      kf_context_t*, const kf_tensor_t*, const kf_tensor_t*, kf_tensor_t*, kf_activation_t,
      kf_stream_t*); /**< kf_fused_elementwise_mul_activation(). */
  kf_result_t (*fused_bias_activation)(kf_context_t*, const kf_tensor_t*, const kf_tensor_t*,
                                       kf_tensor_t*, kf_activation_t,
                                       kf_stream_t*); /**< kf_fused_bias_activation(). */
  kf_result_t (*fused_gelu_dropout)(kf_context_t*, const kf_tensor_t*, kf_tensor_t*, kf_tensor_t*,
                                    double, int32_t, uint64_t, uint64_t,
                                    kf_stream_t*); /**< kf_fused_gelu_dropout(). */
  kf_result_t (*fused_layer_norm_activation)(
      kf_context_t*, const kf_tensor_t*, const kf_tensor_t*, const kf_tensor_t*, kf_tensor_t*,
      kf_tensor_t*, kf_tensor_t*, int32_t, double, kf_activation_t,
      kf_stream_t*); /**< kf_fused_layer_norm_activation(). */
  kf_result_t (*fused_rms_norm_activation)(kf_context_t*, const kf_tensor_t*, const kf_tensor_t*,
                                           const kf_tensor_t*, kf_tensor_t*, kf_tensor_t*, double,
                                           kf_activation_t,
                                           kf_stream_t*); /**< kf_fused_rms_norm_activation(). */
  kf_result_t (*fused_softmax)(kf_context_t*, const kf_tensor_t*, const kf_tensor_t*, kf_tensor_t*,
                               double, int32_t, kf_stream_t*); /**< kf_fused_softmax(). */
  kf_result_t (*log_softmax)(kf_context_t*, const kf_tensor_t*, const kf_tensor_t*, kf_tensor_t*,
                             double, int32_t, kf_stream_t*); /**< kf_log_softmax(). */
  kf_result_t (*fused_batch_norm_activation)(
      kf_context_t*, const kf_tensor_t*, const kf_tensor_t*, const kf_tensor_t*, kf_tensor_t*,
      kf_tensor_t*, kf_tensor_t*, int32_t, double, double, kf_activation_t, kf_layout_t,
      kf_stream_t*); /**< kf_fused_batch_norm_activation(). */
  kf_result_t (*reduce)(kf_context_t*, const kf_tensor_t*, kf_tensor_t*, kf_reduce_op_t,
                        const int32_t*, int32_t, int32_t, kf_stream_t*); /**< kf_reduce(). */
  kf_result_t (*reduce_sum_squared)(kf_context_t*, const kf_tensor_t*, kf_tensor_t*, int32_t,
                                    int32_t, kf_stream_t*); /**< kf_reduce_sum_squared(). */
  kf_result_t (*reduce_mean_abs)(kf_context_t*, const kf_tensor_t*, kf_tensor_t*, int32_t, int32_t,
                                 kf_stream_t*); /**< kf_reduce_mean_abs(). */
  /* fusion engine (graph.h) */
  kf_result_t (*graph_create)(kf_context_t*, kf_graph_t**); /**< kf_graph_create(). */
  kf_result_t (*graph_destroy)(kf_graph_t*);                /**< kf_graph_destroy(). */
  kf_result_t (*graph_input)(kf_graph_t*, const kf_graph_input_desc_t*,
                             int32_t*);                       /**< kf_graph_input(). */
  kf_result_t (*graph_scalar)(kf_graph_t*, double, int32_t*); /**< kf_graph_scalar(). */
  kf_result_t (*graph_constant)(kf_graph_t*, int32_t, const double*,
                                int32_t*); /**< kf_graph_constant(). */
  kf_result_t (*graph_unary)(kf_graph_t*, kf_unary_op_t, int32_t,
                             int32_t*); /**< kf_graph_unary(). */
  kf_result_t (*graph_activation)(kf_graph_t*, kf_activation_t, int32_t,
                                  int32_t*); /**< kf_graph_activation(). */
  kf_result_t (*graph_binary)(kf_graph_t*, kf_binary_op_t, int32_t, int32_t,
                              int32_t*); /**< kf_graph_binary(). */
  kf_result_t (*graph_clamp)(kf_graph_t*, int32_t, int32_t, int32_t,
                             int32_t*); /**< kf_graph_clamp(). */
  kf_result_t (*graph_where)(kf_graph_t*, int32_t, int32_t, int32_t,
                             int32_t*); /**< kf_graph_where(). */
  kf_result_t (*graph_cast)(kf_graph_t*, int32_t, kf_dtype_t, kf_cast_mode_t,
                            int32_t*); /**< kf_graph_cast(). */
  kf_result_t (*graph_read_image)(kf_graph_t*, int32_t, const kf_image_read_desc_t*,
                                  int32_t*); /**< kf_graph_read_image(). */
  kf_result_t (*graph_color_convert)(kf_graph_t*, int32_t, kf_color_conversion_t,
                                     int32_t*); /**< kf_graph_color_convert(). */
  kf_result_t (*graph_normalize)(kf_graph_t*, int32_t, double, const double*, const double*,
                                 int32_t*); /**< kf_graph_normalize(). */
  kf_result_t (*graph_output)(kf_graph_t*, int32_t, const kf_graph_output_desc_t*,
                              int32_t*); /**< kf_graph_output(). */
  kf_result_t (*graph_compile)(kf_graph_t*, const kf_compile_options_t*,
                               kf_fused_kernel_t**); /**< kf_graph_compile(). */
  kf_result_t (*graph_get_source)(kf_graph_t*, const kf_compile_options_t*, char*, size_t,
                                  size_t*); /**< kf_graph_get_source(). */
  kf_result_t (*graph_compile_for_arch)(kf_graph_t*, const kf_compile_options_t*, int32_t, size_t*,
                                        kf_kernel_origin_t*); /**< kf_graph_compile_for_arch(). */
  kf_result_t (*fused_kernel_destroy)(kf_fused_kernel_t*);    /**< kf_fused_kernel_destroy(). */
  kf_result_t (*fused_kernel_get_info)(const kf_fused_kernel_t*,
                                       kf_fused_kernel_info_t*); /**< kf_fused_kernel_get_info(). */
  kf_result_t (*fused_kernel_get_source)(const kf_fused_kernel_t*, char*, size_t,
                                         size_t*); /**< kf_fused_kernel_get_source(). */
  kf_result_t (*fused_kernel_launch)(const kf_fused_kernel_t*, const kf_launch_args_t*,
                                     kf_stream_t*); /**< kf_fused_kernel_launch(). */
  /* appended in 0.3.0: borrowed memory with a home stream (runtime.h, dlpack.h) */
  kf_result_t (*tensor_wrap_async)(kf_context_t*, const kf_tensor_desc_t*, void*, size_t,
                                   kf_deleter_fn, void*, kf_stream_t*,
                                   kf_tensor_t**); /**< kf_tensor_wrap_async(). */
  kf_result_t (*tensor_from_dlpack_async)(kf_context_t*, DLManagedTensorVersioned*, kf_stream_t*,
                                          kf_tensor_t**); /**< kf_tensor_from_dlpack_async(). */
  kf_result_t (*tensor_from_dlpack_legacy_async)(
      kf_context_t*, DLManagedTensor*, kf_stream_t*,
      kf_tensor_t**); /**< kf_tensor_from_dlpack_legacy_async(). */
} kf_api_t;

/**
 * @brief The function table for an ABI version.
 * @param abi_version A KF_API_VERSION_* value.
 * @return A static table, or NULL (with a last-error message) if this library does not serve
 *         that version.
 */
KF_API const kf_api_t* kf_get_api(uint32_t abi_version);

/** @brief Type of kf_get_api(), for `dlsym`. */
typedef const kf_api_t* (*kf_get_api_fn)(uint32_t abi_version);

#ifdef __cplusplus
}
#endif

#endif /* KERNEL_FUSION_API_H */
