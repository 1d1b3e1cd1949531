#pragma once
// Tied parameters in whole-model weight sets (the files `tandem checkpoint export`,
// tandem::save_weights and `train.init_from` use; a checkpoint's newest weights): a file stores
// each tied parameter once, under its leader's name (the group's first copy, models/
// tied_params.hpp), and a reader gives every copy the leader's values. A file that holds a
// follower too is read only when the follower equals its leader bit for bit.
#include <optional>
#include <string>

#include "models/model.hpp"
#include "models/param_set.hpp"

namespace tandem::train {

// `params` with each follower copy of `model`'s ties that it lacks added as a copy of its
// leader (when `params` holds the leader), all in the model's order; names that are no
// parameter of the model follow, in their order. Unchanged for a model without ties.
models::ParamSet with_tied_copies(const models::ParamSet& params, const models::Model& model);

// `params` without the follower copies of `model`'s ties (what a file stores).
models::ParamSet without_tied_copies(const models::ParamSet& params, const models::Model& model);

// The first follower in `params` that differs from its leader there (shape or bits): "tensor
// '4.weight' differs from '0.tokens', the parameter it is tied to (...)"; nullopt when every
// follower held equals its leader or the leader is not there.
std::optional<std::string> differing_tied_copy(const models::ParamSet& params,
                                               const models::Model& model);

}  // namespace tandem::train
