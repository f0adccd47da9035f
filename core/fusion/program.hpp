// What a compiled fused kernel runs: a resolved launch (LaunchPlan, built and validated by the C
// entry from kf_launch_args_t) and the backend-neutral Program interface the CPU executor and the
// CUDA module both implement. Backends trust the plan: shapes, dtypes, devices and overlaps were
// checked at the C entry.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/fusion/graph.hpp"
#include "kernel_fusion/graph.h"
#include "kernel_fusion/types.h"

namespace kf {
namespace fusion {

// One tensor as the kernel addresses it.
struct Binding {
  void* data = nullptr;  // first element (batched outputs: already offset to the item)
  int32_t rank = 0;
  int64_t shape[KF_MAX_DIMS] = {};
  int64_t strides[KF_MAX_DIMS] = {};  // in elements; 0 on broadcast dimensions
};

struct Item {
  // Tensor graphs: every input aligned to the item's iteration rank (= the graph's largest
  // declared input rank), strides 0 where it broadcasts. Image graphs: an image input is
  // [H, W, C]; an NV12 input is [H * 3 / 2, W].
  std::vector<Binding> inputs;
  // Tensor graphs: the iteration shape. Image graphs: always rank 3 indexed (y, x, c) whatever
  // the layout: planar and batched outputs are folded into data and strides here.
  std::vector<Binding> outputs;
  // Tensor graphs: the iteration shape (rank, extents). Image graphs: rank 2, [H, W] of the
  // output.
  int32_t rank = 0;
  int64_t shape[KF_MAX_DIMS] = {};
  // Image graphs: the item's crop rectangle (else the whole first image). Cropping reads sample
  // it; a read without a crop samples its own whole image (both backends, image.hpp).
  kf_rect_t crop = {0, 0, 0, 0};
};

struct LaunchPlan {
  std::vector<Item> items;     // 1..max_items (a uniform plan: item 0 only)
  std::vector<double> values;  // Graph::values with this launch's overrides applied
  // Uniform image launches (every item binds the tensors item 0 binds; every output batched):
  // uniform_items > 0 items, of which `items` holds item 0 alone. Item i is item 0 with crop
  // crops[i] (crops null: item 0's crop) and output o's data advanced by i * output_steps[o]
  // bytes. The C entry builds this instead of uniform_items copies of one item.
  int32_t uniform_items = 0;
  const kf_rect_t* crops = nullptr;   // the launch's rectangles, valid during launch()
  std::vector<int64_t> output_steps;  // bytes, per output
};

// Item i of a plan (a uniform plan's item i written into *scratch, which is returned).
const Item& plan_item(const LaunchPlan& plan, size_t i, Item* scratch);

// The number of items of a plan.
inline size_t plan_size(const LaunchPlan& plan) {
  return plan.uniform_items > 0 ? static_cast<size_t>(plan.uniform_items) : plan.items.size();
}

// A plan with every item written out (a uniform plan expanded; any other copied).
LaunchPlan expanded(const LaunchPlan& plan);

// A compiled graph. Immutable; launch() may run concurrently from several threads.
class Program {
 public:
  virtual ~Program() = default;
  // Enqueues the plan on s (never NULL here: the entry resolves the default stream).
  virtual void launch(kf_context_t* ctx, const LaunchPlan& plan, kf_stream_t* s) const = 0;
};

// The CPU executor of g (core/fusion/cpu/). Builds an interpreter program; no code generation.
std::shared_ptr<const Program> make_cpu_program(const Graph& g,
                                                const kf_compile_options_t& options);

// What the layout of a tensor graph takes from the device it runs on: the instructions its SMs
// issue (per thread, at peak clock) for each byte its memory moves at peak bandwidth. Zero when
// unknown (CPU contexts, kf_graph_compile_for_arch() without a CUDA context).
struct DeviceBalance {
  double issue_per_byte = 0;
};

// CUDA C++ source for g (core/fusion/codegen.cpp) as laid out for a device of that balance;
// available in every build.
std::string generate_cuda_source(const Graph& g, const kf_compile_options_t& options,
                                 const DeviceBalance& balance);

}  // namespace fusion
}  // namespace kf
