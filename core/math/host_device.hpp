// Qualifiers for the shared math functors: host+device under nvcc and NVRTC, plain inline in
// host-only translation units. Every header under core/math/ is self-contained (no STL, standard
// headers only outside NVRTC) because the fusion engine embeds these files as NVRTC sources.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define KF_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define KF_HOST_DEVICE inline
#endif

// True while compiling device code (nvcc device pass or NVRTC).
#if defined(__CUDA_ARCH__)
#define KF_DEVICE_CODE 1
#else
#define KF_DEVICE_CODE 0
#endif
