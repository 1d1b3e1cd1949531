#include <algorithm>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

#include "api/config_reading.hpp"
#include "models/model.hpp"
#include "tandem/tandem.hpp"
#include "train/config.hpp"
#include "train/job_inputs.hpp"
#include "train/train_data.hpp"

namespace tandem {
namespace {

// Minibatch b of `source` as the application sees it: whole inputs and targets.
Batch whole_batch(const train::DataSource& source, std::int64_t b) {
  const train::MinibatchData d = source(b);
  const schedules::Slice all{0, d.samples()};
  return {d.rows(all, false), d.rows(all, true)};
}

}  // namespace

ConfigData config_data(const std::string& config_file) {
  return config_data(Config::file(config_file));
}

ConfigData config_data(const Config& config_source) {
  train::Config config;
  try {
    config = api::read_config(config_source);
  } catch (const train::ConfigError& e) {
    throw std::invalid_argument(e.what());
  }
  const models::Model model = train::config_model(config);
  train::TrainData sets;
  try {
    train::at_config(config, [&] { sets = train::load_train_data(config, model); });
  } catch (const train::ConfigError& e) {
    throw std::invalid_argument(e.what());
  }
  ConfigData out;
  out.minibatch = config.train.minibatch;
  out.data = [source = train::dataset_source(sets.train, model, out.minibatch, config.train.seed)](
                 std::int64_t b) { return whole_batch(source, b); };
  if (sets.eval) {
    const std::int64_t n = std::min(config.train.eval->samples, sets.eval->size());
    out.eval_minibatches = n / out.minibatch;
    // In the model's layout, as the training minibatches are (an MLP takes images flattened).
    out.eval = [eval = sets.eval, mb = out.minibatch,
                shape = model.input_shape(out.minibatch)](std::int64_t k) {
      std::vector<std::int64_t> idx(static_cast<std::size_t>(mb));
      for (std::int64_t i = 0; i < mb; ++i) idx[static_cast<std::size_t>(i)] = k * mb + i;
      models::data::Batch b = eval->get(idx);
      return Batch{b.inputs.reshape(shape), std::move(b.targets)};
    };
  }
  return out;
}

}  // namespace tandem
