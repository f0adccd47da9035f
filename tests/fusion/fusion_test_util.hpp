// Helpers of the fusion engine's tests: handles, compiling (with NVRTC for sm_80 and sm_90 in
// every CUDA build, GPU or not), values of any dtype (integers exact), strided device tensors
// whose untouched bytes are checked, and rounding to a dtype for the float64 references.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernel_fusion/kernel_fusion.h"
#include "tests/common/test_util.hpp"
#include "tests/ops/row_test_util.hpp"

namespace fusion_test {

using kf_test::Tensor;
using Shape = std::vector<int64_t>;

// ---------------------------------------------------------------------------------------------
// Handles.

struct GraphHandle {
  kf_graph_t* g = nullptr;
  GraphHandle() = default;
  explicit GraphHandle(kf_context_t* ctx) {
    EXPECT_EQ(kf_graph_create(ctx, &g), KF_SUCCESS) << kf_get_last_error_message();
  }
  ~GraphHandle() { kf_graph_destroy(g); }
  GraphHandle(const GraphHandle&) = delete;
  GraphHandle& operator=(const GraphHandle&) = delete;
  operator kf_graph_t*() const { return g; }
};

struct KernelHandle {
  kf_fused_kernel_t* k = nullptr;
  KernelHandle() = default;
  KernelHandle(KernelHandle&& o) noexcept : k(o.k) { o.k = nullptr; }
  KernelHandle& operator=(KernelHandle&& o) noexcept {
    std::swap(k, o.k);
    return *this;
  }
  ~KernelHandle() { kf_fused_kernel_destroy(k); }
  operator kf_fused_kernel_t*() const { return k; }
};

// A context of the given device type (the CUDA tests also run every graph on the CPU).
struct ContextHandle {
  kf_context_t* ctx = nullptr;
  explicit ContextHandle(kf_device_type_t type) {
    kf_context_config_t config = KF_CONTEXT_CONFIG_INIT;
    config.device_type = type;
    EXPECT_EQ(kf_context_create(&config, &ctx), KF_SUCCESS) << kf_get_last_error_message();
  }
  ~ContextHandle() { kf_context_destroy(ctx); }
  ContextHandle(const ContextHandle&) = delete;
  ContextHandle& operator=(const ContextHandle&) = delete;
  operator kf_context_t*() const { return ctx; }
};

// Compiles g for its context (EXPECTs success; the kernel is null on failure). Where the build
// has NVRTC, the generated source is also compiled for sm_80 and sm_90, so that every graph of
// the tests proves its CUDA code in CI, where no GPU runs it. Those compiles bypass the disk
// cache: every run compiles anew (a cache filled by an earlier run would prove nothing) and the
// tests leave nothing in the user's cache directory.
inline KernelHandle compile(kf_graph_t* g, int32_t max_items = 1) {
  kf_compile_options_t options = KF_COMPILE_OPTIONS_INIT;
  options.max_items = max_items;
  KernelHandle k;
  const kf_result_t r = kf_graph_compile(g, &options, &k.k);
  EXPECT_EQ(r, KF_SUCCESS) << "kf_graph_compile: " << kf_result_string(r) << ": "
                           << kf_get_last_error_message();
#if defined(KF_TEST_NVRTC)
  kf_compile_options_t nvrtc_options = options;
  nvrtc_options.flags |= KF_COMPILE_NO_DISK_CACHE;
  for (int32_t sm : {80, 90}) {
    size_t cubin_bytes = 0;
    const kf_result_t a = kf_graph_compile_for_arch(g, &nvrtc_options, sm, &cubin_bytes, nullptr);
    EXPECT_EQ(a, KF_SUCCESS) << "kf_graph_compile_for_arch(sm_" << sm
                             << "): " << kf_result_string(a) << ": " << kf_get_last_error_message();
    EXPECT_GT(cubin_bytes, 0u) << "sm_" << sm;
  }
#endif
  return k;
}

// The builder entries, each EXPECTing success and returning the new node id (-1 on failure).
struct Builder {
  kf_graph_t* g;

  // id by reference: it is read after the call that fills it.
  static int32_t checked(kf_result_t r, const int32_t& id, const char* what) {
    EXPECT_EQ(r, KF_SUCCESS) << what << ": " << kf_result_string(r) << ": "
                             << kf_get_last_error_message();
    return r == KF_SUCCESS ? id : -1;
  }
  int32_t tensor(kf_dtype_t dtype, int32_t rank) {
    kf_graph_input_desc_t desc = KF_GRAPH_INPUT_DESC_INIT;
    desc.dtype = dtype;
    desc.rank = rank;
    int32_t id = -1;
    return checked(kf_graph_input(g, &desc, &id), id, "kf_graph_input(tensor)");
  }
  int32_t image(kf_dtype_t dtype, int32_t channels) {
    kf_graph_input_desc_t desc = KF_GRAPH_INPUT_DESC_INIT;
    desc.kind = KF_INPUT_IMAGE;
    desc.dtype = dtype;
    desc.rank = 3;
    desc.channels = channels;
    int32_t id = -1;
    return checked(kf_graph_input(g, &desc, &id), id, "kf_graph_input(image)");
  }
  int32_t nv12() {
    kf_graph_input_desc_t desc = KF_GRAPH_INPUT_DESC_INIT;
    desc.kind = KF_INPUT_NV12;
    desc.dtype = KF_DTYPE_UINT8;
    desc.rank = 2;
    int32_t id = -1;
    return checked(kf_graph_input(g, &desc, &id), id, "kf_graph_input(nv12)");
  }
  int32_t scalar(double value) {
    int32_t id = -1;
    return checked(kf_graph_scalar(g, value, &id), id, "kf_graph_scalar");
  }
  int32_t constant(const std::vector<double>& values) {
    int32_t id = -1;
    return checked(kf_graph_constant(g, static_cast<int32_t>(values.size()), values.data(), &id),
                   id, "kf_graph_constant");
  }
  int32_t unary(kf_unary_op_t op, int32_t x) {
    int32_t id = -1;
    return checked(kf_graph_unary(g, op, x, &id), id, "kf_graph_unary");
  }
  int32_t activation(kf_activation_t act, int32_t x) {
    int32_t id = -1;
    return checked(kf_graph_activation(g, act, x, &id), id, "kf_graph_activation");
  }
  int32_t binary(kf_binary_op_t op, int32_t a, int32_t b) {
    int32_t id = -1;
    return checked(kf_graph_binary(g, op, a, b, &id), id, "kf_graph_binary");
  }
  int32_t clamp(int32_t x, int32_t lo, int32_t hi) {
    int32_t id = -1;
    return checked(kf_graph_clamp(g, x, lo, hi, &id), id, "kf_graph_clamp");
  }
  int32_t where(int32_t cond, int32_t a, int32_t b) {
    int32_t id = -1;
    return checked(kf_graph_where(g, cond, a, b, &id), id, "kf_graph_where");
  }
  int32_t cast(int32_t x, kf_dtype_t dtype, kf_cast_mode_t mode) {
    int32_t id = -1;
    return checked(kf_graph_cast(g, x, dtype, mode, &id), id, "kf_graph_cast");
  }
  int32_t read(int32_t image, const kf_image_read_desc_t& desc) {
    int32_t id = -1;
    return checked(kf_graph_read_image(g, image, &desc, &id), id, "kf_graph_read_image");
  }
  int32_t color(int32_t x, kf_color_conversion_t conversion) {
    int32_t id = -1;
    return checked(kf_graph_color_convert(g, x, conversion, &id), id, "kf_graph_color_convert");
  }
  int32_t normalize(int32_t x, double scale, const std::vector<double>& mean,
                    const std::vector<double>& std) {
    int32_t id = -1;
    return checked(kf_graph_normalize(g, x, scale, mean.data(), std.data(), &id), id,
                   "kf_graph_normalize");
  }
  int32_t output(int32_t node, kf_output_layout_t layout = KF_OUTPUT_AS_IS, bool batched = false) {
    kf_graph_output_desc_t desc = KF_GRAPH_OUTPUT_DESC_INIT;
    desc.layout = layout;
    desc.batched = batched ? 1 : 0;
    int32_t index = -1;
    return checked(kf_graph_output(g, node, &desc, &index), index, "kf_graph_output");
  }
};

// kf_fused_kernel_launch over n_items items (inputs and outputs item-major), with optional crops
// and value overrides.
inline kf_result_t launch(kf_fused_kernel_t* k, int32_t n_items,
                          const std::vector<const kf_tensor_t*>& inputs,
                          const std::vector<kf_tensor_t*>& outputs,
                          const std::vector<kf_rect_t>& crops = {},
                          const std::vector<kf_fused_value_t>& values = {},
                          kf_stream_t* stream = nullptr) {
  kf_launch_args_t args = KF_LAUNCH_ARGS_INIT;
  args.n_items = n_items;
  args.inputs = inputs.data();
  args.outputs = outputs.data();
  args.crops = crops.empty() ? nullptr : crops.data();
  args.values = values.empty() ? nullptr : values.data();
  args.n_values = values.size();
  return kf_fused_kernel_launch(k, &args, stream);
}

// ---------------------------------------------------------------------------------------------
// Values of any dtype.

inline bool is_integer(kf_dtype_t d) {
  return d == KF_DTYPE_INT8 || d == KF_DTYPE_UINT8 || d == KF_DTYPE_INT32 || d == KF_DTYPE_INT64;
}

// One element: integer dtypes in i (exact, in the dtype's range), floating ones in f.
struct Num {
  double f = 0.0;
  int64_t i = 0;
};

// x rounded to nearest even with `precision` significant bits, exponents down to emin
// (subnormals below), values above max_finite rounding to infinity.
inline double quantize(double x, int precision, int emin, double max_finite) {
  if (!std::isfinite(x) || x == 0.0) return x;
  int e;
  std::frexp(std::fabs(x), &e);  // |x| in [2^(e-1), 2^e)
  const int exponent = std::max(e - 1, emin);
  const double ulp = std::ldexp(1.0, exponent - (precision - 1));
  const double r = std::nearbyint(std::fabs(x) / ulp) * ulp;
  return std::copysign(r > max_finite ? INFINITY : r, x);
}

// x rounded to a floating dtype (ties to even, overflow to infinity).
inline double round_to(kf_dtype_t d, double x) {
  switch (d) {
    case KF_DTYPE_FLOAT32: return static_cast<double>(static_cast<float>(x));
    case KF_DTYPE_FLOAT16: return quantize(x, 11, -14, 65504.0);
    case KF_DTYPE_BFLOAT16: return quantize(x, 8, -126, 3.3895313892515355e38);
    default: return x;
  }
}

// The compute type's rounding: f64 values in double, every other floating value in float.
inline double round_compute(kf_dtype_t d, double x) {
  return d == KF_DTYPE_FLOAT64 ? x : static_cast<double>(static_cast<float>(x));
}

inline int integer_bits(kf_dtype_t d) {
  return d == KF_DTYPE_INT64 ? 64 : d == KF_DTYPE_INT32 ? 32 : 8;
}
inline int64_t integer_min(kf_dtype_t d) {
  switch (d) {
    case KF_DTYPE_INT8: return -128;
    case KF_DTYPE_UINT8: return 0;
    case KF_DTYPE_INT32: return INT32_MIN;
    default: return INT64_MIN;
  }
}
inline int64_t integer_max(kf_dtype_t d) {
  switch (d) {
    case KF_DTYPE_INT8: return 127;
    case KF_DTYPE_UINT8: return 255;
    case KF_DTYPE_INT32: return INT32_MAX;
    default: return INT64_MAX;
  }
}

// u modulo 2^bits as the dtype's value.
inline int64_t wrap(kf_dtype_t d, uint64_t u) {
  const int bits = integer_bits(d);
  if (bits < 64) u &= (uint64_t{1} << bits) - 1;
  const bool negative = d != KF_DTYPE_UINT8 && (u >> (bits - 1)) & 1;
  if (!negative) return static_cast<int64_t>(u);
  if (bits == 64) return -static_cast<int64_t>(~u) - 1;
  return static_cast<int64_t>(u) - (int64_t{1} << bits);
}

inline std::vector<unsigned char> pack(const std::vector<Num>& values, kf_dtype_t d) {
  const size_t size = kf_dtype_size(d);
  std::vector<unsigned char> bytes(values.size() * size);
  for (size_t k = 0; k < values.size(); ++k) {
    unsigned char* p = bytes.data() + k * size;
    const Num& v = values[k];
    if (is_integer(d)) {
      const uint64_t u = static_cast<uint64_t>(v.i);  // little-endian: the low bytes
      std::memcpy(p, &u, size);
    } else if (d == KF_DTYPE_FLOAT64) {
      std::memcpy(p, &v.f, 8);
    } else if (d == KF_DTYPE_FLOAT32) {
      const float f = static_cast<float>(v.f);
      std::memcpy(p, &f, 4);
    } else {
      // Values are exact in the dtype already (round_to), so going through float is exact.
      const float f = static_cast<float>(round_to(d, v.f));
      const uint16_t h =
          d == KF_DTYPE_FLOAT16 ? kf_test::float_to_half_bits(f) : kf_test::float_to_bf16_bits(f);
      std::memcpy(p, &h, 2);
    }
  }
  return bytes;
}

inline Num unpack_one(const unsigned char* p, kf_dtype_t d) {
  Num v;
  switch (d) {
    case KF_DTYPE_FLOAT32: {
      float f;
      std::memcpy(&f, p, 4);
      v.f = f;
      break;
    }
    case KF_DTYPE_FLOAT64: std::memcpy(&v.f, p, 8); break;
    case KF_DTYPE_FLOAT16:
    case KF_DTYPE_BFLOAT16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      v.f = d == KF_DTYPE_FLOAT16 ? kf_test::half_bits_to_float(h) : kf_test::bf16_bits_to_float(h);
      break;
    }
    default: {
      uint64_t u = 0;
      std::memcpy(&u, p, kf_dtype_size(d));
      v.i = wrap(d, u);
      break;
    }
  }
  return v;
}

// A value for display.
inline std::string show(const Num& v, kf_dtype_t d) {
  return is_integer(d) ? std::to_string(v.i) : std::to_string(v.f);
}

// ---------------------------------------------------------------------------------------------
// Device tensors, optionally strided views into a larger base.

struct DeviceTensor {
  kf_dtype_t dtype = KF_DTYPE_FLOAT32;
  Shape shape;
  Tensor base;                   // packed, holds the view
  Tensor view;                   // the tensor the kernel sees (may be the base itself)
  std::vector<int64_t> offsets;  // base element of each view element, row-major
  int64_t base_elements = 0;
  kf_tensor_t* handle() const { return view.t ? view.t : base.t; }
};

// dst takes src's handle (kf_test::Tensor moves only by construction).
inline void assign(Tensor& dst, Tensor&& src) { std::swap(dst.t, src.t); }

// A tensor of `shape`; with strided, a view with gaps between rows and, for rank >= 2, its two
// innermost dims stored transposed, so that no dim but the outermost is contiguous.
inline DeviceTensor make_tensor(kf_context_t* ctx, kf_dtype_t dtype, const Shape& shape,
                                bool strided, std::mt19937_64& rng) {
  DeviceTensor t;
  t.dtype = dtype;
  t.shape = shape;
  const size_t rank = shape.size();
  Shape strides(rank, 0);
  if (!strided) {
    int64_t s = 1;
    for (size_t d = rank; d-- > 0;) {
      strides[d] = s;
      s *= shape[d];
    }
    t.base_elements = s;
    assign(t.base, kf_test::make_tensor(ctx, dtype, {std::max<int64_t>(1, s)}));
  } else {
    // Storage order: dims outermost first, except the last two swapped; each padded by 0..2.
    std::vector<size_t> order(rank);
    for (size_t d = 0; d < rank; ++d) order[d] = d;
    if (rank >= 2) std::swap(order[rank - 1], order[rank - 2]);
    int64_t s = 1 + static_cast<int64_t>(rng() % 2);  // an inner step of 1 or 2
    for (size_t k = rank; k-- > 0;) {
      strides[order[k]] = s;
      s *= shape[order[k]] + static_cast<int64_t>(rng() % 3);
    }
    const int64_t offset = static_cast<int64_t>(rng() % 3);
    t.base_elements = s + offset;
    assign(t.base, kf_test::make_tensor(ctx, dtype, {t.base_elements}));
    assign(t.view, row_test::make_view(t.base, dtype, shape, strides, offset));
    t.offsets = row_test::view_offsets(shape, strides, offset);
    return t;
  }
  t.offsets = row_test::view_offsets(shape, strides, 0);
  kf_tensor_desc_t desc = kf_test::make_desc(dtype, shape);
  kf_tensor_t* v = nullptr;
  EXPECT_EQ(kf_tensor_create_view(t.base, &desc, 0, &v), KF_SUCCESS) << kf_get_last_error_message();
  assign(t.view, Tensor(v));
  return t;
}

// The bytes of the whole base.
inline std::vector<unsigned char> base_bytes(const DeviceTensor& t) {
  std::vector<unsigned char> bytes(static_cast<size_t>(t.base_elements) * kf_dtype_size(t.dtype));
  EXPECT_EQ(kf_tensor_copy_to_host(t.base, bytes.data(), bytes.size(), nullptr), KF_SUCCESS)
      << kf_get_last_error_message();
  return bytes;
}

// Writes `values` (the view's elements, row-major) and poison (0xFF bytes) everywhere else.
inline void upload(const DeviceTensor& t, const std::vector<Num>& values) {
  const size_t size = kf_dtype_size(t.dtype);
  std::vector<unsigned char> bytes(static_cast<size_t>(t.base_elements) * size, 0xFF);
  const std::vector<unsigned char> packed = pack(values, t.dtype);
  for (size_t k = 0; k < t.offsets.size(); ++k)
    std::memcpy(bytes.data() + static_cast<size_t>(t.offsets[k]) * size, packed.data() + k * size,
                size);
  ASSERT_EQ(kf_tensor_copy_from_host(t.base, bytes.data(), bytes.size(), nullptr), KF_SUCCESS)
      << kf_get_last_error_message();
}

// Fills the whole base with `byte` (0xFF by default: NaN for floats, -1 / 255 for integers).
// (download checks the bytes outside a view against 0xFF: another byte suits dense tensors.)
inline void poison(const DeviceTensor& t, unsigned char byte = 0xFF) {
  std::vector<unsigned char> bytes(static_cast<size_t>(t.base_elements) * kf_dtype_size(t.dtype),
                                   byte);
  ASSERT_EQ(kf_tensor_copy_from_host(t.base, bytes.data(), bytes.size(), nullptr), KF_SUCCESS)
      << kf_get_last_error_message();
}

// The view's elements, row-major; EXPECTs every base byte outside the view to be still poisoned.
inline std::vector<Num> download(const DeviceTensor& t, const std::string& what) {
  const size_t size = kf_dtype_size(t.dtype);
  const std::vector<unsigned char> bytes = base_bytes(t);
  std::vector<bool> in_view(static_cast<size_t>(t.base_elements), false);
  std::vector<Num> values;
  values.reserve(t.offsets.size());
  for (int64_t o : t.offsets) {
    in_view[static_cast<size_t>(o)] = true;
    values.push_back(unpack_one(bytes.data() + static_cast<size_t>(o) * size, t.dtype));
  }
  size_t touched = 0;
  for (size_t e = 0; e < in_view.size(); ++e) {
    if (in_view[e]) continue;
    for (size_t b = 0; b < size; ++b) touched += bytes[e * size + b] != 0xFF;
  }
  EXPECT_EQ(touched, 0u) << what << ": bytes outside the output view were written";
  return values;
}

}  // namespace fusion_test
