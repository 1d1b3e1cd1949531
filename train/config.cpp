#include "train/config.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <sstream>

#include "models/delay_correction.hpp"
#include "models/graph_builder.hpp"
#include "models/model.hpp"
#include "schedules/schedule_kind.hpp"
#include "train/config_check.hpp"
#include "train/config_limits.hpp"
#include "train/config_reader.hpp"
#include "train/config_ties.hpp"
#include "train/job_rules.hpp"
#include "transport/wire_message.hpp"

namespace tandem::train {
namespace {

namespace data = models::data;

// Top-level sections; a new section adds its name here and its reader below.
constexpr std::array<std::string_view, 5> kTopLevelSections = {"model", "data", "train", "pipeline",
                                                               "cluster"};

// Ranks beyond this are a typo (transport/control_frame.hpp's kMaxWorldSize).
constexpr int64_t kMaxRank = 65535;

// More replicas of one stage than any machine room holds: a typo, refused before a placement
// per replica is made.
constexpr int64_t kMaxReplicas = 65536;

// Config files are small; a larger file is not one (a data file given by mistake).
constexpr size_t kMaxConfigBytes = size_t{16} << 20;

std::string join(std::span<const std::string_view> names) {
  std::string out;
  for (std::string_view n : names) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

// "1.23e+09": counts too large to read digit by digit.
std::string fmt_count(double n) {
  char text[32];
  std::snprintf(text, sizeof text, n < 1e6 ? "%.0f" : "%.3g", n);
  return text;
}

// Minibatches per step: beyond this a run is better served by a larger minibatch.
constexpr int64_t kMaxAccumulate = 65536;

int64_t positive(ConfigMap& m, std::string_view key, std::optional<int64_t> fallback = {}) {
  const int64_t v = fallback ? m.get_or<int64_t>(key, *fallback) : m.get<int64_t>(key);
  if (v < 1) m.fail(key, "must be >= 1, got " + std::to_string(v));
  return v;
}

int64_t non_negative(ConfigMap& m, std::string_view key, int64_t fallback) {
  const int64_t v = m.get_or<int64_t>(key, fallback);
  if (v < 0) m.fail(key, "must be >= 0, got " + std::to_string(v));
  return v;
}

// A model dimension: >= 1 and at most kMaxDimension, so the size estimates stay exact.
int64_t dimension(ConfigMap& m, std::string_view key, std::optional<int64_t> fallback = {}) {
  const int64_t v = positive(m, key, fallback);
  if (v > kMaxDimension) {
    m.fail(key, "must be <= " + std::to_string(kMaxDimension) + ", got " + std::to_string(v));
  }
  return v;
}

double in_range(ConfigMap& m, std::string_view key, double fallback, double lo, double hi,
                bool hi_open = true) {
  const double v = m.get_or<double>(key, fallback);
  if (v < lo || v > hi || (hi_open && v == hi)) {
    m.fail(key, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                    (hi_open ? ")" : "]") + ", got " + std::to_string(v));
  }
  return v;
}

// ---- model ----

// The key a model's size grows with, for errors about its size.
std::string_view size_key(const models::ModelSpec& spec) {
  if (spec.name == "mlp") return "widths";
  if (spec.name == "graph") return "graph";
  if (models::is_sequence_model(spec.name)) return "d_model";
  if (models::is_image_model(spec.name)) return "width_mult";
  // GPT: the blocks or the embedding and head, whichever holds more.
  const auto d = static_cast<double>(spec.d_model);
  const double blocks = static_cast<double>(spec.layers) * 12 * d * d;
  return blocks >= 2 * static_cast<double>(spec.vocab) * d ? "layers" : "vocab";
}

// Weights and their gradients, 4 bytes each: the least any run of the model holds.
void check_parameters(ConfigMap& m, const models::ModelSpec& spec, double parameters,
                      const Machine& machine) {
  const double bytes = 8 * parameters;
  if (bytes > machine.memory_bytes) {
    m.fail(size_key(spec), "the model would have about " + fmt_count(parameters) +
                               " parameters: " + human_bytes(bytes) +
                               " for its weights and gradients alone, more than this machine's " +
                               human_bytes(machine.memory_bytes) + " of memory");
  }
}

// The most nodes a graph may have: enough for any model written by hand or generated, and a
// bound on what a hostile config can make the reader build.
constexpr size_t kMaxGraphNodes = 100000;
// The most LSTM layers of a gnmt: far past the paper's 16, and a bound on its graph.
constexpr int64_t kMaxGnmtLayers = 1024;

models::GraphNode read_graph_node(ConfigMap n) {
  models::GraphNode node;
  node.name = n.get<std::string>("name");
  node.layer = n.get<std::string>("layer");
  node.inputs = n.get_or<std::vector<std::string>>("inputs", {});
  if (node.layer == "linear") {
    node.out = dimension(n, "out");
    node.activation = n.get_or<std::string>("activation", "none");
  } else if (node.layer == "dropout") {
    node.p = static_cast<float>(in_range(n, "p", 0.0, 0.0, 1.0));
  } else if (node.layer == "embedding") {
    node.vocab = dimension(n, "vocab");
    node.out = dimension(n, "out");
  } else if (node.layer == "concat") {
    node.axis = static_cast<int>(n.get_or<int64_t>("axis", -1));
    if (node.axis == 0 || node.axis < -8 || node.axis > 8) {
      n.fail("axis", "must be a dimension past the batch: 1 to 8, or -1 to -8 from the end");
    }
  } else if (node.layer == "conv2d" || node.layer == "max_pool" || node.layer == "avg_pool") {
    // A window larger than its (padded) input is the graph builder's error: it knows the shapes.
    node.kernel = dimension(n, "kernel");
    node.stride = dimension(n, "stride", node.layer == "conv2d" ? 1 : node.kernel);
    node.pad = non_negative(n, "pad", 0);
    if (node.pad > kMaxDimension) {
      n.fail("pad",
             "must be <= " + std::to_string(kMaxDimension) + ", got " + std::to_string(node.pad));
    }
    if (node.layer == "conv2d") {
      node.out = dimension(n, "out");
      node.kernel_w = dimension(n, "kernel_w", node.kernel);
      node.pad_w = non_negative(n, "pad_w", node.pad);
      if (node.pad_w > kMaxDimension) {
        n.fail("pad_w", "must be <= " + std::to_string(kMaxDimension) + ", got " +
                            std::to_string(node.pad_w));
      }
      node.activation = n.get_or<std::string>("activation", "none");
    }
  } else if (node.layer == "sim") {
    // A sim-only node (models/layers/sim_node.hpp): its output's width and its weights.
    node.out = dimension(n, "out");
    node.params = non_negative(n, "params", 0);
    if (node.params > kMaxDimension) {
      n.fail("params", "must be <= " + std::to_string(kMaxDimension) + ", got " +
                           std::to_string(node.params));
    }
  } else if (node.layer == "lstm") {
    node.hidden = dimension(n, "hidden");
    node.bidirectional = n.get_or<bool>("bidirectional", false);
  } else if (node.layer == "reshape") {
    node.shape = n.get<std::vector<int64_t>>("shape");
    if (node.shape.empty() || node.shape.size() > 3) n.fail("shape", "needs 1 to 3 dimensions");
    for (const int64_t d : node.shape) {
      if (d < 1 || d > kMaxDimension) {
        n.fail("shape", "dimensions must be in [1, " + std::to_string(kMaxDimension) + "]");
      }
    }
  }
  n.finish();
  return node;
}

// The most named inputs a graph may declare.
constexpr size_t kMaxGraphInputs = 64;

std::vector<int64_t> input_shape(ConfigMap& in) {
  std::vector<int64_t> shape = in.get<std::vector<int64_t>>("shape");
  if (shape.empty() || shape.size() > 3) in.fail("shape", "needs 1 to 3 dimensions per sample");
  for (const int64_t d : shape) {
    if (d < 1 || d > kMaxDimension) {
      in.fail("shape", "dimensions must be in [1, " + std::to_string(kMaxDimension) + "], got " +
                           std::to_string(d));
    }
  }
  return shape;
}

// inputs: [{name, shape, dtype}, ...], the graph's named inputs (models/input_layout.hpp).
void read_graph_inputs(ConfigMap& m, models::ModelSpec& spec) {
  const YAML::Node& list = m.node("inputs");
  if (!list.IsSequence() || list.size() == 0) m.fail("inputs", "expected a list of inputs");
  if (list.size() > kMaxGraphInputs) {
    m.fail("inputs", std::to_string(list.size()) + " inputs, more than the " +
                         std::to_string(kMaxGraphInputs) + " a graph may have");
  }
  for (size_t i = 0; i < list.size(); ++i) {
    ConfigMap in(list[i], m.origin(), m.key_path("inputs") + "[" + std::to_string(i) + "]");
    models::GraphInput gi;
    gi.name = in.get<std::string>("name");
    gi.shape = input_shape(in);
    gi.dtype = in.get_or<std::string>("dtype", "f32");
    if (gi.dtype != "f32" && gi.dtype != "i32") {
      in.fail("dtype", "'" + gi.dtype + "' (expected f32 or i32)");
    }
    // Inputs of mixed dtypes travel as f32 (models/input_layout.hpp).
    for (const models::GraphInput& other : spec.graph.inputs) {
      if (other.name == gi.name) in.fail("name", "'" + gi.name + "' is declared twice");
    }
    in.finish();
    spec.graph.inputs.push_back(std::move(gi));
  }
}

// model: {input: {name, shape} or inputs: [...], graph: [{name, layer, inputs, ...}, ...]}.
// Errors about a node
// point at its line.
void read_graph(ConfigMap& m, models::ModelSpec& spec) {
  if (m.has("inputs")) {
    if (m.has("input")) m.fail("input", "give either 'input' (one) or 'inputs' (a list)");
    read_graph_inputs(m, spec);
  } else {
    ConfigMap in = m.map("input");
    spec.graph.input_name = in.get_or<std::string>("name", "input");
    spec.graph.input_shape = input_shape(in);
    in.finish();
  }
  const YAML::Node& nodes = m.node("graph");
  if (!nodes.IsSequence() || nodes.size() == 0) m.fail("graph", "expected a list of nodes");
  if (nodes.size() > kMaxGraphNodes) {
    m.fail("graph", std::to_string(nodes.size()) + " nodes, more than the " +
                        std::to_string(kMaxGraphNodes) + " a graph may have");
  }
  std::vector<ConfigLocation> where;
  for (size_t i = 0; i < nodes.size(); ++i) {
    ConfigMap n(nodes[i], m.origin(), m.key_path("graph") + "[" + std::to_string(i) + "]");
    where.push_back(n.where());
    spec.graph.nodes.push_back(read_graph_node(std::move(n)));
  }
  try {
    (void)models::build_graph(spec);
  } catch (const models::GraphError& e) {
    if (e.node() < 0) m.fail("graph", e.what());
    throw ConfigError(where[static_cast<size_t>(e.node())],
                      m.key_path("graph") + "[" + std::to_string(e.node()) + "]", e.what());
  }
}

models::ModelSpec read_model(ConfigMap m, const Machine& machine, double* parameters, int* layers) {
  models::ModelSpec spec;
  // A graph is the model: `graph:` alone names it.
  spec.name = m.has("graph") ? m.get_or<std::string>("name", "graph") : m.get<std::string>("name");
  if (spec.name == "graph") {
    read_graph(m, spec);
  } else if (m.has("graph")) {
    m.fail("graph", "a graph is its own model: drop 'name: " + spec.name + "'");
  } else if (spec.name == "mlp") {
    spec.widths = m.get<std::vector<int64_t>>("widths");
    if (spec.widths.size() < 2) m.fail("widths", "needs at least [in_features, classes]");
    for (size_t i = 0; i < spec.widths.size(); ++i) {
      if (spec.widths[i] < 1 || spec.widths[i] > kMaxDimension) {
        m.fail("widths", "entry " + std::to_string(i) + " must be in [1, " +
                             std::to_string(kMaxDimension) + "], got " +
                             std::to_string(spec.widths[i]));
      }
    }
  } else if (spec.name == "gpt") {
    spec.layers = dimension(m, "layers");
    spec.d_model = dimension(m, "d_model");
    spec.heads = dimension(m, "heads");
    spec.seq_len = dimension(m, "seq_len");
    spec.vocab = dimension(m, "vocab");
    spec.d_ff = non_negative(m, "d_ff", 0);
    if (spec.d_ff > kMaxDimension) {
      m.fail("d_ff",
             "must be <= " + std::to_string(kMaxDimension) + ", got " + std::to_string(spec.d_ff));
    }
    if (spec.d_model % spec.heads != 0) {
      m.fail("heads", "d_model " + std::to_string(spec.d_model) + " is not divisible by " +
                          std::to_string(spec.heads) + " heads");
    }
    spec.tie_embeddings = m.get_or<bool>("tie_embeddings", false);
  } else if (spec.name == "gnmt") {
    spec.layers = dimension(m, "layers");
    // Each layer is a few graph nodes: bounded like a graph's nodes.
    if (spec.layers < 4 || spec.layers % 2 != 0 || spec.layers > kMaxGnmtLayers) {
      m.fail("layers", "must be even, in [4, " + std::to_string(kMaxGnmtLayers) +
                           "] (half encoder, half decoder; the paper's 8 or 16), got " +
                           std::to_string(spec.layers));
    }
    spec.d_model = dimension(m, "d_model");
    if (spec.d_model % 2 != 0) {
      m.fail("d_model",
             "must be even (the bidirectional first layer has d_model / 2 per "
             "direction), got " +
                 std::to_string(spec.d_model));
    }
    spec.vocab = dimension(m, "vocab");
    spec.seq_len = dimension(m, "seq_len");
  } else if (spec.name == "s2vt") {
    spec.d_model = dimension(m, "d_model");
    spec.vocab = dimension(m, "vocab");
    spec.seq_len = dimension(m, "seq_len");
    spec.frames = dimension(m, "frames");
    spec.frame_features = dimension(m, "frame_features");
  } else if (models::is_image_model(spec.name)) {
    spec.width_mult = m.get_or<double>("width_mult", spec.width_mult);
    if (!(spec.width_mult > 0) || spec.width_mult > 1024) {
      m.fail("width_mult", "must be in (0, 1024], got " + std::to_string(spec.width_mult));
    }
    spec.in_channels = dimension(m, "in_channels", spec.in_channels);
    spec.image_size = dimension(m, "image_size", spec.image_size);
    if (spec.image_size > 65536) {
      m.fail("image_size", "must be <= 65536, got " + std::to_string(spec.image_size));
    }
    if (spec.name == "vgg16" && spec.image_size % 32 != 0) {
      m.fail("image_size", "must be a multiple of 32 (five 2x2 max-pools), got " +
                               std::to_string(spec.image_size));
    }
    spec.classes = dimension(m, "classes", spec.classes);
  } else {
    m.fail("name",
           "unknown model '" + spec.name +
               "' (expected mlp, gpt, vgg16, alexnet, resnet50, inception_v3, gnmt, s2vt or "
               "graph)");
  }
  if (spec.name != "mlp" && spec.name != "graph") {
    spec.dropout = static_cast<float>(in_range(m, "dropout", 0.0, 0.0, 1.0));
  }
  if (spec.name != "gpt" && m.has("tie_embeddings")) {
    m.fail("tie_embeddings", "only a gpt has a token embedding and a head to tie (a " + spec.name +
                                 " ties parameters by name: tie: [0.weight, 2.weight])");
  }
  // Read once the model is built (its parameters are what the names are checked against).
  const bool has_ties = m.has("tie");
  spec.loss = m.get_or<std::string>("loss", spec.loss);
  try {
    (void)models::make_loss(spec.loss);
  } catch (const std::invalid_argument& e) {
    m.fail("loss", e.what());
  }
  m.finish();
  // A GPT's layer objects alone can exhaust memory (`layers: 100000000`): its size comes from
  // the formula before any layer is built. The other models have a bounded number of layers.
  if (spec.name == "gpt") check_parameters(m, spec, gpt_parameter_estimate(spec), machine);
  // The zoo checks what is left (e.g. a vgg16 too narrow to build).
  std::optional<models::Model> untied;
  try {
    untied.emplace(models::Model::build(spec));
  } catch (const std::invalid_argument& e) {
    m.fail_here(std::string("invalid model: ") + e.what());
  }
  *parameters = parameter_count(*untied);
  *layers = untied->num_layers();
  if (has_ties) read_ties(m, *untied, spec);
  check_parameters(m, spec, *parameters, machine);
  return spec;
}

// Per-sample input size, classes and task the model expects.
int64_t model_classes(const models::ModelSpec& s) {
  if (s.name == "mlp") return s.widths.back();
  if (s.name == "graph") return models::Model::build(s).activation_shapes(1).back().back();
  if (s.name == "gpt" || models::is_sequence_model(s.name)) return s.vocab;
  return s.classes;
}

// ---- data ----

int64_t check_classes(ConfigMap& m, const models::ModelSpec& model) {
  const int64_t limit = model_classes(model);
  const int64_t classes = m.get_or<int64_t>("classes", limit);
  if (classes < 2 || classes > limit) {
    m.fail("classes", "must be in [2, " + std::to_string(limit) + "] (the model has " +
                          std::to_string(limit) + " outputs), got " + std::to_string(classes));
  }
  return classes;
}

void require_model(ConfigMap& m, const models::ModelSpec& model,
                   std::initializer_list<std::string_view> names, const std::string& kind) {
  if (std::find(names.begin(), names.end(), model.name) != names.end()) return;
  m.fail("kind", "data '" + kind + "' does not fit model '" + model.name + "'");
}

// Image data fits an image model, an mlp (which takes the images flattened) or a graph of one
// f32 input (the images in its shape: [C, H, W], or flattened).
void require_images(ConfigMap& m, const models::ModelSpec& model, const std::string& kind) {
  const bool graph = model.name == "graph" && model.graph.declared_inputs().size() == 1 &&
                     model.graph.declared_inputs()[0].dtype == "f32";
  if (model.name != "mlp" && !graph && !models::is_image_model(model.name)) {
    m.fail("kind", "data '" + kind + "' does not fit model '" + model.name + "'");
  }
}

// The features per sample of an mlp's or a one-input graph's input.
int64_t input_features(const models::ModelSpec& model) {
  if (model.name == "mlp") return model.widths.front();
  const std::vector<models::GraphInput> inputs = model.graph.declared_inputs();
  int64_t n = 1;
  for (const int64_t d : inputs.front().shape) n *= d;
  return n;
}

// A data file must be a regular file: a directory fails late with a confusing message, and a
// device or pipe (/dev/zero) would be read forever. A missing file is the reader's to report.
std::filesystem::path checked_file(ConfigMap& m, std::string_view key, const std::string& name) {
  if (name.empty()) m.fail(key, "is empty: expected a file name");
  std::error_code ec;
  const auto status = std::filesystem::status(name, ec);
  if (ec || !std::filesystem::exists(status)) return name;
  if (std::filesystem::is_directory(status))
    m.fail(key, "'" + name + "' is a directory, not a file");
  if (!std::filesystem::is_regular_file(status)) {
    m.fail(key, "'" + name + "' is not a regular file (a device, pipe or socket)");
  }
  return name;
}

std::filesystem::path file(ConfigMap& m, std::string_view key) {
  return checked_file(m, key, m.get<std::string>(key));
}

std::vector<std::filesystem::path> paths(ConfigMap& m, std::string_view key) {
  std::vector<std::string> names;
  if (m.node(key).IsSequence()) {
    names = m.get<std::vector<std::string>>(key);
  } else {
    names.push_back(m.get<std::string>(key));
  }
  if (names.empty()) m.fail(key, "needs at least one file");
  std::vector<std::filesystem::path> out;
  for (const std::string& name : names) out.push_back(checked_file(m, key, name));
  return out;
}

// Every data kind but teacher-regression gives i32 class ids (tokens for language models): a
// loss that wants other targets is refused here, at the data's kind, before anything is built.
void require_target_dtype(ConfigMap& m, const models::ModelSpec& model, const std::string& kind,
                          DType gives) {
  const models::LossPtr loss = models::make_loss(model.loss);
  if (loss->target_dtype() == gives) return;
  m.fail("kind", "data '" + kind + "' gives " + std::string(dtype_name(gives)) +
                     " targets, the model's loss '" + model.loss + "' takes " +
                     std::string(dtype_name(loss->target_dtype())) + " targets");
}

// The input width of the teacher kinds: an mlp's, or a graph's whose input has one dimension
// (`features` may repeat it).
int64_t teacher_features(ConfigMap& m, const models::ModelSpec& model, const std::string& kind) {
  require_model(m, model, {"mlp", "graph"}, kind);
  const std::vector<models::GraphInput> inputs = model.graph.declared_inputs();
  if (model.name == "graph" &&
      (inputs.size() != 1 || inputs[0].shape.size() != 1 || inputs[0].dtype != "f32")) {
    m.fail("kind",
           "data '" + kind + "' gives f32 feature vectors; the graph's input" +
               (inputs.size() == 1 ? " '" + inputs[0].name + "' has " +
                                         std::to_string(inputs[0].shape.size()) + " dimensions"
                                   : "s are " + std::to_string(inputs.size())));
  }
  const int64_t width = model.name == "graph" ? inputs[0].shape.front() : model.widths.front();
  const int64_t features = positive(m, "features", width);
  if (features != width) {
    m.fail("features", "must equal the model's input width " + std::to_string(width) + ", got " +
                           std::to_string(features));
  }
  return features;
}

// The graph a graph model or a zoo sequence model (gnmt, s2vt) reads its inputs with.
models::GraphSpec graph_of(const models::ModelSpec& model) {
  if (models::is_sequence_model(model.name)) return models::Model::build(model).spec().graph;
  return model.graph;
}

// sequence-pairs: a graph (or a gnmt) of two i32 inputs of one length (source, then decoder
// input) whose logits give `vocab` classes per position.
data::SequencePairsData read_sequence_pairs(ConfigMap& m, const models::ModelSpec& model,
                                            uint64_t seed) {
  require_model(m, model, {"graph", "gnmt"}, "sequence-pairs");
  const models::GraphSpec graph = graph_of(model);
  const std::vector<models::GraphInput> inputs = graph.declared_inputs();
  if (inputs.size() != 2 || inputs[0].dtype != "i32" || inputs[0].shape.size() != 1 ||
      inputs[1].shape != inputs[0].shape) {
    m.fail("kind",
           "data 'sequence-pairs' gives two i32 token sequences of one length (source, decoder "
           "input): declare the graph's inputs as two i32 inputs of shape [length]");
  }
  data::SequencePairsData d;
  d.samples = dimension(m, "samples", d.samples);
  d.spec.seed = seed;
  d.spec.length = inputs[0].shape[0];
  d.spec.source = inputs[0].name;
  d.spec.decoder = inputs[1].name;
  const int64_t classes = model_classes(model);
  d.spec.vocab = positive(m, "vocab", classes);
  if (d.spec.vocab < 2 || d.spec.vocab > classes) {
    m.fail("vocab", "must be in [2, " + std::to_string(classes) + "] (the model's classes)");
  }
  for (const models::GraphNode& n : graph.nodes) {
    if (n.layer == "embedding" && n.vocab < d.spec.vocab) {
      m.fail("vocab", "is " + std::to_string(d.spec.vocab) + ", but embedding '" + n.name +
                          "' has vocab " + std::to_string(n.vocab));
    }
  }
  return d;
}

// The most features a video-captions frame may have and the most frames: far past S2VT's (4096
// features, 80 frames), and bounds on what a hostile config can make every sample hold.
constexpr int64_t kMaxFrameFeatures = 65536;
constexpr int64_t kMaxFrames = 4096;

// video-captions: an s2vt's frames and caption; the sizes are the model's (the data may repeat
// them), vocab at most the model's.
data::VideoCaptionsData read_video_captions(ConfigMap& m, const models::ModelSpec& model,
                                            uint64_t seed) {
  require_model(m, model, {"s2vt"}, "video-captions");
  data::VideoCaptionsData d;
  d.samples = dimension(m, "samples", d.samples);
  d.spec.seed = seed;
  auto same = [&](std::string_view key, int64_t model_value, std::string_view model_key,
                  int64_t limit) {
    const int64_t v = dimension(m, key, model_value);
    if (v != model_value) {
      m.fail(key, "must equal the model's " + std::string(model_key) + " " +
                      std::to_string(model_value) + ", got " + std::to_string(v));
    }
    if (v > limit)
      m.fail(key, "must be <= " + std::to_string(limit) + ", got " + std::to_string(v));
    return v;
  };
  d.spec.frames = same("frames", model.frames, "frames", kMaxFrames);
  d.spec.features = same("features", model.frame_features, "frame_features", kMaxFrameFeatures);
  d.spec.words = same("words", model.seq_len, "seq_len", kMaxFrames);
  if (d.spec.frames < d.spec.words) {
    m.fail("frames", "must be at least the caption's " + std::to_string(d.spec.words) +
                         " words (every word is shown in a frame), got " +
                         std::to_string(d.spec.frames));
  }
  d.spec.vocab = positive(m, "vocab", model.vocab);
  if (d.spec.vocab < 2 || d.spec.vocab > model.vocab) {
    m.fail("vocab", "must be in [2, " + std::to_string(model.vocab) + "] (the model's vocab)");
  }
  d.spec.noise = in_range(m, "noise", d.spec.noise, 0.0, 100.0);
  return d;
}

data::DataSpec read_data(ConfigMap m, const models::ModelSpec& model) {
  const std::string kind = m.get<std::string>("kind");
  require_target_dtype(m, model, kind, kind == "teacher-regression" ? DType::f32 : DType::i32);
  const auto seed = static_cast<uint64_t>(non_negative(m, "seed", 1));
  data::DataSpec out;
  if (kind == "teacher") {
    data::TeacherData d;
    d.samples = dimension(m, "samples", d.samples);
    d.spec.seed = seed;
    d.spec.features = teacher_features(m, model, kind);
    d.spec.hidden = dimension(m, "hidden", d.spec.hidden);
    d.spec.classes = check_classes(m, model);
    out = d;
  } else if (kind == "teacher-regression") {
    const int64_t outputs = model_classes(model);
    data::TeacherRegressionData d;
    d.samples = dimension(m, "samples", d.samples);
    d.spec.seed = seed;
    d.spec.features = teacher_features(m, model, kind);
    d.spec.hidden = dimension(m, "hidden", d.spec.hidden);
    d.spec.outputs = positive(m, "outputs", outputs);
    if (d.spec.outputs != outputs) {
      m.fail("outputs", "must equal the model's output width " + std::to_string(outputs) +
                            ", got " + std::to_string(d.spec.outputs));
    }
    out = d;
  } else if (kind == "shapes") {
    require_images(m, model, kind);
    data::ProceduralImagesData d;
    d.samples = dimension(m, "samples", d.samples);
    d.spec.seed = seed;
    const bool images = models::is_image_model(model.name);
    d.spec.channels = dimension(m, "channels", images ? model.in_channels : d.spec.channels);
    d.spec.image_size = dimension(m, "image_size", images ? model.image_size : d.spec.image_size);
    if (images && d.spec.channels != model.in_channels) {
      m.fail("channels", "must equal the model's in_channels " + std::to_string(model.in_channels));
    }
    if (images && d.spec.image_size != model.image_size) {
      m.fail("image_size", "must equal the model's image_size " + std::to_string(model.image_size));
    }
    if (!images &&
        d.spec.channels * d.spec.image_size * d.spec.image_size != input_features(model)) {
      m.fail("image_size", "channels * image_size^2 must equal the model's input size " +
                               std::to_string(input_features(model)));
    }
    if (d.spec.image_size < 8) m.fail("image_size", "must be >= 8");
    d.spec.noise = in_range(m, "noise", d.spec.noise, 0.0, 10.0);
    d.spec.classes = check_classes(m, model);
    if (d.spec.classes > data::ProceduralImages::kMaxClasses) {
      m.fail("classes",
             "shapes has " + std::to_string(data::ProceduralImages::kMaxClasses) +
                 " kinds; set classes <= " + std::to_string(data::ProceduralImages::kMaxClasses));
    }
    out = d;
  } else if (kind == "sequence-pairs") {
    out = read_sequence_pairs(m, model, seed);
  } else if (kind == "video-captions") {
    out = read_video_captions(m, model, seed);
  } else if (kind == "markov-text") {
    require_model(m, model, {"gpt"}, kind);
    data::MarkovTextData d;
    d.samples = dimension(m, "samples", d.samples);
    d.seq_len = model.seq_len;
    d.spec.seed = seed;
    d.spec.vocab = positive(m, "vocab", model.vocab);
    if (d.spec.vocab < 2 || d.spec.vocab > model.vocab) {
      m.fail("vocab", "must be in [2, " + std::to_string(model.vocab) + "] (the model's vocab)");
    }
    d.spec.order = static_cast<int>(positive(m, "order", d.spec.order));
    if (m.get_or<int64_t>("order", 1) > 64) m.fail("order", "must be <= 64");
    d.spec.sharpness = in_range(m, "sharpness", d.spec.sharpness, 0.0, 100.0);
    try {
      (void)data::MarkovChain::check(d.spec);  // too many states for vocab^order, ...
    } catch (const std::exception& e) {
      m.fail("order", e.what());
    }
    out = d;
  } else if (kind == "tokens") {
    require_model(m, model, {"gpt"}, kind);
    data::TokenFileData d;
    d.train = file(m, "path");
    if (m.has("eval_path")) d.eval = file(m, "eval_path");
    try {
      d.format = data::parse_token_format(m.get_or<std::string>("format", "u8"));
    } catch (const std::invalid_argument& e) {
      m.fail("format", e.what());
    }
    d.vocab = model.vocab;
    d.seq_len = model.seq_len;
    out = d;
  } else if (kind == "mnist") {
    require_images(m, model, kind);
    data::MnistData d;
    d.images = file(m, "images");
    d.labels = file(m, "labels");
    const bool ei = m.has("eval_images"), el = m.has("eval_labels");
    if (ei != el)
      m.fail(ei ? "eval_images" : "eval_labels", "give eval_images and eval_labels together");
    if (ei) {
      d.eval_images = file(m, "eval_images");
      d.eval_labels = file(m, "eval_labels");
    }
    d.flatten = model.name == "mlp";
    d.classes = check_classes(m, model);
    out = d;
  } else if (kind == "cifar10") {
    require_images(m, model, kind);
    data::Cifar10Data d;
    d.files = paths(m, "files");
    if (m.has("eval_files")) d.eval_files = paths(m, "eval_files");
    d.flatten = model.name == "mlp";
    d.classes = check_classes(m, model);
    out = d;
  } else {
    m.fail("kind", "unknown data kind '" + kind +
                       "' (expected teacher, teacher-regression, shapes, markov-text, tokens, "
                       "mnist, cifar10, sequence-pairs or video-captions)");
  }
  m.finish();
  return out;
}

// ---- train ----

// Runs `rules` (train/job_rules.hpp) on what `m` read, reporting a broken one at its key.
template <class F>
void apply_rules(const ConfigMap& m, F&& rules) {
  try {
    std::forward<F>(rules)();
  } catch (const JobError& e) {
    m.fail_rule(e);
  }
}

models::OptimizerSpec read_optimizer(ConfigMap m) {
  models::OptimizerSpec o;
  o.kind = m.get<std::string>("kind");
  o.lr = m.get<double>("lr");
  o.weight_decay = m.get_or<double>("weight_decay", 0.0);
  if (o.kind == "sgd") {
    o.momentum = m.get_or<double>("momentum", 0.0);
    o.nesterov = m.get_or<bool>("nesterov", false);
  } else if (o.kind == "adamw") {
    if (auto betas = m.find<std::vector<double>>("betas")) {
      if (betas->size() != 2) m.fail("betas", "needs two values [beta1, beta2]");
      o.beta1 = (*betas)[0];
      o.beta2 = (*betas)[1];
    }
    o.eps = m.get_or<double>("eps", o.eps);
  }
  apply_rules(m, [&] { check_optimizer(o); });
  m.finish();
  return o;
}

// Samples of a generated dataset (0 for files, whose size is known once they are read).
int64_t generated_samples(const data::DataSpec& spec) {
  if (const auto* d = std::get_if<data::TeacherData>(&spec)) return d->samples;
  if (const auto* d = std::get_if<data::TeacherRegressionData>(&spec)) return d->samples;
  if (const auto* d = std::get_if<data::ProceduralImagesData>(&spec)) return d->samples;
  if (const auto* d = std::get_if<data::MarkovTextData>(&spec)) return d->samples;
  if (const auto* d = std::get_if<data::SequencePairsData>(&spec)) return d->samples;
  if (const auto* d = std::get_if<data::VideoCaptionsData>(&spec)) return d->samples;
  return 0;
}

TrainSpec read_train(ConfigMap m, const data::DataSpec& data_spec) {
  TrainSpec t;
  t.minibatch = positive(m, "minibatch");
  const int64_t samples = generated_samples(data_spec);
  if (samples > 0 && t.minibatch > samples) {
    m.fail("minibatch", std::to_string(t.minibatch) + " samples per minibatch, but data.samples " +
                            "gives " + std::to_string(samples));
  }
  t.steps = positive(m, "steps");
  t.accumulate = positive(m, "accumulate", t.accumulate);
  if (t.accumulate > kMaxAccumulate) {
    m.fail("accumulate", "must be <= " + std::to_string(kMaxAccumulate) + ", got " +
                             std::to_string(t.accumulate));
  }
  if (samples > 0 && t.minibatch * t.accumulate > samples) {
    m.fail("accumulate", std::to_string(t.accumulate) + " minibatches of " +
                             std::to_string(t.minibatch) + " per step, but data.samples gives " +
                             std::to_string(samples));
  }
  if (m.has("precision")) {
    const std::string text = m.get<std::string>("precision");
    if (text != "f32" && text != "bf16") {
      m.fail("precision", "unknown precision '" + text + "' (expected f32 or bf16)");
    }
    t.precision = models::parse_matmul_precision(text);
  }
  if (m.has("clip_grad_norm")) {
    const double clip = m.get<double>("clip_grad_norm");
    if (!(clip > 0) || !std::isfinite(clip)) {
      m.fail("clip_grad_norm", "must be a finite number > 0, got " + std::to_string(clip));
    }
    t.clip_grad_norm = clip;
  }
  t.optimizer = read_optimizer(m.map("optimizer"));
  if (auto ls = m.find_map("lr_schedule")) {
    LrSchedule& l = t.lr_schedule;
    l.kind = ls->get<std::string>("kind");
    l.warmup_steps = ls->get_or<int64_t>("warmup_steps", 0);
    // A constant schedule has no final fraction: the key is unknown there.
    if (l.kind != "constant") l.final_fraction = ls->get_or<double>("final_fraction", 0.0);
    apply_rules(*ls, [&] { check_lr_schedule(l); });
    ls->finish();
  }
  t.seed = static_cast<uint64_t>(non_negative(m, "seed", 0));
  t.log_every = positive(m, "log_every", t.log_every);
  if (auto e = m.find_map("eval")) {
    EvalSpec ev;
    ev.every = non_negative(*e, "every", ev.every);
    ev.samples = dimension(*e, "samples", ev.samples);
    e->finish();
    t.eval = ev;
  }
  if (m.has("init_from")) t.init_from = file(m, "init_from");
  m.finish();
  return t;
}

// ---- pipeline ----

// "a-b" (inclusive) or "a".
std::pair<int64_t, int64_t> parse_layers(ConfigMap& m, const std::string& text) {
  auto number = [&](std::string_view s) {
    int64_t v = -1;
    const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || ptr != s.data() + s.size() || v < 0) {
      m.fail("layers", "expected a layer range like \"0-4\", got \"" + text + "\"");
    }
    return v;
  };
  const size_t dash = text.find('-');
  if (dash == std::string::npos) {
    const int64_t v = number(text);
    return {v, v};
  }
  const int64_t a = number(std::string_view(text).substr(0, dash));
  const int64_t b = number(std::string_view(text).substr(dash + 1));
  if (b < a) m.fail("layers", "range \"" + text + "\" ends before it starts");
  return {a, b};
}

// One stage's {forward: [...], backward: [...]} slice sizes (umpipe).
SliceComposition read_composition(ConfigMap m, int64_t minibatch, size_t stage) {
  SliceComposition c{m.get<std::vector<int64_t>>("forward"),
                     m.get<std::vector<int64_t>>("backward")};
  apply_rules(m, [&] { check_composition(c, minibatch, stage); });
  m.finish();
  return c;
}

// "layer 3 belongs to no stage", "layers 3-5 belong to no stage".
std::string unassigned(int64_t first, int64_t last) {
  if (first == last) return "layer " + std::to_string(first) + " belongs to no stage";
  return "layers " + std::to_string(first) + "-" + std::to_string(last) + " belong to no stage";
}

// The stages a config lists, each checked against the model (their devices are checked against
// the machine after reading: train/config_check.hpp, at the keys recorded here).
void read_stages(ConfigMap& m, PipelineLayout& p, ConfigLocations& where, int num_layers) {
  const YAML::Node& stages = m.node("stages");
  if (!stages.IsSequence() || stages.size() == 0) m.fail("stages", "expected a list of stages");
  int64_t next = 0;  // the first layer the next stage must start at
  for (size_t i = 0; i < stages.size(); ++i) {
    ConfigMap s(stages[i], m.origin(), m.key_path("stages") + "[" + std::to_string(i) + "]");
    StageSpec st;
    where.stages.push_back(s.where());
    for (const char* key : {"device", "devices"}) {
      if (s.has(key)) where.keys[s.key_path(key)] = s.where(key);
    }
    if (auto layers = s.find<std::string>("layers")) {
      std::tie(st.first_layer, st.last_layer) = parse_layers(s, *layers);
    } else if (stages.size() > 1) {
      s.fail("layers", "missing: each of the " + std::to_string(stages.size()) +
                           " stages needs its layers (e.g. layers: \"0-3\")");
    }
    // Stages tile the model in order: a gap would leave layers unrun, an overlap run twice.
    const int64_t last = st.last_layer < 0 ? num_layers - 1 : st.last_layer;
    if (st.first_layer != next) {
      s.fail("layers",
             "stage " + std::to_string(i) + " starts at layer " + std::to_string(st.first_layer) +
                 ", expected " + std::to_string(next) +
                 (st.first_layer > next ? " (a gap: " + unassigned(next, st.first_layer - 1) + ")"
                                        : " (it overlaps the previous stage)"));
    }
    if (last >= num_layers) {
      s.fail("layers", "the model has layers 0-" + std::to_string(num_layers - 1) + ", got " +
                           std::to_string(st.first_layer) + "-" + std::to_string(last));
    }
    if (i + 1 == stages.size() && last != num_layers - 1) {
      s.fail("layers", "the last stage ends at layer " + std::to_string(last) +
                           " but the model has layers 0-" + std::to_string(num_layers - 1) + " (" +
                           unassigned(last + 1, num_layers - 1) + ")");
    }
    next = last + 1;
    st.replicas = positive(s, "replicas", 1);
    if (st.replicas > kMaxReplicas) {
      s.fail("replicas",
             "must be <= " + std::to_string(kMaxReplicas) + ", got " + std::to_string(st.replicas));
    }
    const auto device = [&](std::string_view key, const std::string& text) {
      Device d;
      try {
        d = Device::parse(text);
      } catch (const std::invalid_argument& e) {
        s.fail(key, e.what());
      }
      return d;
    };
    if (auto one = s.find<std::string>("device")) st.device = device("device", *one);
    if (auto list = s.find<std::vector<std::string>>("devices")) {
      if (s.has("device")) s.fail("devices", "give device (all replicas) or devices, not both");
      if (list->empty()) s.fail("devices", "needs one device per replica");
      if (!s.has("replicas")) st.replicas = static_cast<int64_t>(list->size());
      if (static_cast<int64_t>(list->size()) != st.replicas) {
        s.fail("devices", "gives " + std::to_string(list->size()) + " devices for " +
                              std::to_string(st.replicas) + " replicas");
      }
      for (const std::string& text : *list) st.devices.push_back(device("devices", text));
      st.device = st.devices.front();
    }
    const auto check_rank = [&](std::string_view key, int64_t r) {
      if (r < 0 || r > kMaxRank) {
        s.fail(key, "a rank is 0-" + std::to_string(kMaxRank) + ", got " + std::to_string(r));
      }
    };
    if (auto one = s.find<int64_t>("rank")) {
      check_rank("rank", *one);
      st.ranks.assign(static_cast<size_t>(st.replicas), *one);
    }
    if (auto list = s.find<std::vector<int64_t>>("ranks")) {
      if (s.has("rank")) s.fail("ranks", "give rank (all replicas) or ranks, not both");
      if (static_cast<int64_t>(list->size()) != st.replicas) {
        s.fail("ranks", "gives " + std::to_string(list->size()) + " ranks for " +
                            std::to_string(st.replicas) + " replicas");
      }
      for (int64_t r : *list) check_rank("ranks", r);
      st.ranks = *list;
    }
    if (i > 0 && st.ranks.empty() != p.stages.front().ranks.empty()) {
      s.fail(st.ranks.empty() ? "layers" : (s.has("rank") ? "rank" : "ranks"),
             "place every stage (rank or ranks) or none: stage 0 " +
                 std::string(p.stages.front().ranks.empty() ? "does not" : "does"));
    }
    s.finish();
    p.stages.push_back(st);
  }
}

// A path the pipeline section names, relative to the config.
std::filesystem::path config_relative(ConfigMap& m, std::string_view key) {
  const std::filesystem::path given = m.get<std::string>(key);
  return given.is_absolute() ? given : std::filesystem::path(m.file()).parent_path() / given;
}

// `partition: auto` (with its profile and cluster files) and `schedule: auto` (with optional
// ones) are recorded for the planning step, with where their keys stand.
void read_planning(ConfigMap& m, const PipelineLayout& p, ConfigPlanning& planning,
                   ConfigLocations& where) {
  const auto record = [&](std::string_view key) { where.keys[m.key_path(key)] = m.where(key); };
  record("schedule");
  if (m.has("partition")) {
    record("partition");
    if (m.get<std::string>("partition") != "auto") {
      m.fail("partition", "expected auto (or give stages instead)");
    }
    if (m.has("stages")) m.fail("stages", "give stages or partition: auto, not both");
    if (!m.has("profile")) {
      m.fail("partition", "partition: auto needs profile: (a file `tandem profile` writes)");
    }
    if (!m.has("cluster")) m.fail("partition", "partition: auto needs cluster: (a cluster file)");
    planning.partition = true;
  }
  if (!planning.partition && p.schedule != "auto") return;
  if (m.has("profile")) {
    record("profile");
    planning.profile = config_relative(m, "profile");
  }
  if (m.has("cluster")) {
    record("cluster");
    planning.cluster = config_relative(m, "cluster");
  }
  planning.allow_async = m.get_or<bool>("allow_async", false);
}

// `schedule: auto` chooses what these keys would fix, and `allow_async` applies to it only.
void check_auto_keys(ConfigMap& m, bool automatic) {
  if (!automatic) {
    if (m.has("allow_async")) m.fail("allow_async", "applies to schedule: auto only");
    return;
  }
  if (m.has("chunks")) {
    m.fail("chunks", "schedule: auto chooses the chunks (2 for interleaved and zb-v)");
  }
  if (m.has("rematerialize")) {
    m.fail("rematerialize", "schedule: auto ranks gpipe with and without re-materialization");
  }
  if (m.has("slices") && m.node("slices").IsSequence()) {
    m.fail("slices", "schedule: auto takes one slice count for every schedule, or none");
  }
  (void)m.get_or<bool>("allow_async", false);  // a wrong type fails here, at its line
}

// The pipeline section as written; what depends on the stages (slices per stage, chunks
// against layers, the schedule's own rules) is checked once they are known
// (train/config_check.hpp), as `partition: auto` plans them only then.
PipelineLayout read_pipeline(ConfigMap m, int64_t minibatch, int num_layers,
                             ConfigPlanning& planning, ConfigLocations& where) {
  PipelineLayout p;
  where.pipeline = m.where();
  p.schedule = m.get_or<std::string>("schedule", p.schedule);
  std::vector<std::string_view> schedules = schedules::pipeline_schedule_names();
  schedules.push_back("auto");
  if (std::find(schedules.begin(), schedules.end(), p.schedule) == schedules.end()) {
    m.fail("schedule", "unknown schedule '" + p.schedule + "' (expected " + join(schedules) + ")");
  }
  const bool automatic = p.schedule == "auto";
  check_auto_keys(m, automatic);
  if (m.has("slices")) {
    const YAML::Node& slices = m.node("slices");
    if (slices.IsSequence() && slices.size() > 0 && slices[0].IsMap()) {
      if (p.schedule != "umpipe") {
        m.fail("slices", "per-stage {forward, backward} slice sizes apply to schedule umpipe only");
      }
      for (size_t i = 0; i < slices.size(); ++i) {
        p.compositions.push_back(read_composition(
            ConfigMap(slices[i], m.origin(), m.key_path("slices") + "[" + std::to_string(i) + "]"),
            minibatch, i));
      }
    } else {
      p.slices = slices.IsSequence() ? m.get<std::vector<int64_t>>("slices")
                                     : std::vector<int64_t>{m.get<int64_t>("slices")};
      for (int64_t s : p.slices) {
        if (s < 1) m.fail("slices", "must be >= 1");
        if (s > minibatch) {
          m.fail("slices", std::to_string(s) + " slices of a minibatch of " +
                               std::to_string(minibatch) + " samples: a slice would be empty");
        }
      }
    }
  }
  bool interleaved = p.schedule == "interleaved";
  bool v_shape = p.schedule == "zb-v";
  p.chunks = positive(m, "chunks", interleaved || v_shape ? 2 : 1);
  if (p.chunks != 1 && !interleaved && !v_shape) {
    m.fail("chunks", "model chunks per device apply to schedules interleaved and zb-v only");
  }
  if (v_shape && p.chunks != 2) m.fail("chunks", "zb-v holds exactly 2 chunks per device");
  p.rematerialize = m.get_or<bool>("rematerialize", false);
  if (p.rematerialize && p.schedule != "gpipe") {
    m.fail("rematerialize", "applies to schedule gpipe only");
  }
  if (m.has("skip_edges")) {
    const std::string how = m.get<std::string>("skip_edges");
    if (how != "direct" && how != "relay") {
      m.fail("skip_edges", "must be direct or relay, got '" + how + "'");
    }
    p.relay_skips = how == "relay";
  }
  if (m.has("precision")) {
    try {
      p.precision = models::parse_matmul_precision(m.get<std::string>("precision"));
    } catch (const std::invalid_argument& e) {
      m.fail("precision", e.what());
    }
  }
  if (m.has("wire_dtype")) {
    const std::string text = m.get<std::string>("wire_dtype");
    if (text != "f32" && text != "bf16") {
      m.fail("wire_dtype", "unknown dtype '" + text + "' (expected f32 or bf16)");
    }
    p.wire_dtype = parse_dtype(text);
  }
  read_planning(m, p, planning, where);
  if (!planning.partition) read_stages(m, p, where, num_layers);
  for (const char* key : {"slices", "chunks", "async_correction"}) {
    if (m.has(key)) where.keys[m.key_path(key)] = m.where(key);
  }
  if (m.has("async_correction")) {
    try {
      p.async_correction = models::parse_async_correction(m.get<std::string>("async_correction"));
    } catch (const std::invalid_argument& e) {
      m.fail("async_correction", e.what());
    }
  }
  m.finish();
  return p;
}

}  // namespace

Config parse_config(const std::string& text, const std::string& file) {
  return parse_config(text, file, ConfigOverrides{}, Machine::here());
}

Config parse_config(const std::string& text, const std::string& file, const Machine& machine) {
  return parse_config(text, file, ConfigOverrides{}, machine);
}

Config read_config(const std::string& text, const std::string& file,
                   const ConfigOverrides& overrides, const Machine& machine) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(ConfigLocation{file, e.mark.line + 1, e.mark.column + 1}, "",
                      "YAML syntax error: " + e.msg);
  }
  auto origin = std::make_shared<ConfigOrigin>(file);
  apply_overrides(root, overrides, *origin);
  if (root.IsNull()) throw ConfigError(ConfigLocation{file, 1, 1}, "", "empty config");
  ConfigMap top(root, origin, "");
  for (std::string_view section : kTopLevelSections) top.allow(section);
  top.finish();
  Config c;
  c.file = file;
  c.where.file = ConfigLocation{file};
  c.where.model = top.where("model");
  c.where.data = top.where("data");
  c.where.train = top.where("train");
  int layers = 0;
  c.model = read_model(top.map("model"), machine, &c.parameters, &layers);
  c.data = read_data(top.map("data"), c.model);
  c.train = read_train(top.map("train"), c.data);
  if (auto p = top.find_map("pipeline")) {
    c.pipeline = read_pipeline(*p, c.train.minibatch, layers, c.planning, c.where);
  }
  if (c.pipeline && c.train.precision && c.pipeline->precision != models::MatmulPrecision::f32 &&
      c.pipeline->precision != *c.train.precision) {
    throw ConfigError(c.where.train, "train.precision",
                      "differs from pipeline.precision, which it supersedes: give one");
  }
  if (auto cl = top.find_map("cluster")) {
    c.where.cluster = cl->where();
    c.cluster.transport = cl->get_or<std::string>("transport", c.cluster.transport);
    c.cluster.collectives = cl->get_or<std::string>("collectives", c.cluster.collectives);
    // Narrowed to int only within range; the rule reports what was given.
    const auto narrow = [](int64_t v) {
      return static_cast<int>(std::clamp<int64_t>(v, -1, std::numeric_limits<int>::max()));
    };
    c.cluster.tcp_lanes = narrow(cl->get_or<int64_t>("tcp_lanes", c.cluster.tcp_lanes));
    c.cluster.stall_timeout_s = cl->get_or<double>("stall_timeout", c.cluster.stall_timeout_s);
    c.cluster.elastic = cl->get_or<bool>("elastic", c.cluster.elastic);
    c.cluster.max_replans = narrow(cl->get_or<int64_t>("max_replans", c.cluster.max_replans));
    apply_rules(*cl, [&] { check_cluster(c.cluster); });
    cl->finish();
  }
  return c;
}

Config parse_config(const std::string& text, const std::string& file,
                    const ConfigOverrides& overrides, const Machine& machine) {
  Config c = read_config(text, file, overrides, machine);
  check_config(c, machine);
  return c;
}

Config load_config(const std::filesystem::path& path) {
  return load_config(path, ConfigOverrides{}, Machine::here());
}

Config load_config(const std::filesystem::path& path, const Machine& machine) {
  return load_config(path, ConfigOverrides{}, machine);
}

Config load_config(const std::filesystem::path& path, const ConfigOverrides& overrides,
                   const Machine& machine) {
  // A directory opens as a stream on Linux and reads as empty; a device never ends.
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!ec && std::filesystem::is_directory(status)) {
    throw ConfigError(ConfigLocation{path.string()}, "", "is a directory, not a config file");
  }
  if (!ec && std::filesystem::exists(status) && !std::filesystem::is_regular_file(status)) {
    throw ConfigError(ConfigLocation{path.string()}, "",
                      "is not a regular file (a device, pipe or socket)");
  }
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec && size > kMaxConfigBytes) {
    throw ConfigError(ConfigLocation{path.string()}, "",
                      "is " + human_bytes(static_cast<double>(size)) + ": a config is at most " +
                          human_bytes(static_cast<double>(kMaxConfigBytes)));
  }
  std::ifstream in(path);
  if (!in) throw ConfigError(ConfigLocation{path.string()}, "", "cannot open the config file");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_config(text.str(), path.string(), overrides, machine);
}

ConfigLocation ConfigLocations::of(std::string_view key) const {
  const auto section = [&](std::string_view name) {
    return key == name ||
           (key.starts_with(name) && (key[name.size()] == '.' || key[name.size()] == '['));
  };
  constexpr std::string_view kStage = "pipeline.stages[";
  if (key.starts_with(kStage)) {
    size_t i = 0;
    const auto* first = key.data() + kStage.size();
    const auto [end, ec] = std::from_chars(first, key.data() + key.size(), i);
    if (ec == std::errc() && end != first && i < stages.size()) return stages[i];
  }
  if (const auto it = keys.find(key); it != keys.end()) return it->second;
  const ConfigLocation* at = &file;
  if (section("model")) at = &model;
  if (section("data")) at = &data;
  if (section("train")) at = &train;
  if (section("pipeline")) at = &pipeline;
  if (section("cluster")) at = &cluster;
  return at->line > 0 ? *at : file;
}

models::Model config_model(const Config& config) {
  return config.model_built ? *config.model_built : models::Model::build(config.model);
}

ConfigError config_error(const Config& config, const JobError& e) {
  return ConfigError(config.where.of(e.key()), e.key(), e.detail());
}

}  // namespace tandem::train
