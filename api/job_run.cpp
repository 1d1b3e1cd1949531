#include "api/job_run.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <tuple>
#include <utility>
#include <variant>

#include "api/config_reading.hpp"
#include "api/data_fn.hpp"
#include "api/error_translation.hpp"
#include "api/launch.hpp"
#include "api/plan_conversion.hpp"
#include "api/runtime_access.hpp"
#include "models/optimizer.hpp"
#include "schedules/schedule_error.hpp"
#include "train/checkpoint.hpp"
#include "train/cluster_options.hpp"
#include "train/config.hpp"
#include "train/config_limits.hpp"
#include "train/elastic_job.hpp"
#include "train/job_error.hpp"
#include "train/job_plan.hpp"
#include "train/job_rules.hpp"
#include "train/memory_check.hpp"
#include "train/model_file.hpp"
#include "train/predict.hpp"
#include "train/process_group.hpp"
#include "train/schedule_choice.hpp"
#include "train/session.hpp"

namespace tandem::api {
namespace {

using Clock = std::chrono::steady_clock;

// A checkpoint or weights file named by option `key` that cannot be used.
Error checkpoint_error(const std::string& key, const std::string& detail) {
  ErrorWhere where;
  where.key = key;
  return Error(ErrorCode::checkpoint, key + ": " + detail, std::move(where));
}

// The options both kinds of job share.
struct RunFiles {
  std::int64_t steps = 0;
  CheckpointOptions checkpoints;
  std::string resume, trace;
};

train::SessionOptions session_options(const RunFiles& o, const char* owner) {
  const std::string field = owner;
  train::SessionOptions so;
  if (o.steps < 0) {
    throw option_error(field + ".steps", "must be >= 0, got " + std::to_string(o.steps));
  }
  if (o.steps > 0) so.steps = o.steps;
  if (!o.trace.empty()) so.trace = o.trace;
  if (!o.checkpoints.dir.empty()) {
    // Checked by train::Session, which names these options in its errors.
    so.checkpoint_dir = o.checkpoints.dir;
    so.checkpoint_every = o.checkpoints.every;
    so.checkpoint_keep = o.checkpoints.keep;
  }
  so.gather_weights = true;  // rank 0's Session::weights() is the whole model's
  so.steps_option =
      field == "TrainOptions" ? "TrainOptions.minibatches" : "train.steps (" + field + ".steps)";
  so.checkpoint_every_option = field + ".checkpoints.every";
  so.checkpoint_keep_option = field + ".checkpoints.keep";
  if (!o.resume.empty()) so.resume = o.resume;
  return so;
}

// `threads` workers (0: the runtime's threads where there is one, else one per hardware
// thread), taking turns on the runtime's threads.
void share_threads(train::SessionOptions& so, const std::optional<Runtime>& runtime,
                   std::size_t threads) {
  so.shared_threads = RuntimeAccess::budget(runtime);
  so.threads = threads == 0 && runtime ? runtime->threads() : threads;
}

EvalReport eval_report(const train::EvalResult& e) {
  return {e.loss, e.accuracy, e.samples, e.has_accuracy};
}

Progress progress_of(const train::StepRecord& r) {
  Progress p;
  p.step = r.step;
  p.steps = r.steps;
  p.loss = r.loss;
  p.has_accuracy = r.accuracy.has_value();
  p.accuracy = r.accuracy.value_or(0);
  p.samples_per_s = r.samples_per_s;
  p.elapsed_s = r.elapsed_s;
  p.lr = r.lr;
  p.has_grad_norm = r.grad_norm.has_value();
  p.grad_norm = r.grad_norm.value_or(0);
  p.has_eval = r.eval.has_value();
  if (r.eval) p.eval = eval_report(*r.eval);
  return p;
}

std::vector<StageReport> stage_reports(const std::vector<train::StageStats>& stats) {
  std::vector<StageReport> out;
  for (const train::StageStats& st : stats) {
    if (st.actions == 0 && st.device_name.empty()) continue;  // another rank's, not gathered
    out.push_back({st.stage, st.replica, st.device_name, st.actions, st.busy_s,
                   static_cast<std::int64_t>(st.peak_versions),
                   static_cast<std::int64_t>(st.peak_activations)});
  }
  std::sort(out.begin(), out.end(), [](const StageReport& a, const StageReport& b) {
    return std::tie(a.stage, a.replica) < std::tie(b.stage, b.replica);
  });
  return out;
}

models::OptimizerSpec internal_optimizer(const Optimizer& optimizer) {
  models::OptimizerSpec spec;
  if (const auto* sgd = std::get_if<SgdOptions>(&optimizer)) {
    spec.kind = "sgd";
    spec.lr = sgd->lr;
    spec.momentum = sgd->momentum;
    spec.weight_decay = sgd->weight_decay;
    spec.nesterov = sgd->nesterov;
  } else {
    const auto& adamw = std::get<AdamWOptions>(optimizer);
    spec.kind = "adamw";
    spec.lr = adamw.lr;
    spec.beta1 = adamw.beta1;
    spec.beta2 = adamw.beta2;
    spec.eps = adamw.eps;
    spec.weight_decay = adamw.weight_decay;
  }
  return spec;
}

train::LrSchedule internal_lr_schedule(const LrSchedule& l) {
  train::LrSchedule out;
  out.kind = l.kind == LrSchedule::Kind::cosine   ? "cosine"
             : l.kind == LrSchedule::Kind::linear ? "linear"
                                                  : "constant";
  out.warmup_steps = l.warmup_steps;
  out.final_fraction = l.final_fraction;
  return out;
}

train::ClusterSpec internal_cluster(const ClusterOptions& c) {
  using T = ClusterOptions::Transport;
  using C = ClusterOptions::Collectives;
  train::ClusterSpec out;
  out.transport = c.transport == T::tcp ? "tcp" : c.transport == T::ucx ? "ucx" : "auto";
  out.collectives = c.collectives == C::gloo ? "gloo" : c.collectives == C::nccl ? "nccl" : "auto";
  out.tcp_lanes = c.tcp_lanes;
  out.stall_timeout_s = c.stall_timeout_s;
  out.elastic = c.elastic;
  out.max_replans = c.max_replans;
  return out;
}

models::MatmulPrecision internal_precision(Precision p) {
  return p == Precision::bf16   ? models::MatmulPrecision::bf16
         : p == Precision::tf32 ? models::MatmulPrecision::tf32
                                : models::MatmulPrecision::f32;
}

// A rule broken by an option (train/job_rules.hpp names the config's key): the option's name.
Error broken_option(const train::JobError& e) {
  std::string key = e.key();
  for (const auto& [config, option] : {std::pair<std::string_view, std::string_view>{
                                           "cluster.stall_timeout", "cluster.stall_timeout_s"},
                                       {"train.optimizer.betas", "optimizer.beta1/beta2"},
                                       {"train.", ""},
                                       {"pipeline.", "plan."}}) {
    if (key.starts_with(config)) {
      key = std::string(option) + key.substr(config.size());
      break;
    }
  }
  return option_error("TrainOptions." + key, e.detail());
}

// The rules both front ends share (train/job_rules.hpp), on what the application set.
void check_rules(const train::JobSpec& job) {
  try {
    train::check_optimizer(job.train.optimizer);
    train::check_lr_schedule(job.train.lr_schedule);
    train::check_cluster(job.cluster);
    for (std::size_t s = 0; s < job.pipeline->compositions.size(); ++s) {
      train::check_composition(job.pipeline->compositions[s], job.train.minibatch, s);
    }
  } catch (const train::JobError& e) {
    throw broken_option(e);
  }
}

// The options that are plain numbers of the run, checked.
void set_run_numbers(train::TrainSpec& t, const TrainOptions& o) {
  if (o.accumulate < 1) {
    throw option_error("TrainOptions.accumulate",
                       "must be >= 1, got " + std::to_string(o.accumulate));
  }
  t.accumulate = o.accumulate;
  if (o.clip_grad_norm < 0 || !std::isfinite(o.clip_grad_norm)) {
    throw option_error(
        "TrainOptions.clip_grad_norm",
        "must be a finite number >= 0 (0: no clipping), got " + std::to_string(o.clip_grad_norm));
  }
  if (o.clip_grad_norm > 0) t.clip_grad_norm = o.clip_grad_norm;
  if (o.log_every < 1) {
    throw option_error("TrainOptions.log_every",
                       "must be >= 1, got " + std::to_string(o.log_every));
  }
  t.log_every = o.log_every;
  if (o.eval_data) {
    if (o.eval_minibatches < 1 || o.eval_every < 0) {
      throw option_error("TrainOptions.eval_minibatches",
                         "must be >= 1 and eval_every >= 0 with eval_data");
    }
    t.eval = train::EvalSpec{o.eval_every, o.eval_minibatches * o.plan.minibatch};
  }
}

// A job of the application's model and plan, checked field by field before anything runs.
train::JobSpec code_job(const models::Model& model, const TrainOptions& o) {
  train::JobSpec job;
  job.train.minibatch = o.plan.minibatch;
  job.train.steps = o.minibatches;
  job.train.optimizer = internal_optimizer(o.optimizer);
  job.train.lr_schedule = internal_lr_schedule(o.lr_schedule);
  if (o.precision != Precision::f32) job.train.precision = internal_precision(o.precision);
  job.train.seed = o.seed;
  if (!o.init_from.empty()) job.train.init_from = o.init_from;
  set_run_numbers(job.train, o);
  job.cluster = internal_cluster(o.cluster);
  job.pipeline = pipeline_layout(o.plan);
  check_rules(job);
  if (o.plan.minibatch < 1) {
    throw plan_error("plan.minibatch", "must be >= 1, got " + std::to_string(o.plan.minibatch));
  }
  if (o.minibatches < 1) {
    throw option_error("TrainOptions.minibatches",
                       "must be >= 1, got " + std::to_string(o.minibatches));
  }
  if (job.pipeline->schedule == "auto") {
    train::ScheduleChoiceInputs inputs;
    inputs.allow_async = o.plan.allow_async;
    try {
      (void)train::choose_schedule(*job.pipeline, job.train.minibatch, model, inputs);
    } catch (const train::JobError& e) {
      throw plan_error("plan.schedule", e.detail());
    }
  }
  try {
    (void)train::pipeline_plan(*job.pipeline, job.train.minibatch, model.num_layers(),
                               o.minibatches);
  } catch (const schedules::ScheduleError& e) {
    throw Error(ErrorCode::plan, e.what());  // names the plan's stage or field already
  }
  // The application's data is its own: the check counts the model's weights, gradients,
  // optimizer state and activations.
  try {
    train::check_job_memory(job, model, train::parameter_count(model), {},
                            train::Machine::here().memory_bytes);
  } catch (const train::JobError& e) {
    if (e.key() == "train.minibatch") throw option_error("TrainOptions.plan.minibatch", e.detail());
    throw option_error("model", e.detail());
  }
  return job;
}

}  // namespace

struct JobRun::State {
  std::function<void(const Progress&)> on_progress;
  std::function<void(const Metrics&)> on_metrics;
  // The job: its session, over its process group when a launcher started it, re-formed and
  // re-planned on a lost rank when the config says cluster.elastic.
  std::optional<train::ElasticJob> job;
  // ConfigRunOptions::weights: what predict() uses instead of the session's weights.
  std::optional<models::ParamSet> predict_weights;
  std::mutex mu;
  std::map<std::int64_t, double> losses;  // by minibatch, as the coordinator reports them
  Clock::time_point start;
  // The threads predict() runs on: the session's (its Runtime's, where it has one).
  std::shared_ptr<ThreadBudget> shared_threads;
  std::size_t threads = 0;
  // The schedule that runs and its slices (TrainResult::schedule, slices).
  Schedule schedule = Schedule::one_f_one_b;
  int slices = 1;
  bool ran = false;
  bool failed = false;  // run() threw

  void keep_threads(const train::SessionOptions& so) {
    shared_threads = so.shared_threads;
    threads = so.threads;
  }

  void runs_as(const std::optional<train::PipelineLayout>& pipeline) {
    if (!pipeline) return;  // one cpu stage, one slice
    schedule = api_schedule(pipeline->schedule);
    slices = !pipeline->compositions.empty() ? 0
             : pipeline->slices.empty()      ? 1
                                             : static_cast<int>(pipeline->slices.front());
  }
  // Held while on_metrics or on_progress runs: the application's callbacks never overlap,
  // whichever library thread calls them.
  std::mutex callback_mu;

  // What train::JobInputs::on_minibatch calls: on_minibatch below (the state outlives the run).
  std::function<void(std::int64_t, const train::MinibatchReport&)> reporter() {
    return [this](std::int64_t b, const train::MinibatchReport& r) { on_minibatch(b, r); };
  }

  // On a pipeline thread, as each minibatch's loss completes.
  void on_minibatch(std::int64_t b, const train::MinibatchReport& r) {
    {
      std::lock_guard lock(mu);
      losses[b] = r.loss;
    }
    if (on_metrics) {
      Metrics m;
      m.minibatch = b;
      m.loss = r.loss;
      m.correct = r.correct;
      m.rows = r.rows;
      m.elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
      m.has_grad_norm = !std::isnan(r.grad_norm);
      m.grad_norm = m.has_grad_norm ? r.grad_norm : 0;
      std::lock_guard lock(callback_mu);
      on_metrics(m);
    }
  }
};

JobRun::JobRun(const Config& config_source, ConfigRunOptions options)
    : state_(std::make_unique<State>()) {
  state_->on_progress = std::move(options.on_progress);
  const train::Config config = read_config(config_source);
  state_->runs_as(config.pipeline);
  train::SessionOptions so = session_options(
      {options.steps, options.checkpoints, options.resume, options.trace}, "ConfigRunOptions");
  share_threads(so, options.runtime, 0);
  state_->keep_threads(so);
  // The job's other ranks wait for this one from here on: joined before the session is built,
  // as `tandem train` does.
  std::unique_ptr<train::ProcessGroup> group =
      join_job(options.launch, train::process_group_options(config.cluster), "ConfigRunOptions");
  train::JobInputs inputs;
  inputs.model = train::config_model(config);
  inputs.on_minibatch = state_->reporter();
  try {
    train::at_config(config,
                     [&] { state_->job.emplace(config, so, std::move(group), std::move(inputs)); });
  } catch (const train::CheckpointError& e) {
    throw checkpoint_error("ConfigRunOptions.resume", e.what());
  }
  if (!options.weights.empty()) {
    train::Session& session = state_->job->session();
    try {
      state_->predict_weights =
          train::load_predict_weights(options.weights, session.model(), session.model_name());
    } catch (const std::runtime_error& e) {
      throw checkpoint_error("ConfigRunOptions.weights", e.what());
    }
  }
}

JobRun::JobRun(const models::Model& model, const std::string& model_name, TrainOptions options)
    : state_(std::make_unique<State>()) {
  if (!options.data == !options.stoppable_data) {
    throw option_error("TrainOptions.data",
                       options.data ? "give data or stoppable_data, not both" : "no DataFn");
  }
  StoppableDataFn data = std::move(options.stoppable_data);
  if (options.data) {
    data = [fn = std::move(options.data)](std::int64_t b, const std::stop_token&) { return fn(b); };
  }
  state_->on_progress = std::move(options.on_progress);
  state_->on_metrics = std::move(options.on_metrics);
  const train::JobSpec job = code_job(model, options);
  state_->runs_as(job.pipeline);
  train::SessionOptions so =
      session_options({0, options.checkpoints, options.resume, options.trace}, "TrainOptions");
  share_threads(so, options.runtime, options.threads);
  state_->keep_threads(so);
  train::JobInputs inputs;
  inputs.model = model;
  inputs.model_name = model_name;
  inputs.fetch_stop = std::make_shared<train::FetchStop>();
  inputs.data = data_source(std::move(data), inputs.fetch_stop, model, options.plan.minibatch,
                            options.accumulate);
  if (options.eval_data) {
    inputs.eval = held_out_dataset(std::move(options.eval_data), model, options.plan.minibatch,
                                   options.eval_minibatches);
  }
  inputs.lr_at = std::move(options.lr_at);
  inputs.on_minibatch = state_->reporter();
  std::unique_ptr<train::ProcessGroup> group =
      join_job(options.launch, train::process_group_options(job.cluster), "TrainOptions");
  try {
    state_->job.emplace(job, so, std::move(group), std::move(inputs));
  } catch (const train::CheckpointError& e) {
    throw checkpoint_error("TrainOptions.resume", e.what());
  } catch (const train::JobError& e) {
    if (e.key() != "train.init_from") throw;
    throw checkpoint_error("TrainOptions.init_from", e.detail());
  }
}

JobRun::~JobRun() = default;

TrainResult JobRun::run() {
  if (state_->ran) throw std::logic_error("Session::run called twice");
  state_->ran = true;
  try {
    return run_job();
  } catch (...) {
    const Error e = to_error(std::current_exception(), state_->job->group());
    state_->failed = true;
    throw Error(e.code(), e.what(), e.where(), std::make_shared<TrainResult>(partial_result()));
  }
}

TrainResult JobRun::partial_result() {
  train::ElasticJob& job = *state_->job;
  TrainResult out;
  out.status = RunStatus::failed;
  out.schedule = state_->schedule;
  out.slices = state_->slices;
  out.first_minibatch = job.session().first_step();
  out.resume_note = job.session().resume_note();
  {
    std::lock_guard lock(state_->mu);
    for (const auto& [b, loss] : state_->losses) {
      if (b >= out.first_minibatch) out.losses.push_back(loss);
    }
  }
  out.minibatches = static_cast<std::int64_t>(out.losses.size());
  out.seconds = std::chrono::duration<double>(Clock::now() - state_->start).count();
  for (const auto& c : job.session().checkpoints_written()) out.checkpoints.push_back(c.string());
  const train::ProcessGroup* group = job.group();
  out.rank = group != nullptr ? group->rank() : 0;
  out.processes = group != nullptr ? group->world_size() : 1;
  return out;
}

TrainResult JobRun::run_job() {
  train::ElasticJob& job = *state_->job;
  const bool reporter = job.group() == nullptr || job.group()->rank() == 0;
  std::function<void(const train::StepRecord&)> on_record;
  if (reporter && state_->on_progress) {
    on_record = [state = state_.get()](const train::StepRecord& r) {
      std::lock_guard lock(state->callback_mu);
      state->on_progress(progress_of(r));
    };
  }
  state_->start = Clock::now();
  // A re-planned job's summary starts at the checkpoint it resumed from; the result covers the
  // whole run.
  const std::int64_t first = job.session().first_step();
  train::TrainSummary s = job.run(on_record);
  s.first_step = first;
  // After a re-plan the group is another one (or none, the job shrunk to this process).
  train::ProcessGroup* group = job.group();
  job.shutdown();
  TrainResult out;
  out.schedule = state_->schedule;
  out.slices = state_->slices;
  out.first_minibatch = s.first_step;
  out.resume_note = job.session().resume_note();
  out.minibatches = s.steps - s.first_step;
  out.status = s.stopped ? RunStatus::stopped : RunStatus::completed;
  {
    std::lock_guard lock(state_->mu);
    for (const auto& [b, loss] : state_->losses) {
      if (b >= s.first_step && b < s.steps) out.losses.push_back(loss);
    }
  }
  out.seconds = s.seconds;
  out.stages = stage_reports(s.stages);
  for (const auto& c : s.checkpoints) out.checkpoints.push_back(c.string());
  out.rank = group != nullptr ? group->rank() : 0;
  out.processes = group != nullptr ? group->world_size() : 1;
  out.has_eval = s.eval.has_value();
  if (s.eval) out.eval = eval_report(*s.eval);
  out.weights_fingerprint = s.params_fingerprint;
  return out;
}

Tensor JobRun::predict(const Tensor& inputs, const PredictOptions& options) const {
  train::Session& session = state_->job->session();
  if (state_->job->group() != nullptr) {
    throw std::logic_error("Session::predict: a multi-process job's ranks hold only their stages");
  }
  const models::ParamSet& weights =
      state_->predict_weights ? *state_->predict_weights : session.params();
  try {
    return train::predict(session.model(), session.plan(), weights, inputs,
                          train::PredictOptions{.slices = options.slices,
                                                .threads = state_->threads,
                                                .shared_threads = state_->shared_threads})
        .outputs;
  } catch (const train::PredictError& e) {
    throw Error(ErrorCode::data, std::string("Session::predict: ") + e.what());
  } catch (...) {
    throw to_error(std::current_exception(), nullptr, "Session::predict: ");
  }
}

std::string JobRun::model_name() const {
  return state_->job->session().model_name();
}

void JobRun::stop() {
  state_->job->request_stop();
}

std::vector<NamedTensor> JobRun::weights() const {
  if (!state_->ran) throw std::logic_error("Session::weights: run() has not run");
  if (state_->failed) {
    throw Error(ErrorCode::stopped,
                "Session::weights: the run failed, so there are no trained weights (the "
                "failure's partial() names the checkpoints it wrote)");
  }
  const models::ParamSet& params = state_->job->session().whole_params();
  std::vector<NamedTensor> out;
  for (std::int64_t i = 0; i < params.size(); ++i) out.push_back({params.name(i), params[i]});
  return out;
}

}  // namespace tandem::api
