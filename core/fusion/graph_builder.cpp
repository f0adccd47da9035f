// The kf_graph_* builder entries: every rule of graph.h is checked here, once, so the Graph a
// kernel freezes is well formed (arguments precede users, dtypes and channels agree, image ops
// only in image graphs) and codegen and the CPU executor trust it.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "core/fusion/graph.hpp"
#include "core/fusion/graph_builder.hpp"
#include "core/runtime/context.hpp"
#include "core/runtime/error.hpp"
#include "core/runtime/handle.hpp"
#include "core/runtime/tensor.hpp"
#include "kernel_fusion/graph.h"

namespace kf {
namespace fusion {

kf_graph_t* checked_graph(const kf_graph_t* g, const char* param_name) {
  return const_cast<kf_graph_t*>(checked(g, param_name));
}

void require_outputs(const Graph& g) {
  KF_REQUIRE_ARG(!g.outputs.empty(),
                 "the graph has no outputs: mark at least one node with kf_graph_output()");
}

void freeze(const kf_graph_t* g, const kf_compile_options_t& options,
            std::shared_ptr<const FrozenGraph>* frozen, std::shared_ptr<const StructureKey>* key) {
  std::lock_guard<std::mutex> lock(g->frozen_mutex);
  if (!g->frozen) g->frozen = std::make_shared<const FrozenGraph>(g->graph);
  if (!g->key || g->key->max_items != options.max_items)
    g->key = std::make_shared<const StructureKey>(g->graph, options);
  *frozen = g->frozen;
  *key = g->key;
}

namespace {

constexpr int32_t kMaxNodes = 1 << 20;

const char* unary_name(int op) {
  static const char* const names[] = {"neg", "abs", "exp", "log", "sqrt", "rsqrt", "square"};
  return names[op];
}

const char* binary_name(int op) {
  static const char* const names[] = {"add", "sub", "mul", "div", "min", "max", "pow",
                                      "eq",  "ne",  "lt",  "le",  "gt",  "ge"};
  return names[op];
}

bool is_comparison(int op) { return op >= KF_BINARY_EQ && op <= KF_BINARY_GE; }

const char* input_kind_name(kf_input_kind_t kind) {
  switch (kind) {
    case KF_INPUT_TENSOR: return "tensor input";
    case KF_INPUT_IMAGE: return "image input";
    case KF_INPUT_NV12: return "NV12 input";
  }
  return "input";
}

// The node `id` as an operand of an elementwise op: it exists and is a value (not an image or
// NV12 input, which only kf_graph_read_image() reads).
const Node& operand(const Graph& g, int32_t id, const char* role) {
  KF_REQUIRE_ARG(id >= 0 && static_cast<size_t>(id) < g.nodes.size(),
                 "%s is node %d, which does not exist (the graph has %zu nodes, 0..%zu)", role, id,
                 g.nodes.size(), g.nodes.empty() ? size_t{0} : g.nodes.size() - 1);
  const Node& n = g.nodes[static_cast<size_t>(id)];
  KF_REQUIRE_ARG(n.kind != NodeKind::input || n.input.kind == KF_INPUT_TENSOR,
                 "%s is node %d, an %s: read it with kf_graph_read_image() first", role, id,
                 input_kind_name(n.input.kind));
  return n;
}

// As operand(), and not a constant: the op needs a value of a known dtype.
const Node& value_operand(const Graph& g, int32_t id, const char* role, const char* op) {
  const Node& n = operand(g, id, role);
  KF_REQUIRE_ARG(n.kind != NodeKind::constant,
                 "%s: %s is node %d, a constant; apply %s to a value computed from an input "
                 "(constants are folded into the ops that use them)",
                 op, role, id, op);
  return n;
}

// Checks that a weak constant's default values can be used as `dtype` (integers need finite
// values inside the int64 range; floating operands take any value).
void check_constant_for(const Graph& g, int32_t id, kf_dtype_t dtype) {
  const Node& n = g.nodes[static_cast<size_t>(id)];
  if (n.kind != NodeKind::constant || is_floating(dtype)) return;
  for (int32_t i = 0; i < n.value_count; ++i)
    check_value(g, ValueRule::integer, id, i, g.values[static_cast<size_t>(n.value_offset + i)]);
}

// Broadcast channel count of operands (equal, or 1); tensor graphs have one channel.
int32_t broadcast_channels(const Graph& g, const int32_t* ids, const char* const* roles, int n,
                           const char* op) {
  int32_t channels = 1;
  for (int i = 0; i < n; ++i) channels = std::max(channels, g.nodes[ids[i]].channels);
  for (int i = 0; i < n; ++i) {
    const int32_t c = g.nodes[ids[i]].channels;
    KF_REQUIRE(c == channels || c == 1, KF_ERROR_SHAPE_MISMATCH,
               "%s: %s (node %d) has %d channels, which does not broadcast with %d channels "
               "(channel counts must be equal or 1)",
               op, roles[i], ids[i], c, channels);
  }
  KF_REQUIRE(g.image || channels == 1, KF_ERROR_SHAPE_MISMATCH,
             "%s: the operands have %d channels, but a tensor graph has one channel per element "
             "(per-channel constants belong in image graphs)",
             op, channels);
  return channels;
}

// The one dtype of the operands ids[0..n) (weak constants take it); DTYPE_MISMATCH when two
// non-constant operands differ, INVALID_ARGUMENT when all are constants.
kf_dtype_t common_dtype(const Graph& g, const int32_t* ids, const char* const* roles, int n,
                        const char* op) {
  int first = -1;
  for (int i = 0; i < n; ++i) {
    const Node& node = g.nodes[ids[i]];
    if (node.weak) continue;
    if (first < 0) {
      first = i;
      continue;
    }
    const Node& ref = g.nodes[ids[first]];
    KF_REQUIRE(node.dtype == ref.dtype, KF_ERROR_DTYPE_MISMATCH,
               "%s: %s (node %d) is %s but %s (node %d) is %s; operands need one dtype (convert "
               "one with kf_graph_cast())",
               op, roles[first], ids[first], dtype_name(ref.dtype), roles[i], ids[i],
               dtype_name(node.dtype));
  }
  KF_REQUIRE_ARG(first >= 0,
                 "%s: every operand is a constant; at least one must be a value computed from an "
                 "input (constants take the dtype of the operand they meet)",
                 op);
  const kf_dtype_t dtype = g.nodes[ids[first]].dtype;
  for (int i = 0; i < n; ++i) check_constant_for(g, ids[i], dtype);
  return dtype;
}

// The graph a builder call changes: what earlier compiles froze no longer describes it (dropped
// even when the call then fails and changes nothing; the next compile freezes it again).
Graph& graph_of(kf_graph_t* handle) {
  kf_graph_t* g = checked_graph(handle, "g");
  std::lock_guard<std::mutex> lock(g->frozen_mutex);
  g->frozen.reset();
  g->key.reset();
  return g->graph;
}

// A node of `kind` over args; dtype and channels are the caller's to set.
Node make_node(NodeKind kind, int op, std::initializer_list<int32_t> args) {
  Node node;
  node.kind = kind;
  node.op = op;
  for (int32_t id : args) node.args[node.n_args++] = id;
  return node;
}

// Makes room for `extra` more elements, growing geometrically (reserve(size + 1) would copy the
// whole vector on every append).
template <class T>
void make_room(std::vector<T>& v, size_t extra) {
  if (v.size() + extra > v.capacity()) v.reserve(std::max(v.size() + extra, 2 * v.capacity()));
}

// Appends a node and its default values; sets *out_node. Nothing changes on failure.
void add_node(Graph& g, Node node, const std::vector<double>& values, int32_t* out_node) {
  KF_REQUIRE_ARG(g.nodes.size() < static_cast<size_t>(kMaxNodes),
                 "the graph already has %d nodes, the most a graph may have", kMaxNodes);
  node.value_offset = values.empty() ? -1 : static_cast<int32_t>(g.values.size());
  node.value_count = static_cast<int32_t>(values.size());
  make_room(g.nodes, 1);
  make_room(g.values, values.size());
  g.values.insert(g.values.end(), values.begin(), values.end());  // no throw after the reserves
  g.nodes.push_back(node);
  *out_node = static_cast<int32_t>(g.nodes.size() - 1);
}

void require_out(const void* out, const char* name) {
  KF_REQUIRE_ARG(out != nullptr, "%s is NULL", name);
}

void require_enum(int value, int count, const char* what, const char* type) {
  KF_REQUIRE_ARG(value >= 0 && value < count, "%s %d is not a %s (0..%d)", what, value, type,
                 count - 1);
}

void require_dtype(int value, const char* what) {
  KF_REQUIRE(value >= KF_DTYPE_FLOAT32 && value <= KF_DTYPE_INT64, KF_ERROR_DTYPE_MISMATCH,
             "%s %d is not a kf_dtype_t (0..%d)", what, value, KF_DTYPE_INT64);
}

void declare_input(kf_graph_t* handle, const kf_graph_input_desc_t* desc, int32_t* out_node) {
  Graph& g = graph_of(handle);
  require_out(out_node, "out_node");
  require_out(desc, "desc");
  KF_REQUIRE_ARG(desc->struct_size >= sizeof(kf_graph_input_desc_t),
                 "desc->struct_size is %zu; initialise the descriptor with "
                 "KF_GRAPH_INPUT_DESC_INIT (sizeof(kf_graph_input_desc_t) is %zu)",
                 desc->struct_size, sizeof(kf_graph_input_desc_t));
  require_unknown_tail_zero(desc, desc->struct_size, sizeof(kf_graph_input_desc_t), "desc");
  const int kind = raw_enum(desc->kind);
  require_enum(kind, KF_INPUT_NV12 + 1, "desc->kind", "kf_input_kind_t");
  const int dtype = raw_enum(desc->dtype);
  require_dtype(dtype, "desc->dtype");

  Node node;
  node.kind = NodeKind::input;
  node.dtype = static_cast<kf_dtype_t>(dtype);
  node.input.kind = static_cast<kf_input_kind_t>(kind);
  node.input.rank = desc->rank;
  node.input.position = static_cast<int32_t>(g.inputs.size());
  if (kind == KF_INPUT_TENSOR) {
    KF_REQUIRE_ARG(!g.image,
                   "a graph cannot mix tensor inputs with image inputs: this graph already reads "
                   "an image (input node %d)",
                   g.inputs.front());
    KF_REQUIRE_ARG(desc->rank >= 0 && desc->rank <= KF_MAX_DIMS,
                   "desc->rank is %d; a tensor input has rank 0..%d", desc->rank, KF_MAX_DIMS);
    for (size_t id = 0; id < g.nodes.size(); ++id) {
      const Node& n = g.nodes[id];
      KF_REQUIRE(n.channels == 1, KF_ERROR_SHAPE_MISMATCH,
                 "constant node %zu has %d channels, but a graph with tensor inputs has one "
                 "channel per element",
                 id, n.channels);
    }
  } else {
    KF_REQUIRE_ARG(g.inputs.empty() || g.image,
                   "a graph cannot mix image inputs with tensor inputs: this graph already has "
                   "tensor input node %d",
                   g.inputs.front());
    if (kind == KF_INPUT_IMAGE) {
      KF_REQUIRE_ARG(desc->rank == 3, "desc->rank is %d; an image input is [H, W, C], rank 3",
                     desc->rank);
      KF_REQUIRE_ARG(desc->channels == 1 || desc->channels == 3 || desc->channels == 4,
                     "desc->channels is %d; an image has 1, 3 or 4 channels", desc->channels);
      node.channels = desc->channels;
    } else {
      KF_REQUIRE_ARG(desc->rank == 2,
                     "desc->rank is %d; an NV12 input is a [H * 3 / 2, W] tensor, rank 2",
                     desc->rank);
      KF_REQUIRE(dtype == KF_DTYPE_UINT8, KF_ERROR_DTYPE_MISMATCH,
                 "desc->dtype is %s; an NV12 frame is uint8", dtype_name(node.dtype));
      node.channels = 3;  // a read gives RGB
    }
  }
  make_room(g.inputs, 1);
  add_node(g, node, {}, out_node);
  g.inputs.push_back(*out_node);
  if (kind != KF_INPUT_TENSOR) g.image = true;
}

void add_constant(kf_graph_t* handle, int32_t channels, const double* values, int32_t* out_node) {
  Graph& g = graph_of(handle);
  require_out(out_node, "out_node");
  require_out(values, "values");
  KF_REQUIRE_ARG(channels >= 1 && channels <= 4, "channels is %d; a constant has 1 to 4 channels",
                 channels);
  KF_REQUIRE_ARG(channels == 1 || g.image || g.inputs.empty(),
                 "channels is %d, but this graph has tensor inputs, which have one channel per "
                 "element",
                 channels);
  Node node;
  node.kind = NodeKind::constant;
  node.weak = true;
  node.channels = channels;
  add_node(g, node, std::vector<double>(values, values + channels), out_node);
}

void add_unary(kf_graph_t* handle, int op, int32_t x, int32_t* out_node) {
  Graph& g = graph_of(handle);
  require_out(out_node, "out_node");
  require_enum(op, KF_UNARY_SQUARE + 1, "op", "kf_unary_op_t");
  const Node& arg = value_operand(g, x, "x", unary_name(op));
  const bool floating_only =
      op == KF_UNARY_EXP || op == KF_UNARY_LOG || op == KF_UNARY_SQRT || op == KF_UNARY_RSQRT;
  KF_REQUIRE(!floating_only || is_floating(arg.dtype), KF_ERROR_DTYPE_MISMATCH,
             "%s needs a floating value, but x (node %d) is %s (cast it first)", unary_name(op), x,
             dtype_name(arg.dtype));
  Node node = make_node(NodeKind::unary, op, {x});
  node.dtype = arg.dtype;
  node.channels = arg.channels;
  add_node(g, node, {}, out_node);
}

void add_activation(kf_graph_t* handle, int act, int32_t x, int32_t* out_node) {
  Graph& g = graph_of(handle);
  require_out(out_node, "out_node");
  require_enum(act, KF_ACTIVATION_SIGMOID + 1, "act", "kf_activation_t");
  const Node& arg = value_operand(g, x, "x", "activation");
  KF_REQUIRE(is_floating(arg.dtype), KF_ERROR_DTYPE_MISMATCH,
             "activations need a floating value, but x (node %d) is %s (cast it first)", x,
             dtype_name(arg.dtype));
  Node node = make_node(NodeKind::activation, act, {x});
  node.dtype = arg.dtype;
  node.channels = arg.channels;
  add_node(g, node, {}, out_node);
}

void add_binary(kf_graph_t* handle, int op, int32_t a, int32_t b, int32_t* out_node) {
  Graph& g = graph_of(handle);
  require_out(out_node, "out_node");
  require_enum(op, KF_BINARY_GE + 1, "op", "kf_binary_op_t");
  const char* name = binary_name(op);
  operand(g, a, "a");
  operand(g, b, "b");
  const int32_t ids[2] = {a, b};
  const char* const roles[2] = {"a", "b"};
  const kf_dtype_t dtype = common_dtype(g, ids, roles, 2, name);
  KF_REQUIRE(op != KF_BINARY_POW || is_floating(dtype), KF_ERROR_DTYPE_MISMATCH,
             "pow needs floating operands, but they are %s (cast them first)", dtype_name(dtype));
  Node node = make_node(NodeKind::binary, op, {a, b});
  node.channels = broadcast_channels(g, ids, roles, 2, name);
  node.dtype = is_comparison(op) ? KF_DTYPE_UINT8 : dtype;
  add_node(g, node, {}, out_node);
}

void add_clamp(kf_graph_t* handle, int32_t x, int32_t lo, int32_t hi, int32_t* out_node) {
  Graph& g = graph_of(handle);
  require_out(out_node, "out_node");
  operand(g, x, "x");
  operand(g, lo, "lo");
  operand(g, hi, "hi");
  const int32_t ids[3] = {x, lo, hi};
  const char* const roles[3] = {"x", "lo", "hi"};
  Node node = make_node(NodeKind::clamp, 0, {x, lo, hi});
  node.dtype = common_dtype(g, ids, roles, 3, "clamp");
  node.channels = broadcast_channels(g, ids, roles, 3, "clamp");
  add_node(g, node, {}, out_node);
}

void add_where(kf_graph_t* handle, int32_t cond, int32_t a, int32_t b, int32_t* out_node) {
  Graph& g = graph_of(handle);
  require_out(out_node, "out_node");
  value_operand(g, cond, "cond", "where");
  operand(g, a, "a");
  operand(g, b, "b");
  const int32_t ids[3] = {cond, a, b};
  const char* const roles[3] = {"cond", "a", "b"};
  Node node = make_node(NodeKind::where, 0, {cond, a, b});
  node.dtype = common_dtype(g, ids + 1, roles + 1, 2, "where");
  node.channels = broadcast_channels(g, ids, roles, 3, "where");
  add_node(g, node, {}, out_node);
}

void add_cast(kf_graph_t* handle, int32_t x, int dtype, int mode, int32_t* out_node) {
  Graph& g = graph_of(handle);
  require_out(out_node, "out_node");
  require_enum(mode, KF_CAST_SATURATE_ROUND + 1, "mode", "kf_cast_mode_t");
  require_dtype(dtype, "dtype");
  const Node& arg = value_operand(g, x, "x", "cast");
  Node node = make_node(NodeKind::cast, mode, {x});
  node.dtype = static_cast<kf_dtype_t>(dtype);
  node.channels = arg.channels;
  add_node(g, node, {}, out_node);
}

void add_read(kf_graph_t* handle, int32_t image, const kf_image_read_desc_t* desc,
              int32_t* out_node) {
  Graph& g = graph_of(handle);
  require_out(out_node, "out_node");
  require_out(desc, "desc");
  KF_REQUIRE_ARG(desc->struct_size >= sizeof(kf_image_read_desc_t),
                 "desc->struct_size is %zu; initialise the descriptor with "
                 "KF_IMAGE_READ_DESC_INIT (sizeof(kf_image_read_desc_t) is %zu)",
                 desc->struct_size, sizeof(kf_image_read_desc_t));
  require_unknown_tail_zero(desc, desc->struct_size, sizeof(kf_image_read_desc_t), "desc");
  KF_REQUIRE_ARG(image >= 0 && static_cast<size_t>(image) < g.nodes.size(),
                 "image is node %d, which does not exist (the graph has %zu nodes)", image,
                 g.nodes.size());
  const Node& src = g.nodes[static_cast<size_t>(image)];
  KF_REQUIRE_ARG(src.kind == NodeKind::input && src.input.kind != KF_INPUT_TENSOR,
                 "image is node %d, which is not an image or NV12 input (kf_graph_read_image "
                 "reads inputs declared as KF_INPUT_IMAGE or KF_INPUT_NV12)",
                 image);
  const int interpolation = raw_enum(desc->interpolation);
  require_enum(interpolation, KF_INTERP_BILINEAR + 1, "desc->interpolation", "kf_interpolation_t");
  const int border = raw_enum(desc->border);
  require_enum(border, KF_BORDER_REFLECT + 1, "desc->border", "kf_border_t");
  const int standard = raw_enum(desc->color_standard);
  require_enum(standard, KF_COLOR_BT709 + 1, "desc->color_standard", "kf_color_standard_t");
  KF_REQUIRE_ARG(!desc->keep_aspect_ratio || interpolation != KF_INTERP_NONE,
                 "desc->keep_aspect_ratio needs a resize: set desc->interpolation to "
                 "KF_INTERP_NEAREST or KF_INTERP_BILINEAR");

  Node node = make_node(NodeKind::read_image, 0, {image});
  node.channels = src.channels;
  node.read.crop = desc->crop != 0;
  node.read.interpolation = static_cast<kf_interpolation_t>(interpolation);
  node.read.keep_aspect_ratio = desc->keep_aspect_ratio != 0;
  node.read.border = static_cast<kf_border_t>(border);
  node.read.color_standard = static_cast<kf_color_standard_t>(standard);
  node.read.full_range = desc->full_range != 0;
  const bool resamples = interpolation == KF_INTERP_BILINEAR || src.input.kind == KF_INPUT_NV12;
  node.dtype = !resamples || src.dtype == KF_DTYPE_FLOAT64 ? src.dtype : KF_DTYPE_FLOAT32;
  KF_REQUIRE_ARG(
      is_floating(node.dtype) || satisfies(ValueRule::held, desc->border_value, node.dtype),
      "desc->border_value is %g, but this read gives %s values, which cannot hold it",
      desc->border_value, dtype_name(node.dtype));
  add_node(g, node, std::vector<double>(static_cast<size_t>(node.channels), desc->border_value),
           out_node);
}

void add_color(kf_graph_t* handle, int32_t x, int conversion, int32_t* out_node) {
  Graph& g = graph_of(handle);
  require_out(out_node, "out_node");
  require_enum(conversion, KF_COLOR_BGR_TO_RGBA + 1, "conversion", "kf_color_conversion_t");
  const Node& arg = value_operand(g, x, "x", "color conversion");
  KF_REQUIRE_ARG(g.image,
                 "color conversion needs an image graph (pixels of 3 or 4 channels); this is a "
                 "tensor graph");
  struct Rule {
    const char* name;
    int32_t in, out;
  };
  static const Rule rules[] = {{"RGB to BGR", 3, 3},  {"RGBA to BGRA", 4, 4}, {"RGB to gray", 3, 1},
                               {"BGR to gray", 3, 1}, {"RGBA to RGB", 4, 3},  {"RGB to RGBA", 3, 4},
                               {"RGBA to BGR", 4, 3}, {"BGR to RGBA", 3, 4}};
  const Rule& rule = rules[conversion];
  KF_REQUIRE(arg.channels == rule.in, KF_ERROR_SHAPE_MISMATCH,
             "%s needs a %d-channel value, but x (node %d) has %d channels", rule.name, rule.in, x,
             arg.channels);
  Node node = make_node(NodeKind::color, conversion, {x});
  node.channels = rule.out;
  const bool gray = conversion == KF_COLOR_RGB_TO_GRAY || conversion == KF_COLOR_BGR_TO_GRAY;
  node.dtype = gray && !is_floating(arg.dtype) ? KF_DTYPE_FLOAT32 : arg.dtype;
  std::vector<double> values;
  if (conversion == KF_COLOR_RGB_TO_RGBA || conversion == KF_COLOR_BGR_TO_RGBA)
    values.push_back(arg.dtype == KF_DTYPE_UINT8 ? 255.0 : 1.0);  // opaque alpha
  add_node(g, node, values, out_node);
}

void add_normalize(kf_graph_t* handle, int32_t x, double scale, const double* mean,
                   const double* std, int32_t* out_node) {
  Graph& g = graph_of(handle);
  require_out(out_node, "out_node");
  require_out(mean, "mean");
  require_out(std, "std");
  const Node& arg = value_operand(g, x, "x", "normalize");
  const int32_t channels = arg.channels;
  std::vector<double> values;
  values.reserve(static_cast<size_t>(1 + 2 * channels));
  values.push_back(scale);
  values.insert(values.end(), mean, mean + channels);
  values.insert(values.end(), std, std + channels);
  Node node = make_node(NodeKind::normalize, 0, {x});
  node.channels = channels;
  node.dtype = arg.dtype == KF_DTYPE_FLOAT64 ? KF_DTYPE_FLOAT64 : KF_DTYPE_FLOAT32;
  KF_REQUIRE_ARG(std::isfinite(scale), "scale is %g; it must be finite", scale);
  for (int32_t c = 0; c < channels; ++c) {
    KF_REQUIRE_ARG(std::isfinite(mean[c]), "mean[%d] is %g; it must be finite", c, mean[c]);
    KF_REQUIRE_ARG(std::isfinite(std[c]) && std[c] != 0.0,
                   "std[%d] is %g; a standard deviation must be finite and nonzero", c, std[c]);
  }
  add_node(g, node, values, out_node);
}

void mark_output(kf_graph_t* handle, int32_t id, const kf_graph_output_desc_t* desc,
                 int32_t* out_index) {
  Graph& g = graph_of(handle);
  kf_graph_output_desc_t d = KF_GRAPH_OUTPUT_DESC_INIT;
  if (desc != nullptr) {
    KF_REQUIRE_ARG(desc->struct_size >= sizeof(kf_graph_output_desc_t),
                   "desc->struct_size is %zu; initialise the descriptor with "
                   "KF_GRAPH_OUTPUT_DESC_INIT (sizeof(kf_graph_output_desc_t) is %zu)",
                   desc->struct_size, sizeof(kf_graph_output_desc_t));
    require_unknown_tail_zero(desc, desc->struct_size, sizeof(kf_graph_output_desc_t), "desc");
    d.batched = desc->batched;
    const int layout = raw_enum(desc->layout);
    require_enum(layout, KF_OUTPUT_PLANAR + 1, "desc->layout", "kf_output_layout_t");
    d.layout = static_cast<kf_output_layout_t>(layout);
  }
  const Node& n = operand(g, id, "node");
  KF_REQUIRE_ARG(n.kind != NodeKind::input,
                 "node %d is an input; an output must be computed (a graph does not copy inputs "
                 "through)",
                 id);
  KF_REQUIRE_ARG(n.kind != NodeKind::constant,
                 "node %d is a constant; an output must be computed from an input", id);
  KF_REQUIRE_ARG(g.image || (d.layout == KF_OUTPUT_AS_IS && d.batched == 0),
                 "planar and batched outputs belong to image graphs; a tensor graph's output has "
                 "the broadcast shape of its inputs (use KF_OUTPUT_AS_IS, batched 0)");
  Output o;
  o.node = id;
  o.layout = d.layout;
  o.batched = d.batched != 0;
  g.outputs.push_back(o);
  if (out_index != nullptr) *out_index = static_cast<int32_t>(g.outputs.size() - 1);
}

}  // namespace
}  // namespace fusion

void delete_graph(kf_graph_t* g) noexcept { destroy_handle_object(g); }

}  // namespace kf

extern "C" {

kf_result_t kf_graph_create(kf_context_t* ctx, kf_graph_t** out) {
  return kf::api_call([&] {
    kf::checked_context(ctx, "ctx");
    KF_REQUIRE_ARG(out != nullptr, "out is NULL");
    auto g = std::make_unique<kf_graph_t>();
    g->ctx = ctx;
    std::lock_guard<std::mutex> lock(ctx->mutex);
    ctx->graphs.insert(g.get());
    try {
      kf::register_handle(g.get(), kf::HandleKind::graph);
    } catch (...) {
      ctx->graphs.erase(g.get());
      throw;
    }
    *out = g.release();
  });
}

kf_result_t kf_graph_destroy(kf_graph_t* g) {
  return kf::api_call([&] {
    if (g == nullptr) return;
    kf::fusion::checked_graph(g, "g");
    {
      std::lock_guard<std::mutex> lock(g->ctx->mutex);
      g->ctx->graphs.erase(g);
    }
    kf::unregister_handle(g);
    kf::delete_graph(g);
  });
}

kf_result_t kf_graph_input(kf_graph_t* g, const kf_graph_input_desc_t* desc, int32_t* out_node) {
  return kf::api_call([&] { kf::fusion::declare_input(g, desc, out_node); });
}

kf_result_t kf_graph_scalar(kf_graph_t* g, double value, int32_t* out_node) {
  return kf::api_call([&] { kf::fusion::add_constant(g, 1, &value, out_node); });
}

kf_result_t kf_graph_constant(kf_graph_t* g, int32_t channels, const double* values,
                              int32_t* out_node) {
  return kf::api_call([&] { kf::fusion::add_constant(g, channels, values, out_node); });
}

kf_result_t kf_graph_unary(kf_graph_t* g, kf_unary_op_t op, int32_t x, int32_t* out_node) {
  const int raw = kf::raw_enum(op);
  return kf::api_call([&] { kf::fusion::add_unary(g, raw, x, out_node); });
}

kf_result_t kf_graph_activation(kf_graph_t* g, kf_activation_t act, int32_t x, int32_t* out_node) {
  const int raw = kf::raw_enum(act);
  return kf::api_call([&] { kf::fusion::add_activation(g, raw, x, out_node); });
}

kf_result_t kf_graph_binary(kf_graph_t* g, kf_binary_op_t op, int32_t a, int32_t b,
                            int32_t* out_node) {
  const int raw = kf::raw_enum(op);
  return kf::api_call([&] { kf::fusion::add_binary(g, raw, a, b, out_node); });
}

kf_result_t kf_graph_clamp(kf_graph_t* g, int32_t x, int32_t lo, int32_t hi, int32_t* out_node) {
  return kf::api_call([&] { kf::fusion::add_clamp(g, x, lo, hi, out_node); });
}

kf_result_t kf_graph_where(kf_graph_t* g, int32_t cond, int32_t a, int32_t b, int32_t* out_node) {
  return kf::api_call([&] { kf::fusion::add_where(g, cond, a, b, out_node); });
}

kf_result_t kf_graph_cast(kf_graph_t* g, int32_t x, kf_dtype_t dtype, kf_cast_mode_t mode,
                          int32_t* out_node) {
  const int raw_dtype = kf::raw_enum(dtype);
  const int raw_mode = kf::raw_enum(mode);
  return kf::api_call([&] { kf::fusion::add_cast(g, x, raw_dtype, raw_mode, out_node); });
}

kf_result_t kf_graph_read_image(kf_graph_t* g, int32_t image, const kf_image_read_desc_t* desc,
                                int32_t* out_node) {
  return kf::api_call([&] { kf::fusion::add_read(g, image, desc, out_node); });
}

kf_result_t kf_graph_color_convert(kf_graph_t* g, int32_t x, kf_color_conversion_t conversion,
                                   int32_t* out_node) {
  const int raw = kf::raw_enum(conversion);
  return kf::api_call([&] { kf::fusion::add_color(g, x, raw, out_node); });
}

kf_result_t kf_graph_normalize(kf_graph_t* g, int32_t x, double scale, const double* mean,
                               const double* std, int32_t* out_node) {
  return kf::api_call([&] { kf::fusion::add_normalize(g, x, scale, mean, std, out_node); });
}

kf_result_t kf_graph_output(kf_graph_t* g, int32_t node, const kf_graph_output_desc_t* desc,
                            int32_t* out_index) {
  return kf::api_call([&] { kf::fusion::mark_output(g, node, desc, out_index); });
}

}  // extern "C"
