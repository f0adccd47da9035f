// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11), the
// counter-based generator behind dropout: the one definition for the CPU backend, the CUDA
// kernels and NVRTC. Its rounds, constants and key schedule are those of Random123 and of
// curand's curandStatePhilox4_32_10_t (curand_philox4x32_x.h), and philox_block() lays out
// counter and key exactly as curand_init(seed, subsequence, offset) does, so that block b of
// subsequence q under seed s is the four numbers curand returns at sequence positions 4b..4b+3
// after curand_init(s, q, 0, &state).
#pragma once

#include "core/math/host_device.hpp"

namespace kf {
namespace math {

struct PhiloxWords {
  unsigned int v[4];
};

constexpr unsigned int kPhiloxM0 = 0xD2511F53u;  // multipliers
constexpr unsigned int kPhiloxM1 = 0xCD9E8D57u;
constexpr unsigned int kPhiloxW0 = 0x9E3779B9u;  // Weyl key increments (golden ratio, sqrt(3)-1)
constexpr unsigned int kPhiloxW1 = 0xBB67AE85u;

KF_HOST_DEVICE unsigned int mul_hi_lo(unsigned int a, unsigned int b, unsigned int* hi) {
#if KF_DEVICE_CODE
  *hi = __umulhi(a, b);
  return a * b;
#else
  const unsigned long long product = static_cast<unsigned long long>(a) * b;
  *hi = static_cast<unsigned int>(product >> 32);
  return static_cast<unsigned int>(product);
#endif
}

KF_HOST_DEVICE PhiloxWords philox_round(PhiloxWords c, unsigned int k0, unsigned int k1) {
  unsigned int hi0, hi1;
  const unsigned int lo0 = mul_hi_lo(kPhiloxM0, c.v[0], &hi0);
  const unsigned int lo1 = mul_hi_lo(kPhiloxM1, c.v[2], &hi1);
  PhiloxWords r;
  r.v[0] = hi1 ^ c.v[1] ^ k0;
  r.v[1] = lo1;
  r.v[2] = hi0 ^ c.v[3] ^ k1;
  r.v[3] = lo0;
  return r;
}

// Ten rounds; the key is bumped between rounds.
KF_HOST_DEVICE PhiloxWords philox4x32_10(PhiloxWords counter, unsigned int k0, unsigned int k1) {
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#pragma unroll
#endif
  for (int round = 0; round < 9; ++round) {
    counter = philox_round(counter, k0, k1);
    k0 += kPhiloxW0;
    k1 += kPhiloxW1;
  }
  return philox_round(counter, k0, k1);
}

// Block `block` of subsequence `subsequence` under `seed`: counter = (block low, block high,
// subsequence low, subsequence high), key = (seed low, seed high), as curand lays them out.
KF_HOST_DEVICE PhiloxWords philox_block(unsigned long long seed, unsigned long long subsequence,
                                        unsigned long long block) {
  PhiloxWords counter;
  counter.v[0] = static_cast<unsigned int>(block);
  counter.v[1] = static_cast<unsigned int>(block >> 32);
  counter.v[2] = static_cast<unsigned int>(subsequence);
  counter.v[3] = static_cast<unsigned int>(subsequence >> 32);
  return philox4x32_10(counter, static_cast<unsigned int>(seed),
                       static_cast<unsigned int>(seed >> 32));
}

// The 24-bit uniform of a random word, u = (x >> 8) * 2^-24 in [0, 1), as the integer (x >> 8):
// comparisons against a threshold stay exact and identical on every backend.
KF_HOST_DEVICE unsigned int uniform24(unsigned int x) { return x >> 8; }

}  // namespace math
}  // namespace kf
