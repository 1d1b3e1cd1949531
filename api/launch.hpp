#pragma once
// Joins the job a tandem::Launch names (include/tandem/tandem.hpp): none for local(), the
// launcher's for from_environment(), the one its arguments describe for rank().
#include <memory>

#include "tandem/tandem.hpp"
#include "train/process_group.hpp"

namespace tandem::api {

// Null when the process runs alone. Throws std::invalid_argument naming `owner`'s launch field
// and what is wrong with it (a rank out of range, a master that is no "host:port", a remote
// master without a token); std::runtime_error for a join that failed.
std::unique_ptr<train::ProcessGroup> join_job(const Launch& launch,
                                              train::ProcessGroupOptions options,
                                              const char* owner);

}  // namespace tandem::api
