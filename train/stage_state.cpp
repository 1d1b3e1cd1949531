#include "train/stage_state.hpp"

#include <charconv>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

#include "models/safetensors.hpp"

namespace tandem::train {
namespace {

std::string tensor_key(char kind, int stage, std::int64_t version, const std::string& name) {
  return std::string(1, kind) + ":" + std::to_string(stage) + ":" + std::to_string(version) + ":" +
         name;
}

// A decimal integer in [min, max] that is all of `text`; throws naming `what` (std::stoll
// accepted "12x" and threw a bare "stoll" for "x").
std::int64_t whole_number(std::string_view text, const std::string& what, std::int64_t min,
                          std::int64_t max) {
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < min || value > max) {
    throw std::runtime_error("stage states: " + what + " is '" + std::string(text) +
                             "', not an integer in [" + std::to_string(min) + ", " +
                             std::to_string(max) + "]");
  }
  return value;
}

constexpr std::int64_t kMaxInt = std::numeric_limits<int>::max();
constexpr std::int64_t kMaxInt64 = std::numeric_limits<std::int64_t>::max();

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
      << s.weight_bytes << ' ' << s.peak_bytes << ' ' << s.bytes_sent << ' ' << (s.finished ? 1 : 0)
      << ' ' << s.device_name;
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
    for (std::string word; in >> word;) {
      StageState st;
      st.stage = static_cast<int>(whole_number(word, "a stage in 'stages'", 0, kMaxInt));
      const std::string steps = "steps:" + std::to_string(st.stage);
      st.optimizer.steps = whole_number(meta(steps), "'" + steps + "'", 0, kMaxInt64);
      by_stage.emplace(st.stage, std::move(st));
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
    const std::string_view view = key;
    const int s = static_cast<int>(
        whole_number(view.substr(2, b - 2), "the stage of tensor '" + key + "'", 0, kMaxInt));
    const std::int64_t v = whole_number(view.substr(b + 1, d - b - 1),
                                        "the version of tensor '" + key + "'", 0, kMaxInt64);
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
        s.peak_activations >> s.peak_received >> s.weight_bytes >> s.peak_bytes >> s.bytes_sent >>
        finished;
    if (!in) throw std::runtime_error("stage states: malformed '" + key + "'");
    s.finished = finished != 0;
    std::getline(in >> std::ws, s.device_name);
    out.stats.push_back(std::move(s));
  }
  return out;
}

}  // namespace tandem::train
