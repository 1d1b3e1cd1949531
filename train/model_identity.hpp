#pragma once
// What a checkpoint or a model file records of the model that wrote it, beyond its name: one
// line per layer (its description, and the layers it reads in a graph), the loss and the tied
// parameters. Two models that differ in any layer (a ReLU made a GELU, a skip moved, a custom
// layer replaced) record different lines, though their parameter shapes may all agree; a resume
// and a load compare the lines and name the first that differs.
#include <optional>
#include <string>
#include <vector>

#include "models/model.hpp"

namespace tandem::train {

std::vector<std::string> model_identity(const models::Model& model);

// The first line where `recorded` (what a file holds) and `current` differ, said as "layer 3
// is 'gelu' in the file, 'relu' here"; nullopt when they are equal.
std::optional<std::string> identity_difference(const std::vector<std::string>& recorded,
                                               const std::vector<std::string>& current);

}  // namespace tandem::train
