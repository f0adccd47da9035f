// Code generation: one CUDA kernel for a whole graph, written against the shared functors of
// core/math/fusion_ops.hpp and core/math/image.hpp (the same code the CPU executor runs).
//
// The kernel is `extern "C" __global__ void kf_fused_kernel(const __grid_constant__ Params p)`,
// Params as core/fusion/kernel_params.hpp lays it out. Nothing but structure reaches the source:
// launch values are read from p.values, tensors and rectangles from the item table, so two graphs
// that differ only in values share one kernel. The text depends only on the graph and the
// options (no pointers, no hashes), so it can be hashed for the disk cache.
//
// Tensor graphs: blockIdx.y is the item, a grid-stride loop over its elements in one of three
// modes chosen per item at launch (16-byte vectors, contiguous, strided/broadcast).
// Image graphs: blockIdx.z is the item, a 2-D grid-stride loop over the item's output pixels;
// each pixel evaluates every node for all its channels and writes (y, x, c) of each output.
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
    line("%s {", head.c_str());
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
  Generator(const Graph& g, const kf_compile_options_t& options)
      : g_(g), layout_(param_layout(g, options)), live_(g.nodes.size(), false) {
    for (const Output& o : g.outputs) mark_live(o.node);
  }

  std::string generate() {
    preamble();
    if (g_.image) {
      image_kernel();
    } else {
      tensor_kernel();
    }
    return w_.take();
  }

 private:
  void mark_live(int32_t id) {
    if (live_[id]) return;
    live_[id] = true;
    const Node& n = g_.nodes[id];
    for (int32_t i = 0; i < n.n_args; ++i) mark_live(n.args[i]);
  }

  std::string var(int32_t id) const { return "v" + std::to_string(id); }

  // Channel c of node id's value, in dtype `as` (the operand dtype it meets): weak constants
  // become from_value of their launch value; 1-channel values broadcast.
  std::string operand(int32_t id, int c, kf_dtype_t as) const {
    const Node& n = g_.nodes[id];
    const int channel = n.channels == 1 ? 0 : c;
    if (n.kind == NodeKind::constant) {
      return format("km::from_value<%s>(values[%d])", dtype_name(as), n.value_offset + channel);
    }
    if (!g_.image) return var(id);
    return format("%s[%d]", var(id).c_str(), channel);
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
    w_.line("long long n_items;");
    w_.line("const Item* items;  // the item table in device memory, when not inline");
    if (layout_.inline_items) w_.line("Item inline_items[%d];", layout_.capacity);
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
          assign(c, format("km::unary<km::unary_op::%s, %s>(%s)", unary_name(n.op), dtype_name(x),
                           operand(n.args[0], c, x).c_str()));
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
        const Node& a = g_.nodes[n.args[0]];
        const Node& b = g_.nodes[n.args[1]];
        const kf_dtype_t t = a.weak ? b.dtype : a.dtype;  // the operands' common dtype
        const bool comparison = n.op >= KF_BINARY_EQ;
        for (int c = 0; c < channels; ++c) {
          assign(c, format("km::%s<km::binary_op::%s, %s>(%s, %s)",
                           comparison ? "compare" : "binary", binary_name(n.op), dtype_name(t),
                           operand(n.args[0], c, t).c_str(), operand(n.args[1], c, t).c_str()));
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
        const std::string alpha =
            n.value_count > 0 ? format("values[%d]", n.value_offset) : std::string("0.0");
        w_.line("km::color_convert<km::color::%s, %s>(%s, %s, %s);", color_name(n.op),
                dtype_name(x.dtype), var(n.args[0]).c_str(), alpha.c_str(), var(id).c_str());
        return;
      }
      case NodeKind::normalize: {
        declare();
        const kf_dtype_t x = g_.nodes[n.args[0]].dtype;
        for (int c = 0; c < channels; ++c) {
          assign(c, format("km::normalize<%s>(%s, values[%d], values[%d], values[%d])",
                           dtype_name(x), operand(n.args[0], c, x).c_str(), n.value_offset,
                           n.value_offset + 1 + c, n.value_offset + 1 + channels + c));
        }
        return;
      }
    }
    fail(KF_ERROR_INTERNAL, "codegen: unknown node kind %d", static_cast<int>(n.kind));
  }

  // The launch values, copied into registers when there are few: the compiler then hoists their
  // conversions out of the element loops (a pointer into the parameter block may alias the
  // outputs' stores as far as it can tell).
  void values_prologue() {
    if (layout_.n_values == 0 || layout_.n_values > 64) {
      w_.line("const double* values = p.values;");
      return;
    }
    w_.line("double values[%d];", layout_.n_values);
    w_.line("#pragma unroll");
    w_.line("for (int i = 0; i < %d; ++i) values[i] = p.values[i];", layout_.n_values);
  }

  // ---- tensor graphs

  // element(values, in..., out...): the graph for one element.
  void tensor_element_function() {
    std::string params = "const double* values";
    for (int32_t id : g_.inputs) {
      params += format(", const km::Compute<%s> in%d", dtype_name(g_.nodes[id].dtype),
                       g_.nodes[id].input.position);
    }
    for (size_t o = 0; o < g_.outputs.size(); ++o) {
      params +=
          format(", km::Compute<%s>& out%zu", dtype_name(g_.nodes[g_.outputs[o].node].dtype), o);
    }
    w_.line("// The whole graph for one element.");
    w_.open((format("__device__ __forceinline__ void element(%s)", params.c_str())));
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
    for (size_t o = 0; o < g_.outputs.size(); ++o) {
      w_.line("out%zu = %s;", o, var(g_.outputs[o].node).c_str());
    }
    w_.close();
    w_.blank();
  }

  // Loads the inputs at off[], evaluates, stores the outputs at off[].
  void tensor_at_offsets_function() {
    const int ni = layout_.n_inputs;
    w_.open(
        "__device__ __forceinline__ void at_offsets(const double* values, char* const "
        "(&data)[kBindings], const long long (&off)[kBindings])");
    std::string args = "values";
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
    w_.line("element(%s);", args.c_str());
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
    if (bytes == 4) return {"unsigned int", 1};
    return {"unsigned short", 1};
  }

  // The vector path: kVector consecutive elements per binding moved as whole vectors (16 bytes
  // wherever the dtype allows).
  void tensor_vector_body() {
    const int ni = layout_.n_inputs, no = layout_.n_outputs;
    const int e = layout_.vector_elements;
    w_.line("const long long groups = numel / kVector;");
    w_.open("for (long long g = first; g < groups; g += stride)");
    for (int b = 0; b < ni; ++b) {
      if (!live_[g_.inputs[b]]) continue;  // no output uses it: never read
      const auto v = vector_type(e * layout_.element_bytes[b]);
      w_.line("%s raw%d[%d];", v.first, b, v.second);
      w_.line("#pragma unroll");
      w_.line(
          "for (int k = 0; k < %d; ++k) raw%d[k] = reinterpret_cast<const %s*>(data[%d])[g "
          "* %d + k];",
          v.second, b, v.first, b, v.second);
    }
    for (int o = 0; o < no; ++o) {
      const auto v = vector_type(e * layout_.element_bytes[ni + o]);
      w_.line("%s raw%d[%d];", v.first, ni + o, v.second);
    }
    w_.line("#pragma unroll");
    w_.open("for (int e = 0; e < kVector; ++e)");
    std::string args = "values";
    for (int32_t id : g_.inputs) {
      const int pos = g_.nodes[id].input.position;
      const char* d = dtype_name(g_.nodes[id].dtype);
      if (live_[id]) {
        w_.line("const km::Compute<%s> in%d = km::load<%s>(raw%d, e);", d, pos, d, pos);
      } else {
        w_.line("const km::Compute<%s> in%d = {};", d, pos);
      }
      args += format(", in%d", pos);
    }
    for (int o = 0; o < no; ++o) {
      w_.line("km::Compute<%s> out%d;", dtype_name(g_.nodes[g_.outputs[o].node].dtype), o);
      args += format(", out%d", o);
    }
    w_.line("element(%s);", args.c_str());
    for (int o = 0; o < no; ++o) {
      w_.line("km::store<%s>(raw%d, e, out%d);", dtype_name(g_.nodes[g_.outputs[o].node].dtype),
              ni + o, o);
    }
    w_.close();
    for (int o = 0; o < no; ++o) {
      const auto v = vector_type(e * layout_.element_bytes[ni + o]);
      w_.line("#pragma unroll");
      w_.line(
          "for (int k = 0; k < %d; ++k) reinterpret_cast<%s*>(data[%d])[g * %d + k] = "
          "raw%d[k];",
          v.second, v.first, ni + o, v.second, ni + o);
    }
    w_.close();
    w_.open("for (long long i = groups * kVector + first; i < numel; i += stride)");
    w_.line("long long off[kBindings];");
    w_.line("#pragma unroll");
    w_.line("for (int b = 0; b < kBindings; ++b) off[b] = i;");
    w_.line("at_offsets(values, data, off);");
    w_.close();
  }

  void tensor_kernel() {
    const int bindings = layout_.n_inputs + layout_.n_outputs;
    w_.line("constexpr int kRank = %d;", layout_.rank);
    w_.line("constexpr int kBindings = %d;", bindings);
    w_.line("constexpr int kVector = %d;  // elements per thread and step on the vector path",
            layout_.vector_elements);
    w_.blank();
    tensor_element_function();
    tensor_at_offsets_function();
    w_.line("}  // namespace");
    w_.blank();
    w_.open(
        "extern \"C\" __global__ void __launch_bounds__(256) kf_fused_kernel(const "
        "__grid_constant__ Params p)");
    values_prologue();
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
      w_.line("at_offsets(values, data, off);");
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
      w_.line("at_offsets(values, data, off);");
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
    if (image.input.kind == KF_INPUT_NV12) {
      w_.line(
          "km::read_nv12<km::interp::%s, km::border::%s, %s, km::color_standard::%s, %s>("
          "image%d, geometry%d, x, y, values + %d, %s);",
          interp_name(r.interpolation), border_name(r.border),
          r.keep_aspect_ratio ? "true" : "false",
          r.color_standard == KF_COLOR_BT709 ? "bt709" : "bt601", r.full_range ? "true" : "false",
          pos, id, n.value_offset, var(id).c_str());
    } else {
      w_.line(
          "km::read_image<%s, %d, km::interp::%s, km::border::%s, %s>(image%d, geometry%d, x, "
          "y, values + %d, %s);",
          dtype_name(image.dtype), image.channels, interp_name(r.interpolation),
          border_name(r.border), r.keep_aspect_ratio ? "true" : "false", pos, id, n.value_offset,
          var(id).c_str());
    }
  }

  void image_kernel() {
    w_.line("}  // namespace");
    w_.blank();
    w_.open(
        "extern \"C\" __global__ void __launch_bounds__(256) kf_fused_kernel(const "
        "__grid_constant__ Params p)");
    values_prologue();
    w_.open("for (long long item = blockIdx.z; item < p.n_items; item += gridDim.z)");
    w_.line("const Item& it = %s[item];", layout_.inline_items ? "p.inline_items" : "p.items");
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
    for (size_t id = 0; id < g_.nodes.size(); ++id) {
      const Node& n = g_.nodes[id];
      if (!live_[id] || n.kind != NodeKind::read_image) continue;
      const int k = g_.nodes[n.args[0]].input.position;
      if (n.read.crop) {
        w_.line(
            "const km::ReadGeometry geometry%zu = "
            "km::make_read_geometry(static_cast<int>(it.crop_x), "
            "static_cast<int>(it.crop_y), static_cast<int>(it.crop_w), "
            "static_cast<int>(it.crop_h), out_w, out_h, %s);",
            id, n.read.keep_aspect_ratio ? "true" : "false");
      } else {
        w_.line(
            "const km::ReadGeometry geometry%zu = km::make_read_geometry(0, 0, image%d.width, "
            "image%d.height, out_w, out_h, %s);",
            id, k, k, n.read.keep_aspect_ratio ? "true" : "false");
      }
    }
    for (size_t o = 0; o < g_.outputs.size(); ++o) {
      w_.line("char* const out%zu = it.out_data[%zu];", o, o);
      w_.line(
          "const long long out%zu_y = it.out_strides[%zu][0], out%zu_x = it.out_strides[%zu][1], "
          "out%zu_c = it.out_strides[%zu][2];",
          o, o, o, o, o, o);
    }
    w_.open(
        "for (int y = blockIdx.y * blockDim.y + threadIdx.y; y < out_h; y += gridDim.y * "
        "blockDim.y)");
    w_.open(
        "for (int x = blockIdx.x * blockDim.x + threadIdx.x; x < out_w; x += gridDim.x * "
        "blockDim.x)");
    for (size_t id = 0; id < g_.nodes.size(); ++id) {
      if (live_[id]) node(static_cast<int32_t>(id));
    }
    for (size_t o = 0; o < g_.outputs.size(); ++o) {
      const Node& n = g_.nodes[g_.outputs[o].node];
      const char* d = dtype_name(n.dtype);
      w_.line("const long long base%zu = y * out%zu_y + x * out%zu_x;", o, o, o);
      for (int c = 0; c < n.channels; ++c) {
        w_.line("km::store<%s>(out%zu, base%zu + %d * out%zu_c, %s);", d, o, o, c, o,
                target(g_.outputs[o].node, c).c_str());
      }
    }
    w_.close();
    w_.close();
    w_.close();
    w_.close();
  }

  const Graph& g_;
  const ParamLayout layout_;
  std::vector<bool> live_;
  Writer w_;
};

}  // namespace

std::string generate_cuda_source(const Graph& g, const kf_compile_options_t& options) {
  KF_REQUIRE_ARG(!g.outputs.empty(), "the graph has no outputs: mark one with kf_graph_output()");
  return Generator(g, options).generate();
}

}  // namespace fusion
}  // namespace kf
