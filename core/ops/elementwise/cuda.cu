// CUDA backend of the fused elementwise ops.
//
// Dense layouts (contiguous, scalar b, bias row b) run one kernel family that moves 16-byte
// vectors: the first and last few elements that do not fill an aligned vector are handled
// element-wise by the first threads, everything else as whole vectors, `unroll` vectors of every
// operand loaded before any is used. A bias row's vectors are loaded once per thread, before its
// loop, when the grid makes every thread meet the same columns on every pass. Everything else (and
// dense layouts whose operands disagree on 16-byte alignment) runs the strided kernel, which
// decomposes each output index into offsets with precomputed divisions (32-bit when every offset
// fits, else 64-bit). Both use grid-stride loops: the dense kernel over one pass of blocks (each
// thread's loop then runs once, twice where a launch's 2^30 elements need it), the strided kernel
// over (SMs x resident blocks per SM), one full wave. Launches are asynchronous: no allocation, no
// synchronisation. On sm_90 both are dependent launches (core/runtime/cuda/grid_dependency.cuh):
// an op queued right behind another kernel is placed on the SMs while that kernel's last blocks
// run, and waits for its completion before reading anything.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <numeric>

#include "core/ops/async_copy.cuh"
#include "core/ops/elementwise/elementwise.hpp"
#include "core/ops/fast_divmod.cuh"
#include "core/runtime/cuda/device_caps.hpp"
#include "core/runtime/cuda/grid_dependency.cuh"
#include "core/runtime/cuda/launch.hpp"
#include "core/runtime/error.hpp"

namespace kf::elementwise {
namespace {

// ---- tuning (kept apart from the math) -------------------------------------------------------

enum class BMode { dense, scalar, bias };

// Measured on H200 with 256 MiB tensors: one vector per operand per thread at full occupancy
// beat two or four vectors at half or quarter occupancy (same bytes in flight, more warps to hide
// the activation's arithmetic). f64 activations need more than 32 registers, so f64 runs at half
// occupancy rather than spill.
//
// Loads of a and all stores take the evict-first path (ld.global.cs / st.global.cs): nothing is
// read twice, and keeping the stream out of the way of the lines still in use (b's, a bias row)
// lifted the bias-row layouts most. kf-bench on an H200 (2026-11-26, 256 MiB per tensor,
// % of copy, same run): f32 bias + GELU 86.5 -> 91.1, 16-bit bias + GELU 85.8/84.4 -> 89.4/89.3
// (f16/bf16), 16-bit same-shape GELU 91.4 -> 94.9. The same run measured the 16-bit bias rows
// at 4 vectors in flight per thread (the earlier H100 tuning) or 2 at half occupancy: 1-7 points
// slower than one vector at full occupancy with these hints.
//
// The dense grid is one pass of blocks, not one wave of resident blocks looping: with one wave
// the warps the schedulers favour finish early and the SMs run the end of the launch short of
// warps. kf-bench on an H100 (2026-11-26 16:41Z, same call, GB/s against a 2954 GB/s copy):
// same-shape add/mul + ReLU/GELU/SiLU 2810-2838 -> 3009-3012 in every dtype, bias rows
// 2728-2767 -> 2906-2917; bias + GELU (ops suite) 91.0 / 86.9 / 87.0 -> 95.0 / 97.0 / 97.1 % of
// copy (f32 / f16 / bf16; four waves of resident blocks: 92.7 / 93.6 / 93.7).
template <class S, BMode Mode>
struct DensePolicy {
  static constexpr int threads = 256;
  static constexpr int min_blocks_per_sm =
      sizeof(S) == 8 ? 4 : 8;              // 8: 2048 threads/SM, <= 32 registers
  static constexpr int vector_bytes = 16;  // one LDG.128 / STG.128 per access
  static constexpr int width = vector_bytes / static_cast<int>(sizeof(S));  // elements per vector
  static constexpr int unroll = 1;  // vectors per operand per thread per iteration
  // 16-bit bias rows: a grid of `waves` x min_blocks_per_sm resident blocks per SM, whose threads
  // copy a's vectors two grid steps ahead into a three-stage shared-memory buffer (cp.async)
  // while they compute the current one (dense_loop). 0: one pass of blocks, a loaded directly.
  // kf-bench, same calls (2026-11-27), % of copy, f16 / bf16: bias + GELU [16384, 4096] (ops
  // suite): H200 (about 04:09Z) one pass 89.0 / 88.5, 4 waves staged 90.9 / 90.8, 8 waves 92.7
  // / 92.9; H100 (about 04:11Z) 94.9 / 94.8 and, 8 waves, 94.9 / 94.9. Bias rows of [32768, 4096]
  // (elementwise suite), one pass -> 8 waves: H200 ReLU 97.9 -> 96.0, GELU 93.2 -> 95.5, SiLU 97.7
  // -> 95.7; H100 98.6-98.8 -> 96.4-96.8. f32 (not issue-bound there) keeps one pass.
  static constexpr int waves = Mode == BMode::bias && sizeof(S) == 2 ? 8 : 0;
};

struct StridedPolicy {
  static constexpr int threads = 256;
  static constexpr int min_blocks_per_sm = 4;
  static constexpr int unroll = 4;  // elements per thread per iteration
};

// A dense launch covers at most this many elements, so its indices fit in 32 bits (a multiple of
// every vector width; larger tensors take several launches).
constexpr int64_t kMaxDenseLaunch = int64_t{1} << 30;

// ---- index helpers ----------------------------------------------------------------------------

struct Divmod64 {
  int64_t divisor = 1;
  Divmod64() = default;
  explicit Divmod64(int64_t d) : divisor(d) {}
  __device__ __forceinline__ int64_t div(int64_t n) const { return n / divisor; }
};

template <class Index>
struct DivmodFor;
template <>
struct DivmodFor<uint32_t> {
  using type = FastDivmod;
};
template <>
struct DivmodFor<int64_t> {
  using type = Divmod64;
};

template <class S, int Width>
union Vector {
  uint4 raw;
  S v[Width];
};

// ---- dense kernels ----------------------------------------------------------------------------

template <class S>
struct DenseArgs {
  const S* a;
  const S* b;  // dense: aligned like a; scalar: one element; bias: 16-byte aligned row
  S* out;
  uint32_t head;           // elements before a and out reach a 16-byte boundary (< width)
  uint32_t vectors;        // whole vectors after the head
  uint32_t tail;           // elements after the vectors (< width)
  FastDivmod row_vectors;  // bias: vectors per b row
  // bias: every thread meets the same b vectors on every pass of its loop (the grid's step is a
  // whole number of rows, or the loop makes one pass), so it loads them once, before the loop.
  bool bias_fixed;
};

// The whole-vector part of a dense kernel: a grid-stride loop, `unroll` vectors of every operand
// loaded before any is used. kFixedBias (bias rows): the b vectors a thread needs are the same on
// every pass, so they are loaded once and the loop reads only a.
template <class Policy, class S, class Op, class Act, BMode Mode, bool kFixedBias>
__device__ __forceinline__ void dense_loop(const DenseArgs<S>& args, math::compute_t<S> b_scalar) {
  using Fused = FusedOp<S, Op, Act>;
  using Traits = math::StorageTraits<S>;
  constexpr int kWidth = Policy::width;
  constexpr int kUnroll = Policy::unroll;
  constexpr uint32_t kThreads = Policy::threads;

  const uint4* a = reinterpret_cast<const uint4*>(args.a + args.head);
  const uint4* b =
      reinterpret_cast<const uint4*>(Mode == BMode::dense ? args.b + args.head : args.b);
  uint4* out = reinterpret_cast<uint4*>(args.out + args.head);
  const uint32_t first = blockIdx.x * kThreads * kUnroll + threadIdx.x;
  const uint32_t step = gridDim.x * kThreads * kUnroll;
  auto bias_index = [&](uint32_t i) {
    return i - args.row_vectors.div(i) * args.row_vectors.divisor;
  };

  Vector<S, kWidth> y[kUnroll];
  if constexpr (kFixedBias) {
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const uint32_t i = first + k * kThreads;
      if (i < args.vectors) y[k].raw = b[bias_index(i)];
    }
  }
  if constexpr (kFixedBias && Policy::waves > 0) {
    static_assert(kUnroll == 1, "one vector a step");
    // Each thread copies the a vector two steps ahead into its own slot of a three-stage buffer
    // before computing the current one, and reads back only what it copied: no block barrier.
    constexpr int kStages = 3;
    __shared__ uint4 stage[kStages][kThreads];
    async_copy::pipelined<kStages>(
        first, args.vectors, step,
        [&](uint32_t i, int slot) {
          async_copy::copy16_if(&stage[slot][threadIdx.x], a + i, i < args.vectors);
        },
        [&](uint32_t i, int slot) {
          Vector<S, kWidth> x, r;
          x.raw = stage[slot][threadIdx.x];
#pragma unroll
          for (int e = 0; e < kWidth; ++e) r.v[e] = Fused::apply(x.v[e], y[0].v[e]);
          __stcs(out + i, r.raw);
        });
  } else {
    for (uint32_t base = first; base < args.vectors; base += step) {
      Vector<S, kWidth> x[kUnroll];
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        const uint32_t i = base + k * kThreads;
        if (i < args.vectors) {
          x[k].raw = __ldcs(a + i);
          if constexpr (Mode == BMode::dense) y[k].raw = b[i];
          if constexpr (Mode == BMode::bias && !kFixedBias) y[k].raw = b[bias_index(i)];
        }
      }
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        const uint32_t i = base + k * kThreads;
        if (i < args.vectors) {
          Vector<S, kWidth> r;
#pragma unroll
          for (int e = 0; e < kWidth; ++e) {
            if constexpr (Mode == BMode::scalar)
              r.v[e] = Fused::compute(Traits::to_compute(x[k].v[e]), b_scalar);
            else
              r.v[e] = Fused::apply(x[k].v[e], y[k].v[e]);
          }
          __stcs(out + i, r.raw);
        }
      }
    }
  }
}

template <class Policy, class S, class Op, class Act, BMode Mode>
__global__ void __launch_bounds__(Policy::threads, Policy::min_blocks_per_sm)
    dense_kernel(DenseArgs<S> args) {
  cuda::wait_prior_grid();  // a dependent launch: nothing global is touched before this
  cuda::allow_next_grid();
  using Fused = FusedOp<S, Op, Act>;
  using Traits = math::StorageTraits<S>;
  using T = math::compute_t<S>;
  constexpr int kWidth = Policy::width;
  constexpr uint32_t kThreads = Policy::threads;

  T b_scalar = T(0);
  if constexpr (Mode == BMode::scalar) b_scalar = Traits::to_compute(args.b[0]);

  if constexpr (Mode != BMode::bias) {  // bias launches are whole aligned vectors
    const uint32_t thread = blockIdx.x * kThreads + threadIdx.x;
    if (thread < args.head + args.tail) {
      const uint32_t i =
          thread < args.head ? thread : thread + args.vectors * kWidth;  // tail follows the vectors
      if constexpr (Mode == BMode::scalar)
        args.out[i] = Fused::compute(Traits::to_compute(args.a[i]), b_scalar);
      else
        args.out[i] = Fused::apply(args.a[i], args.b[i]);
    }
  }

  if constexpr (Mode == BMode::bias) {
    if (args.bias_fixed)
      dense_loop<Policy, S, Op, Act, Mode, true>(args, b_scalar);
    else
      dense_loop<Policy, S, Op, Act, Mode, false>(args, b_scalar);
  } else {
    dense_loop<Policy, S, Op, Act, Mode, false>(args, b_scalar);
  }
}

// ---- strided kernel ---------------------------------------------------------------------------

template <class Index>
struct StridedArgs {
  Index count;
  int32_t ndim;
  math::Activation act;
  // Innermost dim first.
  typename DivmodFor<Index>::type shape[KF_MAX_DIMS];
  Index a_strides[KF_MAX_DIMS];
  Index b_strides[KF_MAX_DIMS];
  Index out_strides[KF_MAX_DIMS];
};

// b never overlaps out (checked at the entry), so it may take the read-only path; a may be out.
// The activation is a run-time argument here (uniform across the grid), which keeps this kernel
// to dtype x op x index width instantiations; index arithmetic dominates its cost anyway.
template <class Policy, class S, class Op, class Index>
__global__ void __launch_bounds__(Policy::threads, Policy::min_blocks_per_sm)
    strided_kernel(const S* a, const S* __restrict__ b, S* out, StridedArgs<Index> args) {
  cuda::wait_prior_grid();  // a dependent launch: nothing global is touched before this
  cuda::allow_next_grid();
  using Traits = math::StorageTraits<S>;
  using T = math::compute_t<S>;
  constexpr int kUnroll = Policy::unroll;
  constexpr Index kThreads = Policy::threads;

  const Index step = static_cast<Index>(gridDim.x) * kThreads * kUnroll;
  for (Index base = static_cast<Index>(blockIdx.x) * kThreads * kUnroll + threadIdx.x;
       base < args.count; base += step) {
    T x[kUnroll], y[kUnroll];
    Index out_offset[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const Index i = base + k * kThreads;
      if (i < args.count) {
        Index rest = i, a_offset = 0, b_offset = 0, o_offset = 0;
#pragma unroll
        for (int d = 0; d < KF_MAX_DIMS; ++d) {
          if (d == args.ndim) break;
          const Index q = d + 1 == args.ndim ? Index(0) : args.shape[d].div(rest);
          const Index r = rest - q * static_cast<Index>(args.shape[d].divisor);
          a_offset += r * args.a_strides[d];
          b_offset += r * args.b_strides[d];
          o_offset += r * args.out_strides[d];
          rest = q;
        }
        x[k] = Traits::to_compute(a[a_offset]);
        y[k] = Traits::to_compute(b[b_offset]);
        out_offset[k] = o_offset;
      }
    }
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      if (base + k * kThreads < args.count)
        out[out_offset[k]] = Traits::from_compute(math::apply_activation(
            args.act, Op{}(x[k], y[k]), typename math::PrimitivesFor<S>::type{}));
    }
  }
}

// ---- host side --------------------------------------------------------------------------------

// Resident blocks per SM of kernel kKernel on `device`, queried once per kernel and device (at
// least the launch bound's minimum). (Keyed by the kernel itself: kernels of one signature, such
// as add's and mul's, would share a static keyed by their type.)
template <auto kKernel>
int resident_blocks(int32_t device, int threads, int minimum) {
  static std::atomic<int> kept[cuda::kKeptDevices];
  return cuda::once_per_device(kept, device, [threads, minimum] {
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kKernel, threads, 0) != cudaSuccess) {
      (void)cudaGetLastError();  // leave no sticky error behind; fall back to the launch bound
      n = 0;
    }
    return std::max({n, minimum, 1});
  });
}

// Where a launch goes: the (current) device, its SM count and the stream.
struct Target {
  int device;
  int sms;
  cudaStream_t stream;
};

// Blocks for work_items (at least one), at most blocks_per_sm per SM (0: no cap, one pass).
uint32_t grid_size(int64_t work_items, int64_t items_per_block, int sms, int blocks_per_sm) {
  const int64_t wanted = std::max<int64_t>(1, (work_items + items_per_block - 1) / items_per_block);
  if (blocks_per_sm == 0) return static_cast<uint32_t>(wanted);
  return static_cast<uint32_t>(std::min<int64_t>(wanted, int64_t{sms} * blocks_per_sm));
}

template <class S, class Op, class Act, BMode Mode>
void launch_dense(const Plan& p, const Target& t) {
  using Policy = DensePolicy<S, Mode>;
  constexpr int kWidth = Policy::width;
  auto kernel = dense_kernel<Policy, S, Op, Act, Mode>;
  const S* a = static_cast<const S*>(p.a);
  const S* b = static_cast<const S*>(p.b);
  S* out = static_cast<S*>(p.out);
  // Bias launches start on row boundaries so that every launch's b index restarts at 0.
  const int64_t chunk =
      Mode == BMode::bias ? (kMaxDenseLaunch / p.row_length) * p.row_length : kMaxDenseLaunch;
  for (int64_t done = 0; done < p.count; done += chunk) {
    const int64_t n = std::min(chunk, p.count - done);
    DenseArgs<S> args;
    args.a = a + done;
    args.b = Mode == BMode::dense ? b + done : b;
    args.out = out + done;
    const int misaligned =
        static_cast<int>(reinterpret_cast<uintptr_t>(args.out) % Policy::vector_bytes) /
        static_cast<int>(sizeof(S));
    const int64_t head = std::min<int64_t>(misaligned ? kWidth - misaligned : 0, n);
    args.head = static_cast<uint32_t>(head);
    args.vectors = static_cast<uint32_t>((n - head) / kWidth);
    args.tail = static_cast<uint32_t>(n - head - int64_t{args.vectors} * kWidth);
    constexpr int64_t kPerBlock = int64_t{Policy::threads} * Policy::unroll;  // vectors per pass
    uint32_t grid = grid_size(std::max<int64_t>(args.vectors, 1), kPerBlock, t.sms, 0);
    args.bias_fixed = false;
    if (Mode == BMode::bias) {
      const int64_t row_vectors = p.row_length / kWidth;
      args.row_vectors = FastDivmod(static_cast<uint32_t>(row_vectors));
      // A thread's b vectors stay put when its loop makes one pass, or when the grid's step
      // (grid x kPerBlock vectors) is a whole number of rows: the grid is then rounded down to a
      // multiple of the fewest blocks whose step is, if that leaves a grid.
      const int64_t rows_step = row_vectors / std::gcd(row_vectors, kPerBlock);
      if (Policy::waves > 0) {  // a looping grid, where it can keep the b vectors
        const int64_t looping = grid_size(std::max<int64_t>(args.vectors, 1), kPerBlock, t.sms,
                                          Policy::waves * Policy::min_blocks_per_sm);
        if (looping >= rows_step) grid = static_cast<uint32_t>(looping);
      }
      if (int64_t{grid} * kPerBlock >= args.vectors) {
        args.bias_fixed = true;
      } else if (rows_step <= grid) {
        grid = static_cast<uint32_t>(grid / rows_step * rows_step);
        args.bias_fixed = true;
      }
    }
    cuda::launch_dependent(kernel, t.device, grid, Policy::threads, t.stream,
                           "elementwise kernel launch", args);
  }
}

template <class S, class Op, class Index>
void launch_strided(const Plan& p, const Target& t) {
  using Policy = StridedPolicy;
  auto kernel = strided_kernel<Policy, S, Op, Index>;
  const int blocks_per_sm = resident_blocks<strided_kernel<Policy, S, Op, Index>>(
      t.device, Policy::threads, Policy::min_blocks_per_sm);
  StridedArgs<Index> args{};
  args.count = static_cast<Index>(p.count);
  args.ndim = p.ndim;
  args.act = p.act;
  for (int32_t d = 0; d < p.ndim; ++d) {
    const int32_t from = p.ndim - 1 - d;  // the plan lists dims outermost first
    args.shape[d] = typename DivmodFor<Index>::type(static_cast<Index>(p.shape[from]));
    args.a_strides[d] = static_cast<Index>(p.a_strides[from]);
    args.b_strides[d] = static_cast<Index>(p.b_strides[from]);
    args.out_strides[d] = static_cast<Index>(p.out_strides[from]);
  }
  const uint32_t grid =
      grid_size(p.count, int64_t{Policy::threads} * Policy::unroll, t.sms, blocks_per_sm);
  cuda::launch_dependent(kernel, t.device, grid, Policy::threads, t.stream,
                         "elementwise kernel launch", static_cast<const S*>(p.a),
                         static_cast<const S*>(p.b), static_cast<S*>(p.out), args);
}

bool aligned_alike(const void* x, const void* y) {
  return reinterpret_cast<uintptr_t>(x) % 16 == reinterpret_cast<uintptr_t>(y) % 16;
}
bool aligned(const void* x) { return reinterpret_cast<uintptr_t>(x) % 16 == 0; }

template <class S, class Op>
void run_strided(const Plan& p, const Target& t) {
  constexpr int64_t k32 = int64_t{1} << 31;
  if (p.count < k32 && p.a_extent < k32 && p.b_extent < k32 && p.out_extent < k32)
    launch_strided<S, Op, uint32_t>(p, t);
  else
    launch_strided<S, Op, int64_t>(p, t);
}

template <class S, class Op, class Act>
void run_typed(const Plan& p, const Target& t) {
  constexpr int kWidth = DensePolicy<S, BMode::bias>::width;
  switch (p.layout) {
    case Layout::contiguous:
      if (aligned_alike(p.a, p.out) && aligned_alike(p.b, p.out))
        return launch_dense<S, Op, Act, BMode::dense>(p, t);
      break;
    case Layout::scalar:
      if (aligned_alike(p.a, p.out)) return launch_dense<S, Op, Act, BMode::scalar>(p, t);
      break;
    case Layout::bias:
      if (p.row_length % kWidth == 0 && p.row_length <= kMaxDenseLaunch && aligned(p.a) &&
          aligned(p.b) && aligned(p.out))
        return launch_dense<S, Op, Act, BMode::bias>(p, t);
      break;
    case Layout::strided: break;
  }
  run_strided<S, Op>(p, t);
}

}  // namespace

// The entry has made device_id current (kf::activate).
void run_cuda(const Plan& plan, int32_t device_id, void* native_stream) {
  const Target t{device_id, cuda::sm_count(device_id), static_cast<cudaStream_t>(native_stream)};
  dispatch_dtype(plan.dtype, [&](auto storage) {
    using S = decltype(storage);
    dispatch_op(plan.op, [&](auto op) {
      using Op = decltype(op);
      if (plan.layout == Layout::strided) return run_strided<S, Op>(plan, t);
      dispatch_activation(plan.act, [&](auto act) { run_typed<S, Op, decltype(act)>(plan, t); });
    });
  });
}

}  // namespace kf::elementwise
