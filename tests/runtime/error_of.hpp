#pragma once
// The message of the exception `f` throws, or "" when it throws none: tests check what an error
// says, not only that one was thrown.
#include <exception>
#include <string>

namespace tandem::test {

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace tandem::test
