#include "train/session.hpp"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <stdexcept>

#include "actors/dataset_source.hpp"
#include "models/data/markov_text.hpp"
#include "models/delay_correction.hpp"
#include "schedules/pipeline_rules.hpp"
#include "schedules/schedule_kind.hpp"
#include "train/diverged_error.hpp"
#include "train/eval_snapshots.hpp"
#include "train/job_checkpoint.hpp"
#include "train/job_error.hpp"
#include "train/job_plan.hpp"
#include "train/job_trace.hpp"
#include "train/job_weights.hpp"
#include "train/model_file.hpp"
#include "train/model_identity.hpp"
#include "train/pipeline_trace.hpp"
#include "train/process_group.hpp"
#include "train/process_placement.hpp"
#include "train/progress.hpp"
#include "train/resume_state.hpp"
#include "train/segment.hpp"
#include "train/stage_state.hpp"
#include "train/tied_checkpoint.hpp"

namespace tandem::train {
namespace {

namespace data = models::data;
using Clock = std::chrono::steady_clock;

actors::StageStats merged(const actors::StageStats& a, const actors::StageStats& b) {
  actors::StageStats out = a;
  out.actions += b.actions;
  out.busy_s += b.busy_s;
  out.bytes_sent += b.bytes_sent;
  out.peak_versions = std::max(a.peak_versions, b.peak_versions);
  out.peak_activations = std::max(a.peak_activations, b.peak_activations);
  out.peak_received = std::max(a.peak_received, b.peak_received);
  out.peak_bytes = std::max(a.peak_bytes, b.peak_bytes);
  out.finished = a.finished && b.finished;
  return out;
}

// The steps of `steps` that a segment from step `at` to `end` completes.
std::vector<int64_t> steps_within(const std::vector<int64_t>& steps, int64_t at, int64_t end) {
  std::vector<int64_t> out;
  for (int64_t s : steps) {
    if (s > at && s <= end) out.push_back(s);
  }
  return out;
}

// Replaces the weights `from` holds in `into` (adding those it lacks), keeping the order.
void overwrite(models::ParamSet& into, const models::ParamSet& from) {
  for (int64_t i = 0; i < from.size(); ++i) {
    if (into.contains(from.name(i))) {
      into.at(from.name(i)) = from[i];
    } else {
      into.add(from.name(i), from[i]);
    }
  }
}

}  // namespace

struct Session::Stop {
  std::mutex mu;
  actors::Pipeline* running = nullptr;  // the segment that runs now
  bool requested = false;

  void request() {
    std::lock_guard lock(mu);
    requested = true;
    if (running != nullptr) running->request_stop();
  }
  void set(actors::Pipeline* p) {
    std::lock_guard lock(mu);
    running = p;
    if (p != nullptr && requested) p->request_stop();
  }
  bool was_requested() {
    std::lock_guard lock(mu);
    return requested;
  }
};

Session::Session(JobSpec job, SessionOptions options, JobInputs inputs)
    : job_(std::move(job)),
      options_(std::move(options)),
      inputs_(std::move(inputs)),
      model_(inputs_.model ? *inputs_.model : models::Model::build(job_.model)),
      steps_(options_.steps.value_or(job_.train.steps)),
      stop_(std::make_unique<Stop>()) {
  if (steps_ < 1) throw std::invalid_argument("steps must be >= 1");
  if (options_.checkpoint_every < 0) {
    throw JobError(options_.checkpoint_every_option,
                   "must be >= 0, got " + std::to_string(options_.checkpoint_every));
  }
  if (options_.checkpoint_keep < 0) {
    throw JobError(
        options_.checkpoint_keep_option,
        "must be >= 0 (0 keeps every checkpoint), got " + std::to_string(options_.checkpoint_keep));
  }
  plan_ = training_plan(job_, model_.num_layers(), steps_);
  check_stop_boundaries();
  if (options_.group != nullptr) {
    placement_ = std::make_unique<ProcessPlacement>(job_, plan_, options_.group->world_size());
  }
  if (inputs_.data) {
    data_.eval = job_.train.eval ? inputs_.eval : nullptr;
  } else {
    data_ = load_train_data(job_, model_);
  }
  try {
    (void)models::make_optimizer(job_.train.optimizer);
  } catch (const std::invalid_argument& e) {
    throw JobError("train.optimizer", e.what());
  }
  if (job_.pipeline && job_.pipeline->async_correction != models::AsyncCorrection::none) {
    try {
      (void)models::make_optimizer(job_.train.optimizer, job_.pipeline->async_correction, 1);
    } catch (const std::invalid_argument& e) {
      throw JobError("pipeline.async_correction", e.what());
    }
  }
  if (!options_.resume) {
    params_ = initial_params();
    return;
  }
  // Each process reads only the checkpoint files holding the layers of the stages it runs.
  ResumeState resumed = read_resume_state(*options_.resume, job_, model_, model_name(), plan_,
                                          steps_, [this](int stage) { return hosts_stage(stage); });
  first_step_ = resumed.first_step;
  params_ = subset_of(resumed.params, hosted_layers());
  optimizer_states_ = std::move(resumed.optimizer_states);
  older_versions_ = std::move(resumed.older_versions);
  parent_checkpoint_ = resumed.parent;
  resume_note_ = std::move(resumed.reshard_note);
  history_ = std::move(resumed.history);
}

Session::~Session() = default;

int64_t Session::parameters() const {
  return model_.init_params(0, Device::sim()).numel();
}

std::string Session::model_name() const {
  return inputs_.model_name.empty() ? job_.model.describe() : inputs_.model_name;
}

void Session::request_stop() {
  stop_->request();
}

EvalResult Session::evaluate() const {
  if (!data_.eval) return {};
  return evaluate_params(model_, params_, *data_.eval, job_.train.eval->samples,
                         job_.train.minibatch, Device::cpu());
}

TrainSummary Session::run(const std::function<void(const StepRecord&)>& on_record) {
  if (ran_) throw std::logic_error("Session::run called twice");
  ran_ = true;
  const schedules::ScheduleParams& sp = plan_.schedule;
  const std::vector<int64_t> evals = eval_steps();
  Progress progress(
      first_step_, steps_, job_.train,
      model_.loss().classifies() && (data_.train ? data_.train->task() == data::Task::classification
                                                 : inputs_.classification),
      evals, on_record, [this] { stop_->request(); });
  std::vector<std::pair<int, int>> layout;
  for (int d = 0; d < sp.total_replicas(); ++d)
    layout.emplace_back(sp.stage_of(d), sp.replica_of(d));
  progress.set_layout(layout);
  progress.start(sp.total_replicas());

  TrainSummary s;
  s.stages.resize(layout.size());
  const actors::DataSource data_source =
      inputs_.data
          ? inputs_.data
          : actors::dataset_source(data_.train, model_, step_samples(job_.train), job_.train.seed);
  const Clock::time_point start = Clock::now();
  int64_t at = first_step_;
  // Checkpoints cut the run into segments, each a pipeline that starts from the weights,
  // optimizer state and older weight versions the previous one ended with: the minibatches an
  // asynchronous schedule had in flight at the cut are replayed at the versions they had, so
  // segments train exactly what one run does.
  for (int segment = 0; at < steps_; ++segment) {
    const int64_t end = segment_end(at);
    std::unique_ptr<EvalSnapshots> snapshots;
    if (const std::vector<int64_t> here = steps_within(evals, at, end); !here.empty()) {
      snapshots = std::make_unique<EvalSnapshots>(
          model_, *data_.eval, job_.train, sp, at, here, progress,
          EvalJob{.group = options_.group, .placement = placement_.get(), .segment = segment});
    }
    actors::PipelineSpec spec = segment_spec(at, end, data_source, progress, snapshots.get());
    PipelineTrace trace;
    const bool tracing = options_.trace && segment == 0;
    if (tracing) trace.attach(spec);
    SegmentResult r =
        run_segment(std::move(spec), {.group = options_.group,
                                      .placement = placement_.get(),
                                      .segment = segment,
                                      .on_running = [this](actors::Pipeline* p) { stop_->set(p); },
                                      .threads = options_.threads,
                                      .shared_threads = options_.shared_threads});
    if (snapshots) snapshots->finish();
    if (tracing) write_job_trace(trace, *options_.trace, options_.group);
    check_diverged(progress);
    add_segment(s, r.pipeline, segment == 0);
    at += r.pipeline.minibatches;
    if (options_.checkpoint_dir) write_checkpoint_at(segment, at, r.states, s);
    keep_state(std::move(r.states));
    if (options_.checkpoint_dir && options_.end_after_checkpoint && at == end && at < steps_ &&
        options_.end_after_checkpoint(segment, at)) {
      s.stopped = true;
      break;
    }
    if (at < end || stop_->was_requested()) {
      s.stopped = true;
      break;
    }
  }
  finish(s, progress, at, start);
  return s;
}

std::vector<int64_t> Session::eval_steps() const {
  std::vector<int64_t> out;
  const TrainSpec& t = job_.train;
  if (!data_.eval || t.eval->every <= 0) return out;
  for (int64_t e = (first_step_ / t.eval->every + 1) * t.eval->every; e < steps_;
       e += t.eval->every) {
    out.push_back(e);
  }
  return out;
}

namespace {

std::string replica_counts(const schedules::ScheduleParams& sp) {
  std::string out;
  for (int st = 0; st < sp.stages; ++st) {
    if (st > 0) out += '-';  // appended apart: GCC 12 misreads the concatenation (-Wrestrict)
    out += std::to_string(sp.replicas_of(st));
  }
  return out;
}

std::string nearest_multiples(int64_t v, int64_t unit) {
  const int64_t below = v / unit * unit;
  const std::string above = std::to_string(below + unit);
  return below > 0 ? std::to_string(below) + " or " + above : above;
}

}  // namespace

void Session::check_stop_boundaries() {
  if (!options_.checkpoint_dir) return;
  const int64_t unit = schedules::stop_boundary(plan_.schedule, 1);
  if (unit <= 1) return;
  const std::string why = std::string(schedules::to_string(plan_.schedule.kind)) +
                          " with replicas " + replica_counts(plan_.schedule) +
                          " stops (and resumes) only after a multiple of " + std::to_string(unit) +
                          " minibatches, one update on every replica";
  const int64_t every = options_.checkpoint_every;
  if (every > 0 && every % unit != 0) {
    if (!options_.round_checkpoint_every) {
      throw JobError(options_.checkpoint_every_option,
                     std::to_string(every) + " steps: " + why + ": checkpoint every " +
                         nearest_multiples(every, unit) + " steps");
    }
    options_.checkpoint_every = schedules::stop_boundary(plan_.schedule, every);
    checkpoint_note_ = "checkpoints every " + std::to_string(options_.checkpoint_every) +
                       " steps, not " + std::to_string(every) + ": " + why;
  }
  if (steps_ % unit != 0 && !options_.round_checkpoint_every) {
    throw JobError(options_.steps_option, "a run of " + std::to_string(steps_) +
                                              " steps ends where its checkpoint " +
                                              "could not be resumed: " + why + ": train " +
                                              nearest_multiples(steps_, unit) + " steps");
  }
}

int64_t Session::segment_end(int64_t at) const {
  if (!options_.checkpoint_dir || options_.checkpoint_every <= 0) return steps_;
  return std::min(steps_, schedules::stop_boundary(plan_.schedule, at + options_.checkpoint_every));
}

actors::PipelineSpec Session::segment_spec(int64_t at, int64_t end, const actors::DataSource& data,
                                           Progress& progress, EvalSnapshots* snapshots) const {
  const TrainSpec& t = job_.train;
  actors::PipelineSpec spec;
  spec.model = &model_;
  spec.plan = plan_;
  spec.plan.schedule.minibatches = end - at;
  spec.optimizer = t.optimizer;
  spec.seed = t.seed;
  if (job_.pipeline) {
    spec.relay_skips = job_.pipeline->relay_skips;
    spec.async_correction = job_.pipeline->async_correction;
  }
  spec.initial_params = params_;
  spec.first_minibatch = at;
  spec.optimizer_states = optimizer_states_;
  spec.older_versions = older_versions_;
  spec.data = data;
  spec.fetch_stop = inputs_.fetch_stop;
  // One update round per minibatch (2BW: per batch), so round k follows step k's rate.
  spec.lr_at = [schedule = t.lr_schedule, lr = t.optimizer.lr, steps = steps_](int64_t round) {
    return scheduled_lr(schedule, lr, round, steps);
  };
  if (inputs_.lr_at) spec.lr_at = inputs_.lr_at;
  spec.clip_grad_norm = t.clip_grad_norm;
  spec.matmul_precision = run_precision(job_);
  spec.wire_dtype = wire_dtype(job_);
  spec.on_minibatch = [&progress, also = inputs_.on_minibatch](int64_t b,
                                                               const actors::MinibatchReport& r) {
    progress.add(b, r);
    if (also) also(b, r);
  };
  spec.observer = [&progress, snapshots](const actors::StageEvent& e) {
    progress.add_busy(e.device, e.end - e.start);
    if (snapshots != nullptr) snapshots->on_event(e);
  };
  return spec;
}

void Session::check_diverged(const Progress& progress) {
  if (const auto b = progress.diverged_at()) {
    throw DivergedError("training diverged at step " + std::to_string(*b + 1) +
                            " (the loss is not finite); the run stopped there; try a smaller "
                            "train.optimizer.lr",
                        *b);
  }
}

void Session::keep_state(std::vector<StageState> states) {
  optimizer_states_.resize(static_cast<size_t>(plan_.schedule.stages));
  older_versions_.resize(static_cast<size_t>(plan_.schedule.stages));
  for (StageState& st : states) {
    const auto i = static_cast<size_t>(st.stage);
    overwrite(params_, st.latest);
    optimizer_states_.at(i) = std::move(st.optimizer);
    older_versions_.at(i) = std::move(st.older);
  }
}

void Session::add_segment(TrainSummary& s, const actors::PipelineResult& result, bool first) const {
  for (double l : result.losses) s.losses.push_back(static_cast<float>(l));
  for (const actors::StageStats& st : result.stages) {
    auto& acc = s.stages.at(static_cast<size_t>(st.device));
    acc = first ? st : merged(acc, st);
  }
  s.pipeline_seconds += result.seconds;
}

void Session::write_checkpoint_at(int segment, int64_t at, const std::vector<StageState>& states,
                                  TrainSummary& s) {
  Checkpoint ck;
  ck.step = at;
  ck.model = model_name();
  ck.model_layers = model_identity(model_);
  ck.plan = plan_;
  ck.optimizer = job_.train.optimizer.kind;
  ck.seed = job_.train.seed;
  ck.data_position = at;
  ck.parent = parent_checkpoint_;
  ck.history = history_;
  std::vector<OwnStageFile> own;
  for (const StageState& st : states) {
    if (!writes_stage(st.stage)) continue;
    StageCheckpoint sc;
    for (const auto& [v, params] : st.older) sc.weights.push_back({0, v, params});
    sc.weights.push_back({0, st.optimizer.steps, st.latest});
    sc.optimizers.push_back({0, st.optimizer.steps, st.optimizer.state});
    // A tied parameter is stored once, in its leader's stage file (train/tied_checkpoint.hpp).
    leave_out_tied_copies(sc, model_, plan_, st.stage, at);
    own.push_back({st.stage, std::move(sc)});
  }
  s.checkpoints.push_back(
      write_job_checkpoint(options_.group, segment, *options_.checkpoint_dir, ck, own,
                           CheckpointWriteOptions{.keep = options_.checkpoint_keep}));
  checkpoints_written_.push_back(s.checkpoints.back());
  if (options_.group == nullptr || options_.group->rank() == 0) {
    parent_checkpoint_ = checkpoint_ref(s.checkpoints.back());
  }
}

bool Session::hosts_stage(int stage) const {
  if (options_.group == nullptr) return true;
  const schedules::ScheduleParams& sp = plan_.schedule;
  for (int r = 0; r < sp.replicas_of(stage); ++r) {
    if (placement_->rank_of(sp.device_of(stage, r)) == options_.group->rank()) return true;
  }
  return false;
}

bool Session::writes_stage(int stage) const {
  return options_.group == nullptr ||
         placement_->rank_of(plan_.schedule.device_of(stage, 0)) == options_.group->rank();
}

std::vector<schedules::LayerRange> Session::layers_of(
    const std::function<bool(int stage)>& stages) const {
  const std::vector<schedules::LayerRange> vlayers =
      schedules::virtual_stage_layers(plan_, model_.num_layers());
  std::vector<schedules::LayerRange> ranges;
  for (int v = 0; v < static_cast<int>(vlayers.size()); ++v) {
    if (stages(v % plan_.schedule.stages)) ranges.push_back(vlayers[static_cast<size_t>(v)]);
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const auto& a, const auto& b) { return a.begin < b.begin; });
  return ranges;
}

std::vector<schedules::LayerRange> Session::hosted_layers() const {
  return layers_of([this](int stage) { return hosts_stage(stage); });
}

models::ParamSet Session::initial_params() const {
  models::ParamSet out;
  // train.init_from's file or the seed; a resume (the constructor's other path) wins over both.
  for (const schedules::LayerRange& r : hosted_layers()) {
    out.merge(job_.train.init_from ? initial_weights(*job_.train.init_from, model_, model_name(), r)
                                   : model_.init_params(job_.train.seed, r.begin, r.end));
  }
  return out;
}

models::ParamSet Session::subset_of(const models::ParamSet& params,
                                    const std::vector<schedules::LayerRange>& ranges) const {
  models::ParamSet out;
  for (const schedules::LayerRange& r : ranges) {
    for (int l = r.begin; l < r.end; ++l) {
      for (const models::ParamSpec& ps : model_.layer(l).param_specs()) {
        const std::string name = model_.param_name(l, ps.name);
        out.add(name, params.at(name));
      }
    }
  }
  return out;
}

models::ParamSet Session::own_weights() const {
  return subset_of(params_, layers_of([this](int stage) { return writes_stage(stage); }));
}

void Session::finish(TrainSummary& s, Progress& progress, int64_t at,
                     std::chrono::steady_clock::time_point start) {
  std::optional<EvalResult> eval;
  if (options_.group == nullptr) {
    if (data_.eval) eval = evaluate();
    s.params_fingerprint = params_.fingerprint();
  } else {
    // Rank 0 holds only its own stages: the others send their tensors' fingerprints, and their
    // weights only when rank 0 evaluates the whole model.
    const bool evaluates = data_.eval != nullptr;
    JobWeights w = finish_job_weights(*options_.group, model_, own_weights(),
                                      evaluates || options_.gather_weights);
    s.params_fingerprint = w.fingerprint;
    if (w.whole && evaluates) {
      eval = evaluate_params(model_, *w.whole, *data_.eval, job_.train.eval->samples,
                             job_.train.minibatch, Device::cpu());
    }
    if (w.whole && options_.gather_weights) whole_params_ = std::move(w.whole);
  }
  progress.finish(eval);
  s.first_step = first_step_;
  s.steps = at;
  s.model = model_name();
  s.train_data = data_.train ? data_.train->describe() : "the application's";
  if (const auto& last = progress.last()) {
    s.final_loss = last->loss;
    s.final_accuracy = last->accuracy;
  }
  s.eval = eval;
  if (const auto* markov = dynamic_cast<const data::MarkovText*>(data_.train.get())) {
    s.entropy_rate = markov->entropy_rate();
    s.optimal_loss = markov->optimal_loss();
  }
  s.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  s.samples_per_s =
      s.pipeline_seconds > 0
          ? static_cast<double>((at - first_step_) * step_samples(job_.train)) / s.pipeline_seconds
          : 0;
}

}  // namespace tandem::train
