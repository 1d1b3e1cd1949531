// `tandem plan`: from a layer profile (JSON, as `tandem profile` writes it) and a cluster
// (YAML), find a plan for a schedule, print it, and write the config's `pipeline:` section.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>

#include "apps/commands.hpp"
#include "planner/cluster.hpp"
#include "planner/pipeline_planner.hpp"
#include "planner/plan_output.hpp"
#include "planner/profile.hpp"
#include "schedules/schedule_kind.hpp"

namespace tandem::apps {
namespace {

struct PlanOptions {
  std::string profile;
  std::string cluster;
  std::string schedule = "pipedream";
  int minibatch = 0;
  int slices = 0;
  int stages = 0;
  std::uint64_t seed = 1;
  int population = 64;
  int generations = 200;
  std::string output;
};

void run_plan(const PlanOptions& options) {
  planner::PlanRequest request;
  request.schedule = schedules::parse_schedule_kind(options.schedule);
  request.minibatch = options.minibatch;
  request.slices = options.slices;
  request.stages = options.stages;
  request.ga.seed = options.seed;
  request.ga.population = options.population;
  request.ga.generations = options.generations;
  const planner::Profile profile = planner::load_profile(options.profile);
  const planner::Cluster cluster = planner::load_cluster(options.cluster);
  const planner::PlannedPipeline planned = planner::plan_pipeline(profile, cluster, request);
  std::cout << planner::format_plan(planned);
  if (options.output.empty()) return;
  const std::string yaml = planner::pipeline_yaml(planned);
  std::filesystem::path temporary = options.output;
  temporary += ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << "# tandem plan --profile " << options.profile << " --cluster " << options.cluster
        << " --schedule " << options.schedule << "\n"
        << yaml;
    if (!out) throw std::runtime_error("plan: cannot write " + temporary.string());
  }
  std::filesystem::rename(temporary, options.output);
  std::cout << "wrote the pipeline section to " << options.output << '\n';
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto options = std::make_shared<PlanOptions>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "Find stages, replicas and slices for a schedule from a layer profile and a cluster");
  cmd->add_option("--profile", options->profile, "Layer profile (JSON)")->required();
  cmd->add_option("--cluster", options->cluster, "Cluster topology (YAML)")->required();
  cmd->add_option("--schedule,-s", options->schedule,
                  "pipedream, pipedream-vsync, gpipe, 1f1b, zb-h1 or umpipe")
      ->capture_default_str();
  cmd->add_option("--minibatch", options->minibatch,
                  "Samples per minibatch (default: the profile's)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--slices", options->slices,
                  "Equal slices per minibatch (default: the fastest count)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--stages", options->stages,
                  "Stages for schedules without replication (default: one per worker)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--seed", options->seed, "UMPIPE GA seed")->capture_default_str();
  cmd->add_option("--population", options->population, "UMPIPE GA population")
      ->check(CLI::Range(2, 100000))
      ->capture_default_str();
  cmd->add_option("--generations", options->generations, "UMPIPE GA generations")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("-o,--output", options->output, "Write the config's pipeline: section here");
  cmd->callback([options] { run_plan(*options); });
}

}  // namespace tandem::apps
