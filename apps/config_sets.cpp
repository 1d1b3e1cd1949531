#include "apps/config_sets.hpp"

#include "apps/default_config.hpp"

namespace tandem::apps {

void add_set_option(CLI::App& command, std::vector<std::string>& sets) {
  command
      .add_option("--set", sets,
                  "override one key of the config: KEY=VALUE, KEY dotted with list indices "
                  "(train.steps=200, pipeline.stages[1].replicas=2), VALUE in YAML "
                  "({kind: adamw, lr: 1e-3}); repeatable, applied in order")
      ->allow_extra_args(false)
      ->type_name("KEY=VALUE");
}

train::ConfigOverrides config_overrides(const std::vector<std::string>& sets) {
  train::ConfigOverrides out;
  out.label = "--set";
  for (const std::string& text : sets) out.items.push_back(train::parse_override(text, "--set"));
  return out;
}

train::Config load_command_config(const std::optional<std::filesystem::path>& path,
                                  const std::vector<std::string>& sets) {
  const train::ConfigOverrides overrides = config_overrides(sets);
  if (path) return train::load_config(*path, overrides);
  return train::parse_config(std::string(default_config()), kDefaultConfigName, overrides);
}

}  // namespace tandem::apps
