// `tandem train [CONFIG.yaml] [--set KEY=VALUE]... [--metrics-json FILE] [--steps N] [--trace FILE]
// [--checkpoint DIR
// [--checkpoint-every N]] [--resume DIR] [--elastic] [--join HOST:PORT] [--dry-run] [--quiet]
// [--realtime]`: trains through the pipeline runtime; without a config, the embedded default
// pipeline.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "apps/commands.hpp"
#include "apps/config_sets.hpp"
#include "apps/dry_run.hpp"
#include "apps/trainer_report.hpp"
#include "apps/usage_error.hpp"
#include "runtime/realtime_scheduling.hpp"

namespace tandem::apps {

void add_train_command(CLI::App& app) {
  struct Args {
    std::string config, metrics_json, trace, checkpoint, resume, join;
    std::vector<std::string> sets;
    int64_t steps = 0;
    int64_t checkpoint_every = 0;
    bool quiet = false;
    bool dry_run = false;
    bool elastic = false;
    bool realtime = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "train", "train a model from a YAML config (none: a built-in 4-stage GPT pipeline)");
  sub->add_option("config", args->config,
                  "config file (YAML); default: the embedded configs/default.yaml");
  add_set_option(*sub, args->sets);
  sub->add_option("--metrics-json", args->metrics_json,
                  "write one JSON object per logged step to FILE (JSON Lines)");
  sub->add_option("--steps", args->steps, "train this many steps instead of train.steps")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  sub->add_option("--trace", args->trace,
                  "write a Chrome/Perfetto trace of the pipeline run to FILE (see "
                  "docs/observability.md)");
  sub->add_option("--checkpoint", args->checkpoint,
                  "write checkpoints into DIR (safetensors per stage and a manifest; see "
                  "docs/checkpoints.md): at the end, and every --checkpoint-every steps");
  sub->add_option("--checkpoint-every", args->checkpoint_every,
                  "steps between checkpoints (rounded up to the schedule's stop boundary)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  sub->add_option("--resume", args->resume,
                  "continue the run a checkpoint in DIR stopped at (same model and plan)");
  sub->add_flag("--elastic", args->elastic,
                "as cluster.elastic: true: a rank of a multi-process job lost, the others re-plan "
                "onto themselves and resume from the last checkpoint (docs/multi-process.md)");
  sub->add_option(
      "--join", args->join,
      "join the running elastic job at its door HOST:PORT (rank 0 logs it at the start; "
      "the job's token in TANDEM_JOB_TOKEN or TANDEM_JOB_TOKEN_FILE): taken in at its "
      "next checkpoint, resuming from --checkpoint DIR, the job's");
  sub->add_flag("--quiet", args->quiet, "print only the final summary");
  sub->add_flag(
      "--realtime", args->realtime,
      "run the runtime's threads under real-time scheduling (SCHED_RR, the lowest priority): "
      "on a machine shared with busy processes, hand-offs are not delayed behind them "
      "(needs CAP_SYS_NICE or `ulimit -r` >= 1; docs/cli.md)");
  sub->add_flag("--dry-run", args->dry_run,
                "validate the config, print the plan and the simulator's predicted step time and "
                "memory per stage, and exit without training");
  sub->callback([args, sub] {
    if (args->dry_run) {
      dry_run(load_command_config(args->config.empty()
                                      ? std::nullopt
                                      : std::optional<std::filesystem::path>(args->config),
                                  args->sets),
              std::cout);
      return;
    }
    if (args->realtime) use_realtime_scheduling();  // before any thread of the run starts
    TrainCommand command;
    if (!args->config.empty()) command.config = args->config;
    command.sets = args->sets;
    if (sub->count("--metrics-json") > 0) command.metrics_json = args->metrics_json;
    if (sub->count("--steps") > 0) command.steps = args->steps;
    if (sub->count("--trace") > 0) command.trace = args->trace;
    if (sub->count("--checkpoint-every") > 0 && sub->count("--checkpoint") == 0) {
      throw UsageError("--checkpoint-every needs --checkpoint DIR");
    }
    if (sub->count("--checkpoint") > 0) command.checkpoint_dir = args->checkpoint;
    command.checkpoint_every = args->checkpoint_every;
    if (sub->count("--resume") > 0) command.resume = args->resume;
    command.quiet = args->quiet;
    command.elastic = args->elastic;
    if (sub->count("--join") > 0) {
      if (sub->count("--checkpoint") == 0) {
        throw UsageError("--join needs --checkpoint DIR (the job's checkpoint directory)");
      }
      command.join = args->join;
    }
    run_train_command(command, std::cout);
  });
}

}  // namespace tandem::apps
