#include "runtime/hmac.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <climits>
#include <stdexcept>

namespace tandem {

Hmac256 hmac_sha256(std::span<const std::byte> key, std::span<const std::byte> data) {
  if (key.size() > static_cast<std::size_t>(INT_MAX)) {
    throw std::runtime_error("hmac_sha256: a key of more than 2 GiB");
  }
  Hmac256 out{};
  unsigned int size = 0;
  // HMAC reads no key bytes when the key is empty, but wants a non-null pointer.
  static const unsigned char kNoKey = 0;
  const auto* key_bytes =
      key.empty() ? &kNoKey : reinterpret_cast<const unsigned char*>(key.data());
  const auto* data_bytes =
      data.empty() ? &kNoKey : reinterpret_cast<const unsigned char*>(data.data());
  if (HMAC(EVP_sha256(), key_bytes, static_cast<int>(key.size()), data_bytes, data.size(),
           out.data(), &size) == nullptr ||
      size != out.size()) {
    throw std::runtime_error("hmac_sha256: libcrypto failed to compute the HMAC");
  }
  return out;
}

bool equal_in_constant_time(std::span<const std::uint8_t> a, std::span<const std::uint8_t> b) {
  if (a.size() != b.size()) return false;
  if (a.empty()) return true;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

void random_bytes(std::span<std::byte> out) {
  if (out.empty()) return;
  if (out.size() > static_cast<std::size_t>(INT_MAX) ||
      RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(out.size())) != 1) {
    throw std::runtime_error("random_bytes: the system's random generator failed");
  }
}

}  // namespace tandem
