// A proof is good only for the token, purpose, job, direction, lane and nonces it was made for.
#include "transport/job_proof.hpp"

#include <gtest/gtest.h>

namespace tandem::transport {
namespace {

ProofContext sample() {
  ProofContext c;
  c.purpose = ProofPurpose::kDataTcp;
  c.job = fresh_nonce();
  c.from_rank = 2;
  c.to_rank = 0;
  c.lane = 1;
  c.from_nonce = fresh_nonce();
  c.to_nonce = fresh_nonce();
  return c;
}

TEST(JobProof, ChecksWithTheSameTokenAndContext) {
  const ProofContext c = sample();
  EXPECT_TRUE(check_proof("secret", c, make_proof("secret", c)));
  EXPECT_TRUE(check_proof("", c, make_proof("", c)));
}

TEST(JobProof, AnyDifferenceRefuses) {
  const ProofContext c = sample();
  const JobProof p = make_proof("secret", c);
  EXPECT_FALSE(check_proof("secreT", c, p));
  EXPECT_FALSE(check_proof("", c, p));
  auto changed = [&](auto edit) {
    ProofContext d = c;
    edit(d);
    return check_proof("secret", d, p);
  };
  EXPECT_FALSE(changed([](ProofContext& d) { d.purpose = ProofPurpose::kDataUcx; }));
  EXPECT_FALSE(changed([](ProofContext& d) { d.job[31] ^= 1; }));
  EXPECT_FALSE(changed([](ProofContext& d) { d.lane = 0; }));
  EXPECT_FALSE(changed([](ProofContext& d) { d.from_nonce[0] ^= 1; }));
  EXPECT_FALSE(changed([](ProofContext& d) { d.to_nonce[5] ^= 1; }));
  // Reflected: the same connection seen from the other end.
  EXPECT_FALSE(changed([](ProofContext& d) {
    std::swap(d.from_rank, d.to_rank);
    std::swap(d.from_nonce, d.to_nonce);
  }));
}

TEST(JobProof, JobIdIsNeverZero) {
  JobNonce zero{};
  EXPECT_NE(job_id_of(zero), 0u);
  JobNonce n{};
  n[0] = 7;
  EXPECT_EQ(job_id_of(n), 7u);
}

}  // namespace
}  // namespace tandem::transport
