#pragma once
// The names a config or an application ties parameters by. ModelSpec::ties holds
// "<layer index>.<parameter>" ("13.weight", as Model::param_name makes them); a graph model's
// parameters may also be named by their node ("h9.weight"), which is mapped to the node's index.
#include <string>
#include <string_view>

#include "models/model_spec.hpp"

namespace tandem::models {

// `name` in the "<layer index>.<parameter>" form: in a graph model a leading node name (the
// longest part before a '.' that names a node; a node's name wins over a layer index that reads
// the same) becomes the node's index. Any other name comes back as it is: resolve_ties refuses
// it when no parameter has it.
std::string tie_param_name(const ModelSpec& spec, std::string_view name);

}  // namespace tandem::models
