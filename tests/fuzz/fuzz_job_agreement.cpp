// libFuzzer target for the words of the ranks' agreement on a job (train/job_agreement_text.hpp),
// read from another process: the input, as rank 0's description, is held against a fixed job
// on another rank, and, as another rank's answer, read by rank 0. Whatever the bytes, both
// either agree or make a refusal whose key and message are bounded and printable ASCII only
// (a peer's words never reach a terminal or a log raw), and an answer this rank makes stays
// within three lines of at most 300 bytes each.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "train/job_agreement_text.hpp"

namespace {

void check_shown(const std::string& text, std::size_t limit) {
  if (text.size() > limit) __builtin_trap();
  for (const char c : text) {
    if (c < 0x20 || c >= 0x7f) __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace tt = tandem::train;
  const std::vector<std::string> mine = {"model 0 linear 8->4", "pipeline.schedule: 1f1b",
                                         "pipeline.slices: 4", "train.seed: 1"};
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const tt::AgreementCheck check = tt::check_against_rank0(text, mine);
  if (check.refusal.has_value() == check.answer.empty()) __builtin_trap();
  if (check.refusal) {
    check_shown(check.refusal->what(), 2000);
    check_shown(check.refusal->key(), 400);
    if (check.answer.size() > 3 * 300 + 2) __builtin_trap();
  }
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  const std::optional<tt::JobError> refusal = tt::refusal_of_answer(bytes, "rank 1 (10.0.0.2)", 1);
  if (refusal.has_value() != (size > 0)) __builtin_trap();
  if (refusal) {
    check_shown(refusal->what(), 2000);
    check_shown(refusal->key(), 400);
  }
  return 0;
}
