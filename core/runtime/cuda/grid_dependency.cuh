// Programmatic dependent launch (sm_90): a kernel launched with cuda::launch_dependent may start
// while the kernel before it in the stream is still running, so its launch, block placement and
// prologue overlap that kernel's last wave instead of following its completion. Such a kernel
// must call wait_prior_grid() before its first access to global memory: the call returns once
// every kernel it depends on has completed and its writes are visible (immediately for a kernel
// launched the ordinary way). allow_next_grid() lets the next dependent kernel be launched as soon
// as every block of this grid has called it (otherwise that happens when this grid completes);
// it never lets that kernel read this one's results early, since the wait still waits for
// completion. Device code only; on older architectures both are no-ops, and launch_dependent
// falls back to an ordinary launch for kernels compiled for them.
#pragma once

namespace kf {
namespace cuda {

__device__ __forceinline__ void wait_prior_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_next_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

}  // namespace cuda
}  // namespace kf
