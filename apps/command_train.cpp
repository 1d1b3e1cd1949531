// `tandem train [CONFIG.yaml] [--metrics-json FILE] [--steps N] [--quiet]`: trains on one device or
// through the pipeline runtime; without a config, the embedded default pipeline.
#include <iostream>
#include <memory>
#include <string>

#include "apps/commands.hpp"
#include "apps/trainer_report.hpp"

namespace tandem::apps {

void add_train_command(CLI::App& app) {
  struct Args {
    std::string config, metrics_json;
    int64_t steps = 0;
    bool quiet = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "train", "train a model from a YAML config (none: a built-in 4-stage GPT pipeline)");
  sub->add_option("config", args->config,
                  "config file (YAML); default: the embedded configs/default.yaml");
  sub->add_option("--metrics-json", args->metrics_json,
                  "write one JSON object per logged step to FILE (JSON Lines)");
  sub->add_option("--steps", args->steps, "train this many steps instead of train.steps")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  sub->add_flag("--quiet", args->quiet, "print only the final summary");
  sub->callback([args, sub] {
    TrainCommand command;
    if (!args->config.empty()) command.config = args->config;
    if (sub->count("--metrics-json") > 0) command.metrics_json = args->metrics_json;
    if (sub->count("--steps") > 0) command.steps = args->steps;
    command.quiet = args->quiet;
    run_train_command(command, std::cout);
  });
}

}  // namespace tandem::apps
