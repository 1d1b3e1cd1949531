#pragma once
// The words the ranks of a job exchange when they agree on it (train/job_agreement.hpp), read
// from another process: rank 0's description on the other ranks, and their answers on rank 0.
// Apart from the exchange so that the fuzz target (tests/fuzz/fuzz_job_agreement.cpp) runs
// them on any bytes.
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "train/job_error.hpp"

namespace tandem::train {

// A description as one text: its lines, each ended by a newline.
std::string description_text(const std::vector<std::string>& lines);

// A rank other than 0 holding rank 0's description (`rank0_text`, bytes from another process)
// against its own: when they differ, the answer it sends rank 0 (the first differing line's
// key, rank 0's line and its own) and the refusal it throws; both empty when they agree. Lines
// from the other process are shown bounded (300 characters) and with every byte outside
// printable ASCII escaped.
struct AgreementCheck {
  std::string answer;
  std::optional<JobError> refusal;
};
AgreementCheck check_against_rank0(std::string_view rank0_text,
                                   const std::vector<std::string>& mine);

// Rank 0's reading of rank `rank`'s answer (bytes from that process; `who` names it, "rank 2
// (10.0.0.3)"; `rank` < 0: a process joining an elastic job, which has none yet): nothing when
// it is empty (the rank agrees), else the refusal naming the key and both values, each bounded
// and escaped as above, whatever the bytes.
std::optional<JobError> refusal_of_answer(std::span<const std::byte> answer, const std::string& who,
                                          int rank);

}  // namespace tandem::train
