// Helpers of the fusion cases' float64 checks: comparisons and formatted numbers (downloads and
// poisoned outputs are in tensors.hpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

namespace kf_bench {

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
