// A stream's scratch for the grid-group kernels (core/ops/rows/grid_group.cuh): device words,
// each a block's published partial of a row, the value in the low half and its launch's tag in
// the high half. Only launches on the owning stream use the words, one after another in stream
// order, each with a tag one larger than the last, so a word never carries the tag of a launch
// that has not written it: the words are zeroed once when allocated (and again when the tags
// wrap) instead of before every launch. Allocated from the context's pool on the stream, and
// freed on it when the stream is destroyed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>

namespace kf {

struct GridScratch {
  std::mutex mutex;  // held from choosing the tag to the launch, so tags enter the stream in order
  void* words = nullptr;
  size_t bytes = 0;
  uint32_t tag = 0;  // the last launch's; 0 is never a launch's
};

}  // namespace kf
