// kf_get_api: the versioned function table for hosts that dlopen the library, kf_get_version.
// The static_asserts freeze the layout of version 1: members may only be appended.
#include <cstddef>

#include "core/runtime/error.hpp"
#include "kernel_fusion/api.h"

namespace kf {
namespace {

#define KF_FROZEN(member, offset)                       \
  static_assert(offsetof(kf_api_t, member) == (offset), \
                "kf_api_t member " #member " moved: the table is frozen")
KF_FROZEN(abi_version, 0);
KF_FROZEN(reserved, 4);
KF_FROZEN(struct_size, 8);
KF_FROZEN(result_string, 16);
KF_FROZEN(get_last_error_message, 24);
KF_FROZEN(get_version, 32);
KF_FROZEN(get_device_count, 40);
KF_FROZEN(get_device_properties, 48);
KF_FROZEN(context_create, 56);
KF_FROZEN(context_destroy, 64);
KF_FROZEN(context_get_device, 72);
KF_FROZEN(context_synchronize, 80);
KF_FROZEN(context_get_stream_priority_range, 88);
KF_FROZEN(context_get_memory_stats, 96);
KF_FROZEN(context_reset_peak_memory, 104);
KF_FROZEN(context_trim_memory, 112);
KF_FROZEN(stream_create, 120);
KF_FROZEN(stream_wrap_native, 128);
KF_FROZEN(stream_get_native, 136);
KF_FROZEN(stream_get_priority, 144);
KF_FROZEN(stream_destroy, 152);
KF_FROZEN(stream_synchronize, 160);
KF_FROZEN(stream_wait_event, 168);
KF_FROZEN(event_create, 176);
KF_FROZEN(event_record, 184);
KF_FROZEN(event_synchronize, 192);
KF_FROZEN(event_query, 200);
KF_FROZEN(event_elapsed_ms, 208);
KF_FROZEN(event_destroy, 216);
KF_FROZEN(tensor_create, 224);
KF_FROZEN(tensor_create_async, 232);
KF_FROZEN(tensor_wrap, 240);
KF_FROZEN(tensor_create_view, 248);
KF_FROZEN(tensor_destroy, 256);
KF_FROZEN(tensor_get_desc, 264);
KF_FROZEN(tensor_get_data, 272);
KF_FROZEN(tensor_get_device, 280);
KF_FROZEN(tensor_get_context, 288);
KF_FROZEN(tensor_copy_from_host, 296);
KF_FROZEN(tensor_copy_to_host, 304);
KF_FROZEN(dtype_size, 312);
KF_FROZEN(tensor_from_dlpack, 320);
KF_FROZEN(tensor_from_dlpack_legacy, 328);
KF_FROZEN(tensor_to_dlpack, 336);
KF_FROZEN(tensor_to_dlpack_legacy, 344);
KF_FROZEN(fused_elementwise_add_activation, 352);
KF_FROZEN(fused_elementwise_mul_activation, 360);
KF_FROZEN(fused_bias_activation, 368);
KF_FROZEN(fused_gelu_dropout, 376);
KF_FROZEN(fused_layer_norm_activation, 384);
KF_FROZEN(fused_rms_norm_activation, 392);
KF_FROZEN(fused_softmax, 400);
KF_FROZEN(log_softmax, 408);
KF_FROZEN(fused_batch_norm_activation, 416);
KF_FROZEN(reduce, 424);
KF_FROZEN(reduce_sum_squared, 432);
KF_FROZEN(reduce_mean_abs, 440);
KF_FROZEN(graph_create, 448);
KF_FROZEN(graph_destroy, 456);
KF_FROZEN(graph_input, 464);
KF_FROZEN(graph_scalar, 472);
KF_FROZEN(graph_constant, 480);
KF_FROZEN(graph_unary, 488);
KF_FROZEN(graph_activation, 496);
KF_FROZEN(graph_binary, 504);
KF_FROZEN(graph_clamp, 512);
KF_FROZEN(graph_where, 520);
KF_FROZEN(graph_cast, 528);
KF_FROZEN(graph_read_image, 536);
KF_FROZEN(graph_color_convert, 544);
KF_FROZEN(graph_normalize, 552);
KF_FROZEN(graph_output, 560);
KF_FROZEN(graph_compile, 568);
KF_FROZEN(graph_get_source, 576);
KF_FROZEN(graph_compile_for_arch, 584);
KF_FROZEN(fused_kernel_destroy, 592);
KF_FROZEN(fused_kernel_get_info, 600);
KF_FROZEN(fused_kernel_get_source, 608);
KF_FROZEN(fused_kernel_launch, 616);
// Appended in 0.3.0.
KF_FROZEN(tensor_wrap_async, 624);
KF_FROZEN(tensor_from_dlpack_async, 632);
KF_FROZEN(tensor_from_dlpack_legacy_async, 640);
static_assert(sizeof(kf_api_t) == 648, "kf_api_t version 1 has 79 functions");
#undef KF_FROZEN

const kf_api_t kApiV1 = {
    KF_API_VERSION_1,
    0,
    sizeof(kf_api_t),
    &kf_result_string,
    &kf_get_last_error_message,
    &kf_get_version,
    &kf_get_device_count,
    &kf_get_device_properties,
    &kf_context_create,
    &kf_context_destroy,
    &kf_context_get_device,
    &kf_context_synchronize,
    &kf_context_get_stream_priority_range,
    &kf_context_get_memory_stats,
    &kf_context_reset_peak_memory,
    &kf_context_trim_memory,
    &kf_stream_create,
    &kf_stream_wrap_native,
    &kf_stream_get_native,
    &kf_stream_get_priority,
    &kf_stream_destroy,
    &kf_stream_synchronize,
    &kf_stream_wait_event,
    &kf_event_create,
    &kf_event_record,
    &kf_event_synchronize,
    &kf_event_query,
    &kf_event_elapsed_ms,
    &kf_event_destroy,
    &kf_tensor_create,
    &kf_tensor_create_async,
    &kf_tensor_wrap,
    &kf_tensor_create_view,
    &kf_tensor_destroy,
    &kf_tensor_get_desc,
    &kf_tensor_get_data,
    &kf_tensor_get_device,
    &kf_tensor_get_context,
    &kf_tensor_copy_from_host,
    &kf_tensor_copy_to_host,
    &kf_dtype_size,
    &kf_tensor_from_dlpack,
    &kf_tensor_from_dlpack_legacy,
    &kf_tensor_to_dlpack,
    &kf_tensor_to_dlpack_legacy,
    &kf_fused_elementwise_add_activation,
    &kf_fused_elementwise_mul_activation,
    &kf_fused_bias_activation,
    &kf_fused_gelu_dropout,
    &kf_fused_layer_norm_activation,
    &kf_fused_rms_norm_activation,
    &kf_fused_softmax,
    &kf_log_softmax,
    &kf_fused_batch_norm_activation,
    &kf_reduce,
    &kf_reduce_sum_squared,
    &kf_reduce_mean_abs,
    &kf_graph_create,
    &kf_graph_destroy,
    &kf_graph_input,
    &kf_graph_scalar,
    &kf_graph_constant,
    &kf_graph_unary,
    &kf_graph_activation,
    &kf_graph_binary,
    &kf_graph_clamp,
    &kf_graph_where,
    &kf_graph_cast,
    &kf_graph_read_image,
    &kf_graph_color_convert,
    &kf_graph_normalize,
    &kf_graph_output,
    &kf_graph_compile,
    &kf_graph_get_source,
    &kf_graph_compile_for_arch,
    &kf_fused_kernel_destroy,
    &kf_fused_kernel_get_info,
    &kf_fused_kernel_get_source,
    &kf_fused_kernel_launch,
    &kf_tensor_wrap_async,
    &kf_tensor_from_dlpack_async,
    &kf_tensor_from_dlpack_legacy_async,
};

}  // namespace
}  // namespace kf

extern "C" {

uint32_t kf_get_version(void) { return KF_VERSION; }

const kf_api_t* kf_get_api(uint32_t abi_version) {
  if (abi_version == KF_API_VERSION_1) {
    kf::clear_last_error();
    return &kf::kApiV1;
  }
  kf::set_last_error(
      kf::format("kf_get_api: ABI version %u is not served by this library (version %u.%u.%u "
                 "serves ABI version %u)",
                 abi_version, KF_VERSION_MAJOR, KF_VERSION_MINOR, KF_VERSION_PATCH,
                 KF_API_VERSION_1)
          .c_str());
  return nullptr;
}

}  // extern "C"
