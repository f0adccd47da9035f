// The thread-local error message and the names of result codes.
#include "core/runtime/error.hpp"

#include <cstdio>
#include <string>

#include "kernel_fusion/runtime.h"

namespace kf {
namespace {

std::string vformat(const char* fmt, va_list args) {
  va_list copy;
  va_copy(copy, args);
  int n = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  if (n <= 0) return std::string();
  std::string out(static_cast<size_t>(n) + 1, '\0');
  std::vsnprintf(&out[0], out.size(), fmt, args);
  out.resize(static_cast<size_t>(n));
  return out;
}

// Never freed before thread exit; a reference stays valid until the next call on this thread.
std::string& last_error() {
  thread_local std::string message;
  return message;
}

}  // namespace

std::string format(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::string out = vformat(fmt, args);
  va_end(args);
  return out;
}

void fail(kf_result_t code, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::string message = vformat(fmt, args);
  va_end(args);
  throw Error(code, std::move(message));
}

void require_unknown_tail_zero(const void* s, size_t struct_size, size_t known, const char* what) {
  // A size no header will give (an uninitialised struct_size, say) is refused before any byte
  // past the known layout is read.
  constexpr size_t kLargestLayout = 1024;
  KF_REQUIRE(struct_size <= kLargestLayout, KF_ERROR_VERSION_MISMATCH,
             "%s->struct_size is %zu, larger than any layout (at most %zu bytes): initialise the "
             "struct with its _INIT macro",
             what, struct_size, kLargestLayout);
  const unsigned char* bytes = static_cast<const unsigned char*>(s);
  for (size_t i = known; i < struct_size; ++i) {
    KF_REQUIRE(bytes[i] == 0, KF_ERROR_VERSION_MISMATCH,
               "%s->struct_size is %zu, and its byte %zu, past the %zu bytes of the layout this "
               "library (version %d.%d.%d) knows, is not zero: the caller's headers are newer "
               "and set a field this library does not have",
               what, struct_size, i, known, KF_VERSION_MAJOR, KF_VERSION_MINOR, KF_VERSION_PATCH);
  }
}

void set_last_error(const char* message) noexcept {
  try {
    last_error() = message != nullptr ? message : "";
  } catch (...) {
    last_error().clear();  // out of memory: an empty message is better than none at all
  }
}

void clear_last_error() noexcept { last_error().clear(); }

}  // namespace kf

extern "C" {

const char* kf_result_string(kf_result_t r) {
  int raw = kf::raw_enum(r);
  if (raw < KF_SUCCESS || raw > KF_ERROR_COMPILE) return "KF_ERROR_UNKNOWN";
  switch (r) {
    case KF_SUCCESS: return "KF_SUCCESS";
    case KF_ERROR_INVALID_ARGUMENT: return "KF_ERROR_INVALID_ARGUMENT";
    case KF_ERROR_INVALID_HANDLE: return "KF_ERROR_INVALID_HANDLE";
    case KF_ERROR_OUT_OF_MEMORY: return "KF_ERROR_OUT_OF_MEMORY";
    case KF_ERROR_NOT_SUPPORTED: return "KF_ERROR_NOT_SUPPORTED";
    case KF_ERROR_SHAPE_MISMATCH: return "KF_ERROR_SHAPE_MISMATCH";
    case KF_ERROR_DTYPE_MISMATCH: return "KF_ERROR_DTYPE_MISMATCH";
    case KF_ERROR_DEVICE_MISMATCH: return "KF_ERROR_DEVICE_MISMATCH";
    case KF_ERROR_NO_DEVICE: return "KF_ERROR_NO_DEVICE";
    case KF_ERROR_CUDA: return "KF_ERROR_CUDA";
    case KF_ERROR_VERSION_MISMATCH: return "KF_ERROR_VERSION_MISMATCH";
    case KF_ERROR_INTERNAL: return "KF_ERROR_INTERNAL";
    case KF_ERROR_COMPILE: return "KF_ERROR_COMPILE";
  }
  return "KF_ERROR_UNKNOWN";
}

const char* kf_get_last_error_message(void) { return kf::last_error().c_str(); }

}  // extern "C"
