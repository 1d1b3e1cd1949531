#pragma once
// Per-layer costs measured by `tandem profile`: the planner's input (docs/planner.md).
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::planner {

// In LayerProfile::inputs: the model input, which no layer produces.
inline constexpr int kProfileModelInput = -1;

// Times are per minibatch of `Profile::minibatch` samples. backward_ms is the whole backward
// (input and weight gradients); backward_weight_ms is the part of it spent on weight gradients,
// which split-backward schedules run as W. The *_fixed_ms parts do not scale with the number
// of samples in a slice (kernel launches, per-call overheads); the rest scales linearly.
struct LayerProfile {
  std::string name;
  // A graph's edges: the earlier layers whose outputs this layer reads, ascending, each once
  // (kProfileModelInput: the model input). Empty: the previous layer (layer 0: the model
  // input), as in a chain; chain profiles leave every layer's empty and write no field.
  std::vector<int> inputs;
  double forward_ms = 0;
  double backward_ms = 0;
  double backward_weight_ms = 0;
  // The layer's output, per minibatch. In a chain it is what crosses a cut after the layer; in a
  // graph a cut carries every output read across it (cut_bytes.hpp).
  double activation_bytes = 0;
  double parameter_bytes = 0;  // one version of the layer's weights
  double memory_bytes = 0;     // kept per in-flight minibatch (saved tensors for backward)
  double forward_fixed_ms = 0;
  double backward_fixed_ms = 0;
  // The optimizer's update of the layer's weights (STEP), once per minibatch; 0: not measured.
  double step_ms = 0;
};

struct Profile {
  std::string model;   // informational
  std::string device;  // informational: where it was measured
  int minibatch = 1;   // samples per minibatch the times refer to
  // How many copies of each measurement ran at once, each on its share of the cores: what
  // each of `concurrent` stages sharing the machine sees (`tandem profile --concurrent`).
  int concurrent = 1;
  // The model input per minibatch: crosses every cut that a layer after it reading it lies
  // beyond (graphs only; a chain's first layer is always on the first stage).
  double input_bytes = 0;
  // The layers in a topological order of the graph: stages are contiguous runs of it.
  std::vector<LayerProfile> layers;
};

// Whether any layer names its inputs (a graph profile) rather than reading the previous one.
bool is_graph(const Profile& profile);

// Throws std::runtime_error naming `source` and the field: "p.json: layers[3].forward_ms:
// negative", "p.json: layers[3].inputs[0]: 5 is not an earlier layer".
Profile parse_profile(const nlohmann::json& json, std::string_view source);
Profile parse_profile_text(std::string_view text, std::string_view source);
Profile load_profile(const std::filesystem::path& path);

nlohmann::json profile_to_json(const Profile& profile);
// Writes to a temporary name and renames, so a reader never sees half a file.
void save_profile(const Profile& profile, const std::filesystem::path& path);

}  // namespace tandem::planner
