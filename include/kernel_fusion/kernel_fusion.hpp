/**
 * @file kernel_fusion.hpp
 * @brief Header-only C++17 wrapper of the C API: RAII handles and exceptions.
 *
 * Every class owns one C handle, is move-only and destroys the handle in its destructor. A
 * failing C call throws kernel_fusion::Error, which carries the kf_result_t and the library's
 * message. The wrapper adds no state of its own and compiles against the C ABI only, so it works
 * with any build of libkernel_fusion of the same major version.
 *
 * Destroying a Context invalidates the streams, events, tensors, graphs and fused kernels created
 * from it. Destroy their wrappers first: a wrapper destroyed afterwards hands the library a stale
 * handle, which it rejects only while the object's memory stays retired (the next 1024 destroys
 * of the process); past that a new object may have its address, and would be destroyed.
 *
 * @code
 * kernel_fusion::Context ctx = kernel_fusion::Context::cpu();
 * kernel_fusion::Tensor a(ctx, {2, 3}), b(ctx, {3}), out(ctx, {2, 3});
 * a.copy_from(std::vector<float>{1, -2, 3, -4, 5, -6});
 * b.copy_from(std::vector<float>{0.5f, 0.5f, 0.5f});
 * kernel_fusion::fused_elementwise_add_activation(ctx, a, b, out, KF_ACTIVATION_RELU);
 * std::vector<float> result = out.to_vector<float>();
 * @endcode
 */
#ifndef KERNEL_FUSION_HPP
#define KERNEL_FUSION_HPP

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernel_fusion/kernel_fusion.h"

/** @brief The C++ wrapper of libkernel_fusion. */
namespace kernel_fusion {

/** @brief A failed library call: its result code and the library's message. */
class Error : public std::runtime_error {
 public:
  /**
   * @brief Makes an error; what() reads "<KF_ERROR_...>: <message>".
   * @param code The failing call's result.
   * @param message What was wrong, in user terms.
   */
  Error(kf_result_t code, const std::string& message)
      : std::runtime_error(std::string(kf_result_string(code)) + ": " + message),
        code_(code),
        message_(message) {}

  /** @brief The result code of the failing call. @return A KF_ERROR_* value. */
  kf_result_t code() const noexcept { return code_; }

  /** @brief The library's message alone, without the code's name. @return The message. */
  const std::string& message() const noexcept { return message_; }

 private:
  kf_result_t code_;
  std::string message_;
};

/**
 * @brief Throws Error, with the calling thread's last error message, unless @p result is
 *        KF_SUCCESS.
 * @param result The value a C API call returned.
 */
inline void check(kf_result_t result) {
  if (result != KF_SUCCESS) throw Error(result, kf_get_last_error_message());
}

/** @brief The loaded library's version. @return `major*10000 + minor*100 + patch`. */
inline uint32_t version() noexcept { return kf_get_version(); }

namespace detail {

// Unique ownership of one C handle; Destroy is a functor calling the kf_*_destroy function.
template <class Handle, class Destroy>
class UniqueHandle {
 public:
  UniqueHandle() noexcept = default;
  explicit UniqueHandle(Handle* handle) noexcept : handle_(handle) {}
  UniqueHandle(const UniqueHandle&) = delete;
  UniqueHandle& operator=(const UniqueHandle&) = delete;
  UniqueHandle(UniqueHandle&& other) noexcept : handle_(other.release()) {}
  UniqueHandle& operator=(UniqueHandle&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  ~UniqueHandle() { reset(); }

  Handle* get() const noexcept { return handle_; }
  Handle* release() noexcept { return std::exchange(handle_, nullptr); }
  void reset(Handle* handle = nullptr) noexcept {
    // The result is ignored: a destructor cannot throw, and a stale handle is refused safely.
    if (handle_ != nullptr) static_cast<void>(Destroy{}(handle_));
    handle_ = handle;
  }
  explicit operator bool() const noexcept { return handle_ != nullptr; }

 private:
  Handle* handle_ = nullptr;
};

struct DestroyContext {
  kf_result_t operator()(kf_context_t* h) const noexcept { return kf_context_destroy(h); }
};
struct DestroyStream {
  kf_result_t operator()(kf_stream_t* h) const noexcept { return kf_stream_destroy(h); }
};
struct DestroyEvent {
  kf_result_t operator()(kf_event_t* h) const noexcept { return kf_event_destroy(h); }
};
struct DestroyTensor {
  kf_result_t operator()(kf_tensor_t* h) const noexcept { return kf_tensor_destroy(h); }
};
struct DestroyGraph {
  kf_result_t operator()(kf_graph_t* h) const noexcept { return kf_graph_destroy(h); }
};
struct DestroyFusedKernel {
  kf_result_t operator()(kf_fused_kernel_t* h) const noexcept { return kf_fused_kernel_destroy(h); }
};

}  // namespace detail

class Stream;
class Event;

/** @brief A library context: one device, its memory pool and default stream. */
class Context {
 public:
  /** @brief An empty wrapper that owns nothing. */
  Context() noexcept = default;

  /**
   * @brief Creates a context (kf_context_create()).
   * @param config Options, e.g. #KF_CONTEXT_CONFIG_INIT with the fields of interest changed.
   */
  explicit Context(const kf_context_config_t& config) { create(&config); }

  /**
   * @brief Takes ownership of a context handle created through the C API.
   * @param owned The handle; destroyed with this object.
   */
  explicit Context(kf_context_t* owned) noexcept : handle_(owned) {}

  /**
   * @brief A CPU context.
   * @param threads Worker threads; 0 means one per core.
   * @param memory_limit_bytes Cap on the pool's reserved bytes; 0 means none.
   * @return The context.
   */
  static Context cpu(int32_t threads = 0, uint64_t memory_limit_bytes = 0) {
    kf_context_config_t config = KF_CONTEXT_CONFIG_INIT;
    config.device_type = KF_DEVICE_CPU;
    config.cpu_threads = threads;
    config.memory_limit_bytes = memory_limit_bytes;
    return Context(config);
  }

  /**
   * @brief A CUDA context; throws Error with KF_ERROR_NO_DEVICE where no GPU is usable.
   * @param device_id CUDA device ordinal.
   * @param memory_limit_bytes Cap on the pool's reserved bytes; 0 means none.
   * @return The context.
   */
  static Context cuda(int32_t device_id = 0, uint64_t memory_limit_bytes = 0) {
    kf_context_config_t config = KF_CONTEXT_CONFIG_INIT;
    config.device_type = KF_DEVICE_CUDA;
    config.device_id = device_id;
    config.memory_limit_bytes = memory_limit_bytes;
    return Context(config);
  }

  /** @brief The first usable CUDA device, else the CPU. @return The context. */
  static Context best_available() {
    Context ctx;
    ctx.create(nullptr);
    return ctx;
  }

  /** @brief The C handle (still owned by this object). @return The handle, or NULL if empty. */
  kf_context_t* get() const noexcept { return handle_.get(); }
  /** @brief Gives up ownership. @return The handle, which the caller must destroy. */
  kf_context_t* release() noexcept { return handle_.release(); }
  /** @brief Whether this object owns a handle. @return True unless empty or moved from. */
  explicit operator bool() const noexcept { return static_cast<bool>(handle_); }

  /** @brief The context's device type. @return KF_DEVICE_CPU or KF_DEVICE_CUDA. */
  kf_device_type_t device_type() const {
    kf_device_type_t type = KF_DEVICE_CPU;
    check(kf_context_get_device(get(), &type, nullptr));
    return type;
  }

  /** @brief The context's device ordinal. @return The ordinal (0 for the CPU). */
  int32_t device_id() const {
    int32_t id = 0;
    check(kf_context_get_device(get(), nullptr, &id));
    return id;
  }

  /** @brief Waits for all work on every stream of the context (kf_context_synchronize()). */
  void synchronize() const { check(kf_context_synchronize(get())); }

  /** @brief The memory pool's statistics. @return The statistics. */
  kf_memory_stats_t memory_stats() const {
    kf_memory_stats_t stats{};
    stats.struct_size = sizeof stats;
    check(kf_context_get_memory_stats(get(), &stats));
    return stats;
  }

  /** @brief Resets the peak statistic to the bytes now in use. */
  void reset_peak_memory() { check(kf_context_reset_peak_memory(get())); }

  /**
   * @brief Returns cached pool memory to the system (kf_context_trim_memory()).
   * @param keep_bytes Cached bytes that may stay reserved.
   */
  void trim_memory(uint64_t keep_bytes = 0) { check(kf_context_trim_memory(get(), keep_bytes)); }

  /**
   * @brief The device's stream priority range (lower is more urgent).
   * @return {least urgent, most urgent}.
   */
  std::pair<int32_t, int32_t> stream_priority_range() const {
    int32_t least = 0;
    int32_t greatest = 0;
    check(kf_context_get_stream_priority_range(get(), &least, &greatest));
    return {least, greatest};
  }

 private:
  void create(const kf_context_config_t* config) {
    kf_context_t* handle = nullptr;
    check(kf_context_create(config, &handle));
    handle_.reset(handle);
  }
  detail::UniqueHandle<kf_context_t, detail::DestroyContext> handle_;
};

/** @brief An ordered queue of work on a context's device. */
class Stream {
 public:
  /** @brief An empty wrapper that owns nothing. */
  Stream() noexcept = default;

  /**
   * @brief Creates a stream (kf_stream_create()).
   * @param ctx Context.
   * @param priority Priority, clamped to the device's range (lower is more urgent).
   * @param flags Bitwise OR of KF_STREAM_* flags.
   */
  explicit Stream(const Context& ctx, int32_t priority = 0,
                  uint32_t flags = KF_STREAM_NON_BLOCKING) {
    kf_stream_config_t config = KF_STREAM_CONFIG_INIT;
    config.priority = priority;
    config.flags = flags;
    kf_stream_t* handle = nullptr;
    check(kf_stream_create(ctx.get(), &config, &handle));
    handle_.reset(handle);
  }

  /**
   * @brief Takes ownership of a stream handle created through the C API.
   * @param owned The handle; destroyed with this object.
   */
  explicit Stream(kf_stream_t* owned) noexcept : handle_(owned) {}

  /**
   * @brief Wraps a native `cudaStream_t` owned elsewhere (kf_stream_wrap_native()).
   * @param ctx A CUDA context on the stream's device.
   * @param native_stream The `cudaStream_t`; it is not destroyed with the wrapper.
   * @return The wrapper.
   */
  static Stream wrap_native(const Context& ctx, void* native_stream) {
    kf_stream_t* handle = nullptr;
    check(kf_stream_wrap_native(ctx.get(), native_stream, &handle));
    return Stream(handle);
  }

  /** @brief The C handle (still owned by this object). @return The handle, or NULL if empty. */
  kf_stream_t* get() const noexcept { return handle_.get(); }
  /** @brief Gives up ownership. @return The handle, which the caller must destroy. */
  kf_stream_t* release() noexcept { return handle_.release(); }
  /** @brief Whether this object owns a handle. @return True unless empty or moved from. */
  explicit operator bool() const noexcept { return static_cast<bool>(handle_); }

  /** @brief Blocks until all work on the stream has finished. */
  void synchronize() const { check(kf_stream_synchronize(get())); }

  /**
   * @brief Makes later work on this stream wait for @p event (kf_stream_wait_event()).
   * @param event A recorded (or never recorded) event of the same context.
   */
  inline void wait(const Event& event) const;

  /** @brief The effective (clamped) priority. @return The priority. */
  int32_t priority() const {
    int32_t value = 0;
    check(kf_stream_get_priority(get(), &value));
    return value;
  }

  /** @brief The native handle. @return The `cudaStream_t` on CUDA, NULL on the CPU. */
  void* native() const {
    void* value = nullptr;
    check(kf_stream_get_native(get(), &value));
    return value;
  }

 private:
  detail::UniqueHandle<kf_stream_t, detail::DestroyStream> handle_;
};

/** @brief A point in a stream, for ordering and timing. */
class Event {
 public:
  /** @brief An empty wrapper that owns nothing. */
  Event() noexcept = default;

  /**
   * @brief Creates an event (kf_event_create()).
   * @param ctx Context.
   */
  explicit Event(const Context& ctx) {
    kf_event_t* handle = nullptr;
    check(kf_event_create(ctx.get(), &handle));
    handle_.reset(handle);
  }

  /** @brief The C handle (still owned by this object). @return The handle, or NULL if empty. */
  kf_event_t* get() const noexcept { return handle_.get(); }
  /** @brief Gives up ownership. @return The handle, which the caller must destroy. */
  kf_event_t* release() noexcept { return handle_.release(); }
  /** @brief Whether this object owns a handle. @return True unless empty or moved from. */
  explicit operator bool() const noexcept { return static_cast<bool>(handle_); }

  /**
   * @brief Records the event at the current end of a stream (kf_event_record()).
   * @param stream The stream, or NULL for the context's default stream.
   */
  void record(const Stream* stream = nullptr) {
    check(kf_event_record(get(), stream != nullptr ? stream->get() : nullptr));
  }

  /** @brief Blocks until the work before the last record has finished. */
  void synchronize() const { check(kf_event_synchronize(get())); }

  /** @brief Whether the event has completed, without blocking. @return True when complete. */
  bool query() const {
    int32_t complete = 0;
    check(kf_event_query(get(), &complete));
    return complete != 0;
  }

  /**
   * @brief Milliseconds between two completed events (kf_event_elapsed_ms()).
   * @param start Event recorded first.
   * @param end Event recorded later.
   * @return Elapsed milliseconds.
   */
  static float elapsed_ms(const Event& start, const Event& end) {
    float ms = 0.0f;
    check(kf_event_elapsed_ms(start.get(), end.get(), &ms));
    return ms;
  }

 private:
  detail::UniqueHandle<kf_event_t, detail::DestroyEvent> handle_;
};

inline void Stream::wait(const Event& event) const {
  check(kf_stream_wait_event(get(), event.get()));
}

/**
 * @brief A tensor descriptor from a shape and optional element strides.
 * @param shape Extents, at most #KF_MAX_DIMS of them.
 * @param dtype Element type.
 * @param strides Element strides, empty for contiguous row-major.
 * @return The descriptor; throws Error (KF_ERROR_INVALID_ARGUMENT) for too many dimensions or a
 *         strides list of the wrong length.
 */
inline kf_tensor_desc_t make_desc(const std::vector<int64_t>& shape,
                                  kf_dtype_t dtype = KF_DTYPE_FLOAT32,
                                  const std::vector<int64_t>& strides = {}) {
  if (shape.size() > KF_MAX_DIMS) {
    throw Error(KF_ERROR_INVALID_ARGUMENT, "a tensor has at most " + std::to_string(KF_MAX_DIMS) +
                                               " dimensions, not " + std::to_string(shape.size()));
  }
  if (!strides.empty() && strides.size() != shape.size()) {
    throw Error(KF_ERROR_INVALID_ARGUMENT, "strides has " + std::to_string(strides.size()) +
                                               " entries for " + std::to_string(shape.size()) +
                                               " dimensions");
  }
  kf_tensor_desc_t desc{};
  desc.ndim = static_cast<int32_t>(shape.size());
  desc.dtype = dtype;
  for (size_t i = 0; i < shape.size(); ++i) {
    desc.shape[i] = shape[i];
    desc.strides[i] = strides.empty() ? 0 : strides[i];
  }
  return desc;
}

/** @brief An n-dimensional array in a context's memory (owned, a view, or borrowed). */
class Tensor {
 public:
  /** @brief An empty wrapper that owns nothing. */
  Tensor() noexcept = default;

  /**
   * @brief Allocates a tensor from the context's pool (kf_tensor_create()).
   * @param ctx Context.
   * @param desc Shape, strides and dtype.
   */
  Tensor(const Context& ctx, const kf_tensor_desc_t& desc) {
    kf_tensor_t* handle = nullptr;
    check(kf_tensor_create(ctx.get(), &desc, &handle));
    handle_.reset(handle);
  }

  /**
   * @brief Allocates a contiguous tensor.
   * @param ctx Context.
   * @param shape Extents.
   * @param dtype Element type.
   */
  Tensor(const Context& ctx, std::initializer_list<int64_t> shape,
         kf_dtype_t dtype = KF_DTYPE_FLOAT32)
      : Tensor(ctx, make_desc(std::vector<int64_t>(shape), dtype)) {}

  /**
   * @brief Takes ownership of a tensor handle created through the C API.
   * @param owned The handle; destroyed with this object.
   */
  explicit Tensor(kf_tensor_t* owned) noexcept : handle_(owned) {}

  /**
   * @brief Allocates a tensor ordered on a stream (kf_tensor_create_async()).
   * @param ctx Context.
   * @param desc Shape, strides and dtype.
   * @param stream Home stream of the tensor.
   * @return The tensor.
   */
  static Tensor create_async(const Context& ctx, const kf_tensor_desc_t& desc,
                             const Stream& stream) {
    kf_tensor_t* handle = nullptr;
    check(kf_tensor_create_async(ctx.get(), &desc, stream.get(), &handle));
    return Tensor(handle);
  }

  /**
   * @brief Wraps memory owned by the caller, without copying (kf_tensor_wrap()).
   * @param ctx Context whose device holds the memory.
   * @param desc Shape, strides and dtype.
   * @param data First element.
   * @param capacity_bytes Bytes valid from @p data.
   * @param deleter Called once when the memory is no longer used; NULL to keep ownership.
   * @param user_data Passed to @p deleter.
   * @return The tensor.
   */
  static Tensor wrap(const Context& ctx, const kf_tensor_desc_t& desc, void* data,
                     size_t capacity_bytes, kf_deleter_fn deleter = nullptr,
                     void* user_data = nullptr) {
    kf_tensor_t* handle = nullptr;
    check(kf_tensor_wrap(ctx.get(), &desc, data, capacity_bytes, deleter, user_data, &handle));
    return Tensor(handle);
  }

  /**
   * @brief Wraps memory owned by the caller whose contents are ready in @p stream's order
   * (kf_tensor_wrap_async()).
   * @param ctx Context whose device holds the memory.
   * @param desc Shape, strides and dtype.
   * @param data First element.
   * @param capacity_bytes Bytes valid from @p data.
   * @param stream Home stream of the tensor.
   * @param deleter Called once when the memory is no longer used; NULL to keep ownership.
   * @param user_data Passed to @p deleter.
   * @return The tensor.
   */
  static Tensor wrap_async(const Context& ctx, const kf_tensor_desc_t& desc, void* data,
                           size_t capacity_bytes, const Stream& stream,
                           kf_deleter_fn deleter = nullptr, void* user_data = nullptr) {
    kf_tensor_t* handle = nullptr;
    check(kf_tensor_wrap_async(ctx.get(), &desc, data, capacity_bytes, deleter, user_data,
                               stream.get(), &handle));
    return Tensor(handle);
  }

  /**
   * @brief Imports a DLPack 1.x tensor without copying; on success the tensor owns @p managed.
   * @param ctx Context on the tensor's device.
   * @param managed The producer's tensor.
   * @return The tensor.
   */
  static Tensor from_dlpack(const Context& ctx, DLManagedTensorVersioned* managed) {
    kf_tensor_t* handle = nullptr;
    check(kf_tensor_from_dlpack(ctx.get(), managed, &handle));
    return Tensor(handle);
  }

  /**
   * @brief Imports a legacy DLPack tensor without copying; on success the tensor owns @p managed.
   * @param ctx Context on the tensor's device.
   * @param managed The producer's tensor.
   * @return The tensor.
   */
  static Tensor from_dlpack(const Context& ctx, DLManagedTensor* managed) {
    kf_tensor_t* handle = nullptr;
    check(kf_tensor_from_dlpack_legacy(ctx.get(), managed, &handle));
    return Tensor(handle);
  }

  /**
   * @brief Imports a DLPack 1.x tensor made ready on @p stream (kf_tensor_from_dlpack_async());
   * on success the tensor owns @p managed.
   * @param ctx Context on the tensor's device.
   * @param managed The producer's tensor.
   * @param stream Home stream of the tensor.
   * @return The tensor.
   */
  static Tensor from_dlpack_async(const Context& ctx, DLManagedTensorVersioned* managed,
                                  const Stream& stream) {
    kf_tensor_t* handle = nullptr;
    check(kf_tensor_from_dlpack_async(ctx.get(), managed, stream.get(), &handle));
    return Tensor(handle);
  }

  /**
   * @brief Imports a legacy DLPack tensor made ready on @p stream
   * (kf_tensor_from_dlpack_legacy_async()); on success the tensor owns @p managed.
   * @param ctx Context on the tensor's device.
   * @param managed The producer's tensor.
   * @param stream Home stream of the tensor.
   * @return The tensor.
   */
  static Tensor from_dlpack_async(const Context& ctx, DLManagedTensor* managed,
                                  const Stream& stream) {
    kf_tensor_t* handle = nullptr;
    check(kf_tensor_from_dlpack_legacy_async(ctx.get(), managed, stream.get(), &handle));
    return Tensor(handle);
  }

  /** @brief The C handle (still owned by this object). @return The handle, or NULL if empty. */
  kf_tensor_t* get() const noexcept { return handle_.get(); }
  /** @brief Gives up ownership. @return The handle, which the caller must destroy. */
  kf_tensor_t* release() noexcept { return handle_.release(); }
  /** @brief Whether this object owns a handle. @return True unless empty or moved from. */
  explicit operator bool() const noexcept { return static_cast<bool>(handle_); }

  /**
   * @brief A view sharing this tensor's memory (kf_tensor_create_view()).
   * @param desc The view's shape, strides and dtype (the dtype must match).
   * @param offset_elements Offset of the view's first element.
   * @return The view.
   */
  Tensor view(const kf_tensor_desc_t& desc, int64_t offset_elements = 0) const {
    kf_tensor_t* handle = nullptr;
    check(kf_tensor_create_view(get(), &desc, offset_elements, &handle));
    return Tensor(handle);
  }

  /**
   * @brief Exports as DLPack 1.x, sharing memory; the consumer calls the deleter once.
   * @return The DLPack tensor.
   */
  DLManagedTensorVersioned* to_dlpack() const {
    DLManagedTensorVersioned* managed = nullptr;
    check(kf_tensor_to_dlpack(get(), &managed));
    return managed;
  }

  /** @brief The descriptor, with explicit strides. @return The descriptor. */
  kf_tensor_desc_t desc() const {
    kf_tensor_desc_t value{};
    check(kf_tensor_get_desc(get(), &value));
    return value;
  }

  /** @brief The extents. @return One entry per dimension. */
  std::vector<int64_t> shape() const {
    const kf_tensor_desc_t d = desc();
    return std::vector<int64_t>(d.shape, d.shape + d.ndim);
  }

  /** @brief The element strides. @return One entry per dimension. */
  std::vector<int64_t> strides() const {
    const kf_tensor_desc_t d = desc();
    return std::vector<int64_t>(d.strides, d.strides + d.ndim);
  }

  /** @brief The element type. @return The dtype. */
  kf_dtype_t dtype() const { return desc().dtype; }

  /** @brief The number of elements. @return The product of the extents (1 for a scalar). */
  int64_t numel() const {
    const kf_tensor_desc_t d = desc();
    int64_t count = 1;
    for (int32_t i = 0; i < d.ndim; ++i) count *= d.shape[i];
    return count;
  }

  /** @brief Bytes of the packed elements, as the host copies expect. @return numel() times the
   * element size. */
  size_t nbytes() const { return static_cast<size_t>(numel()) * kf_dtype_size(dtype()); }

  /** @brief The address of the first element (device or host memory). @return The address. */
  void* data() const {
    void* value = nullptr;
    check(kf_tensor_get_data(get(), &value));
    return value;
  }

  /** @brief The device holding the memory. @return KF_DEVICE_CPU or KF_DEVICE_CUDA. */
  kf_device_type_t device_type() const {
    kf_device_type_t type = KF_DEVICE_CPU;
    check(kf_tensor_get_device(get(), &type, nullptr));
    return type;
  }

  /**
   * @brief Copies packed row-major host data in; blocks until done (kf_tensor_copy_from_host()).
   * @param src Host data.
   * @param bytes Must equal nbytes().
   * @param stream The stream, or NULL for the default stream.
   */
  void copy_from_host(const void* src, size_t bytes, const Stream* stream = nullptr) {
    check(kf_tensor_copy_from_host(get(), src, bytes, stream != nullptr ? stream->get() : nullptr));
  }

  /**
   * @brief Copies the elements out, packed row-major; blocks until done (kf_tensor_copy_to_host()).
   * @param dst Host memory.
   * @param bytes Must equal nbytes().
   * @param stream The stream, or NULL for the default stream.
   */
  void copy_to_host(void* dst, size_t bytes, const Stream* stream = nullptr) const {
    check(kf_tensor_copy_to_host(get(), dst, bytes, stream != nullptr ? stream->get() : nullptr));
  }

  /**
   * @brief Copies a host vector in.
   * @tparam T A type of the tensor's element size (float for f32, uint16_t for f16 bits ...).
   * @param values numel() values in row-major order.
   * @param stream The stream, or NULL for the default stream.
   */
  template <class T>
  void copy_from(const std::vector<T>& values, const Stream* stream = nullptr) {
    check_element_size(sizeof(T));
    copy_from_host(values.data(), values.size() * sizeof(T), stream);
  }

  /**
   * @brief Copies the elements into a new host vector.
   * @tparam T A type of the tensor's element size.
   * @param stream The stream, or NULL for the default stream.
   * @return numel() values in row-major order.
   */
  template <class T>
  std::vector<T> to_vector(const Stream* stream = nullptr) const {
    check_element_size(sizeof(T));
    std::vector<T> values(static_cast<size_t>(numel()));
    copy_to_host(values.data(), values.size() * sizeof(T), stream);
    return values;
  }

 private:
  void check_element_size(size_t host_size) const {
    const size_t size = kf_dtype_size(dtype());
    if (size != host_size) {
      throw Error(KF_ERROR_DTYPE_MISMATCH, "the tensor's elements have " + std::to_string(size) +
                                               " bytes, the host type " +
                                               std::to_string(host_size));
    }
  }
  detail::UniqueHandle<kf_tensor_t, detail::DestroyTensor> handle_;
};

/**
 * @brief out = act(a + b), b broadcast onto a (kf_fused_elementwise_add_activation()).
 * @param ctx Context owning the tensors.
 * @param a First operand; its shape is the output shape.
 * @param b Second operand, broadcastable to @p a.
 * @param out Result, shape of @p a; may be @p a itself.
 * @param act Activation.
 * @param stream The stream, or NULL for the default stream.
 */
inline void fused_elementwise_add_activation(const Context& ctx, const Tensor& a, const Tensor& b,
                                             Tensor& out, kf_activation_t act = KF_ACTIVATION_NONE,
                                             const Stream* stream = nullptr) {
  check(kf_fused_elementwise_add_activation(ctx.get(), a.get(), b.get(), out.get(), act,
                                            stream != nullptr ? stream->get() : nullptr));
}

/**
 * @brief out = act(a * b), b broadcast onto a (kf_fused_elementwise_mul_activation()).
 * @param ctx Context owning the tensors.
 * @param a First operand; its shape is the output shape.
 * @param b Second operand, broadcastable to @p a.
 * @param out Result, shape of @p a; may be @p a itself.
 * @param act Activation.
 * @param stream The stream, or NULL for the default stream.
 */
inline void fused_elementwise_mul_activation(const Context& ctx, const Tensor& a, const Tensor& b,
                                             Tensor& out, kf_activation_t act = KF_ACTIVATION_NONE,
                                             const Stream* stream = nullptr) {
  check(kf_fused_elementwise_mul_activation(ctx.get(), a.get(), b.get(), out.get(), act,
                                            stream != nullptr ? stream->get() : nullptr));
}

class FusedKernel;

/**
 * @brief A fusion graph under construction (kf_graph_t): declare inputs, add nodes, mark
 *        outputs, compile. Every method returns the new node's id and throws Error on a
 *        violated rule (see graph.h).
 *
 * @code
 * kernel_fusion::Graph graph(ctx);
 * int32_t x = graph.tensor_input(KF_DTYPE_FLOAT32, 2);
 * graph.output(graph.activation(KF_ACTIVATION_GELU, graph.binary(KF_BINARY_MUL, x,
 *                                                                 graph.scalar(0.5))));
 * kernel_fusion::FusedKernel kernel = graph.compile();
 * kernel.launch({x_tensor.get()}, {out_tensor.get()});
 * @endcode
 */
class Graph {
 public:
  /** @brief An empty wrapper that owns nothing. */
  Graph() noexcept = default;

  /**
   * @brief Creates an empty graph (kf_graph_create()).
   * @param ctx The context whose kernels the graph compiles to.
   */
  explicit Graph(const Context& ctx) {
    kf_graph_t* handle = nullptr;
    check(kf_graph_create(ctx.get(), &handle));
    handle_.reset(handle);
  }

  /**
   * @brief Takes ownership of a graph handle created through the C API.
   * @param owned The handle; destroyed with this object.
   */
  explicit Graph(kf_graph_t* owned) noexcept : handle_(owned) {}

  /** @brief The C handle (still owned by this object). @return The handle, or NULL if empty. */
  kf_graph_t* get() const noexcept { return handle_.get(); }
  /** @brief Gives up ownership. @return The handle, which the caller must destroy. */
  kf_graph_t* release() noexcept { return handle_.release(); }
  /** @brief Whether this object owns a handle. @return True unless empty or moved from. */
  explicit operator bool() const noexcept { return static_cast<bool>(handle_); }

  /** @brief Declares an input (kf_graph_input()). @param desc The declaration. @return Its id. */
  int32_t input(const kf_graph_input_desc_t& desc) {
    return node([&](int32_t* id) { return kf_graph_input(get(), &desc, id); });
  }

  /**
   * @brief Declares a tensor input.
   * @param dtype Element type.
   * @param rank Declared rank (0..#KF_MAX_DIMS).
   * @return Its id.
   */
  int32_t tensor_input(kf_dtype_t dtype, int32_t rank) {
    kf_graph_input_desc_t desc = KF_GRAPH_INPUT_DESC_INIT;
    desc.dtype = dtype;
    desc.rank = rank;
    return input(desc);
  }

  /**
   * @brief Declares an HWC image input.
   * @param dtype Element type.
   * @param channels 1, 3 or 4.
   * @return Its id.
   */
  int32_t image_input(kf_dtype_t dtype, int32_t channels) {
    kf_graph_input_desc_t desc = KF_GRAPH_INPUT_DESC_INIT;
    desc.kind = KF_INPUT_IMAGE;
    desc.dtype = dtype;
    desc.rank = 3;
    desc.channels = channels;
    return input(desc);
  }

  /** @brief Declares an NV12 frame input (u8, [H * 3 / 2, W]). @return Its id. */
  int32_t nv12_input() {
    kf_graph_input_desc_t desc = KF_GRAPH_INPUT_DESC_INIT;
    desc.kind = KF_INPUT_NV12;
    desc.dtype = KF_DTYPE_UINT8;
    desc.rank = 2;
    return input(desc);
  }

  /** @brief A scalar constant (kf_graph_scalar()). @param value Default value. @return Its id. */
  int32_t scalar(double value) {
    return node([&](int32_t* id) { return kf_graph_scalar(get(), value, id); });
  }

  /**
   * @brief A per-channel constant (kf_graph_constant()).
   * @param values 1 to 4 default values, one per channel.
   * @return Its id.
   */
  int32_t constant(const std::vector<double>& values) {
    return node([&](int32_t* id) {
      return kf_graph_constant(get(), static_cast<int32_t>(values.size()), values.data(), id);
    });
  }

  /** @brief op(x) (kf_graph_unary()). @param op Operation. @param x Operand. @return Its id. */
  int32_t unary(kf_unary_op_t op, int32_t x) {
    return node([&](int32_t* id) { return kf_graph_unary(get(), op, x, id); });
  }

  /** @brief act(x) (kf_graph_activation()). @param act Activation. @param x Operand.
   *  @return Its id. */
  int32_t activation(kf_activation_t act, int32_t x) {
    return node([&](int32_t* id) { return kf_graph_activation(get(), act, x, id); });
  }

  /**
   * @brief op(a, b) (kf_graph_binary()).
   * @param op Operation.
   * @param a First operand.
   * @param b Second operand.
   * @return Its id.
   */
  int32_t binary(kf_binary_op_t op, int32_t a, int32_t b) {
    return node([&](int32_t* id) { return kf_graph_binary(get(), op, a, b, id); });
  }

  /**
   * @brief min(max(x, lo), hi) (kf_graph_clamp()).
   * @param x Operand.
   * @param lo Lower bound node.
   * @param hi Upper bound node.
   * @return Its id.
   */
  int32_t clamp(int32_t x, int32_t lo, int32_t hi) {
    return node([&](int32_t* id) { return kf_graph_clamp(get(), x, lo, hi, id); });
  }

  /**
   * @brief cond != 0 ? a : b (kf_graph_where()).
   * @param cond Condition.
   * @param a Taken where cond is nonzero.
   * @param b Taken elsewhere.
   * @return Its id.
   */
  int32_t where(int32_t cond, int32_t a, int32_t b) {
    return node([&](int32_t* id) { return kf_graph_where(get(), cond, a, b, id); });
  }

  /**
   * @brief x converted to @p dtype (kf_graph_cast()).
   * @param x Operand.
   * @param dtype Target dtype.
   * @param mode Wrap, saturate, or saturate with rounding.
   * @return Its id.
   */
  int32_t cast(int32_t x, kf_dtype_t dtype, kf_cast_mode_t mode = KF_CAST_WRAP) {
    return node([&](int32_t* id) { return kf_graph_cast(get(), x, dtype, mode, id); });
  }

  /**
   * @brief Reads an image input at the output pixel (kf_graph_read_image()).
   * @param image The image or NV12 input.
   * @param desc Crop, interpolation, border and colour options.
   * @return Its id.
   */
  int32_t read_image(int32_t image, const kf_image_read_desc_t& desc) {
    return node([&](int32_t* id) { return kf_graph_read_image(get(), image, &desc, id); });
  }

  /** @brief Reads a whole image, no resize (#KF_IMAGE_READ_DESC_INIT). @param image The input.
   *  @return Its id. */
  int32_t read_image(int32_t image) {
    const kf_image_read_desc_t desc = KF_IMAGE_READ_DESC_INIT;
    return read_image(image, desc);
  }

  /**
   * @brief Converts a pixel's channels (kf_graph_color_convert()).
   * @param x Operand.
   * @param conversion The conversion.
   * @return Its id.
   */
  int32_t color_convert(int32_t x, kf_color_conversion_t conversion) {
    return node([&](int32_t* id) { return kf_graph_color_convert(get(), x, conversion, id); });
  }

  /**
   * @brief (x * scale - mean[c]) / std[c] (kf_graph_normalize()).
   * @param x Operand of C channels.
   * @param scale Scale.
   * @param mean C values (up to 4).
   * @param std C values (up to 4).
   * @return Its id. Fewer than C values reach the library as NaN means and zero stds, which it
   *         refuses with a message naming the missing channel.
   */
  int32_t normalize(int32_t x, double scale, const std::vector<double>& mean,
                    const std::vector<double>& std) {
    if (mean.size() > 4 || std.size() > 4) {
      throw Error(KF_ERROR_INVALID_ARGUMENT, "normalize takes at most 4 mean and std values");
    }
    const double nan = std::numeric_limits<double>::quiet_NaN();
    double m[4] = {nan, nan, nan, nan};
    double s[4] = {0.0, 0.0, 0.0, 0.0};
    for (size_t c = 0; c < mean.size(); ++c) m[c] = mean[c];
    for (size_t c = 0; c < std.size(); ++c) s[c] = std[c];
    return node([&](int32_t* id) { return kf_graph_normalize(get(), x, scale, m, s, id); });
  }

  /**
   * @brief Marks an output (kf_graph_output()).
   * @param node_id The node written.
   * @param layout As-is or planar (image graphs).
   * @param batched One [N, ...] tensor for all items (image graphs).
   * @return Its position among the outputs.
   */
  int32_t output(int32_t node_id, kf_output_layout_t layout = KF_OUTPUT_AS_IS,
                 bool batched = false) {
    kf_graph_output_desc_t desc = KF_GRAPH_OUTPUT_DESC_INIT;
    desc.layout = layout;
    desc.batched = batched ? 1 : 0;
    return node([&](int32_t* index) { return kf_graph_output(get(), node_id, &desc, index); });
  }

  /**
   * @brief Compiles the graph (kf_graph_compile()).
   * @param max_items Batch capacity.
   * @param flags KF_COMPILE_* flags.
   * @return The kernel.
   */
  inline FusedKernel compile(int32_t max_items = 1, uint32_t flags = 0) const;

  /**
   * @brief The CUDA source generated for the graph (kf_graph_get_source()); any context.
   * @param max_items Batch capacity.
   * @return The source text.
   */
  std::string source(int32_t max_items = 1) const {
    kf_compile_options_t options = KF_COMPILE_OPTIONS_INIT;
    options.max_items = max_items;
    size_t length = 0;
    check(kf_graph_get_source(get(), &options, nullptr, 0, &length));
    std::string text(length, '\0');
    check(kf_graph_get_source(get(), &options, &text[0], text.size(), &length));
    text.resize(length - 1);
    return text;
  }

 private:
  template <class Call>
  int32_t node(Call call) {
    int32_t id = -1;
    check(call(&id));
    return id;
  }
  detail::UniqueHandle<kf_graph_t, detail::DestroyGraph> handle_;
};

/** @brief A compiled graph (kf_fused_kernel_t): immutable, launchable from many threads. */
class FusedKernel {
 public:
  /** @brief An empty wrapper that owns nothing. */
  FusedKernel() noexcept = default;

  /**
   * @brief Takes ownership of a kernel handle created through the C API.
   * @param owned The handle; destroyed with this object.
   */
  explicit FusedKernel(kf_fused_kernel_t* owned) noexcept : handle_(owned) {}

  /** @brief The C handle (still owned by this object). @return The handle, or NULL if empty. */
  kf_fused_kernel_t* get() const noexcept { return handle_.get(); }
  /** @brief Gives up ownership. @return The handle, which the caller must destroy. */
  kf_fused_kernel_t* release() noexcept { return handle_.release(); }
  /** @brief Whether this object owns a handle. @return True unless empty or moved from. */
  explicit operator bool() const noexcept { return static_cast<bool>(handle_); }

  /** @brief Facts about the kernel (kf_fused_kernel_get_info()). @return The facts. */
  kf_fused_kernel_info_t info() const {
    kf_fused_kernel_info_t facts{};
    facts.struct_size = sizeof facts;
    check(kf_fused_kernel_get_info(get(), &facts));
    return facts;
  }

  /** @brief The generated CUDA source (empty on CPU contexts). @return The source text. */
  std::string source() const {
    size_t length = 0;
    check(kf_fused_kernel_get_source(get(), nullptr, 0, &length));
    std::string text(length, '\0');
    check(kf_fused_kernel_get_source(get(), &text[0], text.size(), &length));
    text.resize(length - 1);
    return text;
  }

  /**
   * @brief Runs the kernel (kf_fused_kernel_launch()).
   * @param args Tensors, crops and value overrides of every item.
   * @param stream The stream, or NULL for the context's default stream.
   */
  void launch(const kf_launch_args_t& args, const Stream* stream = nullptr) const {
    check(kf_fused_kernel_launch(get(), &args, stream != nullptr ? stream->get() : nullptr));
  }

  /**
   * @brief Runs the kernel on @p n_items items.
   * @param inputs n_items * n_inputs tensors, item-major.
   * @param outputs n_items * n_outputs tensors, item-major.
   * @param n_items Items in this launch.
   * @param values Value overrides.
   * @param crops n_items rectangles when a read crops, else empty.
   * @param stream The stream, or NULL for the context's default stream.
   * @throws Error KF_ERROR_INVALID_ARGUMENT when a list's length does not match @p n_items (the
   *         C call, which reads them through bare pointers, cannot tell).
   */
  void launch(const std::vector<const kf_tensor_t*>& inputs,
              const std::vector<kf_tensor_t*>& outputs, int32_t n_items = 1,
              const std::vector<kf_fused_value_t>& values = {},
              const std::vector<kf_rect_t>& crops = {}, const Stream* stream = nullptr) const {
    const kf_fused_kernel_info_t facts = info();
    const auto require_length = [n_items](size_t length, int64_t per_item, const char* what) {
      const int64_t wanted = int64_t{n_items} * per_item;
      if (n_items < 1 || static_cast<int64_t>(length) != wanted)
        throw Error(KF_ERROR_INVALID_ARGUMENT,
                    std::string(what) + " holds " + std::to_string(length) + " entries; " +
                        std::to_string(n_items) + " items take " + std::to_string(wanted));
    };
    require_length(inputs.size(), facts.n_inputs, "inputs");
    require_length(outputs.size(), facts.n_outputs, "outputs");
    if (!crops.empty()) require_length(crops.size(), 1, "crops");
    kf_launch_args_t args = KF_LAUNCH_ARGS_INIT;
    args.n_items = n_items;
    args.inputs = inputs.data();
    args.outputs = outputs.data();
    args.crops = crops.empty() ? nullptr : crops.data();
    args.values = values.empty() ? nullptr : values.data();
    args.n_values = values.size();
    launch(args, stream);
  }

 private:
  detail::UniqueHandle<kf_fused_kernel_t, detail::DestroyFusedKernel> handle_;
};

inline FusedKernel Graph::compile(int32_t max_items, uint32_t flags) const {
  kf_compile_options_t options = KF_COMPILE_OPTIONS_INIT;
  options.max_items = max_items;
  options.flags = flags;
  kf_fused_kernel_t* handle = nullptr;
  check(kf_graph_compile(get(), &options, &handle));
  return FusedKernel(handle);
}

}  // namespace kernel_fusion

#endif /* KERNEL_FUSION_HPP */
