// The CUDA side of a compiled graph: NVRTC compilation of generated source (with the disk
// cache) and the loaded program that launches it. Defined in core/fusion/cuda/; in a CPU-only
// build both throw KF_ERROR_NOT_SUPPORTED ("this build has no CUDA backend").
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/fusion/graph.hpp"
#include "core/fusion/program.hpp"
#include "kernel_fusion/graph.h"

namespace kf {
namespace fusion {

// CUBIN of `source` for sm_<sm> (e.g. 90). With use_disk_cache, looks the machine code up in
// the disk cache first and stores a fresh compile there. origin (nullable) receives
// KF_KERNEL_COMPILED or KF_KERNEL_DISK_CACHE. Needs no GPU. Writes the source to
// KF_DUMP_SOURCE_DIR when set. Throws KF_ERROR_COMPILE with NVRTC's log when NVRTC rejects it.
std::vector<char> compile_for_arch(const std::string& source, int sm, bool use_disk_cache,
                                   kf_kernel_origin_t* origin);

// The balance of the device of ctx (DeviceBalance, core/fusion/program.hpp); unknown for CPU
// contexts, a CPU-only build, or when the driver does not report it.
DeviceBalance device_balance(const kf_context_t* ctx);

// Compiles `source` (generated from g with options o for `balance`, the device's) for the device
// of ctx, loads it and returns the program that launches it. origin as compile_for_arch's.
std::shared_ptr<const Program> make_cuda_program(kf_context_t* ctx, const Graph& g,
                                                 const kf_compile_options_t& o,
                                                 const DeviceBalance& balance,
                                                 const std::string& source,
                                                 kf_kernel_origin_t* origin);

}  // namespace fusion
}  // namespace kf
