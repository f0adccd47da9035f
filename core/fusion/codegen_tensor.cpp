// Code generation for tensor graphs (codegen.hpp): blockIdx.y is the item, a grid-stride loop
// over its elements in one of four modes chosen per item at launch (16-byte vectors, kUnroll of
// them per binding and thread in flight; contiguous; strided/broadcast in 32- or 64-bit
// coordinates).
#include <string>
#include <utility>

#include "core/fusion/codegen.hpp"

namespace kf {
namespace fusion {
namespace codegen {

// element<kFast>(values, in..., out..., ok): the graph for one element.
void Generator::tensor_element_function() {
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
void Generator::evaluate(const std::string& args) {
  w_.line("km::FastCheck ok;");
  w_.line("element<%s>(%s, ok);", has_fast_ ? "true" : "false", args.c_str());
  if (has_fast_) w_.line("if (!ok.passed()) element<false>(%s, ok);", args.c_str());
}

// Loads the inputs at off[], evaluates, stores the outputs at off[].
void Generator::tensor_at_offsets_function() {
  const int ni = layout_.n_inputs;
  w_.open(
      "__device__ __forceinline__ void at_offsets(const Consts& k, char* const "
      "(&data)[kBindings], const long long (&off)[kBindings])");
  std::string args = "k";
  for (int32_t id : g_.inputs) {
    const int pos = g_.nodes[id].input.position;
    const char* d = dtype_name(g_.nodes[id].dtype);
    if (live_[id]) {
      w_.line("const km::Compute<%s> in%d = km::load<%s>(data[%d], off[%d]);", d, pos, d, pos, pos);
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
std::pair<const char*, int> Generator::vector_type(int bytes) {
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
bool Generator::staged() const {
  if (!layout_.persistent || layout_.vector_elements < 2) return false;
  size_t bytes = 0;
  for (int b = 0; b < layout_.n_inputs; ++b) {
    if (live_[g_.inputs[b]]) {
      bytes += static_cast<size_t>(layout_.vector_elements * layout_.element_bytes[b]);
    }
  }
  return bytes > 0 && bytes * kStages * kBlockThreads <= kStageBudget;
}

void Generator::tensor_vector_body() {
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
void Generator::copy_async_functions() {
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

void Generator::tensor_kernel() {
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
  w_.line("const long long first = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;");
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

}  // namespace codegen
}  // namespace fusion
}  // namespace kf
