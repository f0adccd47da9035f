// Code generation: one CUDA kernel for a whole graph, written against the shared functors of
// core/math/fusion_ops.hpp and core/math/image.hpp (the same code the CPU executor runs).
//
// The kernel is `extern "C" __global__ void kf_fused_kernel(const __grid_constant__ Params p)`,
// Params as core/fusion/kernel_params.hpp lays it out. Nothing but structure reaches the source:
// launch values are read from p.values, tensors and rectangles from the item table, so two graphs
// that differ only in values share one kernel. The text depends only on the graph and the
// options (no pointers, no hashes), so it can be hashed for the disk cache. On sm_90 and later
// the kernel begins with griddepcontrol.wait: it is launched as a programmatic dependent launch.
//
// Tensor graphs are generated in codegen_tensor.cpp, image graphs in codegen_image.cpp.
//
// Fast paths. Where a graph divides or takes square roots in f32 (fusion_ops.hpp: fast::div and
// friends), the per-element code is generated twice, as element<true> / the `true` block (fast
// paths, recording their operands in a km::FastCheck `ok`) and element<false> / the `false`
// block (the exact functions). A vector of elements (a pixel in image graphs) is computed fast
// and, unless ok.passed(), recomputed exactly: the results are those of the exact functions.
#include <string>
#include <vector>

#include "core/fusion/codegen.hpp"

namespace kf {
namespace fusion {
namespace codegen {
namespace {

const char* unary_name(int op) {
  static const char* const names[] = {"neg", "abs", "exp", "log", "sqrt", "rsqrt", "square"};
  KF_REQUIRE(op >= 0 && op < 7, KF_ERROR_INTERNAL, "codegen: unknown unary op %d", op);
  return names[op];
}

const char* binary_name(int op) {
  static const char* const names[] = {"add", "sub", "mul", "div", "min", "max", "pow",
                                      "eq",  "ne",  "lt",  "le",  "gt",  "ge"};
  KF_REQUIRE(op >= 0 && op < 13, KF_ERROR_INTERNAL, "codegen: unknown binary op %d", op);
  return names[op];
}

const char* activation_name(int act) {
  static const char* const names[] = {"none", "relu", "gelu",   "gelu_tanh",
                                      "silu", "tanh", "sigmoid"};
  KF_REQUIRE(act >= 0 && act < 7, KF_ERROR_INTERNAL, "codegen: unknown activation %d", act);
  return names[act];
}

const char* cast_mode_name(int mode) {
  static const char* const names[] = {"wrap", "saturate", "saturate_round"};
  KF_REQUIRE(mode >= 0 && mode < 3, KF_ERROR_INTERNAL, "codegen: unknown cast mode %d", mode);
  return names[mode];
}

const char* color_name(int conversion) {
  static const char* const names[] = {"rgb_to_bgr",  "rgba_to_bgra", "rgb_to_gray", "bgr_to_gray",
                                      "rgba_to_rgb", "rgb_to_rgba",  "rgba_to_bgr", "bgr_to_rgba"};
  KF_REQUIRE(conversion >= 0 && conversion < 8, KF_ERROR_INTERNAL,
             "codegen: unknown colour conversion %d", conversion);
  return names[conversion];
}

}  // namespace

const char* dtype_name(kf_dtype_t d) {
  switch (d) {
    case KF_DTYPE_FLOAT32: return "km::dtype::f32";
    case KF_DTYPE_FLOAT16: return "km::dtype::f16";
    case KF_DTYPE_BFLOAT16: return "km::dtype::bf16";
    case KF_DTYPE_FLOAT64: return "km::dtype::f64";
    case KF_DTYPE_INT8: return "km::dtype::i8";
    case KF_DTYPE_UINT8: return "km::dtype::u8";
    case KF_DTYPE_INT32: return "km::dtype::i32";
    case KF_DTYPE_INT64: return "km::dtype::i64";
  }
  fail(KF_ERROR_INTERNAL, "codegen: unknown dtype %d", static_cast<int>(d));
}

Generator::Generator(const Graph& g, const kf_compile_options_t& options,
                     const DeviceBalance& balance)
    : g_(g), layout_(param_layout(g, options, balance)), live_(g.nodes.size(), false) {
  for (const Output& o : g.outputs) mark_live(o.node);
  for (size_t id = 0; id < g.nodes.size(); ++id)
    has_fast_ = has_fast_ || (live_[id] && fast_path(g.nodes[id]));
}

std::string Generator::generate() {
  // The kernel first: it names the launch values it needs (konst), which the preamble's
  // Consts then declares.
  if (g_.image) {
    image_kernel();
  } else {
    tensor_kernel();
  }
  const std::string body = w_.take();
  preamble();
  consts_struct();
  return w_.take() + body;
}

void Generator::mark_live(int32_t id) {
  if (live_[id]) return;
  live_[id] = true;
  const Node& n = g_.nodes[id];
  for (int32_t i = 0; i < n.n_args; ++i) mark_live(n.args[i]);
}

bool Generator::computed_in_float(kf_dtype_t d) {
  return d == KF_DTYPE_FLOAT32 || d == KF_DTYPE_FLOAT16 || d == KF_DTYPE_BFLOAT16;
}

// The operand dtype of a binary node (weak constants take the other operand's).
kf_dtype_t Generator::binary_dtype(const Node& n) const {
  const Node& a = g_.nodes[n.args[0]];
  return a.weak ? g_.nodes[n.args[1]].dtype : a.dtype;
}

// Whether the node has a fast path that records in ok (fusion_ops.hpp *_has_fast_path).
bool Generator::fast_path(const Node& n) const {
  switch (n.kind) {
    case NodeKind::unary:
      return computed_in_float(g_.nodes[n.args[0]].dtype) &&
             (n.op == KF_UNARY_SQRT || n.op == KF_UNARY_RSQRT);
    case NodeKind::binary: return n.op == KF_BINARY_DIV && computed_in_float(binary_dtype(n));
    case NodeKind::normalize: return g_.nodes[n.args[0]].dtype != KF_DTYPE_FLOAT64;
    default: return false;
  }
}

// Channel c of node id's value, in dtype `as` (the operand dtype it meets): weak constants
// become from_value of their launch value; 1-channel values broadcast.
std::string Generator::operand(int32_t id, int c, kf_dtype_t as) {
  const Node& n = g_.nodes[id];
  const int channel = n.channels == 1 ? 0 : c;
  if (n.kind == NodeKind::constant) {
    const int slot = n.value_offset + channel;
    return konst(format("c%d_%s", slot, dtype_tag(as)), format("km::Compute<%s>", dtype_name(as)),
                 {launch_value(slot, as)});
  }
  if (!g_.image) return var(id);
  return format("%s[%d]", var(id).c_str(), channel);
}

// Launch value `slot` met by an operand of dtype `as`, as km::from_value<as> gives it: the
// float copy for the dtypes computed in float (the same rounding of the same double).
std::string Generator::launch_value(int slot, kf_dtype_t as) const {
  if (as == KF_DTYPE_FLOAT32 || as == KF_DTYPE_FLOAT16 || as == KF_DTYPE_BFLOAT16)
    return format("p.values_f32[%d]", slot);
  return format("km::from_value<%s>(p.values[%d])", dtype_name(as), slot);
}

std::string Generator::target(int32_t id, int c) const {
  return g_.image ? format("%s[%d]", var(id).c_str(), c) : var(id);
}

void Generator::preamble() {
  w_.line("// Generated by KernelFusion's fusion engine (core/fusion/codegen.cpp).");
  w_.line("// %s graph: %d inputs, %d outputs, %d launch values, capacity %d (%s).",
          g_.image ? "Image" : "Tensor", layout_.n_inputs, layout_.n_outputs, layout_.n_values,
          layout_.capacity,
          layout_.inline_items ? "items in the kernel parameter" : "items in device memory");
  w_.line("#include \"core/math/fusion_ops.hpp\"");
  if (g_.image) w_.line("#include \"core/math/image.hpp\"");
  w_.blank();
  w_.line("namespace km = kf::math;");
  w_.blank();
  w_.line("namespace {");
  w_.blank();
  item_struct();
  w_.blank();
  w_.open("struct Params");
  w_.line("double values[%d];", layout_.value_slots);
  w_.line("float values_f32[%d];  // the same, rounded to float", 2 * layout_.f32_value_slots);
  w_.line("long long n_items;");
  w_.line("const Item* items;  // the item table in device memory, when not inline");
  if (layout_.inline_items) w_.line("Item inline_items[%d];", layout_.capacity);
  if (layout_.compact) {
    w_.line("// Uniform launches (items null): item i is `common` with crops[i] and output o");
    w_.line("// advanced by i * out_step[o] bytes.");
    w_.line("long long out_step[%d];", layout_.n_outputs);
    w_.line("Item common;");
    w_.line("int crops[%d][4];  // x, y, width, height", layout_.capacity);
  }
  w_.close("};");
  w_.line("static_assert(sizeof(Params) == %zu, \"Params: see core/fusion/kernel_params.hpp\");",
          layout_.param_bytes);
  w_.blank();
}

void Generator::item_struct() {
  const int ni = layout_.n_inputs, no = layout_.n_outputs;
  w_.open("struct Item");
  if (g_.image) {
    w_.line("long long out_h, out_w;");
    w_.line("long long crop_x, crop_y, crop_w, crop_h;");
    if (ni > 0) {
      w_.line("const char* in_data[%d];", ni);
      w_.line("long long in_shape[%d][3];", ni);
      w_.line("long long in_strides[%d][3];", ni);
    }
    w_.line("char* out_data[%d];", no);
    w_.line("long long out_strides[%d][3];", no);
  } else {
    w_.line("long long numel;");
    w_.line("long long mode;  // 0 strided, 1 contiguous, 2 contiguous with 16-byte vectors");
    w_.line("long long shape[%d];", layout_.shape_slots);
    w_.line("char* data[%d];  // inputs, then outputs", ni + no);
    w_.line("long long strides[%d][%d];", ni + no, layout_.shape_slots);
  }
  w_.close("};");
  w_.line("static_assert(sizeof(Item) == %zu, \"Item: see core/fusion/kernel_params.hpp\");",
          layout_.item_bytes());
}

// The statements computing node id (every channel); inputs are handled by the caller.
void Generator::node(int32_t id) {
  const Node& n = g_.nodes[id];
  const char* d = dtype_name(n.dtype);
  const int channels = n.channels;
  auto declare = [&] {
    if (g_.image) {
      w_.line("km::Compute<%s> %s[%d];", d, var(id).c_str(), channels);
    }
  };
  auto assign = [&](int c, const std::string& expr) {
    if (g_.image) {
      w_.line("%s = %s;", target(id, c).c_str(), expr.c_str());
    } else {
      w_.line("const km::Compute<%s> %s = %s;", d, var(id).c_str(), expr.c_str());
    }
  };
  switch (n.kind) {
    case NodeKind::input:
    case NodeKind::constant: return;
    case NodeKind::unary: {
      declare();
      const kf_dtype_t x = g_.nodes[n.args[0]].dtype;
      for (int c = 0; c < channels; ++c) {
        if (fast_path(n)) {
          assign(c, format("km::unary_v<%s, km::unary_op::%s, %s>(%s, ok)", fast_, unary_name(n.op),
                           dtype_name(x), operand(n.args[0], c, x).c_str()));
        } else {
          assign(c, format("km::unary<km::unary_op::%s, %s>(%s)", unary_name(n.op), dtype_name(x),
                           operand(n.args[0], c, x).c_str()));
        }
      }
      return;
    }
    case NodeKind::activation: {
      declare();
      for (int c = 0; c < channels; ++c) {
        assign(c, format("km::activation<%d /* %s */, %s>(%s)", n.op, activation_name(n.op), d,
                         operand(n.args[0], c, n.dtype).c_str()));
      }
      return;
    }
    case NodeKind::binary: {
      declare();
      const kf_dtype_t t = binary_dtype(n);  // the operands' common dtype
      const bool comparison = n.op >= KF_BINARY_EQ;
      const Node& divisor = g_.nodes[n.args[1]];
      for (int c = 0; c < channels; ++c) {
        if (fast_path(n) && divisor.kind == NodeKind::constant) {
          // A launch value: its reciprocal is prepared once per thread.
          const int slot = divisor.value_offset + (divisor.channels == 1 ? 0 : c);
          const std::string d =
              konst(format("c%d_%s_divisor", slot, dtype_tag(t)),
                    format("km::Divisor<km::Compute<%s>>", dtype_name(t)),
                    {format("km::make_divisor(%s)", launch_value(slot, t).c_str())});
          assign(c, format("km::div_v<%s, %s>(%s, %s, ok)", fast_, dtype_name(t),
                           operand(n.args[0], c, t).c_str(), d.c_str()));
        } else if (fast_path(n)) {
          assign(c, format("km::binary_v<%s, km::binary_op::%s, %s>(%s, %s, ok)", fast_,
                           binary_name(n.op), dtype_name(t), operand(n.args[0], c, t).c_str(),
                           operand(n.args[1], c, t).c_str()));
        } else {
          assign(c, format("km::%s<km::binary_op::%s, %s>(%s, %s)",
                           comparison ? "compare" : "binary", binary_name(n.op), dtype_name(t),
                           operand(n.args[0], c, t).c_str(), operand(n.args[1], c, t).c_str()));
        }
      }
      return;
    }
    case NodeKind::clamp: {
      declare();
      for (int c = 0; c < channels; ++c) {
        assign(c, format("km::clamp<%s>(%s, %s, %s)", d, operand(n.args[0], c, n.dtype).c_str(),
                         operand(n.args[1], c, n.dtype).c_str(),
                         operand(n.args[2], c, n.dtype).c_str()));
      }
      return;
    }
    case NodeKind::where: {
      declare();
      const Node& cond = g_.nodes[n.args[0]];
      const kf_dtype_t ct = cond.weak ? KF_DTYPE_FLOAT64 : cond.dtype;
      for (int c = 0; c < channels; ++c) {
        assign(c, format("km::select<%s>(km::truthy<%s>(%s), %s, %s)", d, dtype_name(ct),
                         operand(n.args[0], c, ct).c_str(), operand(n.args[1], c, n.dtype).c_str(),
                         operand(n.args[2], c, n.dtype).c_str()));
      }
      return;
    }
    case NodeKind::cast: {
      declare();
      const kf_dtype_t from = g_.nodes[n.args[0]].dtype;
      for (int c = 0; c < channels; ++c) {
        assign(c, format("km::cast<%s, %s, km::cast_mode::%s>(%s)", dtype_name(from), d,
                         cast_mode_name(n.op), operand(n.args[0], c, from).c_str()));
      }
      return;
    }
    case NodeKind::read_image: read(id); return;
    case NodeKind::color: {
      declare();
      const Node& x = g_.nodes[n.args[0]];
      const std::string alpha = n.value_count > 0 ? konst(format("a%d", n.value_offset), "double",
                                                          {format("p.values[%d]", n.value_offset)})
                                                  : std::string("0.0");
      w_.line("km::color_convert<km::color::%s, %s>(%s, %s, %s);", color_name(n.op),
              dtype_name(x.dtype), var(n.args[0]).c_str(), alpha.c_str(), var(id).c_str());
      return;
    }
    case NodeKind::normalize: {
      declare();
      const kf_dtype_t x = g_.nodes[n.args[0]].dtype;
      const std::string type = format("km::NormalizeCompute<%s>", dtype_name(x));
      auto value = [&](int slot) {
        return konst(format("n%d", slot), type,
                     {format("static_cast<%s>(p.values[%d])", type.c_str(), slot)});
      };
      auto divisor = [&](int slot) {
        return konst(
            format("n%d_divisor", slot), format("km::Divisor<%s>", type.c_str()),
            {format("km::make_divisor(static_cast<%s>(p.values[%d]))", type.c_str(), slot)});
      };
      for (int c = 0; c < channels; ++c) {
        assign(c,
               format("km::normalize_v<%s, %s>(%s, %s, %s, %s, ok)", fast_path(n) ? fast_ : "false",
                      dtype_name(x), operand(n.args[0], c, x).c_str(),
                      value(n.value_offset).c_str(), value(n.value_offset + 1 + c).c_str(),
                      divisor(n.value_offset + 1 + channels + c).c_str()));
      }
      return;
    }
  }
  fail(KF_ERROR_INTERNAL, "codegen: unknown node kind %d", static_cast<int>(n.kind));
}

// A launch value in the type it is used in, computed once per thread (make_consts) rather
// than converted from double wherever it is used: `name` is a field of the generated Consts,
// with one initialiser per element (arrays: several). Returns "k.name".
std::string Generator::konst(const std::string& name, const std::string& type,
                             const std::vector<std::string>& inits, bool array) {
  for (const Konst& c : consts_)
    if (c.name == name) return "k." + name;
  consts_.push_back(Konst{name, type, inits, array || inits.size() != 1});
  return "k." + name;
}

const char* Generator::dtype_tag(kf_dtype_t d) {
  switch (d) {
    case KF_DTYPE_FLOAT32: return "f32";
    case KF_DTYPE_FLOAT16: return "f16";
    case KF_DTYPE_BFLOAT16: return "bf16";
    case KF_DTYPE_FLOAT64: return "f64";
    case KF_DTYPE_INT8: return "i8";
    case KF_DTYPE_UINT8: return "u8";
    case KF_DTYPE_INT32: return "i32";
    case KF_DTYPE_INT64: return "i64";
  }
  return "x";
}

// struct Consts and make_consts(p), after every use was generated.
void Generator::consts_struct() {
  w_.line("// The launch values in the types they are used in, converted once per thread.");
  w_.open("struct Consts");
  for (const Konst& c : consts_) {
    if (!c.array) {
      w_.line("%s %s;", c.type.c_str(), c.name.c_str());
    } else {
      w_.line("%s %s[%zu];", c.type.c_str(), c.name.c_str(), c.inits.size());
    }
  }
  w_.close("};");
  w_.blank();
  w_.open("__device__ __forceinline__ Consts make_consts(const Params& p)");
  w_.line("Consts k;");
  for (const Konst& c : consts_) {
    if (!c.array) {
      w_.line("k.%s = %s;", c.name.c_str(), c.inits[0].c_str());
    } else {
      for (size_t i = 0; i < c.inits.size(); ++i)
        w_.line("k.%s[%zu] = %s;", c.name.c_str(), i, c.inits[i].c_str());
    }
  }
  if (consts_.empty()) w_.line("(void)p;");
  w_.line("return k;");
  w_.close();
  w_.blank();
}

// The first statements of the kernel: on sm_90 it is launched as a programmatic dependent
// launch (cuda_program.cpp), so it may start while the kernel before it in the stream is still
// running and must wait for that kernel's results before it touches global memory (the item
// table included); it then lets the next kernel start as early.
void Generator::dependent_launch_prologue() {
  w_.line("#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900");
  w_.line("asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");");
  w_.line("asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\");");
  w_.line("#endif");
}

}  // namespace codegen

std::string generate_cuda_source(const Graph& g, const kf_compile_options_t& options,
                                 const DeviceBalance& balance) {
  KF_REQUIRE_ARG(!g.outputs.empty(), "the graph has no outputs: mark one with kf_graph_output()");
  return codegen::Generator(g, options, balance).generate();
}

}  // namespace fusion
}  // namespace kf
