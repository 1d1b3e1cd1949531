#include "api/error_translation.hpp"

#include <stdexcept>

#include "train/failure_class.hpp"

namespace tandem::api {
namespace {

ErrorCode error_code(train::FailureKind kind) {
  using K = train::FailureKind;
  switch (kind) {
    case K::config:
      return ErrorCode::config;
    case K::plan:
      return ErrorCode::plan;
    case K::checkpoint:
      return ErrorCode::checkpoint;
    case K::data:
      return ErrorCode::data;
    case K::layer:
      return ErrorCode::layer;
    case K::lost_rank:
      return ErrorCode::lost_rank;
    case K::stalled:
      return ErrorCode::stalled;
    case K::diverged:
      return ErrorCode::diverged;
    case K::internal:
      return ErrorCode::internal;
  }
  return ErrorCode::internal;
}

std::string message_of(const std::exception_ptr& failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

}  // namespace

Error to_error(std::exception_ptr failure, const train::ProcessGroup* group,
               const std::string& prefix) {
  try {
    std::rethrow_exception(failure);
  } catch (const Error& e) {
    if (prefix.empty()) return e;
    return Error(e.code(), prefix + e.what(), e.where());
  } catch (...) {
  }
  train::FailureClass c = train::classify_failure(failure, group);
  ErrorWhere where{c.where.stage, c.where.replica, c.where.rank, c.where.minibatch,
                   std::move(c.where.key)};
  return Error(error_code(c.kind), prefix + message_of(failure), std::move(where));
}

Error option_error(const std::string& key, const std::string& detail) {
  ErrorWhere where;
  where.key = key;
  return Error(ErrorCode::config, key + ": " + detail, std::move(where));
}

Error plan_error(const std::string& key, const std::string& detail) {
  ErrorWhere where;
  where.key = key;
  return Error(ErrorCode::plan, key + ": " + detail, std::move(where));
}

}  // namespace tandem::api
