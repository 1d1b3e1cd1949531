#include "train/job_error.hpp"

#include <utility>

namespace tandem::train {

JobError::JobError(std::string key, const std::string& what)
    : std::invalid_argument(key.empty() ? what : key + ": " + what),
      key_(std::move(key)),
      detail_(what) {}

}  // namespace tandem::train
