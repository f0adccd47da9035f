// Host-side data for kf-bench: names of enums, random inputs in any float dtype, and the
// float64 reference the timed results are checked against.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernel_fusion/kernel_fusion.h"

namespace kf_bench {

// The step between the outputs a check compares, for about `samples` of `count`: odd where it is
// more than one, so that the samples fall on every position of a 16-byte vector. (A power-of-two
// count over a power-of-two number of samples gave a step that was a multiple of every vector
// width, and the checks of long rows looked only at each vector's first element.)
inline size_t sample_step(size_t count, size_t samples) {
  const size_t step = count / samples;
  return step <= 1 ? 1 : (step | 1);
}

enum class Op { kAdd, kMul };

const char* op_name(Op op);
const char* dtype_name(kf_dtype_t dtype);
const char* activation_name(kf_activation_t act);
// Parse a name as printed above; false for an unknown name.
bool parse_op(const std::string& name, Op* op);
bool parse_dtype(const std::string& name, kf_dtype_t* dtype);
bool parse_activation(const std::string& name, kf_activation_t* act);

// Every activation the library offers, in enum order.
std::vector<kf_activation_t> all_activations();

// Packed row-major elements of `dtype`, uniformly random in +-[0.25, 2): never zero, and
// spread across both signs so every activation's branches are taken. Deterministic for a seed.
std::vector<unsigned char> random_elements(kf_dtype_t dtype, size_t count, uint64_t seed);
// `count` elements all equal to `value` (rounded to the dtype).
std::vector<unsigned char> filled_elements(kf_dtype_t dtype, size_t count, double value);
// Element `index` of packed data, widened to double.
double element_at(const std::vector<unsigned char>& packed, kf_dtype_t dtype, size_t index);

// The activation in float64, the reference for every dtype.
double reference_activation(kf_activation_t act, double x);
// Allowed |got - want| / max(1, |want|) per output dtype (f32 1e-5, f16 1e-3, bf16 1e-2).
double tolerance(kf_dtype_t dtype);

}  // namespace kf_bench
