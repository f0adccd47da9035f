// The graph IR's shared helpers: the canonical structure key (the in-memory cache key) and its
// hash, the rules launch values must satisfy, and the frozen graph kernels share.
#include "core/fusion/graph.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/runtime/error.hpp"
#include "core/runtime/tensor.hpp"

namespace kf {
namespace fusion {
namespace {

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

// A 64-bit hash of the key, stable across processes and builds (unlike std::hash), eight bytes
// per step.
uint64_t hash_key(const std::string& key) {
  auto mix = [](uint64_t h) {  // murmur3's finaliser
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
  };
  uint64_t h = 0x9e3779b97f4a7c15ull ^ key.size();
  size_t at = 0;
  for (; at + 8 <= key.size(); at += 8) {
    uint64_t word;
    std::memcpy(&word, key.data() + at, 8);
    h = mix(h ^ word);
  }
  uint64_t tail = 0;
  std::memcpy(&tail, key.data() + at, key.size() - at);
  return mix(h ^ tail);
}

bool any_crop(const Graph& g) {
  for (const Node& n : g.nodes)
    if (n.kind == NodeKind::read_image && n.read.crop) return true;
  return false;
}

}  // namespace

// The key is a compact binary record, not text: it is built on the first kf_graph_compile() of
// each graph state and capacity (StructureKey, kept by the graph handle). Every field is a
// fixed-width int32, so equal keys mean equal structure field by field.
std::string Graph::structure_key(const kf_compile_options_t& options) const {
  constexpr int kNodeFields = 18;
  constexpr int kOutputFields = 3;
  std::vector<int32_t> fields;
  fields.reserve(4 + nodes.size() * kNodeFields + outputs.size() * kOutputFields);
  fields.insert(fields.end(),
                {static_cast<int32_t>(image), options.max_items, static_cast<int32_t>(nodes.size()),
                 static_cast<int32_t>(outputs.size())});
  for (const Node& n : nodes) {
    const bool input = n.kind == NodeKind::input;
    const bool read = n.kind == NodeKind::read_image;
    const int32_t record[kNodeFields] = {
        static_cast<int32_t>(n.kind),
        n.op,
        n.args[0],
        n.args[1],
        n.args[2],
        n.n_args,
        n.weak ? -1 : static_cast<int32_t>(n.dtype),  // a weak constant's dtype is meaningless
        n.channels,
        n.value_count,
        input ? static_cast<int32_t>(n.input.kind) : -1,
        input ? n.input.rank : -1,
        input ? n.input.position : -1,
        read ? static_cast<int32_t>(n.read.crop) : -1,
        read ? static_cast<int32_t>(n.read.interpolation) : -1,
        read ? static_cast<int32_t>(n.read.keep_aspect_ratio) : -1,
        read ? static_cast<int32_t>(n.read.border) : -1,
        read ? static_cast<int32_t>(n.read.color_standard) : -1,
        read ? static_cast<int32_t>(n.read.full_range) : -1,
    };
    fields.insert(fields.end(), record, record + kNodeFields);
  }
  for (const Output& o : outputs) {
    fields.insert(fields.end(),
                  {o.node, static_cast<int32_t>(o.layout), static_cast<int32_t>(o.batched)});
  }
  std::string key("kf-graph-v1:");
  key.append(reinterpret_cast<const char*>(fields.data()), fields.size() * sizeof(int32_t));
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
        if (!is_floating(n.dtype)) mark(n, ValueRule::held);
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

namespace {

// The values an integer dtype holds, as doubles: [lo, hi] (hi_open: [lo, hi), for int64, whose
// largest value a double cannot hold; 2^63 is exact in a double).
void integer_range(kf_dtype_t dtype, double* lo, double* hi, bool* hi_open) {
  *hi_open = false;
  switch (dtype) {
    case KF_DTYPE_INT8: *lo = -128.0, *hi = 127.0; return;
    case KF_DTYPE_UINT8: *lo = 0.0, *hi = 255.0; return;
    case KF_DTYPE_INT32: *lo = -2147483648.0, *hi = 2147483647.0; return;
    default: *lo = -9223372036854775808.0, *hi = 9223372036854775808.0, *hi_open = true; return;
  }
}

}  // namespace

bool satisfies(ValueRule rule, double value, kf_dtype_t dtype) noexcept {
  switch (rule) {
    case ValueRule::any: return true;
    // [-2^63, 2^63) is what converts to int64 without overflow.
    case ValueRule::integer:
      return std::isfinite(value) && value >= -9223372036854775808.0 &&
             value < 9223372036854775808.0;
    case ValueRule::held: {
      double lo, hi;
      bool hi_open;
      integer_range(dtype, &lo, &hi, &hi_open);
      return std::isfinite(value) && std::floor(value) == value && value >= lo &&
             (hi_open ? value < hi : value <= hi);
    }
    case ValueRule::finite: return std::isfinite(value);
    case ValueRule::nonzero: return std::isfinite(value) && value != 0.0;
  }
  return false;
}

void check_value(const Graph& g, ValueRule rule, int32_t node, int32_t index, double value) {
  const Node& n = g.nodes[static_cast<size_t>(node)];
  if (satisfies(rule, value, n.dtype)) return;
  const std::string name = value_name(n, index);
  switch (rule) {
    case ValueRule::held: {
      double lo, hi;
      bool hi_open;
      integer_range(n.dtype, &lo, &hi, &hi_open);
      fail(KF_ERROR_INVALID_ARGUMENT,
           "%s of node %d is %g, but the node gives %s values: it must be an integer from %.0f to "
           "%.0f%s",
           name.c_str(), node, value, dtype_name(n.dtype), lo, hi, hi_open ? " (exclusive)" : "");
    }
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

FrozenGraph::FrozenGraph(const Graph& g)
    : graph(g), value_rules(fusion::value_rules(g)), crops(any_crop(g)) {}

StructureKey::StructureKey(const Graph& g, const kf_compile_options_t& options)
    : max_items(options.max_items), bytes(g.structure_key(options)), hash(hash_key(bytes)) {}

}  // namespace fusion
}  // namespace kf
