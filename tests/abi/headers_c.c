/* The public headers compile as strict ISO C (built as C99 and C11 with -Wall -Wextra -pedantic
 * -Werror). Using the initialisers and types makes sure they are valid C, not just declarations. */
#include "kernel_fusion/kernel_fusion.h"

/* The umbrella header again, and each header alone after it: include guards must hold. */
#include "kernel_fusion/api.h"
#include "kernel_fusion/dlpack.h"
#include "kernel_fusion/ops.h"
#include "kernel_fusion/runtime.h"
#include "kernel_fusion/types.h"

typedef char kf_check_dims[(KF_MAX_DIMS == 8) ? 1 : -1];
typedef char kf_check_success[(KF_SUCCESS == 0) ? 1 : -1];
typedef char kf_check_version
    [(KF_VERSION == KF_VERSION_MAJOR * 10000 + KF_VERSION_MINOR * 100 + KF_VERSION_PATCH) ? 1 : -1];

int kf_headers_compile_as_c(void);

int kf_headers_compile_as_c(void) {
  kf_context_config_t context_config = KF_CONTEXT_CONFIG_INIT;
  kf_stream_config_t stream_config = KF_STREAM_CONFIG_INIT;
  kf_tensor_desc_t desc = {2, {3, 4}, {0}, KF_DTYPE_FLOAT32};
  kf_get_api_fn get_api = kf_get_api;
  DLManagedTensorVersioned managed;
  kf_deleter_fn deleter = 0;
  managed.version.major = DLPACK_MAJOR_VERSION;
  managed.flags = DLPACK_FLAG_BITMASK_READ_ONLY;
  (void)get_api;
  (void)deleter;
  return (int)(context_config.struct_size + stream_config.struct_size) + desc.ndim +
         (int)managed.version.major + (int)managed.flags;
}
