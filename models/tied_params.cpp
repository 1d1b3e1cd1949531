#include "models/tied_params.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>

#include "models/detail/checks.hpp"

namespace tandem::models {
namespace {

std::string tie_label(std::size_t t, const std::vector<std::string>& names) {
  std::string out = "tie " + std::to_string(t) + " [";
  for (std::size_t i = 0; i < names.size(); ++i) out += (i ? ", " : "") + names[i];
  return out + "]";
}

bool has_data(const Tensor& t) {
  return t.defined() && t.device().has_data();
}

// The indices in `grads` of the group's copies that are there, in group order.
std::vector<std::int64_t> local_copies(const TieGroup& g, const ParamSet& grads) {
  std::vector<std::int64_t> out;
  for (const TieCopy& c : g.copies) {
    if (grads.contains(c.name)) out.push_back(grads.index_of(c.name));
  }
  return out;
}

}  // namespace

const TieCopy* TieGroup::find(const std::string& name) const {
  for (const TieCopy& c : copies) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

std::string TieGroup::describe() const {
  std::string out;
  for (std::size_t i = 0; i < copies.size(); ++i) out += (i ? "=" : "") + copies[i].name;
  return out;
}

std::vector<TieGroup> resolve_ties(const std::vector<std::vector<std::string>>& ties,
                                   const std::vector<std::vector<std::string>>& names,
                                   const std::vector<std::vector<ParamSpec>>& specs) {
  std::map<std::string, TieCopy> known;
  for (std::size_t i = 0; i < names.size(); ++i) {
    for (std::size_t j = 0; j < names[i].size(); ++j) {
      known[names[i][j]] = TieCopy{static_cast<int>(i), j, names[i][j]};
    }
  }
  std::map<std::string, std::size_t> tied_in;
  std::vector<TieGroup> out;
  for (std::size_t t = 0; t < ties.size(); ++t) {
    const std::string label = tie_label(t, ties[t]);
    if (ties[t].size() < 2) {
      throw std::invalid_argument(label + ": a tie names at least two parameters");
    }
    TieGroup g;
    for (const std::string& name : ties[t]) {
      const auto it = known.find(name);
      if (it == known.end()) {
        throw std::invalid_argument(label + ": no parameter '" + name +
                                    "' (names are <layer index>.<parameter>, e.g. 0.weight)");
      }
      const auto [seen, fresh] = tied_in.emplace(name, t);
      if (!fresh) {
        throw std::invalid_argument(
            label + ": '" + name + "' is already tied" +
            (seen->second == t ? " in this tie" : " in tie " + std::to_string(seen->second)));
      }
      g.copies.push_back(it->second);
    }
    std::sort(g.copies.begin(), g.copies.end(), [](const TieCopy& a, const TieCopy& b) {
      return a.layer != b.layer ? a.layer < b.layer : a.index < b.index;
    });
    const ParamSpec& lead = specs[g.copies[0].layer][g.copies[0].index];
    for (const TieCopy& c : g.copies) {
      const ParamSpec& s = specs[c.layer][c.index];
      if (s.shape != lead.shape) {
        throw std::invalid_argument(label + ": '" + c.name + "' has shape " + shape_str(s.shape) +
                                    " but '" + g.copies[0].name + "' has " + shape_str(lead.shape) +
                                    " (tied parameters share one shape)");
      }
    }
    out.push_back(std::move(g));
  }
  return out;
}

void sum_tied_copies(const Kernels& k, std::span<const TieGroup> ties, ParamSet& grads) {
  for (const TieGroup& g : ties) {
    const std::vector<std::int64_t> at = local_copies(g, grads);
    if (at.size() < 2 || !has_data(grads[at[0]])) continue;
    float* first = detail::ptr(grads[at[0]]);
    const std::int64_t n = grads[at[0]].numel();
    for (std::size_t i = 1; i < at.size(); ++i) {
      k.add(first, detail::ptr(grads[at[i]]), first, n);
    }
    for (std::size_t i = 1; i < at.size(); ++i) k.copy(first, detail::ptr(grads[at[i]]), n);
  }
}

std::vector<std::int64_t> first_local_copies(std::span<const TieGroup> ties,
                                             const ParamSet& grads) {
  std::vector<std::int64_t> out;
  for (const TieGroup& g : ties) {
    const std::vector<std::int64_t> at = local_copies(g, grads);
    out.push_back(at.empty() ? -1 : at[0]);
  }
  return out;
}

void spread_first_copy(const Kernels& k, std::span<const TieGroup> ties, ParamSet& grads) {
  for (const TieGroup& g : ties) {
    const std::vector<std::int64_t> at = local_copies(g, grads);
    if (at.size() < 2 || !has_data(grads[at[0]])) continue;
    for (std::size_t i = 1; i < at.size(); ++i) {
      k.copy(detail::ptr(grads[at[0]]), detail::ptr(grads[at[i]]), grads[at[0]].numel());
    }
  }
}

std::vector<std::string> follower_names(std::span<const TieGroup> ties) {
  std::vector<std::string> out;
  for (const TieGroup& g : ties) {
    for (std::size_t i = 1; i < g.copies.size(); ++i) out.push_back(g.copies[i].name);
  }
  return out;
}

}  // namespace tandem::models
