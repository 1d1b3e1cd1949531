// `tandem checkpoint inspect DIR [--json]`: a checkpoint's step, model, plan and parent, and
// where each stage's layers, weight versions and optimizer state live, with sizes.
// `tandem checkpoint export DIR -o FILE [--force]`: the checkpoint's newest weights as one
// whole-model safetensors file (train/model_file.hpp), which `train.init_from` starts from.
// Both verify the checkpoint first (train::read_checkpoint: checksums, manifest, tensors).
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include "apps/checkpoint_summary.hpp"
#include "apps/commands.hpp"
#include "apps/output_file.hpp"
#include "apps/usage_error.hpp"
#include "train/checkpoint.hpp"
#include "train/model_file.hpp"

namespace tandem::apps {
namespace {

namespace fs = std::filesystem;

// The step directory read_checkpoint read: `dir` itself or the one its `latest` names.
fs::path step_directory(const train::Checkpoint& checkpoint, const fs::path& dir) {
  if (checkpoint.stages.empty() || checkpoint.stages.front().file.empty()) return dir;
  return checkpoint.stages.front().file.parent_path();
}

void add_inspect(CLI::App& cmd) {
  struct Args {
    std::string dir;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* inspect = cmd.add_subcommand(
      "inspect", "step, model, plan, parent, and each stage's file, size, layers and versions");
  inspect->add_option("dir", args->dir, "a checkpoint directory (its `latest`) or a step directory")
      ->required();
  inspect->add_flag("--json", args->json, "print one JSON object instead of the table");
  inspect->callback([args] {
    const train::Checkpoint checkpoint = train::read_checkpoint(args->dir);
    const fs::path step_dir = step_directory(checkpoint, args->dir);
    if (args->json) {
      std::cout << checkpoint_json(checkpoint, step_dir).dump(2) << "\n";
    } else {
      std::cout << format_checkpoint(checkpoint, step_dir);
    }
  });
}

// A model file is a run's result: an existing one is replaced only when asked (checked before
// the checkpoint is read, which takes as long as its size).
void check_export_output(const fs::path& out, bool force) {
  check_output("checkpoint export: -o", out, {});
  std::error_code ec;
  if (!force && fs::exists(out, ec)) {
    throw UsageError("checkpoint export: -o: '" + out.string() +
                     "' exists; give --force to replace it");
  }
}

// Whether `path` is `dir` or lies below it, after links (`latest`) and `..` are resolved.
bool lies_in(const fs::path& path, const fs::path& dir) {
  std::error_code ec;
  const fs::path p = fs::weakly_canonical(fs::absolute(path), ec);
  const fs::path d = fs::weakly_canonical(fs::absolute(dir), ec);
  if (ec) return false;
  auto pi = p.begin();
  for (auto di = d.begin(); di != d.end(); ++di, ++pi) {
    if (di->empty()) continue;  // the trailing separator of a directory
    if (pi == p.end() || *pi != *di) return false;
  }
  return true;
}

// Not over the checkpoint's own files, nor anywhere in it (its `latest`, an older step's
// files), even with --force: a checkpoint is resumable as a whole or not at all.
void check_not_an_input(const fs::path& out, const train::Checkpoint& checkpoint,
                        const fs::path& dir, const fs::path& step_dir) {
  check_output("checkpoint export: -o", out, {step_dir / "manifest.json"});
  for (const train::StageCheckpoint& stage : checkpoint.stages) {
    check_output("checkpoint export: -o", out, {stage.file});
  }
  // A step directory given alone lies in its checkpoint's directory, the one holding `latest`.
  std::error_code ec;
  const fs::path parent = fs::absolute(step_dir).parent_path();
  for (const fs::path& inside :
       {fs::path(dir), step_dir, fs::exists(parent / "latest", ec) ? parent : fs::path()}) {
    if (!inside.empty() && lies_in(out, inside)) {
      throw UsageError("checkpoint export: -o: '" + out.string() + "' lies in the checkpoint ('" +
                       inside.string() +
                       "'), which an export never writes into; give a path outside it");
    }
  }
}

void add_export(CLI::App& cmd) {
  struct Args {
    std::string dir, out;
    bool force = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* exp = cmd.add_subcommand(
      "export",
      "the newest weights as one safetensors file (names '<layer>.<param>', the model in "
      "__metadata__), for train.init_from and other tools; refuses an existing -o without "
      "--force, and writes atomically");
  exp->add_option("dir", args->dir, "a checkpoint directory (its `latest`) or a step directory")
      ->required();
  exp->add_option("-o,--output", args->out, "the model file to write")->required();
  exp->add_flag("--force", args->force, "replace -o when it exists");
  exp->callback([args] {
    check_export_output(args->out, args->force);
    const train::Checkpoint checkpoint = train::read_checkpoint(args->dir);
    check_not_an_input(args->out, checkpoint, args->dir, step_directory(checkpoint, args->dir));
    const models::ParamSet weights = train::newest_weights(checkpoint);
    train::write_model_file(
        args->out, weights,
        {checkpoint.model, checkpoint.step, checkpoint.origin.name, checkpoint.model_layers});
    std::cout << "exported the weights of step " << checkpoint.step << " (" << weights.size()
              << " tensors, " << weights.numel() << " parameters) to " << args->out << "\n";
  });
}

}  // namespace

void add_checkpoint_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "checkpoint", "look into checkpoints written by `tandem train --checkpoint`, export them");
  cmd->require_subcommand(1);
  add_inspect(*cmd);
  add_export(*cmd);
}

}  // namespace tandem::apps
