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
// Tensor graphs: blockIdx.y is the item, a grid-stride loop over its elements in one of four
// modes chosen per item at launch (16-byte vectors, kUnroll of them per binding and thread in
// flight; contiguous; strided/broadcast in 32- or 64-bit coordinates).
// Image graphs: blockIdx.z is the item, a 2-D grid-stride loop over the item's output pixels,
// columns outer (each read's column sample is computed once per column) and rows inner (the row
// sample once per row); each pixel evaluates every node for all its channels and writes (y, x, c)
// of each output.
//
// Fast paths. Where a graph divides or takes square roots in f32 (fusion_ops.hpp: fast::div and
// friends), the per-element code is generated twice, as element<true> / the `true` block (fast
// paths, recording their operands in a km::FastCheck `ok`) and element<false> / the `false`
// block (the exact functions). A vector of elements (a pixel in image graphs) is computed fast
// and, unless ok.passed(), recomputed exactly: the results are those of the exact functions.
#include <algorithm>
#include <cstdarg>
#include <string>
#include <utility>
#include <vector>

#include "core/fusion/kernel_params.hpp"
#include "core/fusion/program.hpp"
#include "core/runtime/error.hpp"

namespace kf {
namespace fusion {
namespace {

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

const char* interp_name(kf_interpolation_t i) {
  static const char* const names[] = {"none", "nearest", "bilinear"};
  return names[static_cast<int>(i)];
}

const char* border_name(kf_border_t b) {
  static const char* const names[] = {"constant", "replicate", "reflect"};
  return names[static_cast<int>(b)];
}

const char* color_name(int conversion) {
  static const char* const names[] = {"rgb_to_bgr",  "rgba_to_bgra", "rgb_to_gray", "bgr_to_gray",
                                      "rgba_to_rgb", "rgb_to_rgba",  "rgba_to_bgr", "bgr_to_rgba"};
  KF_REQUIRE(conversion >= 0 && conversion < 8, KF_ERROR_INTERNAL,
             "codegen: unknown colour conversion %d", conversion);
  return names[conversion];
}

class Writer {
 public:
  void line(const char* fmt, ...) __attribute__((format(printf, 2, 3))) {
    va_list args;
    va_start(args, fmt);
    va_list copy;
    va_copy(copy, args);
    const int n = vsnprintf(nullptr, 0, fmt, copy);
    va_end(copy);
    KF_REQUIRE(n >= 0, KF_ERROR_INTERNAL, "codegen: bad format");
    std::string buffer(static_cast<size_t>(n) + 1, '\0');
    vsnprintf(&buffer[0], buffer.size(), fmt, args);
    va_end(args);
    buffer.pop_back();
    text_.append(indent_, ' ');
    text_ += buffer;
    text_ += '\n';
  }
  void open(const std::string& head) {
    if (head.empty()) {
      line("{");
    } else {
      line("%s {", head.c_str());
    }
    indent_ += 2;
  }
  void close(const char* tail = "}") {
    indent_ -= 2;
    line("%s", tail);
  }
  void blank() { text_ += '\n'; }
  // Closes a block and opens the next one: "} else {".
  void next(const char* between) {
    indent_ -= 2;
    line("%s", between);
    indent_ += 2;
  }
  std::string take() { return std::move(text_); }

 private:
  std::string text_;
  size_t indent_ = 0;
};

class Generator {
 public:
  Generator(const Graph& g, const kf_compile_options_t& options, const DeviceBalance& balance)
      : g_(g), layout_(param_layout(g, options, balance)), live_(g.nodes.size(), false) {
    for (const Output& o : g.outputs) mark_live(o.node);
    for (size_t id = 0; id < g.nodes.size(); ++id)
      has_fast_ = has_fast_ || (live_[id] && fast_path(g.nodes[id]));
  }

  std::string generate() {
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

 private:
  void mark_live(int32_t id) {
    if (live_[id]) return;
    live_[id] = true;
    const Node& n = g_.nodes[id];
    for (int32_t i = 0; i < n.n_args; ++i) mark_live(n.args[i]);
  }

  static bool computed_in_float(kf_dtype_t d) {
    return d == KF_DTYPE_FLOAT32 || d == KF_DTYPE_FLOAT16 || d == KF_DTYPE_BFLOAT16;
  }

  // The operand dtype of a binary node (weak constants take the other operand's).
  kf_dtype_t binary_dtype(const Node& n) const {
    const Node& a = g_.nodes[n.args[0]];
    return a.weak ? g_.nodes[n.args[1]].dtype : a.dtype;
  }

  // Whether the node has a fast path that records in ok (fusion_ops.hpp *_has_fast_path).
  bool fast_path(const Node& n) const {
    switch (n.kind) {
      case NodeKind::unary:
        return computed_in_float(g_.nodes[n.args[0]].dtype) &&
               (n.op == KF_UNARY_SQRT || n.op == KF_UNARY_RSQRT);
      case NodeKind::binary: return n.op == KF_BINARY_DIV && computed_in_float(binary_dtype(n));
      case NodeKind::normalize: return g_.nodes[n.args[0]].dtype != KF_DTYPE_FLOAT64;
      default: return false;
    }
  }

  std::string var(int32_t id) const { return "v" + std::to_string(id); }

  // Channel c of node id's value, in dtype `as` (the operand dtype it meets): weak constants
  // become from_value of their launch value; 1-channel values broadcast.
  std::string operand(int32_t id, int c, kf_dtype_t as) {
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
  std::string launch_value(int slot, kf_dtype_t as) const {
    if (as == KF_DTYPE_FLOAT32 || as == KF_DTYPE_FLOAT16 || as == KF_DTYPE_BFLOAT16)
      return format("p.values_f32[%d]", slot);
    return format("km::from_value<%s>(p.values[%d])", dtype_name(as), slot);
  }

  std::string target(int32_t id, int c) const {
    return g_.image ? format("%s[%d]", var(id).c_str(), c) : var(id);
  }

  void preamble() {
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

  void item_struct() {
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
  void node(int32_t id) {
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
            assign(c, format("km::unary_v<%s, km::unary_op::%s, %s>(%s, ok)", fast_,
                             unary_name(n.op), dtype_name(x), operand(n.args[0], c, x).c_str()));
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
          assign(c,
                 format("km::select<%s>(km::truthy<%s>(%s), %s, %s)", d, dtype_name(ct),
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
        const std::string alpha = n.value_count > 0
                                      ? konst(format("a%d", n.value_offset), "double",
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
          assign(c, format("km::normalize_v<%s, %s>(%s, %s, %s, %s, ok)",
                           fast_path(n) ? fast_ : "false", dtype_name(x),
                           operand(n.args[0], c, x).c_str(), value(n.value_offset).c_str(),
                           value(n.value_offset + 1 + c).c_str(),
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
  std::string konst(const std::string& name, const std::string& type,
                    const std::vector<std::string>& inits, bool array = false) {
    for (const Konst& c : consts_)
      if (c.name == name) return "k." + name;
    consts_.push_back(Konst{name, type, inits, array || inits.size() != 1});
    return "k." + name;
  }

  static const char* dtype_tag(kf_dtype_t d) {
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
  void consts_struct() {
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

  // ---- tensor graphs

  // element<kFast>(values, in..., out..., ok): the graph for one element.
  void tensor_element_function() {
    std::string params = "const Consts& k";
    for (int32_t id : g_.inputs) {
      params += format(", const km::Compute<%s> in%d", dtype_name(g_.nodes[id].dtype),
                       g_.nodes[id].input.position);
    }
    for (size_t o = 0; o < g_.outputs.size(); ++o) {
      params +=
          format(", km::Compute<%s>& out%zu", dtype_name(g_.nodes[g_.outputs[o].node].dtype), o);
    }
    params += ", km::FastCheck& ok";
    w_.line("// The whole graph for one element%s.",
            has_fast_ ? " (kFast: the fast paths, which record their operands in ok)" : "");
    w_.line("template <bool kFast>");
    w_.open((format("__device__ __forceinline__ void element(%s)", params.c_str())));
    fast_ = "kFast";
    for (size_t id = 0; id < g_.nodes.size(); ++id) {
      if (!live_[id]) continue;
      const Node& n = g_.nodes[id];
      if (n.kind == NodeKind::input) {
        w_.line("const km::Compute<%s> %s = in%d;", dtype_name(n.dtype), var(id).c_str(),
                n.input.position);
      } else {
        node(static_cast<int32_t>(id));
      }
    }
    fast_ = "false";
    for (size_t o = 0; o < g_.outputs.size(); ++o) {
      w_.line("out%zu = %s;", o, var(g_.outputs[o].node).c_str());
    }
    if (!has_fast_) w_.line("(void)ok;");
    w_.close();
    w_.blank();
  }

  // The element's outputs, fast and (when a fast path declined) exact: `args` are element's
  // arguments before ok.
  void evaluate(const std::string& args) {
    w_.line("km::FastCheck ok;");
    w_.line("element<%s>(%s, ok);", has_fast_ ? "true" : "false", args.c_str());
    if (has_fast_) w_.line("if (!ok.passed()) element<false>(%s, ok);", args.c_str());
  }

  // Loads the inputs at off[], evaluates, stores the outputs at off[].
  void tensor_at_offsets_function() {
    const int ni = layout_.n_inputs;
    w_.open(
        "__device__ __forceinline__ void at_offsets(const Consts& k, char* const "
        "(&data)[kBindings], const long long (&off)[kBindings])");
    std::string args = "k";
    for (int32_t id : g_.inputs) {
      const int pos = g_.nodes[id].input.position;
      const char* d = dtype_name(g_.nodes[id].dtype);
      if (live_[id]) {
        w_.line("const km::Compute<%s> in%d = km::load<%s>(data[%d], off[%d]);", d, pos, d, pos,
                pos);
      } else {
        w_.line("const km::Compute<%s> in%d = {};  // no output uses this input", d, pos);
      }
      args += format(", in%d", pos);
    }
    for (size_t o = 0; o < g_.outputs.size(); ++o) {
      w_.line("km::Compute<%s> out%zu;", dtype_name(g_.nodes[g_.outputs[o].node].dtype), o);
      args += format(", out%zu", o);
    }
    evaluate(args);
    for (size_t o = 0; o < g_.outputs.size(); ++o) {
      const char* d = dtype_name(g_.nodes[g_.outputs[o].node].dtype);
      w_.line("km::store<%s>(data[%zu], off[%zu], out%zu);", d, ni + o, ni + o, o);
    }
    w_.close();
    w_.blank();
  }

  // The vector type that moves `bytes` (2..64) consecutive bytes, and how many of it.
  static std::pair<const char*, int> vector_type(int bytes) {
    if (bytes >= 16) return {"uint4", bytes / 16};
    if (bytes == 8) return {"uint2", 1};
    if (bytes == 4) return {"uint1", 1};
    return {"ushort1", 1};
  }

  // The vector path: per thread and step, kUnroll vectors of kVector consecutive elements per
  // binding (16 bytes wherever the dtype allows), vector u of the step blockDim.x vectors after
  // vector u - 1 (coalesced). Elements are taken in pairs (load2 / store2: one conversion for
  // two 16-bit values).
  //
  // Light graphs (one pass of blocks over the elements) load all of a step's vectors before
  // using any. Resident blocks (layout_.persistent: heavy graphs, kUnroll 1) loop over many
  // steps; where their inputs fit the stage budget (staged()), each thread copies the vectors
  // of the step after next into its own slots of a three-stage shared-memory buffer (cp.async)
  // before it computes the current step, so that every warp keeps loads in flight while it
  // computes: a heavy graph otherwise leaves memory idle between its bursts of arithmetic.
  // (Loads into registers would do the same, but ptxas sinks them to the end of the arithmetic
  // to save registers.) Slot (stage s, part k, thread t) is stage_b[s][k][t]: a warp's 16-byte
  // reads are consecutive. Only the thread that copied a slot reads it, after its own wait: no
  // barrier. No copy is made past the last step, so none is left in flight for the next item.
  // Measured on H200 (2026-11-27, 8192x8192 chains, kf-bench): bf16 N = 11 / 16 85.8 / 70.4 %
  // of copy with the loads in the loop, 90.4 / 73.5 % staged (with launch values read as
  // floats and ReLU as one max, which came in the same change).
  static constexpr int kStages = 3;
  static constexpr size_t kStageBudget = 24 * 1024;  // shared bytes per block

  bool staged() const {
    if (!layout_.persistent || layout_.vector_elements < 2) return false;
    size_t bytes = 0;
    for (int b = 0; b < layout_.n_inputs; ++b) {
      if (live_[g_.inputs[b]]) {
        bytes += static_cast<size_t>(layout_.vector_elements * layout_.element_bytes[b]);
      }
    }
    return bytes > 0 && bytes * kStages * kBlockThreads <= kStageBudget;
  }

  void tensor_vector_body() {
    const int ni = layout_.n_inputs, no = layout_.n_outputs;
    const int e = layout_.vector_elements;
    auto live_inputs = [&](auto&& f) {
      for (int b = 0; b < ni; ++b) {
        if (live_[g_.inputs[b]]) f(b, vector_type(e * layout_.element_bytes[b]));
      }
    };
    auto declare_raw = [&] {
      live_inputs([&](int b, std::pair<const char*, int> v) {
        w_.line("%s raw%d[kUnroll * %d];", v.first, b, v.second);
      });
    };
    // Computes the elements of raw (fast paths first where the graph has them) and stores them
    // at the step starting at vector `g`.
    auto compute_and_store = [&](const char* g) {
      for (int o = 0; o < no; ++o) {
        w_.line("km::Compute<%s> res%d[kUnroll * kVector];",
                dtype_name(g_.nodes[g_.outputs[o].node].dtype), o);
      }
      auto compute = [&](const char* fast) {
        w_.line("#pragma unroll");
        w_.open("for (int e = 0; e < kUnroll * kVector; e += 2)");
        std::string args[2] = {"k", "k"};
        for (int32_t id : g_.inputs) {
          const int pos = g_.nodes[id].input.position;
          const char* d = dtype_name(g_.nodes[id].dtype);
          if (live_[id]) {
            w_.line("km::Compute<%s> in%d_0, in%d_1;", d, pos, pos);
            w_.line("km::load2<%s>(raw%d, e / 2, in%d_0, in%d_1);", d, pos, pos, pos);
          } else {
            w_.line("const km::Compute<%s> in%d_0 = {}, in%d_1 = {};", d, pos, pos);
          }
          for (int h = 0; h < 2; ++h) args[h] += format(", in%d_%d", pos, h);
        }
        for (int o = 0; o < no; ++o)
          for (int h = 0; h < 2; ++h) args[h] += format(", res%d[e + %d]", o, h);
        for (int h = 0; h < 2; ++h) w_.line("element<%s>(%s, ok);", fast, args[h].c_str());
        w_.close();
      };
      w_.line("km::FastCheck ok;");
      compute(has_fast_ ? "true" : "false");
      if (has_fast_) {
        w_.open("if (!ok.passed())");
        compute("false");
        w_.close();
      }
      for (int o = 0; o < no; ++o) {
        const auto v = vector_type(e * layout_.element_bytes[ni + o]);
        w_.line("%s raw%d[kUnroll * %d];", v.first, ni + o, v.second);
        w_.line("#pragma unroll");
        w_.line(
            "for (int e = 0; e < kUnroll * kVector; e += 2) km::store2<%s>(raw%d, e / 2, "
            "res%d[e], res%d[e + 1]);",
            dtype_name(g_.nodes[g_.outputs[o].node].dtype), ni + o, o, o);
      }
      w_.line("#pragma unroll");
      w_.open("for (int u = 0; u < kUnroll; ++u)");
      w_.line("const long long g = %s + static_cast<long long>(u) * blockDim.x;", g);
      w_.line("if (g >= groups) break;");
      for (int o = 0; o < no; ++o) {
        const auto v = vector_type(e * layout_.element_bytes[ni + o]);
        w_.line("#pragma unroll");
        w_.line(
            "for (int k = 0; k < %d; ++k) reinterpret_cast<%s*>(data[%d])[g * %d + k] = "
            "raw%d[u * %d + k];",
            v.second, v.first, ni + o, v.second, ni + o, v.second);
      }
      w_.close();
    };

    w_.line("const long long groups = numel / kVector;");
    w_.line("const long long step = stride * kUnroll;");
    const char* first_vector =
        "static_cast<long long>(blockIdx.x) * blockDim.x * kUnroll + threadIdx.x";
    if (!staged()) {
      w_.open(format("for (long long g0 = %s; g0 < groups; g0 += step)", first_vector));
      declare_raw();
      w_.line("#pragma unroll");
      w_.open("for (int u = 0; u < kUnroll; ++u)");
      w_.line("const long long g = g0 + static_cast<long long>(u) * blockDim.x;");
      live_inputs([&](int b, std::pair<const char*, int> v) {
        w_.line("#pragma unroll");
        w_.line(
            "for (int k = 0; k < %d; ++k) raw%d[u * %d + k] = g < groups ? reinterpret_cast<const "
            "%s*>(data[%d])[g * %d + k] : %s{};",
            v.second, b, v.second, v.first, b, v.second, v.first);
      });
      w_.close();
      compute_and_store("g0");
      w_.close();
    } else {
      KF_REQUIRE(layout_.unroll == 1, KF_ERROR_INTERNAL, "codegen: resident blocks unroll");
      live_inputs([&](int b, std::pair<const char*, int> v) {
        w_.line("__shared__ %s stage%d[%d][%d][%d];", v.first, b, kStages, v.second, kBlockThreads);
        w_.line(
            "const unsigned slot%d = "
            "static_cast<unsigned>(__cvta_generic_to_shared(&stage%d[0][0][threadIdx.x]));",
            b, b);
      });
      auto copy_step = [&](const char* s, const char* g) {
        live_inputs([&](int b, std::pair<const char*, int> v) {
          w_.line("#pragma unroll");
          w_.line(
              "for (int k = 0; k < %d; ++k) copy_async(slot%d + (%s) * sizeof(stage%d[0]) + k * "
              "sizeof(stage%d[0][0]), reinterpret_cast<const %s*>(data[%d]) + (%s * %d + k), %s "
              "< groups);",
              v.second, b, s, b, b, v.first, b, g, v.second, g);
        });
        w_.line("copy_async_commit();");
      };
      // Stages 0 .. kStages - 2 hold the first steps; each iteration copies the step
      // kStages - 1 ahead into the stage read last (`fill`), then waits for the oldest group.
      w_.line("long long g0 = %s;", first_vector);
      for (int j = 0; j + 1 < kStages; ++j)
        copy_step(format("%du", j).c_str(), format("(g0 + %d * step)", j).c_str());
      w_.open(format("for (unsigned s = 0, fill = %du; g0 < groups; g0 += step)", kStages - 1));
      copy_step("fill", format("(g0 + %d * step)", kStages - 1).c_str());
      w_.line("copy_async_wait_all_but_newest();");
      declare_raw();
      live_inputs([&](int b, std::pair<const char*, int> v) {
        w_.line("#pragma unroll");
        w_.line(
            "for (int k = 0; k < %d; ++k) raw%d[k] = read_stage<%s>(slot%d + s * "
            "sizeof(stage%d[0]) + k * sizeof(stage%d[0][0]));",
            v.second, b, v.first, b, b, b);
      });
      w_.line("fill = s;");
      w_.line("s = s == %du ? 0u : s + 1u;", kStages - 1);
      compute_and_store("g0");
      w_.close();
    }
    w_.open("for (long long i = groups * kVector + first; i < numel; i += stride)");
    w_.line("long long off[kBindings];");
    w_.line("#pragma unroll");
    w_.line("for (int b = 0; b < kBindings; ++b) off[b] = i;");
    w_.line("at_offsets(k, data, off);");
    w_.close();
  }

  // The staged loads of the vector path in resident blocks (tensor_vector_body): cp.async of one
  // 8- or 16-byte vector into the calling thread's shared-memory slot, nothing when !inside
  // (`from` is then not dereferenced); before sm_80 an ordinary load and store.
  void copy_async_functions() {
    w_.line("template <class T>");
    w_.open("__device__ __forceinline__ void copy_async(unsigned to, const T* from, bool inside)");
    w_.line("static_assert(sizeof(T) == 8 || sizeof(T) == 16, \"vectors of 8 or 16 bytes\");");
    w_.line("#if __CUDA_ARCH__ >= 800");
    w_.open("if constexpr (sizeof(T) == 16)");
    w_.line(
        "asm volatile(\"{ .reg .pred p; setp.ne.b32 p, %%2, 0; @p cp.async.cg.shared.global "
        "[%%0], [%%1], 16; }\" :: \"r\"(to), \"l\"(from), \"r\"(static_cast<int>(inside)));");
    w_.next("} else {");
    w_.line(
        "asm volatile(\"{ .reg .pred p; setp.ne.b32 p, %%2, 0; @p cp.async.ca.shared.global "
        "[%%0], [%%1], 8; }\" :: \"r\"(to), \"l\"(from), \"r\"(static_cast<int>(inside)));");
    w_.close();
    w_.line("#else");
    w_.line("if (inside) *static_cast<T*>(__cvta_shared_to_generic(to)) = *from;");
    w_.line("#endif");
    w_.close();
    w_.open("__device__ __forceinline__ void copy_async_commit()");
    w_.line("#if __CUDA_ARCH__ >= 800");
    w_.line("asm volatile(\"cp.async.commit_group;\");");
    w_.line("#endif");
    w_.close();
    // The slot's vector after the wait. The copies, the waits and these reads are volatile
    // asm statements, kept in program order without a memory clobber (which would make the
    // compiler reload and reconvert the launch values after every copy).
    w_.line("template <class T>");
    w_.open("__device__ __forceinline__ T read_stage(unsigned at)");
    w_.line("#if __CUDA_ARCH__ >= 800");
    w_.line("T v;");
    w_.open("if constexpr (sizeof(T) == 16)");
    w_.line(
        "asm volatile(\"ld.shared.v4.u32 {%%0, %%1, %%2, %%3}, [%%4];\" : \"=r\"(v.x), "
        "\"=r\"(v.y), \"=r\"(v.z), \"=r\"(v.w) : \"r\"(at));");
    w_.next("} else {");
    w_.line(
        "asm volatile(\"ld.shared.v2.u32 {%%0, %%1}, [%%2];\" : \"=r\"(v.x), \"=r\"(v.y) : "
        "\"r\"(at));");
    w_.close();
    w_.line("return v;");
    w_.line("#else");
    w_.line("return *static_cast<const T*>(__cvta_shared_to_generic(at));");
    w_.line("#endif");
    w_.close();
    w_.line("// Waits for every committed group but the newest kStages - 1.");
    w_.open("__device__ __forceinline__ void copy_async_wait_all_but_newest()");
    w_.line("#if __CUDA_ARCH__ >= 800");
    w_.line("asm volatile(\"cp.async.wait_group %d;\");", kStages - 1);
    w_.line("#endif");
    w_.close();
    w_.blank();
  }

  void tensor_kernel() {
    const int bindings = layout_.n_inputs + layout_.n_outputs;
    w_.line("constexpr int kRank = %d;", layout_.rank);
    w_.line("constexpr int kBindings = %d;", bindings);
    w_.line("constexpr int kVector = %d;  // elements per vector on the vector path",
            layout_.vector_elements);
    w_.line("constexpr int kUnroll = %d;  // vectors per binding per thread and step",
            layout_.unroll);
    w_.blank();
    tensor_element_function();
    tensor_at_offsets_function();
    if (staged()) copy_async_functions();
    w_.line("}  // namespace");
    w_.blank();
    w_.open(
        format("extern \"C\" __global__ void __launch_bounds__(%d) kf_fused_kernel(const "
               "__grid_constant__ Params p)",
               kBlockThreads));
    dependent_launch_prologue();
    w_.line("const Consts k = make_consts(p);");
    // Items beyond the grid's 65535 rows (large capacities) are taken in turn.
    w_.open("for (long long item = blockIdx.y; item < p.n_items; item += gridDim.y)");
    w_.line("const Item& it = %s[item];", layout_.inline_items ? "p.inline_items" : "p.items");
    w_.line("const long long numel = it.numel;");
    w_.line("char* data[kBindings];");
    w_.line("#pragma unroll");
    w_.line("for (int b = 0; b < kBindings; ++b) data[b] = it.data[b];");
    w_.line("const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;");
    w_.line(
        "const long long first = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;");
    if (layout_.vector_elements > 1) {
      w_.open("if (it.mode == 2)");
      tensor_vector_body();
      w_.next("} else if (it.mode == 1) {");
    } else {
      w_.open("if (it.mode == 1 || it.mode == 2)");
    }
    {
      // contiguous: every binding's offset is the linear index
      w_.open("for (long long i = first; i < numel; i += stride)");
      w_.line("long long off[kBindings];");
      w_.line("#pragma unroll");
      w_.line("for (int b = 0; b < kBindings; ++b) off[b] = i;");
      w_.line("at_offsets(k, data, off);");
      w_.close();
    }
    // Strided: coordinates from the linear index, in 32 bits where the item allows (64-bit
    // division is several times slower), offsets in 64.
    for (const bool narrow : {true, false}) {
      const char* index = narrow ? "unsigned int" : "unsigned long long";
      w_.next(narrow ? "} else if (it.mode == 3) {" : "} else {");
      w_.open("for (long long i = first; i < numel; i += stride)");
      w_.line("long long off[kBindings] = {};");
      w_.line("%s rest = static_cast<%s>(i);", index, index);
      w_.line("#pragma unroll");
      w_.open("for (int d = kRank - 1; d >= 0; --d)");
      w_.line("const %s extent = static_cast<%s>(it.shape[d]);", index, index);
      w_.line("const long long coordinate = static_cast<long long>(rest %% extent);");
      w_.line("rest /= extent;");
      w_.line("#pragma unroll");
      w_.line("for (int b = 0; b < kBindings; ++b) off[b] += coordinate * it.strides[b][d];");
      w_.close();
      w_.line("at_offsets(k, data, off);");
      w_.close();
    }
    w_.close();
    w_.close();
    w_.close();
  }

  // ---- image graphs

  void read(int32_t id) {
    const Node& n = g_.nodes[id];
    const Node& image = g_.nodes[n.args[0]];
    const int pos = image.input.position;
    const ReadInfo& r = n.read;
    w_.line("km::Compute<%s> %s[%d];", dtype_name(n.dtype), var(id).c_str(), n.channels);
    const bool nv12 = image.input.kind == KF_INPUT_NV12;
    const int border_channels = nv12 ? 3 : image.channels;
    const std::string type = nv12 ? std::string("float")
                                  : format("km::ReadCompute<%s, km::interp::%s>",
                                           dtype_name(image.dtype), interp_name(r.interpolation));
    std::vector<std::string> inits;
    for (int c = 0; c < border_channels; ++c) {
      inits.push_back(nv12 ? format("static_cast<float>(p.values[%d])", n.value_offset + c)
                           : format("km::from_value<km::ReadDtype<%s, km::interp::%s>::value>("
                                    "p.values[%d])",
                                    dtype_name(image.dtype), interp_name(r.interpolation),
                                    n.value_offset + c));
    }
    const std::string border = konst(format("b%d", id), type, inits, true);
    if (nv12) {
      w_.line(
          "km::read_nv12_at<km::interp::%s, km::border::%s, %s, km::color_standard::%s, %s>("
          "image%d, sx%d, sy%d, %s, %s);",
          interp_name(r.interpolation), border_name(r.border), keep(r) ? "true" : "false",
          r.color_standard == KF_COLOR_BT709 ? "bt709" : "bt601", r.full_range ? "true" : "false",
          pos, id, id, border.c_str(), var(id).c_str());
    } else {
      w_.line(
          "km::read_image_at<%s, %d, km::interp::%s, km::border::%s, %s>(image%d, sx%d, sy%d, "
          "%s, %s);",
          dtype_name(image.dtype), image.channels, interp_name(r.interpolation),
          border_name(r.border), keep(r) ? "true" : "false", pos, id, id, border.c_str(),
          var(id).c_str());
    }
  }

  // Keep-aspect matters only with a resize (image.hpp ignores it otherwise).
  static bool keep(const ReadInfo& r) {
    return r.keep_aspect_ratio && r.interpolation != KF_INTERP_NONE;
  }

  // The axis sample of each live read along x (column, at `at`) or y (row): `prefix` + id names
  // it.
  void axis_samples(bool x, const char* prefix, const char* at) {
    for (size_t id = 0; id < g_.nodes.size(); ++id) {
      const Node& n = g_.nodes[id];
      if (!live_[id] || n.kind != NodeKind::read_image) continue;
      const int k = g_.nodes[n.args[0]].input.position;
      w_.line(
          "const km::AxisSample %s%zu = km::axis_sample_%c<km::interp::%s, km::border::%s, "
          "%s>(geometry%zu, %s, image%d.%s);",
          prefix, id, x ? 'x' : 'y', interp_name(n.read.interpolation), border_name(n.read.border),
          keep(n.read) ? "true" : "false", id, at, k, x ? "width" : "height");
    }
  }

  // Every live node of the pixel and the stores of its outputs (fast: fast paths, then stores
  // only if their check passed).
  void pixel(bool fast) {
    fast_ = fast ? "true" : "false";
    for (size_t id = 0; id < g_.nodes.size(); ++id) {
      if (live_[id]) node(static_cast<int32_t>(id));
    }
    fast_ = "false";
    if (fast) w_.open("if (ok.passed())");
    for (size_t o = 0; o < g_.outputs.size(); ++o) {
      const Node& n = g_.nodes[g_.outputs[o].node];
      const char* d = dtype_name(n.dtype);
      for (int c = 0; c < n.channels; ++c) {
        w_.line("km::store<%s>(out%zu, column%zu + row%zu + %d * out%zu_c, %s);", d, o, o, o, c, o,
                target(g_.outputs[o].node, c).c_str());
      }
    }
    if (fast) w_.close();
  }

  // The first statements of the kernel: on sm_90 it is launched as a programmatic dependent
  // launch (cuda_program.cpp), so it may start while the kernel before it in the stream is still
  // running and must wait for that kernel's results before it touches global memory (the item
  // table included); it then lets the next kernel start as early.
  void dependent_launch_prologue() {
    w_.line("#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900");
    w_.line("asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");");
    w_.line("asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\");");
    w_.line("#endif");
  }

  void image_kernel() {
    w_.line("}  // namespace");
    w_.blank();
    w_.open(
        format("extern \"C\" __global__ void __launch_bounds__(%d) kf_fused_kernel(const "
               "__grid_constant__ Params p)",
               kBlockThreads));
    dependent_launch_prologue();
    w_.line("const Consts k = make_consts(p);");
    w_.open("for (long long item = blockIdx.z; item < p.n_items; item += gridDim.z)");
    if (layout_.compact) {
      w_.line("const bool uniform = p.items == nullptr;");
      w_.line("const Item& it = uniform ? p.common : p.items[item];");
      w_.line("const int* const crop = uniform ? p.crops[item] : nullptr;");
    } else {
      w_.line("const Item& it = %s[item];", layout_.inline_items ? "p.inline_items" : "p.items");
    }
    w_.line("const int out_h = static_cast<int>(it.out_h), out_w = static_cast<int>(it.out_w);");
    std::vector<bool> input_read(g_.inputs.size(), false);
    for (size_t id = 0; id < g_.nodes.size(); ++id) {
      if (live_[id] && g_.nodes[id].kind == NodeKind::read_image) {
        input_read[g_.nodes[g_.nodes[id].args[0]].input.position] = true;
      }
    }
    for (int32_t input_id : g_.inputs) {
      const Node& in = g_.nodes[input_id];
      const int k = in.input.position;
      if (!input_read[k]) continue;
      if (in.input.kind == KF_INPUT_NV12) {
        // [H * 3 / 2, W]: the frame is H rows of luma.
        w_.line(
            "const km::ImageView image%d = {it.in_data[%d], static_cast<int>(it.in_shape[%d][0] "
            "* 2 / 3), static_cast<int>(it.in_shape[%d][1]), it.in_strides[%d][0], "
            "it.in_strides[%d][1], 0};",
            k, k, k, k, k, k);
      } else {
        w_.line(
            "const km::ImageView image%d = {it.in_data[%d], static_cast<int>(it.in_shape[%d][0]), "
            "static_cast<int>(it.in_shape[%d][1]), it.in_strides[%d][0], it.in_strides[%d][1], "
            "it.in_strides[%d][2]};",
            k, k, k, k, k, k, k);
      }
    }
    bool any_crop = false;
    for (size_t id = 0; id < g_.nodes.size(); ++id)
      any_crop = any_crop ||
                 (live_[id] && g_.nodes[id].kind == NodeKind::read_image && g_.nodes[id].read.crop);
    if (any_crop) {
      if (layout_.compact) {
        w_.line("const int crop_x = crop ? crop[0] : static_cast<int>(it.crop_x);");
        w_.line("const int crop_y = crop ? crop[1] : static_cast<int>(it.crop_y);");
        w_.line("const int crop_w = crop ? crop[2] : static_cast<int>(it.crop_w);");
        w_.line("const int crop_h = crop ? crop[3] : static_cast<int>(it.crop_h);");
      } else {
        w_.line(
            "const int crop_x = static_cast<int>(it.crop_x), crop_y = "
            "static_cast<int>(it.crop_y), crop_w = static_cast<int>(it.crop_w), crop_h = "
            "static_cast<int>(it.crop_h);");
      }
    }
    for (size_t id = 0; id < g_.nodes.size(); ++id) {
      const Node& n = g_.nodes[id];
      if (!live_[id] || n.kind != NodeKind::read_image) continue;
      const int k = g_.nodes[n.args[0]].input.position;
      if (n.read.crop) {
        w_.line(
            "const km::ReadGeometry geometry%zu = km::make_read_geometry(crop_x, crop_y, crop_w, "
            "crop_h, out_w, out_h, %s);",
            id, n.read.keep_aspect_ratio ? "true" : "false");
      } else {
        w_.line(
            "const km::ReadGeometry geometry%zu = km::make_read_geometry(0, 0, image%d.width, "
            "image%d.height, out_w, out_h, %s);",
            id, k, k, n.read.keep_aspect_ratio ? "true" : "false");
      }
    }
    for (size_t o = 0; o < g_.outputs.size(); ++o) {
      if (layout_.compact) {
        w_.line("char* const out%zu = it.out_data[%zu] + (uniform ? item * p.out_step[%zu] : 0);",
                o, o, o);
      } else {
        w_.line("char* const out%zu = it.out_data[%zu];", o, o);
      }
      w_.line(
          "const long long out%zu_y = it.out_strides[%zu][0], out%zu_x = it.out_strides[%zu][1], "
          "out%zu_c = it.out_strides[%zu][2];",
          o, o, o, o, o, o);
    }
    // Columns outer, a warp's 32 lanes on 32 neighbouring columns (blockDim.x is 32), warp-uniform
    // loops: a lane's column (and its samples) stays while the warp walks rows. Each lane
    // computes the row samples of one of the warp's next 32 rows; the warp takes them in turn
    // by shuffles (a row's sample is the same for every lane).
    w_.open(
        "for (int x_first = blockIdx.x * blockDim.x; x_first < out_w; x_first += gridDim.x * "
        "blockDim.x)");
    w_.line("const int x = x_first + static_cast<int>(threadIdx.x);");
    w_.line("const bool in_row = x < out_w;");
    axis_samples(true, "sx", "in_row ? x : out_w - 1");
    for (size_t o = 0; o < g_.outputs.size(); ++o)
      w_.line("const long long column%zu = x * out%zu_x;", o, o);
    w_.line("const long long y_step = static_cast<long long>(gridDim.y) * blockDim.y;");
    w_.open(
        "for (long long y_first = blockIdx.y * blockDim.y + threadIdx.y; y_first < out_h; "
        "y_first += 32 * y_step)");
    w_.line("const long long lane_row = y_first + threadIdx.x * y_step;");
    axis_samples(false, "lane_sy", "static_cast<int>(lane_row < out_h ? lane_row : out_h - 1)");
    w_.line(
        "const int rows = static_cast<int>((out_h - y_first + y_step - 1) / y_step < 32 ? "
        "(out_h - y_first + y_step - 1) / y_step : 32);");
    w_.open("for (int j = 0; j < rows; ++j)");
    w_.line("const int y = static_cast<int>(y_first + j * y_step);");
    for (size_t id = 0; id < g_.nodes.size(); ++id) {
      const Node& n = g_.nodes[id];
      if (!live_[id] || n.kind != NodeKind::read_image) continue;
      w_.line("const km::AxisSample sy%zu = km::shuffle_sample<km::interp::%s>(lane_sy%zu, j);", id,
              interp_name(n.read.interpolation), id);
    }
    w_.line("if (!in_row) continue;");
    for (size_t o = 0; o < g_.outputs.size(); ++o)
      w_.line("const long long row%zu = y * out%zu_y;", o, o);
    if (has_fast_) {
      w_.line("km::FastCheck ok;");
      w_.open("");
      pixel(true);
      w_.close();
      w_.open("if (!ok.passed())");
      pixel(false);
      w_.close();
    } else {
      w_.line("km::FastCheck ok;  // unused: no fast path");
      pixel(false);
    }
    w_.close();
    w_.close();
    w_.close();
    w_.close();
    w_.close();
  }

  const Graph& g_;
  const ParamLayout layout_;
  std::vector<bool> live_;
  struct Konst {
    std::string name, type;
    std::vector<std::string> inits;
    bool array;
  };
  std::vector<Konst> consts_;   // the Consts fields, in order of first use
  bool has_fast_ = false;       // some live node has a fast path
  const char* fast_ = "false";  // the Fast argument node() writes: kFast, true or false
  Writer w_;
};

}  // namespace

std::string generate_cuda_source(const Graph& g, const kf_compile_options_t& options,
                                 const DeviceBalance& balance) {
  KF_REQUIRE_ARG(!g.outputs.empty(), "the graph has no outputs: mark one with kf_graph_output()");
  return Generator(g, options, balance).generate();
}

}  // namespace fusion
}  // namespace kf
