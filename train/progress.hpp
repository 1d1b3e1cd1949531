#pragma once
// A Session's progress records: losses arrive as each minibatch's last slice completes, which
// with replicas or asynchronous schedules need not be in minibatch order; windows are cut in
// step order so that a record covers exactly steps (previous, step], and a record that carries
// an evaluation waits for it.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "actors/pipeline.hpp"
#include "train/evaluation.hpp"
#include "train/job_spec.hpp"
#include "train/step_record.hpp"

namespace tandem::train {

class Progress {
 public:
  using Clock = std::chrono::steady_clock;

  // Steps first to steps - 1 of a run; a record every train.log_every steps and at each of
  // `eval_steps` (sorted). on_diverged runs once, on the thread that counted the first loss
  // that is not finite.
  Progress(int64_t first, int64_t steps, const TrainSpec& train, bool classification,
           std::vector<int64_t> eval_steps, std::function<void(const StepRecord&)> on_record,
           std::function<void()> on_diverged);

  // Records carry the busy time of each device, named by its stage and replica.
  void start(int devices);
  void set_layout(std::vector<std::pair<int, int>> stage_replica);

  // On the stages' threads: an action's time on its device.
  void add_busy(int device, Clock::duration d);
  // Minibatch b's loss, for classification its correct predictions among its rows, and its
  // update's gradient norm (when the run takes one).
  void add(int64_t b, const actors::MinibatchReport& r);
  void add_eval(int64_t step, EvalResult r);

  // After the run: the last window, with the held-out results if any.
  void finish(std::optional<EvalResult> eval);

  std::optional<int64_t> diverged_at() const;
  const std::optional<StepRecord>& last() const { return last_; }
  int64_t counted() const;

 private:
  struct Done {
    double loss = 0;
    int64_t correct = 0, rows = 0;
    double grad_norm = 0;
  };

  bool is_eval_step(int64_t step) const;
  void pump();
  void emit(Clock::time_point now, std::optional<EvalResult> eval);

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
  double last_norm_ = std::numeric_limits<double>::quiet_NaN();  // the window's last step's
  Clock::time_point start_, window_start_;
  std::optional<Clock::time_point> trained_at_;  // when the last step's loss was counted
  std::vector<std::atomic<int64_t>> busy_ns_;
  std::vector<int64_t> window_busy_;
  std::vector<std::pair<int, int>> layout_;  // stage and replica of each device
  std::optional<int64_t> diverged_at_;
  std::optional<StepRecord> last_;
};

}  // namespace tandem::train
