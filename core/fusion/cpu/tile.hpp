// The CPU executor's unit of work: a tile of consecutive values (tensor elements, or output
// pixels of an image graph) of one launch item, over which every node of the graph is evaluated
// in turn into a small per-node buffer that stays in cache. Shared by executor.cpp (tiling,
// elementwise nodes, loads and stores) and image_nodes.cpp (reads, colour, normalisation).
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

#include "core/fusion/graph.hpp"
#include "core/fusion/program.hpp"
#include "core/math/fusion_ops.hpp"
#include "core/math/image.hpp"
#include "kernel_fusion/types.h"

namespace kf {
namespace fusion {
namespace cpu {

// The executor passes the public enums' values as the math headers' template arguments.
static_assert(KF_DTYPE_FLOAT32 == math::dtype::f32 && KF_DTYPE_FLOAT16 == math::dtype::f16 &&
                  KF_DTYPE_BFLOAT16 == math::dtype::bf16 && KF_DTYPE_FLOAT64 == math::dtype::f64 &&
                  KF_DTYPE_INT8 == math::dtype::i8 && KF_DTYPE_UINT8 == math::dtype::u8 &&
                  KF_DTYPE_INT32 == math::dtype::i32 && KF_DTYPE_INT64 == math::dtype::i64,
              "math::dtype mirrors kf_dtype_t");
static_assert(KF_UNARY_SQUARE == math::unary_op::square && KF_BINARY_POW == math::binary_op::pow &&
                  KF_BINARY_GE == math::binary_op::ge &&
                  KF_CAST_SATURATE_ROUND == math::cast_mode::saturate_round,
              "math op numbers mirror graph.h");
static_assert(KF_INTERP_BILINEAR == math::interp::bilinear &&
                  KF_BORDER_REFLECT == math::border::reflect &&
                  KF_COLOR_BT709 == math::color_standard::bt709 &&
                  KF_COLOR_BGR_TO_RGBA == math::color::bgr_to_rgba,
              "math image enums mirror graph.h");

// Bytes of one node buffer: tile values * channels * the widest compute type (8 bytes).
constexpr int64_t kBufferBytes = 8192;

template <int D>
using DtypeTag = std::integral_constant<int, D>;

// Calls fn(DtypeTag<D>{}) for the kf_dtype_t value of dtype.
template <class Fn>
void with_dtype(kf_dtype_t dtype, Fn&& fn) {
  switch (dtype) {
    case KF_DTYPE_FLOAT32: fn(DtypeTag<math::dtype::f32>{}); break;
    case KF_DTYPE_FLOAT16: fn(DtypeTag<math::dtype::f16>{}); break;
    case KF_DTYPE_BFLOAT16: fn(DtypeTag<math::dtype::bf16>{}); break;
    case KF_DTYPE_FLOAT64: fn(DtypeTag<math::dtype::f64>{}); break;
    case KF_DTYPE_INT8: fn(DtypeTag<math::dtype::i8>{}); break;
    case KF_DTYPE_UINT8: fn(DtypeTag<math::dtype::u8>{}); break;
    case KF_DTYPE_INT32: fn(DtypeTag<math::dtype::i32>{}); break;
    case KF_DTYPE_INT64: fn(DtypeTag<math::dtype::i64>{}); break;
  }
}

template <int V>
using Int = std::integral_constant<int, V>;

// Calls fn(Int<v>{}) for v in [First, First + sizeof...(I)).
template <int First, int... I, class Fn>
void with_int(int v, std::integer_sequence<int, I...>, Fn&& fn) {
  (void)((v == First + I ? (fn(Int<First + I>{}), true) : false) || ...);
}
template <int First, int Last, class Fn>
void with_int(int v, Fn&& fn) {
  with_int<First>(v, std::make_integer_sequence<int, Last - First + 1>{}, fn);
}

// The tile of an image graph: output pixels [begin, begin + count) of an item's row-major
// H x W output, and the item's read geometry inputs.
struct PixelTile {
  const Item* item = nullptr;
  int64_t begin = 0;
  int64_t count = 0;
  int32_t width = 0;   // output W
  int32_t height = 0;  // output H
};

// Evaluates read node `node` (image or NV12) over the tile into out (count * channels values of
// the node's compute type). border_values: the node's launch values.
void read_tile(const Graph& g, const Node& node, const PixelTile& tile, const double* values,
               void* out);

// Colour conversion node over count pixels: in holds the argument's values (its channels per
// pixel), out the node's.
void color_tile(const Graph& g, const Node& node, const void* in, int64_t count,
                const double* values, void* out);

// Normalisation node over count pixels.
void normalize_tile(const Graph& g, const Node& node, const void* in, int64_t count,
                    const double* values, void* out);

}  // namespace cpu
}  // namespace fusion
}  // namespace kf
