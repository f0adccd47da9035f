// Helpers shared by the elementwise cases (cases.cpp) and the op cases (op_cases.cpp): tensors
// from shapes, uploads, and how many buffer sets keep the timed data out of the cache.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "bench/handles.hpp"

namespace kf_bench {

inline int64_t element_count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t extent : shape) n *= extent;
  return n;
}

inline Tensor make_tensor(kf_context_t* ctx, kf_dtype_t dtype, const std::vector<int64_t>& shape) {
  kf_tensor_desc_t desc{};
  desc.ndim = static_cast<int32_t>(shape.size());
  desc.dtype = dtype;
  for (size_t i = 0; i < shape.size(); ++i) desc.shape[i] = shape[i];
  Tensor t;
  check(kf_tensor_create(ctx, &desc, t.out()), "kf_tensor_create");
  return t;
}

inline void upload(kf_tensor_t* t, const std::vector<unsigned char>& packed, kf_stream_t* stream) {
  check(kf_tensor_copy_from_host(t, packed.data(), packed.size(), stream),
        "kf_tensor_copy_from_host");
}

// Buffer sets to rotate through so that one pass over them is at least 4x `cache_bytes`:
// `traffic_bytes` is what one run touches, `allocated_bytes` what one set holds (counted against a
// 2 GiB budget, at most 16 sets; 2 sets in --quick runs).
inline int rotation_sets(double traffic_bytes, double allocated_bytes, uint64_t cache_bytes,
                         bool quick) {
  constexpr double kSetBudgetBytes = 2.0 * 1024 * 1024 * 1024;
  const int max_sets =
      quick ? 2 : std::clamp(static_cast<int>(kSetBudgetBytes / allocated_bytes), 1, 16);
  return std::clamp(
      static_cast<int>(std::ceil(4.0 * static_cast<double>(cache_bytes) / traffic_bytes)), 1,
      max_sets);
}

}  // namespace kf_bench
