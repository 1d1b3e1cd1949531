// The ranks' agreement on the job before any trains (train/job_agreement.hpp), between ranks of
// one control plane played by threads of this process: equal descriptions pass, a difference is
// refused by both sides naming the key and both values, words from another process are shown
// bounded and escaped whatever they hold, and a rank lost half-way through the agreement ends
// it on rank 0 as a lost rank instead of a hang.
#include "train/job_agreement.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "train/process_group.hpp"
#include "transport/rendezvous.hpp"
#include "two_ranks.hpp"

namespace tandem::train {
namespace {

using namespace std::chrono_literals;

using testing::TwoRanks;

const std::vector<std::string> kJob = {"model 0 linear 8->4", "pipeline.schedule: 1f1b",
                                       "pipeline.slices: 4", "train.seed: 1"};

std::span<const std::byte> bytes(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

// The error agree_on_job threw on `group`'s rank, or nothing.
std::optional<std::string> agreement_error(ProcessGroup& group,
                                           const std::vector<std::string>& mine) {
  try {
    agree_on_job(group, mine, "job");
  } catch (const std::exception& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

TEST(JobAgreement, RanksWithTheSameJobAgree) {
  TwoRanks job;
  std::optional<std::string> one_error;
  std::thread one([&] { one_error = agreement_error(*job.one, kJob); });
  const std::optional<std::string> zero_error = agreement_error(*job.zero, kJob);
  one.join();
  EXPECT_FALSE(zero_error) << *zero_error;
  EXPECT_FALSE(one_error) << *one_error;
}

TEST(JobAgreement, BothRanksRefuseAJobThatDiffersNamingTheKeyAndBothValues) {
  TwoRanks job;
  std::vector<std::string> other = kJob;
  other[2] = "pipeline.slices: 2";
  std::optional<std::string> one_error;
  std::thread one([&] { one_error = agreement_error(*job.one, other); });
  const std::optional<std::string> zero_error = agreement_error(*job.zero, kJob);
  one.join();
  ASSERT_TRUE(zero_error && one_error);
  EXPECT_EQ(*zero_error,
            "pipeline.slices: rank 1 (127.0.0.1) runs another job than rank 0: rank 0 has "
            "'pipeline.slices: 4', rank 1 'pipeline.slices: 2'");
  EXPECT_EQ(*one_error,
            "pipeline.slices: this rank's job differs from rank 0's: rank 0 has "
            "'pipeline.slices: 4', this rank 'pipeline.slices: 2'");
}

// A description longer or shorter than this rank's: the first missing line is the difference.
TEST(JobAgreement, AMissingOrExtraLineIsTheDifference) {
  std::vector<std::string> longer = kJob;
  longer.push_back("train.precision: bf16");
  const AgreementCheck shorter = check_against_rank0("model 0 linear 8->4\n", kJob);
  ASSERT_TRUE(shorter.refusal);
  EXPECT_EQ(shorter.refusal->key(), "pipeline.schedule");
  EXPECT_NE(std::string(shorter.refusal->what()).find("rank 0 has '(nothing)'"), std::string::npos);
  std::string text;
  for (const std::string& l : longer) text += l + "\n";
  const AgreementCheck extra = check_against_rank0(text, kJob);
  ASSERT_TRUE(extra.refusal);
  EXPECT_EQ(extra.refusal->key(), "train.precision");
  EXPECT_FALSE(check_against_rank0("", {}).refusal);
}

// Rank 0's description from a hostile or broken process: huge lines, terminal escapes, NULs,
// no newline at all. This rank's refusal and its answer stay bounded and printable.
TEST(JobAgreement, AHostileDescriptionFromRankZeroIsShownBoundedAndEscaped) {
  const std::string huge(1 << 20, 'x');
  std::string nul_and_escape = "pipeline.slices: \x1b[2J";
  nul_and_escape += '\0';
  nul_and_escape += "\xff\\";
  for (const std::string& rank0 :
       {huge, "model 0 linear 8->4\n" + nul_and_escape + "\n", std::string(100000, '\n')}) {
    const AgreementCheck c = check_against_rank0(rank0, kJob);
    ASSERT_TRUE(c.refusal);
    const std::string what = c.refusal->what();
    EXPECT_LT(what.size(), 1200u);
    EXPECT_LE(c.answer.size(), 3 * 300 + 2);
    for (const char ch : what) {
      EXPECT_TRUE(ch >= 0x20 && ch < 0x7f) << "byte " << static_cast<int>(ch) << " in " << what;
    }
  }
  const AgreementCheck escaped =
      check_against_rank0("model 0 linear 8->4\n" + nul_and_escape + "\n", kJob);
  EXPECT_NE(std::string(escaped.refusal->what()).find("\\x1b[2J\\x00\\xff\\x5c"), std::string::npos)
      << escaped.refusal->what();
}

// An answer from a hostile rank: nothing trusted beyond three bounded, escaped lines.
TEST(JobAgreement, AHostileAnswerIsShownBoundedAndEscaped) {
  EXPECT_FALSE(refusal_of_answer({}, "rank 1 (h)", 1));
  const std::string many_lines = std::string(1 << 16, '\n') + "tail";
  const std::string huge_key = std::string(1 << 20, 'k') + "\nx\ny";
  std::string binary;
  for (int b = 0; b < 256; ++b) binary += static_cast<char>(b);
  for (const std::string& answer : {many_lines, huge_key, binary, std::string("only one line")}) {
    const std::optional<JobError> e = refusal_of_answer(bytes(answer), "rank 1 (h)", 1);
    ASSERT_TRUE(e);
    const std::string what = e->what();
    EXPECT_LT(what.size(), 1500u);
    EXPECT_LE(e->key().size(), 330u);
    for (const char ch : what) EXPECT_TRUE(ch >= 0x20 && ch < 0x7f) << static_cast<int>(ch);
  }
  const std::optional<JobError> short_answer =
      refusal_of_answer(bytes(std::string("only one line")), "rank 1 (h)", 1);
  EXPECT_NE(std::string(short_answer->what()).find("rank 0 has '?'"), std::string::npos);
}

// Rank 1 takes rank 0's description and is lost before it answers (its process killed at that
// moment: its group ends without a goodbye). Rank 0 ends the agreement as a lost rank.
TEST(JobAgreement, ARankLostHalfWayThroughEndsTheAgreementOnRankZero) {
  TwoRanks job(500ms);  // lost after half a second of silence
  std::thread one([&] {
    (void)job.one->broadcast_text("job", "");
    job.one.reset();  // no shutdown(): what a kill looks like to the others
  });
  try {
    agree_on_job(*job.zero, kJob, "job");
    ADD_FAILURE() << "rank 0 agreed with a lost rank";
  } catch (const transport::RendezvousError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
  }
  one.join();
  EXPECT_EQ(job.zero->first_failure().kind, GroupFailure::Kind::lost);
}

}  // namespace
}  // namespace tandem::train
