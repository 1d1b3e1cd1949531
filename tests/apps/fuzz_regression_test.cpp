// Inputs the fuzzers of tests/fuzz found crashing, kept as tests (their files are also in the
// fuzzers' seed corpora, tests/fuzz/corpus/). Each must now be refused with the reader's own
// error, or read, without undefined behaviour (this binary under ASan/UBSan shows the latter).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "planner/profile.hpp"
#include "schedules/schedule_error.hpp"
#include "schedules/text_form.hpp"
#include "schedules/validator.hpp"

namespace tandem {
namespace {

std::string corpus_file(const std::string& name) {
  std::ifstream in(std::filesystem::path(TANDEM_SOURCE_DIR) / "tests/fuzz/corpus" / name,
                   std::ios::binary);
  EXPECT_TRUE(in.good()) << name;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// fuzz_profile: a number too large for a double made nlohmann::json throw out_of_range, which
// escaped the reader as a bare exception ("[json.exception.out_of_range.406] ...").
TEST(FuzzRegression, ProfileNumberOverflowIsAProfileError) {
  const std::string text = corpus_file("profile/regression-number-overflow.json");
  try {
    planner::parse_profile_text(text, "fuzz.json");
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("fuzz.json: invalid JSON", 0), 0u) << e.what();
  }
}

// fuzz_schedule_text: a device line without actions ("d0:") made the validator do pointer
// arithmetic on an empty vector's null data().
TEST(FuzzRegression, DeviceWithoutActionsValidates) {
  const std::string text = corpus_file("schedule_text/regression-empty-device.txt");
  EXPECT_EQ(text, "d0:\n");
  const schedules::ActionList list = schedules::parse_actions(text);
  ASSERT_EQ(list.devices.size(), 1u);
  EXPECT_TRUE(list.devices[0].empty());
  try {
    schedules::validate(list);
  } catch (const schedules::ScheduleError&) {
    // Refusing an empty schedule is as good as accepting it; crashing is not.
  }
}

}  // namespace
}  // namespace tandem

namespace tandem::apps {
namespace {

// fuzz_schedule_text (found by CI's bounded run): replica counts that each fit an int but whose
// sum does not overflowed total_replicas() (signed overflow, caught by UBSan). The header is
// refused instead.
TEST(FuzzRegression, ReplicaCountsWhoseSumOverflowsAreRefused) {
  const std::string text = corpus_file("schedule_text/regression-replica-sum-overflow.txt");
  try {
    (void)schedules::parse_actions(text);
    ADD_FAILURE() << "accepted: " << text;
  } catch (const schedules::ScheduleError& e) {
    EXPECT_NE(std::string(e.what()).find("replicas"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tandem::apps

namespace tandem::apps {
namespace {

// fuzz_schedule_text (CI's bounded run): chunks=33333332 in a header made every device allocate
// per-chunk state for 33 million chunks (out of memory). Virtual stages are bounded first.
TEST(FuzzRegression, HugeChunkCountsAreRefusedBeforeAllocating) {
  const std::string text = corpus_file("schedule_text/regression-chunks-oom.txt");
  try {
    (void)schedules::parse_actions(text);
    ADD_FAILURE() << "accepted: " << text;
  } catch (const schedules::ScheduleError& e) {
    EXPECT_NE(std::string(e.what()).find("virtual stages"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tandem::apps
