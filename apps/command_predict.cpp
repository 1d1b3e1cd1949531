// `tandem predict CONFIG --weights W --input FILE -o FILE`: the config's model's outputs for the
// inputs in FILE, computed by the forward-only pipeline on the config's plan (stages, replicas,
// devices) with the weights of W, a checkpoint directory (finished or not) or a whole-model
// file. Both files are safetensors (train/predict.hpp: one tensor "input" in, "output" out).
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "apps/commands.hpp"
#include "apps/config_sets.hpp"
#include "apps/output_file.hpp"
#include "apps/usage_error.hpp"
#include "models/model.hpp"
#include "train/config.hpp"
#include "train/job_plan.hpp"
#include "train/predict.hpp"

namespace tandem::apps {

namespace fs = std::filesystem;

void add_predict_command(CLI::App& app) {
  struct Args {
    std::string config, weights, input, out;
    std::vector<std::string> sets;
    int slices = 0;
    bool force = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "predict",
      "the model's outputs for given inputs, through the config's pipeline run forward only "
      "(no targets, no updates)");
  cmd->add_option("config", args->config, "the training config (model and pipeline)")->required();
  add_set_option(*cmd, args->sets);
  cmd->add_option("--weights", args->weights,
                  "a checkpoint directory (its newest checkpoint) or a whole-model safetensors "
                  "file (`tandem checkpoint export`)")
      ->required();
  cmd->add_option("--input", args->input,
                  "a safetensors file with one tensor named 'input': the model's input layout, "
                  "[N, ...], f32 features or i32 tokens")
      ->required();
  cmd->add_option("-o,--output", args->out,
                  "the safetensors file to write: one tensor 'output' [N, ...] f32")
      ->required();
  cmd->add_option("--slices", args->slices,
                  "slices the inputs are cut into (default: the plan's, at least its largest "
                  "replica count)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_flag("--force", args->force, "replace -o when it exists");
  cmd->callback([args] {
    check_output("predict: -o", args->out, {args->input, args->config});
    std::error_code ec;
    if (!args->force && fs::exists(args->out, ec)) {
      throw UsageError("predict: -o: '" + args->out + "' exists; give --force to replace it");
    }
    const train::Config config = load_command_config(args->config, args->sets);
    const models::Model model = train::config_model(config);
    const std::string name = config.model.describe();
    const schedules::Plan plan = train::training_plan(config, model.num_layers(), 1);
    const models::ParamSet weights = train::load_predict_weights(args->weights, model, name);
    const Tensor inputs = train::read_predict_inputs(args->input, model);
    const train::PredictResult r =
        train::predict(model, plan, weights, inputs, {.slices = args->slices});
    train::write_predict_outputs(args->out, r.outputs, name);
    const double rate = r.seconds > 0 ? static_cast<double>(inputs.dim(0)) / r.seconds : 0;
    std::cout << "predicted " << inputs.dim(0) << " samples on " << plan.stages.size()
              << " stage(s), " << r.slices << " slices, in " << r.seconds << " s (" << rate
              << " samples/s): " << args->out << "\n";
  });
}

}  // namespace tandem::apps
