#include "train/progress.hpp"

#include <algorithm>
#include <cmath>

#include "runtime/resident_memory.hpp"
#include "train/lr_schedule.hpp"

namespace tandem::train {
namespace {

double seconds_between(Progress::Clock::time_point a, Progress::Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

Progress::Progress(int64_t first, int64_t steps, const TrainSpec& train, bool classification,
                   std::vector<int64_t> eval_steps,
                   std::function<void(const StepRecord&)> on_record,
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

void Progress::start(int devices) {
  std::lock_guard lock(mu_);
  start_ = window_start_ = Clock::now();
  busy_ns_ = std::vector<std::atomic<int64_t>>(static_cast<size_t>(devices));
  window_busy_.assign(static_cast<size_t>(devices), 0);
}

void Progress::set_layout(std::vector<std::pair<int, int>> stage_replica) {
  layout_ = std::move(stage_replica);
}

void Progress::add_busy(int device, Clock::duration d) {
  busy_ns_[static_cast<size_t>(device)].fetch_add(
      std::chrono::duration_cast<std::chrono::nanoseconds>(d).count(), std::memory_order_relaxed);
}

void Progress::add(int64_t b, const actors::MinibatchReport& r) {
  bool diverged = false;
  {
    std::lock_guard lock(mu_);
    if (b < 0 || b >= steps_) return;
    done_[static_cast<size_t>(b)] = Done{r.loss, r.correct, r.rows, r.grad_norm};
    if (!std::isfinite(r.loss) && !diverged_at_) {
      diverged_at_ = b;
      diverged = true;
    }
    pump();
  }
  if (diverged && on_diverged_) on_diverged_();
}

void Progress::add_eval(int64_t step, EvalResult r) {
  std::lock_guard lock(mu_);
  evals_[step] = r;
  pump();
}

void Progress::finish(std::optional<EvalResult> eval) {
  std::lock_guard lock(mu_);
  pump();
  if (pending_eval_) {  // stopped before the evaluation's weights were published
    pending_eval_ = false;
    emit(Clock::now(), std::nullopt);
  }
  if (window_steps_ > 0 || eval) emit(trained_at_.value_or(Clock::now()), std::move(eval));
}

std::optional<int64_t> Progress::diverged_at() const {
  std::lock_guard lock(mu_);
  return diverged_at_;
}

int64_t Progress::counted() const {
  std::lock_guard lock(mu_);
  return next_;
}

bool Progress::is_eval_step(int64_t step) const {
  return std::binary_search(eval_steps_.begin(), eval_steps_.end(), step);
}

void Progress::pump() {
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
    last_norm_ = d.grad_norm;
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

void Progress::emit(Clock::time_point now, std::optional<EvalResult> eval) {
  StepRecord r;
  r.step = next_;
  r.steps = steps_;
  r.loss = window_steps_ > 0 ? window_loss_ / static_cast<double>(window_steps_) : 0;
  if (classification_ && window_rows_ > 0) {
    r.accuracy = static_cast<double>(window_correct_) / static_cast<double>(window_rows_);
  }
  const double window_s = seconds_between(window_start_, now);
  r.samples_per_s =
      window_s > 0 ? static_cast<double>(window_steps_ * step_samples(train_)) / window_s : 0;
  r.elapsed_s = seconds_between(start_, now);
  const int64_t done_here = next_ - first_;
  r.eta_s = done_here > 0
                ? r.elapsed_s / static_cast<double>(done_here) * static_cast<double>(steps_ - next_)
                : 0;
  r.lr = scheduled_lr(train_.lr_schedule, train_.optimizer.lr, std::max<int64_t>(next_ - 1, 0),
                      steps_);
  r.eval = std::move(eval);
  if (!std::isnan(last_norm_)) r.grad_norm = last_norm_;
  if (const auto rss = resident_bytes()) r.resident_mib = static_cast<double>(*rss) / (1 << 20);
  r.window_s = window_s;
  for (size_t d = 0; d < busy_ns_.size() && d < layout_.size(); ++d) {
    const int64_t total = busy_ns_[d].load(std::memory_order_relaxed);
    r.stages.push_back(
        {layout_[d].first, layout_[d].second, static_cast<double>(total - window_busy_[d]) * 1e-9});
    window_busy_[d] = total;
  }
  last_ = r;
  if (on_record_) on_record_(r);
  window_start_ = now;
  window_loss_ = 0;
  window_steps_ = window_correct_ = window_rows_ = 0;
}

}  // namespace tandem::train
