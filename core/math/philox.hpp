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

// The ten round keys of a seed: the key is bumped between rounds. A kernel that takes the
// schedule as a parameter reads each key straight from constant memory, instead of adding the
// increments again for every block it draws.
struct PhiloxKeys {
  unsigned int k0[10], k1[10];
};

KF_HOST_DEVICE PhiloxKeys philox_keys(unsigned int k0, unsigned int k1) {
  PhiloxKeys keys;
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#pragma unroll
#endif
  for (int round = 0; round < 10; ++round) {
    keys.k0[round] = k0;
    keys.k1[round] = k1;
    k0 += kPhiloxW0;
    k1 += kPhiloxW1;
  }
  return keys;
}

// The key schedule of `seed` laid out as curand_init lays it out (seed low word first).
KF_HOST_DEVICE PhiloxKeys philox_seed_keys(unsigned long long seed) {
  return philox_keys(static_cast<unsigned int>(seed), static_cast<unsigned int>(seed >> 32));
}

// Ten rounds under a key schedule.
KF_HOST_DEVICE PhiloxWords philox4x32_10(PhiloxWords counter, const PhiloxKeys& keys) {
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#pragma unroll
#endif
  for (int round = 0; round < 10; ++round)
    counter = philox_round(counter, keys.k0[round], keys.k1[round]);
  return counter;
}

KF_HOST_DEVICE PhiloxWords philox4x32_10(PhiloxWords counter, unsigned int k0, unsigned int k1) {
  return philox4x32_10(counter, philox_keys(k0, k1));
}

// Block `block` of subsequence `subsequence` under the key schedule of a seed: counter = (block
// low, block high, subsequence low, subsequence high), as curand lays them out.
KF_HOST_DEVICE PhiloxWords philox_block(const PhiloxKeys& keys, unsigned long long subsequence,
                                        unsigned long long block) {
  PhiloxWords counter;
  counter.v[0] = static_cast<unsigned int>(block);
  counter.v[1] = static_cast<unsigned int>(block >> 32);
  counter.v[2] = static_cast<unsigned int>(subsequence);
  counter.v[3] = static_cast<unsigned int>(subsequence >> 32);
  return philox4x32_10(counter, keys);
}

// Block `block` of subsequence `subsequence` under `seed` (key = seed low, seed high).
KF_HOST_DEVICE PhiloxWords philox_block(unsigned long long seed, unsigned long long subsequence,
                                        unsigned long long block) {
  return philox_block(philox_seed_keys(seed), subsequence, block);
}

// The 16-bit uniforms of a random word: its low half (half 0) and its high half (half 1), each
// u = v * 2^-16 in [0, 1) kept as the integer v, so that comparisons against a threshold stay
// exact and identical on every backend.
KF_HOST_DEVICE unsigned int uniform16(unsigned int x, unsigned int half) {
  return half != 0 ? x >> 16 : x & 0xffffu;
}

}  // namespace math
}  // namespace kf
