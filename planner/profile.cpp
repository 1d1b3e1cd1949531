#include "planner/profile.hpp"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>

namespace tandem::planner {
namespace {

using nlohmann::json;

[[noreturn]] void fail(std::string_view source, const std::string& field, const std::string& what) {
  std::string message(source);
  message += ": ";
  if (!field.empty()) message += field + ": ";
  message += what;
  throw std::runtime_error(message);
}

std::string type_of(const json& value) {
  return value.type_name();
}

void reject_unknown_keys(const json& object, const std::set<std::string>& known,
                         std::string_view source, const std::string& where) {
  for (const auto& [key, value] : object.items()) {
    if (!known.contains(key)) {
      fail(source, where.empty() ? key : where + "." + key, "unknown field");
    }
  }
}

double read_number(const json& object, const std::string& key, const std::string& where,
                   std::string_view source, bool required) {
  const std::string field = where.empty() ? key : where + "." + key;
  const auto it = object.find(key);
  if (it == object.end()) {
    if (required) fail(source, field, "missing");
    return 0;
  }
  if (!it->is_number()) fail(source, field, "expected a number, got " + type_of(*it));
  const double value = it->get<double>();
  if (!std::isfinite(value)) fail(source, field, "not finite");
  if (value < 0) {
    std::ostringstream os;
    os << "negative (" << value << ")";
    fail(source, field, os.str());
  }
  return value;
}

std::string read_string(const json& object, const std::string& key, const std::string& where,
                        std::string_view source) {
  const auto it = object.find(key);
  if (it == object.end()) return {};
  if (!it->is_string()) {
    fail(source, where.empty() ? key : where + "." + key, "expected a string, got " + type_of(*it));
  }
  return it->get<std::string>();
}

void check_not_above(double part, double whole, const std::string& part_field,
                     const std::string& whole_name, std::string_view source) {
  if (part > whole) fail(source, part_field, "exceeds " + whole_name);
}

// Layer `index`'s inputs: earlier layers or the model input, ascending and each once. Ascending
// order makes a duplicate or a reversed pair an error, not a second reading of one tensor.
std::vector<int> parse_inputs(const json& value, int index, const std::string& where,
                              std::string_view source) {
  const std::string field = where + ".inputs";
  if (!value.is_array()) fail(source, field, "expected an array, got " + type_of(value));
  if (value.empty()) fail(source, field, "empty (omit the field to read the previous layer)");
  // Distinct values in [-1, index) leave at most index + 1 entries.
  if (value.size() > static_cast<std::size_t>(index) + 1) {
    fail(source, field,
         std::to_string(value.size()) + " entries, more than the " + std::to_string(index + 1) +
             " earlier layers and model input");
  }
  std::vector<int> inputs;
  for (std::size_t k = 0; k < value.size(); ++k) {
    const std::string at = field + "[" + std::to_string(k) + "]";
    if (!value[k].is_number_integer()) {
      fail(source, at, "expected an integer, got " + type_of(value[k]));
    }
    const auto producer = value[k].get<long long>();
    if (producer == index) fail(source, at, "the layer reads itself");
    if (producer > index) {
      fail(source, at,
           std::to_string(producer) +
               " is not an earlier layer (a profile lists a graph in topological order)");
    }
    if (producer < kProfileModelInput) {
      fail(source, at, std::to_string(producer) + " is no layer (-1: the model input)");
    }
    if (!inputs.empty() && producer <= inputs.back()) {
      fail(source, at,
           producer == inputs.back() ? "duplicate of the entry before"
                                     : "not ascending (list each input once, in order)");
    }
    inputs.push_back(static_cast<int>(producer));
  }
  return inputs;
}

LayerProfile parse_layer(const json& object, int index, const std::string& where,
                         std::string_view source) {
  if (!object.is_object()) fail(source, where, "expected an object, got " + type_of(object));
  reject_unknown_keys(
      object,
      {"name", "inputs", "forward_ms", "backward_ms", "backward_weight_ms", "activation_bytes",
       "parameter_bytes", "memory_bytes", "forward_fixed_ms", "backward_fixed_ms", "step_ms"},
      source, where);
  LayerProfile layer;
  layer.name = read_string(object, "name", where, source);
  if (const auto inputs = object.find("inputs"); inputs != object.end()) {
    layer.inputs = parse_inputs(*inputs, index, where, source);
  }
  layer.forward_ms = read_number(object, "forward_ms", where, source, true);
  layer.backward_ms = read_number(object, "backward_ms", where, source, true);
  layer.backward_weight_ms = read_number(object, "backward_weight_ms", where, source, true);
  layer.activation_bytes = read_number(object, "activation_bytes", where, source, true);
  layer.parameter_bytes = read_number(object, "parameter_bytes", where, source, true);
  layer.memory_bytes = read_number(object, "memory_bytes", where, source, true);
  layer.forward_fixed_ms = read_number(object, "forward_fixed_ms", where, source, false);
  layer.backward_fixed_ms = read_number(object, "backward_fixed_ms", where, source, false);
  layer.step_ms = read_number(object, "step_ms", where, source, false);
  check_not_above(layer.backward_weight_ms, layer.backward_ms, where + ".backward_weight_ms",
                  "backward_ms", source);
  check_not_above(layer.forward_fixed_ms, layer.forward_ms, where + ".forward_fixed_ms",
                  "forward_ms", source);
  check_not_above(layer.backward_fixed_ms, layer.backward_ms, where + ".backward_fixed_ms",
                  "backward_ms", source);
  return layer;
}

}  // namespace

bool is_graph(const Profile& profile) {
  for (const LayerProfile& layer : profile.layers) {
    if (!layer.inputs.empty()) return true;
  }
  return false;
}

Profile parse_profile(const json& root, std::string_view source) {
  if (!root.is_object()) fail(source, "", "expected a JSON object, got " + type_of(root));
  reject_unknown_keys(root, {"model", "device", "minibatch", "concurrent", "input_bytes", "layers"},
                      source, "");
  Profile profile;
  profile.model = read_string(root, "model", "", source);
  profile.device = read_string(root, "device", "", source);

  const auto minibatch = root.find("minibatch");
  if (minibatch == root.end()) fail(source, "minibatch", "missing");
  if (!minibatch->is_number_integer()) {
    fail(source, "minibatch", "expected an integer, got " + type_of(*minibatch));
  }
  const auto samples = minibatch->get<long long>();
  if (samples < 1 || samples > (1 << 30)) fail(source, "minibatch", "must be positive");
  profile.minibatch = static_cast<int>(samples);

  if (const auto concurrent = root.find("concurrent"); concurrent != root.end()) {
    if (!concurrent->is_number_integer()) {
      fail(source, "concurrent", "expected an integer, got " + type_of(*concurrent));
    }
    const auto copies = concurrent->get<long long>();
    if (copies < 1 || copies > 4096) fail(source, "concurrent", "must be in 1..4096");
    profile.concurrent = static_cast<int>(copies);
  }

  profile.input_bytes = read_number(root, "input_bytes", "", source, false);

  const auto layers = root.find("layers");
  if (layers == root.end()) fail(source, "layers", "missing");
  if (!layers->is_array()) fail(source, "layers", "expected an array, got " + type_of(*layers));
  if (layers->empty()) fail(source, "layers", "empty");
  profile.layers.reserve(layers->size());
  for (std::size_t i = 0; i < layers->size(); ++i) {
    profile.layers.push_back(parse_layer((*layers)[i], static_cast<int>(i),
                                         "layers[" + std::to_string(i) + "]", source));
  }
  return profile;
}

Profile parse_profile_text(std::string_view text, std::string_view source) {
  json root;
  try {
    root = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {  // parse_error, and out_of_range for number overflow
    fail(source, "", std::string("invalid JSON: ") + e.what());
  }
  return parse_profile(root, source);
}

Profile load_profile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path.string() + ": cannot open profile");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_profile_text(text.str(), path.string());
}

nlohmann::json profile_to_json(const Profile& profile) {
  json root = json::object();
  if (!profile.model.empty()) root["model"] = profile.model;
  if (!profile.device.empty()) root["device"] = profile.device;
  root["minibatch"] = profile.minibatch;
  if (profile.concurrent != 1) root["concurrent"] = profile.concurrent;
  if (profile.input_bytes > 0) root["input_bytes"] = profile.input_bytes;
  json layers = json::array();
  for (const LayerProfile& layer : profile.layers) {
    json entry = json::object();
    if (!layer.name.empty()) entry["name"] = layer.name;
    if (!layer.inputs.empty()) entry["inputs"] = layer.inputs;
    entry["forward_ms"] = layer.forward_ms;
    entry["backward_ms"] = layer.backward_ms;
    entry["backward_weight_ms"] = layer.backward_weight_ms;
    entry["activation_bytes"] = layer.activation_bytes;
    entry["parameter_bytes"] = layer.parameter_bytes;
    entry["memory_bytes"] = layer.memory_bytes;
    if (layer.forward_fixed_ms > 0) entry["forward_fixed_ms"] = layer.forward_fixed_ms;
    if (layer.backward_fixed_ms > 0) entry["backward_fixed_ms"] = layer.backward_fixed_ms;
    if (layer.step_ms > 0) entry["step_ms"] = layer.step_ms;
    layers.push_back(std::move(entry));
  }
  root["layers"] = std::move(layers);
  return root;
}

void save_profile(const Profile& profile, const std::filesystem::path& path) {
  // Validate what we write with the same rules a reader applies.
  const json root = profile_to_json(profile);
  parse_profile(root, path.string());
  std::filesystem::path temporary = path;
  temporary += ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error(temporary.string() + ": cannot write profile");
    out << root.dump(2) << '\n';
    out.flush();
    if (!out) throw std::runtime_error(temporary.string() + ": write failed");
  }
  std::filesystem::rename(temporary, path);
}

}  // namespace tandem::planner
