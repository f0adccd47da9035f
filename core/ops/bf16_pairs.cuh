// bf16 <-> float a 32-bit word of two elements at a time, for the CUDA kernels whose 16-bit loops
// are bound by instruction issue or by the ALU pipe (sm_90 SASS): widening takes an IMAD and a
// LOP3 a word (or two IMADs: widen_pairs_fma) where element by element takes a shift or a byte
// permute an element on the ALU pipe, and narrowing one cvt.rn.bf16x2.f32 a pair. The bits are
// those of the element-wise conversions (math::StorageTraits): exact widening, round to nearest
// even. Include only from .cu files.
#pragma once

#include <cuda_runtime.h>

namespace kf::bf16 {

// 1 << 16 where the compiler cannot see it, so that a multiply by it stays an IMAD (FMA pipe)
// instead of becoming a shift (ALU pipe). Each translation unit has its own copy.
static __constant__ unsigned int kWordScale = 1u << 16;

// N words of two bf16 each (the low half the first element) widened to 2N floats: the low element
// is the word times 2^16, the high one the word with its low half cleared.
template <int N>
__device__ __forceinline__ void widen_pairs(const unsigned int (&words)[N], float (&out)[2 * N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    out[2 * i] = __uint_as_float(words[i] * kWordScale);
    out[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
  }
}

// The same with no ALU instruction: one 32x32->64 multiply by 2^16 gives the low element's bits
// (the product's low word) and the word shifted right by 16 (its high word), which a multiply by
// 2^16 turns into the high element's bits. GELU + dropout takes it (its loop is bound by the ALU
// pipe); the row kernels keep widen_pairs, since with this form most of their bf16 rows lost on an
// H200, some by 4 to 13 points (docs/performance.md, "Session of 08:49Z", 2026-12-01).
template <int N>
__device__ __forceinline__ void widen_pairs_fma(const unsigned int (&words)[N],
                                                float (&out)[2 * N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    unsigned int low, high;
    asm("{ .reg .b64 p; mul.wide.u32 p, %2, %3; mov.b64 {%0, %1}, p; }"
        : "=r"(low), "=r"(high)
        : "r"(words[i]), "r"(kWordScale));
    out[2 * i] = __uint_as_float(low);
    out[2 * i + 1] = __uint_as_float(high * kWordScale);
  }
}

// Eight floats narrowed to bf16 a pair an instruction, as a 16-byte vector.
__device__ __forceinline__ uint4 narrow_pairs(const float (&f)[8]) {
  unsigned int w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w[i]) : "f"(f[2 * i + 1]), "f"(f[2 * i]));
  return make_uint4(w[0], w[1], w[2], w[3]);
}

}  // namespace kf::bf16
