#pragma once
// A test oracle for the planner's UMPIPE evaluators, written for clarity rather than speed:
// each slice waits for every neighbour slice that overlaps it. It covers what the simulator
// (the reference in umpipe_simulator_test.cpp) cannot express: measured link delays and a
// different delay per boundary.
#include <algorithm>
#include <cstddef>
#include <vector>

#include "planner/umpipe_problem.hpp"

namespace tandem::planner::testing {

inline double reference_makespan(const UmpipeProblem& problem, const UmpipeSlices& slices) {
  struct Span {
    int begin;
    int end;
    double arrival;  // at the neighbour: the end plus the link's delay
  };
  const int stages = problem.stage_count();
  // Latest arrival among the spans of `done` that share a sample with [begin, end).
  const auto ready = [](const std::vector<Span>& done, int begin, int end) {
    double latest = 0;
    for (const Span& span : done) {
      if (span.begin < end && begin < span.end) latest = std::max(latest, span.arrival);
    }
    return latest;
  };
  const auto delay = [&](int boundary, int b) {
    const schedules::Cost* link = problem.link(boundary);
    return link == nullptr ? 0.0 : (*link)(b);
  };
  std::vector<double> device(static_cast<std::size_t>(stages), 0.0);
  std::vector<Span> upstream;
  for (int s = 0; s < stages; ++s) {
    std::vector<Span> done;
    int begin = 0;
    for (const int b : slices.forward[s]) {
      double start = device[s];
      if (s > 0) start = std::max(start, ready(upstream, begin, begin + b));
      const double finish = start + problem.stages[s].forward(b);
      if (s + 1 < stages) done.push_back({begin, begin + b, finish + delay(s, b)});
      device[s] = finish;
      begin += b;
    }
    upstream = std::move(done);
  }
  std::vector<Span> downstream;
  for (int s = stages - 1; s >= 0; --s) {
    std::vector<Span> done;
    int begin = 0;
    for (const int b : slices.backward[s]) {
      double start = device[s];
      if (s < stages - 1) start = std::max(start, ready(downstream, begin, begin + b));
      const double finish = start + problem.stages[s].backward(b);
      if (s > 0) done.push_back({begin, begin + b, finish + delay(s - 1, b)});
      device[s] = finish;
      begin += b;
    }
    downstream = std::move(done);
  }
  return *std::max_element(device.begin(), device.end());
}

}  // namespace tandem::planner::testing
