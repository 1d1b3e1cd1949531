#pragma once
// Shared by the config tests: edit a config's text in one place, and expect one error at a
// file, line (and column) that names what is wrong.
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "train/config.hpp"

namespace tandem::apps::testing {

// `text` with the first `from` replaced by `to` (a failure when there is none).
inline std::string replace_once(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at == std::string::npos) return text;
  return text.replace(at, from.size(), to);
}

// Parsing `text` as `file` fails at `line` (and `column`, when > 0) with every one of `words`.
inline void expect_config_error(const std::string& text, const std::string& file, int line,
                                int column, std::initializer_list<std::string> words) {
  try {
    train::parse_config(text, file);
    ADD_FAILURE() << "no error for:\n" << text;
  } catch (const train::ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.where().line, line) << msg;
    if (column > 0) {
      EXPECT_EQ(e.where().column, column) << msg;
    }
    EXPECT_NE(msg.find(file + ":" + std::to_string(line) + ":"), std::string::npos) << msg;
    for (const std::string& w : words) {
      EXPECT_NE(msg.find(w), std::string::npos) << w << " not in: " << msg;
    }
  }
}

}  // namespace tandem::apps::testing
