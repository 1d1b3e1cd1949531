#pragma once
// Which shared libraries this process has mapped, read from /proc/self/maps: for the tests that
// check that a back end's plugin and its libraries load only on first use.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

namespace tandem::test_support {

// The lines of /proc/self/maps whose file name contains one of `names`.
inline std::vector<std::string> mapped(const std::vector<std::string>& names) {
  std::ifstream maps("/proc/self/maps");
  EXPECT_TRUE(maps.good()) << "cannot read /proc/self/maps";
  std::vector<std::string> found;
  std::string line;
  while (std::getline(maps, line)) {
    for (const std::string& n : names) {
      if (line.find(n) != std::string::npos) {
        found.push_back(line);
        break;
      }
    }
  }
  return found;
}

inline std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& l : lines) out += l + "\n";
  return out;
}

}  // namespace tandem::test_support
