// tandem::Runtime: a ThreadBudget (runtime/thread_budget.hpp) the sessions given it share.
#include <stdexcept>

#include "runtime/thread_budget.hpp"
#include "tandem/tandem.hpp"

namespace tandem {

Runtime::Runtime(std::size_t threads) {
  if (threads == 0) throw std::invalid_argument("Runtime: threads must be >= 1, got 0");
  budget_ = std::make_shared<ThreadBudget>(threads);
}

std::size_t Runtime::threads() const {
  return budget_->size();
}

std::size_t Runtime::peak_threads_in_use() const {
  return budget_->peak();
}

}  // namespace tandem
