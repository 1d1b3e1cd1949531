#include "api/config_reading.hpp"

#include "train/config_overrides.hpp"

namespace tandem::api {

train::Config read_config(const Config& config) {
  train::ConfigOverrides overrides;
  overrides.label = "override";
  for (const auto& [key, value] : config.overrides()) overrides.items.push_back({key, value});
  if (config.is_file()) return train::load_config(config.source(), overrides);
  return train::parse_config(config.source(), config.name(), overrides);
}

}  // namespace tandem::api
