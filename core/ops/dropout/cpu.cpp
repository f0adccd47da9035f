// CPU backend of GELU + dropout. Work is split into contiguous ranges of x's row-major order and
// run on the context's thread pool; each range draws one Philox block per eight elements, the
// same words the CUDA kernels draw for the same elements.
//
// Contiguous tensors go through chunks of kChunk elements: the chunk's Philox blocks are drawn in
// one loop over the blocks, their words spread into one 16-bit uniform per element, and the
// elements are computed from those in one loop (f16/bf16 widened to float first); all three are
// plain index loops the compiler vectorises (KF_CPU_CLONES). Strided views walk element by
// element with an odometer and draw a block where they enter it.
#include <algorithm>
#include <type_traits>

#include "core/math/elementary.hpp"
#include "core/ops/cpu_runs.hpp"
#include "core/ops/dispatch.hpp"
#include "core/ops/dropout/dropout.hpp"
#include "core/runtime/thread_pool.hpp"

namespace kf::dropout {
namespace {

// Elements per task (a multiple of 8, so most tasks start on Philox blocks; any start works).
constexpr int64_t kGrain = int64_t{1} << 14;
// Elements per chunk of the contiguous path, counted from the first block's start (a multiple
// of 8).
constexpr int64_t kChunk = 1024;
constexpr int64_t kChunkBlocks = kChunk / 8;

// words[4 b + j] = word j of Philox block first_block + b, for b in [0, blocks).
KF_CPU_CLONES void draw_blocks(const math::PhiloxKeys& keys, uint64_t subsequence,
                               uint64_t first_block, int64_t blocks, uint32_t* words) {
  uint32_t w0[kChunkBlocks], w1[kChunkBlocks], w2[kChunkBlocks], w3[kChunkBlocks];
  for (int64_t b = 0; b < blocks; ++b) {
    const math::PhiloxWords r = math::philox_block(keys, subsequence, first_block + b);
    w0[b] = r.v[0];
    w1[b] = r.v[1];
    w2[b] = r.v[2];
    w3[b] = r.v[3];
  }
  for (int64_t b = 0; b < blocks; ++b) {
    words[4 * b] = w0[b];
    words[4 * b + 1] = w1[b];
    words[4 * b + 2] = w2[b];
    words[4 * b + 3] = w3[b];
  }
}

// uniforms[2 k + h] = half h of words[k] (math::uniform16), for the first `count` words: element
// i's uniform is half i % 2 of word i / 2 of its block's words.
KF_CPU_CLONES void spread_halves(const uint32_t* words, int64_t count, uint16_t* uniforms) {
  for (int64_t k = 0; k < count; ++k) {
    uniforms[2 * k] = static_cast<uint16_t>(math::uniform16(words[k], 0));
    uniforms[2 * k + 1] = static_cast<uint16_t>(math::uniform16(words[k], 1));
  }
}

// v = kept ? gelu(v) * scale : 0 (exactly 0 for a dropped NaN or inf too: a select, not a
// multiply by the mask); mask[i] = kept where there is a mask.
template <class T>
KF_CPU_CLONES void drop(T* v, const uint16_t* uniforms, uint32_t threshold, T half_scale,
                        uint8_t* mask, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    // Computed for every element and then selected: as a conditional, GCC keeps the branch (it
    // may not evaluate floating-point operations the source skips) and the loop stays scalar.
    const T y = kept_value(v[i], half_scale);
    const bool kept = uniforms[i] >= threshold;
    if constexpr (std::is_same_v<T, float>) {
      v[i] = math::host_float::select(kept, y, 0.0f);
    } else {
      v[i] = kept ? y : T(0);
    }
  }
  if (mask) {
    for (int64_t i = 0; i < n; ++i) mask[i] = uniforms[i] >= threshold ? 1 : 0;
  }
}

template <class S>
void run_contiguous(const Plan& p, const math::PhiloxKeys& keys, int64_t begin, int64_t end) {
  using T = math::compute_t<S>;
  const S* x = static_cast<const S*>(p.x);
  S* out = static_cast<S*>(p.out);
  const T half_scale = static_cast<T>(p.scale / 2);  // kept_value's
  uint32_t words[kChunk / 2];
  uint16_t uniforms[kChunk];
  T v[kChunk];
  // threshold 0 keeps every element: every uniform passes, none is drawn.
  if (p.keep_threshold == 0) std::fill(uniforms, uniforms + kChunk, uint16_t{0});
  for (int64_t i = begin; i < end;) {
    // The chunk starts on the Philox block that holds element i, `lead` elements before it.
    const int64_t lead = i % 8;
    const int64_t n = std::min(kChunk - lead, end - i);
    if (p.keep_threshold != 0) {
      draw_blocks(keys, p.offset, static_cast<uint64_t>(i / 8), (lead + n + 7) / 8, words);
      spread_halves(words, (lead + n + 1) / 2, uniforms);
    }
    widen_run(x + i, 1, v, n);
    drop(v, uniforms + lead, p.keep_threshold, half_scale, p.mask ? p.mask + i : nullptr, n);
    narrow_run(v, out + i, 1, n);
    i += n;
  }
}

// The Philox words of the blocks a range walks through, drawn once per block.
class RandomWords {
 public:
  RandomWords(const Plan& p, const math::PhiloxKeys& keys) : plan_(p), keys_(keys) {}
  // True when element i (row-major index) is kept.
  bool keep(int64_t i) {
    if (plan_.keep_threshold == 0) return true;
    const uint64_t block = static_cast<uint64_t>(i) / 8;
    if (block != block_) {
      words_ = math::philox_block(keys_, plan_.offset, block);
      block_ = block;
    }
    return math::uniform16(words_.v[(i >> 1) & 3], static_cast<unsigned>(i & 1)) >=
           plan_.keep_threshold;
  }

 private:
  const Plan& plan_;
  const math::PhiloxKeys& keys_;
  uint64_t block_ = ~uint64_t{0};
  math::PhiloxWords words_{};
};

template <class S>
void run_strided(const Plan& p, const math::PhiloxKeys& keys, int64_t begin, int64_t end) {
  using Traits = math::StorageTraits<S>;
  using T = math::compute_t<S>;
  const S* x = static_cast<const S*>(p.x);
  S* out = static_cast<S*>(p.out);
  const T half_scale = static_cast<T>(p.scale / 2);  // kept_value's
  RandomWords random(p, keys);

  // Odometer over the plan's dims, innermost last.
  const int32_t inner = p.ndim - 1;
  int64_t index[KF_MAX_DIMS];
  int64_t rest = begin, x_offset = 0, out_offset = 0, mask_offset = 0;
  for (int32_t d = inner; d >= 0; --d) {
    index[d] = rest % p.shape[d];
    rest /= p.shape[d];
    x_offset += index[d] * p.x_strides[d];
    out_offset += index[d] * p.out_strides[d];
    mask_offset += index[d] * p.mask_strides[d];
  }
  for (int64_t i = begin; i < end; ++i) {
    const bool kept = random.keep(i);
    // Dropped elements are exactly 0 whatever x holds (a NaN or inf input too): a select, not a
    // multiply by the mask.
    out[out_offset] =
        kept ? Traits::from_compute(kept_value(Traits::to_compute(x[x_offset]), half_scale))
             : Traits::from_compute(T(0));
    if (p.mask) p.mask[mask_offset] = kept ? 1 : 0;
    ++index[inner];
    x_offset += p.x_strides[inner];
    out_offset += p.out_strides[inner];
    mask_offset += p.mask_strides[inner];
    for (int32_t d = inner; d > 0 && index[d] == p.shape[d]; --d) {
      x_offset += p.x_strides[d - 1] - p.shape[d] * p.x_strides[d];
      out_offset += p.out_strides[d - 1] - p.shape[d] * p.out_strides[d];
      mask_offset += p.mask_strides[d - 1] - p.shape[d] * p.mask_strides[d];
      index[d] = 0;
      ++index[d - 1];
    }
  }
}

template <class S>
void run_typed(const Plan& p, ThreadPool& threads) {
  const math::PhiloxKeys keys = math::philox_seed_keys(p.seed);
  threads.parallel_for(p.count, kGrain, [&](int64_t begin, int64_t end) {
    if (p.contiguous) {
      run_contiguous<S>(p, keys, begin, end);
    } else {
      run_strided<S>(p, keys, begin, end);
    }
  });
}

}  // namespace

void run_cpu(const Plan& plan, ThreadPool& threads) {
  dispatch_dtype(plan.dtype, [&](auto storage) { run_typed<decltype(storage)>(plan, threads); });
}

}  // namespace kf::dropout
