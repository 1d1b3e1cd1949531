#pragma once
// The one place where the library's own failures become the API's tandem::Error: each internal
// exception type maps to a code, with the stage, replica, minibatch or key it carries. Every
// Session member that can fail runs its work through at_boundary.
#include <exception>
#include <string>
#include <utility>

#include "tandem/error.hpp"

namespace tandem::train {
class ProcessGroup;
}

namespace tandem::api {

// `failure` as an Error. `group` (may be null): the process group of a multi-process job, whose
// first failure tells a lost rank from a stalled one. `prefix` (may be empty) goes before the
// message ("Session::predict: ").
Error to_error(std::exception_ptr failure, const train::ProcessGroup* group,
               const std::string& prefix = {});

// An option given in code that cannot be: ErrorCode::config naming `key` ("TrainOptions.plan").
Error option_error(const std::string& key, const std::string& detail);

// A plan given in code that the model or the schedule cannot run: ErrorCode::plan naming `key`
// ("plan.stages[1].devices").
Error plan_error(const std::string& key, const std::string& detail);

// Runs f(), turning whatever it throws into an Error. Checks of call order (std::logic_error
// for the application) belong outside it: inside, a logic_error is a fault of the library.
template <class F>
decltype(auto) at_boundary(const train::ProcessGroup* group, const std::string& prefix, F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (...) {
    throw to_error(std::current_exception(), group, prefix);
  }
}

}  // namespace tandem::api
