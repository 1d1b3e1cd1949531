#include "planner/umpipe_problem.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace tandem::planner {
namespace {

void check_composition(const std::vector<int>& sizes, int minibatch, const std::string& what) {
  long long sum = 0;
  for (const int b : sizes) {
    if (b < 1) throw std::invalid_argument(what + ": slice sizes must be positive");
    sum += b;
  }
  if (sum != minibatch) {
    throw std::invalid_argument(what + ": slice sizes sum to " + std::to_string(sum) +
                                ", not the minibatch size " + std::to_string(minibatch));
  }
}

struct Span {
  int begin;
  int end;
  double arrival;  // at the neighbour: the end plus the link's delay
};

}  // namespace

const SliceCost* UmpipeProblem::link(int boundary) const {
  if (links.empty()) return nullptr;
  return &links[links.size() == 1 ? 0 : static_cast<std::size_t>(boundary)];
}

void UmpipeProblem::validate() const {
  if (stages.empty()) throw std::invalid_argument("UMPIPE: no stages");
  if (minibatch < 1) throw std::invalid_argument("UMPIPE: minibatch must be positive");
  if (links.size() > 1 && links.size() + 1 != stages.size()) {
    throw std::invalid_argument("UMPIPE: need no link, one, or one per stage boundary (" +
                                std::to_string(stages.size() - 1) + "), got " +
                                std::to_string(links.size()));
  }
  for (const SliceCost& delay : links) {
    if (delay.max_samples() < minibatch) {
      throw std::invalid_argument("UMPIPE: link delay table shorter than the minibatch");
    }
  }
  for (std::size_t s = 0; s < stages.size(); ++s) {
    if (stages[s].forward.max_samples() < minibatch ||
        stages[s].backward.max_samples() < minibatch) {
      throw std::invalid_argument("UMPIPE: stage " + std::to_string(s) +
                                  ": cost table shorter than the minibatch");
    }
  }
}

UmpipeSlices equal_slices(int stages, int minibatch, int slices) {
  if (slices < 1 || slices > minibatch) {
    throw std::invalid_argument("equal_slices: need 1 <= slices <= minibatch");
  }
  std::vector<int> sizes;
  for (int i = 0; i < slices; ++i) {
    const long long begin = static_cast<long long>(i) * minibatch / slices;
    const long long end = static_cast<long long>(i + 1) * minibatch / slices;
    sizes.push_back(static_cast<int>(end - begin));
  }
  UmpipeSlices result;
  result.forward.assign(static_cast<std::size_t>(stages), sizes);
  result.backward = result.forward;
  return result;
}

std::vector<std::uint64_t> cuts_of(const UmpipeSlices& slices, int minibatch) {
  const std::size_t stages = slices.forward.size();
  if (slices.backward.size() != stages) {
    throw std::invalid_argument("cuts_of: forward and backward partitions per stage differ");
  }
  const std::size_t words = umpipe_row_words(minibatch);
  std::vector<std::uint64_t> bits(2 * stages * words, 0);
  for (int dir = 0; dir < 2; ++dir) {
    const auto& rows = dir == 0 ? slices.forward : slices.backward;
    for (std::size_t s = 0; s < stages; ++s) {
      check_composition(rows[s], minibatch, "cuts_of");
      std::uint64_t* row = bits.data() + (dir * stages + s) * words;
      int end = 0;
      for (const int b : rows[s]) {
        end += b;
        row[(end - 1) / 64] |= std::uint64_t{1} << ((end - 1) % 64);
      }
    }
  }
  return bits;
}

UmpipeSlices slices_of(std::span<const std::uint64_t> cuts, int stages, int minibatch) {
  const std::size_t words = umpipe_row_words(minibatch);
  if (cuts.size() != umpipe_gene_words(stages, minibatch)) {
    throw std::invalid_argument("slices_of: wrong number of cut words");
  }
  UmpipeSlices slices;
  for (int dir = 0; dir < 2; ++dir) {
    auto& rows = dir == 0 ? slices.forward : slices.backward;
    rows.resize(static_cast<std::size_t>(stages));
    for (int s = 0; s < stages; ++s) {
      const std::uint64_t* row = cuts.data() + (dir * stages + s) * words;
      int begin = 0;
      for (int i = 0; i < minibatch; ++i) {
        if (i == minibatch - 1 || ((row[i / 64] >> (i % 64)) & 1) != 0) {
          rows[s].push_back(i + 1 - begin);
          begin = i + 1;
        }
      }
    }
  }
  return slices;
}

double umpipe_makespan(const UmpipeProblem& problem, const UmpipeSlices& slices) {
  problem.validate();
  const int stages = problem.stage_count();
  if (static_cast<int>(slices.forward.size()) != stages ||
      static_cast<int>(slices.backward.size()) != stages) {
    throw std::invalid_argument(
        "umpipe_makespan: need one forward and one backward partition "
        "per stage");
  }
  for (int s = 0; s < stages; ++s) {
    check_composition(slices.forward[s], problem.minibatch,
                      "stage " + std::to_string(s) + " forward");
    check_composition(slices.backward[s], problem.minibatch,
                      "stage " + std::to_string(s) + " backward");
  }
  // Latest arrival among the spans of `done` that share a sample with [begin, end).
  const auto ready = [](const std::vector<Span>& done, int begin, int end) {
    double latest = 0;
    for (const Span& span : done) {
      if (span.begin < end && begin < span.end) latest = std::max(latest, span.arrival);
    }
    return latest;
  };
  const auto delay = [&](int boundary, int b) {
    const SliceCost* link = problem.link(boundary);
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

}  // namespace tandem::planner
