#pragma once
// The model section's `tie` key (docs/config.md, "Tied parameters"): parameters shared by
// several layers, as one list of names (`tie: [0.weight, 13.weight]`) or a list of such lists.
// A name is "<layer index>.<parameter>", or in a graph model "<node>.<parameter>".
#include "models/model.hpp"
#include "models/model_spec.hpp"
#include "train/config_reader.hpp"

namespace tandem::train {

// Reads `m`'s `tie` into spec.ties (names in the "<layer index>.<parameter>" form), checking
// each name against `untied` (the model built from `spec` before its ties). Throws ConfigError
// at the name's file:line:col for an unknown parameter, one tied twice (tie_embeddings ties
// included) or a shape other than its tie's first name's; at the tie's for fewer than two names
// or entries that are neither names nor lists of names.
void read_ties(ConfigMap& m, const models::Model& untied, models::ModelSpec& spec);

}  // namespace tandem::train
