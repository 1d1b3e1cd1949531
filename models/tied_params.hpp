#pragma once
// Parameters tied across layers (a GPT's token embedding reused by its output head). Each layer
// that uses a tied parameter holds a copy of its own, so stages cut anywhere each have the copy
// their layers read; the copies start equal (every copy is initialised from the first's stream)
// and stay equal because every copy's gradient is replaced by the sum of all copies' gradients,
// taken in the group's order, before each update.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "models/kernels/kernels.hpp"
#include "models/param_set.hpp"

namespace tandem::models {

// One copy of a tied parameter: layer `layer`'s parameter number `index` ("13.weight").
struct TieCopy {
  int layer = 0;
  std::size_t index = 0;
  std::string name;
};

// The copies of one tied parameter in ascending layer order. copies[0] (the leader) is the one a
// checkpoint stores and whose initialisation every copy takes.
struct TieGroup {
  std::vector<TieCopy> copies;
  const TieCopy* find(const std::string& name) const;
  std::string describe() const;  // "0.tokens=13.weight"
};

// Resolves the spec's name lists ("<layer>.<local name>") against each layer's parameter specs
// (`specs[i]`, named "<i>.<name>" by `names[i]`). Throws std::invalid_argument naming the tie and
// the name: an unknown parameter, fewer than two copies, one named twice or in two ties, shapes
// that differ.
std::vector<TieGroup> resolve_ties(const std::vector<std::vector<std::string>>& ties,
                                   const std::vector<std::vector<std::string>>& names,
                                   const std::vector<std::vector<ParamSpec>>& specs);

// Replaces, for each group with two or more copies in `grads`, every such copy by their sum
// (taken in the group's order). On the sim device nothing is computed.
void sum_tied_copies(const Kernels& k, std::span<const TieGroup> ties, ParamSet& grads);

// For each group with copies in `grads`: the first of them (the tensor one reduction among stages
// carries), -1 where the group has none here.
std::vector<std::int64_t> first_local_copies(std::span<const TieGroup> ties, const ParamSet& grads);

// Writes, for each group, the first local copy into the others (after a reduction among stages
// left the group's total there).
void spread_first_copy(const Kernels& k, std::span<const TieGroup> ties, ParamSet& grads);

// The names a checkpoint leaves out: every copy but each group's leader.
std::vector<std::string> follower_names(std::span<const TieGroup> ties);

}  // namespace tandem::models
