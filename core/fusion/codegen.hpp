// The fusion engine's CUDA source generator (see codegen.cpp for what it writes). One class
// over three files: codegen.cpp (the graph's nodes, launch values and the source's preamble),
// codegen_tensor.cpp (the kernel of tensor graphs) and codegen_image.cpp (of image graphs).
// Outside them only generate_cuda_source (program.hpp) is used.
#pragma once

#include <cstdarg>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/fusion/kernel_params.hpp"
#include "core/fusion/program.hpp"
#include "core/runtime/error.hpp"

namespace kf {
namespace fusion {
namespace codegen {

// The generated source's name of a dtype: "km::dtype::f32".
const char* dtype_name(kf_dtype_t d);

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

// One kernel's source for a graph: Generator(g, options, balance).generate().
class Generator {
 public:
  Generator(const Graph& g, const kf_compile_options_t& options, const DeviceBalance& balance);
  std::string generate();

 private:
  // codegen.cpp: liveness, operands and launch values, the statements of each node, the
  // source's preamble (Item, Params) and its Consts.
  void mark_live(int32_t id);
  static bool computed_in_float(kf_dtype_t d);
  kf_dtype_t binary_dtype(const Node& n) const;
  bool fast_path(const Node& n) const;
  std::string var(int32_t id) const { return "v" + std::to_string(id); }
  std::string operand(int32_t id, int c, kf_dtype_t as);
  std::string launch_value(int slot, kf_dtype_t as) const;
  std::string target(int32_t id, int c) const;
  void preamble();
  void item_struct();
  void node(int32_t id);
  std::string konst(const std::string& name, const std::string& type,
                    const std::vector<std::string>& inits, bool array = false);
  static const char* dtype_tag(kf_dtype_t d);
  void consts_struct();
  void dependent_launch_prologue();

  // codegen_tensor.cpp
  static constexpr int kStages = 3;                  // of the staged vector path's buffer
  static constexpr size_t kStageBudget = 24 * 1024;  // its shared bytes per block
  void tensor_element_function();
  void evaluate(const std::string& args);
  void tensor_at_offsets_function();
  static std::pair<const char*, int> vector_type(int bytes);
  bool staged() const;
  void tensor_vector_body();
  void copy_async_functions();
  void tensor_kernel();

  // codegen_image.cpp
  void read(int32_t id);
  static bool keep(const ReadInfo& r);
  void axis_samples(bool x, const char* prefix, const char* at);
  void pixel(bool fast);
  void image_kernel();

  struct Konst {
    std::string name, type;
    std::vector<std::string> inits;
    bool array;
  };
  const Graph& g_;
  const ParamLayout layout_;
  std::vector<bool> live_;
  std::vector<Konst> consts_;   // the Consts fields, in order of first use
  bool has_fast_ = false;       // some live node has a fast path
  const char* fast_ = "false";  // the Fast argument node() writes: kFast, true or false
  Writer w_;
};

}  // namespace codegen
}  // namespace fusion
}  // namespace kf
