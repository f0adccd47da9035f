// The core/math headers, embedded at build time (cmake/embed_headers.cmake) so that NVRTC
// compiles generated kernels against the very text the rest of the library was built from.
#pragma once

#include <cstddef>

namespace kf {
namespace fusion {

struct EmbeddedHeader {
  const char* name;  // as #included, e.g. "core/math/fusion_ops.hpp"
  const char* text;  // NUL-terminated
  size_t size;       // bytes, without the NUL
};

extern const EmbeddedHeader kEmbeddedHeaders[];
extern const size_t kEmbeddedHeaderCount;

}  // namespace fusion
}  // namespace kf
