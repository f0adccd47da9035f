// The parameter block of a generated kernel: what codegen declares in the CUDA source and what
// the CUDA program fills at every launch, from one description (ParamLayout) so that both sides
// agree; the generated source also static_asserts the sizes computed here.
//
// Every field is 8 bytes (int64, double or pointer; values_f32 packs two floats to a slot), so
// offsets are slot indices times 8 and the host and device layouts cannot differ by padding.
// The block is one __grid_constant__ kernel parameter:
//   struct Params { double values[V]; float values_f32[2 F]; long long n_items; const Item* items;
//                   Item inline_items[N]; }
// values: the graph's launch values (Graph::values with this launch's overrides); values_f32: the
// same rounded to float (F = ceil(V / 2) slots), which the kernel reads where it computes in
// float: a kernel-parameter operand needs no register, nor a conversion that ptxas would
// otherwise repeat inside the kernel's loops. Items are inline (N = the capacity) when the
// whole block fits the 32764-byte kernel-parameter limit; otherwise N = 0 and `items` points to
// a table uploaded to device memory per launch.
//
// Image graphs whose items do not fit inline may still have a compact block, when it fits:
//   struct Params { double values[V]; float values_f32[2 F]; long long n_items;
//                   const Item* items; long long out_step[O]; Item common; int crops[N][4]; }
// A uniform launch (every item binds the same tensors: one frame, many crops, batched outputs;
// LaunchPlan::uniform_items) sets items to null and passes item 0 as `common`, each item's crop
// rectangle (x, y, width, height) in `crops` and each output's byte step from one item's slice to
// the next in out_step: item i is `common` with crops[i] and output o at out_data[o] + i *
// out_step[o]. Any other launch of such a kernel uploads the table and leaves the rest unused.
//
// Tensor graph item (S = max(rank, 1), B = inputs + outputs):
//   numel, mode, shape[S], data[B], strides[B][S]       (mode: ItemMode)
// Image graph item (inputs are [H, W, C] images or [H * 3 / 2, W] NV12 frames; outputs are
// addressed (y, x, c) whatever their layout):
//   out_h, out_w, crop_x, crop_y, crop_w, crop_h,
//   in_data[I], in_shape[I][3], in_strides[I][3], out_data[O], out_strides[O][3]
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/fusion/graph.hpp"
#include "core/fusion/program.hpp"

namespace kf {
namespace fusion {

// Threads per block of every generated kernel (its __launch_bounds__; tensor graphs index
// per-thread shared-memory slots by threadIdx.x).
constexpr int kBlockThreads = 256;

// The kernel-parameter limit of sm_70+ with CUDA 12.1+ (32764), rounded down to 8 bytes.
constexpr size_t kMaxParamBytes = 32760;

// How a tensor item is traversed (chosen per item at launch).
enum ItemMode : int64_t {
  kStrided = 0,     // any strides, broadcasting: coordinates from the linear index
  kContiguous = 1,  // every binding row-major contiguous over the iteration shape
  kVector = 2,      // contiguous, every pointer 16-byte aligned: vector loads and stores
  kStrided32 = 3,   // strided, fewer than 2^31 elements: 32-bit coordinate arithmetic
};

struct ParamLayout {
  bool image = false;
  int32_t rank = 0;         // tensor graphs: the iteration rank
  int32_t shape_slots = 1;  // tensor graphs: max(rank, 1)
  int32_t n_inputs = 0;
  int32_t n_outputs = 0;
  int32_t n_values = 0;         // Graph::values.size()
  int32_t value_slots = 1;      // max(n_values, 1)
  int32_t f32_value_slots = 1;  // max((n_values + 1) / 2, 1): values_f32, two to a slot
  int32_t capacity = 1;         // max_items
  bool inline_items = true;
  bool compact = false;         // image graphs, items not inline: out_step, common, crops (above)
  int32_t vector_elements = 1;  // tensor graphs: elements per thread and step in kVector mode
  std::vector<int32_t> element_bytes;  // per binding: inputs, then outputs
  int32_t unroll = 1;  // tensor graphs: vectors per binding per thread and step in kVector mode
  bool persistent = false;  // tensor graphs: blocks loop (heavy graphs), else one pass
  size_t item_slots = 0;
  size_t header_slots = 0;  // values, values_f32, n_items, items
  size_t param_bytes = 0;   // the whole kernel parameter

  size_t item_bytes() const { return item_slots * 8; }
  // The slot of values_f32[0] and of n_items (items follows).
  size_t f32_values_slot() const { return static_cast<size_t>(value_slots); }
  size_t n_items_slot() const { return f32_values_slot() + static_cast<size_t>(f32_value_slots); }
  // Compact blocks: the slot of out_step[0], of `common` and of crops[0].
  size_t out_step_slot() const { return header_slots; }
  size_t common_slot() const { return header_slots + static_cast<size_t>(n_outputs); }
  size_t crops_slot() const { return common_slot() + item_slots; }
};

// Throws INVALID_ARGUMENT when even the header does not fit the parameter limit.
ParamLayout param_layout(const Graph& g, const kf_compile_options_t& options,
                         const DeviceBalance& balance);

// Encodes one item into item_slots 8-byte slots at dst.
void encode_item(const ParamLayout& layout, const Item& item, int64_t* dst);

// Item `index` of a uniform launch (LaunchPlan::uniform_items), from item 0's encoding: its
// slots with the item's crop and the outputs advanced by index * output_steps[o] bytes.
void encode_uniform_item(const ParamLayout& layout, const int64_t* item0, const kf_rect_t& crop,
                         int64_t index, const std::vector<int64_t>& output_steps, int64_t* dst);

}  // namespace fusion
}  // namespace kf
