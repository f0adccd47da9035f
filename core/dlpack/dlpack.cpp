// PLACEHOLDER until the DLPack implementation lands: every entry reports NOT_SUPPORTED.
#include "core/runtime/error.hpp"
#include "kernel_fusion/dlpack.h"

extern "C" {
kf_result_t kf_tensor_from_dlpack(kf_context_t*, DLManagedTensorVersioned*, kf_tensor_t**) {
  return kf::api_call([] { kf::fail(KF_ERROR_NOT_SUPPORTED, "DLPack import is not implemented yet"); });
}
kf_result_t kf_tensor_from_dlpack_legacy(kf_context_t*, DLManagedTensor*, kf_tensor_t**) {
  return kf::api_call([] { kf::fail(KF_ERROR_NOT_SUPPORTED, "DLPack import is not implemented yet"); });
}
kf_result_t kf_tensor_to_dlpack(const kf_tensor_t*, DLManagedTensorVersioned**) {
  return kf::api_call([] { kf::fail(KF_ERROR_NOT_SUPPORTED, "DLPack export is not implemented yet"); });
}
kf_result_t kf_tensor_to_dlpack_legacy(const kf_tensor_t*, DLManagedTensor**) {
  return kf::api_call([] { kf::fail(KF_ERROR_NOT_SUPPORTED, "DLPack export is not implemented yet"); });
}
}
