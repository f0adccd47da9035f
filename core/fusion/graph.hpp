// The fusion engine's graph IR: what kf_graph_t holds, what compiling freezes, what codegen and
// the CPU executor read. Validation happens in the builder (core/fusion/graph_builder.cpp), so
// every Graph reaching codegen or the executor is well formed: arguments precede their users,
// dtypes and channel counts agree, image ops appear only in image graphs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernel_fusion/graph.h"
#include "kernel_fusion/types.h"

namespace kf {
namespace fusion {

enum class NodeKind : uint8_t {
  input,       // a graph input; tensor inputs give one element, image inputs only feed reads
  constant,    // scalar / per-channel constant: weakly typed, values in the value table
  unary,       // op = kf_unary_op_t
  activation,  // op = kf_activation_t
  binary,      // op = kf_binary_op_t, args[0], args[1]
  clamp,       // args = x, lo, hi
  where,       // args = cond, a, b
  cast,        // op = kf_cast_mode_t, dtype = the target
  read_image,  // args[0] = the image/NV12 input node; read = how
  color,       // op = kf_color_conversion_t
  normalize,   // values: scale, mean[C], std[C]
};

struct InputInfo {
  kf_input_kind_t kind = KF_INPUT_TENSOR;
  int32_t rank = 1;      // tensors: declared rank; images 3; NV12 2
  int32_t position = 0;  // index among the graph's inputs (launch binding order)
};

struct ReadInfo {
  bool crop = false;
  kf_interpolation_t interpolation = KF_INTERP_NONE;
  bool keep_aspect_ratio = false;
  kf_border_t border = KF_BORDER_CONSTANT;
  kf_color_standard_t color_standard = KF_COLOR_BT601;
  bool full_range = false;
};

struct Node {
  NodeKind kind = NodeKind::input;
  int32_t op = 0;  // per kind, see NodeKind
  int32_t args[3] = {-1, -1, -1};
  int32_t n_args = 0;
  kf_dtype_t dtype = KF_DTYPE_FLOAT32;  // value dtype (constants: meaningless, see weak)
  bool weak = false;                    // constants: take the dtype of the operand they meet
  int32_t channels = 1;                 // 1 in tensor graphs; 1..4 in image graphs
  InputInfo input;                      // kind == input
  ReadInfo read;                        // kind == read_image
  int32_t value_offset = -1;            // first slot in Graph::values, or -1
  int32_t value_count = 0;              // slots this node owns
};

struct Output {
  int32_t node = -1;
  kf_output_layout_t layout = KF_OUTPUT_AS_IS;
  bool batched = false;
};

struct Graph {
  bool image = false;           // true once an image/NV12 input is declared
  std::vector<Node> nodes;      // topological: args always have smaller ids
  std::vector<int32_t> inputs;  // node ids of the inputs, in declaration order
  std::vector<Output> outputs;  // in marking order
  std::vector<double> values;   // default launch values, slots owned by nodes

  // A canonical encoding (binary, not text) of everything that is structure, the batch capacity
  // included, and no values: the in-memory cache key. Two graphs with equal keys generate
  // identical code for identical compile options.
  std::string structure_key(const kf_compile_options_t& options) const;
};

// The dtype an operand contributes to a binary/where/clamp: a weak constant takes `other`'s.
inline kf_dtype_t operand_dtype(const Node& n, kf_dtype_t other) {
  return n.weak ? other : n.dtype;
}

// What a launch value must satisfy (launch overrides are checked against it).
enum class ValueRule : uint8_t {
  any,      // any double (a floating operand may well be NaN or infinite)
  integer,  // meets an integer dtype: finite and inside the int64 range
  held,     // an integer image read's border value or alpha: an integer its dtype holds
  finite,   // normalize scale and mean
  nonzero,  // normalize std: finite and not zero
};

// The rule of every slot of g.values, derived from the nodes that own and use each slot.
std::vector<ValueRule> value_rules(const Graph& g);

// Whether `value` satisfies `rule`; `dtype` is the owning node's (ValueRule::held).
bool satisfies(ValueRule rule, double value, kf_dtype_t dtype = KF_DTYPE_INT64) noexcept;

// Throws INVALID_ARGUMENT, naming the node and its value (e.g. "std[1] of node 4"), unless
// `value` satisfies `rule` as value `index` of node `node`.
void check_value(const Graph& g, ValueRule rule, int32_t node, int32_t index, double value);

// A graph as compiled, with what launches derive from it: immutable, so that the graph handle
// (until its next builder call) and every kernel compiled from that state share one copy instead
// of each compile copying the graph.
struct FrozenGraph {
  explicit FrozenGraph(const Graph& g);

  const Graph graph;
  const std::vector<ValueRule> value_rules;  // per slot of graph.values
  const bool crops;                          // some read crops: launches give rectangles
};

// The in-memory cache key of a frozen graph compiled with a capacity (Graph::structure_key) and
// its 64-bit hash (kf_fused_kernel_info_t::structure_hash). Immutable; kept by the graph handle
// so that repeated compiles of an unchanged graph neither rebuild nor rehash it.
struct StructureKey {
  StructureKey(const Graph& g, const kf_compile_options_t& options);

  const int32_t max_items;
  const std::string bytes;
  const uint64_t hash;
};

}  // namespace fusion
}  // namespace kf
