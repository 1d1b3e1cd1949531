#pragma once
// Overrides of single keys of a YAML config, applied to its tree before it is read: the CLI's
// `--set KEY=VALUE` and the embedding API's Config::set. A key is a dotted path with list
// indices ("train.steps", "pipeline.stages[1].replicas"); a value is YAML text ("200",
// "[0, 1]", "{kind: adamw, lr: 1e-3}") that replaces the key's value, or adds the key (and the
// mappings above it) where the config lacks it. The reader then checks an overridden key as it
// checks the file's own, and its errors name the override ("--set train.steps:1:1: ...").
#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <string>
#include <vector>

#include "train/config_reader.hpp"

namespace tandem::train {

struct ConfigOverride {
  std::string key;
  std::string value;  // YAML text
};

struct ConfigOverrides {
  std::vector<ConfigOverride> items;  // applied in order
  // How errors name an override: "--set" (the CLI) or "override" (the API), then the key.
  std::string label = "override";
};

// Bounds on what an override may hold, against input that would exhaust memory or time.
inline constexpr std::size_t kMaxOverrides = 1024;
inline constexpr std::size_t kMaxOverrideKeyBytes = 256;
// Both over all the values together: what one override may not hold, many may not either.
inline constexpr std::size_t kMaxOverrideValueBytes = std::size_t{1} << 20;
inline constexpr std::size_t kMaxOverrideNodes = 65536;  // YAML nodes

// "KEY=VALUE" split at the first '='; throws ConfigError (at `label` and the text) without one.
ConfigOverride parse_override(const std::string& text, const std::string& label);

// Applies `overrides` to `root` (a null root becomes a mapping) and records each override's
// nodes in `origin`. Throws ConfigError at the override for a malformed key (an empty or
// non-name part, an index that is not a number), a key given twice, a path through a value that
// is not a mapping (or not a list, for an index), an index past the list's end, a value that is
// not YAML, and any bound above.
void apply_overrides(YAML::Node& root, const ConfigOverrides& overrides, ConfigOrigin& origin);

}  // namespace tandem::train
