#include "train/session.hpp"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <numbers>
#include <stdexcept>
#include <tuple>

#include "actors/dataset_source.hpp"
#include "actors/pipeline.hpp"
#include "models/data/markov_text.hpp"
#include "models/train_step.hpp"
#include "runtime/resident_memory.hpp"
#include "runtime/scheduler.hpp"
#include "schedules/pipeline_rules.hpp"
#include "schedules/schedule_error.hpp"
#include "schedules/schedule_kind.hpp"
#include "schedules/weight_versions.hpp"
#include "train/checkpoint.hpp"
#include "train/job_error.hpp"
#include "train/job_plan.hpp"
#include "train/job_trace.hpp"
#include "train/pipeline_trace.hpp"
#include "train/process_group.hpp"
#include "train/process_placement.hpp"
#include "train/stage_state.hpp"
#include "transport/control_frame.hpp"

namespace tandem::train {
namespace {

namespace data = models::data;
using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// The minibatches rank 0 says the segment ran: a decimal count within the segment's length.
int64_t ran_minibatches(const std::vector<std::byte>& bytes, int64_t segment_length) {
  const std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  int64_t n = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size() || n < 0 || n > segment_length) {
    throw std::runtime_error("rank 0 sent a malformed count of the segment's minibatches '" +
                             transport::printable(text) + "' (expected 0 to " +
                             std::to_string(segment_length) + ")");
  }
  return n;
}

int64_t model_outputs(const models::ModelSpec& s) {
  if (s.name == "mlp") return s.widths.back();
  if (s.name == "gpt") return s.vocab;
  return s.classes;
}

// The batch in the model's layout (an MLP takes images flattened) on the run's device.
Tensor prepare(const Tensor& t, const Shape& shape, Device device) {
  Tensor out = t.shape() == shape ? t : t.reshape(shape);
  return device == out.device() ? out : out.to(device);
}

// Losses arrive as each minibatch's last slice completes, which with replicas or asynchronous
// schedules need not be in minibatch order; windows are cut in step order so that a record
// covers exactly steps (previous, step], and a record that carries an evaluation waits for it.
class Progress {
 public:
  Progress(int64_t first, int64_t steps, const TrainSpec& train, bool classification,
           std::vector<int64_t> eval_steps, std::function<void(const StepRecord&)> on_record,
           std::function<void()> on_diverged)
      : steps_(steps),
        train_(train),
        classification_(classification),
        eval_steps_(std::move(eval_steps)),
        on_record_(std::move(on_record)),
        on_diverged_(std::move(on_diverged)),
        done_(static_cast<size_t>(steps)),
        next_(first),
        first_(first) {}

  void start(int devices) {
    std::lock_guard lock(mu_);
    start_ = window_start_ = Clock::now();
    busy_ns_ = std::vector<std::atomic<int64_t>>(static_cast<size_t>(devices));
    window_busy_.assign(static_cast<size_t>(devices), 0);
  }
  void set_layout(std::vector<std::pair<int, int>> stage_replica) {
    layout_ = std::move(stage_replica);
  }

  // On the stages' threads: an action's time on its device.
  void add_busy(int device, Clock::duration d) {
    busy_ns_[static_cast<size_t>(device)].fetch_add(
        std::chrono::duration_cast<std::chrono::nanoseconds>(d).count(), std::memory_order_relaxed);
  }

  void add(int64_t b, double loss, int64_t correct, int64_t rows) {
    bool diverged = false;
    {
      std::lock_guard lock(mu_);
      if (b < 0 || b >= steps_) return;
      done_[static_cast<size_t>(b)] = Done{loss, correct, rows};
      if (!std::isfinite(loss) && !diverged_at_) {
        diverged_at_ = b;
        diverged = true;
      }
      pump();
    }
    if (diverged && on_diverged_) on_diverged_();
  }

  void add_eval(int64_t step, EvalResult r) {
    std::lock_guard lock(mu_);
    evals_[step] = r;
    pump();
  }

  // After the run: the last window, with the held-out results if any.
  void finish(std::optional<EvalResult> eval) {
    std::lock_guard lock(mu_);
    pump();
    if (pending_eval_) {  // stopped before the evaluation's weights were published
      pending_eval_ = false;
      emit(Clock::now(), std::nullopt);
    }
    if (window_steps_ > 0 || eval) emit(trained_at_.value_or(Clock::now()), std::move(eval));
  }

  std::optional<int64_t> diverged_at() const {
    std::lock_guard lock(mu_);
    return diverged_at_;
  }
  const std::optional<StepRecord>& last() const { return last_; }
  int64_t counted() const {
    std::lock_guard lock(mu_);
    return next_;
  }

 private:
  struct Done {
    double loss = 0;
    int64_t correct = 0, rows = 0;
  };

  bool is_eval_step(int64_t step) const {
    return std::binary_search(eval_steps_.begin(), eval_steps_.end(), step);
  }

  void pump() {
    if (pending_eval_) {
      auto it = evals_.find(next_);
      if (it == evals_.end()) return;
      pending_eval_ = false;
      emit(Clock::now(), it->second);
    }
    while (next_ < steps_ && done_[static_cast<size_t>(next_)]) {
      const Done& d = *done_[static_cast<size_t>(next_)];
      window_loss_ += d.loss;
      window_correct_ += d.correct;
      window_rows_ += d.rows;
      ++window_steps_;
      const int64_t step = ++next_;
      // The last record waits for the end of the run, which may bring the held-out results.
      // Its window ends here, though: what follows (draining, the weights and optimizer state
      // copied back from the devices, 1.3 GB for a 110M-parameter model on a GPU) is not
      // training, and counted in it made the last samples/s read a third of the others.
      if (step == steps_) {
        trained_at_ = Clock::now();
        break;
      }
      if (is_eval_step(step)) {
        auto it = evals_.find(step);
        if (it == evals_.end()) {
          pending_eval_ = true;  // the record waits for its evaluation
          return;
        }
        emit(Clock::now(), it->second);
      } else if (step % train_.log_every == 0) {
        emit(Clock::now(), std::nullopt);
      }
    }
  }

  void emit(Clock::time_point now, std::optional<EvalResult> eval) {
    StepRecord r;
    r.step = next_;
    r.steps = steps_;
    r.loss = window_steps_ > 0 ? window_loss_ / static_cast<double>(window_steps_) : 0;
    if (classification_ && window_rows_ > 0) {
      r.accuracy = static_cast<double>(window_correct_) / static_cast<double>(window_rows_);
    }
    const double window_s = seconds_between(window_start_, now);
    r.samples_per_s =
        window_s > 0 ? static_cast<double>(window_steps_ * train_.minibatch) / window_s : 0;
    r.elapsed_s = seconds_between(start_, now);
    const int64_t done_here = next_ - first_;
    r.eta_s = done_here > 0 ? r.elapsed_s / static_cast<double>(done_here) *
                                  static_cast<double>(steps_ - next_)
                            : 0;
    r.lr = scheduled_lr(train_.lr_schedule, train_.optimizer.lr, std::max<int64_t>(next_ - 1, 0),
                        steps_);
    r.eval = std::move(eval);
    if (const auto rss = resident_bytes()) r.resident_mib = static_cast<double>(*rss) / (1 << 20);
    r.window_s = window_s;
    for (size_t d = 0; d < busy_ns_.size() && d < layout_.size(); ++d) {
      const int64_t total = busy_ns_[d].load(std::memory_order_relaxed);
      r.stages.push_back({layout_[d].first, layout_[d].second,
                          static_cast<double>(total - window_busy_[d]) * 1e-9});
      window_busy_[d] = total;
    }
    last_ = r;
    if (on_record_) on_record_(r);
    window_start_ = now;
    window_loss_ = 0;
    window_steps_ = window_correct_ = window_rows_ = 0;
  }

  const int64_t steps_;
  const TrainSpec& train_;
  const bool classification_;
  const std::vector<int64_t> eval_steps_;  // sorted
  const std::function<void(const StepRecord&)> on_record_;
  const std::function<void()> on_diverged_;
  mutable std::mutex mu_;
  std::vector<std::optional<Done>> done_;
  std::map<int64_t, EvalResult> evals_;
  int64_t next_;  // steps counted into windows so far
  const int64_t first_;
  bool pending_eval_ = false;  // the window ending at next_ waits for its evaluation
  double window_loss_ = 0;
  int64_t window_steps_ = 0, window_correct_ = 0, window_rows_ = 0;
  Clock::time_point start_, window_start_;
  std::optional<Clock::time_point> trained_at_;  // when the last step's loss was counted
  std::vector<std::atomic<int64_t>> busy_ns_;
  std::vector<int64_t> window_busy_;
  std::vector<std::pair<int, int>> layout_;  // stage and replica of each device
  std::optional<int64_t> diverged_at_;
  std::optional<StepRecord> last_;
};

// Held-out evaluation in the middle of a run, without stopping it: every stage's replica 0
// hands over the weights it published at the update round that completes step E (a copy of
// tensor handles: updates are copy-on-write, so the copy never changes), and the stage that
// completes the set evaluates the whole model on its own thread.
class EvalSnapshots {
 public:
  EvalSnapshots(const models::Model& model, const data::Dataset& eval, const TrainSpec& train,
                const schedules::ScheduleParams& params, int64_t first, std::vector<int64_t> steps,
                Progress& progress)
      : model_(model),
        eval_(eval),
        train_(train),
        params_(params),
        first_(first),
        steps_(std::move(steps)),
        progress_(progress) {}

  void on_event(const actors::StageEvent& e) {
    if (e.action.op != schedules::Op::STEP || e.replica != 0 || e.weights == nullptr) return;
    for (int64_t step : steps_) {
      if (step <= first_) continue;
      const int64_t round = schedules::update_rounds(params_, e.stage, step - first_) - 1;
      if (round != e.action.minibatch) continue;
      std::optional<models::ParamSet> whole;
      {
        std::lock_guard lock(mu_);
        auto& parts = parts_[step];
        parts.emplace(e.stage, *e.weights);
        if (static_cast<int>(parts.size()) < params_.stages) return;
        whole.emplace();
        for (auto& [s, w] : parts) whole->merge(w);
        parts_.erase(step);
      }
      progress_.add_eval(step, evaluate_params(model_, *whole, eval_, train_.eval->samples,
                                               train_.minibatch, Device::cpu()));
    }
  }

 private:
  const models::Model& model_;
  const data::Dataset& eval_;
  const TrainSpec& train_;
  const schedules::ScheduleParams params_;
  const int64_t first_;
  const std::vector<int64_t> steps_;
  Progress& progress_;
  std::mutex mu_;
  std::map<int64_t, std::map<int, models::ParamSet>> parts_;
};

actors::StageStats merged(const actors::StageStats& a, const actors::StageStats& b) {
  actors::StageStats out = a;
  out.actions += b.actions;
  out.busy_s += b.busy_s;
  out.peak_versions = std::max(a.peak_versions, b.peak_versions);
  out.peak_activations = std::max(a.peak_activations, b.peak_activations);
  out.peak_received = std::max(a.peak_received, b.peak_received);
  out.peak_bytes = std::max(a.peak_bytes, b.peak_bytes);
  out.finished = a.finished && b.finished;
  return out;
}

}  // namespace

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

double scheduled_lr(const LrSchedule& schedule, double lr, int64_t step, int64_t steps) {
  if (step < schedule.warmup_steps) {
    return lr * static_cast<double>(step + 1) / static_cast<double>(schedule.warmup_steps);
  }
  if (schedule.kind == "constant") return lr;
  // Progress reaches 1 one step after the last, so the last step still learns.
  const int64_t span = steps - schedule.warmup_steps;
  if (span <= 0) return lr;
  const double progress =
      static_cast<double>(step - schedule.warmup_steps) / static_cast<double>(span);
  const double final_lr = schedule.final_fraction * lr;
  if (schedule.kind == "linear") return lr + (final_lr - lr) * progress;
  return final_lr + (lr - final_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

TrainData load_train_data(const JobSpec& job, const models::Model& model) {
  const TrainSpec& t = job.train;
  data::Datasets sets;
  try {
    sets = data::make_datasets(job.data, t.eval ? t.eval->samples : 0);
  } catch (const std::invalid_argument& e) {
    throw JobError("data", e.what());
  }
  const auto& train = sets.train;
  if (t.eval && !sets.eval) {
    throw JobError("train.eval", "data '" + data::data_kind_name(job.data) +
                                     "' names no eval files to evaluate on");
  }

  // The data must fit the model: same per-sample size and dtype, no class beyond its outputs.
  const Shape model_sample = model.input_shape(1);
  const int64_t model_numel = shape_numel(model_sample);
  if (shape_numel(train->input_shape()) != model_numel ||
      train->input_dtype() != model.input_dtype()) {
    throw JobError("data", train->describe() + " gives samples " + shape_str(train->input_shape()) +
                               " " + std::string(dtype_name(train->input_dtype())) +
                               ", the model takes " + shape_str(model_sample) + " " +
                               std::string(dtype_name(model.input_dtype())));
  }
  if (train->classes() > model_outputs(job.model)) {
    throw JobError("data", train->describe() + " has " + std::to_string(train->classes()) +
                               " classes, the model only " +
                               std::to_string(model_outputs(job.model)) + " outputs");
  }
  if (train->size() < t.minibatch) {
    throw JobError("data", train->describe() + " holds fewer samples than one minibatch of " +
                               std::to_string(t.minibatch));
  }

  return TrainData{sets.train, t.eval ? sets.eval : nullptr};
}

EvalResult evaluate_params(const models::Model& model, const models::ParamSet& params,
                           const data::Dataset& eval, int64_t samples, int64_t minibatch,
                           Device device) {
  EvalResult r;
  const int64_t n = std::min(samples, eval.size());
  double loss_sum = 0;
  int64_t correct = 0;
  std::vector<int64_t> idx;
  for (int64_t first = 0; first < n; first += minibatch) {
    const int64_t b = std::min(minibatch, n - first);
    idx.resize(static_cast<size_t>(b));
    for (int64_t i = 0; i < b; ++i) idx[static_cast<size_t>(i)] = first + i;
    const data::Batch batch = eval.get(idx);
    const models::EvalOutput out =
        models::evaluate(model, params, prepare(batch.inputs, model.input_shape(b), device),
                         prepare(batch.targets, model.target_shape(b), device));
    loss_sum += static_cast<double>(out.loss) * static_cast<double>(out.count);
    correct += out.correct;
    r.predictions += out.count;
  }
  r.samples = n;
  if (r.predictions > 0) {
    r.loss = loss_sum / static_cast<double>(r.predictions);
    r.accuracy = static_cast<double>(correct) / static_cast<double>(r.predictions);
  }
  return r;
}

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

Session::Session(JobSpec job, SessionOptions options)
    : job_(std::move(job)),
      options_(std::move(options)),
      model_(models::Model::build(job_.model)),
      steps_(options_.steps.value_or(job_.train.steps)),
      stop_(std::make_unique<Stop>()) {
  if (steps_ < 1) throw std::invalid_argument("steps must be >= 1");
  if (options_.checkpoint_every < 0) throw std::invalid_argument("checkpoint_every must be >= 0");
  plan_ = training_plan(job_, model_.num_layers(), steps_);
  if (options_.group != nullptr) {
    placement_ = std::make_unique<ProcessPlacement>(job_, plan_, options_.group->world_size());
  }
  data_ = load_train_data(job_, model_);
  try {
    (void)models::make_optimizer(job_.train.optimizer);
  } catch (const std::invalid_argument& e) {
    throw JobError("train.optimizer", e.what());
  }
  if (!options_.resume) {
    params_ = model_.init_params(job_.train.seed);
    return;
  }
  CheckpointExpectations expect;
  expect.model = job_.model.describe();
  expect.plan = plan_;
  expect.optimizer = job_.train.optimizer.kind;
  const Checkpoint ck = read_checkpoint(*options_.resume, expect);
  if (ck.seed != job_.train.seed) {
    throw CheckpointError(options_.resume->string() + ": written by a run with train.seed " +
                          std::to_string(ck.seed) + ", this config has " +
                          std::to_string(job_.train.seed));
  }
  if (ck.step >= steps_) {
    throw CheckpointError(options_.resume->string() + ": the checkpoint is at step " +
                          std::to_string(ck.step) + " of a run of " + std::to_string(steps_) +
                          " steps: nothing left to train (give more with --steps)");
  }
  if (schedules::stop_boundary(plan_.schedule, ck.step) != ck.step) {
    throw CheckpointError(options_.resume->string() + ": step " + std::to_string(ck.step) +
                          " is not a stop boundary of this schedule");
  }
  first_step_ = ck.step;
  parent_checkpoint_ = ck.origin;
  // Every tensor is checked against the model before it is used: the optimizers' updates run
  // over each parameter's element count, whatever the state's tensors hold.
  const auto optimizer = models::make_optimizer(job_.train.optimizer);
  for (size_t s = 0; s < ck.stages.size(); ++s) {
    const schedules::LayerRange& layers = plan_.stages[s].layers;
    check_stage_tensors(ck.stages[s],
                        model_.init_params(0, layers.begin, layers.end, Device::sim()), *optimizer);
  }
  for (const StageCheckpoint& st : ck.stages) {
    // Replicas agree at a checkpoint (every round complete): replica 0's newest version.
    const CheckpointWeights* newest = nullptr;
    for (const CheckpointWeights& w : st.weights) {
      if (w.replica == 0 && (newest == nullptr || w.version > newest->version)) newest = &w;
    }
    if (newest == nullptr) {
      throw CheckpointError(options_.resume->string() + ": a stage holds no weights of replica 0");
    }
    params_.merge(newest->params);
    std::map<int64_t, models::ParamSet> older;
    for (const CheckpointWeights& w : st.weights) {
      if (w.replica == 0 && w.version < newest->version) older.emplace(w.version, w.params);
    }
    older_versions_.push_back(std::move(older));
    actors::OptimizerState os;
    for (const CheckpointOptimizer& o : st.optimizers) {
      if (o.replica == 0) os = {o.state, o.steps};
    }
    optimizer_states_.push_back(std::move(os));
  }
  // Asynchronous schedules replay the minibatches in flight at the checkpoint at the versions
  // they had: the checkpoint must hold those.
  for (int st = 0; st < plan_.schedule.stages; ++st) {
    const auto& older = older_versions_[static_cast<size_t>(st)];
    const int64_t latest = schedules::update_rounds(plan_.schedule, st, ck.step);
    for (int64_t v = schedules::weight_version(plan_.schedule, st, ck.step); v < latest; ++v) {
      if (older.count(v) == 0) {
        throw CheckpointError(
            options_.resume->string() + ": stage " + std::to_string(st) +
            " holds no weight version " + std::to_string(v) +
            ", which the minibatches in flight at step " + std::to_string(ck.step) +
            " use (a checkpoint of this schedule " + "keeps versions " +
            std::to_string(schedules::weight_version(plan_.schedule, st, ck.step)) + " to " +
            std::to_string(latest) + ")");
      }
    }
  }
  // The checkpoint must hold every weight of the model.
  const models::ParamSet expected = model_.init_params(0, 0, model_.num_layers(), Device::sim());
  for (int64_t i = 0; i < expected.size(); ++i) {
    if (!params_.contains(expected.name(i)) ||
        params_.at(expected.name(i)).shape() != expected[i].shape()) {
      throw CheckpointError(options_.resume->string() + ": weight '" + expected.name(i) +
                            "' is missing or of another shape");
    }
  }
}

Session::~Session() = default;

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
  const TrainSpec& t = job_.train;
  const schedules::ScheduleParams& sp = plan_.schedule;
  const bool classification = data_.train->task() == data::Task::classification;

  ProcessGroup* const group = options_.group;
  const bool reporter = group == nullptr || group->rank() == 0;
  std::vector<int64_t> eval_steps;
  if (data_.eval && t.eval->every > 0 && group == nullptr) {
    for (int64_t e = (first_step_ / t.eval->every + 1) * t.eval->every; e < steps_;
         e += t.eval->every) {
      eval_steps.push_back(e);
    }
  }
  Progress progress(first_step_, steps_, t, classification, eval_steps, on_record,
                    [this] { stop_->request(); });
  std::vector<std::pair<int, int>> layout;
  for (int d = 0; d < sp.total_replicas(); ++d)
    layout.emplace_back(sp.stage_of(d), sp.replica_of(d));
  progress.set_layout(layout);
  progress.start(sp.total_replicas());

  TrainSummary s;
  s.first_step = first_step_;
  s.model = job_.model.describe();
  s.train_data = data_.train->describe();
  s.stages.resize(layout.size());
  const auto data_source = actors::dataset_source(data_.train, model_, t.minibatch, t.seed);
  const Clock::time_point start = Clock::now();
  int64_t at = first_step_;
  bool first_segment = true;
  int segment = 0;
  while (at < steps_) {
    // Checkpoints cut the run into segments, each a pipeline that starts from the weights,
    // optimizer state and older weight versions the previous one ended with: the minibatches
    // an asynchronous schedule had in flight at the cut are replayed at the versions they had,
    // so segments train exactly what one run does.
    const int64_t begin = at;
    int64_t end = steps_;
    if (options_.checkpoint_dir && options_.checkpoint_every > 0) {
      end = std::min(steps_, schedules::stop_boundary(sp, at + options_.checkpoint_every));
    }
    actors::PipelineSpec spec;
    spec.model = &model_;
    spec.plan = plan_;
    spec.plan.schedule.minibatches = end - at;
    spec.optimizer = t.optimizer;
    spec.seed = t.seed;
    if (job_.pipeline) spec.matmul_precision = job_.pipeline->precision;
    spec.initial_params = params_;
    spec.first_minibatch = at;
    spec.optimizer_states = optimizer_states_;
    spec.older_versions = older_versions_;
    spec.data = data_source;
    // One update round per minibatch (2BW: per batch), so round k follows step k's rate.
    spec.lr_at = [schedule = t.lr_schedule, lr = t.optimizer.lr, steps = steps_](int64_t round) {
      return scheduled_lr(schedule, lr, round, steps);
    };
    spec.on_minibatch = [&progress](int64_t b, double loss, int64_t correct, int64_t rows) {
      progress.add(b, loss, correct, rows);
    };
    std::unique_ptr<EvalSnapshots> snapshots;
    if (!eval_steps.empty()) {
      snapshots =
          std::make_unique<EvalSnapshots>(model_, *data_.eval, t, sp, at, eval_steps, progress);
    }
    spec.observer = [&progress, snap = snapshots.get()](const actors::StageEvent& e) {
      progress.add_busy(e.device, e.end - e.start);
      if (snap != nullptr) snap->on_event(e);
    };
    PipelineTrace trace;
    const bool tracing = options_.trace && first_segment;
    if (tracing) trace.attach(spec);
    if (group != nullptr) group->prepare(spec, *placement_, segment);
    actors::Pipeline pipeline(std::move(spec), make_work_sharing({}));
    stop_->set(&pipeline);
    actors::PipelineResult result;
    try {
      if (group != nullptr) group->connect(pipeline, segment);
      result = pipeline.run();
    } catch (...) {
      stop_->set(nullptr);
      if (group != nullptr) group->release();
      throw;
    }
    stop_->set(nullptr);
    if (group != nullptr) {
      group->release();
      // Where the loader runs the segment's end is known (a stop may cut it short): the
      // others learn it, so every rank's next segment starts at the same step.
      // One key per reader: a value taken is gone from rank 0's store.
      const std::string key = "segment/" + std::to_string(segment) + "/ran/";
      if (group->rank() == 0) {
        const std::string n = std::to_string(result.minibatches);
        for (int k = 1; k < group->world_size(); ++k) {
          group->put(key + std::to_string(k), std::as_bytes(std::span(n.data(), n.size())));
        }
      } else {
        result.minibatches =
            ran_minibatches(group->take(key + std::to_string(group->rank())), end - begin);
      }
    }
    if (tracing) write_job_trace(trace, *options_.trace, group);
    if (const auto b = progress.diverged_at()) {
      throw std::runtime_error("training diverged at step " + std::to_string(*b + 1) +
                               " (the loss is not finite); the run stopped there; try a smaller "
                               "train.optimizer.lr");
    }
    for (double l : result.losses) s.losses.push_back(static_cast<float>(l));
    for (const actors::StageStats& st : result.stages) {
      auto& acc = s.stages[static_cast<size_t>(st.device)];
      acc = first_segment ? st : merged(acc, st);
    }
    s.pipeline_seconds += result.seconds;
    // Each stage's state, from this process's replica (with a group: the stages whose replica
    // 0 runs here; rank 0 receives the others').
    std::vector<models::ParamSet> latest(static_cast<size_t>(sp.stages));
    optimizer_states_.resize(static_cast<size_t>(sp.stages));
    older_versions_.resize(static_cast<size_t>(sp.stages));
    StageStateBundle mine;
    for (int st = 0; st < sp.stages; ++st) {
      const bool owner =
          group == nullptr || placement_->rank_of(sp.device_of(st, 0)) == group->rank();
      if (!owner) continue;
      const int r = pipeline.hosted_replica(st, 0);
      latest[static_cast<size_t>(st)] = pipeline.stage(st, r).latest_params();
      optimizer_states_[static_cast<size_t>(st)] = pipeline.optimizer_state(st);
      older_versions_[static_cast<size_t>(st)] = pipeline.older_versions(st);
      overwrite(params_, latest[static_cast<size_t>(st)]);
      if (group != nullptr && group->rank() > 0) {
        mine.stages.push_back({st, latest[static_cast<size_t>(st)],
                               optimizer_states_[static_cast<size_t>(st)],
                               older_versions_[static_cast<size_t>(st)]});
      }
    }
    if (group != nullptr) {
      const std::string key = "segment/" + std::to_string(segment) + "/state/";
      if (group->rank() > 0) {
        mine.stats = result.stages;
        group->put(key + std::to_string(group->rank()), encode_stage_states(mine));
      } else {
        for (int k = 1; k < group->world_size(); ++k) {
          StageStateBundle theirs = decode_stage_states(group->take(key + std::to_string(k)));
          for (StageState& st : theirs.stages) {
            const auto i = static_cast<size_t>(st.stage);
            overwrite(params_, st.latest);
            latest.at(i) = std::move(st.latest);
            optimizer_states_.at(i) = std::move(st.optimizer);
            older_versions_.at(i) = std::move(st.older);
          }
          for (const actors::StageStats& st : theirs.stats) {
            auto& acc = s.stages.at(static_cast<size_t>(st.device));
            acc = first_segment ? st : merged(acc, st);
          }
        }
      }
      // Nobody closes its data plane while another may still read from it.
      group->end_segment(segment);
    }
    at = begin + result.minibatches;
    first_segment = false;
    ++segment;
    const bool stopped = at < end;
    if (options_.checkpoint_dir && reporter) {
      Checkpoint ck;
      ck.step = at;
      ck.model = job_.model.describe();
      ck.plan = plan_;
      ck.optimizer = t.optimizer.kind;
      ck.seed = t.seed;
      ck.data_position = at;
      for (int st = 0; st < sp.stages; ++st) {
        StageCheckpoint sc;
        const auto& opt = optimizer_states_[static_cast<size_t>(st)];
        for (const auto& [v, params] : older_versions_[static_cast<size_t>(st)]) {
          sc.weights.push_back({0, v, params});
        }
        sc.weights.push_back({0, opt.steps, latest[static_cast<size_t>(st)]});
        sc.optimizers.push_back({0, opt.steps, opt.state});
        ck.stages.push_back(std::move(sc));
      }
      ck.parent = parent_checkpoint_;
      s.checkpoints.push_back(write_checkpoint(
          *options_.checkpoint_dir, ck, CheckpointWriteOptions{.keep = options_.checkpoint_keep}));
      parent_checkpoint_ = checkpoint_ref(s.checkpoints.back());
    }
    if (stopped || stop_->was_requested()) {
      s.stopped = true;
      break;
    }
  }

  std::optional<EvalResult> eval;
  if (data_.eval && reporter) eval = evaluate();
  progress.finish(eval);
  s.steps = at;
  if (const auto& last = progress.last()) {
    s.final_loss = last->loss;
    s.final_accuracy = last->accuracy;
  }
  s.eval = eval;
  if (const auto* markov = dynamic_cast<const data::MarkovText*>(data_.train.get())) {
    s.entropy_rate = markov->entropy_rate();
    s.optimal_loss = markov->optimal_loss();
  }
  s.seconds = seconds_between(start, Clock::now());
  s.samples_per_s = s.pipeline_seconds > 0
                        ? static_cast<double>((at - first_step_) * t.minibatch) / s.pipeline_seconds
                        : 0;
  s.params_fingerprint = params_.fingerprint();
  return s;
}

}  // namespace tandem::train
