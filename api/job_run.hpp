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
  // The job of a YAML config. Throws std::invalid_argument (the config, or a checkpoint that
  // cannot resume it) and std::runtime_error (a failed join).
  JobRun(const std::string& config_file, ConfigRunOptions options);
  // A job built in code: `model` (described as `model_name` in checkpoints) through `options`'
  // plan on its DataFn. Throws std::invalid_argument naming the field at fault.
  JobRun(const models::Model& model, const std::string& model_name, TrainOptions options);
  ~JobRun();
  JobRun(const JobRun&) = delete;
  JobRun& operator=(const JobRun&) = delete;

  TrainResult run();
  void stop();
  std::vector<NamedTensor> weights() const;
  Tensor predict(const Tensor& inputs, const PredictOptions& options) const;
  std::string model_name() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tandem::api
