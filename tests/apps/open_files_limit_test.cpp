// raise_open_files_limit on this process: the soft limit lowered below the hard one comes back
// up to it.
#include "apps/open_files_limit.hpp"

#include <gtest/gtest.h>

namespace tandem::apps {
namespace {

// Restores the limits the test found, whatever it does to them.
class OpenFilesLimitTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved_), 0); }
  void TearDown() override { ::setrlimit(RLIMIT_NOFILE, &saved_); }
  rlimit saved_{};
};

TEST_F(OpenFilesLimitTest, RaisesALoweredSoftLimitToTheHardOne) {
  if (saved_.rlim_max <= 64) GTEST_SKIP() << "hard limit " << saved_.rlim_max << " leaves no room";
  rlimit lowered = saved_;
  lowered.rlim_cur = 64;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &lowered), 0);
  ASSERT_EQ(open_files_limit().soft, 64u);
  const OpenFilesLimit raised = raise_open_files_limit();
  EXPECT_EQ(raised.soft, saved_.rlim_max);
  EXPECT_EQ(raised.hard, saved_.rlim_max);
  EXPECT_EQ(open_files_limit().soft, saved_.rlim_max);
}

TEST_F(OpenFilesLimitTest, ASoftLimitAtTheHardOneStaysThere) {
  const OpenFilesLimit first = raise_open_files_limit();
  EXPECT_EQ(first.soft, first.hard);
  const OpenFilesLimit again = raise_open_files_limit();
  EXPECT_EQ(again.soft, first.soft);
  EXPECT_EQ(again.hard, first.hard);
}

}  // namespace
}  // namespace tandem::apps
