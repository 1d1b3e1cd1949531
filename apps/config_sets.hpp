#pragma once
// `--set KEY=VALUE` on the commands that read a config (train, bench, predict, profile): any
// key of the config overridden from the command line (train/config_overrides.hpp), as the
// embedding API's Config::set does. Errors name the override as "--set KEY".
#include <CLI/CLI.hpp>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "train/config.hpp"

namespace tandem::apps {

// Adds the repeatable option, collecting "KEY=VALUE" texts into `sets`.
void add_set_option(CLI::App& command, std::vector<std::string>& sets);

// The overrides of `sets`; throws train::ConfigError at "--set TEXT" for one without '='.
train::ConfigOverrides config_overrides(const std::vector<std::string>& sets);

// The config at `path` (none: the embedded default, configs/default.yaml) with `sets` applied.
train::Config load_command_config(const std::optional<std::filesystem::path>& path,
                                  const std::vector<std::string>& sets);

}  // namespace tandem::apps
