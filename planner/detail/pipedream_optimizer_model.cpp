#include "planner/detail/pipedream_optimizer_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "planner/detail/layer_sums.hpp"
#include "planner/detail/unit_plans.hpp"

namespace tandem::planner::detail {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// P^k(i..j, m): the best time of layers i..j on exactly m units of level k, and how.
struct Cell {
  double value = kInf;
  std::int32_t split = -1;  // last layer before the last stage; -1: one replicated stage
  std::int32_t units = 0;   // units of the last stage (of the only one when not split)
};

class OptimizerModel {
 public:
  OptimizerModel(std::span<const PipeDreamLayer> layers, std::span<const PipeDreamLevel> levels,
                 const PipeDreamOptions& options)
      : n_(static_cast<int>(layers.size())),
        levels_(levels.begin(), levels.end()),
        options_(options),
        sums_(layers) {}

  PipeDreamPlan solve() {
    const int depth = static_cast<int>(levels_.size());
    for (int k = 1; k <= depth; ++k) fill(k);
    const int top = levels_.back().units;
    PipeDreamPlan plan;
    plan.time_per_minibatch = cell(depth, 0, n_ - 1, top).value;
    if (!std::isfinite(plan.time_per_minibatch)) {
      throw std::runtime_error(
          "PipeDream's optimizer finds no plan of " + std::to_string(n_) + " layers that uses " +
          "every worker" + (options_.replicate ? "" : " with one worker per stage") +
          (std::isfinite(options_.memory_per_worker) ? " within its memory rule" : ""));
    }
    long long workers = 1;
    for (const PipeDreamLevel& level : levels_) workers *= level.units;
    plan.stages = expand(depth, 0, n_ - 1, top, 0, workers / top);
    return plan;
  }

 private:
  Cell& cell(int k, int i, int j, int m) {
    const int units = levels_[k - 1].units;
    return tables_[k - 1][(static_cast<std::size_t>(i) * n_ + j) * units + (m - 1)];
  }
  const Cell& cell(int k, int i, int j, int m) const {
    const int units = levels_[k - 1].units;
    return tables_[k - 1][(static_cast<std::size_t>(i) * n_ + j) * units + (m - 1)];
  }

  // What one unit of level k costs for layers i..j: their compute at level 1, else the best
  // plan on every unit of level k-1.
  double unit_time(int k, int i, int j) const {
    if (k == 1) return sums_.compute[j + 1] - sums_.compute[i];
    return cell(k - 1, i, j, levels_[k - 2].units).value;
  }

  double sync(int m, int i, int j, double bandwidth) const {
    return options_.sync_factor * (m - 1) * (sums_.weights[j + 1] - sums_.weights[i]) /
           (bandwidth * m);
  }

  // PipeDream's memory rule: ceil((M - m) / r) minibatches of the stage's kept bytes and
  // weights, for a stage on r of M units with m units for it and the stages before it.
  bool fits(int level_units, int m, int r, int i, int j) const {
    if (!std::isfinite(options_.memory_per_worker)) return true;
    const double stashed =
        (sums_.memory[j + 1] - sums_.memory[i]) + (sums_.weights[j + 1] - sums_.weights[i]);
    const double in_flight = std::ceil(static_cast<double>(level_units - m) / r);
    return !(stashed * in_flight > options_.memory_per_worker);
  }

  void fill(int k) {
    const PipeDreamLevel& level = levels_[k - 1];
    const int units = level.units;
    const double bandwidth = level.bandwidth;
    const int within = k == 1 ? 1 : levels_[k - 2].units;
    const bool outermost = k == static_cast<int>(levels_.size());
    tables_.emplace_back(static_cast<std::size_t>(n_) * n_ * units);
    // One replicated stage.
    const int most = options_.replicate ? units : 1;
    for (int i = 0; i < n_; ++i) {
      for (int j = i; j < n_; ++j) {
        const double inner = unit_time(k, i, j);
        for (int m = 1; m <= most; ++m) {
          if (!fits(units, m, m, i, j) || !std::isfinite(inner)) continue;
          Cell& c = cell(k, i, j, m);
          c.value = (inner + sync(m, i, j, bandwidth) / within) / m;
          c.units = m;
        }
      }
    }
    // A last stage of m' units after the best plan of the layers before it on m - m' units.
    // The outermost level needs only i = 0.
    const int last_i = outermost ? 1 : n_;
    for (int i = 0; i < last_i; ++i) {
      for (int m = 2; m <= units; ++m) {
        for (int j = i + 1; j < n_; ++j) {
          Cell best = cell(k, i, j, m);
          for (int s = i; s < j; ++s) {
            const double last_inner = unit_time(k, s + 1, j);
            if (!std::isfinite(last_inner)) continue;
            const int most_last = options_.replicate ? m - 1 : 1;
            for (int r = 1; r <= most_last; ++r) {
              const double before = cell(k, i, s, m - r).value;
              if (!std::isfinite(before) || !(before < best.value)) continue;
              if (!fits(units, m, r, s + 1, j)) continue;
              const double last = (last_inner + sync(r, s + 1, j, bandwidth)) / r;
              double time = std::max(before, last);
              time = std::max(time, 2.0 * sums_.activation[s] / (bandwidth * r));
              if (j < n_ - 1) time = std::max(time, 2.0 * sums_.activation[j] / (bandwidth * r));
              if (time < best.value) best = {time, s, r};
            }
          }
          cell(k, i, j, m) = best;
        }
      }
    }
  }

  // Stages of P^k(i..j, m) on consecutive units from worker `base`, `unit` workers each.
  std::vector<PipeDreamStage> expand(int k, int i, int j, int m, long long base,
                                     long long unit) const {
    const Cell& c = cell(k, i, j, m);
    std::vector<PipeDreamStage> stages;
    if (c.split >= 0) stages = expand(k, i, c.split, m - c.units, base, unit);
    const int first = c.split >= 0 ? c.split + 1 : i;
    const long long at = base + static_cast<long long>(m - c.units) * unit;
    if (k == 1) {
      PipeDreamStage stage;
      stage.begin = first;
      stage.end = j + 1;
      for (int w = 0; w < c.units; ++w) stage.workers.push_back(static_cast<int>(at + w));
      stages.push_back(std::move(stage));
      return stages;
    }
    // Each of the stage's units runs the plan of level k-1 on all of its own units.
    const int inner_units = levels_[k - 2].units;
    const long long inner_unit = unit / inner_units;
    std::vector<PipeDreamStage> merged;
    for (int u = 0; u < c.units; ++u) {
      add_unit_plan(merged, expand(k - 1, first, j, inner_units, at + u * unit, inner_unit));
    }
    stages.insert(stages.end(), merged.begin(), merged.end());
    return stages;
  }

  int n_;
  std::vector<PipeDreamLevel> levels_;
  PipeDreamOptions options_;
  LayerSums sums_;
  std::vector<std::vector<Cell>> tables_;  // per level
};

}  // namespace

PipeDreamPlan plan_as_pipedream_optimizer(std::span<const PipeDreamLayer> layers,
                                          std::span<const PipeDreamLevel> levels,
                                          const PipeDreamOptions& options) {
  return OptimizerModel(layers, levels, options).solve();
}

}  // namespace tandem::planner::detail
