// The public headers, C and C++, compile as C++17 with -Wall -Wextra -pedantic -Werror.
#include "kernel_fusion/kernel_fusion.h"
#include "kernel_fusion/kernel_fusion.hpp"

#include <type_traits>

static_assert(std::is_standard_layout<kf_tensor_desc_t>::value, "C layout");
static_assert(std::is_trivially_copyable<kf_api_t>::value, "C layout");
static_assert(KF_MAX_DIMS == 8, "contract");

int kf_headers_compile_as_cxx();

int kf_headers_compile_as_cxx() {
  kf_context_config_t context_config = KF_CONTEXT_CONFIG_INIT;
  kf_stream_config_t stream_config = KF_STREAM_CONFIG_INIT;
  kf_get_api_fn get_api = &kf_get_api;
  (void)get_api;
  return static_cast<int>(context_config.struct_size + stream_config.struct_size);
}
