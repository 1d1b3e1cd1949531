#pragma once
// The data source's failure for a minibatch (it threw, or gave what does not fit), as the
// loader throws it: the message is the source's own.
#include <cstdint>
#include <stdexcept>
#include <string>

namespace tandem::actors {

class DataSourceError : public std::runtime_error {
 public:
  DataSourceError(const std::string& what, std::int64_t minibatch)
      : std::runtime_error(what), minibatch_(minibatch) {}
  std::int64_t minibatch() const noexcept { return minibatch_; }

 private:
  std::int64_t minibatch_;
};

}  // namespace tandem::actors
