#pragma once
// What a training job is, as plain values: the model, its data, how it trains, how the
// pipeline cuts and schedules it, and how the processes of a multi-process job talk. The CLI
// reads it from YAML (train/config.hpp, which keeps where each key stood for its errors); the
// embedding API fills it in code. train/job_plan.hpp turns it into a schedules::Plan.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "models/data/data_spec.hpp"
#include "models/delay_correction.hpp"
#include "models/executor.hpp"
#include "models/model_spec.hpp"
#include "models/optimizer.hpp"
#include "runtime/device.hpp"

namespace tandem::train {

struct EvalSpec {
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

struct TrainSpec {
  int64_t minibatch = 32;
  int64_t steps = 100;
  // Minibatches per optimizer step (gradient accumulation): a step averages loss and gradients
  // over accumulate * minibatch samples once, as one device does on that larger minibatch. The
  // pipeline runs them as one minibatch of accumulate times the slices (step_samples).
  int64_t accumulate = 1;
  // Scale each step's gradients down to this global L2 norm (actors::PipelineSpec); none: no
  // clipping and no norm reported.
  std::optional<double> clip_grad_norm;
  // How every stage runs matrix products (supersedes PipelineLayout::precision): bf16 rounds
  // their operands, accumulating in f32 (cuda: every GEMM; cpu: Linear layers through oneDNN,
  // where the CPU has bf16 instructions); master weights, optimizer state and gradients stay f32.
  std::optional<models::MatmulPrecision> precision;
  models::OptimizerSpec optimizer;
  LrSchedule lr_schedule;
  uint64_t seed = 0;  // parameter init, minibatch order, dropout
  int64_t log_every = 10;
  std::optional<EvalSpec> eval;
  // Start from the weights of a whole-model file (train/model_file.hpp) instead of initialising
  // them from `seed`; a resume from a checkpoint takes precedence.
  std::optional<std::filesystem::path> init_from;
};

// Samples per optimizer step: the minibatch times the minibatches accumulated.
inline int64_t step_samples(const TrainSpec& t) {
  return t.minibatch * t.accumulate;
}

struct StageSpec {
  int64_t first_layer = 0;
  int64_t last_layer = -1;  // inclusive; -1: the model's last layer
  int64_t replicas = 1;
  Device device = Device::cpu();  // every replica's, or the first replica's when `devices` is set
  std::vector<Device> devices;    // one per replica; empty: all on `device`
  // The process (rank of a multi-process job) of each replica; empty: placed by the default
  // rule (train/process_placement.hpp).
  std::vector<int64_t> ranks;
};

// UMPIPE's unequal slices for one stage: the samples of each forward and of each backward
// slice, in order, each list summing to the minibatch.
struct SliceComposition {
  std::vector<int64_t> forward, backward;
};

// The pipeline: its stages, their schedule and how a minibatch is sliced.
struct PipelineLayout {
  std::string schedule = "1f1b";               // a name of schedules::pipeline_schedule_names()
  std::vector<int64_t> slices;                 // equal slices: one count, or one per stage
  std::vector<SliceComposition> compositions;  // umpipe: one per stage, instead of counts
  int64_t chunks = 1;                          // interleaved: model chunks per device (v)
  bool rematerialize = false;                  // gpipe: recompute forwards in backward
  // cuda replicas' matrix products: f32, or inputs rounded to tf32 / bf16 (f32 accumulation).
  models::MatmulPrecision precision = models::MatmulPrecision::f32;
  // Activations and gradients between stages: f32 or bf16; unset: bf16 when the run's precision
  // (train.precision, else `precision`) is bf16, else f32.
  std::optional<DType> wire_dtype;
  // A graph's tensors that skip stages: sent straight to the stages that read them, or relayed
  // by every stage in between (for links that join neighbours only, and to compare).
  bool relay_skips = false;
  // Asynchronous schedules only: how each stage corrects its weights for its gradients' delay.
  models::AsyncCorrection async_correction = models::AsyncCorrection::none;
  std::vector<StageSpec> stages;
};

// How the processes of a multi-process job talk.
struct ClusterSpec {
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
  // When a rank is lost, the survivors re-plan the model onto themselves and resume from the
  // last checkpoint (train/elastic_job.hpp), at most max_replans times; off, a lost rank ends the
  // job.
  bool elastic = false;
  int max_replans = 2;
};

struct JobSpec {
  models::ModelSpec model;
  models::data::DataSpec data;
  TrainSpec train;
  std::optional<PipelineLayout> pipeline;  // none: one stage of every layer on the CPU
  ClusterSpec cluster;
};

// How every stage runs matrix products: train.precision, else pipeline.precision, else f32.
inline models::MatmulPrecision run_precision(const JobSpec& job) {
  if (job.train.precision) return *job.train.precision;
  return job.pipeline ? job.pipeline->precision : models::MatmulPrecision::f32;
}

// The dtype of tensors between stages: pipeline.wire_dtype, else bf16 at bf16 precision.
inline DType wire_dtype(const JobSpec& job) {
  if (job.pipeline && job.pipeline->wire_dtype) return *job.pipeline->wire_dtype;
  return run_precision(job) == models::MatmulPrecision::bf16 ? DType::bf16 : DType::f32;
}

}  // namespace tandem::train
