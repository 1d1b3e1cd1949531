#include "train/config_error.hpp"

namespace tandem::train {

std::string ConfigLocation::str() const {
  if (line <= 0) return file;
  return file + ":" + std::to_string(line) + ":" + std::to_string(column);
}

namespace {
std::string message(const ConfigLocation& where, const std::string& key, const std::string& what) {
  return where.str() + ": " + (key.empty() ? std::string() : key + ": ") + what;
}
}  // namespace

ConfigError::ConfigError(ConfigLocation where, std::string key, const std::string& what)
    : std::runtime_error(message(where, key, what)),
      where_(std::move(where)),
      key_(std::move(key)) {}

}  // namespace tandem::train
