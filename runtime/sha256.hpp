#pragma once
// SHA-256 (FIPS 180-4), for checksums of files that must be recognised as intact (checkpoints):
// the same digest `sha256sum` prints, so a user can check a file by hand.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace tandem {

class Sha256 {
 public:
  Sha256();
  void update(std::span<const std::byte> bytes);
  void update(std::string_view text);
  // The digest as 64 lower-case hex digits; the object is reset afterwards.
  std::string hex_digest();

 private:
  void compress(const std::uint8_t* block);
  void reset();

  std::array<std::uint32_t, 8> state_{};
  std::array<std::uint8_t, 64> buffer_{};
  std::size_t buffered_ = 0;
  std::uint64_t length_ = 0;  // bytes hashed so far
};

std::string sha256_hex(std::span<const std::byte> bytes);

}  // namespace tandem
