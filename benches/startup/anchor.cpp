// bench_startup's anchor: a C++ program linking nothing of Tandem, so that a start-up figure is
// read against what this machine takes to start any program.
#include <cstdio>

int main() {
  std::puts("0");
  return 0;
}
