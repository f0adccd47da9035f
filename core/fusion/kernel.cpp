// Compiled kernels: kf_graph_compile (through the context's kernel cache), the generated source
// and ahead-of-time NVRTC entries, and the kernel handle's lifetime and queries.
#include "core/fusion/kernel.hpp"

#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/fusion/cuda_program.hpp"
#include "core/fusion/graph_builder.hpp"
#include "core/fusion/kernel_cache.hpp"
#include "core/runtime/context.hpp"
#include "core/runtime/cuda/cuda_api.hpp"
#include "core/runtime/error.hpp"
#include "core/runtime/handle.hpp"
#include "kernel_fusion/graph.h"

namespace kf {
namespace fusion {
namespace {

// Capacities past this are refused outright (CUDA kernels also check their parameter block).
constexpr int32_t kMaxItems = 1 << 20;

const kf_fused_kernel_t* checked_kernel(const kf_fused_kernel_t* k) { return checked(k, "k"); }

kf_compile_options_t read_options(const kf_compile_options_t* options) {
  kf_compile_options_t o = KF_COMPILE_OPTIONS_INIT;
  if (options == nullptr) return o;
  KF_REQUIRE_ARG(options->struct_size >= sizeof(kf_compile_options_t),
                 "options->struct_size is %zu; initialise the options with "
                 "KF_COMPILE_OPTIONS_INIT (sizeof(kf_compile_options_t) is %zu)",
                 options->struct_size, sizeof(kf_compile_options_t));
  require_unknown_tail_zero(options, options->struct_size, sizeof(kf_compile_options_t), "options");
  KF_REQUIRE_ARG(options->max_items >= 1 && options->max_items <= kMaxItems,
                 "options->max_items is %d; the batch capacity is 1 to %d items",
                 options->max_items, kMaxItems);
  constexpr uint32_t known = KF_COMPILE_NO_DISK_CACHE | KF_COMPILE_NO_MEMORY_CACHE;
  KF_REQUIRE_ARG((options->flags & ~known) == 0,
                 "options->flags is 0x%x; only KF_COMPILE_NO_DISK_CACHE (1) and "
                 "KF_COMPILE_NO_MEMORY_CACHE (2) are defined",
                 options->flags);
  o.max_items = options->max_items;
  o.flags = options->flags;
  return o;
}

// Copies source (NUL-terminated) to buffer; *length is set even when buffer is too small.
void copy_source(const std::string& source, char* buffer, size_t capacity, size_t* length) {
  KF_REQUIRE_ARG(length != nullptr, "length is NULL");
  const size_t needed = source.size() + 1;
  if (buffer != nullptr) {
    if (capacity < needed) {
      *length = needed;
      fail(KF_ERROR_INVALID_ARGUMENT,
           "buffer holds %zu bytes but the source needs %zu (*length is set to that; pass "
           "buffer NULL to ask for the length alone)",
           capacity, needed);
    }
    std::memcpy(buffer, source.c_str(), needed);
  }
  *length = needed;
}

// The generated source of a kernel: made on first request (CPU contexts have none).
const std::string& kernel_source(const kf_fused_kernel_t* k) {
  std::call_once(k->source_once, [k] {
    if (k->ctx->is_cuda())
      k->source = generate_cuda_source(k->graph(), k->options, device_balance(k->ctx));
  });
  return k->source;
}

kf_fused_kernel_t* compile(kf_graph_t* handle, const kf_compile_options_t* options) {
  const auto start = std::chrono::steady_clock::now();
  const kf_graph_t* g = checked_graph(handle, "g");
  const kf_compile_options_t o = read_options(options);
  require_outputs(g->graph);
  kf_context_t* ctx = g->ctx;

  auto k = std::make_unique<kf_fused_kernel_t>();
  k->ctx = ctx;
  std::shared_ptr<const StructureKey> key;
  freeze(g, o, &k->frozen, &key);
  k->options = o;
  k->structure_hash = key->hash;

  // What a build needs, behind one pointer: the builder then fits std::function's inline
  // storage, and a cache hit allocates nothing for it.
  struct BuildInput {
    kf_context_t* ctx;
    const Graph& graph;
    const kf_compile_options_t& options;
    std::string source;  // set when the build generates it
  } in{ctx, k->graph(), o, std::string()};
  auto build = [&in](kf_kernel_origin_t* origin) {
    if (!in.ctx->is_cuda()) {
      if (origin != nullptr) *origin = KF_KERNEL_COMPILED;
      return make_cpu_program(in.graph, in.options);
    }
    activate(in.ctx);
    const DeviceBalance balance = device_balance(in.ctx);
    in.source = generate_cuda_source(in.graph, in.options, balance);
    return make_cuda_program(in.ctx, in.graph, in.options, balance, in.source, origin);
  };
  kf_kernel_origin_t origin = KF_KERNEL_COMPILED;
  k->program = (o.flags & KF_COMPILE_NO_MEMORY_CACHE) != 0
                   ? build(&origin)
                   : kernel_cache(ctx).get_or_build(key, build, &origin);
  KF_REQUIRE(k->program != nullptr, KF_ERROR_INTERNAL, "the backend built no program");
  if (!in.source.empty()) std::call_once(k->source_once, [&] { k->source = std::move(in.source); });
  k->origin = origin;
  k->compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();

  std::lock_guard<std::mutex> lock(ctx->mutex);
  ctx->fused_kernels.insert(k.get());
  try {
    register_handle(k.get(), HandleKind::fused_kernel);
  } catch (...) {
    ctx->fused_kernels.erase(k.get());
    throw;
  }
  return k.release();
}

}  // namespace
}  // namespace fusion

void delete_fused_kernel(kf_fused_kernel_t* k) noexcept { destroy_handle_object(k); }

}  // namespace kf

extern "C" {

kf_result_t kf_graph_compile(kf_graph_t* g, const kf_compile_options_t* options,
                             kf_fused_kernel_t** out) {
  return kf::api_call([&] {
    KF_REQUIRE_ARG(out != nullptr, "out is NULL");
    *out = kf::fusion::compile(g, options);
  });
}

kf_result_t kf_graph_get_source(kf_graph_t* g, const kf_compile_options_t* options, char* buffer,
                                size_t capacity, size_t* length) {
  return kf::api_call([&] {
    const kf_graph_t* graph = kf::fusion::checked_graph(g, "g");
    KF_REQUIRE_ARG(length != nullptr, "length is NULL");
    const kf_compile_options_t o = kf::fusion::read_options(options);
    kf::fusion::require_outputs(graph->graph);
    kf::fusion::copy_source(
        kf::fusion::generate_cuda_source(graph->graph, o, kf::fusion::device_balance(graph->ctx)),
        buffer, capacity, length);
  });
}

kf_result_t kf_graph_compile_for_arch(kf_graph_t* g, const kf_compile_options_t* options,
                                      int32_t sm, size_t* cubin_bytes, kf_kernel_origin_t* origin) {
  return kf::api_call([&] {
    const kf_graph_t* graph = kf::fusion::checked_graph(g, "g");
    const kf_compile_options_t o = kf::fusion::read_options(options);
    kf::fusion::require_outputs(graph->graph);
    // The generated kernels use sm_80's instructions (max.NaN, cvt.rn.bf16x2 and the like), as
    // the library's own kernels do.
    KF_REQUIRE_ARG(sm >= 80,
                   "sm is %d; give a compute capability as major * 10 + minor, 80 or "
                   "more (e.g. 80, 90): the generated kernels need sm_80",
                   sm);
    const std::string source =
        kf::fusion::generate_cuda_source(graph->graph, o, kf::fusion::device_balance(graph->ctx));
    kf_kernel_origin_t from = KF_KERNEL_COMPILED;
    const std::vector<char> cubin =
        kf::fusion::compile_for_arch(source, sm, (o.flags & KF_COMPILE_NO_DISK_CACHE) == 0, &from);
    if (cubin_bytes != nullptr) *cubin_bytes = cubin.size();
    if (origin != nullptr) *origin = from;
  });
}

kf_result_t kf_fused_kernel_get_source(const kf_fused_kernel_t* k, char* buffer, size_t capacity,
                                       size_t* length) {
  return kf::api_call([&] {
    kf::fusion::checked_kernel(k);
    KF_REQUIRE_ARG(length != nullptr, "length is NULL");
    kf::fusion::copy_source(kf::fusion::kernel_source(k), buffer, capacity, length);
  });
}

kf_result_t kf_fused_kernel_destroy(kf_fused_kernel_t* k) {
  return kf::api_call([&] {
    if (k == nullptr) return;
    kf::fusion::checked_kernel(k);
    kf_context_t* ctx = k->ctx;
    kf::unregister_handle(k);
    {
      std::lock_guard<std::mutex> lock(ctx->mutex);
      ctx->fused_kernels.erase(k);
      // A CUDA program held by this kernel alone (KF_COMPILE_NO_MEMORY_CACHE) unloads its module
      // with the kernel, and unloading a module under a running launch is undefined: let the
      // launches already enqueued finish first (the streams being captured are left alone: a
      // graph that captured a launch of the program holds it, kf_fused_kernel_launch). Cached
      // programs live until the context goes.
      if (ctx->is_cuda() && k->program.use_count() == 1) {
        kf::activate(ctx);
        try {
          kf::synchronize_locked(ctx);
        } catch (const kf::Error&) {
          // A failed launch leaves nothing running that could use the module.
        }
      }
    }
    kf::delete_fused_kernel(k);
  });
}

kf_result_t kf_fused_kernel_get_info(const kf_fused_kernel_t* k, kf_fused_kernel_info_t* info) {
  return kf::api_call([&] {
    kf::fusion::checked_kernel(k);
    KF_REQUIRE_ARG(info != nullptr, "info is NULL");
    KF_REQUIRE(info->struct_size >= sizeof(kf_fused_kernel_info_t), KF_ERROR_VERSION_MISMATCH,
               "info->struct_size is %zu; set it to sizeof(kf_fused_kernel_info_t) (%zu)",
               info->struct_size, sizeof(kf_fused_kernel_info_t));
    kf_fused_kernel_info_t facts{};
    facts.struct_size = info->struct_size;
    facts.origin = k->origin;
    facts.compile_ms = k->compile_ms;
    facts.n_inputs = static_cast<int32_t>(k->graph().inputs.size());
    facts.n_outputs = static_cast<int32_t>(k->graph().outputs.size());
    facts.max_items = k->options.max_items;
    facts.structure_hash = k->structure_hash;
    std::memcpy(info, &facts, sizeof(facts));
  });
}

}  // extern "C"
