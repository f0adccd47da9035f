// The compiled-kernel handle: the frozen graph it was compiled from, the options, the backend
// program (shared with the context's kernel cache) and what kf_fused_kernel_get_info
// reports. Immutable after kf_graph_compile() except for the lazily generated source text.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "core/fusion/graph.hpp"
#include "core/fusion/program.hpp"
#include "kernel_fusion/graph.h"

struct kf_fused_kernel_t {
  kf_context_t* ctx = nullptr;
  // The graph as compiled, with its launch-value rules (shared with the graph handle and the
  // other kernels compiled from the same graph state): later builder calls do not reach it.
  std::shared_ptr<const kf::fusion::FrozenGraph> frozen;
  kf_compile_options_t options{};
  std::shared_ptr<const kf::fusion::Program> program;
  kf_kernel_origin_t origin = KF_KERNEL_COMPILED;
  double compile_ms = 0.0;
  uint64_t structure_hash = 0;

  const kf::fusion::Graph& graph() const { return frozen->graph; }

  // The generated CUDA source, made on first request (CPU kernels never need it; a CUDA compile
  // that hits the in-memory cache skips generation).
  mutable std::once_flag source_once;
  mutable std::string source;
};
