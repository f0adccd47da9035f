// Kernel launches through the driver's cuLaunchKernel, reached with the runtime's
// cudaGetDriverEntryPointByVersion (the library never links libcuda). The driver path skips the
// runtime's per-launch bookkeeping: on an H100 (2026-11-26, kf-bench) an empty kernel took
// 2.61 us of host time this way against 2.91 us with <<<>>>, which matters for the host cost of
// small ops. Kernel handles come from cudaGetFuncBySymbol, cached per thread, kernel and device.
// Include only where KF_WITH_CUDA is set, from .cu files (the kernel must be a __global__).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <type_traits>

namespace kf {
namespace cuda {

// Launches `kernel` (the address of a __global__ function) on `device`, which must be the
// current device, with a parameter array as cuLaunchKernel takes it. Throws
// kf::Error(KF_ERROR_CUDA) naming the driver error and `what`.
// dependent: a programmatic dependent launch (see grid_dependency.cuh), for kernels that call
// wait_prior_grid() before touching global memory; it applies where the device is sm_90 or later
// and the kernel's code was compiled for it (PTX 9.0 or later), else the launch is an ordinary one.
void launch_kernel(const void* kernel, int device, dim3 grid, dim3 block, size_t shared_bytes,
                   cudaStream_t stream, void** params, const char* what, bool dependent = false);

// The function handle (a CUfunction) of a kernel loaded at run time, `kernel` a cudaKernel_t
// (cudaLibraryGetKernel), in the current device's context: the driver's cuKernelGetFunction,
// looked up once per program instead of by cuLaunchKernel at every launch. Where the driver
// cannot give it, `kernel` itself, which cuLaunchKernel also takes (as a CUkernel).
void* library_kernel_function(void* kernel);

// Launches a kernel loaded at run time: `kernel` is a library_kernel_function() result, or a
// cudaKernel_t, which the driver's cuLaunchKernel takes as it is (a CUkernel). The current
// device's context runs it. dependent: a programmatic dependent launch (cuLaunchKernelEx), for
// code compiled for sm_90 or later that executes griddepcontrol.wait before it touches global
// memory; the caller knows what it compiled. Without the driver's cuLaunchKernelEx, an ordinary
// launch.
void launch_library_kernel(void* kernel, dim3 grid, dim3 block, size_t shared_bytes,
                           cudaStream_t stream, void** params, const char* what,
                           bool dependent = false);

// Typed front end: launch(kernel, device, grid, block, stream, "what", args...). Each argument
// must already have the kernel parameter's exact type (no conversions happen, unlike <<<>>>).
template <class... Params, class... Args>
void launch(void (*kernel)(Params...), int device, dim3 grid, dim3 block, cudaStream_t stream,
            const char* what, const Args&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "argument count must match the kernel");
  static_assert((std::is_same<std::decay_t<Params>, Args>::value && ...),
                "each argument must have its kernel parameter's exact type");
  void* params[] = {const_cast<void*>(static_cast<const void*>(&args))...};
  launch_kernel(reinterpret_cast<const void*>(kernel), device, grid, block, 0, stream, params,
                what);
}

// The same as a programmatic dependent launch: `kernel` must begin with
// cuda::wait_prior_grid() (core/runtime/cuda/grid_dependency.cuh), before any global memory
// access, on every path.
template <class... Params, class... Args>
void launch_dependent(void (*kernel)(Params...), int device, dim3 grid, dim3 block,
                      cudaStream_t stream, const char* what, const Args&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "argument count must match the kernel");
  static_assert((std::is_same<std::decay_t<Params>, Args>::value && ...),
                "each argument must have its kernel parameter's exact type");
  void* params[] = {const_cast<void*>(static_cast<const void*>(&args))...};
  launch_kernel(reinterpret_cast<const void*>(kernel), device, grid, block, 0, stream, params, what,
                /*dependent=*/true);
}

// launch_dependent with `shared_bytes` of dynamic shared memory a block.
template <class... Params, class... Args>
void launch_dependent_shared(void (*kernel)(Params...), int device, dim3 grid, dim3 block,
                             size_t shared_bytes, cudaStream_t stream, const char* what,
                             const Args&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "argument count must match the kernel");
  static_assert((std::is_same<std::decay_t<Params>, Args>::value && ...),
                "each argument must have its kernel parameter's exact type");
  void* params[] = {const_cast<void*>(static_cast<const void*>(&args))...};
  launch_kernel(reinterpret_cast<const void*>(kernel), device, grid, block, shared_bytes, stream,
                params, what, /*dependent=*/true);
}

// Whether a launch of `kernel` on `device` (the current one) may be a dependent launch: the
// device is sm_90 or later and the kernel's code was compiled from PTX 9.0 or later (the test
// launch_kernel applies; cached per thread, kernel and device). For launch paths of their own
// (cluster launches, core/runtime/cuda/cluster_launch.hpp).
bool dependent_launch_supported(const void* kernel, int device);

}  // namespace cuda
}  // namespace kf
