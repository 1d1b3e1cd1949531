#pragma once
// How the processes of one job prove to each other that they belong to it, on the control
// plane and on the data plane alike, without the job token or any fixed digest of it ever
// travelling.
//
// Each side of a connection sends a fresh random nonce; each then answers with a proof: the
// HMAC-SHA256, keyed by the job token, of what the connection is (its purpose, the job's nonce,
// the sender's and the receiver's rank, the lane) and of both nonces, the sender's first. A
// proof is good for one connection only (the other side's nonce is new each time), cannot be
// reflected back (the ranks and nonces are ordered by direction), and says nothing about the
// token that a guess could be checked against offline faster than HMAC allows. Proofs are
// compared in constant time.
//
// Without a token the same exchange runs with an empty key: it still ties a connection to this
// job's nonce (a stale rank of an earlier job is refused), but anyone may compute it, which is
// why a job across hosts wants a token (docs/multi-process.md).
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/hmac.hpp"

namespace tandem::transport {

using JobNonce = std::array<std::uint8_t, 32>;
using JobProof = Hmac256;

// What a connection is for; part of every proof, so a proof made for one purpose is worthless
// for another.
enum class ProofPurpose : std::uint8_t {
  kControlJoin = 1,   // a rank registering with rank 0 (rank -> 0)
  kControlAdmit = 2,  // rank 0 answering it (0 -> rank)
  kDataTcp = 3,       // a tcp data-plane lane, either direction
  kDataUcx = 4,       // a ucx data-plane endpoint, either direction
  kDataCudaIpc = 5,   // a cuda-ipc data-plane stream, either direction
};

struct ProofContext {
  ProofPurpose purpose = ProofPurpose::kControlJoin;
  JobNonce job{};  // rank 0's per-job nonce (all zero on the control plane before it is known)
  std::uint32_t from_rank = 0;  // who makes the proof
  std::uint32_t to_rank = 0;    // who checks it
  std::uint32_t lane = 0;
  JobNonce from_nonce{};  // the maker's own nonce
  JobNonce to_nonce{};    // the checker's nonce
};

// What every connection of a job proves knowledge of: the job token (empty: none) and rank 0's
// per-job nonce, which the rendezvous hands to every rank once it has proved itself.
struct JobCredentials {
  std::string token;
  JobNonce job{};
};

// A nonce from the operating system's cryptographic generator.
JobNonce fresh_nonce();

JobProof make_proof(std::string_view token, const ProofContext& context);
// Recomputes the proof and compares it in constant time.
bool check_proof(std::string_view token, const ProofContext& context, const JobProof& claimed);

// The 64-bit job id carried in every data-plane frame: the first 8 bytes of the job's nonce
// (never 0), so frames of two jobs never pass for each other by accident.
std::uint64_t job_id_of(const JobNonce& job);

}  // namespace tandem::transport
