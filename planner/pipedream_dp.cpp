#include "planner/pipedream_dp.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <stdexcept>

namespace tandem::planner {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Ties go to the option found first (fewer stages, fewer workers), robust to rounding.
bool better(double candidate, double best) {
  if (best == kInf) return candidate < kInf;
  return candidate < best - 1e-12 * best;
}

struct Entry {
  double value = kInf;
  std::int32_t split = -1;  // last layer of the first stage; -1: a single (replicated) stage
  std::int32_t first = 0;   // units given to the first stage when split
};

// One level's table A^k(i..j, m) over units of level k-1. Inner levels need every (i, j);
// the outermost only j = N-1.
struct LevelTable {
  int units = 1;               // m_k
  long long unit_workers = 1;  // workers in one unit of level k-1
  double bandwidth = 1;
  int j_low = 0;                     // j ranges over [j_low, N)
  std::vector<Entry> entries;        // [(j - j_low) * N + i] * units + (m - 1)
  std::vector<double> best_any;      // [i * N + j]: min over m of A^k(i..j, m)
  std::vector<std::int32_t> best_m;  // its argmin
};

class Solver {
 public:
  Solver(std::span<const PipeDreamLayer> layers, std::span<const PipeDreamLevel> levels,
         const PipeDreamOptions& options)
      : n_(static_cast<int>(layers.size())),
        levels_(levels.begin(), levels.end()),
        options_(options) {
    compute_.assign(n_ + 1, 0);
    weights_.assign(n_ + 1, 0);
    footprint_.assign(n_ + 1, 0);
    memory_.assign(n_ + 1, 0);
    for (int l = 0; l < n_; ++l) {
      compute_[l + 1] = compute_[l] + layers[l].compute_ms;
      weights_[l + 1] = weights_[l] + layers[l].parameter_bytes;
      footprint_[l + 1] = footprint_[l] + layers[l].parameter_bytes + layers[l].memory_bytes;
      memory_[l + 1] = memory_[l] + layers[l].memory_bytes;
      activation_.push_back(layers[l].activation_bytes);
    }
    total_workers_ = 1;
    for (const PipeDreamLevel& level : levels_) total_workers_ *= level.units;
    bounded_ = std::isfinite(options_.memory_per_worker);
  }

  PipeDreamPlan solve() {
    if (options_.versions == WeightVersions::stashing || !bounded_) {
      PipeDreamPlan plan = solve_once();
      if (plan.stages.empty()) fail_memory();
      return plan;
    }
    // Vertical sync keeps p versions on every stage, and p is only known once the plan is:
    // solve under each depth bound P (memory checked with P versions) and keep plans of at
    // most P stages, which therefore fit. The best plan, of p stages, is among those of P = p.
    const long long most = std::min<long long>(n_, total_workers_);
    PipeDreamPlan best;
    best.time_per_minibatch = kInf;
    for (depth_ = 1; depth_ <= most; ++depth_) {
      PipeDreamPlan plan = solve_once();
      if (!plan.stages.empty() && better(plan.time_per_minibatch, best.time_per_minibatch)) {
        best = std::move(plan);
      }
    }
    if (best.stages.empty()) fail_memory();
    return best;
  }

 private:
  // The best plan under the current depth bound (any depth when depth_ is 0); no stages when
  // nothing fits.
  PipeDreamPlan solve_once() {
    tables_.clear();
    const int depth = static_cast<int>(levels_.size());
    long long unit_workers = 1;
    for (int k = 1; k <= depth; ++k) {
      LevelTable table;
      table.units = levels_[k - 1].units;
      table.unit_workers = unit_workers;
      table.bandwidth = levels_[k - 1].bandwidth;
      table.j_low = k == depth ? n_ - 1 : 0;
      tables_.push_back(std::move(table));
      fill(k);
      unit_workers *= levels_[k - 1].units;
    }
    const LevelTable& top = tables_.back();
    PipeDreamPlan plan;
    if (depth_ == 0) {
      const double best = top.best_any[0 * n_ + (n_ - 1)];
      if (!std::isfinite(best)) return plan;
      plan.time_per_minibatch = best;
      plan.stages = expand(depth, 0, n_ - 1, top.best_m[n_ - 1], 0);
    } else {
      plan.time_per_minibatch = kInf;
      for (int m = 1; m <= top.units; ++m) {
        const double value = entry(depth, 0, n_ - 1, m).value;
        if (!better(value, plan.time_per_minibatch)) continue;
        std::vector<PipeDreamStage> stages = expand(depth, 0, n_ - 1, m, 0);
        if (static_cast<long long>(stages.size()) > depth_) continue;
        plan.time_per_minibatch = value;
        plan.stages = std::move(stages);
      }
      if (plan.stages.empty()) return plan;
    }
    finish(plan);
    return plan;
  }

  // Workers outside one unit of level k that may sit downstream of layers ..j in it.
  long long outside(int k, int j) const {
    if (j == n_ - 1) return 0;
    return total_workers_ - tables_[k - 1].unit_workers * tables_[k - 1].units;
  }

  double sync(int k, int m, int i, int j) const {
    if (m == 1) return 0;
    return options_.sync_factor * (m - 1) * (weights_[j + 1] - weights_[i]) /
           (m * tables_[k - 1].bandwidth);
  }

  // T^k(i..j, m): layers i..j replicated over m units of level k-1. `downstream` counts the
  // workers of this stage and after it, for the memory bound of level-1 stages.
  double replicated(int k, int i, int j, int m, long long downstream) const {
    if (m > 1 && !options_.replicate) return kInf;
    double inner;
    if (k == 1) {
      if (bounded_) {
        double memory;
        if (depth_ == 0) {
          const long long in_flight = (downstream + m - 1) / m;
          memory = static_cast<double>(in_flight) * (footprint_[j + 1] - footprint_[i]);
        } else {
          // One replica; at most depth_ stages from here on in any plan that is kept.
          memory =
              static_cast<double>(depth_) * (weights_[j + 1] - weights_[i]) +
              static_cast<double>(std::min(downstream, depth_)) * (memory_[j + 1] - memory_[i]);
        }
        if (memory > options_.memory_per_worker) return kInf;
      }
      inner = compute_[j + 1] - compute_[i];
    } else {
      inner = tables_[k - 2].best_any[static_cast<std::size_t>(i) * n_ + j];
      if (!std::isfinite(inner)) return kInf;
    }
    return std::max(inner, sync(k, m, i, j)) / m;
  }

  Entry& entry(int k, int i, int j, int m) {
    LevelTable& t = tables_[k - 1];
    return t.entries[(static_cast<std::size_t>(j - t.j_low) * n_ + i) * t.units + (m - 1)];
  }
  const Entry& entry(int k, int i, int j, int m) const {
    const LevelTable& t = tables_[k - 1];
    return t.entries[(static_cast<std::size_t>(j - t.j_low) * n_ + i) * t.units + (m - 1)];
  }

  void fill(int k) {
    LevelTable& t = tables_[k - 1];
    const int units = t.units;
    t.entries.assign(static_cast<std::size_t>(n_ - t.j_low) * n_ * units, Entry{});
    t.best_any.assign(static_cast<std::size_t>(n_) * n_, kInf);
    t.best_m.assign(static_cast<std::size_t>(n_) * n_, 0);
    const double link = 2.0 / t.bandwidth;
    std::vector<double> first_stage(static_cast<std::size_t>(units) + 1);
    for (int j = t.j_low; j < n_; ++j) {
      const long long out = outside(k, j);
      for (int i = j; i >= 0; --i) {
        for (int m = 1; m <= units; ++m) {
          // Every worker from the first stage on: m units here plus whatever lies outside.
          const long long downstream = m * t.unit_workers + out;
          Entry best;
          best.value = replicated(k, i, j, m, downstream);
          best.first = m;
          for (int s = i; s < j; ++s) {
            const double comm = link * activation_[s];
            if (!better(comm, best.value)) continue;
            for (int mp = 1; mp < m; ++mp) {
              const double rest = entry(k, s + 1, j, m - mp).value;
              if (!better(rest, best.value)) continue;
              const double head = replicated(k, i, s, mp, downstream);
              const double value = std::max({head, comm, rest});
              if (better(value, best.value)) {
                best.value = value;
                best.split = s;
                best.first = mp;
              }
            }
          }
          entry(k, i, j, m) = best;
          double& any = t.best_any[static_cast<std::size_t>(i) * n_ + j];
          if (better(best.value, any)) {
            any = best.value;
            t.best_m[static_cast<std::size_t>(i) * n_ + j] = m;
          }
        }
      }
    }
  }

  // Stages of A^k(i..j, m) placed on consecutive units from worker `base`.
  std::vector<PipeDreamStage> expand(int k, int i, int j, int m, long long base) const {
    const Entry& e = entry(k, i, j, m);
    if (e.split < 0) return expand_replicated(k, i, j, m, base);
    std::vector<PipeDreamStage> stages = expand_replicated(k, i, e.split, e.first, base);
    std::vector<PipeDreamStage> rest =
        expand(k, e.split + 1, j, m - e.first, base + e.first * tables_[k - 1].unit_workers);
    stages.insert(stages.end(), rest.begin(), rest.end());
    return stages;
  }

  std::vector<PipeDreamStage> expand_replicated(int k, int i, int j, int m, long long base) const {
    if (k == 1) {
      PipeDreamStage stage;
      stage.begin = i;
      stage.end = j + 1;
      for (int w = 0; w < m; ++w) stage.workers.push_back(static_cast<int>(base + w));
      return {stage};
    }
    const LevelTable& inner = tables_[k - 2];
    const int inner_units = inner.best_m[static_cast<std::size_t>(i) * n_ + j];
    const long long unit = tables_[k - 1].unit_workers;
    std::vector<PipeDreamStage> merged;
    for (int u = 0; u < m; ++u) {
      std::vector<PipeDreamStage> copy = expand(k - 1, i, j, inner_units, base + u * unit);
      if (u == 0) {
        merged = std::move(copy);
        continue;
      }
      for (std::size_t s = 0; s < merged.size(); ++s) {
        merged[s].workers.insert(merged[s].workers.end(), copy[s].workers.begin(),
                                 copy[s].workers.end());
      }
    }
    return merged;
  }

  void finish(PipeDreamPlan& plan) const {
    long long downstream = 0;
    for (auto it = plan.stages.rbegin(); it != plan.stages.rend(); ++it) {
      PipeDreamStage& stage = *it;
      downstream += stage.replicas();
      stage.compute_ms = compute_[stage.end] - compute_[stage.begin];
      stage.in_flight = static_cast<int>((downstream + stage.replicas() - 1) / stage.replicas());
      stage.versions = options_.versions == WeightVersions::stashing
                           ? stage.in_flight
                           : static_cast<int>(plan.stages.size());
      stage.memory_bytes = stage.versions * (weights_[stage.end] - weights_[stage.begin]) +
                           stage.in_flight * (memory_[stage.end] - memory_[stage.begin]);
    }
    plan.noam = plan.stages.front().in_flight;
  }

  [[noreturn]] void fail_memory() const {
    double largest = 0;
    for (int l = 0; l < n_; ++l) largest = std::max(largest, footprint_[l + 1] - footprint_[l]);
    std::ostringstream os;
    os << "no partition of " << n_ << " layers onto " << total_workers_
       << " workers fits the memory bound of " << options_.memory_per_worker
       << " bytes per worker (the largest layer alone needs " << largest
       << " bytes per in-flight minibatch and version)";
    throw std::runtime_error(os.str());
  }

  int n_;
  std::vector<PipeDreamLevel> levels_;
  PipeDreamOptions options_;
  std::vector<double> compute_, weights_, footprint_, memory_, activation_;
  long long depth_ = 0;  // vertical sync: the bound on stages being solved for; 0: none
  long long total_workers_ = 1;
  bool bounded_ = false;
  std::vector<LevelTable> tables_;
};

void validate(std::span<const PipeDreamLayer> layers, std::span<const PipeDreamLevel> levels,
              const PipeDreamOptions& options) {
  if (layers.empty()) throw std::invalid_argument("plan_pipedream: no layers");
  if (layers.size() > 100000) throw std::invalid_argument("plan_pipedream: too many layers");
  if (levels.empty()) throw std::invalid_argument("plan_pipedream: no topology levels");
  long long workers = 1;
  for (std::size_t k = 0; k < levels.size(); ++k) {
    const PipeDreamLevel& level = levels[k];
    const std::string where = "plan_pipedream: level " + std::to_string(k + 1);
    if (level.units < 1) throw std::invalid_argument(where + ": units must be at least 1");
    if (!(level.bandwidth > 0) || !std::isfinite(level.bandwidth)) {
      throw std::invalid_argument(where + ": bandwidth must be positive and finite");
    }
    workers *= level.units;
    if (workers > (1 << 20)) throw std::invalid_argument("plan_pipedream: too many workers");
  }
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const PipeDreamLayer& layer = layers[l];
    for (const double value :
         {layer.compute_ms, layer.parameter_bytes, layer.activation_bytes, layer.memory_bytes}) {
      if (!(value >= 0) || !std::isfinite(value)) {
        throw std::invalid_argument("plan_pipedream: layer " + std::to_string(l) +
                                    ": costs must be finite and non-negative");
      }
    }
  }
  if (!(options.sync_factor >= 0) || !std::isfinite(options.sync_factor)) {
    throw std::invalid_argument("plan_pipedream: sync_factor must be finite and non-negative");
  }
  if (options.versions == WeightVersions::vertical_sync && options.replicate) {
    throw std::invalid_argument("plan_pipedream: vertical sync does not replicate stages");
  }
  if (!(options.memory_per_worker > 0)) {
    throw std::invalid_argument("plan_pipedream: memory_per_worker must be positive");
  }
}

}  // namespace

int PipeDreamPlan::workers_used() const {
  int total = 0;
  for (const PipeDreamStage& stage : stages) total += stage.replicas();
  return total;
}

PipeDreamPlan plan_pipedream(std::span<const PipeDreamLayer> layers,
                             std::span<const PipeDreamLevel> levels,
                             const PipeDreamOptions& options) {
  validate(layers, levels, options);
  return Solver(layers, levels, options).solve();
}

}  // namespace tandem::planner
