#pragma once
// The ThreadBudget behind a public tandem::Runtime, for the API's own use.
#include <memory>
#include <optional>

#include "runtime/thread_budget.hpp"
#include "tandem/tandem.hpp"

namespace tandem {

struct RuntimeAccess {
  static std::shared_ptr<ThreadBudget> budget(const std::optional<Runtime>& runtime) {
    return runtime ? runtime->budget_ : nullptr;
  }
};

}  // namespace tandem
