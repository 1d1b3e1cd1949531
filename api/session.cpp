#include <memory>
#include <string>
#include <utility>

#include "api/error_translation.hpp"
#include "api/job_run.hpp"
#include "tandem/tandem.hpp"

namespace tandem {

// Errors: the constructors run their work through api::at_boundary; JobRun's run() and
// predict() translate their own (a failed run's Error carries its partial result), so every
// failure reaches the application as a tandem::Error; calls out of order are std::logic_error.

// The model is kept for the run's length: its layers may be the application's own.
struct Session::Impl {
  std::unique_ptr<Model> model;
  std::unique_ptr<api::JobRun> run;
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

Session::Session(const std::string& config_file, ConfigRunOptions options)
    : impl_(std::make_unique<Impl>()) {
  api::at_boundary(nullptr, "", [&] {
    impl_->run = std::make_unique<api::JobRun>(config_file, std::move(options));
  });
}

Session::~Session() = default;

TrainResult Session::run() {
  return impl_->run->run();
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
