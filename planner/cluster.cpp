#include "planner/cluster.hpp"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include "planner/detail/quantity.hpp"

namespace tandem::planner {
namespace {

class Reader {
 public:
  explicit Reader(std::string_view source) : source_(source) {}

  [[noreturn]] void fail(const YAML::Node& at, const std::string& key,
                         const std::string& what) const {
    std::ostringstream os;
    os << source_;
    const YAML::Mark mark = at.Mark();
    if (!mark.is_null()) os << ':' << (mark.line + 1);
    os << ": ";
    if (!key.empty()) os << key << ": ";
    os << what;
    throw std::runtime_error(os.str());
  }

  void reject_unknown(const YAML::Node& map, const std::set<std::string>& known,
                      const std::string& where) const {
    for (const auto& entry : map) {
      const std::string key = entry.first.Scalar();
      if (!entry.first.IsScalar() || !known.contains(key)) {
        fail(entry.first, where.empty() ? key : where + "." + key, "unknown key");
      }
    }
  }

  std::string scalar(const YAML::Node& node, const std::string& key) const {
    if (!node.IsScalar()) fail(node, key, "expected a scalar");
    return node.Scalar();
  }

  long long integer(const YAML::Node& node, const std::string& key) const {
    const std::string text = scalar(node, key);
    try {
      std::size_t used = 0;
      const long long value = std::stoll(text, &used);
      if (used == text.size()) return value;
    } catch (const std::exception&) {
    }
    fail(node, key, "expected an integer, got '" + text + "'");
  }

  double number(const YAML::Node& node, const std::string& key) const {
    const std::string text = scalar(node, key);
    try {
      std::size_t used = 0;
      const double value = std::stod(text, &used);
      if (used == text.size() && std::isfinite(value)) return value;
    } catch (const std::exception&) {
    }
    fail(node, key, "expected a number, got '" + text + "'");
  }

 private:
  std::string source_;
};

TopologyLevel parse_level(const Reader& reader, const YAML::Node& node, std::size_t index) {
  const std::string where = "levels[" + std::to_string(index) + "]";
  if (!node.IsMap()) reader.fail(node, where, "expected a map with units and bandwidth");
  reader.reject_unknown(node, {"name", "units", "bandwidth"}, where);
  TopologyLevel level;
  if (node["name"]) level.name = reader.scalar(node["name"], where + ".name");
  if (level.name.empty()) level.name = "level" + std::to_string(index + 1);

  const YAML::Node units = node["units"];
  if (!units) reader.fail(node, where + ".units", "missing");
  const long long count = reader.integer(units, where + ".units");
  if (count < 1) reader.fail(units, where + ".units", "must be at least 1");
  if (count > 65536) reader.fail(units, where + ".units", "too large (at most 65536)");
  level.units = static_cast<int>(count);

  const YAML::Node bandwidth = node["bandwidth"];
  if (!bandwidth) reader.fail(node, where + ".bandwidth", "missing");
  const std::string text = reader.scalar(bandwidth, where + ".bandwidth");
  const auto bytes_per_second = detail::parse_bandwidth(text);
  if (!bytes_per_second) {
    reader.fail(bandwidth, where + ".bandwidth",
                "cannot read '" + text + "' (a number in GB/s, or e.g. '25 GB/s', '100 Gbit/s')");
  }
  if (!(*bytes_per_second > 0)) {
    reader.fail(bandwidth, where + ".bandwidth", "must be positive, got '" + text + "'");
  }
  level.bytes_per_second = *bytes_per_second;
  return level;
}

}  // namespace

int Cluster::workers() const {
  long long total = 1;
  for (const TopologyLevel& level : levels) total *= level.units;
  return static_cast<int>(total);
}

Cluster parse_cluster(std::string_view yaml_text, std::string_view source) {
  const Reader reader(source);
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml_text));
  } catch (const YAML::Exception& e) {
    std::ostringstream os;
    os << source;
    if (!e.mark.is_null()) os << ':' << (e.mark.line + 1);
    os << ": invalid YAML: " << e.msg;
    throw std::runtime_error(os.str());
  }
  if (!root.IsMap()) reader.fail(root, "", "expected a map with 'levels'");
  reader.reject_unknown(root, {"levels", "memory_per_worker", "sync_factor", "device"}, "");

  Cluster cluster;
  const YAML::Node levels = root["levels"];
  if (!levels) reader.fail(root, "levels", "missing");
  if (!levels.IsSequence()) reader.fail(levels, "levels", "expected a list of levels");
  if (levels.size() == 0) reader.fail(levels, "levels", "empty");
  long long workers = 1;
  for (std::size_t i = 0; i < levels.size(); ++i) {
    cluster.levels.push_back(parse_level(reader, levels[i], i));
    workers *= cluster.levels.back().units;
    if (workers > 65536) reader.fail(levels[i], "levels", "more than 65536 workers in all");
  }

  if (const YAML::Node memory = root["memory_per_worker"]) {
    const std::string text = reader.scalar(memory, "memory_per_worker");
    const auto bytes = detail::parse_bytes(text);
    if (!bytes) {
      reader.fail(memory, "memory_per_worker",
                  "cannot read '" + text + "' (bytes, or e.g. '80 GiB', '512 MB')");
    }
    if (!(*bytes > 0)) reader.fail(memory, "memory_per_worker", "must be positive");
    cluster.memory_per_worker_bytes = *bytes;
  }
  if (const YAML::Node factor = root["sync_factor"]) {
    cluster.sync_factor = reader.number(factor, "sync_factor");
    cluster.sync_factor_given = true;
    if (cluster.sync_factor < 0) reader.fail(factor, "sync_factor", "must not be negative");
  }
  if (const YAML::Node device = root["device"]) {
    cluster.device = reader.scalar(device, "device");
    if (cluster.device != "cpu" && cluster.device != "cuda") {
      reader.fail(device, "device", "expected cpu or cuda, got '" + cluster.device + "'");
    }
  }
  return cluster;
}

Cluster load_cluster(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path.string() + ": cannot open cluster file");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_cluster(text.str(), path.string());
}

}  // namespace tandem::planner
