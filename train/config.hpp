#pragma once
// The YAML config of a training run (docs/config.md). Sections: model, data, train, pipeline,
// cluster; unknown keys anywhere are errors naming file:line:column and the key. A new section
// is one more field here and one more reader in config.cpp, listed in kTopLevelSections.
//
// Keys (required ones marked *; data keys marked (model) default to the model's value):
//   model:    name* mlp | gpt | vgg16
//             mlp: widths* [in, hidden..., classes]
//             gpt: layers*, d_model*, heads*, seq_len*, vocab*, d_ff (0: 4 d_model), dropout
//             vgg16: width_mult (1), in_channels (3), image_size (224), classes (10), dropout
//   data:     kind* teacher | shapes | markov-text | tokens | mnist | cifar10; seed (1)
//             teacher (mlp): samples, features (model), hidden (32), classes (model)
//             shapes (vgg16, mlp): samples, channels, image_size (model), classes (model),
//               noise (0.1)
//             markov-text (gpt): samples (windows), vocab (model), order (1), sharpness (2)
//             tokens (gpt): path*, eval_path, format u8 | u16
//             mnist: images*, labels*, eval_images, eval_labels, classes (model)
//             cifar10: files* (one or a list), eval_files, classes (model)
//   train:    minibatch*, steps*, seed (0), log_every (10),
//             optimizer* {kind* sgd | adamw, lr*, weight_decay, sgd: momentum, nesterov;
//                         adamw: betas [b1, b2], eps},
//             lr_schedule {kind* constant | cosine | linear, warmup_steps, final_fraction},
//             eval {every (0: at the end), samples (1024)},
//             init_from (a whole-model file, train/model_file.hpp)
//   pipeline: schedule (a name, or auto: the fastest the planner ranks), allow_async (auto:
//               rank pipedream, pipedream-vsync and 2bw too, false), slices (a count, a count per
//               stage, or for umpipe per stage {forward*: [sizes], backward*: [sizes]}), chunks
//               (interleaved, 2), rematerialize (gpipe, false), precision (f32 | tf32 | bf16: cuda
//               replicas' matrix products, f32), stages* [{layers "a-b", replicas, device, or
//               devices [one per replica]}], or partition: auto with profile* and cluster*
//               (auto with stages: profile and cluster optional)
//   cluster:  transport auto | tcp | ucx, tcp_lanes (2), stall_timeout (300 s),
//             collectives auto | gloo | nccl
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "models/model.hpp"
#include "planner/schedule_ranking.hpp"
#include "train/config_error.hpp"
#include "train/config_limits.hpp"
#include "train/config_overrides.hpp"
#include "train/job_error.hpp"
#include "train/job_spec.hpp"

namespace tandem::train {

// Where each part of a config stands in its file, for the errors of checks made after loading.
struct ConfigLocations {
  ConfigLocation file;  // the file itself (line 0)
  ConfigLocation model, data, train, pipeline, cluster;
  std::vector<ConfigLocation> stages;  // pipeline.stages[i] (or `partition`, for each)
  // Keys whose checks come after reading (train/config_check.hpp), each where it stands:
  // "pipeline.partition", "pipeline.profile", "pipeline.schedule", "pipeline.slices",
  // "pipeline.stages[1].device", ...
  std::map<std::string, ConfigLocation, std::less<>> keys;

  // Where a key of a JobError stands: a key of `keys` where it was read,
  // "pipeline.stages[2].devices" at stage 2's entry, "data.seed" at the data section, ...; a
  // section the file lacks at the file.
  ConfigLocation of(std::string_view key) const;
};

// What a config leaves to the planning step (train/config_check.hpp).
struct ConfigPlanning {
  bool partition = false;  // `partition: auto`: the planner picks the stages
  // The profile and cluster files it names (resolved against the config's folder).
  std::optional<std::filesystem::path> profile, cluster;
  bool allow_async = false;  // `schedule: auto` ranks the asynchronous schedules too
};

// A job read from YAML: its meaning (JobSpec) and where each part came from.
struct Config : JobSpec {
  std::string file;
  ConfigLocations where;
  ConfigPlanning planning;
  // The model's parameters, tied copies counted apart (what the memory check counts).
  double parameters = 0;
  // `schedule: auto`: every candidate with its prediction or why it was dropped; the pipeline
  // holds the pick.
  std::optional<planner::ScheduleRanking> schedule_ranking;
  // The model, built once by the check (load_config, parse_config) for all that follows; null
  // after read_config alone. Whoever changes `model` afterwards builds it anew.
  std::shared_ptr<const models::Model> model_built;
};

// The config's model: the one its check built, or, for a Config made otherwise, built now.
models::Model config_model(const Config& config);

// A job's error reported at the config line of the key it names.
ConfigError config_error(const Config& config, const JobError& e);

// Runs `f`, reporting a JobError it throws as config_error does.
template <class F>
decltype(auto) at_config(const Config& config, F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (const JobError& e) {
    throw config_error(config, e);
  }
}

// Reads a config and only reads it: ConfigError for YAML syntax errors, unknown or missing
// keys, wrong types and values that cannot be, and models too large to build on `machine`.
// `partition: auto` and `schedule: auto` are left to the planning step (Config::planning), the
// devices and the memory to the checks (train/config_check.hpp).
Config read_config(const std::string& text, const std::string& file,
                   const ConfigOverrides& overrides, const Machine& machine);

// Reads the config and then plans and checks it (check_config): throws ConfigError for
// unreadable files and for what read_config and check_config refuse (devices the machine
// lacks, runs larger than its memory: train/config_limits.hpp), all before anything is
// allocated. Paths that are directories or devices (the config's, the data's) are refused.
Config load_config(const std::filesystem::path& path);
// The same from text; `file` names it in errors.
Config parse_config(const std::string& text, const std::string& file);
// Checked against `machine` instead of this one (tests, fuzzing, planning for another machine).
Config load_config(const std::filesystem::path& path, const Machine& machine);
Config parse_config(const std::string& text, const std::string& file, const Machine& machine);
// With keys overridden (train/config_overrides.hpp): read as if the text held the overrides'
// values; errors in an overridden value name the override.
Config load_config(const std::filesystem::path& path, const ConfigOverrides& overrides,
                   const Machine& machine = Machine::here());
Config parse_config(const std::string& text, const std::string& file,
                    const ConfigOverrides& overrides, const Machine& machine = Machine::here());

}  // namespace tandem::train
