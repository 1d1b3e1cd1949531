#include "apps/pipeline_trainer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>
#include <optional>
#include <stdexcept>

#include "actors/dataset_source.hpp"
#include "actors/pipeline.hpp"
#include "models/data/markov_text.hpp"
#include "runtime/scheduler.hpp"
#include "schedules/schedule_error.hpp"
#include "schedules/schedule_kind.hpp"

namespace tandem::apps {
namespace {

namespace data = models::data;
using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::string layer_range(const schedules::LayerRange& r) {
  return r.end - r.begin == 1 ? std::to_string(r.begin) : fmt::format("{}-{}", r.begin, r.end - 1);
}

// Losses arrive as each minibatch's last slice completes, which with replicas or asynchronous
// schedules need not be in minibatch order; windows are cut in order so that a progress line
// covers exactly steps (previous, step].
class Progress {
 public:
  Progress(int64_t steps, const TrainConfig& train, bool classification,
           std::function<void(const StepRecord&)> on_record)
      : steps_(steps),
        train_(train),
        classification_(classification),
        on_record_(std::move(on_record)),
        done_(static_cast<size_t>(steps)) {}

  void start() { start_ = window_start_ = Clock::now(); }

  void add(int64_t b, double loss, int64_t correct, int64_t rows) {
    std::lock_guard lock(mu_);
    if (b < 0 || b >= steps_) return;
    done_[static_cast<size_t>(b)] = Done{loss, correct, rows};
    if (!std::isfinite(loss) && !diverged_at_) diverged_at_ = b;
    while (next_ < steps_ && done_[static_cast<size_t>(next_)]) {
      const Done& d = *done_[static_cast<size_t>(next_)];
      window_loss_ += d.loss;
      window_correct_ += d.correct;
      window_rows_ += d.rows;
      ++window_steps_;
      ++next_;
      // The last record waits for the end of the run, which may bring the held-out results.
      if (next_ % train_.log_every == 0 && next_ < steps_) emit(Clock::now(), std::nullopt);
    }
  }

  // After the run: the last window, with the held-out results if any.
  void finish(std::optional<EvalResult> eval) {
    std::lock_guard lock(mu_);
    if (window_steps_ > 0 || eval) emit(Clock::now(), std::move(eval));
  }

  std::optional<int64_t> diverged_at() const {
    std::lock_guard lock(mu_);
    return diverged_at_;
  }
  const std::optional<StepRecord>& last() const { return last_; }

 private:
  struct Done {
    double loss = 0;
    int64_t correct = 0, rows = 0;
  };

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
    r.eta_s = next_ > 0
                  ? r.elapsed_s / static_cast<double>(next_) * static_cast<double>(steps_ - next_)
                  : 0;
    r.lr = scheduled_lr(train_.lr_schedule, train_.optimizer.lr, std::max<int64_t>(next_ - 1, 0),
                        steps_);
    r.eval = std::move(eval);
    last_ = r;
    if (on_record_) on_record_(r);
    window_start_ = now;
    window_loss_ = 0;
    window_steps_ = window_correct_ = window_rows_ = 0;
  }

  const int64_t steps_;
  const TrainConfig& train_;
  const bool classification_;
  const std::function<void(const StepRecord&)> on_record_;
  mutable std::mutex mu_;
  std::vector<std::optional<Done>> done_;
  int64_t next_ = 0;  // minibatches counted into windows so far
  double window_loss_ = 0;
  int64_t window_steps_ = 0, window_correct_ = 0, window_rows_ = 0;
  Clock::time_point start_, window_start_;
  std::optional<int64_t> diverged_at_;
  std::optional<StepRecord> last_;
};

}  // namespace

bool is_pipeline(const Config& config) {
  return config.pipeline &&
         (config.pipeline->stages.size() > 1 || config.pipeline->stages.front().replicas > 1);
}

PipelineTrainer::PipelineTrainer(Config config, TrainerOptions options)
    : config_(std::move(config)),
      model_(models::Model::build(config_.model)),
      steps_(options.steps.value_or(config_.train.steps)) {
  if (!config_.pipeline) throw std::invalid_argument("PipelineTrainer: the config has no pipeline");
  if (steps_ < 1) throw std::invalid_argument("steps must be >= 1");
  const PipelineConfig& p = *config_.pipeline;
  for (size_t s = 0; s < p.stages.size(); ++s) {
    // Sim stages compute no values, so there would be no loss to learn from.
    if (!p.stages[s].device.has_data()) {
      throw ConfigError(p.stages[s].where, "pipeline.stages[" + std::to_string(s) + "].device",
                        "device " + p.stages[s].device.str() +
                            " holds no data; training needs cpu or cuda (`tandem simulate` "
                            "times a schedule without data)");
    }
  }
  data_ = load_train_data(config_, model_);
  try {
    (void)models::make_optimizer(config_.train.optimizer);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(config_.train_where, "train.optimizer", e.what());
  }
  try {
    plan_ = pipeline_plan(p, config_.train.minibatch, model_.num_layers(), steps_);
  } catch (const schedules::ScheduleError& e) {
    throw ConfigError(p.where, "pipeline", e.what());
  }
  parameters_ =
      model_.init_params(config_.train.seed, 0, model_.num_layers(), Device::sim()).numel();
}

PipelineSummary PipelineTrainer::run(const std::function<void(const StepRecord&)>& on_record) {
  if (ran_) throw std::logic_error("PipelineTrainer::run called twice");
  ran_ = true;
  const TrainConfig& t = config_.train;
  const bool classification = data_.train->task() == data::Task::classification;
  Progress progress(steps_, t, classification, on_record);

  actors::PipelineSpec spec;
  spec.model = &model_;
  spec.plan = plan_;
  spec.optimizer = t.optimizer;
  spec.seed = t.seed;
  spec.data = actors::dataset_source(data_.train, model_, t.minibatch, t.seed);
  // One update round per minibatch (2BW: per batch), so round k follows step k's rate.
  spec.lr_at = [schedule = t.lr_schedule, lr = t.optimizer.lr, steps = steps_](std::int64_t round) {
    return scheduled_lr(schedule, lr, round, steps);
  };
  spec.on_minibatch = [&progress](std::int64_t b, double loss, std::int64_t correct,
                                  std::int64_t rows) { progress.add(b, loss, correct, rows); };
  actors::Pipeline pipeline(std::move(spec), make_work_sharing({}));
  progress.start();
  const actors::PipelineResult result = pipeline.run();
  if (const auto b = progress.diverged_at()) {
    throw std::runtime_error("training diverged at minibatch " + std::to_string(*b + 1) +
                             "; try a smaller train.optimizer.lr");
  }

  PipelineSummary out;
  TrainSummary& s = out.train;
  const models::ParamSet params = pipeline.params();
  std::optional<EvalResult> eval;
  if (data_.eval) {
    eval =
        evaluate_params(model_, params, *data_.eval, t.eval->samples, t.minibatch, Device::cpu());
  }
  progress.finish(eval);
  s.steps = steps_;
  s.model = config_.model.describe();
  s.train_data = data_.train->describe();
  for (double l : result.losses) s.losses.push_back(static_cast<float>(l));
  if (const auto& last = progress.last()) {
    s.final_loss = last->loss;
    s.final_accuracy = last->accuracy;
  }
  s.eval = eval;
  if (const auto* markov = dynamic_cast<const data::MarkovText*>(data_.train.get())) {
    s.entropy_rate = markov->entropy_rate();
    s.optimal_loss = markov->optimal_loss();
  }
  s.seconds = result.seconds;
  s.samples_per_s =
      result.seconds > 0 ? static_cast<double>(steps_ * t.minibatch) / result.seconds : 0;
  s.params_fingerprint = params.fingerprint();
  out.stages = result.stages;
  std::sort(out.stages.begin(), out.stages.end(), [](const auto& a, const auto& b) {
    return std::tie(a.stage, a.replica) < std::tie(b.stage, b.replica);
  });
  out.seconds = result.seconds;
  return out;
}

std::string format_plan_line(const schedules::Plan& plan) {
  const auto& p = plan.schedule;
  std::string layers, replicas;
  for (const auto& st : plan.stages) {
    if (!layers.empty()) layers += " | ";
    layers += layer_range(st.layers);
    if (!replicas.empty()) replicas += "-";
    replicas += std::to_string(st.replicas.size());
  }
  std::string line = fmt::format("pipeline: schedule {}, {} stages: layers {}, replicas {}",
                                 schedules::to_string(p.kind), p.stages, layers, replicas);
  if (p.chunks > 1) {
    line += fmt::format(" ({} chunks per stage: the model split evenly into {} virtual stages)",
                        p.chunks, p.stages * p.chunks);
  }
  if (p.kind == schedules::ScheduleKind::umpipe && !p.forward_slices.empty()) {
    line += fmt::format(", umpipe slices per stage, minibatch {}", p.samples());
  } else {
    line += fmt::format(", {} slice{} of minibatch {}", p.slices, p.slices == 1 ? "" : "s",
                        p.samples());
  }
  if (p.rematerialize) line += ", rematerialized";
  return line;
}

std::string format_stage_table(const PipelineSummary& summary) {
  std::string out =
      fmt::format("{:>5} {:>7}  {:<6} {:>7} {:>7} {:>5}  {:>8} {:>11}\n", "stage", "replica",
                  "device", "busy s", "idle s", "busy", "versions", "activations");
  for (const actors::StageStats& st : summary.stages) {
    const double idle = std::max(0.0, summary.seconds - st.busy_s);
    const double share = summary.seconds > 0 ? st.busy_s / summary.seconds : 0;
    out += fmt::format("{:>5} {:>7}  {:<6} {:>7.2f} {:>7.2f} {:>4.0f}%  {:>8} {:>11}\n", st.stage,
                       st.replica, st.device_name, st.busy_s, idle, 100 * share, st.peak_versions,
                       st.peak_activations);
  }
  return out;
}

}  // namespace tandem::apps
