#include "apps/stage_state.hpp"

#include <sstream>
#include <stdexcept>
#include <string>

#include "models/safetensors.hpp"

namespace tandem::apps {
namespace {

std::string tensor_key(char kind, int stage, std::int64_t version, const std::string& name) {
  return std::string(1, kind) + ":" + std::to_string(stage) + ":" + std::to_string(version) + ":" +
         name;
}

}  // namespace

std::vector<std::byte> encode_stage_states(const StageStateBundle& bundle) {
  models::ParamSet tensors;
  models::SafetensorsMetadata meta;
  std::string stages;
  for (const StageState& st : bundle.stages) {
    stages += std::to_string(st.stage) + " ";
    meta["steps:" + std::to_string(st.stage)] = std::to_string(st.optimizer.steps);
    for (std::int64_t i = 0; i < st.latest.size(); ++i) {
      tensors.add(tensor_key('L', st.stage, 0, st.latest.name(i)), st.latest[i]);
    }
    for (std::int64_t i = 0; i < st.optimizer.state.size(); ++i) {
      tensors.add(tensor_key('O', st.stage, 0, st.optimizer.state.name(i)), st.optimizer.state[i]);
    }
    for (const auto& [v, params] : st.older) {
      for (std::int64_t i = 0; i < params.size(); ++i) {
        tensors.add(tensor_key('V', st.stage, v, params.name(i)), params[i]);
      }
    }
  }
  meta["stages"] = stages;
  for (const actors::StageStats& s : bundle.stats) {
    std::ostringstream o;
    o.precision(17);
    o << s.device << ' ' << s.stage << ' ' << s.replica << ' ' << s.actions << ' ' << s.busy_s
      << ' ' << s.peak_versions << ' ' << s.peak_activations << ' ' << s.peak_received << ' '
      << s.weight_bytes << ' ' << s.peak_bytes << ' ' << (s.finished ? 1 : 0) << ' '
      << s.device_name;
    meta["stats:" + std::to_string(s.device)] = o.str();
  }
  return models::safetensors_bytes(tensors, meta);
}

StageStateBundle decode_stage_states(std::span<const std::byte> bytes) {
  const models::SafetensorsContent c = models::read_safetensors_bytes(bytes, "stage states");
  StageStateBundle out;
  std::map<int, StageState> by_stage;
  const auto meta = [&](const std::string& key) -> const std::string& {
    auto it = c.metadata.find(key);
    if (it == c.metadata.end()) throw std::runtime_error("stage states: no '" + key + "'");
    return it->second;
  };
  {
    std::istringstream in(meta("stages"));
    for (int s; in >> s;) {
      StageState st;
      st.stage = s;
      st.optimizer.steps = std::stoll(meta("steps:" + std::to_string(s)));
      by_stage.emplace(s, std::move(st));
    }
  }
  for (std::int64_t i = 0; i < c.tensors.size(); ++i) {
    const std::string& key = c.tensors.name(i);
    const auto a = key.find(':');
    const auto b = a == std::string::npos ? a : key.find(':', a + 1);
    const auto d = b == std::string::npos ? b : key.find(':', b + 1);
    if (d == std::string::npos || a != 1) {
      throw std::runtime_error("stage states: malformed tensor name '" + key + "'");
    }
    const int s = std::stoi(key.substr(2, b - 2));
    const std::int64_t v = std::stoll(key.substr(b + 1, d - b - 1));
    const std::string name = key.substr(d + 1);
    auto it = by_stage.find(s);
    if (it == by_stage.end()) {
      throw std::runtime_error("stage states: tensor '" + key + "' of an unlisted stage");
    }
    switch (key[0]) {
      case 'L':
        it->second.latest.add(name, c.tensors[i]);
        break;
      case 'O':
        it->second.optimizer.state.add(name, c.tensors[i]);
        break;
      case 'V':
        it->second.older[v].add(name, c.tensors[i]);
        break;
      default:
        throw std::runtime_error("stage states: malformed tensor name '" + key + "'");
    }
  }
  for (auto& [s, st] : by_stage) out.stages.push_back(std::move(st));
  for (const auto& [key, value] : c.metadata) {
    if (key.rfind("stats:", 0) != 0) continue;
    std::istringstream in(value);
    actors::StageStats s;
    int finished = 0;
    in >> s.device >> s.stage >> s.replica >> s.actions >> s.busy_s >> s.peak_versions >>
        s.peak_activations >> s.peak_received >> s.weight_bytes >> s.peak_bytes >> finished;
    if (!in) throw std::runtime_error("stage states: malformed '" + key + "'");
    s.finished = finished != 0;
    std::getline(in >> std::ws, s.device_name);
    out.stats.push_back(std::move(s));
  }
  return out;
}

}  // namespace tandem::apps
