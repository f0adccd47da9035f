// The softmax family's register-cached launches for bf16 rows narrower than 16-byte vectors
// (cuda.cuh, rows::narrow_cached_launcher), in a translation unit of their own.
#include "core/ops/softmax/cuda.cuh"
#include "core/ops/softmax/cuda_storage.hpp"

namespace kf::softmax {

NarrowLauncher narrow_cached_launcher(math::bfloat16_t, int bytes) {
  return rows::narrow_cached_launcher<math::bfloat16_t, Cached<math::bfloat16_t>, Plan>(bytes);
}

}  // namespace kf::softmax
