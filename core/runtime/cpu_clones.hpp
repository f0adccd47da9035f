// Attributes of the CPU backends' hot loops, shared by every CPU op and the fusion executor.
#pragma once

// The vectorised loops are built for AVX-512 and AVX2 (+FMA) besides baseline x86-64, and the
// loader picks the best the CPU has (GCC function multiversioning), so the library stays portable.
// Not under ThreadSanitizer: its runtime is not yet set up when the loader resolves the clones'
// ifunc relocations, and the library would crash while loading.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && \
    !defined(__SANITIZE_THREAD__)
#define KF_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define KF_CPU_CLONES
#endif
// out may be exactly an input (in place), which is safe for an elementwise loop; without this
// GCC would check for overlap at run time and fall back to scalar code for in-place calls.
#if defined(__GNUC__) && !defined(__clang__)
#define KF_NO_LOOP_CARRIED_DEPENDENCE _Pragma("GCC ivdep")
#else
#define KF_NO_LOOP_CARRIED_DEPENDENCE
#endif
