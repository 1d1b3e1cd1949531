#pragma once
// Benchmarks print the usual table for people and, at the end, one JSON line for scripts:
//   BENCH_JSON {"suite": "...", "results": {"name": {"real_ns": ..., "counters": {...}}}}
#include <benchmark/benchmark.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace tandem::bench {

class JsonLineReporter : public benchmark::ConsoleReporter {
 public:
  explicit JsonLineReporter(std::string suite) : suite_(std::move(suite)) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    benchmark::ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      nlohmann::json counters = nlohmann::json::object();
      for (const auto& [name, c] : r.counters) counters[name] = static_cast<double>(c.value);
      results_[r.benchmark_name()] = {
          {"real_ns", r.GetAdjustedRealTime() * (r.time_unit == benchmark::kNanosecond    ? 1.0
                                                 : r.time_unit == benchmark::kMicrosecond ? 1e3
                                                 : r.time_unit == benchmark::kMillisecond ? 1e6
                                                                                          : 1e9)},
          {"iterations", r.iterations},
          {"counters", counters}};
    }
  }

  void Finalize() override {
    benchmark::ConsoleReporter::Finalize();
    const nlohmann::json line = {{"suite", suite_}, {"results", results_}};
    std::printf("BENCH_JSON %s\n", line.dump().c_str());
  }

 private:
  std::string suite_;
  nlohmann::json results_ = nlohmann::json::object();
};

// Use instead of BENCHMARK_MAIN() to get the JSON line.
inline int run_benchmarks(int argc, char** argv, const char* suite) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  JsonLineReporter reporter(suite);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}

}  // namespace tandem::bench
