// `tandem plan`: from a layer profile (JSON, as `tandem profile` writes it) and a cluster
// (YAML), find a plan for a schedule, print it (a table, or JSON with --json), and write the
// config's `pipeline:` section.
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <iostream>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "apps/commands.hpp"
#include "apps/output_file.hpp"
#include "apps/usage_error.hpp"
#include "planner/cluster.hpp"
#include "planner/pipedream_graph_profile.hpp"
#include "planner/pipeline_planner.hpp"
#include "planner/plan_output.hpp"
#include "planner/profile.hpp"
#include "planner/schedule_ranking.hpp"
#include "schedules/schedule_kind.hpp"

namespace tandem::apps {
namespace {

namespace ts = tandem::schedules;

struct PlanOptions {
  std::string profile;
  std::string format = "tandem";  // of --profile: tandem (JSON) or pipedream (graph.txt)
  std::string cluster;
  std::string schedule = "pipedream";
  int minibatch = 0;
  int slices = 0;
  int stages = 0;
  std::int64_t seed = 1;
  int population = 64;
  int generations = 200;
  std::string output;
  bool json = false;
  bool quiet = false;
  bool allow_async = false;  // schedule auto: rank the asynchronous schedules too
  std::string cost_model = "overlapped";
  // Least wall time between two GA progress lines; hidden, so tests can ask for every line.
  double progress_interval = 1.0;
};

// The profile in the format --format names; a PipeDream graph.txt becomes a graph profile.
planner::Profile read_profile(const PlanOptions& options) {
  if (options.format == "pipedream") return planner::load_pipedream_graph(options.profile);
  return planner::load_profile(options.profile);
}

// Flags the chosen schedule would ignore are refused: a user who gives them expects an effect.
void check_flags(const PlanOptions& o, const CLI::App& cmd, ts::ScheduleKind kind) {
  const bool pipedream = kind == ts::ScheduleKind::pipedream;
  const bool asynchronous = ts::is_asynchronous(kind);
  const bool umpipe = kind == ts::ScheduleKind::umpipe;
  const auto refuse = [&](const char* flag, const std::string& why) {
    if (cmd.count(flag) > 0) {
      throw UsageError("plan: " + std::string(flag) + " does not apply to schedule " + o.schedule +
                       ": " + why);
    }
  };
  if (asynchronous) refuse("--slices", "it runs whole minibatches, one slice each");
  if (umpipe) refuse("--slices", "the GA chooses UMPIPE's unequal slices");
  if (pipedream) refuse("--stages", "the PipeDream DP chooses stages and replicas");
  if (!pipedream && kind != ts::ScheduleKind::pipedream_vsync) {
    refuse("--cost-model", "it chooses the PipeDream DP's objective");
  }
  if (!umpipe) {
    const std::string why = "it tunes the UMPIPE GA only";
    refuse("--seed", why);
    refuse("--population", why);
    refuse("--generations", why);
  }
}

// One stderr line per `interval` seconds of the GA at most, and always the last: a long search
// shows it is moving without flooding the terminal.
std::function<void(const planner::UmpipeGaProgress&)> ga_progress_lines(double interval) {
  return [interval, printed = 0.0](const planner::UmpipeGaProgress& p) mutable {
    const bool last = p.generation == p.generations;
    if (!last && p.elapsed_seconds - printed < interval) return;
    printed = p.elapsed_seconds;
    std::string eta;
    if (!last && p.generation > 0) {  // generation 0 (seeding) gives no rate yet
      const double per_generation = p.elapsed_seconds / p.generation;
      eta = fmt::format(", ETA {:.0f} s", per_generation * (p.generations - p.generation));
    }
    std::cerr << fmt::format(
        "plan: generation {}/{}, best makespan {:.4g} ms, {:.1f} s elapsed{}\n", p.generation,
        p.generations, p.best_makespan, p.elapsed_seconds, eta);
  };
}

// Every value is finite on its own (load_profile checks), but their sums over layers, which the
// planner forms, can overflow to inf: refuse the profile at the value where that happens.
void check_sums(const planner::Profile& profile, const std::string& source) {
  const std::pair<const char*, double planner::LayerProfile::*> fields[] = {
      {"forward_ms", &planner::LayerProfile::forward_ms},
      {"backward_ms", &planner::LayerProfile::backward_ms},
      {"activation_bytes", &planner::LayerProfile::activation_bytes},
      {"parameter_bytes", &planner::LayerProfile::parameter_bytes},
      {"memory_bytes", &planner::LayerProfile::memory_bytes}};
  for (const auto& [name, field] : fields) {
    double sum = 0;
    for (std::size_t i = 0; i < profile.layers.size(); ++i) {
      const double v = profile.layers[i].*field;
      // With headroom: the planner scales and combines these sums.
      if (sum + v > 1e300) {
        throw std::runtime_error(fmt::format(
            "{}: layers[{}].{}: {:g}: the sum over layers overflows (the layers before add up "
            "to {:g})",
            source, i, name, v, sum));
      }
      sum += v;
    }
  }
}

void check_finite(const planner::PlannedPipeline& planned) {
  const auto check = [](const char* what, double v) {
    if (!std::isfinite(v)) {
      throw std::runtime_error(
          fmt::format("plan: the predicted {} is {}: the profile's values are too large", what, v));
    }
  };
  check("time per minibatch", planned.time_per_minibatch_ms);
  check("bubble", planned.bubble);
  for (const planner::PlannedStage& s : planned.stages) {
    check("compute time of a stage", s.compute_ms);
    check("memory of a stage", s.memory_bytes);
  }
}

// `--schedule auto`: the ranking's table, then the pick's plan (or only the plan, as JSON).
void run_auto(const PlanOptions& options, const CLI::App& cmd) {
  for (const char* flag : {"--stages", "--cost-model"}) {
    if (cmd.count(flag) > 0) {
      throw UsageError("plan: " + std::string(flag) +
                       " does not apply to schedule auto: each schedule is planned its own way");
    }
  }
  if (!options.output.empty()) {
    check_output("plan: -o", options.output, {options.profile, options.cluster});
  }
  planner::RankingOptions ranking_options;
  ranking_options.allow_async = options.allow_async;
  ranking_options.minibatch = options.minibatch;
  ranking_options.slices = options.slices;
  ranking_options.ga.seed = static_cast<std::uint64_t>(options.seed);
  ranking_options.ga.population = options.population;
  ranking_options.ga.generations = options.generations;
  const planner::Profile profile = read_profile(options);
  check_sums(profile, options.profile);
  const planner::Cluster cluster = planner::load_cluster(options.cluster);
  const planner::ScheduleRanking ranking = planner::rank_planned(profile, cluster, ranking_options);
  const planner::RankedSchedule* pick = ranking.pick();
  if (!options.json) std::cout << planner::format_ranking(ranking);
  if (pick == nullptr) throw std::runtime_error("plan: schedule auto found no schedule that fits");
  check_finite(pick->planned);
  std::cout << (options.json ? planner::plan_json(pick->planned)
                             : "\n" + planner::format_plan(pick->planned));
  if (options.output.empty()) return;
  write_output(options.output, "# tandem plan --profile " + options.profile + " --cluster " +
                                   options.cluster + " --schedule auto\n" +
                                   planner::pipeline_yaml(pick->planned));
  (options.json ? std::cerr : std::cout)
      << "wrote the pipeline section to " << options.output << '\n';
}

void run_plan(const PlanOptions& options, const CLI::App& cmd) {
  if (options.schedule == "auto") return run_auto(options, cmd);
  if (options.allow_async) throw UsageError("plan: --allow-async applies to schedule auto only");
  planner::PlanRequest request;
  try {
    request.schedule = ts::parse_schedule_kind(options.schedule);
  } catch (const std::exception& e) {
    throw UsageError(std::string("plan: --schedule: ") + e.what());
  }
  check_flags(options, cmd, request.schedule);
  if (!options.output.empty()) {
    check_output("plan: -o", options.output, {options.profile, options.cluster});
  }
  request.minibatch = options.minibatch;
  request.slices = options.slices;
  request.stages = options.stages;
  request.cost_model = options.cost_model == "pipedream" ? planner::CostModel::pipedream
                                                         : planner::CostModel::overlapped;
  request.ga.seed = static_cast<std::uint64_t>(options.seed);
  request.ga.population = options.population;
  request.ga.generations = options.generations;
  const planner::Profile profile = read_profile(options);
  check_sums(profile, options.profile);
  const planner::Cluster cluster = planner::load_cluster(options.cluster);
  // The GA can take a while: say what runs, on stderr, so stdout stays the plan.
  const auto start = std::chrono::steady_clock::now();
  const bool slow = request.schedule == ts::ScheduleKind::umpipe;
  if (slow && !options.quiet) {
    std::cerr << fmt::format(
        "plan: searching UMPIPE slices: GA with population {}, {} generations, {} layers, {} "
        "workers...\n",
        options.population, options.generations, profile.layers.size(), cluster.workers());
    request.ga.progress = ga_progress_lines(options.progress_interval);
  }
  const planner::PlannedPipeline planned = planner::plan_pipeline(profile, cluster, request);
  if (slow && !options.quiet) {
    std::cerr << fmt::format(
        "plan: done in {:.1f} s\n",
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  check_finite(planned);
  std::cout << (options.json ? planner::plan_json(planned) : planner::format_plan(planned));
  if (options.output.empty()) return;
  const std::string text = "# tandem plan --profile " + options.profile + " --cluster " +
                           options.cluster + " --schedule " + options.schedule + "\n" +
                           planner::pipeline_yaml(planned);
  write_output(options.output, text);
  // With --json stdout holds one JSON document; the note goes with the progress.
  (options.json ? std::cerr : std::cout)
      << "wrote the pipeline section to " << options.output << '\n';
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto options = std::make_shared<PlanOptions>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "Find stages, replicas and slices for a schedule from a layer profile and a cluster");
  cmd->add_option("--profile", options->profile, "Layer profile (JSON, or see --format)")
      ->required();
  cmd->add_option("--format", options->format,
                  "Of --profile: tandem (JSON, `tandem profile`) or pipedream (a PipeDream "
                  "profiler's graph.txt; docs/planner.md#planning-on-graphs)")
      ->check(CLI::IsMember({"tandem", "pipedream"}))
      ->capture_default_str();
  cmd->add_option("--cluster", options->cluster, "Cluster topology (YAML)")->required();
  cmd->add_option("--schedule,-s", options->schedule,
                  "pipedream, pipedream-vsync, gpipe, 1f1b, zb-h1, zb-2p, umpipe, or auto (rank "
                  "every schedule, plan the fastest)")
      ->capture_default_str();
  cmd->add_option("--minibatch", options->minibatch,
                  "Samples per minibatch (default: the profile's)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--slices", options->slices,
                  "Equal slices per minibatch (default: the fastest count; flush schedules)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--stages", options->stages,
                  "Stages for schedules without replication (default: one per worker)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--seed", options->seed, "UMPIPE GA seed")
      ->check(CLI::Range(std::int64_t{0}, std::numeric_limits<std::int64_t>::max()))
      ->capture_default_str();
  cmd->add_option("--population", options->population, "UMPIPE GA population")
      ->check(CLI::Range(2, 100000))
      ->capture_default_str();
  cmd->add_option("--generations", options->generations, "UMPIPE GA generations")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  cmd->add_option("-o,--output", options->output, "Write the config's pipeline: section here");
  cmd->add_flag("--json", options->json, "Print the plan as JSON instead of a table");
  cmd->add_flag("--quiet", options->quiet, "No progress lines on stderr");
  cmd->add_flag("--allow-async", options->allow_async,
                "Schedule auto: rank pipedream, pipedream-vsync and 2bw too (they change the "
                "optimization)");
  cmd->add_option("--cost-model", options->cost_model,
                  "PipeDream DP objective: overlapped (sync overlaps compute; docs/planner.md) "
                  "or pipedream (PipeDream's own optimizer: sync added, every worker used)")
      ->check(CLI::IsMember({"overlapped", "pipedream"}))
      ->capture_default_str();
  // Not in --help: for tests, which cannot wait a second per line.
  cmd->add_option("--progress-interval", options->progress_interval,
                  "Least seconds between two GA progress lines")
      ->check(CLI::NonNegativeNumber)
      ->group("");
  cmd->callback([options, cmd] { run_plan(*options, *cmd); });
}

}  // namespace tandem::apps
