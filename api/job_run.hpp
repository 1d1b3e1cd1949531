#pragma once
// What a tandem::Session runs: a training job through train::Session, the one `tandem train`
// runs, built from a YAML config or from the application's model, plan and data, as this
// process's rank of a launched job when a launcher's variables are set.
#include <memory>
#include <string>
#include <vector>

#include "models/model.hpp"
#include "tandem/tandem.hpp"

namespace tandem::api {

class JobRun {
 public:
  // The job of a YAML config. Throws tandem::Error, or the library's own exceptions, which
  // Session turns into one (api/error_translation.hpp).
  JobRun(const Config& config, ConfigRunOptions options);
  // A job built in code: `model` (described as `model_name` in checkpoints) through `options`'
  // plan on its DataFn. Throws as the other constructor does, naming the field at fault.
  JobRun(const models::Model& model, const std::string& model_name, TrainOptions options);
  ~JobRun();
  JobRun(const JobRun&) = delete;
  JobRun& operator=(const JobRun&) = delete;

  // Throws tandem::Error carrying partial_result() when the run fails.
  TrainResult run();
  void stop();
  std::vector<NamedTensor> weights() const;
  Tensor predict(const Tensor& inputs, const PredictOptions& options) const;
  std::string model_name() const;

 private:
  TrainResult run_job();
  // What the run did before it failed: the minibatches the coordinator reported, the
  // checkpoints it wrote.
  TrainResult partial_result();

  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tandem::api
