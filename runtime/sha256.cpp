#include "runtime/sha256.hpp"

#include <openssl/evp.h>

#include <array>
#include <stdexcept>

namespace tandem {

// libcrypto's digest context; reset with the algorithm after every digest.
struct Sha256::Context {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  Context() {
    if (ctx == nullptr || EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) != 1) {
      EVP_MD_CTX_free(ctx);
      throw std::runtime_error("sha256: libcrypto could not start a SHA-256 digest");
    }
  }
  ~Context() { EVP_MD_CTX_free(ctx); }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
};

Sha256::Sha256() : context_(std::make_unique<Context>()) {}
Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

void Sha256::update(std::span<const std::byte> bytes) {
  if (bytes.empty()) return;
  if (EVP_DigestUpdate(context_->ctx, bytes.data(), bytes.size()) != 1) {
    throw std::runtime_error("sha256: libcrypto failed to hash the data");
  }
}

void Sha256::update(std::string_view text) {
  update(std::as_bytes(std::span(text.data(), text.size())));
}

std::string Sha256::hex_digest() {
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int size = 0;
  if (EVP_DigestFinal_ex(context_->ctx, digest.data(), &size) != 1 ||
      EVP_DigestInit_ex(context_->ctx, EVP_sha256(), nullptr) != 1) {
    throw std::runtime_error("sha256: libcrypto failed to finish the digest");
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * size);
  for (unsigned int i = 0; i < size; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 15]);
  }
  return out;
}

std::string sha256_hex(std::span<const std::byte> bytes) {
  Sha256 h;
  h.update(bytes);
  return h.hex_digest();
}

}  // namespace tandem
