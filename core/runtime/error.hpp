// Errors inside the library are C++ exceptions of type kf::Error; every exported function runs
// its body through kf::api_call(), which turns them into a kf_result_t plus the thread-local
// message, so nothing thrown ever crosses the C boundary.
#pragma once

#include <cstdarg>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <utility>

#include "kernel_fusion/types.h"

namespace kf {

class Error : public std::exception {
 public:
  Error(kf_result_t code, std::string message) : code_(code), message_(std::move(message)) {}
  kf_result_t code() const noexcept { return code_; }
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  kf_result_t code_;
  std::string message_;
};

// The integer value of an enum that came from a caller, read without loading it as the enum type:
// a C caller may pass any int, and loading an out-of-range value as a C++ enum is undefined (and
// trapped by UBSan). Validate with this before using the value as the enum.
template <class E>
int raw_enum(const E& value) noexcept {
  static_assert(sizeof(E) == sizeof(int), "C enums are int-sized");
  int v;
  std::memcpy(&v, &value, sizeof(v));
  return v;
}

// printf-style formatting into a std::string.
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

[[noreturn]] void fail(kf_result_t code, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));

// A struct passed in carries its struct_size, so that a caller built against newer headers can
// call this library. Its bytes past `known` (the layout this library reads) are fields a newer
// header appended; the _INIT macros zero them, so zero bytes mean "left at the default" and are
// ignored. A nonzero byte there sets something this library does not know:
// KF_ERROR_VERSION_MISMATCH, naming `what` (e.g. "config") and the byte.
void require_unknown_tail_zero(const void* s, size_t struct_size, size_t known, const char* what);

void set_last_error(const char* message) noexcept;
void clear_last_error() noexcept;

// Runs an API body; returns KF_SUCCESS (and clears the message) or the error it raised.
template <class Body>
kf_result_t api_call(Body&& body) noexcept {
  try {
    body();
    clear_last_error();
    return KF_SUCCESS;
  } catch (const Error& e) {
    set_last_error(e.what());
    return e.code();
  } catch (const std::bad_alloc&) {
    set_last_error("host memory allocation failed");
    return KF_ERROR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_last_error(e.what());
    return KF_ERROR_INTERNAL;
  } catch (...) {
    set_last_error("unknown internal error");
    return KF_ERROR_INTERNAL;
  }
}

}  // namespace kf

// Throws kf::Error(code, message) unless cond holds.
#define KF_REQUIRE(cond, code, ...)             \
  do {                                          \
    if (!(cond)) ::kf::fail(code, __VA_ARGS__); \
  } while (0)

#define KF_REQUIRE_ARG(cond, ...) KF_REQUIRE(cond, KF_ERROR_INVALID_ARGUMENT, __VA_ARGS__)
