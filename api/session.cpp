#include <algorithm>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

#include "actors/pipeline.hpp"
#include "api/config_run.hpp"
#include "api/plan_conversion.hpp"
#include "models/model.hpp"
#include "models/optimizer.hpp"
#include "runtime/scheduler.hpp"
#include "schedules/schedule_error.hpp"
#include "tandem/tandem.hpp"

namespace tandem {
namespace {

using Clock = std::chrono::steady_clock;

models::OptimizerSpec internal_optimizer(const Optimizer& o) {
  models::OptimizerSpec spec;
  spec.kind = o.kind;
  spec.lr = o.lr;
  spec.momentum = o.momentum;
  spec.weight_decay = o.weight_decay;
  spec.nesterov = o.nesterov;
  spec.beta1 = o.beta1;
  spec.beta2 = o.beta2;
  spec.eps = o.eps;
  return spec;
}

// The user's batches, checked against the model: a wrong shape is named with its minibatch
// here rather than deep inside a stage's kernel.
actors::DataSource checked_data(DataFn fn, const models::Model& model, std::int64_t minibatch) {
  return [fn = std::move(fn), in_shape = model.input_shape(minibatch),
          in_dtype = model.input_dtype(),
          target_shape = model.target_shape(minibatch)](std::int64_t b) {
    Batch batch = fn(b);
    const std::string where = "DataFn(" + std::to_string(b) + ")";
    if (!batch.inputs.defined() || !batch.targets.defined()) {
      throw std::invalid_argument(where + ": inputs or targets undefined");
    }
    if (!batch.inputs.device().is_cpu() || !batch.targets.device().is_cpu()) {
      throw std::invalid_argument(where + ": inputs " + batch.inputs.describe() + ", targets " +
                                  batch.targets.describe() + ": give CPU tensors");
    }
    if (batch.inputs.shape() != in_shape || batch.inputs.dtype() != in_dtype) {
      throw std::invalid_argument(where + ": inputs " + batch.inputs.describe() +
                                  ", the model takes " + std::string(dtype_name(in_dtype)) +
                                  shape_str(in_shape));
    }
    if (batch.targets.numel() != shape_numel(target_shape) || batch.targets.dtype() != DType::i32) {
      throw std::invalid_argument(where + ": targets " + batch.targets.describe() +
                                  ", the model takes i32" + shape_str(target_shape));
    }
    return actors::MinibatchData::whole(std::move(batch.inputs),
                                        batch.targets.reshape(target_shape));
  };
}

}  // namespace

struct Session::Impl {
  std::optional<Model> model;  // a session built in code
  std::int64_t planned = 0;
  Clock::time_point start;
  std::unique_ptr<actors::Pipeline> pipeline;
  bool ran = false;
  std::unique_ptr<api::ConfigRun> config_run;  // a session configured from a file
};

Session::Session(const std::string& config_file, ConfigRunOptions options)
    : impl_(std::make_unique<Impl>(Impl{std::nullopt, 0, {}, {}, false, {}})) {
  impl_->config_run = std::make_unique<api::ConfigRun>(config_file, std::move(options));
}

Session::Session(Model model, TrainOptions options)
    : impl_(
          std::make_unique<Impl>(Impl{std::move(model), options.minibatches, {}, {}, false, {}})) {
  if (!options.data) throw std::invalid_argument("TrainOptions.data: no DataFn");
  const models::Model& m = *impl_->model->impl_;
  actors::PipelineSpec spec;
  spec.model = &m;
  try {
    spec.plan = api::internal_plan(options.plan, options.minibatches, m.num_layers());
  } catch (const schedules::ScheduleError& e) {
    throw std::invalid_argument(e.what());  // names the plan's stage or field already
  }
  spec.optimizer = internal_optimizer(options.optimizer);
  try {
    (void)models::make_optimizer(spec.optimizer);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("TrainOptions.optimizer: ") + e.what());
  }
  spec.seed = options.seed;
  spec.lr_at = std::move(options.lr_at);
  spec.data = checked_data(std::move(options.data), m, options.plan.minibatch);
  if (options.on_metrics) {
    // The run's start is written before run() sends the first message, and this is called only
    // after it: the actor system's hand-off orders the two.
    spec.on_minibatch = [cb = std::move(options.on_metrics), impl = impl_.get()](
                            std::int64_t b, double loss, std::int64_t correct, std::int64_t rows) {
      Metrics metrics;
      metrics.minibatch = b;
      metrics.loss = loss;
      metrics.correct = correct;
      metrics.rows = rows;
      metrics.elapsed_s = std::chrono::duration<double>(Clock::now() - impl->start).count();
      cb(metrics);
    };
  }
  WorkSharingOptions workers;
  workers.workers = options.threads;
  try {
    impl_->pipeline =
        std::make_unique<actors::Pipeline>(std::move(spec), make_work_sharing(workers));
  } catch (const schedules::ScheduleError& e) {
    // Its text names the plan's stage or the schedule's field already.
    throw std::invalid_argument(e.what());
  }
}

Session::~Session() = default;

TrainResult Session::run() {
  if (impl_->config_run) return impl_->config_run->run();
  if (impl_->ran) throw std::logic_error("Session::run called twice");
  impl_->ran = true;
  impl_->start = Clock::now();
  const actors::PipelineResult r = impl_->pipeline->run();
  TrainResult out;
  out.minibatches = r.minibatches;
  out.stopped = r.minibatches < impl_->planned;
  out.losses = r.losses;
  out.seconds = r.seconds;
  for (const actors::StageStats& st : r.stages) {
    StageReport s;
    s.stage = st.stage;
    s.replica = st.replica;
    s.device = st.device_name;
    s.actions = st.actions;
    s.busy_s = st.busy_s;
    s.peak_versions = static_cast<std::int64_t>(st.peak_versions);
    s.peak_activations = static_cast<std::int64_t>(st.peak_activations);
    out.stages.push_back(std::move(s));
  }
  std::sort(out.stages.begin(), out.stages.end(), [](const StageReport& a, const StageReport& b) {
    return std::tie(a.stage, a.replica) < std::tie(b.stage, b.replica);
  });
  return out;
}

void Session::stop() {
  if (impl_->config_run) return impl_->config_run->stop();
  impl_->pipeline->request_stop();
}

std::vector<NamedTensor> Session::weights() const {
  if (impl_->config_run) return impl_->config_run->weights();
  if (!impl_->ran) throw std::logic_error("Session::weights: run() has not run");
  const models::ParamSet params = impl_->pipeline->params();
  std::vector<NamedTensor> out;
  for (std::int64_t i = 0; i < params.size(); ++i) out.push_back({params.name(i), params[i]});
  return out;
}

}  // namespace tandem
