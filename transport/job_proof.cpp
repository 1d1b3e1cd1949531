#include "transport/job_proof.hpp"

#include <span>
#include <vector>

namespace tandem::transport {
namespace {

// Domain separation: a digest of anything else never equals a proof.
constexpr std::string_view kProofLabel = "tandem job proof v1";

void put_u32(std::vector<std::byte>& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
}

void put_nonce(std::vector<std::byte>& out, const JobNonce& n) {
  for (const std::uint8_t b : n) out.push_back(static_cast<std::byte>(b));
}

std::vector<std::byte> proof_input(const ProofContext& c) {
  std::vector<std::byte> in;
  in.reserve(kProofLabel.size() + 1 + 3 * sizeof(JobNonce) + 12);
  for (const char ch : kProofLabel) in.push_back(static_cast<std::byte>(ch));
  in.push_back(static_cast<std::byte>(c.purpose));
  put_nonce(in, c.job);
  put_u32(in, c.from_rank);
  put_u32(in, c.to_rank);
  put_u32(in, c.lane);
  put_nonce(in, c.from_nonce);
  put_nonce(in, c.to_nonce);
  return in;
}

}  // namespace

JobNonce fresh_nonce() {
  JobNonce n{};
  random_bytes(std::as_writable_bytes(std::span(n)));
  return n;
}

JobProof make_proof(std::string_view token, const ProofContext& context) {
  return hmac_sha256(std::as_bytes(std::span(token.data(), token.size())), proof_input(context));
}

bool check_proof(std::string_view token, const ProofContext& context, const JobProof& claimed) {
  const JobProof expected = make_proof(token, context);
  return equal_in_constant_time(expected, claimed);
}

std::uint64_t job_id_of(const JobNonce& job) {
  std::uint64_t id = 0;
  for (int i = 0; i < 8; ++i) id |= std::uint64_t{job[static_cast<std::size_t>(i)]} << (8 * i);
  return id == 0 ? 1 : id;
}

}  // namespace tandem::transport
