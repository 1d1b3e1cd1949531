// What bench_startup starts: a program of the installed API that only asks for the version, as a
// CPU-only service does before it trains anything.
#include <cstdio>
#include <tandem/tandem.hpp>

int main() {
  const std::string_view v = tandem::version();
  std::fwrite(v.data(), 1, v.size(), stdout);
  std::fputc('\n', stdout);
  return 0;
}
