// `tandem profile CONFIG.yaml -o profile.json [--repeats N] [--warmup N] [--minibatch B]
// [--concurrent K] [--no-step]`:
// measures the config's model layer by layer (train/model_profiler.hpp) and writes the
// planner's profile JSON, the input of `tandem plan --profile`.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "apps/commands.hpp"
#include "apps/config_sets.hpp"
#include "apps/output_file.hpp"
#include "apps/usage_error.hpp"
#include "planner/profile.hpp"
#include "train/config.hpp"
#include "train/model_profiler.hpp"

namespace tandem::apps {
namespace {

struct ProfileArgs {
  std::string config;
  std::vector<std::string> sets;
  std::string output;
  train::ProfileOptions options;
  bool quiet = false;
};

void run_profile(const ProfileArgs& args) {
  check_output("profile: -o", args.output, {args.config});
  const train::Config config = load_command_config(args.config, args.sets);
  if (args.options.minibatch > 0) {  // the config was checked with its own minibatch
    const train::Machine machine = train::Machine::here();
    const double bytes =
        4 * train::activation_count(train::config_model(config), args.options.minibatch);
    if (bytes > machine.memory_bytes) {
      throw UsageError(fmt::format(
          "profile: --minibatch {}: one minibatch's activations alone need {}, more than this "
          "machine's {} of memory",
          args.options.minibatch, train::human_bytes(bytes),
          train::human_bytes(machine.memory_bytes)));
    }
  }
  const auto progress = [&](int i, int n, const planner::LayerProfile& layer) {
    if (args.quiet) return;
    std::cerr << fmt::format("profile: layer {}/{} {}: forward {:.4f} ms, backward {:.4f} ms\n",
                             i + 1, n, layer.name, layer.forward_ms, layer.backward_ms);
  };
  const planner::Profile profile = train::at_config(
      config, [&] { return train::profile_model(config, args.options, progress); });
  double forward = 0, backward = 0, parameters = 0;
  for (const planner::LayerProfile& layer : profile.layers) {
    forward += layer.forward_ms;
    backward += layer.backward_ms;
    parameters += layer.parameter_bytes;
    // A measurement that is not a finite number would make every plan from it meaningless.
    for (const auto& [what, v] :
         {std::pair{"forward_ms", layer.forward_ms}, std::pair{"backward_ms", layer.backward_ms},
          std::pair{"total forward_ms", forward}, std::pair{"total backward_ms", backward},
          std::pair{"total parameter_bytes", parameters}}) {
      if (!std::isfinite(v)) {
        throw std::runtime_error(
            fmt::format("profile: layer {}: {} is {}; nothing written", layer.name, what, v));
      }
    }
  }
  planner::save_profile(profile, args.output);
  std::cout << fmt::format(
      "profiled {} layers of {} on {} samples ({}): forward {:.3f} ms, backward {:.3f} ms, "
      "{:.0f} parameter bytes\nwrote {}\n",
      profile.layers.size(), profile.model, profile.minibatch, profile.device, forward, backward,
      parameters, args.output);
}

}  // namespace

void add_profile_command(CLI::App& app) {
  auto args = std::make_shared<ProfileArgs>();
  CLI::App* cmd = app.add_subcommand(
      "profile", "Measure each layer of a config's model and write the planner's profile JSON");
  cmd->add_option("config", args->config, "config file (YAML)")->required();
  add_set_option(*cmd, args->sets);
  cmd->add_option("-o,--output", args->output, "profile JSON to write")->required();
  cmd->add_option("--repeats", args->options.repeats, "timed rounds per layer (median)")
      ->check(CLI::Range(1, 1'000'000))
      ->capture_default_str();
  cmd->add_option("--warmup", args->options.warmup, "untimed rounds per layer first")
      ->check(CLI::Range(0, 1'000'000))
      ->capture_default_str();
  cmd->add_option("--minibatch", args->options.minibatch,
                  "samples per minibatch (default: the config's train.minibatch)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag(
      "--no-fixed-parts", [args](std::int64_t) { args->options.fixed_parts = false; },
      "skip the one-sample runs that estimate the per-call fixed parts");
  cmd->add_option("--concurrent", args->options.concurrent,
                  "copies of every measurement run at once, each on its share of the cores: "
                  "what each of that many cpu stages in one process sees (schedule: auto's "
                  "predictions for them)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_flag(
      "--no-step", [args](std::int64_t) { args->options.step = false; },
      "skip timing the optimizer's update of each layer's weights");
  cmd->add_flag("--quiet", args->quiet, "no per-layer progress on stderr");
  cmd->callback([args] { run_profile(*args); });
}

}  // namespace tandem::apps
