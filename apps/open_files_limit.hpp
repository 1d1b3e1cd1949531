#pragma once
// The soft limit on open files (RLIMIT_NOFILE), raised to the hard one when `tandem` starts: a
// rank of a job holds a socket per peer and data-plane lane, UCX endpoints and its files, and
// a large job runs past the soft limit many systems start with (1024) long before the hard
// one. The launched ranks inherit the raised limit.
#include <sys/resource.h>

namespace tandem::apps {

struct OpenFilesLimit {
  rlim_t soft = 0;
  rlim_t hard = 0;
};

// The limits now in effect.
OpenFilesLimit open_files_limit();

// Raises the soft limit to the hard one; returns the limits in effect afterwards (the old ones
// when the system refuses, which leaves the process as it was rather than failing it).
OpenFilesLimit raise_open_files_limit();

}  // namespace tandem::apps
