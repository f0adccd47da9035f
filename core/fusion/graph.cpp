// The graph IR's shared helpers: the canonical structure key (the in-memory cache key) and the
// rules launch values must satisfy.
#include "core/fusion/graph.hpp"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/runtime/error.hpp"
#include "core/runtime/tensor.hpp"

namespace kf {
namespace fusion {
namespace {

void append(std::string& key, const char* tag, int64_t value) {
  key += tag;
  key += std::to_string(value);
}

const char* kind_tag(NodeKind kind) {
  switch (kind) {
    case NodeKind::input: return "in";
    case NodeKind::constant: return "const";
    case NodeKind::unary: return "unary";
    case NodeKind::activation: return "act";
    case NodeKind::binary: return "binary";
    case NodeKind::clamp: return "clamp";
    case NodeKind::where: return "where";
    case NodeKind::cast: return "cast";
    case NodeKind::read_image: return "read";
    case NodeKind::color: return "color";
    case NodeKind::normalize: return "normalize";
  }
  return "?";
}

// The dtype the operands of a binary/clamp/where node meet in: the first non-weak one's.
kf_dtype_t common_operand_dtype(const Graph& g, const Node& n) {
  const int32_t first = n.kind == NodeKind::where ? 1 : 0;
  for (int32_t i = first; i < n.n_args; ++i) {
    const Node& arg = g.nodes[static_cast<size_t>(n.args[i])];
    if (!arg.weak) return arg.dtype;
  }
  return n.dtype;  // unreachable for a well-formed graph: one operand is never weak
}

// "std[1]", "border value[0]": what value `index` of n means to a user.
std::string value_name(const Node& n, int32_t index) {
  switch (n.kind) {
    case NodeKind::constant:
      return n.value_count == 1 ? std::string("value") : format("value[%d]", index);
    case NodeKind::normalize: {
      if (index == 0) return "scale";
      const int32_t c = n.channels;
      return index <= c ? format("mean[%d]", index - 1) : format("std[%d]", index - 1 - c);
    }
    case NodeKind::read_image: return format("border value[%d]", index);
    case NodeKind::color: return "alpha";
    default: return format("value %d", index);
  }
}

}  // namespace

std::string Graph::structure_key(const kf_compile_options_t& options) const {
  std::string key;
  key.reserve(32 + nodes.size() * 40);
  key += image ? "kf-graph1 image" : "kf-graph1 tensor";
  append(key, " items=", options.max_items);
  for (size_t id = 0; id < nodes.size(); ++id) {
    const Node& n = nodes[id];
    append(key, "\n", static_cast<int64_t>(id));
    key += ' ';
    key += kind_tag(n.kind);
    append(key, " op=", n.op);
    for (int32_t i = 0; i < n.n_args; ++i) append(key, i == 0 ? " args=" : ",", n.args[i]);
    if (n.weak) {
      key += " weak";
    } else {
      append(key, " dtype=", n.dtype);
    }
    append(key, " c=", n.channels);
    append(key, " slots=", n.value_count);
    if (n.kind == NodeKind::input) {
      append(key, " kind=", n.input.kind);
      append(key, " rank=", n.input.rank);
      append(key, " pos=", n.input.position);
    }
    if (n.kind == NodeKind::read_image) {
      const ReadInfo& r = n.read;
      append(key, " crop=", r.crop);
      append(key, " interp=", r.interpolation);
      append(key, " keep=", r.keep_aspect_ratio);
      append(key, " border=", r.border);
      append(key, " std=", r.color_standard);
      append(key, " full=", r.full_range);
    }
  }
  for (const Output& o : outputs) {
    append(key, "\nout ", o.node);
    append(key, " layout=", o.layout);
    append(key, " batched=", o.batched);
  }
  return key;
}

std::vector<ValueRule> value_rules(const Graph& g) {
  std::vector<ValueRule> rules(g.values.size(), ValueRule::any);
  auto mark = [&](const Node& n, ValueRule rule) {
    for (int32_t i = 0; i < n.value_count; ++i)
      rules[static_cast<size_t>(n.value_offset + i)] = rule;
  };
  for (const Node& n : g.nodes) {
    switch (n.kind) {
      case NodeKind::normalize:
        mark(n, ValueRule::finite);
        for (int32_t c = 0; c < n.channels; ++c)
          rules[static_cast<size_t>(n.value_offset + 1 + n.channels + c)] = ValueRule::nonzero;
        break;
      case NodeKind::read_image:
      case NodeKind::color:
        if (!is_floating(n.dtype)) mark(n, ValueRule::integer);
        break;
      case NodeKind::binary:
      case NodeKind::clamp:
      case NodeKind::where: {
        if (is_floating(common_operand_dtype(g, n))) break;
        for (int32_t i = 0; i < n.n_args; ++i) {
          const Node& arg = g.nodes[static_cast<size_t>(n.args[i])];
          if (arg.kind == NodeKind::constant) mark(arg, ValueRule::integer);
        }
        break;
      }
      default: break;
    }
  }
  return rules;
}

bool satisfies(ValueRule rule, double value) noexcept {
  switch (rule) {
    case ValueRule::any: return true;
    // 2^63 is exact in a double; [-2^63, 2^63) is what converts to int64 without overflow.
    case ValueRule::integer:
      return std::isfinite(value) && value >= -9223372036854775808.0 &&
             value < 9223372036854775808.0;
    case ValueRule::finite: return std::isfinite(value);
    case ValueRule::nonzero: return std::isfinite(value) && value != 0.0;
  }
  return false;
}

void check_value(const Graph& g, ValueRule rule, int32_t node, int32_t index, double value) {
  if (satisfies(rule, value)) return;
  const std::string name = value_name(g.nodes[static_cast<size_t>(node)], index);
  switch (rule) {
    case ValueRule::integer:
      fail(KF_ERROR_INVALID_ARGUMENT,
           "%s of node %d is %g, but the node is used as an integer value: it must be finite and "
           "inside the int64 range",
           name.c_str(), node, value);
    case ValueRule::nonzero:
      fail(KF_ERROR_INVALID_ARGUMENT,
           "%s of node %d is %g; a standard deviation must be finite and nonzero", name.c_str(),
           node, value);
    default:
      fail(KF_ERROR_INVALID_ARGUMENT, "%s of node %d is %g; it must be finite", name.c_str(), node,
           value);
  }
}

}  // namespace fusion
}  // namespace kf
