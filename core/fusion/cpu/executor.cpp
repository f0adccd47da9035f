// The CPU executor of a fused graph: the same semantics as the generated CUDA kernel, from the
// same functors (core/math/fusion_ops.hpp, image.hpp). A launch is cut into tiles of consecutive
// values of one item (tensor elements in row-major order of the item's shape, or output pixels of
// an image graph); the tiles of every item run on the context's thread pool, and within a tile
// every node is evaluated in graph order over the whole tile into a small per-node buffer
// (kBufferBytes; buffers are reused once a node's last user has run), so intermediates stay in
// cache. Each node dispatches on its dtype and op once per tile, into a templated loop.
#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "core/fusion/cpu/tile.hpp"
#include "core/fusion/program.hpp"
#include "core/runtime/context.hpp"
#include "core/runtime/cpu_clones.hpp"
#include "core/runtime/thread_pool.hpp"

namespace kf {
namespace fusion {
namespace cpu {
namespace {

// Element (i, c) of an operand over a tile: p[i * pixel_stride + c * channel_stride].
template <class T>
struct In {
  const T* p;
  int64_t pixel_stride;
  int64_t channel_stride;
  // Value (i, c) is flat element i * C + c (a value of the node's own channel count).
  bool full(int C) const { return pixel_stride == C && (channel_stride == 1 || C == 1); }
  bool scalar(int C) const { return pixel_stride == 0 && (channel_stride == 0 || C == 1); }
  T at(int64_t i, int c) const { return p[i * pixel_stride + c * channel_stride]; }
};

// The loops over a tile: vectorised, in AVX-512 and AVX2 clones too (no FMA contraction: the
// sources are built with -ffp-contract=off, so every clone computes the same bits).
template <class R, class A, class F>
KF_CPU_CLONES void map1(R* out, int64_t n, const A* a, F f) {
  for (int64_t i = 0; i < n; ++i) out[i] = f(a[i]);
}

template <class R, class A, class B, class F>
KF_CPU_CLONES void map2(R* out, int64_t n, int C, In<A> a, In<B> b, F f) {
  const int64_t m = n * C;
  if (a.full(C) && b.full(C)) {
    for (int64_t i = 0; i < m; ++i) out[i] = f(a.p[i], b.p[i]);
  } else if (a.full(C) && b.scalar(C)) {
    const B y = b.p[0];
    for (int64_t i = 0; i < m; ++i) out[i] = f(a.p[i], y);
  } else if (a.scalar(C) && b.full(C)) {
    const A x = a.p[0];
    for (int64_t i = 0; i < m; ++i) out[i] = f(x, b.p[i]);
  } else {
    for (int64_t i = 0; i < n; ++i)
      for (int c = 0; c < C; ++c) out[i * C + c] = f(a.at(i, c), b.at(i, c));
  }
}

template <class R, class A, class B, class D, class F>
KF_CPU_CLONES void map3(R* out, int64_t n, int C, In<A> a, In<B> b, In<D> d, F f) {
  if ((a.full(C) || a.scalar(C)) && (b.full(C) || b.scalar(C)) && (d.full(C) || d.scalar(C))) {
    const int64_t sa = a.full(C), sb = b.full(C), sd = d.full(C), m = n * C;
    for (int64_t i = 0; i < m; ++i) out[i] = f(a.p[i * sa], b.p[i * sb], d.p[i * sd]);
  } else {
    for (int64_t i = 0; i < n; ++i)
      for (int c = 0; c < C; ++c) out[i * C + c] = f(a.at(i, c), b.at(i, c), d.at(i, c));
  }
}

// n elements of dtype D at data[offset + j * stride] into dst (compute type), and back.
template <int D>
KF_CPU_CLONES void load_run(const void* data, int64_t offset, int64_t stride, int64_t n,
                            math::Compute<D>* dst) {
  const math::Storage<D>* src = static_cast<const math::Storage<D>*>(data) + offset;
  if (stride == 1) {
    for (int64_t j = 0; j < n; ++j) dst[j] = math::load<D>(src, j);
  } else {
    for (int64_t j = 0; j < n; ++j) dst[j] = math::load<D>(src, j * stride);
  }
}
template <int D>
KF_CPU_CLONES void store_run(const math::Compute<D>* src, void* data, int64_t offset,
                             int64_t stride, int64_t n) {
  math::Storage<D>* dst = static_cast<math::Storage<D>*>(data) + offset;
  if (stride == 1) {
    for (int64_t j = 0; j < n; ++j) math::store<D>(dst, j, src[j]);
  } else {
    for (int64_t j = 0; j < n; ++j) math::store<D>(dst, j * stride, src[j]);
  }
}

// One thread's node buffers.
struct Scratch {
  std::vector<uint64_t> memory;  // the slots, 8-byte aligned
  // Per node, where its values of the current tile are: its slot, or (an input read in place)
  // the input's own memory.
  std::vector<void*> values;
  void* slot(int32_t s) { return memory.data() + s * (kBufferBytes / 8); }
};

class Executor final : public Program {
 public:
  Executor(const Graph& g, const kf_compile_options_t&);
  void launch(kf_context_t* ctx, const LaunchPlan& plan, kf_stream_t* s) const override;

 private:
  // A tensor item's walk: its shape with extent-1 dims dropped and mergeable dims merged, and
  // the strides of every binding (inputs, then outputs) on it.
  struct Walk {
    int32_t rank = 1;
    int64_t shape[KF_MAX_DIMS] = {1};
    std::vector<std::array<int64_t, KF_MAX_DIMS>> strides;
    std::vector<void*> data;
  };
  // Runs of one tile along the walk's innermost dim: tile position, length, and the offset of
  // every binding at the run's start (offsets[binding * capacity + run]).
  struct Runs {
    std::vector<int64_t> start, length, offsets;
    int64_t count = 0, capacity = 0;
  };

  Walk make_walk(const Item& item) const;
  void runs_of(const Walk& w, int64_t begin, int64_t count, Runs& runs) const;
  void run_tensor_tile(const Walk& w, const LaunchPlan& plan, int64_t begin, int64_t count,
                       Scratch& scratch, Runs& runs) const;
  void run_image_tile(const Item& item, const LaunchPlan& plan, int64_t begin, int64_t count,
                      Scratch& scratch) const;
  void eval(int32_t id, int64_t count, const double* values, Scratch& scratch) const;
  template <int D>
  In<math::Compute<D>> operand(int32_t arg, const double* values, Scratch& scratch,
                               math::Compute<D>* constant) const;
  void* buffer(int32_t id, Scratch& scratch) const { return scratch.values[id]; }

  Graph g_;
  std::vector<int32_t> slot_;     // node -> buffer slot; -1 for constants and image inputs
  std::vector<bool> first_mark_;  // per output: no earlier output marks the same node
  int32_t slots_ = 0;
  int64_t tile_ = 0;  // values (elements or pixels) per tile
};

Executor::Executor(const Graph& g, const kf_compile_options_t&) : g_(g) {
  const int32_t n = static_cast<int32_t>(g_.nodes.size());
  int32_t channels = 1;
  std::vector<int32_t> last_use(static_cast<size_t>(n), -1);
  for (int32_t i = 0; i < n; ++i) {
    const Node& node = g_.nodes[i];
    channels = std::max(channels, node.channels);
    for (int32_t a = 0; a < node.n_args; ++a) last_use[node.args[a]] = i;
  }
  for (const Output& o : g_.outputs) last_use[o.node] = n;  // stored after every node
  for (size_t o = 0; o < g_.outputs.size(); ++o) {
    bool first = true;
    for (size_t p = 0; p < o; ++p) first = first && g_.outputs[p].node != g_.outputs[o].node;
    first_mark_.push_back(first);
  }
  tile_ = kBufferBytes / (8 * channels);

  // A node takes a free slot before its arguments' slots are released, so that no node reads a
  // buffer it is writing (channel broadcasts and colour conversions are not in-place safe).
  slot_.assign(static_cast<size_t>(n), -1);
  std::vector<int32_t> free_slots;
  for (int32_t i = 0; i < n; ++i) {
    const Node& node = g_.nodes[i];
    const bool buffered = node.kind != NodeKind::constant &&
                          !(node.kind == NodeKind::input && node.input.kind != KF_INPUT_TENSOR);
    if (buffered && last_use[i] >= 0) {
      if (free_slots.empty()) {
        slot_[i] = slots_++;
      } else {
        slot_[i] = free_slots.back();
        free_slots.pop_back();
      }
    }
    for (int32_t a = 0; a < node.n_args; ++a) {
      const int32_t arg = node.args[a];
      bool repeated = false;  // a node may be both arguments of one op
      for (int32_t b = 0; b < a; ++b) repeated |= node.args[b] == arg;
      if (!repeated && last_use[arg] == i && slot_[arg] >= 0) free_slots.push_back(slot_[arg]);
    }
  }
}

// Walk dims of extent 1 are dropped; dims d-1 and d merge when every binding steps over d-1 as
// over shape[d] elements of d.
Executor::Walk Executor::make_walk(const Item& item) const {
  Walk w;
  std::vector<const Binding*> bindings;
  for (const Binding& b : item.inputs) bindings.push_back(&b);
  for (const Binding& b : item.outputs) bindings.push_back(&b);
  w.strides.resize(bindings.size());
  for (const Binding* b : bindings) w.data.push_back(b->data);
  int32_t rank = 0;
  for (int32_t d = 0; d < item.rank; ++d) {
    if (item.shape[d] == 1) continue;
    bool merge = rank > 0;
    for (size_t k = 0; merge && k < bindings.size(); ++k)
      merge = w.strides[k][rank - 1] == bindings[k]->strides[d] * item.shape[d];
    if (merge) {
      w.shape[rank - 1] *= item.shape[d];
      for (size_t k = 0; k < bindings.size(); ++k) w.strides[k][rank - 1] = bindings[k]->strides[d];
    } else {
      w.shape[rank] = item.shape[d];
      for (size_t k = 0; k < bindings.size(); ++k) w.strides[k][rank] = bindings[k]->strides[d];
      ++rank;
    }
  }
  if (rank == 0) {  // a single element
    w.shape[0] = 1;
    for (auto& s : w.strides) s[0] = 0;
    rank = 1;
  }
  w.rank = rank;
  return w;
}

void Executor::runs_of(const Walk& w, int64_t begin, int64_t count, Runs& runs) const {
  const size_t n_bindings = w.strides.size();
  const int32_t inner = w.rank - 1;
  // At most one partial run at each end, the rest whole rows of at least 2 elements.
  const int64_t capacity = count / std::max<int64_t>(1, std::min<int64_t>(2, w.shape[inner])) + 2;
  if (runs.capacity < capacity) {
    runs.capacity = capacity;
    runs.start.resize(static_cast<size_t>(capacity));
    runs.length.resize(static_cast<size_t>(capacity));
    runs.offsets.resize(static_cast<size_t>(capacity) * n_bindings);
  }
  int64_t index[KF_MAX_DIMS];
  int64_t rest = begin;
  for (int32_t d = inner; d >= 0; --d) {
    index[d] = rest % w.shape[d];
    rest /= w.shape[d];
  }
  runs.count = 0;
  for (int64_t t = 0; t < count;) {
    const int64_t length = std::min(w.shape[inner] - index[inner], count - t);
    const int64_t r = runs.count++;
    runs.start[r] = t;
    runs.length[r] = length;
    for (size_t k = 0; k < n_bindings; ++k) {
      int64_t offset = 0;
      for (int32_t d = 0; d <= inner; ++d) offset += index[d] * w.strides[k][d];
      runs.offsets[k * runs.capacity + r] = offset;
    }
    t += length;
    index[inner] += length;
    for (int32_t d = inner; d > 0 && index[d] == w.shape[d]; --d) {
      index[d] = 0;
      ++index[d - 1];
    }
  }
}

template <int D>
In<math::Compute<D>> Executor::operand(int32_t arg, const double* values, Scratch& scratch,
                                       math::Compute<D>* constant) const {
  const Node& a = g_.nodes[arg];
  const int64_t channel_stride = a.channels == 1 ? 0 : 1;
  if (a.kind == NodeKind::constant) {
    for (int32_t c = 0; c < a.channels; ++c)
      constant[c] = math::from_value<D>(values[a.value_offset + c]);
    return {constant, 0, channel_stride};
  }
  return {static_cast<const math::Compute<D>*>(buffer(arg, scratch)), a.channels, channel_stride};
}

void Executor::eval(int32_t id, int64_t count, const double* values, Scratch& scratch) const {
  const Node& node = g_.nodes[id];
  const int C = node.channels;
  void* out = buffer(id, scratch);
  switch (node.kind) {
    case NodeKind::input:
    case NodeKind::constant:
    case NodeKind::read_image: break;  // by the caller
    case NodeKind::unary:
      with_dtype(node.dtype, [&](auto dtype) {
        using T = math::Compute<dtype()>;
        const T* x = static_cast<const T*>(buffer(node.args[0], scratch));
        with_int<0, KF_UNARY_SQUARE>(node.op, [&](auto op) {
          constexpr int O = op(), D = dtype();
          map1(static_cast<T*>(out), count * C, x, [&](T v) { return math::unary<O, D>(v); });
        });
      });
      break;
    case NodeKind::activation:
      with_dtype(node.dtype, [&](auto dtype) {
        using T = math::Compute<dtype()>;
        const T* x = static_cast<const T*>(buffer(node.args[0], scratch));
        with_int<0, KF_ACTIVATION_SIGMOID>(node.op, [&](auto act) {
          constexpr int A = act(), D = dtype();
          map1(static_cast<T*>(out), count * C, x, [&](T v) { return math::activation<A, D>(v); });
        });
      });
      break;
    case NodeKind::binary:
      if (node.op >= KF_BINARY_EQ) {
        const Node& a = g_.nodes[node.args[0]];
        const kf_dtype_t operands = a.weak ? g_.nodes[node.args[1]].dtype : a.dtype;
        with_dtype(operands, [&](auto dtype) {
          using T = math::Compute<dtype()>;
          T ca[4], cb[4];
          const auto x = operand<dtype()>(node.args[0], values, scratch, ca);
          const auto y = operand<dtype()>(node.args[1], values, scratch, cb);
          with_int<KF_BINARY_EQ, KF_BINARY_GE>(node.op, [&](auto op) {
            constexpr int O = op(), D = dtype();
            map2(static_cast<long long*>(out), count, C, x, y,
                 [&](T u, T v) { return math::compare<O, D>(u, v); });
          });
        });
      } else {
        with_dtype(node.dtype, [&](auto dtype) {
          using T = math::Compute<dtype()>;
          T ca[4], cb[4];
          const auto x = operand<dtype()>(node.args[0], values, scratch, ca);
          const auto y = operand<dtype()>(node.args[1], values, scratch, cb);
          with_int<KF_BINARY_ADD, KF_BINARY_POW>(node.op, [&](auto op) {
            constexpr int O = op(), D = dtype();
            map2(static_cast<T*>(out), count, C, x, y,
                 [&](T u, T v) { return math::binary<O, D>(u, v); });
          });
        });
      }
      break;
    case NodeKind::clamp:
      with_dtype(node.dtype, [&](auto dtype) {
        using T = math::Compute<dtype()>;
        constexpr int D = dtype();
        T cx[4], clo[4], chi[4];
        map3(static_cast<T*>(out), count, C, operand<dtype()>(node.args[0], values, scratch, cx),
             operand<dtype()>(node.args[1], values, scratch, clo),
             operand<dtype()>(node.args[2], values, scratch, chi),
             [&](T x, T lo, T hi) { return math::clamp<D>(x, lo, hi); });
      });
      break;
    case NodeKind::where:
      with_dtype(g_.nodes[node.args[0]].dtype, [&](auto cond_dtype) {
        using Cond = math::Compute<cond_dtype()>;
        Cond cc[4];
        const auto cond = operand<cond_dtype()>(node.args[0], values, scratch, cc);
        with_dtype(node.dtype, [&](auto dtype) {
          using T = math::Compute<dtype()>;
          constexpr int D = dtype(), DC = cond_dtype();
          T ca[4], cb[4];
          map3(static_cast<T*>(out), count, C, cond,
               operand<dtype()>(node.args[1], values, scratch, ca),
               operand<dtype()>(node.args[2], values, scratch, cb),
               [&](Cond c, T a, T b) { return math::select<D>(math::truthy<DC>(c), a, b); });
        });
      });
      break;
    case NodeKind::cast:
      with_dtype(g_.nodes[node.args[0]].dtype, [&](auto from) {
        using From = math::Compute<from()>;
        const From* x = static_cast<const From*>(buffer(node.args[0], scratch));
        with_dtype(node.dtype, [&](auto to) {
          using To = math::Compute<to()>;
          with_int<0, KF_CAST_SATURATE_ROUND>(node.op, [&](auto mode) {
            constexpr int F = from(), T = to(), M = mode();
            map1(static_cast<To*>(out), count * C, x,
                 [&](From v) { return math::cast<F, T, M>(v); });
          });
        });
      });
      break;
    case NodeKind::color:
      color_tile(g_, node, buffer(node.args[0], scratch), count, values, out);
      break;
    case NodeKind::normalize:
      normalize_tile(g_, node, buffer(node.args[0], scratch), count, values, out);
      break;
  }
}

void Executor::run_tensor_tile(const Walk& w, const LaunchPlan& plan, int64_t begin, int64_t count,
                               Scratch& scratch, Runs& runs) const {
  runs_of(w, begin, count, runs);
  const int32_t inner = w.rank - 1;
  const double* values = plan.values.data();
  const size_t n_inputs = g_.inputs.size();
  // An output node whose tile is one dense run of its own compute type is computed in place, in
  // the output tensor (outputs overlap no input and no other output); others go through the slot.
  uint64_t in_place = 0;  // bit o: output o is written directly
  for (size_t o = 0; o < g_.outputs.size(); ++o) {
    if (!first_mark_[o]) continue;  // a node marked twice: the later copies come from the first
    const int32_t id = g_.outputs[o].node;
    const size_t k = n_inputs + o;
    scratch.values[id] = scratch.slot(slot_[id]);
    with_dtype(g_.nodes[id].dtype, [&](auto dtype) {
      using T = math::Compute<dtype()>;
      if (std::is_same_v<T, math::Storage<dtype()>> && runs.count == 1 &&
          w.strides[k][inner] == 1 && o < 64) {
        scratch.values[id] = static_cast<T*>(w.data[k]) + runs.offsets[k * runs.capacity];
        in_place |= uint64_t{1} << o;
      }
    });
  }
  for (int32_t id = 0; id < static_cast<int32_t>(g_.nodes.size()); ++id) {
    const Node& node = g_.nodes[id];
    if (slot_[id] < 0) continue;  // constants (folded into their users), unused inputs
    if (node.kind != NodeKind::input) {
      eval(id, count, values, scratch);
      continue;
    }
    const size_t k = static_cast<size_t>(node.input.position);
    const int64_t stride = w.strides[k][inner];
    with_dtype(node.dtype, [&](auto dtype) {
      using T = math::Compute<dtype()>;
      if (std::is_same_v<T, math::Storage<dtype()>> && runs.count == 1 && stride == 1) {
        // Dense and already in the compute type (f32, f64, i64): read in place, no copy.
        scratch.values[id] = static_cast<T*>(w.data[k]) + runs.offsets[k * runs.capacity];
        return;
      }
      scratch.values[id] = scratch.slot(slot_[id]);
      T* out = static_cast<T*>(buffer(id, scratch));
      for (int64_t r = 0; r < runs.count; ++r)
        load_run<dtype()>(w.data[k], runs.offsets[k * runs.capacity + r], stride, runs.length[r],
                          out + runs.start[r]);
    });
  }
  for (size_t o = 0; o < g_.outputs.size(); ++o) {
    if (o < 64 && (in_place >> o) & 1) continue;
    const int32_t id = g_.outputs[o].node;
    const size_t k = n_inputs + o;
    const int64_t stride = w.strides[k][inner];
    with_dtype(g_.nodes[id].dtype, [&](auto dtype) {
      using T = math::Compute<dtype()>;
      const T* src = static_cast<const T*>(buffer(id, scratch));
      for (int64_t r = 0; r < runs.count; ++r)
        store_run<dtype()>(src + runs.start[r], w.data[k], runs.offsets[k * runs.capacity + r],
                           stride, runs.length[r]);
    });
  }
}

void Executor::run_image_tile(const Item& item, const LaunchPlan& plan, int64_t begin,
                              int64_t count, Scratch& scratch) const {
  PixelTile tile;
  tile.item = &item;
  tile.begin = begin;
  tile.count = count;
  tile.height = static_cast<int32_t>(item.shape[0]);
  tile.width = static_cast<int32_t>(item.shape[1]);
  const double* values = plan.values.data();
  for (int32_t id = 0; id < static_cast<int32_t>(g_.nodes.size()); ++id) {
    if (slot_[id] < 0) continue;
    const Node& node = g_.nodes[id];
    if (node.kind == NodeKind::read_image)
      read_tile(g_, node, tile, values, buffer(id, scratch));
    else
      eval(id, count, values, scratch);
  }
  for (size_t o = 0; o < g_.outputs.size(); ++o) {
    const Node& node = g_.nodes[g_.outputs[o].node];
    const Binding& b = item.outputs[o];
    const int C = node.channels;
    with_dtype(node.dtype, [&](auto dtype) {
      using T = math::Compute<dtype()>;
      const T* src = static_cast<const T*>(buffer(g_.outputs[o].node, scratch));
      int64_t y = begin / tile.width, x = begin % tile.width;
      for (int64_t i = 0; i < count; ++i) {
        const int64_t offset = y * b.strides[0] + x * b.strides[1];
        for (int c = 0; c < C; ++c)
          math::store<dtype()>(b.data, offset + c * b.strides[2], src[i * C + c]);
        if (++x == tile.width) {
          x = 0;
          ++y;
        }
      }
    });
  }
}

void Executor::launch(kf_context_t* ctx, const LaunchPlan& uniform_or_full, kf_stream_t*) const {
  // A uniform plan (one frame, many crops) is written out item by item: the tiles address items.
  LaunchPlan full;
  if (uniform_or_full.uniform_items > 0) full = expanded(uniform_or_full);
  const LaunchPlan& plan = uniform_or_full.uniform_items > 0 ? full : uniform_or_full;
  const size_t n_items = plan.items.size();
  std::vector<Walk> walks(g_.image ? 0 : n_items);
  std::vector<int64_t> values_of(n_items), first_tile(n_items + 1, 0);
  for (size_t i = 0; i < n_items; ++i) {
    const Item& item = plan.items[i];
    int64_t n = 1;
    for (int32_t d = 0; d < item.rank; ++d) n *= item.shape[d];
    values_of[i] = n;
    first_tile[i + 1] = first_tile[i] + (n + tile_ - 1) / tile_;
    if (!g_.image) walks[i] = make_walk(item);
  }
  const int64_t tiles = first_tile[n_items];
  // Chunks of at least ~32K values: enough to amortise handing them out.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / tile_);
  ctx->threads->parallel_for(tiles, grain, [&](int64_t begin, int64_t end) {
    Scratch scratch;
    scratch.memory.resize(static_cast<size_t>(std::max(slots_, 1)) * (kBufferBytes / 8));
    scratch.values.resize(g_.nodes.size(), nullptr);
    for (size_t id = 0; id < g_.nodes.size(); ++id)
      if (slot_[id] >= 0) scratch.values[id] = scratch.slot(slot_[id]);
    Runs runs;
    size_t item = static_cast<size_t>(
        std::upper_bound(first_tile.begin(), first_tile.end(), begin) - first_tile.begin() - 1);
    for (int64_t t = begin; t < end; ++t) {
      while (t >= first_tile[item + 1]) ++item;
      const int64_t first = (t - first_tile[item]) * tile_;
      const int64_t count = std::min(tile_, values_of[item] - first);
      if (g_.image)
        run_image_tile(plan.items[item], plan, first, count, scratch);
      else
        run_tensor_tile(walks[item], plan, first, count, scratch, runs);
    }
  });
}

}  // namespace
}  // namespace cpu

std::shared_ptr<const Program> make_cpu_program(const Graph& g,
                                                const kf_compile_options_t& options) {
  return std::make_shared<cpu::Executor>(g, options);
}

}  // namespace fusion
}  // namespace kf
