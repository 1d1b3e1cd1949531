// The library's log: its own logger, routed to a handler when asked, back to stderr when the
// handler is cleared, and never through (or replacing) the application's spdlog default logger.
#include "runtime/log.hpp"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <unistd.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace tandem {
namespace {

TEST(Log, LinesGoToTheHandlerAndNotToTheApplicationsDefaultLogger) {
  // The application's own default logger, capturing.
  std::ostringstream app_lines;
  auto saved = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      "app", std::make_shared<spdlog::sinks::ostream_sink_mt>(app_lines)));

  std::vector<std::pair<log::Level, std::string>> got;
  log::set_handler([&](log::Level level, std::string_view message) {
    got.emplace_back(level, std::string(message));
  });
  log::warn("rank {} lost at step {}", 2, 340);
  log::error("plain text");
  log::info("an {}", "info line");
  log::set_handler({});
  // Cleared, the lines reach stderr again (captured here in a file).
  std::FILE* file = std::tmpfile();
  ASSERT_NE(file, nullptr);
  std::fflush(stderr);
  const int saved_fd = ::dup(2);
  ::dup2(::fileno(file), 2);
  log::warn("to stderr {}", "again");
  log::logger().flush();
  std::fflush(stderr);
  ::dup2(saved_fd, 2);
  ::close(saved_fd);
  std::string err(4096, '\0');
  std::rewind(file);
  err.resize(std::fread(err.data(), 1, err.size(), file));
  std::fclose(file);
  EXPECT_NE(err.find("to stderr again"), std::string::npos) << err;

  spdlog::set_default_logger(saved);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].first, log::Level::warn);
  EXPECT_EQ(got[0].second, "rank 2 lost at step 340");
  EXPECT_EQ(got[1].first, log::Level::error);
  EXPECT_EQ(got[1].second, "plain text");
  EXPECT_EQ(got[2].first, log::Level::info);
  EXPECT_EQ(got[2].second, "an info line");
  EXPECT_EQ(app_lines.str(), "");
}

}  // namespace
}  // namespace tandem
