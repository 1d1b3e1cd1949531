#include "train/job_weights.hpp"

#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "train/process_group.hpp"
#include "train/stage_state.hpp"
#include "transport/control_frame.hpp"

namespace tandem::train {
namespace {

using nlohmann::json;

std::string key(const char* what, int rank) {
  return std::string("final/") + what + "/" + std::to_string(rank);
}

// The model's parameter names in order: the order of a whole model's fingerprint.
std::vector<std::string> model_names(const models::Model& model) {
  std::vector<std::string> out;
  for (int l = 0; l < model.num_layers(); ++l) {
    for (const models::ParamSpec& ps : model.layer(l).param_specs()) {
      out.push_back(model.param_name(l, ps.name));
    }
  }
  return out;
}

void put_fingerprints(ProcessGroup& group, const models::ParamSet& own) {
  json parts = json::array();
  for (std::int64_t i = 0; i < own.size(); ++i) {
    parts.push_back({own.name(i), models::ParamSet::tensor_fingerprint(own.name(i), own[i])});
  }
  const std::string text = parts.dump();
  group.put(key("fingerprints", group.rank()), std::as_bytes(std::span(text.data(), text.size())));
}

// Another rank's [[name, fingerprint], ...], each name once.
void take_fingerprints(ProcessGroup& group, int k, std::map<std::string, std::uint64_t>& into) {
  const std::vector<std::byte> bytes = group.take(key("fingerprints", k));
  const std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  const json parts = json::parse(text, nullptr, false);
  const auto fail = [&](const std::string& what) {
    throw std::runtime_error(group.describe(k) + " sent malformed weight fingerprints (" + what +
                             "): '" + transport::printable(text.substr(0, 120)) + "'");
  };
  if (parts.is_discarded() || !parts.is_array()) fail("not a JSON list");
  for (const json& p : parts) {
    if (!p.is_array() || p.size() != 2 || !p[0].is_string() || !p[1].is_number_unsigned()) {
      fail("an entry is not [name, fingerprint]");
    }
    if (!into.emplace(p[0].get<std::string>(), p[1].get<std::uint64_t>()).second) {
      fail("'" + p[0].get<std::string>() + "' twice");
    }
  }
}

std::uint64_t whole_fingerprint(ProcessGroup& group, const models::Model& model,
                                const models::ParamSet& own) {
  std::map<std::string, std::uint64_t> parts;
  for (std::int64_t i = 0; i < own.size(); ++i) {
    parts.emplace(own.name(i), models::ParamSet::tensor_fingerprint(own.name(i), own[i]));
  }
  for (int k = 1; k < group.world_size(); ++k) take_fingerprints(group, k, parts);
  std::vector<std::uint64_t> ordered;
  for (const std::string& name : model_names(model)) {
    const auto it = parts.find(name);
    if (it == parts.end()) {
      throw std::runtime_error("no rank reported weight '" + name + "' at the end of the job");
    }
    ordered.push_back(it->second);
  }
  return models::ParamSet::combine_fingerprints(ordered);
}

models::ParamSet gather_whole(ProcessGroup& group, const models::Model& model,
                              const models::ParamSet& own) {
  models::ParamSet all = own;
  for (int k = 1; k < group.world_size(); ++k) {
    const StageStateBundle theirs = decode_stage_states(group.take(key("weights", k)));
    for (const StageState& st : theirs.stages) {
      for (std::int64_t i = 0; i < st.latest.size(); ++i) {
        if (!all.contains(st.latest.name(i))) all.add(st.latest.name(i), st.latest[i]);
      }
    }
  }
  const models::ParamSet expected = model.init_params(0, Device::sim());
  models::ParamSet ordered;
  for (std::int64_t i = 0; i < expected.size(); ++i) {
    const std::string& name = expected.name(i);
    if (!all.contains(name)) {
      throw std::runtime_error("no rank sent weight '" + name + "' for the final evaluation");
    }
    const Tensor& t = all.at(name);
    if (t.shape() != expected[i].shape() || t.dtype() != expected[i].dtype()) {
      throw std::runtime_error("weight '" + name + "' sent for the final evaluation is " +
                               t.describe() + ", the model's is " + expected[i].describe());
    }
    ordered.add(name, t);
  }
  return ordered;
}

}  // namespace

JobWeights finish_job_weights(ProcessGroup& group, const models::Model& model,
                              const models::ParamSet& own, bool gather_weights) {
  JobWeights out;
  if (group.rank() > 0) {
    put_fingerprints(group, own);
    if (gather_weights) {
      group.put(key("weights", group.rank()),
                encode_stage_states(StageStateBundle{{StageState{.stage = 0, .latest = own}}, {}}));
    }
    out.fingerprint = own.fingerprint();
    return out;
  }
  out.fingerprint = whole_fingerprint(group, model, own);
  if (gather_weights) out.whole = gather_whole(group, model, own);
  return out;
}

}  // namespace tandem::train
