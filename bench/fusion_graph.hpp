// A thin C++ layer over the graph builder of graph.h for kf-bench's fusion cases: every call is
// checked (a failure throws Failure with the library's message) and the handles are owned.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/handles.hpp"

namespace kf_bench {

using FusedKernel = Handle<kf_fused_kernel_t, kf_fused_kernel_destroy>;

class GraphBuilder {
 public:
  explicit GraphBuilder(kf_context_t* ctx) {
    check(kf_graph_create(ctx, &graph_), "kf_graph_create");
  }
  ~GraphBuilder() { kf_graph_destroy(graph_); }
  GraphBuilder(const GraphBuilder&) = delete;
  GraphBuilder& operator=(const GraphBuilder&) = delete;

  kf_graph_t* get() const { return graph_; }

  int32_t tensor_input(kf_dtype_t dtype, int32_t rank) {
    kf_graph_input_desc_t desc = KF_GRAPH_INPUT_DESC_INIT;
    desc.dtype = dtype;
    desc.rank = rank;
    return node(kf_graph_input(graph_, &desc, &last_), "kf_graph_input");
  }
  int32_t image_input(kf_dtype_t dtype, int32_t channels) {
    kf_graph_input_desc_t desc = KF_GRAPH_INPUT_DESC_INIT;
    desc.kind = KF_INPUT_IMAGE;
    desc.dtype = dtype;
    desc.rank = 3;
    desc.channels = channels;
    return node(kf_graph_input(graph_, &desc, &last_), "kf_graph_input (image)");
  }
  int32_t scalar(double value) {
    return node(kf_graph_scalar(graph_, value, &last_), "kf_graph_scalar");
  }
  int32_t constant(const std::vector<double>& values) {
    return node(
        kf_graph_constant(graph_, static_cast<int32_t>(values.size()), values.data(), &last_),
        "kf_graph_constant");
  }
  int32_t unary(kf_unary_op_t op, int32_t x) {
    return node(kf_graph_unary(graph_, op, x, &last_), "kf_graph_unary");
  }
  int32_t activation(kf_activation_t act, int32_t x) {
    return node(kf_graph_activation(graph_, act, x, &last_), "kf_graph_activation");
  }
  int32_t binary(kf_binary_op_t op, int32_t a, int32_t b) {
    return node(kf_graph_binary(graph_, op, a, b, &last_), "kf_graph_binary");
  }
  int32_t clamp(int32_t x, int32_t lo, int32_t hi) {
    return node(kf_graph_clamp(graph_, x, lo, hi, &last_), "kf_graph_clamp");
  }
  int32_t where(int32_t cond, int32_t a, int32_t b) {
    return node(kf_graph_where(graph_, cond, a, b, &last_), "kf_graph_where");
  }
  int32_t cast(int32_t x, kf_dtype_t dtype, kf_cast_mode_t mode = KF_CAST_WRAP) {
    return node(kf_graph_cast(graph_, x, dtype, mode, &last_), "kf_graph_cast");
  }
  int32_t read_image(int32_t image, const kf_image_read_desc_t& desc) {
    return node(kf_graph_read_image(graph_, image, &desc, &last_), "kf_graph_read_image");
  }
  int32_t normalize(int32_t x, double scale, const std::vector<double>& mean,
                    const std::vector<double>& std) {
    return node(kf_graph_normalize(graph_, x, scale, mean.data(), std.data(), &last_),
                "kf_graph_normalize");
  }
  void output(int32_t x, kf_output_layout_t layout = KF_OUTPUT_AS_IS, bool batched = false) {
    kf_graph_output_desc_t desc = KF_GRAPH_OUTPUT_DESC_INIT;
    desc.layout = layout;
    desc.batched = batched ? 1 : 0;
    check(kf_graph_output(graph_, x, &desc, nullptr), "kf_graph_output");
  }
  FusedKernel compile(int32_t max_items = 1, uint32_t flags = 0) const {
    kf_compile_options_t options = KF_COMPILE_OPTIONS_INIT;
    options.max_items = max_items;
    options.flags = flags;
    FusedKernel kernel;
    check(kf_graph_compile(graph_, &options, kernel.out()), "kf_graph_compile");
    return kernel;
  }

 private:
  int32_t node(kf_result_t r, const char* what) {
    check(r, what);
    return last_;
  }

  kf_graph_t* graph_ = nullptr;
  int32_t last_ = -1;
};

// Where a compiled kernel came from (kf_fused_kernel_get_info).
inline kf_kernel_origin_t kernel_origin(const kf_fused_kernel_t* kernel) {
  kf_fused_kernel_info_t info{};
  info.struct_size = sizeof info;
  check(kf_fused_kernel_get_info(kernel, &info), "kf_fused_kernel_get_info");
  return info.origin;
}

inline const char* origin_name(kf_kernel_origin_t origin) {
  switch (origin) {
    case KF_KERNEL_COMPILED: return "compiled";
    case KF_KERNEL_MEMORY_CACHE: return "memory cache";
    case KF_KERNEL_DISK_CACHE: return "disk cache";
  }
  return "?";
}

// One launch of `kernel`: `inputs` and `outputs` item-major, `crops` NULL or one per item.
inline void launch(const kf_fused_kernel_t* kernel, int32_t n_items,
                   const std::vector<const kf_tensor_t*>& inputs,
                   const std::vector<kf_tensor_t*>& outputs, const kf_rect_t* crops,
                   kf_stream_t* stream) {
  kf_launch_args_t args = KF_LAUNCH_ARGS_INIT;
  args.n_items = n_items;
  args.inputs = inputs.data();
  args.outputs = outputs.data();
  args.crops = crops;
  check(kf_fused_kernel_launch(kernel, &args, stream), "kf_fused_kernel_launch");
}

}  // namespace kf_bench
