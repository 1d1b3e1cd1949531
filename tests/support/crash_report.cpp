// Linked into every test executable: a test that dies on a signal prints where, and the lines
// gtest wrote before it. ctest captures stdout through a pipe, where it is fully buffered, so
// without this a crash in CI shows as "SegFault" and nothing else (not even the test's name).
// Under a sanitizer the sanitizer's own handler reports, so nothing is installed there.
#include <execinfo.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <initializer_list>

namespace {

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
void write_text(const char* s) {
  (void)!::write(STDERR_FILENO, s, std::strlen(s));
}

// Async-signal-safe apart from the first backtrace() call, which may load libgcc: it is made
// once at start-up below.
void on_fatal_signal(int sig) {
  write_text("\n*** test process got signal ");
  write_text(sigdescr_np(sig) != nullptr ? sigdescr_np(sig) : "?");
  write_text("; stack:\n");
  void* frames[64];
  const int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

struct CrashReport {
  CrashReport() {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    void* warm[1];
    (void)backtrace(warm, 1);
    for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) std::signal(sig, on_fatal_signal);
  }
};
const CrashReport crash_report;
#endif

}  // namespace
