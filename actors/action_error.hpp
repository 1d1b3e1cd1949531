#pragma once
// A stage action's failure, as the stage actor throws it: which stage replica, the minibatch of
// the training (F, B and W; none for SYNC and STEP), and what the action threw, kept as it was
// thrown so that a caller can tell a layer's exception from a fault of the runtime by its type.
#include <cstdint>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

namespace tandem::actors {

class ActionError : public std::runtime_error {
 public:
  ActionError(const std::string& what, int stage, int replica,
              std::optional<std::int64_t> minibatch, std::exception_ptr cause)
      : std::runtime_error(what),
        stage_(stage),
        replica_(replica),
        minibatch_(minibatch),
        cause_(std::move(cause)) {}

  int stage() const noexcept { return stage_; }
  int replica() const noexcept { return replica_; }
  const std::optional<std::int64_t>& minibatch() const noexcept { return minibatch_; }
  const std::exception_ptr& cause() const noexcept { return cause_; }

 private:
  int stage_;
  int replica_;
  std::optional<std::int64_t> minibatch_;
  std::exception_ptr cause_;
};

}  // namespace tandem::actors
