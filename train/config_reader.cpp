#include "train/config_reader.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

namespace tandem::train {
namespace {

std::string describe_node(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null:
      return "nothing";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Scalar:
      return (n.Tag() == "!" ? "the string \"" : "'") + n.Scalar() + (n.Tag() == "!" ? "\"" : "'");
    default:
      return "an undefined value";
  }
}

// Plain (unquoted) scalars only: a quoted "32" is a string, not a number.
bool plain_scalar(const YAML::Node& n) {
  return n.IsScalar() && n.Tag() != "!";
}

struct Reader {
  const ConfigMap& map;
  std::string key;  // full path, with [i] for list items

  [[noreturn]] void fail(const YAML::Node& n, const std::string& what) const {
    throw ConfigError(map.location(n), key, what);
  }

  int64_t to_int(const YAML::Node& n) const {
    if (plain_scalar(n)) {
      const std::string& s = n.Scalar();
      int64_t v = 0;
      const char* first = s.data() + (!s.empty() && s[0] == '+' ? 1 : 0);
      const auto [ptr, ec] = std::from_chars(first, s.data() + s.size(), v);
      if (ec == std::errc::result_out_of_range) fail(n, "integer '" + s + "' is out of range");
      if (ec == std::errc() && ptr == s.data() + s.size() && first != ptr) return v;
    }
    fail(n, "expected an integer, got " + describe_node(n));
  }

  double to_double(const YAML::Node& n) const {
    if (plain_scalar(n)) {
      const std::string& s = n.Scalar();
      char* end = nullptr;
      const double v = std::strtod(s.c_str(), &end);
      if (!s.empty() && end == s.c_str() + s.size() && std::isfinite(v)) return v;
    }
    fail(n, "expected a number, got " + describe_node(n));
  }

  bool to_bool(const YAML::Node& n) const {
    if (plain_scalar(n)) {
      const std::string& s = n.Scalar();
      if (s == "true" || s == "True" || s == "TRUE") return true;
      if (s == "false" || s == "False" || s == "FALSE") return false;
    }
    fail(n, "expected true or false, got " + describe_node(n));
  }

  std::string to_string(const YAML::Node& n) const {
    if (n.IsScalar()) return n.Scalar();
    fail(n, "expected a string, got " + describe_node(n));
  }

  template <class T, class F>
  std::vector<T> to_list(const YAML::Node& n, F item) const {
    if (!n.IsSequence()) fail(n, "expected a list, got " + describe_node(n));
    std::vector<T> out;
    for (size_t i = 0; i < n.size(); ++i) {
      Reader r{map, key + "[" + std::to_string(i) + "]"};
      out.push_back((r.*item)(n[i]));
    }
    return out;
  }
};

template <class T>
T convert(const Reader& r, const YAML::Node& n) {
  if constexpr (std::is_same_v<T, int64_t>) {
    return r.to_int(n);
  } else if constexpr (std::is_same_v<T, double>) {
    return r.to_double(n);
  } else if constexpr (std::is_same_v<T, bool>) {
    return r.to_bool(n);
  } else if constexpr (std::is_same_v<T, std::string>) {
    return r.to_string(n);
  } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
    return r.to_list<int64_t>(n, &Reader::to_int);
  } else if constexpr (std::is_same_v<T, std::vector<double>>) {
    return r.to_list<double>(n, &Reader::to_double);
  } else {
    static_assert(std::is_same_v<T, std::vector<std::string>>);
    return r.to_list<std::string>(n, &Reader::to_string);
  }
}

}  // namespace

void ConfigOrigin::add_override(std::vector<YAML::Node> nodes, const std::string& where) {
  for (YAML::Node& n : nodes) overridden_.emplace_back(std::move(n), where);
}

ConfigLocation ConfigOrigin::locate(const YAML::Node& node) const {
  const YAML::Mark m = node.Mark();
  // The newest first: an override inside an earlier one's value owns its nodes.
  for (auto it = overridden_.rbegin(); it != overridden_.rend(); ++it) {
    if (!it->first.is(node)) continue;
    if (m.line < 0) return ConfigLocation{it->second, 0, 0};
    return ConfigLocation{it->second, m.line + 1, m.column + 1};
  }
  if (m.line < 0) return ConfigLocation{file_, 0, 0};
  return ConfigLocation{file_, m.line + 1, m.column + 1};
}

ConfigMap::ConfigMap(const YAML::Node& node, std::shared_ptr<const ConfigOrigin> origin,
                     std::string path, std::optional<ConfigLocation> where)
    : node_(node), origin_(std::move(origin)), path_(std::move(path)) {
  where_ = where ? *where : location(node);
  if (node.IsNull()) return;
  if (!node.IsMap()) {
    throw ConfigError(where_, path_,
                      "expected a mapping of keys to values, got " + describe_node(node));
  }
  for (const auto& kv : node) {
    const YAML::Node& k = kv.first;
    if (!k.IsScalar()) {
      throw ConfigError(location(k), path_, "keys must be plain names, got " + describe_node(k));
    }
    if (entry(k.Scalar()) != nullptr) {
      throw ConfigError(location(k), key_path(k.Scalar()),
                        "duplicate key (first given at line " +
                            std::to_string(location(entry(k.Scalar())->key_node).line) + ")");
    }
    entries_.push_back(Entry{k.Scalar(), k, kv.second});
  }
}

ConfigLocation ConfigMap::location(const YAML::Node& node) const {
  return origin_->locate(node);
}

std::string ConfigMap::key_path(std::string_view key) const {
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

const ConfigMap::Entry* ConfigMap::entry(std::string_view key) const {
  for (const Entry& e : entries_) {
    if (e.key == key) return &e;
  }
  return nullptr;
}

ConfigLocation ConfigMap::where(std::string_view key) const {
  const Entry* e = entry(key);
  if (e == nullptr) return where();
  return e->value.IsScalar() ? location(e->value) : location(e->key_node);
}

void ConfigMap::fail(std::string_view key, const std::string& what) const {
  throw ConfigError(where(key), key_path(key), what);
}

void ConfigMap::fail_here(const std::string& what) const {
  throw ConfigError(where(), path_, what);
}

void ConfigMap::fail_rule(const JobError& broken) const {
  std::string_view below = broken.key();
  if (!path_.empty() && below.starts_with(path_) && below.size() > path_.size() &&
      below[path_.size()] == '.') {
    below.remove_prefix(path_.size() + 1);
  }
  const std::string_view key = below.substr(0, below.find_first_of(".["));
  throw ConfigError(where(key), broken.key(), broken.detail());
}

bool ConfigMap::has(std::string_view key) {
  allow(key);
  return entry(key) != nullptr;
}

const YAML::Node& ConfigMap::node(std::string_view key) {
  allow(key);
  const Entry* e = entry(key);
  if (e == nullptr) {
    throw ConfigError(
        where(), key_path(key),
        "missing required key" + (path_.empty() ? std::string() : " in '" + path_ + "'"));
  }
  return e->value;
}

ConfigMap ConfigMap::map(std::string_view key) {
  const YAML::Node& n = node(key);
  if (!n.IsMap()) {
    throw ConfigError(where(key), key_path(key),
                      "expected a mapping of keys to values, got " + describe_node(n));
  }
  return ConfigMap(n, origin_, key_path(key), where(key));
}

std::optional<ConfigMap> ConfigMap::find_map(std::string_view key) {
  if (!has(key)) return std::nullopt;
  return map(key);
}

template <class T>
T ConfigMap::get(std::string_view key) {
  const YAML::Node& n = node(key);
  if (n.IsNull()) fail(key, "has no value");
  return convert<T>(Reader{*this, key_path(key)}, n);
}

template <class T>
std::optional<T> ConfigMap::find(std::string_view key) {
  if (!has(key)) return std::nullopt;
  return get<T>(key);
}

void ConfigMap::finish() const {
  for (const Entry& e : entries_) {
    if (std::find(known_.begin(), known_.end(), e.key) != known_.end()) continue;
    std::string known;
    for (const std::string& k : known_) {
      if (known.find("'" + k + "'") != std::string::npos) continue;
      known += (known.empty() ? "'" : ", '") + k + "'";
    }
    throw ConfigError(
        location(e.key_node), key_path(e.key),
        "unknown key" + (known.empty() ? std::string() : " (expected one of " + known + ")"));
  }
}

template int64_t ConfigMap::get<int64_t>(std::string_view);
template double ConfigMap::get<double>(std::string_view);
template bool ConfigMap::get<bool>(std::string_view);
template std::string ConfigMap::get<std::string>(std::string_view);
template std::vector<int64_t> ConfigMap::get<std::vector<int64_t>>(std::string_view);
template std::vector<double> ConfigMap::get<std::vector<double>>(std::string_view);
template std::vector<std::string> ConfigMap::get<std::vector<std::string>>(std::string_view);
template std::optional<int64_t> ConfigMap::find<int64_t>(std::string_view);
template std::optional<double> ConfigMap::find<double>(std::string_view);
template std::optional<bool> ConfigMap::find<bool>(std::string_view);
template std::optional<std::string> ConfigMap::find<std::string>(std::string_view);
template std::optional<std::vector<int64_t>> ConfigMap::find<std::vector<int64_t>>(
    std::string_view);
template std::optional<std::vector<double>> ConfigMap::find<std::vector<double>>(std::string_view);
template std::optional<std::vector<std::string>> ConfigMap::find<std::vector<std::string>>(
    std::string_view);

}  // namespace tandem::train
