#include "api/config_run.hpp"

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "train/checkpoint.hpp"
#include "train/cluster_options.hpp"
#include "train/config.hpp"
#include "train/process_group.hpp"
#include "train/session.hpp"

namespace tandem::api {
namespace {

train::SessionOptions session_options(const ConfigRunOptions& o, train::ProcessGroup* group) {
  train::SessionOptions so;
  if (o.steps < 0) {
    throw std::invalid_argument("ConfigRunOptions.steps: must be >= 0, got " +
                                std::to_string(o.steps));
  }
  if (o.steps > 0) so.steps = o.steps;
  if (!o.trace.empty()) so.trace = o.trace;
  if (!o.checkpoints.dir.empty()) {
    if (o.checkpoints.every < 0 || o.checkpoints.keep < 1) {
      throw std::invalid_argument("ConfigRunOptions.checkpoints: every must be >= 0 and keep >= 1");
    }
    so.checkpoint_dir = o.checkpoints.dir;
    so.checkpoint_every = o.checkpoints.every;
    so.checkpoint_keep = o.checkpoints.keep;
  }
  if (!o.resume.empty()) so.resume = o.resume;
  so.group = group;
  return so;
}

EvalReport eval_report(const train::EvalResult& e) {
  return {e.loss, e.accuracy, e.samples};
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
  p.has_eval = r.eval.has_value();
  if (r.eval) p.eval = eval_report(*r.eval);
  return p;
}

std::vector<StageReport> stage_reports(const std::vector<actors::StageStats>& stats) {
  std::vector<StageReport> out;
  for (const actors::StageStats& st : stats) {
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

}  // namespace

struct ConfigRun::State {
  ConfigRunOptions options;
  std::unique_ptr<train::ProcessGroup> group;
  std::optional<train::Session> session;
  bool ran = false;
};

ConfigRun::ConfigRun(const std::string& config_file, ConfigRunOptions options)
    : state_(std::make_unique<State>()) {
  state_->options = std::move(options);
  train::Config config;
  try {
    config = train::load_config(config_file);
  } catch (const train::ConfigError& e) {
    throw std::invalid_argument(e.what());
  }
  // The job's other ranks wait for this one from here on: joined before the session is built,
  // as `tandem train` does.
  state_->group = train::join_launched_job(train::process_group_options(config.cluster));
  const train::SessionOptions so = session_options(state_->options, state_->group.get());
  try {
    train::at_config(config, [&] { state_->session.emplace(config, so); });
  } catch (const train::ConfigError& e) {
    throw std::invalid_argument(e.what());
  } catch (const train::CheckpointError& e) {
    throw std::invalid_argument(std::string("ConfigRunOptions.resume: ") + e.what());
  }
}

ConfigRun::~ConfigRun() = default;

TrainResult ConfigRun::run() {
  if (state_->ran) throw std::logic_error("Session::run called twice");
  state_->ran = true;
  train::ProcessGroup* group = state_->group.get();
  const bool reporter = group == nullptr || group->rank() == 0;
  std::function<void(const train::StepRecord&)> on_record;
  if (reporter && state_->options.on_progress) {
    on_record = [cb = state_->options.on_progress](const train::StepRecord& r) {
      cb(progress_of(r));
    };
  }
  const train::TrainSummary s = state_->session->run(on_record);
  if (group != nullptr) group->shutdown();
  TrainResult out;
  out.first_minibatch = s.first_step;
  out.minibatches = s.steps - s.first_step;
  out.stopped = s.stopped;
  out.losses.assign(s.losses.begin(), s.losses.end());
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

void ConfigRun::stop() {
  state_->session->request_stop();
}

std::vector<NamedTensor> ConfigRun::weights() const {
  if (!state_->ran) throw std::logic_error("Session::weights: run() has not run");
  const models::ParamSet& params = state_->session->params();
  std::vector<NamedTensor> out;
  for (std::int64_t i = 0; i < params.size(); ++i) out.push_back({params.name(i), params[i]});
  return out;
}

}  // namespace tandem::api
