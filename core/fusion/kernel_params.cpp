#include "core/fusion/kernel_params.hpp"

#include <algorithm>
#include <climits>
#include <cstring>

#include "core/runtime/error.hpp"
#include "core/runtime/tensor.hpp"

namespace kf {
namespace fusion {
namespace {

constexpr int32_t kImageHeaderSlots = 6;  // out_h, out_w, crop x, y, w, h

int64_t pointer_slot(const void* p) {
  int64_t v;
  static_assert(sizeof(p) == sizeof(v), "64-bit pointers");
  std::memcpy(&v, &p, sizeof v);
  return v;
}

// Row-major contiguous over shape (extent-1 dimensions may have any stride).
bool contiguous(const Binding& b, int32_t rank, const int64_t* shape) {
  int64_t expected = 1;
  for (int32_t d = rank - 1; d >= 0; --d) {
    if (shape[d] != 1 && b.strides[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

// A rough count of the instructions one element of a tensor graph costs (f32 compute; the
// fast division and root paths; f64 twice, 64-bit integer arithmetic three times as dear), for
// the grid policy below. Only the order of magnitude matters.
double element_cost(const Graph& g) {
  std::vector<bool> live(g.nodes.size(), false);
  for (const Output& o : g.outputs) live[static_cast<size_t>(o.node)] = true;
  for (size_t id = g.nodes.size(); id-- > 0;) {
    if (!live[id]) continue;
    const Node& n = g.nodes[id];
    for (int32_t a = 0; a < n.n_args; ++a) live[static_cast<size_t>(n.args[a])] = true;
  }
  double cost = 0;
  for (size_t id = 0; id < g.nodes.size(); ++id) {
    if (!live[id]) continue;
    const Node& n = g.nodes[id];
    double c = 0;
    switch (n.kind) {
      case NodeKind::input:
      case NodeKind::constant: break;
      case NodeKind::unary: {
        static const double unary[] = {0, 0, 12, 20, 7, 13, 1};  // neg abs exp log sqrt rsqrt sq
        c = n.op >= 0 && n.op < 7 ? unary[n.op] : 10;
        break;
      }
      case NodeKind::activation: {
        static const double act[] = {0, 2, 30, 25, 15, 20, 15};  // none relu gelu ... sigmoid
        c = n.op >= 0 && n.op < 7 ? act[n.op] : 20;
        break;
      }
      case NodeKind::binary:
        c = n.op == KF_BINARY_DIV ? 7 : n.op == KF_BINARY_POW ? 40 : n.op >= KF_BINARY_EQ ? 2 : 1;
        break;
      case NodeKind::cast: c = 3; break;
      default: c = 2; break;
    }
    if (n.dtype == KF_DTYPE_FLOAT64) c *= 2;
    if (n.dtype == KF_DTYPE_INT64 || n.dtype == KF_DTYPE_INT32 || n.dtype == KF_DTYPE_INT8 ||
        n.dtype == KF_DTYPE_UINT8)
      c *= 3;
    cost += c;
  }
  return cost;
}

}  // namespace

ParamLayout param_layout(const Graph& g, const kf_compile_options_t& options,
                         const DeviceBalance& balance) {
  ParamLayout l;
  l.image = g.image;
  l.n_inputs = static_cast<int32_t>(g.inputs.size());
  l.n_outputs = static_cast<int32_t>(g.outputs.size());
  l.n_values = static_cast<int32_t>(g.values.size());
  l.value_slots = std::max(l.n_values, 1);
  l.f32_value_slots = std::max((l.n_values + 1) / 2, 1);
  l.capacity = std::max(options.max_items, 1);
  for (int32_t id : g.inputs) {
    l.element_bytes.push_back(static_cast<int32_t>(dtype_size(g.nodes[id].dtype)));
    if (!g.image) l.rank = std::max(l.rank, g.nodes[id].input.rank);
  }
  for (const Output& o : g.outputs) {
    l.element_bytes.push_back(static_cast<int32_t>(dtype_size(g.nodes[o.node].dtype)));
  }
  l.shape_slots = std::max(l.rank, 1);
  const int32_t narrowest = *std::min_element(l.element_bytes.begin(), l.element_bytes.end());
  // 16 bytes of the narrowest dtype, at most 8 elements: the graph is inlined once per element
  // of the vector, and 16 copies of a long graph cost NVRTC time for no bandwidth (1-byte
  // bindings then move 8-byte vectors).
  l.vector_elements = std::min(16 / std::max(narrowest, 1), 8);
  // At least 32 bytes of inputs in flight per thread and step (one 16-byte vector of a single
  // input left too few loads in flight to cover the memory latency), at most 16 elements: the
  // graph is inlined once per element.
  size_t input_bytes = 0;
  for (int32_t i = 0; i < l.n_inputs; ++i)
    input_bytes += static_cast<size_t>(l.element_bytes[static_cast<size_t>(i)]);
  const size_t step_bytes = input_bytes * static_cast<size_t>(l.vector_elements);
  l.unroll = step_bytes == 0 ? 1 : static_cast<int32_t>(std::max<size_t>(1, 32 / step_bytes));
  l.unroll = std::min(l.unroll, std::max(1, 16 / l.vector_elements));
  // The grid: a light graph (few instructions per byte moved) runs one pass of blocks over the
  // elements; a heavy one a grid of resident blocks looping over them, one vector per binding
  // per step (fewer registers, more warps to hide the arithmetic), so that each thread's set-up
  // (launch values, divisors) is paid once. Measured on H200 (2026-11-26, 8192x8192 chains):
  // one pass gave f32 N=1/4/11 96.9/96.8/96.1 % of copy and bf16 N=1/4 93.3/93.5 % against
  // 88.7/88.4/85.1 and 84.8/84.5 % for resident blocks; resident blocks gave bf16 N=11/16
  // 79.6/55.2 % against 72.8/53.9 % for one pass (later, 11:56Z: f32 N=16 92.5 % against
  // 90.5 %, bf16 N=11 86.1 against 78.1 %). Where one pass stops losing depends on the device's
  // balance of issue rate and bandwidth: the same chains on an H100 (16:21Z, two passes each)
  // gave f32 N=16 99.9 % in one pass against 88.9-89.2 % resident, bf16 N=11 92.7 against
  // 85.4 %, and bf16 N=16 76.0 against 87.8 %. In element_cost units per byte, f32 N=16 is
  // 4.1, bf16 N=11 5.25, bf16 N=16 8.25; the H100 issues about 10 instructions per byte, the
  // H200 about 6.8. Resident blocks from 0.56 of the device's figure fit all six (H100 5.6,
  // H200 3.8); with the figure unknown, 4.
  if (!l.image && l.n_inputs + l.n_outputs > 0) {
    size_t bytes = 0;
    for (int32_t b : l.element_bytes) bytes += static_cast<size_t>(b);
    const double heavy = balance.issue_per_byte > 0 ? 0.56 * balance.issue_per_byte : 4.0;
    l.persistent = element_cost(g) >= heavy * static_cast<double>(std::max<size_t>(bytes, 1));
    if (l.persistent) l.unroll = 1;
  }
  const size_t bindings = l.element_bytes.size();
  if (l.image) {
    l.item_slots = kImageHeaderSlots + 7 * static_cast<size_t>(l.n_inputs) +
                   4 * static_cast<size_t>(l.n_outputs);
  } else {
    l.item_slots = 2 + static_cast<size_t>(l.shape_slots) + bindings * (1 + l.shape_slots);
  }
  l.header_slots = l.n_items_slot() + 2;
  KF_REQUIRE_ARG(l.header_slots * 8 <= kMaxParamBytes,
                 "the graph has %d launch values: its parameter block (%zu bytes) exceeds the "
                 "kernel parameter limit of %zu bytes",
                 l.n_values, l.header_slots * 8, kMaxParamBytes);
  const size_t inline_bytes = (l.header_slots + l.item_slots * l.capacity) * 8;
  l.inline_items = inline_bytes <= kMaxParamBytes;
  l.param_bytes = l.inline_items ? inline_bytes : l.header_slots * 8;
  if (l.image && !l.inline_items) {
    // out_step[O], common, crops[N][4] (two slots each).
    const size_t compact_bytes = (l.crops_slot() + 2 * static_cast<size_t>(l.capacity)) * 8;
    if (compact_bytes <= kMaxParamBytes) {
      l.compact = true;
      l.param_bytes = compact_bytes;
    }
  }
  return l;
}

void encode_item(const ParamLayout& l, const Item& item, int64_t* dst) {
  int64_t* s = dst;
  if (l.image) {
    *s++ = item.shape[0];
    *s++ = item.shape[1];
    *s++ = item.crop.x;
    *s++ = item.crop.y;
    *s++ = item.crop.width;
    *s++ = item.crop.height;
    for (const Binding& b : item.inputs) *s++ = pointer_slot(b.data);
    for (const Binding& b : item.inputs)
      for (int d = 0; d < 3; ++d) *s++ = d < b.rank ? b.shape[d] : 1;
    for (const Binding& b : item.inputs)
      for (int d = 0; d < 3; ++d) *s++ = d < b.rank ? b.strides[d] : 0;
    for (const Binding& b : item.outputs) *s++ = pointer_slot(b.data);
    for (const Binding& b : item.outputs)
      for (int d = 0; d < 3; ++d) *s++ = b.strides[d];
    return;
  }
  int64_t numel = 1;
  for (int32_t d = 0; d < l.rank; ++d) numel *= item.shape[d];
  bool all_contiguous = true, all_aligned = true;
  auto check = [&](const Binding& b) {
    all_contiguous = all_contiguous && contiguous(b, l.rank, item.shape);
    all_aligned = all_aligned && reinterpret_cast<uintptr_t>(b.data) % 16 == 0;
  };
  for (const Binding& b : item.inputs) check(b);
  for (const Binding& b : item.outputs) check(b);
  *s++ = numel;
  if (!all_contiguous) {
    *s++ = numel <= INT32_MAX ? kStrided32 : kStrided;
  } else {
    *s++ = all_aligned && l.vector_elements > 1 ? kVector : kContiguous;
  }
  for (int32_t d = 0; d < l.shape_slots; ++d) *s++ = d < l.rank ? item.shape[d] : 1;
  for (const Binding& b : item.inputs) *s++ = pointer_slot(b.data);
  for (const Binding& b : item.outputs) *s++ = pointer_slot(b.data);
  auto strides = [&](const Binding& b) {
    for (int32_t d = 0; d < l.shape_slots; ++d) *s++ = d < l.rank ? b.strides[d] : 0;
  };
  for (const Binding& b : item.inputs) strides(b);
  for (const Binding& b : item.outputs) strides(b);
}

void encode_uniform_item(const ParamLayout& l, const int64_t* item0, const kf_rect_t& crop,
                         int64_t index, const std::vector<int64_t>& output_steps, int64_t* dst) {
  std::memcpy(dst, item0, l.item_bytes());
  if (!l.image) return;
  dst[2] = crop.x;
  dst[3] = crop.y;
  dst[4] = crop.width;
  dst[5] = crop.height;
  int64_t* out_data = dst + kImageHeaderSlots + 7 * static_cast<size_t>(l.n_inputs);
  for (size_t o = 0; o < output_steps.size(); ++o) out_data[o] += index * output_steps[o];
}

}  // namespace fusion
}  // namespace kf
