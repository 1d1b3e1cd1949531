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
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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

  // Where a key of a JobError stands: "pipeline.stages[2].device" at stage 2's entry,
  // "data.seed" at the data section, ...; a section the file lacks at the file.
  ConfigLocation of(std::string_view key) const;
};

// A job read from YAML: its meaning (JobSpec) and where each part came from.
struct Config : JobSpec {
  std::string file;
  ConfigLocations where;
  // `schedule: auto`: every candidate with its prediction or why it was dropped; the pipeline
  // holds the pick.
  std::optional<planner::ScheduleRanking> schedule_ranking;
};

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

// Throws ConfigError for unreadable files, YAML syntax errors, unknown or missing keys,
// wrong types and invalid values, devices the machine lacks, and runs larger than its memory
// (train/config_limits.hpp), all before anything is allocated. Paths that are directories or
// devices (the config's, the data's) are refused.
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
