#include "tests/common/test_util.hpp"

#include <algorithm>
#include <cmath>

namespace kf_test {

namespace {
kf_device_type_t& selected_device() {
  static kf_device_type_t device = KF_DEVICE_CPU;
  return device;
}
}  // namespace

void detail::select_device_under_test(kf_device_type_t type) { selected_device() = type; }

kf_device_type_t device_under_test() { return selected_device(); }

bool device_available() {
  if (device_under_test() == KF_DEVICE_CPU) return true;
  int32_t count = 0;
  return kf_get_device_count(KF_DEVICE_CUDA, &count) == KF_SUCCESS && count > 0;
}

Context::Context() {
  kf_context_config_t config = KF_CONTEXT_CONFIG_INIT;
  config.device_type = device_under_test();
  kf_result_t r = kf_context_create(&config, &ctx);
  EXPECT_EQ(r, KF_SUCCESS) << kf_get_last_error_message();
}

Context::~Context() { kf_context_destroy(ctx); }

kf_tensor_desc_t make_desc(kf_dtype_t dtype, std::vector<int64_t> shape,
                           std::vector<int64_t> strides) {
  kf_tensor_desc_t d{};
  d.ndim = static_cast<int32_t>(shape.size());
  d.dtype = dtype;
  for (size_t i = 0; i < shape.size() && i < KF_MAX_DIMS; ++i) d.shape[i] = shape[i];
  for (size_t i = 0; i < strides.size() && i < KF_MAX_DIMS; ++i) d.strides[i] = strides[i];
  return d;
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

Tensor make_tensor(kf_context_t* ctx, kf_dtype_t dtype, const std::vector<int64_t>& shape) {
  kf_tensor_desc_t d = make_desc(dtype, shape);
  kf_tensor_t* t = nullptr;
  kf_result_t r = kf_tensor_create(ctx, &d, &t);
  EXPECT_EQ(r, KF_SUCCESS) << kf_get_last_error_message();
  return Tensor(t);
}

uint16_t float_to_half_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t mag = x & 0x7fffffffu;
  if (mag >= 0x7f800000u)
    return static_cast<uint16_t>(sign | (mag > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (mag >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow to inf
  if (mag < 0x38800000u) {  // subnormal or zero in half
    float af;
    std::memcpy(&af, &mag, 4);
    float scaled = af * 16777216.0f;  // 2^24: half subnormal unit
    uint32_t q = static_cast<uint32_t>(std::nearbyint(scaled));
    return static_cast<uint16_t>(sign | q);
  }
  uint32_t exp = ((mag >> 23) - 112) << 10;
  uint32_t mant = (mag >> 13) & 0x3ffu;
  uint32_t h = exp | mant;
  uint32_t rest = mag & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float half_bits_to_float(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  float out;
  if (exp == 0) {
    out = std::ldexp(static_cast<float>(mant), -24);
    if (sign) out = -out;
    return out;
  }
  uint32_t x =
      exp == 31 ? (sign | 0x7f800000u | (mant << 13)) : (sign | ((exp + 112) << 23) | (mant << 13));
  std::memcpy(&out, &x, 4);
  return out;
}

uint16_t float_to_bf16_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

float bf16_bits_to_float(uint16_t h) {
  uint32_t x = static_cast<uint32_t>(h) << 16;
  float out;
  std::memcpy(&out, &x, 4);
  return out;
}

std::vector<unsigned char> encode(const std::vector<double>& values, kf_dtype_t dtype) {
  size_t es = kf_dtype_size(dtype);
  std::vector<unsigned char> bytes(values.size() * es);
  for (size_t i = 0; i < values.size(); ++i) {
    unsigned char* p = bytes.data() + i * es;
    double v = values[i];
    switch (dtype) {
      case KF_DTYPE_FLOAT32: {
        float f = static_cast<float>(v);
        std::memcpy(p, &f, 4);
        break;
      }
      case KF_DTYPE_FLOAT64: std::memcpy(p, &v, 8); break;
      case KF_DTYPE_FLOAT16: {
        uint16_t h = float_to_half_bits(static_cast<float>(v));
        std::memcpy(p, &h, 2);
        break;
      }
      case KF_DTYPE_BFLOAT16: {
        uint16_t h = float_to_bf16_bits(static_cast<float>(v));
        std::memcpy(p, &h, 2);
        break;
      }
      case KF_DTYPE_INT8: {
        int8_t x = static_cast<int8_t>(v);
        std::memcpy(p, &x, 1);
        break;
      }
      case KF_DTYPE_UINT8: {
        uint8_t x = static_cast<uint8_t>(v);
        std::memcpy(p, &x, 1);
        break;
      }
      case KF_DTYPE_INT32: {
        int32_t x = static_cast<int32_t>(v);
        std::memcpy(p, &x, 4);
        break;
      }
      case KF_DTYPE_INT64: {
        int64_t x = static_cast<int64_t>(v);
        std::memcpy(p, &x, 8);
        break;
      }
    }
  }
  return bytes;
}

std::vector<double> decode(const std::vector<unsigned char>& bytes, kf_dtype_t dtype) {
  size_t es = kf_dtype_size(dtype);
  std::vector<double> values(bytes.size() / es);
  for (size_t i = 0; i < values.size(); ++i) {
    const unsigned char* p = bytes.data() + i * es;
    switch (dtype) {
      case KF_DTYPE_FLOAT32: {
        float f;
        std::memcpy(&f, p, 4);
        values[i] = f;
        break;
      }
      case KF_DTYPE_FLOAT64: std::memcpy(&values[i], p, 8); break;
      case KF_DTYPE_FLOAT16: {
        uint16_t h;
        std::memcpy(&h, p, 2);
        values[i] = half_bits_to_float(h);
        break;
      }
      case KF_DTYPE_BFLOAT16: {
        uint16_t h;
        std::memcpy(&h, p, 2);
        values[i] = bf16_bits_to_float(h);
        break;
      }
      case KF_DTYPE_INT8: {
        int8_t x;
        std::memcpy(&x, p, 1);
        values[i] = x;
        break;
      }
      case KF_DTYPE_UINT8: {
        uint8_t x;
        std::memcpy(&x, p, 1);
        values[i] = x;
        break;
      }
      case KF_DTYPE_INT32: {
        int32_t x;
        std::memcpy(&x, p, 4);
        values[i] = x;
        break;
      }
      case KF_DTYPE_INT64: {
        int64_t x;
        std::memcpy(&x, p, 8);
        values[i] = static_cast<double>(x);
        break;
      }
    }
  }
  return values;
}

std::vector<double> random_values(size_t n, uint64_t seed, double lo, double hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = dist(rng);
  if (n > 0 && std::all_of(v.begin(), v.end(), [](double x) { return x == 0.0; })) v[0] = 1.0;
  return v;
}

std::vector<double> round_to_dtype(const std::vector<double>& values, kf_dtype_t dtype) {
  return decode(encode(values, dtype), dtype);
}

double tolerance(kf_dtype_t dtype) {
  switch (dtype) {
    case KF_DTYPE_FLOAT64: return 1e-12;
    case KF_DTYPE_FLOAT32: return 1e-5;
    case KF_DTYPE_FLOAT16: return 1e-3;
    case KF_DTYPE_BFLOAT16: return 1e-2;
    default: return 0.0;
  }
}

static size_t tensor_bytes(kf_tensor_t* t, kf_dtype_t* dtype) {
  kf_tensor_desc_t d;
  EXPECT_EQ(kf_tensor_get_desc(t, &d), KF_SUCCESS);
  int64_t n = 1;
  for (int i = 0; i < d.ndim; ++i) n *= d.shape[i];
  *dtype = d.dtype;
  return static_cast<size_t>(n) * kf_dtype_size(d.dtype);
}

void upload(kf_tensor_t* t, const std::vector<double>& values) {
  kf_dtype_t dtype;
  size_t bytes = tensor_bytes(t, &dtype);
  std::vector<unsigned char> packed = encode(values, dtype);
  ASSERT_EQ(packed.size(), bytes);
  ASSERT_EQ(kf_tensor_copy_from_host(t, packed.data(), bytes, nullptr), KF_SUCCESS)
      << kf_get_last_error_message();
}

std::vector<double> download(kf_tensor_t* t) {
  kf_dtype_t dtype;
  size_t bytes = tensor_bytes(t, &dtype);
  std::vector<unsigned char> packed(bytes);
  EXPECT_EQ(kf_tensor_copy_to_host(t, packed.data(), bytes, nullptr), KF_SUCCESS)
      << kf_get_last_error_message();
  return decode(packed, dtype);
}

void poison(kf_tensor_t* t) {
  kf_dtype_t dtype;
  size_t bytes = tensor_bytes(t, &dtype);
  std::vector<unsigned char> nan_bytes(bytes, 0xFF);
  ASSERT_EQ(kf_tensor_copy_from_host(t, nan_bytes.data(), bytes, nullptr), KF_SUCCESS)
      << kf_get_last_error_message();
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int reported = 0;
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double err = std::fabs(got[i] - want[i]);
    bool ok = err <= tol * std::max(1.0, std::fabs(want[i]));  // NaN compares false: caught
    if (!ok) {
      ++bad;
      if (reported++ < 5)
        ADD_FAILURE() << what << ": element " << i << " got " << got[i] << " want " << want[i];
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size()
                     << " elements outside tolerance " << tol;
}

}  // namespace kf_test
