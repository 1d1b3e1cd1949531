#pragma once
// A tandem::Config read into the training library's config: its file or text with its overrides
// applied, errors naming an override as "override KEY".
#include "tandem/tandem.hpp"
#include "train/config.hpp"

namespace tandem::api {

// Throws train::ConfigError as train::load_config does.
train::Config read_config(const Config& config);

}  // namespace tandem::api
