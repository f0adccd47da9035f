// CPU backend of GELU + dropout. Work is split into contiguous ranges of x's row-major order and
// run on the context's thread pool; each range draws one Philox block per eight elements, the
// same words the CUDA kernels draw for the same elements.
#include <algorithm>

#include "core/ops/dispatch.hpp"
#include "core/ops/dropout/dropout.hpp"
#include "core/runtime/thread_pool.hpp"

namespace kf::dropout {
namespace {

// Elements per task (a multiple of 8, so tasks start on Philox blocks).
constexpr int64_t kGrain = int64_t{1} << 14;

// The Philox words of the blocks a range walks through, drawn once per block.
class RandomWords {
 public:
  explicit RandomWords(const Plan& p) : plan_(p) {}
  // True when element i (row-major index) is kept.
  bool keep(int64_t i) {
    if (plan_.keep_threshold == 0) return true;
    const uint64_t block = static_cast<uint64_t>(i) / 8;
    if (block != block_) {
      words_ = math::philox_block(plan_.seed, plan_.offset, block);
      block_ = block;
    }
    return math::uniform16(words_.v[(i >> 1) & 3], static_cast<unsigned>(i & 1)) >=
           plan_.keep_threshold;
  }

 private:
  const Plan& plan_;
  uint64_t block_ = ~uint64_t{0};
  math::PhiloxWords words_{};
};

template <class S>
void run_range(const Plan& p, int64_t begin, int64_t end) {
  using Traits = math::StorageTraits<S>;
  using T = math::compute_t<S>;
  const S* x = static_cast<const S*>(p.x);
  S* out = static_cast<S*>(p.out);
  const T half_scale = static_cast<T>(p.scale / 2);  // kept_value's
  RandomWords random(p);

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
  threads.parallel_for(p.count, kGrain,
                       [&](int64_t begin, int64_t end) { run_range<S>(p, begin, end); });
}

}  // namespace

void run_cpu(const Plan& plan, ThreadPool& threads) {
  dispatch_dtype(plan.dtype, [&](auto storage) { run_typed<decltype(storage)>(plan, threads); });
}

}  // namespace kf::dropout
