#pragma once
// Typed, located reading of one YAML mapping of a config. Every key a section asks about
// (present or not) becomes known; finish() rejects the keys nobody asked about, so a typo
// ("minibath") is an error naming its line instead of a silently ignored setting. Every
// section reads its own keys this way.
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "train/config_error.hpp"
#include "train/job_error.hpp"

namespace tandem::train {

// Where a config's YAML nodes came from, for the locations in its errors: the config's own text
// (a file, or text given in code, named `file`), or the override of one key
// (train/config_overrides.hpp), whose nodes errors place at "LABEL KEY" ("--set train.steps").
class ConfigOrigin {
 public:
  explicit ConfigOrigin(std::string file) : file_(std::move(file)) {}
  // `nodes` (an override's value, every node under it, and the keys it added) came from
  // `where` ("--set train.steps").
  void add_override(std::vector<YAML::Node> nodes, const std::string& where);
  ConfigLocation locate(const YAML::Node& node) const;
  const std::string& file() const { return file_; }

 private:
  std::string file_;
  std::vector<std::pair<YAML::Node, std::string>> overridden_;  // node, where it came from
};

class ConfigMap {
 public:
  // Throws ConfigError unless `node` is a mapping (or null, read as empty) without duplicate
  // keys. `path` is the dotted key of this mapping ("" for the top level); `where` is what
  // errors about the mapping as a whole point at (default: the mapping's own position).
  ConfigMap(const YAML::Node& node, std::shared_ptr<const ConfigOrigin> origin, std::string path,
            std::optional<ConfigLocation> where = std::nullopt);

  // Supported T: int64_t, double, bool, std::string, std::vector<int64_t>, std::vector<double>,
  // std::vector<std::string>. Wrong types and missing required keys throw ConfigError.
  template <class T>
  T get(std::string_view key);
  template <class T>
  std::optional<T> find(std::string_view key);
  template <class T>
  T get_or(std::string_view key, T fallback) {
    std::optional<T> v = find<T>(key);
    return v ? std::move(*v) : std::move(fallback);
  }

  bool has(std::string_view key);  // marks the key as known
  void allow(std::string_view key) { known_.emplace_back(key); }
  const YAML::Node& node(std::string_view key);  // required, any type
  ConfigMap map(std::string_view key);           // required sub-mapping
  std::optional<ConfigMap> find_map(std::string_view key);

  // Throws ConfigError naming the first key that no one asked about, listing the known ones.
  void finish() const;

  [[noreturn]] void fail(std::string_view key, const std::string& what) const;
  [[noreturn]] void fail_here(const std::string& what) const;  // about the mapping itself
  // A rule of train/job_rules.hpp broken by a key under this mapping: at that key's line.
  [[noreturn]] void fail_rule(const JobError& broken) const;
  // Of a scalar value; of the key for a mapping, a list or no value (where its lines start);
  // of the mapping when the key is absent.
  ConfigLocation where(std::string_view key) const;
  const ConfigLocation& where() const { return where_; }
  std::string key_path(std::string_view key) const;
  const std::string& path() const { return path_; }
  const std::string& file() const { return origin_->file(); }
  const std::shared_ptr<const ConfigOrigin>& origin() const { return origin_; }

  ConfigLocation location(const YAML::Node& node) const;

 private:
  struct Entry {
    std::string key;
    YAML::Node key_node;
    YAML::Node value;
  };
  const Entry* entry(std::string_view key) const;

  YAML::Node node_;
  std::shared_ptr<const ConfigOrigin> origin_;
  std::string path_;
  ConfigLocation where_;
  std::vector<Entry> entries_;
  std::vector<std::string> known_;
};

}  // namespace tandem::train
