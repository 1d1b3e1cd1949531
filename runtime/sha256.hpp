#pragma once
// SHA-256 (FIPS 180-4) through OpenSSL's libcrypto, for checksums of files that must be
// recognised as intact (checkpoints): the same digest `sha256sum` prints, so a user can check a
// file by hand. OpenSSL's headers stay in the .cpp.
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace tandem {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(std::span<const std::byte> bytes);
  void update(std::string_view text);
  // The digest as 64 lower-case hex digits; the object is reset afterwards.
  std::string hex_digest();

 private:
  struct Context;
  std::unique_ptr<Context> context_;
};

std::string sha256_hex(std::span<const std::byte> bytes);

}  // namespace tandem
