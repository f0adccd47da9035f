// Compiled kernels: kf_graph_compile (through the context's kernel cache), the generated source
// and ahead-of-time NVRTC entries, and the kernel handle's lifetime and queries.
#include "core/fusion/kernel.hpp"

#include <cstring>
#include <mutex>

#include "core/runtime/context.hpp"
#include "core/runtime/error.hpp"
#include "core/runtime/handle.hpp"
#include "kernel_fusion/graph.h"

namespace kf {
namespace fusion {
namespace {

const kf_fused_kernel_t* checked_kernel(const kf_fused_kernel_t* k) { return checked(k, "k"); }

}  // namespace
}  // namespace fusion

void delete_fused_kernel(kf_fused_kernel_t* k) noexcept { delete k; }

}  // namespace kf

extern "C" {

kf_result_t kf_fused_kernel_destroy(kf_fused_kernel_t* k) {
  return kf::api_call([&] {
    if (k == nullptr) return;
    kf::fusion::checked_kernel(k);
    {
      std::lock_guard<std::mutex> lock(k->ctx->mutex);
      k->ctx->fused_kernels.erase(k);
    }
    kf::unregister_handle(k);
    kf::delete_fused_kernel(k);
  });
}

kf_result_t kf_fused_kernel_get_info(const kf_fused_kernel_t* k, kf_fused_kernel_info_t* info) {
  return kf::api_call([&] {
    kf::fusion::checked_kernel(k);
    KF_REQUIRE_ARG(info != nullptr, "info is NULL");
    KF_REQUIRE(info->struct_size >= sizeof(kf_fused_kernel_info_t), KF_ERROR_VERSION_MISMATCH,
               "info->struct_size is %zu; set it to sizeof(kf_fused_kernel_info_t) (%zu)",
               info->struct_size, sizeof(kf_fused_kernel_info_t));
    kf_fused_kernel_info_t facts{};
    facts.struct_size = info->struct_size;
    facts.origin = k->origin;
    facts.compile_ms = k->compile_ms;
    facts.n_inputs = static_cast<int32_t>(k->graph.inputs.size());
    facts.n_outputs = static_cast<int32_t>(k->graph.outputs.size());
    facts.max_items = k->options.max_items;
    facts.structure_hash = k->structure_hash;
    std::memcpy(info, &facts, sizeof(facts));
  });
}

}  // extern "C"
