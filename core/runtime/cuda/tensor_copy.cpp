// Host <-> device copies of CUDA tensors. Contiguous tensors take one cudaMemcpyAsync; strided
// ones are staged through a packed buffer from the context's pool and a gather/scatter kernel.
#include "core/runtime/cuda/tensor_copy.hpp"

#include "core/runtime/context.hpp"
#include "core/runtime/cuda/cuda_api.hpp"
#include "core/runtime/error.hpp"
#include "core/runtime/tensor.hpp"

#if KF_WITH_CUDA
#include "core/runtime/cuda/strided_copy.hpp"

namespace kf {
namespace cuda {
namespace {

// A packed buffer from the context's pool, released in stream order.
class Staging {
 public:
  Staging(kf_context_t* ctx, size_t bytes, kf_stream_t* s)
      : pool_(ctx->pool),
        bytes_(bytes),
        stream_(s->native),
        data_(pool_->allocate(bytes, s->native)) {}
  ~Staging() { pool_->deallocate(data_, bytes_, stream_); }
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  void* data() const { return data_; }

 private:
  std::shared_ptr<MemoryPool> pool_;
  size_t bytes_;
  void* stream_;
  void* data_;
};

}  // namespace

void copy_from_host(kf_tensor_t* dst, const void* src, size_t bytes, kf_stream_t* s) {
  prepare_for_stream(dst, s);
  if (is_contiguous(dst->desc)) {
    copy_host_to_device(dst->data, src, bytes, s->native);
  } else {
    Staging staging(dst->ctx, bytes, s);
    copy_host_to_device(staging.data(), src, bytes, s->native);
    launch_strided_copy(dst->desc, dst->data, staging.data(), false, s->native);
  }
  stream_synchronize(s->native);
}

void copy_to_host(const kf_tensor_t* src, void* dst, size_t bytes, kf_stream_t* s) {
  prepare_for_stream(src, s);
  if (is_contiguous(src->desc)) {
    copy_device_to_host(dst, src->data, bytes, s->native);
  } else {
    Staging staging(src->ctx, bytes, s);
    launch_strided_copy(src->desc, src->data, staging.data(), true, s->native);
    copy_device_to_host(dst, staging.data(), bytes, s->native);
  }
  stream_synchronize(s->native);
}

}  // namespace cuda
}  // namespace kf

#else  // CPU-only build

namespace kf {
namespace cuda {

void copy_from_host(kf_tensor_t*, const void*, size_t, kf_stream_t*) {
  fail(KF_ERROR_NOT_SUPPORTED, "this build of kernel_fusion has no CUDA backend");
}
void copy_to_host(const kf_tensor_t*, void*, size_t, kf_stream_t*) {
  fail(KF_ERROR_NOT_SUPPORTED, "this build of kernel_fusion has no CUDA backend");
}

}  // namespace cuda
}  // namespace kf

#endif
