// Helpers shared by the elementwise, op and fusion cases: tensors from shapes, uploads and
// downloads, poisoned outputs, and how many buffer sets keep the timed data out of the cache.
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

inline std::vector<unsigned char> download(const kf_tensor_t* t, size_t bytes,
                                           kf_stream_t* stream) {
  std::vector<unsigned char> packed(bytes);
  check(kf_tensor_copy_to_host(t, packed.data(), packed.size(), stream), "kf_tensor_copy_to_host");
  return packed;
}

// Fills a tensor with 0xFF bytes, NaN in every float dtype (255 in u8), so that an element the
// kernel leaves unwritten fails the check that follows, whatever the buffer held before.
inline void poison(kf_tensor_t* t, kf_stream_t* stream) {
  kf_tensor_desc_t desc{};
  check(kf_tensor_get_desc(t, &desc), "kf_tensor_get_desc");
  const int64_t count = element_count(std::vector<int64_t>(desc.shape, desc.shape + desc.ndim));
  upload(t,
         std::vector<unsigned char>(static_cast<size_t>(count) * kf_dtype_size(desc.dtype), 0xFF),
         stream);
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
