// Kernels that write the bytes their parameter carries (table_upload.hpp).
#include <cstdint>
#include <cstring>

#include "core/fusion/cuda/table_upload.hpp"
#include "core/runtime/cuda/cuda_check.hpp"
#include "core/runtime/error.hpp"

namespace kf {
namespace fusion {
namespace {

constexpr size_t kChunkWords = kTableChunkBytes / sizeof(uint64_t);

struct TableChunk {
  uint64_t* dst;
  uint64_t words;  // how many of `data` to write
  uint64_t data[kChunkWords];
};
static_assert(sizeof(TableChunk) <= 32764, "a kernel parameter of sm_70 and later");

// __grid_constant__: the threads read the parameter where the launch put it, with no copy into
// local memory for the indexed reads.
__global__ void write_table_chunk(const __grid_constant__ TableChunk chunk) {
  for (uint64_t i = threadIdx.x; i < chunk.words; i += blockDim.x) chunk.dst[i] = chunk.data[i];
}

}  // namespace

void upload_through_parameters(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes % sizeof(uint64_t) != 0) {
    fail(KF_ERROR_INTERNAL, "an item table of %zu bytes is not made of 8-byte words", bytes);
  }
  // One chunk object, rewritten for each launch: the launch copies the parameter.
  static thread_local TableChunk chunk;
  for (size_t done = 0; done < bytes; done += kTableChunkBytes) {
    const size_t n = bytes - done < kTableChunkBytes ? bytes - done : kTableChunkBytes;
    chunk.dst = reinterpret_cast<uint64_t*>(static_cast<char*>(dst) + done);
    chunk.words = n / sizeof(uint64_t);
    std::memcpy(chunk.data, static_cast<const char*>(src) + done, n);
    write_table_chunk<<<1, 256, 0, stream>>>(chunk);
    cuda::check(cudaGetLastError(), "launching the item-table write");
  }
}

}  // namespace fusion
}  // namespace kf
