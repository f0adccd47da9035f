// The graph handle: a Graph under construction in a context. The kf_graph_* builder entries
// (graph_builder.cpp) validate every call, so the Graph it holds is always well formed.
#pragma once

#include <memory>
#include <mutex>

#include "core/fusion/graph.hpp"
#include "kernel_fusion/graph.h"
#include "kernel_fusion/types.h"

struct kf_graph_t {
  kf_context_t* ctx = nullptr;
  kf::fusion::Graph graph;  // builder calls change it only through graph_of() (graph_builder.cpp)

  // What the last compiles of the graph in its current state froze (null until the first
  // compile, and again after each builder call): later compiles of the unchanged graph, a cache
  // hit's common case, share them instead of copying the graph and rebuilding its key. Compiles
  // may run concurrently (they only read `graph`), hence the mutex.
  mutable std::mutex frozen_mutex;
  mutable std::shared_ptr<const kf::fusion::FrozenGraph> frozen;
  mutable std::shared_ptr<const kf::fusion::StructureKey> key;  // of the last capacity compiled
};

namespace kf {
namespace fusion {

// Throws INVALID_HANDLE unless g is a live graph; returns it.
kf_graph_t* checked_graph(const kf_graph_t* g, const char* param_name);

// Throws INVALID_ARGUMENT unless g has at least one output (compile, get_source).
void require_outputs(const Graph& g);

// The frozen graph of g's current state and its structure key for options' capacity, made on
// the first request after a builder call (or a change of capacity) and shared after that.
void freeze(const kf_graph_t* g, const kf_compile_options_t& options,
            std::shared_ptr<const FrozenGraph>* frozen, std::shared_ptr<const StructureKey>* key);

}  // namespace fusion
}  // namespace kf
