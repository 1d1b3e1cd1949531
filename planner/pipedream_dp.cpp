#include "planner/pipedream_dp.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <stdexcept>

#include "planner/detail/layer_sums.hpp"
#include "planner/detail/pipedream_optimizer_model.hpp"
#include "planner/detail/unit_plans.hpp"

namespace tandem::planner {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Ties go to the option found first (fewer stages, fewer workers), robust to rounding.
bool better(double candidate, double best) {
  if (best == kInf) return candidate < kInf;
  return candidate < best - 1e-12 * best;
}

// Per stage: compute, in-flight minibatches, versions and memory, from prefix sums over the
// layers; and the plan's NOAM.
void finish_plan(PipeDreamPlan& plan, const detail::LayerSums& sums, WeightVersions versions) {
  long long downstream = 0;
  for (auto it = plan.stages.rbegin(); it != plan.stages.rend(); ++it) {
    PipeDreamStage& stage = *it;
    downstream += stage.replicas();
    stage.compute_ms = sums.compute[stage.end] - sums.compute[stage.begin];
    stage.in_flight = static_cast<int>((downstream + stage.replicas() - 1) / stage.replicas());
    stage.versions = versions == WeightVersions::stashing ? stage.in_flight
                                                          : static_cast<int>(plan.stages.size());
    stage.memory_bytes = stage.versions * (sums.weights[stage.end] - sums.weights[stage.begin]) +
                         stage.in_flight * (sums.memory[stage.end] - sums.memory[stage.begin]);
  }
  plan.noam = plan.stages.front().in_flight;
}

// How A^k(i..j, m) was reached: the last layer of the first stage and the units given to it, or
// split -1 for a single (replicated) stage.
struct Choice {
  std::int32_t split = -1;
  std::int32_t first = 0;
};

// One level's table A^k(i..j, m) over units of level k-1. Inner levels need every (i, j);
// the outermost only j = N-1. Values and choices live apart so the scans read only values.
struct LevelTable {
  int units = 1;               // m_k
  long long unit_workers = 1;  // workers in one unit of level k-1
  double bandwidth = 1;
  int j_low = 0;                     // j ranges over [j_low, N)
  std::vector<double> values;        // [(j - j_low) * N + i] * units + (m - 1)
  std::vector<Choice> choices;       // same index
  std::vector<double> best_any;      // [i * N + j]: min over m of A^k(i..j, m)
  std::vector<std::int32_t> best_m;  // its argmin
};

class Solver {
 public:
  Solver(std::span<const PipeDreamLayer> layers, std::span<const PipeDreamLevel> levels,
         const PipeDreamOptions& options)
      : n_(static_cast<int>(layers.size())),
        levels_(levels.begin(), levels.end()),
        options_(options),
        sums_(layers) {
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
        const double value = value_of(depth, 0, n_ - 1, m);
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
    return options_.sync_factor * (m - 1) * (sums_.weights[j + 1] - sums_.weights[i]) /
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
          memory = static_cast<double>(in_flight) * (sums_.footprint[j + 1] - sums_.footprint[i]);
        } else {
          // One replica; at most depth_ stages from here on in any plan that is kept.
          memory = static_cast<double>(depth_) * (sums_.weights[j + 1] - sums_.weights[i]) +
                   static_cast<double>(std::min(downstream, depth_)) *
                       (sums_.memory[j + 1] - sums_.memory[i]);
        }
        if (memory > options_.memory_per_worker) return kInf;
      }
      inner = sums_.compute[j + 1] - sums_.compute[i];
    } else {
      inner = tables_[k - 2].best_any[static_cast<std::size_t>(i) * n_ + j];
      if (!std::isfinite(inner)) return kInf;
    }
    return std::max(inner, sync(k, m, i, j)) / m;
  }

  std::size_t index(int k, int i, int j, int m) const {
    const LevelTable& t = tables_[k - 1];
    return (static_cast<std::size_t>(j - t.j_low) * n_ + i) * t.units + (m - 1);
  }
  double value_of(int k, int i, int j, int m) const {
    return tables_[k - 1].values[index(k, i, j, m)];
  }
  const Choice& choice_of(int k, int i, int j, int m) const {
    return tables_[k - 1].choices[index(k, i, j, m)];
  }

  // Vertical sync: whether layers i..s on one worker fit the memory bound with `downstream`
  // workers from this stage on (level 1 only); the same arithmetic as replicated().
  bool fits(int i, int s, long long downstream) const {
    const double memory =
        static_cast<double>(depth_) * (sums_.weights[s + 1] - sums_.weights[i]) +
        static_cast<double>(std::min(downstream, depth_)) * (sums_.memory[s + 1] - sums_.memory[i]);
    return memory <= options_.memory_per_worker;
  }

  // The largest q with q * footprint(i..s) <= the bound, capped far above any worker count.
  double largest_in_flight(int i, int s) const {
    constexpr double kCap = 1e15;
    const double footprint = sums_.footprint[s + 1] - sums_.footprint[i];
    if (!(footprint > 0)) return kCap;
    double q = std::floor(std::min(kCap, options_.memory_per_worker / footprint));
    while (q > 0 && q * footprint > options_.memory_per_worker) q -= 1;
    while (q < kCap && (q + 1) * footprint <= options_.memory_per_worker) q += 1;
    return q;
  }

  // Per first layer i: T^k(i..s, m') and what bounds it, shared by the cells (i, j, m).
  struct HeadRows {
    int i = 0;
    std::vector<double> heads;            // [(s - i) * units + m' - 1], without the memory bound
    std::vector<double> floor;            // min over s' >= s, m'' <= m' of heads
    std::vector<double> in_flight_limit;  // [s - i]: largest in-flight count that fits (stashing)
  };

  void heads_from(int k, int i, HeadRows& rows) const {
    const LevelTable& t = tables_[k - 1];
    const int units = t.units;
    rows.i = i;
    rows.heads.resize(static_cast<std::size_t>(n_ - i) * units);
    rows.floor.resize(rows.heads.size());
    for (int s = n_ - 1; s >= i; --s) {
      const double inner = k == 1 ? sums_.compute[s + 1] - sums_.compute[i]
                                  : tables_[k - 2].best_any[static_cast<std::size_t>(i) * n_ + s];
      const std::size_t row = static_cast<std::size_t>(s - i) * units;
      double so_far = kInf;
      for (int m = 1; m <= units; ++m) {
        double& head = rows.heads[row + m - 1];
        if ((m > 1 && !options_.replicate) || !std::isfinite(inner)) {
          head = kInf;
        } else {
          head = std::max(inner, sync(k, m, i, s)) / m;
        }
        double floor = head;
        if (s + 1 < n_) floor = std::min(floor, rows.floor[row + units + m - 1]);
        so_far = std::min(so_far, floor);
        rows.floor[row + m - 1] = so_far;
      }
    }
    if (k == 1 && bounded_ && depth_ == 0) {
      rows.in_flight_limit.resize(n_ - i);
      for (int s = i; s < n_; ++s) rows.in_flight_limit[s - i] = largest_in_flight(i, s);
    }
  }

  // The smallest m' whose first stage on layers i..s fits the memory bound with `downstream`
  // workers from it on (level 1 only; the same arithmetic as replicated()), or `none` if no
  // m' does. Grows with s.
  int fitting_units(const HeadRows& rows, int s, long long downstream, int none) const {
    if (depth_ > 0) return fits(rows.i, s, downstream) ? 1 : none;
    // ceil(D / m') <= q exactly when m' >= ceil(D / q).
    const double q = rows.in_flight_limit[s - rows.i];
    if (q < 1) return none;
    if (q >= static_cast<double>(downstream)) return 1;
    const long long whole = static_cast<long long>(q);
    return static_cast<int>(std::min<long long>(none, (downstream + whole - 1) / whole));
  }

  // The cost of the candidate (s, m') of cell (i, j, m): as the plain recursion computes it.
  double candidate(int k, const HeadRows& rows, int j, int m, int s, int mp,
                   long long downstream) const {
    const LevelTable& t = tables_[k - 1];
    double head = rows.heads[static_cast<std::size_t>(s - rows.i) * t.units + mp - 1];
    if (k == 1 && bounded_ && fitting_units(rows, s, downstream, m) > mp) head = kInf;
    const double rest = t.values[index(k, s + 1, j, m - mp)];
    return std::max({head, 2.0 / t.bandwidth * sums_.activation[s], rest});
  }

  // Scans the splits of cell (i, j, m) in the recursion's order (s ascending, then m'
  // ascending), keeping the first candidate better than the best so far. Candidates that
  // cannot be better are skipped, which changes nothing since the best only falls: a stage on
  // layers a..b with r units of w workers costs at least C(a..b) / (r w) (no stage of a plan
  // is faster than their average), which for each s leaves only the few m' near the balance
  // C(i..s) / m' ~ C(s+1..j) / (m - m'), and the heads' floor ends the scan.
  //
  // `gate` (infinite for the plain scan) lets a scan start from a known candidate's cost U
  // instead of the replicated stage's, which narrows it: with gate G just above U, every
  // candidate costs either under G(1 - 1e-12) ("low", U among them) or at least G ("high"),
  // unless one lands in between. Then the plain scan accepts the first low candidate
  // whatever high best precedes it, and never a high one after it: skipping high ones gives
  // the same result. Returns false, for a plain rescan, when a candidate lands in between.
  bool scan(int k, const HeadRows& rows, int j, int m, long long downstream, double gate,
            double replicated_cost, double& best, Choice& chosen) const {
    const LevelTable& t = tables_[k - 1];
    const int units = t.units;
    const int i = rows.i;
    const double link = 2.0 / t.bandwidth;
    const bool check_memory = k == 1 && bounded_;
    // The bound C / (r w) holds for the computed costs up to one rounding per level and a few
    // more (under 30 ulps, 3e-15 relative, with at most 20 levels of 2 units or more); this
    // slack covers that and stays below better()'s 1e-12, so a replicated stage that meets
    // the bound leaves nothing to scan.
    constexpr double kSlack = 1 - 1e-13;
    const double per_unit = kSlack / static_cast<double>(t.unit_workers);
    // A candidate is accepted under `accept` and skipped at or above `below`; they differ only
    // before the first low candidate of a gated scan.
    double below = gate;
    double accept = gate == kInf ? kInf : gate - 1e-12 * gate;
    best = kInf;
    chosen = {-1, m};
    if (replicated_cost < accept) {
      best = replicated_cost;
      below = accept = best == kInf ? kInf : best - 1e-12 * best;
    } else if (replicated_cost < below) {
      return false;
    }
    if (m == 1 || !(below > 0)) return true;
    // A stage on a..b with r units costs at least C(a..b) * scale / r * below.
    double scale = below == kInf ? 0 : per_unit / below;
    // m' > head_units and m - m' > rest_units, which sum to C(i..j) * scale: nothing to scan
    // when that reaches m (the replicated stage is as good as the bound allows).
    if ((sums_.compute[j + 1] - sums_.compute[i]) * scale >= m) return true;
    // The first s whose rest could be better: rest_units < m - 1, and rest_units only shrinks
    // as s grows.
    int s = i;
    if (scale > 0) {
      int high = j;
      while (s < high) {
        const int mid = s + (high - s) / 2;
        if ((sums_.compute[j + 1] - sums_.compute[mid + 1]) * scale < m - 1) {
          high = mid;
        } else {
          s = mid + 1;
        }
      }
    }
    for (; s < j && below > 0; ++s) {
      const std::size_t row = static_cast<std::size_t>(s - i) * units;
      const double head_units = (sums_.compute[s + 1] - sums_.compute[i]) * scale;
      // Both only grow with s (and as the best falls): no later split can be better.
      if (head_units >= m - 1) break;
      if (!(rows.floor[row + m - 2] < below)) break;
      const double rest_units = (sums_.compute[j + 1] - sums_.compute[s + 1]) * scale;
      if (rest_units >= m - 1) continue;
      const double comm = link * sums_.activation[s];
      if (!(comm < below)) continue;
      int first_mp = std::max(1, static_cast<int>(head_units) + 1);
      const int last_mp = options_.replicate ? m - 1 - static_cast<int>(rest_units) : 1;
      if (check_memory) {
        // The first stage's memory only grows with s: once no m' fits, none ever will.
        const int fitting = fitting_units(rows, s, downstream, m);
        if (fitting >= m) break;
        first_mp = std::max(first_mp, fitting);
      }
      const double* head_row = &rows.heads[row];
      const double* rest_row = &t.values[index(k, s + 1, j, 1)];
      for (int mp = first_mp; mp <= last_mp; ++mp) {
        const double rest = rest_row[m - mp - 1];
        if (!(rest < below)) continue;
        const double value = std::max({head_row[mp - 1], comm, rest});
        if (value < accept) {
          best = value;
          chosen = {s, mp};
          below = accept = best - 1e-12 * best;
          scale = per_unit / below;
        } else if (value < below) {
          return false;
        }
      }
    }
    return true;
  }

  // Fills A^k. Cells are visited by decreasing i (a cell reads cells of larger i in its
  // column); each cell's result is the plain recursion's, bit for bit (see scan()).
  void fill(int k) {
    LevelTable& t = tables_[k - 1];
    const int units = t.units;
    const std::size_t cells = static_cast<std::size_t>(n_ - t.j_low) * n_ * units;
    t.values.assign(cells, kInf);
    t.choices.assign(cells, Choice{});
    t.best_any.assign(static_cast<std::size_t>(n_) * n_, kInf);
    t.best_m.assign(static_cast<std::size_t>(n_) * n_, 0);
    HeadRows rows;
    for (int i = n_ - 1; i >= 0; --i) {
      heads_from(k, i, rows);
      for (int j = std::max(i, t.j_low); j < n_; ++j) {
        const long long out = outside(k, j);
        const std::size_t cell = index(k, i, j, 1);
        for (int m = 1; m <= units; ++m) {
          // Every worker from the first stage on: m units here plus whatever lies outside.
          const long long downstream = m * t.unit_workers + out;
          const double replicated_cost = replicated(k, i, j, m, downstream);
          // The splits the neighbouring cells chose usually land near this cell's best: their
          // cost here, when lower than the replicated stage's, gates the scan.
          double known = replicated_cost;
          if (m > 1) {
            for (const std::size_t near : {index(k, i + 1 < n_ ? i + 1 : i, j, m),
                                           index(k, i, j > i && j > t.j_low ? j - 1 : j, m)}) {
              const Choice hint = t.choices[near];
              if (hint.split < i || hint.split >= j || hint.first >= m) continue;
              known = std::min(known, candidate(k, rows, j, m, hint.split, hint.first, downstream));
            }
          }
          double best;
          Choice chosen;
          bool done = false;
          if (known < replicated_cost && known > 0) {
            // Just above `known`, so that `known` itself is low.
            double gate = known * (1 + 4e-12);
            while (!(gate - 1e-12 * gate > known)) gate *= 1 + 1e-12;
            done = scan(k, rows, j, m, downstream, gate, replicated_cost, best, chosen);
          }
          if (!done) scan(k, rows, j, m, downstream, kInf, replicated_cost, best, chosen);
          t.values[cell + (m - 1)] = best;
          t.choices[cell + (m - 1)] = chosen;
          double& any = t.best_any[static_cast<std::size_t>(i) * n_ + j];
          if (better(best, any)) {
            any = best;
            t.best_m[static_cast<std::size_t>(i) * n_ + j] = m;
          }
        }
      }
    }
  }

  // Stages of A^k(i..j, m) placed on consecutive units from worker `base`.
  std::vector<PipeDreamStage> expand(int k, int i, int j, int m, long long base) const {
    const Choice& e = choice_of(k, i, j, m);
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
      detail::add_unit_plan(merged, expand(k - 1, i, j, inner_units, base + u * unit));
    }
    return merged;
  }

  void finish(PipeDreamPlan& plan) const { finish_plan(plan, sums_, options_.versions); }

  [[noreturn]] void fail_memory() const {
    double largest = 0;
    for (int l = 0; l < n_; ++l)
      largest = std::max(largest, sums_.footprint[l + 1] - sums_.footprint[l]);
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
  detail::LayerSums sums_;
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
  if (options.cost_model == CostModel::pipedream) {
    PipeDreamPlan plan = detail::plan_as_pipedream_optimizer(layers, levels, options);
    finish_plan(plan, detail::LayerSums(layers), options.versions);
    return plan;
  }
  return Solver(layers, levels, options).solve();
}

}  // namespace tandem::planner
