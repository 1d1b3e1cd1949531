#include "train/model_identity.hpp"

#include <algorithm>

#include "models/tied_params.hpp"

namespace tandem::train {

// Built by appending: GCC 12 misreads some temporaries' concatenations (-Wrestrict).
std::vector<std::string> model_identity(const models::Model& model) {
  std::vector<std::string> lines;
  for (int i = 0; i < model.num_layers(); ++i) {
    std::string line = "layer ";
    line += std::to_string(i);
    line += ": ";
    line += model.layer(i).describe();
    if (!model.is_chain()) {
      line += " <-";
      for (const int s : model.sources(i)) {
        line += ' ';
        line += s == models::Model::kModelInput ? std::string("input") : std::to_string(s);
      }
    }
    lines.push_back(std::move(line));
  }
  lines.push_back("loss: " + model.loss().name());
  for (const models::TieGroup& g : model.ties()) lines.push_back("tie: " + g.describe());
  return lines;
}

std::optional<std::string> identity_difference(const std::vector<std::string>& recorded,
                                               const std::vector<std::string>& current) {
  const std::size_t n = std::min(recorded.size(), current.size());
  for (std::size_t i = 0; i < n; ++i) {
    if (recorded[i] != current[i]) {
      return "the file has '" + recorded[i] + "' where this model has '" + current[i] + "'";
    }
  }
  if (recorded.size() == current.size()) return std::nullopt;
  if (recorded.size() > n) return "the file has '" + recorded[n] + "', which this model lacks";
  return "this model has '" + current[n] + "', which the file lacks";
}

}  // namespace tandem::train
