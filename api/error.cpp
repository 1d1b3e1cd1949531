#include "tandem/error.hpp"

#include <utility>

namespace tandem {

std::string_view error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::config:
      return "config";
    case ErrorCode::plan:
      return "plan";
    case ErrorCode::checkpoint:
      return "checkpoint";
    case ErrorCode::data:
      return "data";
    case ErrorCode::layer:
      return "layer";
    case ErrorCode::lost_rank:
      return "lost_rank";
    case ErrorCode::stalled:
      return "stalled";
    case ErrorCode::diverged:
      return "diverged";
    case ErrorCode::stopped:
      return "stopped";
    case ErrorCode::internal:
      return "internal";
  }
  return "unknown";
}

Error::Error(ErrorCode code, const std::string& message, ErrorWhere where,
             std::shared_ptr<const TrainResult> partial)
    : std::runtime_error(message),
      code_(code),
      where_(std::move(where)),
      partial_(std::move(partial)) {}

}  // namespace tandem
