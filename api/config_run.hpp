#pragma once
// A Session configured from a YAML file: the CLI's job (train::Config), run through the same
// train::Session `tandem train` runs, as this process's rank of a launched job when a
// launcher's variables are set.
#include <memory>
#include <string>
#include <vector>

#include "tandem/tandem.hpp"

namespace tandem::api {

class ConfigRun {
 public:
  // Throws std::invalid_argument (the config, or a checkpoint that cannot resume it) and
  // std::runtime_error (a failed join).
  ConfigRun(const std::string& config_file, ConfigRunOptions options);
  ~ConfigRun();
  ConfigRun(const ConfigRun&) = delete;
  ConfigRun& operator=(const ConfigRun&) = delete;

  TrainResult run();
  void stop();
  std::vector<NamedTensor> weights() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tandem::api
