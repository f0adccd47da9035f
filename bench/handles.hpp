// Error checking and RAII holders for the C handles kf-bench uses.
#pragma once

#include <stdexcept>
#include <string>

#include "kernel_fusion/kernel_fusion.h"

namespace kf_bench {

// Thrown when a library call fails; carries the library's own message.
class Failure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws Failure naming `what` and the library's message unless r == KF_SUCCESS.
inline void check(kf_result_t r, const char* what) {
  if (r != KF_SUCCESS) {
    throw Failure(std::string(what) + ": " + kf_result_string(r) + ": " +
                  kf_get_last_error_message());
  }
}

// Owns one handle; destroys it with `Destroy` (errors on destruction are ignored).
template <typename T, kf_result_t (*Destroy)(T*)>
class Handle {
 public:
  Handle() = default;
  ~Handle() { reset(); }
  Handle(Handle&& other) noexcept : handle_(other.handle_) { other.handle_ = nullptr; }
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = other.handle_;
      other.handle_ = nullptr;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  T* get() const { return handle_; }
  // For the library's out-parameter: releases what is held and returns the slot to fill.
  T** out() {
    reset();
    return &handle_;
  }
  void reset() {
    if (handle_ != nullptr) Destroy(handle_);
    handle_ = nullptr;
  }

 private:
  T* handle_ = nullptr;
};

using Context = Handle<kf_context_t, kf_context_destroy>;
using Stream = Handle<kf_stream_t, kf_stream_destroy>;
using Event = Handle<kf_event_t, kf_event_destroy>;
using Tensor = Handle<kf_tensor_t, kf_tensor_destroy>;

}  // namespace kf_bench
