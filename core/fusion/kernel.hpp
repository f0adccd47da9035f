// The compiled-kernel handle: a frozen copy of the graph it was compiled from, the options, the
// backend program (shared with the context's kernel cache) and what kf_fused_kernel_get_info
// reports. Immutable after kf_graph_compile() except for the lazily generated source text.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/fusion/graph.hpp"
#include "core/fusion/program.hpp"
#include "kernel_fusion/graph.h"

struct kf_fused_kernel_t {
  kf_context_t* ctx = nullptr;
  kf::fusion::Graph graph;  // frozen: later builder calls on the kf_graph_t do not reach it
  kf_compile_options_t options{};
  std::shared_ptr<const kf::fusion::Program> program;
  kf_kernel_origin_t origin = KF_KERNEL_COMPILED;
  double compile_ms = 0.0;
  uint64_t structure_hash = 0;

  // Derived once at compile time for launch validation.
  std::vector<kf::fusion::ValueRule> value_rules;  // per slot of graph.values
  bool crops = false;                              // some read crops: launches give rectangles

  // The generated CUDA source, made on first request (CPU kernels never need it; a CUDA compile
  // that hits the in-memory cache skips generation).
  mutable std::once_flag source_once;
  mutable std::string source;
};
