// Releases held by CUDA graphs: a block (or borrowed memory) whose last owner lets go while its
// stream is being captured, and which the captured work reads, must outlive every replay of the
// graph. The release is tied to the graph through a CUDA user object; when the graph and its
// executable forms are gone and their launches have finished, CUDA drops the object (on a thread
// of its own, where no CUDA call may be made), which hands the release over to a list that the
// library's own calls run (run_graph_releases).
#pragma once

#include <functional>

namespace kf {
namespace cuda {

// If `capturing_stream` (a cudaStream_t) is being captured, ties `release` to the graph being
// captured and returns true: it runs at a later run_graph_releases once CUDA lets the graph's
// references go. Returns false, leaving `release` to the caller, when no capture is in progress
// on the stream. Where CUDA refuses the user object, the release is dropped (the memory stays
// reserved: what the graph reads is never handed out again) and true is returned.
bool hold_until_graph_done(void* capturing_stream, std::function<void()> release) noexcept;

// Runs the releases that CUDA has let go since the last call, in the calling thread. Cheap when
// there are none (one atomic load). Called by the tensor and context entries.
void run_graph_releases() noexcept;

}  // namespace cuda
}  // namespace kf
