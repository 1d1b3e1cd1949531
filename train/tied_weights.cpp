#include "train/tied_weights.hpp"

#include <cstring>
#include <set>
#include <vector>

namespace tandem::train {
namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor x = a.to(Device::cpu());
  const Tensor y = b.to(Device::cpu());
  return std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) == 0;
}

std::set<std::string> follower_set(const models::Model& model) {
  const std::vector<std::string> names = models::follower_names(model.ties());
  return {names.begin(), names.end()};
}

}  // namespace

models::ParamSet with_tied_copies(const models::ParamSet& params, const models::Model& model) {
  if (model.ties().empty()) return params;
  models::ParamSet filled = params;
  for (const models::TieGroup& g : model.ties()) {
    const std::string& leader = g.copies[0].name;
    if (!filled.contains(leader)) continue;
    for (std::size_t i = 1; i < g.copies.size(); ++i) {
      // A copy of its own: each copy is updated on its own, and tensors share storage
      // copy-on-write only.
      const Tensor value = filled.at(leader);
      if (!filled.contains(g.copies[i].name)) filled.add(g.copies[i].name, value.clone());
    }
  }
  models::ParamSet out;
  for (int l = 0; l < model.num_layers(); ++l) {
    for (const models::ParamSpec& ps : model.layer(l).param_specs()) {
      const std::string name = model.param_name(l, ps.name);
      if (filled.contains(name)) out.add(name, filled.at(name));
    }
  }
  for (std::int64_t i = 0; i < filled.size(); ++i) {
    if (!out.contains(filled.name(i))) out.add(filled.name(i), filled[i]);
  }
  return out;
}

models::ParamSet without_tied_copies(const models::ParamSet& params, const models::Model& model) {
  const std::set<std::string> followers = follower_set(model);
  if (followers.empty()) return params;
  models::ParamSet out;
  for (std::int64_t i = 0; i < params.size(); ++i) {
    if (followers.count(params.name(i)) == 0) out.add(params.name(i), params[i]);
  }
  return out;
}

std::optional<std::string> differing_tied_copy(const models::ParamSet& params,
                                               const models::Model& model) {
  for (const models::TieGroup& g : model.ties()) {
    const std::string& leader = g.copies[0].name;
    if (!params.contains(leader)) continue;
    for (std::size_t i = 1; i < g.copies.size(); ++i) {
      const std::string& name = g.copies[i].name;
      if (params.contains(name) && !same_bits(params.at(name), params.at(leader))) {
        return "tensor '" + name + "' differs from '" + leader +
               "', the parameter it is tied to (a tied parameter is stored once, under '" + leader +
               "'; a copy stored beside it must equal it bit for bit)";
      }
    }
  }
  return std::nullopt;
}

}  // namespace tandem::train
