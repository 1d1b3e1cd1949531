// AtomicFile: a target is wholly old or wholly new, whatever stops the writer.
#include "runtime/atomic_file.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace tandem {
namespace {

namespace fs = std::filesystem;

class AtomicFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("tandem_atomic_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    set_atomic_write_hook_for_testing({});
    fs::remove_all(dir_);
  }

  static std::string contents(const fs::path& file) {
    std::ifstream in(file, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename());
    return names;
  }

  fs::path dir_;
};

TEST_F(AtomicFileTest, WritesAndReplacesWithoutLeavingTemporaries) {
  const fs::path target = dir_ / "data.bin";
  write_file_atomically(target, std::string_view("old contents"));
  EXPECT_EQ(contents(target), "old contents");
  AtomicFile file(target);
  file.write(std::string_view("new "));
  file.write(std::string_view("contents"));
  EXPECT_EQ(file.bytes_written(), 12u);
  EXPECT_TRUE(fs::exists(file.temporary()));
  EXPECT_EQ(file.temporary().parent_path(), dir_);  // same file system: rename is atomic
  EXPECT_EQ(contents(target), "old contents");      // nothing visible before commit
  file.commit();
  EXPECT_EQ(contents(target), "new contents");
  EXPECT_EQ(entries(), std::vector<std::string>{"data.bin"});
}

TEST_F(AtomicFileTest, AbandonedWriteLeavesTargetAndNoTemporary) {
  const fs::path target = dir_ / "data.bin";
  write_file_atomically(target, std::string_view("old"));
  {
    AtomicFile file(target);
    file.write(std::string_view("half of the new"));
  }
  EXPECT_EQ(contents(target), "old");
  EXPECT_EQ(entries(), std::vector<std::string>{"data.bin"});
}

TEST_F(AtomicFileTest, FailureAtEveryPointBeforeRenameLeavesTargetAndNoTemporary) {
  const fs::path target = dir_ / "data.bin";
  write_file_atomically(target, std::string_view("old"));
  int failures = 0;
  for (const AtomicWritePoint stop :
       {AtomicWritePoint::wrote_bytes, AtomicWritePoint::before_rename}) {
    set_atomic_write_hook_for_testing([stop](const fs::path&, AtomicWritePoint point) {
      if (point == stop) throw std::runtime_error("stopped by the test");
    });
    EXPECT_THROW(write_file_atomically(target, std::string_view("new")), std::runtime_error);
    ++failures;
    EXPECT_EQ(contents(target), "old");
    EXPECT_EQ(entries(), std::vector<std::string>{"data.bin"});
  }
  EXPECT_EQ(failures, 2);
}

TEST_F(AtomicFileTest, ErrorsNameThePathAndTheReason) {
  const fs::path missing = dir_ / "no_such_dir" / "data.bin";
  try {
    write_file_atomically(missing, std::string_view("x"));
    FAIL() << "expected FileError";
  } catch (const FileError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find((dir_ / "no_such_dir").string()), std::string::npos) << what;
    EXPECT_NE(what.find("No such file or directory"), std::string::npos) << what;
  }
  // A directory cannot be replaced by a file: the rename fails, and the temporary goes.
  fs::create_directory(dir_ / "sub");
  try {
    write_file_atomically(dir_ / "sub", std::string_view("x"));
    FAIL() << "expected FileError";
  } catch (const FileError& e) {
    EXPECT_NE(std::string(e.what()).find((dir_ / "sub").string()), std::string::npos) << e.what();
  }
  EXPECT_EQ(entries(), std::vector<std::string>{"sub"});
  EXPECT_THROW(fsync_directory(dir_ / "absent"), FileError);
}

// A process killed mid-write (SIGKILL: no handler, no destructor) leaves the old target.
TEST_F(AtomicFileTest, KilledWriterLeavesOldContents) {
  const fs::path target = dir_ / "data.bin";
  const std::string old_contents(1000, 'o');
  write_file_atomically(target, old_contents);
  for (const AtomicWritePoint stop :
       {AtomicWritePoint::wrote_bytes, AtomicWritePoint::before_rename}) {
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::close(ready[0]);
      ::alarm(20);  // never outlive a parent that failed before killing us
      set_atomic_write_hook_for_testing([&](const fs::path&, AtomicWritePoint point) {
        if (point != stop) return;
        const char byte = 'x';
        if (::write(ready[1], &byte, 1) != 1) ::_exit(3);
        for (;;) ::pause();
      });
      try {
        AtomicFile file(target);
        file.write(std::string(600, 'n'));
        file.write(std::string(600, 'n'));
        file.commit();
      } catch (...) {
        ::_exit(2);
      }
      ::_exit(0);
    }
    ::close(ready[1]);
    char byte = 0;
    const ssize_t got = ::read(ready[0], &byte, 1);
    ::close(ready[0]);
    ::kill(child, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_EQ(got, 1) << "the writer did not reach the stop point";
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    EXPECT_EQ(contents(target), old_contents);
  }
}

}  // namespace
}  // namespace tandem
