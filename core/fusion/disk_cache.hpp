// The on-disk cache of compiled fused kernels (machine code only). A file is named by the
// SHA-256 of everything that determines its contents (source, embedded headers, NVRTC options,
// architecture, NVRTC version) and holds a header (magic, format version, that key, payload
// length, payload SHA-256) followed by the payload. Nothing read is trusted: a file whose header
// or checksum does not match is ignored (and overwritten by the caller's fresh compile). Writes
// go to a temporary file renamed into place, so readers never see half a file.
#pragma once

#include <string>
#include <vector>

#include "core/fusion/sha256.hpp"

namespace kf {
namespace fusion {

// The cache directory: KF_CACHE_DIR, else $XDG_CACHE_HOME/kernel_fusion, else
// $HOME/.cache/kernel_fusion; empty when KF_CACHE_DISABLE=1 or no location is known.
// Read from the environment at every call (tests change it).
std::string disk_cache_dir();

// Writes all of data to fd, retrying short writes and EINTR; false on any other failure.
bool write_all(int fd, const void* data, size_t size);

// The file that holds key's entry in dir.
std::string disk_cache_path(const std::string& dir, const Sha256Digest& key);

// Reads key's entry; false (payload untouched) when absent, unreadable or not valid.
bool disk_cache_load(const std::string& dir, const Sha256Digest& key,
                     std::vector<char>* payload) noexcept;

// Writes key's entry (creating dir); best effort: failures are ignored, the cache is optional.
void disk_cache_store(const std::string& dir, const Sha256Digest& key,
                      const std::vector<char>& payload) noexcept;

}  // namespace fusion
}  // namespace kf
