#include <chrono>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "api/error_translation.hpp"
#include "api/job_run.hpp"
#include "api/run_state.hpp"
#include "tandem/tandem.hpp"

namespace tandem {

// Errors: the constructors run their work through api::at_boundary; JobRun's run() and
// predict() translate their own (a failed run's Error carries its partial result), so every
// failure reaches the application as a tandem::Error; calls out of order are std::logic_error.

// The model is kept for the run's length: its layers may be the application's own.
struct Session::Impl {
  std::unique_ptr<Model> model;
  std::unique_ptr<api::JobRun> run;
  std::shared_ptr<Run::State> started;  // start()'s run

  ~Impl() {
    // A started run still going: it ends at its next stop boundary, and the future's last
    // holder here waits for it (a Run must not outlive the Session).
    if (started && started->result.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
      run->stop();
      started->result.wait();
    }
  }
};

Session::Session(Model model, TrainOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->model = std::make_unique<Model>(std::move(model));
  const Model& m = *impl_->model;
  // Checkpoints name the model by its first line (a zoo model's spec, as a config's job names
  // it), so a code-built job and a config's job of the same model resume each other's.
  api::at_boundary(nullptr, "", [&] {
    impl_->run = std::make_unique<api::JobRun>(*m.impl_, m.title_, std::move(options));
  });
}

Session::Session(Config config, ConfigRunOptions options) : impl_(std::make_unique<Impl>()) {
  api::at_boundary(nullptr, "",
                   [&] { impl_->run = std::make_unique<api::JobRun>(config, std::move(options)); });
}

Session::Session(const std::string& config_file, ConfigRunOptions options)
    : Session(Config::file(config_file), std::move(options)) {}

Session::~Session() = default;

TrainResult Session::run() {
  if (impl_->started) throw std::logic_error("Session::run after start()");
  return impl_->run->run();
}

Run Session::start() {
  if (impl_->started) throw std::logic_error("Session::start called twice");
  auto state = std::make_shared<Run::State>();
  state->job = impl_->run.get();
  // JobRun::run checks that it runs once (run() before start() throws here, on this thread).
  state->result = std::async(std::launch::async, [job = state->job] { return job->run(); }).share();
  impl_->started = state;
  return Run(std::move(state));
}

void Session::stop() {
  impl_->run->stop();
}

std::vector<NamedTensor> Session::weights() const {
  return impl_->run->weights();
}

Tensor Session::predict(const Tensor& inputs, const PredictOptions& options) const {
  return impl_->run->predict(inputs, options);
}

std::string Session::model_name() const {
  return impl_->run->model_name();
}

}  // namespace tandem
