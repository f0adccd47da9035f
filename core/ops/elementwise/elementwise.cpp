// PLACEHOLDER until the elementwise implementation lands.
#include "core/runtime/error.hpp"
#include "kernel_fusion/ops.h"

extern "C" {
kf_result_t kf_fused_elementwise_add_activation(kf_context_t*, const kf_tensor_t*, const kf_tensor_t*,
                                                kf_tensor_t*, kf_activation_t, kf_stream_t*) {
  return kf::api_call([] { kf::fail(KF_ERROR_NOT_SUPPORTED, "not implemented yet"); });
}
kf_result_t kf_fused_elementwise_mul_activation(kf_context_t*, const kf_tensor_t*, const kf_tensor_t*,
                                                kf_tensor_t*, kf_activation_t, kf_stream_t*) {
  return kf::api_call([] { kf::fail(KF_ERROR_NOT_SUPPORTED, "not implemented yet"); });
}
}
