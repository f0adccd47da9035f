// The graph handle: a Graph under construction in a context. The kf_graph_* builder entries
// (graph_builder.cpp) validate every call, so the Graph it holds is always well formed.
#pragma once

#include "core/fusion/graph.hpp"
#include "kernel_fusion/graph.h"
#include "kernel_fusion/types.h"

struct kf_graph_t {
  kf_context_t* ctx = nullptr;
  kf::fusion::Graph graph;
};

namespace kf {
namespace fusion {

// Throws INVALID_HANDLE unless g is a live graph; returns it.
kf_graph_t* checked_graph(const kf_graph_t* g, const char* param_name);

// Throws INVALID_ARGUMENT unless g has at least one output (compile, get_source).
void require_outputs(const Graph& g);

}  // namespace fusion
}  // namespace kf
