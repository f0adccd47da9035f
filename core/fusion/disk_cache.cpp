// File layout (little-endian):
//   0  char[8]   magic "KFKCACHE"
//   8  uint32    format version (kFormatVersion)
//  12  uint32    0
//  16  uint8[32] the key (the file name's digest; guards against renamed or copied files)
//  48  uint64    payload length
//  56  uint8[32] SHA-256 of the payload
//  88  payload
#include "core/fusion/disk_cache.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kf {
namespace fusion {
namespace {

constexpr char kMagic[8] = {'K', 'F', 'K', 'C', 'A', 'C', 'H', 'E'};
constexpr uint32_t kFormatVersion = 1;
constexpr size_t kHeaderBytes = 88;
// A cubin of a fused kernel is tens of KiB; anything claiming more than this is not ours.
constexpr uint64_t kMaxPayloadBytes = uint64_t(1) << 30;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

void put_u32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
void put_u64(unsigned char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
uint32_t get_u32(const unsigned char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t(p[i]) << (8 * i);
  return v;
}
uint64_t get_u64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(p[i]) << (8 * i);
  return v;
}

// mkdir -p; true when dir exists afterwards.
bool make_directories(const std::string& dir) {
  if (dir.empty()) return false;
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    const std::string prefix = dir.substr(0, pos);
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) return false;
  }
  struct stat st;
  return ::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

std::string disk_cache_dir() {
  if (env("KF_CACHE_DISABLE") == "1") return std::string();
  std::string dir = env("KF_CACHE_DIR");
  if (!dir.empty()) return dir;
  dir = env("XDG_CACHE_HOME");
  if (!dir.empty()) return dir + "/kernel_fusion";
  dir = env("HOME");
  if (!dir.empty()) return dir + "/.cache/kernel_fusion";
  return std::string();
}

std::string disk_cache_path(const std::string& dir, const Sha256Digest& key) {
  return dir + "/" + key.hex() + ".kfcubin";
}

bool write_all(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

static bool read_all(int fd, void* data, size_t size) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::read(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool disk_cache_load(const std::string& dir, const Sha256Digest& key,
                     std::vector<char>* payload) noexcept {
  if (dir.empty()) return false;
  try {
    // Non-blocking, so that a FIFO put at the entry's path cannot hold the open (it is then
    // refused as not a regular file); the file's own size bounds what the header may claim.
    const int fd = ::open(disk_cache_path(dir, key).c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return false;
    struct Closer {
      int fd;
      ~Closer() { ::close(fd); }
    } closer{fd};
    struct stat st;
    unsigned char header[kHeaderBytes];
    bool ok =
        ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
        static_cast<uint64_t>(st.st_size) > kHeaderBytes && read_all(fd, header, kHeaderBytes) &&
        std::memcmp(header, kMagic, sizeof kMagic) == 0 && get_u32(header + 8) == kFormatVersion &&
        get_u32(header + 12) == 0 && std::memcmp(header + 16, key.bytes, 32) == 0;
    const uint64_t length = ok ? get_u64(header + 48) : 0;
    ok = ok && length > 0 && length <= kMaxPayloadBytes &&
         length == static_cast<uint64_t>(st.st_size) - kHeaderBytes;
    std::vector<char> data;
    if (ok) {
      data.resize(static_cast<size_t>(length));
      char extra = 0;
      ok = read_all(fd, data.data(), data.size()) && ::read(fd, &extra, 1) == 0;
    }
    if (!ok) return false;
    const Sha256Digest sum = sha256(data.data(), data.size());
    if (std::memcmp(sum.bytes, header + 56, 32) != 0) return false;
    *payload = std::move(data);
    return true;
  } catch (...) {  // (memory for the payload): a miss, the kernel is compiled instead
    return false;
  }
}

void disk_cache_store(const std::string& dir, const Sha256Digest& key,
                      const std::vector<char>& payload) noexcept {
  try {
    if (dir.empty() || payload.empty() || !make_directories(dir)) return;
    unsigned char header[kHeaderBytes] = {};
    std::memcpy(header, kMagic, sizeof kMagic);
    put_u32(header + 8, kFormatVersion);
    std::memcpy(header + 16, key.bytes, 32);
    put_u64(header + 48, payload.size());
    const Sha256Digest sum = sha256(payload.data(), payload.size());
    std::memcpy(header + 56, sum.bytes, 32);

    // A name no other writer uses (process id, and a counter for threads of this process).
    static std::atomic<unsigned> counter{0};
    const std::string final_path = disk_cache_path(dir, key);
    const std::string temp_path = final_path + ".tmp." + std::to_string(::getpid()) + "." +
                                  std::to_string(counter.fetch_add(1));
    const int fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return;
    const bool written =
        write_all(fd, header, sizeof header) && write_all(fd, payload.data(), payload.size());
    const bool closed = ::close(fd) == 0;
    if (!written || !closed || std::rename(temp_path.c_str(), final_path.c_str()) != 0) {
      ::unlink(temp_path.c_str());
    }
  } catch (...) {
    // out of host memory building a path: the cache is optional
  }
}

}  // namespace fusion
}  // namespace kf
