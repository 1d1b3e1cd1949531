#pragma once
// Keyed digests and the comparisons that go with them, through OpenSSL's libcrypto: what a
// challenge-response between the processes of a job is made of (transport/job_proof.hpp).
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace tandem {

using Hmac256 = std::array<std::uint8_t, 32>;

// HMAC-SHA256 (RFC 2104) of `data` under `key` (any length, empty included).
Hmac256 hmac_sha256(std::span<const std::byte> key, std::span<const std::byte> data);

// Equality whose time depends only on the sizes, never on where the first difference lies, so
// a peer cannot learn a secret value byte by byte from how fast it is refused.
bool equal_in_constant_time(std::span<const std::uint8_t> a, std::span<const std::uint8_t> b);

// Bytes from the operating system's cryptographic generator; throws std::runtime_error when it
// cannot deliver them (never a weaker source).
void random_bytes(std::span<std::byte> out);

}  // namespace tandem
