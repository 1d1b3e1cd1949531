#pragma once
// The credentials a test job's ranks use without a rendezvous to hand them out.
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "transport/job_proof.hpp"

namespace tandem::transport::testing {

// A job nonce whose job id is `job` (the rest zero) and `token` (none by default): every rank of
// a test job derives the same alone.
inline JobCredentials fixed_credentials(std::uint64_t job, std::string token = {}) {
  JobCredentials c;
  for (std::size_t i = 0; i < 8; ++i) c.job[i] = static_cast<std::uint8_t>(job >> (8 * i));
  c.token = std::move(token);
  return c;
}

}  // namespace tandem::transport::testing
