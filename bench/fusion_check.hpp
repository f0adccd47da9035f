// Helpers of the fusion cases' float64 checks: downloads, poisoned outputs, comparisons.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "bench/data.hpp"
#include "bench/tensors.hpp"

namespace kf_bench {

inline std::vector<unsigned char> download(const kf_tensor_t* t, size_t bytes,
                                           kf_stream_t* stream) {
  std::vector<unsigned char> packed(bytes);
  check(kf_tensor_copy_to_host(t, packed.data(), packed.size(), stream), "kf_tensor_copy_to_host");
  return packed;
}

// Fills a float tensor with NaN, so an element the kernel does not write fails the check.
inline void poison(kf_tensor_t* t, kf_dtype_t dtype, size_t count, kf_stream_t* stream) {
  upload(t, filled_elements(dtype, count, std::numeric_limits<double>::quiet_NaN()), stream);
}

// "" when got is within `tol` of want relative to max(1, |want|), else the mismatch.
inline std::string mismatch(const char* what, size_t index, double got, double want, double tol) {
  if (std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want))) return "";  // NaN fails
  char text[200];
  std::snprintf(text, sizeof text, "MISMATCH %s[%zu] = %.7g, float64 reference %.7g", what, index,
                got, want);
  return text;
}

// printf into a std::string (up to three numbers).
inline std::string format(const char* fmt, double a, double b = 0, double c = 0) {
  char text[256];
  std::snprintf(text, sizeof text, fmt, a, b, c);
  return text;
}

}  // namespace kf_bench
