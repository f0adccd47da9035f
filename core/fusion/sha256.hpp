// SHA-256 (FIPS 180-4), for the names and payload checksums of the on-disk kernel cache: a file
// is found by the digest of everything that determines its machine code, and its payload is
// checked against a digest stored beside it before it is used.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kf {
namespace fusion {

struct Sha256Digest {
  uint8_t bytes[32] = {};
  bool operator==(const Sha256Digest& o) const;
  std::string hex() const;  // 64 lowercase hex digits
};

class Sha256 {
 public:
  Sha256();
  Sha256& update(const void* data, size_t size);
  // Appends a length-prefixed string, so that ("ab", "c") and ("a", "bc") hash differently.
  Sha256& update_field(const std::string& s);
  Sha256Digest finish();  // the object is spent afterwards

 private:
  void compress(const uint8_t* block);
  uint32_t state_[8];
  uint8_t buffer_[64];
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

Sha256Digest sha256(const void* data, size_t size);

}  // namespace fusion
}  // namespace kf
