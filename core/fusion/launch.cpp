// kf_fused_kernel_launch: validates a launch against the kernel's frozen graph and resolves it
// into a LaunchPlan (bindings per item, values with overrides), which the backend program runs
// without further checks.
#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/fusion/graph.hpp"
#include "core/fusion/kernel.hpp"
#include "core/fusion/program.hpp"
#include "core/runtime/context.hpp"
#include "core/runtime/cuda/cuda_api.hpp"
#include "core/runtime/cuda/graph_hold.hpp"
#include "core/runtime/error.hpp"
#include "core/runtime/handle.hpp"
#include "core/runtime/tensor.hpp"
#include "kernel_fusion/graph.h"

namespace kf {
namespace fusion {
namespace {

// A tensor of the launch and where it was bound, for messages and the overlap check.
struct Use {
  const kf_tensor_t* tensor;
  bool output;
  int32_t item;
  int32_t index;  // input or output position
};

std::string where_bound(const Use& u) {
  return format("%s %d of item %d", u.output ? "output" : "input", u.index, u.item);
}

void check_handle_of(const kf_tensor_t* t, kf_context_t* ctx, bool output, const char* name) {
  if (output) {
    checked_output(const_cast<kf_tensor_t*>(t), ctx, name);
  } else {
    checked_tensor(t, ctx, name);
  }
}

// Checks a bound tensor's handle, context, dtype and alignment; messages name the binding.
// `slot` is its index in args->inputs or args->outputs.
void bound_tensor(const kf_tensor_t* t, kf_context_t* ctx, const Use& use, kf_dtype_t dtype,
                  size_t slot) {
  try {
    check_handle_of(t, ctx, use.output, "tensor");
  } catch (const Error&) {
    // Only now is the name worth formatting: the check runs again to say it with the name.
    const std::string name = format("args->%s[%zu]", use.output ? "outputs" : "inputs", slot);
    try {
      check_handle_of(t, ctx, use.output, name.c_str());
    } catch (const Error& e) {
      throw Error(e.code(), std::string(e.what()) + " (" + where_bound(use) + ")");
    }
    throw;
  }
  KF_REQUIRE(t->desc.dtype == dtype, KF_ERROR_DTYPE_MISMATCH,
             "%s is a %s tensor, but the graph declares %s", where_bound(use).c_str(),
             dtype_name(t->desc.dtype), dtype_name(dtype));
  // Borrowed memory can start anywhere; no kernel can load an element that straddles its
  // natural alignment.
  KF_REQUIRE_ARG(reinterpret_cast<uintptr_t>(t->data) % dtype_size(dtype) == 0,
                 "%s starts at %p, which is not aligned to its %zu-byte elements",
                 where_bound(use).c_str(), t->data, dtype_size(dtype));
}

// Dimensions past a binding's rank read as zero, as in a fresh Binding (bindings are reused).
void clear_tail(Binding* b) {
  for (int32_t d = b->rank; d < KF_MAX_DIMS; ++d) b->shape[d] = b->strides[d] = 0;
}

void bind_as_is(const kf_tensor_t* t, Binding* b) {
  b->data = t->data;
  b->rank = t->desc.ndim;
  for (int32_t d = 0; d < b->rank; ++d) {
    b->shape[d] = t->desc.shape[d];
    b->strides[d] = t->desc.strides[d];
  }
  clear_tail(b);
}

// Tensor graphs: the NumPy broadcast of the item's inputs over rank r, every input binding
// aligned to it (strides 0 where broadcast), outputs of exactly that shape. The item's binding
// vectors are already sized; every binding is overwritten in place.
void bind_tensor_item(const std::vector<Use>& inputs, const std::vector<Use>& outputs, int32_t rank,
                      Item* item) {
  item->rank = rank;
  std::fill(item->shape, item->shape + rank, int64_t{1});
  kf_tensor_desc_t seen{};  // the broadcast shape so far, for messages
  seen.ndim = rank;
  for (const Use& u : inputs) {
    const kf_tensor_desc_t& d = u.tensor->desc;
    const int32_t lead = rank - d.ndim;
    for (int32_t i = 0; i < d.ndim; ++i) {
      int64_t& extent = item->shape[lead + i];
      if (d.shape[i] == extent || d.shape[i] == 1) continue;
      KF_REQUIRE(extent == 1, KF_ERROR_SHAPE_MISMATCH,
                 "%s has shape %s, which does not broadcast with %s (the inputs before it)",
                 where_bound(u).c_str(), shape_string(d).c_str(), shape_string(seen).c_str());
      extent = d.shape[i];
    }
    std::copy(item->shape, item->shape + rank, seen.shape);
  }
  for (size_t j = 0; j < inputs.size(); ++j) {
    const kf_tensor_desc_t& d = inputs[j].tensor->desc;
    const int32_t lead = rank - d.ndim;
    Binding& b = item->inputs[j];
    b.data = inputs[j].tensor->data;
    b.rank = rank;
    for (int32_t i = 0; i < rank; ++i) {
      b.shape[i] = item->shape[i];
      b.strides[i] = i < lead || d.shape[i - lead] == 1 ? 0 : d.strides[i - lead];
    }
    clear_tail(&b);
  }
  for (size_t j = 0; j < outputs.size(); ++j) {
    const Use& u = outputs[j];
    const kf_tensor_desc_t& d = u.tensor->desc;
    bool same = d.ndim == rank;
    for (int32_t i = 0; same && i < rank; ++i) same = d.shape[i] == item->shape[i];
    KF_REQUIRE(same, KF_ERROR_SHAPE_MISMATCH,
               "%s has shape %s, but the broadcast shape of the item's inputs is %s",
               where_bound(u).c_str(), shape_string(d).c_str(), shape_string(seen).c_str());
    bind_as_is(u.tensor, &item->outputs[j]);
  }
}

// The longest image side (rows or columns of an image, a frame's luma or an output) a launch
// takes. Image kernels hold columns in 32-bit ints: a column plus the grid's stride (about the
// widest output) must stay below 2^31.
constexpr int64_t kMaxImageSide = int64_t{1} << 29;

void require_image_sides(const Use& u, const kf_tensor_desc_t& d, int64_t h, int64_t w) {
  KF_REQUIRE(h <= kMaxImageSide && w <= kMaxImageSide, KF_ERROR_NOT_SUPPORTED,
             "%s has shape %s: images and image outputs are limited to %" PRId64
             " (2^29) rows and columns",
             where_bound(u).c_str(), shape_string(d).c_str(), kMaxImageSide);
}

// Image graphs: [H, W, C] images and [H * 3 / 2, W] NV12 frames as they are; outputs folded to
// (y, x, c) whatever their layout, a batched one offset to its item. As bind_tensor_item, in
// place.
void bind_image_item(const Graph& g, const std::vector<Use>& inputs,
                     const std::vector<Use>& outputs, int32_t item_index, int32_t n_items,
                     Item* item) {
  for (size_t j = 0; j < inputs.size(); ++j) {
    const Use& u = inputs[j];
    const Node& n = g.nodes[static_cast<size_t>(g.inputs[static_cast<size_t>(u.index)])];
    const kf_tensor_desc_t& d = u.tensor->desc;
    if (n.input.kind == KF_INPUT_IMAGE) {
      KF_REQUIRE(d.ndim == 3 && d.shape[2] == n.channels, KF_ERROR_SHAPE_MISMATCH,
                 "%s has shape %s, but the graph declares an image [H, W, %d]",
                 where_bound(u).c_str(), shape_string(d).c_str(), n.channels);
    } else {
      // rows = H * 3 / 2 with H even is exactly: rows a multiple of 3.
      KF_REQUIRE(d.ndim == 2 && d.shape[0] % 3 == 0 && d.shape[1] % 2 == 0, KF_ERROR_SHAPE_MISMATCH,
                 "%s has shape %s, but an NV12 frame is [H * 3 / 2, W] with H and W even",
                 where_bound(u).c_str(), shape_string(d).c_str());
    }
    // Replicate and reflect borders read the image's own pixels; an empty image has none.
    KF_REQUIRE(d.shape[0] > 0 && d.shape[1] > 0, KF_ERROR_SHAPE_MISMATCH,
               "%s has shape %s: an image read needs at least one pixel", where_bound(u).c_str(),
               shape_string(d).c_str());
    require_image_sides(u, d, d.shape[0], d.shape[1]);
    bind_as_is(u.tensor, &item->inputs[j]);
  }
  item->rank = 2;
  for (size_t j = 0; j < outputs.size(); ++j) {
    const Use& u = outputs[j];
    const Output& o = g.outputs[static_cast<size_t>(u.index)];
    const int32_t channels = g.nodes[static_cast<size_t>(o.node)].channels;
    const kf_tensor_desc_t& d = u.tensor->desc;
    const int32_t lead = o.batched ? 1 : 0;
    const bool planar = o.layout == KF_OUTPUT_PLANAR;
    const int32_t y = lead + (planar ? 1 : 0), x = y + 1, c = planar ? lead : lead + 2;
    const char* expected = o.batched ? (planar ? "[N, C, H, W]" : "[N, H, W, C]")
                                     : (planar ? "[C, H, W]" : "[H, W, C]");
    KF_REQUIRE(d.ndim == 3 + lead && d.shape[c] == channels, KF_ERROR_SHAPE_MISMATCH,
               "%s has shape %s, but the graph writes it as %s with C = %d", where_bound(u).c_str(),
               shape_string(d).c_str(), expected, channels);
    KF_REQUIRE(!o.batched || d.shape[0] >= n_items, KF_ERROR_SHAPE_MISMATCH,
               "%s has shape %s: a batched output needs N >= n_items (%d)", where_bound(u).c_str(),
               shape_string(d).c_str(), n_items);
    require_image_sides(u, d, d.shape[y], d.shape[x]);
    if (j == 0) {
      item->shape[0] = d.shape[y];
      item->shape[1] = d.shape[x];
    }
    KF_REQUIRE(d.shape[y] == item->shape[0] && d.shape[x] == item->shape[1],
               KF_ERROR_SHAPE_MISMATCH,
               "%s is %" PRId64 " x %" PRId64 " (H x W), but output 0 of the item is %" PRId64
               " x %" PRId64 ": an item's outputs share one size",
               where_bound(u).c_str(), d.shape[y], d.shape[x], item->shape[0], item->shape[1]);
    Binding& b = item->outputs[j];
    b.data =
        static_cast<char*>(u.tensor->data) +
        (o.batched ? item_index * d.strides[0] * static_cast<int64_t>(dtype_size(d.dtype)) : 0);
    b.rank = 3;
    b.shape[0] = d.shape[y];
    b.shape[1] = d.shape[x];
    b.shape[2] = channels;
    b.strides[0] = d.strides[y];
    b.strides[1] = d.strides[x];
    b.strides[2] = d.strides[c];
    clear_tail(&b);
  }
}

// The whole first image of the item, as a rectangle (no read crops).
kf_rect_t whole_image(const Graph& g, const Item& item) {
  const Node& n = g.nodes[static_cast<size_t>(g.inputs.front())];
  const Binding& b = item.inputs.front();
  const int64_t h = n.input.kind == KF_INPUT_NV12 ? b.shape[0] * 2 / 3 : b.shape[0];
  return kf_rect_t{0, 0, static_cast<int32_t>(std::min<int64_t>(b.shape[1], INT32_MAX)),
                   static_cast<int32_t>(std::min<int64_t>(h, INT32_MAX))};
}

// A bound tensor's bytes, for the overlap check.
struct ByteRange {
  uintptr_t first, end;
  size_t use;  // index into the uses checked
};

// Outputs must not overlap inputs or each other (inputs may share memory). A sweep over byte
// ranges sorted by start; the pair is named by a plain search on the (rare) failure. `ranges`
// is the caller's reused buffer.
void check_overlaps(const std::vector<Use>& uses, std::vector<ByteRange>& ranges) {
  ranges.clear();
  for (size_t i = 0; i < uses.size(); ++i) {
    ByteRange r{0, 0, i};
    byte_range(uses[i].tensor, &r.first, &r.end);
    if (r.first < r.end) ranges.push_back(r);
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const ByteRange& a, const ByteRange& b) { return a.first < b.first; });
  uintptr_t output_end = 0, input_end = 0;
  bool clash = false;
  for (const ByteRange& r : ranges) {
    const bool output = uses[r.use].output;
    if (r.first < output_end || (output && r.first < input_end)) {
      clash = true;
      break;
    }
    (output ? output_end : input_end) = std::max(output ? output_end : input_end, r.end);
  }
  if (!clash) return;
  for (size_t i = 0; i < uses.size(); ++i) {
    for (size_t j = i + 1; j < uses.size(); ++j) {
      const Use& a = uses[i];
      const Use& b = uses[j];
      if (!(a.output || b.output) || !may_overlap(a.tensor, b.tensor)) continue;
      const Use& out = a.output ? a : b;
      const Use& other = a.output ? b : a;
      fail(KF_ERROR_INVALID_ARGUMENT,
           "%s overlaps %s%s: outputs must not share memory with inputs or other outputs",
           where_bound(out).c_str(), where_bound(other).c_str(),
           a.tensor == b.tensor ? " (the same tensor)" : "");
    }
  }
}

// Whether every item of an image launch binds item 0's tensors and every output is batched (the
// outputs' shapes then hold for every item: a batched output is checked against n_items).
bool uniform_launch(const Graph& g, const kf_launch_args_t* args, size_t n_in, size_t n_out) {
  if (!g.image || args->n_items < 2) return false;
  for (const Output& o : g.outputs)
    if (!o.batched) return false;
  const size_t n = static_cast<size_t>(args->n_items);
  for (size_t i = 1; i < n; ++i) {
    for (size_t j = 0; j < n_in; ++j)
      if (args->inputs[i * n_in + j] != args->inputs[j]) return false;
    for (size_t j = 0; j < n_out; ++j)
      if (args->outputs[i * n_out + j] != args->outputs[j]) return false;
  }
  return true;
}

// What a launch builds, kept per thread so that a steady stream of launches allocates nothing:
// programs consume the plan before launch() returns (the CPU executor runs it, the CUDA program
// copies it into its parameter block).
struct Scratch {
  LaunchPlan plan;
  std::vector<Use> uses;          // tensors to validate, overlap-check and prepare
  std::vector<ByteRange> ranges;  // the overlap check's
  std::vector<Use> inputs;        // the current item's
  std::vector<Use> outputs;       // the current item's
};

// Fills s.plan for a launch and s.uses with every tensor bound (a repeated one once).
void make_plan(const kf_fused_kernel_t* k, const kf_launch_args_t* args, Scratch& s) {
  const Graph& g = k->graph();
  KF_REQUIRE_ARG(args != nullptr, "args is NULL");
  KF_REQUIRE_ARG(args->struct_size >= sizeof(kf_launch_args_t),
                 "args->struct_size is %zu; initialise the arguments with KF_LAUNCH_ARGS_INIT "
                 "(sizeof(kf_launch_args_t) is %zu)",
                 args->struct_size, sizeof(kf_launch_args_t));
  require_unknown_tail_zero(args, args->struct_size, sizeof(kf_launch_args_t), "args");
  const int32_t n_items = args->n_items;
  KF_REQUIRE_ARG(n_items >= 1 && n_items <= k->options.max_items,
                 "args->n_items is %d; this kernel runs 1 to %d items per launch (its compile "
                 "options' max_items)",
                 n_items, k->options.max_items);
  const size_t n_in = g.inputs.size();
  const size_t n_out = g.outputs.size();
  KF_REQUIRE_ARG(n_in == 0 || args->inputs != nullptr,
                 "args->inputs is NULL, but the graph has %zu inputs per item", n_in);
  KF_REQUIRE_ARG(args->outputs != nullptr,
                 "args->outputs is NULL, but the graph has %zu outputs per item", n_out);
  if (k->frozen->crops) {
    KF_REQUIRE_ARG(args->crops != nullptr,
                   "args->crops is NULL, but a read of this graph crops: give n_items (%d) "
                   "rectangles",
                   n_items);
    for (int32_t i = 0; i < n_items; ++i) {
      const kf_rect_t& r = args->crops[i];
      KF_REQUIRE_ARG(r.width >= 1 && r.height >= 1,
                     "args->crops[%d] is %d x %d at (%d, %d); a crop is at least 1 x 1", i, r.width,
                     r.height, r.x, r.y);
    }
  } else {
    KF_REQUIRE_ARG(args->crops == nullptr,
                   "args->crops is set, but no read of this graph crops (kf_image_read_desc_t"
                   "::crop); pass NULL");
  }

  LaunchPlan& plan = s.plan;
  plan.values.assign(g.values.begin(), g.values.end());
  KF_REQUIRE_ARG(args->n_values == 0 || args->values != nullptr,
                 "args->values is NULL but args->n_values is %zu", args->n_values);
  for (size_t v = 0; v < args->n_values; ++v) {
    const kf_fused_value_t& o = args->values[v];
    KF_REQUIRE_ARG(o.node >= 0 && static_cast<size_t>(o.node) < g.nodes.size(),
                   "args->values[%zu] names node %d, which does not exist (the graph has %zu "
                   "nodes)",
                   v, o.node, g.nodes.size());
    const Node& n = g.nodes[static_cast<size_t>(o.node)];
    KF_REQUIRE_ARG(o.index >= 0 && o.index < n.value_count,
                   "args->values[%zu] names value %d of node %d, which has %d launch value%s", v,
                   o.index, o.node, n.value_count, n.value_count == 1 ? "" : "s");
    const size_t slot = static_cast<size_t>(n.value_offset + o.index);
    check_value(g, k->frozen->value_rules[slot], o.node, o.index, o.value);
    plan.values[slot] = o.value;
  }

  int32_t rank = 0;  // tensor graphs: the iteration rank
  for (int32_t id : g.inputs) rank = std::max(rank, g.nodes[static_cast<size_t>(id)].input.rank);

  // A tensor bound at the same position as in the previous item (one frame, many crops; one
  // batched output) was checked there: only its first use is validated and overlap-checked.
  std::vector<Use>& uses = s.uses;
  std::vector<Use>& inputs = s.inputs;
  std::vector<Use>& outputs = s.outputs;
  uses.clear();
  inputs.resize(n_in);
  outputs.resize(n_out);
  // A uniform image launch (one frame, many crops, batched outputs: every item binds the tensors
  // of item 0) binds item 0 only: items i > 0 would repeat its bindings and checks exactly, but
  // for the crop (checked above) and the batched outputs' offsets.
  plan.uniform_items = 0;
  plan.crops = nullptr;
  plan.output_steps.clear();
  const int32_t bound_items = uniform_launch(g, args, n_in, n_out) ? 1 : n_items;
  size_t used = 0;  // items of plan.items filled so far (empty items are dropped)
  for (int32_t i = 0; i < bound_items; ++i) {
    for (size_t j = 0; j < n_in; ++j) {
      const Node& n = g.nodes[static_cast<size_t>(g.inputs[j])];
      const Use u{args->inputs[static_cast<size_t>(i) * n_in + j], false, i,
                  static_cast<int32_t>(j)};
      const bool repeated = i > 0 && u.tensor == inputs[j].tensor;
      inputs[j] = u;
      if (repeated) continue;
      bound_tensor(u.tensor, k->ctx, u, n.dtype, static_cast<size_t>(i) * n_in + j);
      KF_REQUIRE(g.image || u.tensor->desc.ndim == n.input.rank, KF_ERROR_SHAPE_MISMATCH,
                 "%s has rank %d (shape %s), but the graph declares rank %d",
                 where_bound(u).c_str(), u.tensor->desc.ndim, shape_string(u.tensor->desc).c_str(),
                 n.input.rank);
      uses.push_back(u);
    }
    for (size_t j = 0; j < n_out; ++j) {
      const Output& o = g.outputs[j];
      const Use u{args->outputs[static_cast<size_t>(i) * n_out + j], true, i,
                  static_cast<int32_t>(j)};
      const bool repeated = i > 0 && u.tensor == outputs[j].tensor;
      outputs[j] = u;
      if (o.batched && i > 0) {
        KF_REQUIRE_ARG(repeated,
                       "%s is not the tensor given for item 0: a batched output is the same "
                       "tensor in every item",
                       where_bound(u).c_str());
        continue;
      }
      if (!repeated) {
        bound_tensor(u.tensor, k->ctx, u, g.nodes[static_cast<size_t>(o.node)].dtype,
                     static_cast<size_t>(i) * n_out + j);
      }
      uses.push_back(u);  // a per-item output repeated is two items writing one tensor
    }
    if (used == plan.items.size()) plan.items.emplace_back();
    Item& item = plan.items[used];
    if (item.inputs.size() != n_in) item.inputs.resize(n_in);
    if (item.outputs.size() != n_out) item.outputs.resize(n_out);
    if (g.image) {
      bind_image_item(g, inputs, outputs, i, n_items, &item);
      item.crop = k->frozen->crops ? args->crops[i] : whole_image(g, item);
    } else {
      bind_tensor_item(inputs, outputs, rank, &item);
      item.crop = kf_rect_t{0, 0, 0, 0};
    }
    int64_t elements = 1;
    for (int32_t d = 0; d < item.rank; ++d) elements *= item.shape[d];
    for (int32_t d = item.rank; d < KF_MAX_DIMS; ++d) item.shape[d] = 0;
    if (elements > 0) ++used;  // an empty item has nothing to write
  }
  plan.items.resize(used);
  if (bound_items < n_items && used == 1) {
    plan.uniform_items = n_items;
    plan.crops = k->frozen->crops ? args->crops : nullptr;
    for (size_t j = 0; j < n_out; ++j) {
      const kf_tensor_desc_t& d = args->outputs[j]->desc;
      plan.output_steps.push_back(d.strides[0] * static_cast<int64_t>(dtype_size(d.dtype)));
    }
  }
  check_overlaps(uses, s.ranges);
}

}  // namespace

const Item& plan_item(const LaunchPlan& plan, size_t i, Item* scratch) {
  if (plan.uniform_items == 0 || i == 0) return plan.items[i];
  *scratch = plan.items[0];
  if (plan.crops != nullptr) scratch->crop = plan.crops[i];
  for (size_t o = 0; o < scratch->outputs.size(); ++o) {
    scratch->outputs[o].data = static_cast<char*>(scratch->outputs[o].data) +
                               static_cast<int64_t>(i) * plan.output_steps[o];
  }
  return *scratch;
}

LaunchPlan expanded(const LaunchPlan& plan) {
  LaunchPlan full;
  full.values = plan.values;
  const size_t n = plan_size(plan);
  full.items.resize(n);
  Item scratch;
  for (size_t i = 0; i < n; ++i) full.items[i] = plan_item(plan, i, &scratch);
  return full;
}

}  // namespace fusion
}  // namespace kf

extern "C" {

kf_result_t kf_fused_kernel_launch(const kf_fused_kernel_t* k, const kf_launch_args_t* args,
                                   kf_stream_t* s) {
  return kf::api_call([&] {
    kf::checked(k, "k");
    kf_context_t* ctx = k->ctx;
    kf_stream_t* stream = kf::resolve_stream(ctx, s, "s");
    thread_local kf::fusion::Scratch scratch;
    kf::fusion::make_plan(k, args, scratch);
    if (scratch.plan.items.empty()) return;  // every item is empty: nothing to write
    kf::activate(ctx);
    for (const kf::fusion::Use& u : scratch.uses) kf::prepare_for_stream(u.tensor, stream);
    k->program->launch(ctx, scratch.plan, stream);
    // A program this kernel alone holds (KF_COMPILE_NO_MEMORY_CACHE) unloads its module when the
    // kernel is destroyed. Launched into a graph being captured, the graph holds it too, so that
    // replays after the kernel's destroy still find the module (cached programs live as long as
    // the context).
    if (ctx->is_cuda() && (k->options.flags & KF_COMPILE_NO_MEMORY_CACHE) != 0 &&
        kf::cuda::capture_id(stream->native) != 0)
      kf::cuda::hold_until_graph_done(stream->native, [program = k->program] {});
  });
}

}  // extern "C"
