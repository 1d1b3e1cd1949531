#include "planner/cut_bytes.hpp"

#include <cstddef>

namespace tandem::planner {

std::vector<double> cut_bytes(const Profile& profile) {
  const auto n = static_cast<int>(profile.layers.size());
  std::vector<double> cuts(profile.layers.size());
  if (!is_graph(profile)) {
    for (int l = 0; l < n; ++l) cuts[l] = profile.layers[l].activation_bytes;
    return cuts;
  }
  // last_reader[p + 1]: the last layer reading producer p (p = -1: the model input).
  std::vector<int> last_reader(profile.layers.size() + 1, kProfileModelInput);
  for (int l = 0; l < n; ++l) {
    const std::vector<int>& inputs = profile.layers[l].inputs;
    if (inputs.empty()) {
      last_reader[l] = l;  // reads layer l - 1 (the model input for l = 0)
      continue;
    }
    for (const int p : inputs) last_reader[p + 1] = l;
  }
  // Summed producer by producer in layer order, so a cut's total does not depend on how its
  // tensors were found. The input's cuts: [0, last reader), a layer p's: [p, last reader).
  for (int p = kProfileModelInput; p < n - 1; ++p) {
    const double bytes = p < 0 ? profile.input_bytes : profile.layers[p].activation_bytes;
    for (int c = p < 0 ? 0 : p; c < last_reader[p + 1]; ++c) cuts[c] += bytes;
  }
  cuts[n - 1] = profile.layers[n - 1].activation_bytes;
  return cuts;
}

}  // namespace tandem::planner
