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

}  // namespace

const schedules::Cost* UmpipeProblem::link(int boundary) const {
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
  // Every slice size up to B is looked up (evaluators tabulate them once).
  const auto check = [&](const schedules::Cost& cost, const std::string& what) {
    if (cost.max_samples() < minibatch) {
      throw std::invalid_argument("UMPIPE: " + what + ": cost table shorter than the minibatch");
    }
    for (int b = 1; b <= minibatch; ++b) {
      const double t = cost(b);
      if (!(t >= 0) || !std::isfinite(t)) {
        throw std::invalid_argument("UMPIPE: " + what + ": t(" + std::to_string(b) + ") = " +
                                    std::to_string(t) + " must be finite and non-negative");
      }
    }
  };
  for (std::size_t l = 0; l < links.size(); ++l) check(links[l], "link " + std::to_string(l));
  for (std::size_t s = 0; s < stages.size(); ++s) {
    check(stages[s].forward, "stage " + std::to_string(s) + " forward");
    check(stages[s].backward, "stage " + std::to_string(s) + " backward");
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

}  // namespace tandem::planner
