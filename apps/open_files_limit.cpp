#include "apps/open_files_limit.hpp"

namespace tandem::apps {

OpenFilesLimit open_files_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return {};
  return {limit.rlim_cur, limit.rlim_max};
}

OpenFilesLimit raise_open_files_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return {};
  if (limit.rlim_cur != limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  return {limit.rlim_cur, limit.rlim_max};
}

}  // namespace tandem::apps
