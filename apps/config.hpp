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
//             eval {every (0: at the end), samples (1024)}
//   pipeline: schedule, slices (a count, a count per stage, or for umpipe per stage
//               {forward*: [sizes], backward*: [sizes]}), chunks (interleaved, 2),
//               rematerialize (gpipe, false), precision (f32 | tf32 | bf16: cuda replicas'
//               matrix products, f32), stages* [{layers "a-b", replicas, device, or
//               devices [one per replica]}]
//   cluster:  transport auto | tcp | ucx, tcp_lanes (2), stall_timeout (300 s),
//             collectives auto | gloo | nccl
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "apps/config_error.hpp"
#include "apps/config_limits.hpp"
#include "models/data/data_spec.hpp"
#include "models/executor.hpp"
#include "models/model_spec.hpp"
#include "models/optimizer.hpp"
#include "runtime/device.hpp"
#include "schedules/plan.hpp"

namespace tandem::apps {

struct EvalConfig {
  int64_t every = 0;       // evaluate every `every` steps; 0: only after the last step
  int64_t samples = 1024;  // held-out samples per evaluation
};

// Learning rate over a run: a linear warm-up from 0, then constant, or a cosine or linear
// decay towards final_fraction * lr at the end (see scheduled_lr).
struct LrSchedule {
  std::string kind = "constant";  // constant | cosine | linear
  int64_t warmup_steps = 0;
  double final_fraction = 0.0;
};

struct TrainConfig {
  int64_t minibatch = 32;
  int64_t steps = 100;
  models::OptimizerSpec optimizer;
  LrSchedule lr_schedule;
  uint64_t seed = 0;  // parameter init, minibatch order, dropout
  int64_t log_every = 10;
  std::optional<EvalConfig> eval;
};

struct StageConfig {
  int64_t first_layer = 0;
  int64_t last_layer = -1;  // inclusive; -1: the model's last layer
  int64_t replicas = 1;
  Device device = Device::cpu();  // every replica's, or the first replica's when `devices` is set
  std::vector<Device> devices;    // one per replica (`devices: [...]`); empty: all on `device`
  // The process (rank of a multi-process job) of each replica (`rank: N` for all of them or
  // `ranks: [...]`); empty: placed by the default rule (apps/process_placement.hpp).
  std::vector<int64_t> ranks;
  ConfigLocation where;
};

// UMPIPE's unequal slices for one stage: the samples of each forward and of each backward
// slice, in order, each list summing to train.minibatch (what `tandem plan -s umpipe -o` writes).
struct SliceComposition {
  std::vector<int64_t> forward, backward;
};

struct PipelineConfig {
  std::string schedule = "1f1b";
  std::vector<int64_t> slices;                 // equal slices: one count, or one per stage
  std::vector<SliceComposition> compositions;  // umpipe: one per stage, instead of counts
  int64_t chunks = 1;                          // interleaved: model chunks per device (v)
  bool rematerialize = false;                  // gpipe: recompute forwards in backward
  // cuda replicas' matrix products: f32, or inputs rounded to tf32 / bf16 (f32 accumulation).
  models::MatmulPrecision precision = models::MatmulPrecision::f32;
  std::vector<StageConfig> stages;
  ConfigLocation where;
};

// The top-level `cluster` section: how the processes of a multi-process job talk.
struct ClusterConfig {
  // The data plane between processes: "auto" (tcp; ucx once built), "tcp" or "ucx". A job of
  // one process uses none.
  std::string transport = "auto";
  // What replicated stages reduce their gradients through when their replicas span processes:
  // "auto" (nccl when every such replica is on a cuda device and the build has NCCL, else gloo),
  // "gloo" (host memory) or "nccl" (GPUs).
  std::string collectives = "auto";
  // TCP streams per pair of processes on the tcp data plane: large tensors are striped over
  // them (TcpChannelOptions::lanes). 1 to 8.
  int tcp_lanes = 2;
  // Seconds a rank may hold work (an action running, messages unhandled) without completing
  // any before the job ends naming it: a stuck kernel, a deadlock or a frozen disk ends the run
  // instead of hanging it. Large enough for the slowest action of a real model.
  double stall_timeout_s = 300;
  ConfigLocation where;
};

struct Config {
  std::string file;
  models::ModelSpec model;
  models::data::DataSpec data;
  TrainConfig train;
  std::optional<PipelineConfig> pipeline;
  ClusterConfig cluster;

  // Where each section starts, for checks made after loading (the trainer's).
  ConfigLocation model_where, data_where, train_where;
};

// The plan a pipeline section describes for a model of `num_layers` layers, running
// `minibatches` minibatches of `minibatch` samples. Stages' layer ranges become [first, last + 1);
// interleaved plans keep them, but the pipeline splits the model evenly into stages * chunks
// virtual stages. Throws schedules::ScheduleError (load_config has already checked the config's
// own plan, with train.steps minibatches).
schedules::Plan pipeline_plan(const PipelineConfig& pipeline, int64_t minibatch, int num_layers,
                              int64_t minibatches);

// Throws ConfigError for unreadable files, YAML syntax errors, unknown or missing keys,
// wrong types and invalid values, devices the machine lacks, and runs larger than its memory
// (apps/config_limits.hpp), all before anything is allocated. Paths that are directories or
// devices (the config's, the data's) are refused.
Config load_config(const std::filesystem::path& path);
// The same from text; `file` names it in errors.
Config parse_config(const std::string& text, const std::string& file);
// Checked against `machine` instead of this one (tests, fuzzing, planning for another machine).
Config load_config(const std::filesystem::path& path, const Machine& machine);
Config parse_config(const std::string& text, const std::string& file, const Machine& machine);

}  // namespace tandem::apps
