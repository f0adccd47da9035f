// Item tables written into device memory by kernels whose parameters carry the bytes
// (table_upload.cu): the form of upload that stays correct in a captured CUDA graph.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace kf {
namespace fusion {

// The most bytes one write kernel carries in its parameter (under the 32764-byte limit of
// sm_70 and later, with the destination and the count beside them).
constexpr size_t kTableChunkBytes = 32640;

// Enqueues on `stream` the kernels that write `bytes` (a multiple of 8) from `src`, a host
// buffer, to `dst`, device memory: one launch per kTableChunkBytes. Each launch's parameter is
// copied when it is enqueued, and when the stream is being captured, into the graph's node, so
// `src` may be reused as soon as this returns and every replay writes the same bytes. The
// current device must be dst's. Throws kf::Error(KF_ERROR_CUDA) when a launch fails.
void upload_through_parameters(void* dst, const void* src, size_t bytes, cudaStream_t stream);

}  // namespace fusion
}  // namespace kf
