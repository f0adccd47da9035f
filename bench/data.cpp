#include "bench/data.hpp"

#include <cmath>
#include <cstring>

namespace kf_bench {
namespace {

struct NamedDtype {
  const char* name;
  kf_dtype_t dtype;
};
constexpr NamedDtype kDtypes[] = {{"f32", KF_DTYPE_FLOAT32},
                                  {"f16", KF_DTYPE_FLOAT16},
                                  {"bf16", KF_DTYPE_BFLOAT16},
                                  {"f64", KF_DTYPE_FLOAT64}};

struct NamedActivation {
  const char* name;
  kf_activation_t act;
};
constexpr NamedActivation kActivations[] = {
    {"none", KF_ACTIVATION_NONE},      {"relu", KF_ACTIVATION_RELU},
    {"gelu", KF_ACTIVATION_GELU},      {"gelu_tanh", KF_ACTIVATION_GELU_TANH},
    {"silu", KF_ACTIVATION_SILU},      {"tanh", KF_ACTIVATION_TANH},
    {"sigmoid", KF_ACTIVATION_SIGMOID}};

// Round to nearest even; inputs here are finite and well inside the half range.
uint16_t float_to_half_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t magnitude = x & 0x7fffffffu;
  if (magnitude < 0x38800000u) {  // below the smallest normal half: subnormal or zero
    float abs_value;
    std::memcpy(&abs_value, &magnitude, 4);
    return static_cast<uint16_t>(sign |
                                 static_cast<uint32_t>(std::nearbyint(abs_value * 16777216.0f)));
  }
  uint32_t half = (((magnitude >> 23) - 112) << 10) | ((magnitude >> 13) & 0x3ffu);
  const uint32_t rest = magnitude & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(sign | half);
}

float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    const float value = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -value : value;
  }
  const uint32_t x = exponent == 31 ? (sign | 0x7f800000u | (mantissa << 13))
                                    : (sign | ((exponent + 112) << 23) | (mantissa << 13));
  float out;
  std::memcpy(&out, &x, 4);
  return out;
}

uint16_t float_to_bf16_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

float bf16_bits_to_float(uint16_t h) {
  const uint32_t x = static_cast<uint32_t>(h) << 16;
  float out;
  std::memcpy(&out, &x, 4);
  return out;
}

void store(unsigned char* dst, kf_dtype_t dtype, double value) {
  switch (dtype) {
    case KF_DTYPE_FLOAT64: std::memcpy(dst, &value, 8); break;
    case KF_DTYPE_FLOAT16: {
      const uint16_t bits = float_to_half_bits(static_cast<float>(value));
      std::memcpy(dst, &bits, 2);
      break;
    }
    case KF_DTYPE_BFLOAT16: {
      const uint16_t bits = float_to_bf16_bits(static_cast<float>(value));
      std::memcpy(dst, &bits, 2);
      break;
    }
    default: {
      const float f = static_cast<float>(value);
      std::memcpy(dst, &f, 4);
      break;
    }
  }
}

// splitmix64: fast, and good enough for benchmark inputs.
uint64_t next_random(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

const char* op_name(Op op) { return op == Op::kAdd ? "add" : "mul"; }

const char* dtype_name(kf_dtype_t dtype) {
  for (const NamedDtype& d : kDtypes) {
    if (d.dtype == dtype) return d.name;
  }
  return "?";
}

const char* activation_name(kf_activation_t act) {
  for (const NamedActivation& a : kActivations) {
    if (a.act == act) return a.name;
  }
  return "?";
}

bool parse_op(const std::string& name, Op* op) {
  if (name == "add")
    *op = Op::kAdd;
  else if (name == "mul")
    *op = Op::kMul;
  else
    return false;
  return true;
}

bool parse_dtype(const std::string& name, kf_dtype_t* dtype) {
  for (const NamedDtype& d : kDtypes) {
    if (name == d.name) {
      *dtype = d.dtype;
      return true;
    }
  }
  return false;
}

bool parse_activation(const std::string& name, kf_activation_t* act) {
  for (const NamedActivation& a : kActivations) {
    if (name == a.name) {
      *act = a.act;
      return true;
    }
  }
  return false;
}

std::vector<kf_activation_t> all_activations() {
  std::vector<kf_activation_t> acts;
  for (const NamedActivation& a : kActivations) acts.push_back(a.act);
  return acts;
}

std::vector<unsigned char> random_elements(kf_dtype_t dtype, size_t count, uint64_t seed) {
  const size_t element_size = kf_dtype_size(dtype);
  std::vector<unsigned char> packed(count * element_size);
  uint64_t state = seed;
  for (size_t i = 0; i < count; ++i) {
    const uint64_t bits = next_random(&state);
    const double magnitude = 0.25 + 1.75 * static_cast<double>(bits >> 11) * 0x1.0p-53;
    store(packed.data() + i * element_size, dtype, (bits & 1u) ? -magnitude : magnitude);
  }
  return packed;
}

std::vector<unsigned char> filled_elements(kf_dtype_t dtype, size_t count, double value) {
  const size_t element_size = kf_dtype_size(dtype);
  std::vector<unsigned char> packed(count * element_size);
  for (size_t i = 0; i < count; ++i) store(packed.data() + i * element_size, dtype, value);
  return packed;
}

double element_at(const std::vector<unsigned char>& packed, kf_dtype_t dtype, size_t index) {
  const unsigned char* p = packed.data() + index * kf_dtype_size(dtype);
  switch (dtype) {
    case KF_DTYPE_FLOAT64: {
      double v;
      std::memcpy(&v, p, 8);
      return v;
    }
    case KF_DTYPE_FLOAT16: {
      uint16_t bits;
      std::memcpy(&bits, p, 2);
      return half_bits_to_float(bits);
    }
    case KF_DTYPE_BFLOAT16: {
      uint16_t bits;
      std::memcpy(&bits, p, 2);
      return bf16_bits_to_float(bits);
    }
    default: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
  }
}

double reference_activation(kf_activation_t act, double x) {
  switch (act) {
    case KF_ACTIVATION_RELU: return x > 0.0 ? x : 0.0;
    case KF_ACTIVATION_GELU: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case KF_ACTIVATION_GELU_TANH: {
      const double k = 0.7978845608028654;  // sqrt(2 / pi)
      return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
    }
    case KF_ACTIVATION_SILU: return x / (1.0 + std::exp(-x));
    case KF_ACTIVATION_TANH: return std::tanh(x);
    case KF_ACTIVATION_SIGMOID: return 1.0 / (1.0 + std::exp(-x));
    default: return x;
  }
}

double tolerance(kf_dtype_t dtype) {
  switch (dtype) {
    case KF_DTYPE_FLOAT64: return 1e-12;
    case KF_DTYPE_FLOAT16: return 1e-3;
    case KF_DTYPE_BFLOAT16: return 1e-2;
    default: return 1e-5;
  }
}

}  // namespace kf_bench
