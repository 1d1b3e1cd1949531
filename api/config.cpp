#include <array>
#include <charconv>
#include <string>
#include <utility>

#include "tandem/tandem.hpp"

namespace tandem {

Config::Config(bool is_file, std::string source, std::string name)
    : is_file_(is_file), source_(std::move(source)), name_(std::move(name)) {}

Config Config::file(std::string path) {
  std::string name = path;
  return Config(true, std::move(path), std::move(name));
}

Config Config::text(std::string yaml, std::string name) {
  return Config(false, std::move(yaml), std::move(name));
}

Config& Config::set(std::string key, std::string yaml) {
  overrides_.emplace_back(std::move(key), std::move(yaml));
  return *this;
}

Config& Config::set(std::string key, bool value) {
  return set(std::move(key), std::string(value ? "true" : "false"));
}

Config& Config::set(std::string key, double value) {
  // The shortest text that reads back as the same double; a non-finite value becomes text the
  // reader refuses at the override, as it would refuse it in the file.
  std::array<char, 64> buf{};
  const auto [end, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), value);
  (void)ec;  // 64 bytes hold any double
  return set(std::move(key), std::string(buf.data(), end));
}

}  // namespace tandem
