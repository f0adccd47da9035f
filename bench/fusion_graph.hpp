// kf-bench's fusion cases build graphs with the library's own C++ wrapper (kernel_fusion.hpp:
// kernel_fusion::Graph and FusedKernel, which throw kernel_fusion::Error, a std::runtime_error
// like kf_bench::Failure); these are the few helpers the wrapper does not have.
#pragma once

#include <cstdint>
#include <vector>

#include "bench/handles.hpp"
#include "kernel_fusion/kernel_fusion.hpp"

namespace kf_bench {

using FusedKernel = kernel_fusion::FusedKernel;
using Graph = kernel_fusion::Graph;

// An empty graph in `ctx` (the wrapper's constructor takes its own Context class).
inline Graph new_graph(kf_context_t* ctx) {
  kf_graph_t* handle = nullptr;
  check(kf_graph_create(ctx, &handle), "kf_graph_create");
  return Graph(handle);
}

inline const char* origin_name(kf_kernel_origin_t origin) {
  switch (origin) {
    case KF_KERNEL_COMPILED: return "compiled";
    case KF_KERNEL_MEMORY_CACHE: return "memory cache";
    case KF_KERNEL_DISK_CACHE: return "disk cache";
  }
  return "?";
}

// Where a compiled kernel came from (kf_fused_kernel_get_info).
inline kf_kernel_origin_t kernel_origin(const kf_fused_kernel_t* kernel) {
  kf_fused_kernel_info_t info{};
  info.struct_size = sizeof info;
  check(kf_fused_kernel_get_info(kernel, &info), "kf_fused_kernel_get_info");
  return info.origin;
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
