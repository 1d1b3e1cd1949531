#include "models/model.hpp"

#include <stdexcept>
#include <string>
#include <utility>

#include "api/builtin_layer.hpp"
#include "api/custom_layer.hpp"
#include "api/custom_loss.hpp"
#include "models/graph_builder.hpp"
#include "models/input_layout.hpp"
#include "models/layers/input_view.hpp"
#include "models/model_spec.hpp"
#include "models/tie_names.hpp"
#include "tandem/tandem.hpp"

namespace tandem {
namespace {

// The models' layer behind a public one: a built-in's own, or an adapter of the application's.
std::shared_ptr<const models::Layer> to_models(const LayerPtr& layer, int index) {
  if (const auto* builtin = dynamic_cast<const api::BuiltinLayer*>(layer.get())) {
    return builtin->impl();
  }
  return std::make_shared<const api::CustomLayer>(layer, index);
}

// The public layer of a model's layer i: the application's object for a custom one; a
// BuiltinLayer sharing ownership of the model for the others.
LayerPtr to_public(const std::shared_ptr<const models::Model>& model, int i) {
  const models::Layer* layer = &model->layer(i);
  // A layer reading named inputs is the application's (or a built-in) inside an InputView.
  if (const auto* view = dynamic_cast<const models::InputView*>(layer)) layer = &view->inner();
  if (const auto* custom = dynamic_cast<const api::CustomLayer*>(layer)) return custom->layer();
  return std::make_shared<const api::BuiltinLayer>(
      std::shared_ptr<const models::Layer>(model, layer));
}

}  // namespace

Model::Model(std::shared_ptr<const models::Model> impl, std::string title)
    : impl_(std::move(impl)), title_(std::move(title)) {
  for (int i = 0; i < impl_->num_layers(); ++i) layers_.push_back(to_public(impl_, i));
}

Model Model::mlp(std::vector<std::int64_t> widths) {
  auto impl = std::make_shared<const models::Model>(
      models::Model::build(models::mlp_spec(std::move(widths))));
  std::string title = impl->spec().describe();
  return Model(std::move(impl), std::move(title));
}

Model Model::gpt(const GptOptions& o) {
  models::ModelSpec spec = models::gpt_spec(o.layers, o.d_model, o.heads, o.seq_len, o.vocab);
  spec.d_ff = o.d_ff;
  spec.dropout = o.dropout;
  spec.tie_embeddings = o.tie_embeddings;
  auto impl = std::make_shared<const models::Model>(models::Model::build(spec));
  std::string title = impl->spec().describe();
  return Model(std::move(impl), std::move(title));
}

Model Model::classifier(std::int64_t in_features, std::vector<LayerPtr> layers) {
  if (in_features < 1) {
    throw std::invalid_argument("Model::classifier: in_features must be >= 1, got " +
                                std::to_string(in_features));
  }
  if (layers.empty()) throw std::invalid_argument("Model::classifier: no layers");
  // Walks a one-sample input through every layer so that a layer that does not fit its input
  // is named here, not on a stage's thread in the middle of a run.
  Shape shape{1, in_features};
  for (std::size_t i = 0; i < layers.size(); ++i) {
    if (layers[i] == nullptr) {
      throw std::invalid_argument("Model::classifier: layer " + std::to_string(i) + " is null");
    }
    try {
      shape = layers[i]->output_shape(shape);
    } catch (const std::exception& e) {
      throw std::invalid_argument("Model::classifier: layer " + std::to_string(i) + " (" +
                                  layers[i]->describe() + ") refuses input " + shape_str(shape) +
                                  ": " + e.what());
    }
  }
  if (shape.size() != 2 || shape[0] != 1 || shape[1] < 1) {
    throw std::invalid_argument("Model::classifier: the last layer's output for one sample is " +
                                shape_str(shape) + ", not [1, classes]");
  }
  // The zoo's mlp shape conventions (inputs [batch, widths[0]], targets [batch]) are a
  // classifier's; the spec only carries them, the layers are the caller's.
  models::ModelSpec spec = models::mlp_spec({in_features, shape[1]});
  std::vector<std::shared_ptr<const models::Layer>> impl_layers;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    impl_layers.push_back(to_models(layers[i], static_cast<int>(i)));
  }
  auto impl = std::make_shared<const models::Model>(std::move(spec), std::move(impl_layers));
  return Model(std::move(impl), "classifier(in_features=" + std::to_string(in_features) +
                                    ", classes=" + std::to_string(shape[1]) + ")");
}

namespace {

// A graph model of `spec`'s inputs and `nodes`, their layers the public ones.
std::shared_ptr<const models::Model> assemble(models::ModelSpec spec,
                                              const std::vector<GraphNode>& nodes) {
  spec.name = "graph";
  std::vector<std::shared_ptr<const models::Layer>> impl_layers;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].layer == nullptr) {
      throw std::invalid_argument("Model::graph: node " + std::to_string(i) + " '" + nodes[i].name +
                                  "' has no layer");
    }
    models::GraphNode n;
    n.name = nodes[i].name;
    n.layer = nodes[i].layer->describe();  // what the spec's description shows of it
    n.inputs = nodes[i].inputs;
    spec.graph.nodes.push_back(std::move(n));
    impl_layers.push_back(to_models(nodes[i].layer, static_cast<int>(i)));
  }
  try {
    return std::make_shared<const models::Model>(
        models::assemble_graph(spec, std::move(impl_layers)));
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("Model::graph: ") + e.what());
  }
}

}  // namespace

Model Model::graph(std::vector<std::int64_t> input_shape, std::vector<GraphNode> nodes,
                   std::string input_name) {
  models::ModelSpec spec;
  spec.graph.input_name = std::move(input_name);
  spec.graph.input_shape = std::move(input_shape);
  std::shared_ptr<const models::Model> impl = assemble(std::move(spec), nodes);
  const Shape out = impl->activation_shapes(1).back();
  if (out.size() != 2 || out[1] < 1) {
    throw std::invalid_argument("Model::graph: the last node's output for one sample is " +
                                shape_str(out) + ", not [1, classes]");
  }
  std::string title = "graph(" + std::to_string(impl->num_layers()) +
                      " nodes, classes=" + std::to_string(out[1]) + ")";
  return Model(std::move(impl), std::move(title));
}

Model Model::graph(std::vector<ModelInput> inputs, std::vector<GraphNode> nodes) {
  models::ModelSpec spec;
  for (ModelInput& in : inputs) {
    spec.graph.inputs.push_back(
        {std::move(in.name), std::move(in.shape), std::string(dtype_name(in.dtype))});
  }
  std::shared_ptr<const models::Model> impl = assemble(std::move(spec), nodes);
  std::string title = "graph(" + std::to_string(impl->num_layers()) + " nodes, inputs " +
                      models::InputLayout::of(impl->spec().graph).describe() + ", output " +
                      shape_str(impl->activation_shapes(1).back()) + ")";
  return Model(std::move(impl), std::move(title));
}

Tensor Model::pack_inputs(const std::vector<NamedTensor>& named) const {
  if (impl_->spec().name != "graph") {
    throw std::invalid_argument("Model::pack_inputs: " + title_ + " has one unnamed input");
  }
  std::vector<models::NamedTensor> in;
  for (const NamedTensor& t : named) in.emplace_back(t.name, t.value);
  return models::InputLayout::of(impl_->spec().graph).pack(in);
}

int Model::num_layers() const {
  return impl_->num_layers();
}

const Layer& Model::layer(int i) const {
  if (i < 0 || i >= num_layers()) {
    throw std::out_of_range("Model::layer(" + std::to_string(i) + "): the model has " +
                            std::to_string(num_layers()) + " layers");
  }
  return *layers_[static_cast<std::size_t>(i)];
}

std::string Model::describe() const {
  std::string out = title_ + "\n";
  for (int i = 0; i < num_layers(); ++i) {
    out += "  " + std::to_string(i) + ": " + layer(i).describe() + "  (" +
           std::to_string(layer(i).param_numel()) + " parameters)\n";
  }
  return out;
}

std::int64_t Model::parameters() const {
  std::int64_t n = 0;
  for (int i = 0; i < num_layers(); ++i) n += layer(i).param_numel();
  return n;
}

Shape Model::input_shape(std::int64_t batch) const {
  return impl_->input_shape(batch);
}

DType Model::input_dtype() const {
  return impl_->input_dtype();
}

Shape Model::target_shape(std::int64_t batch) const {
  return impl_->target_shape(batch);
}

DType Model::target_dtype() const {
  return impl_->target_dtype();
}

Model Model::with_loss(std::string_view loss) const {
  auto impl = std::make_shared<const models::Model>(impl_->with_loss(models::make_loss(loss)));
  return Model(std::move(impl), title_ + ", loss " + std::string(loss));
}

Model Model::with_loss(LossPtr loss) const {
  if (loss == nullptr) throw std::invalid_argument("Model::with_loss: the loss is null");
  auto impl = std::make_shared<const models::Model>(
      impl_->with_loss(std::make_shared<const api::CustomLoss>(loss)));
  return Model(std::move(impl), title_ + ", loss " + loss->describe());
}

Model Model::tie(const std::vector<std::string>& names) const {
  std::vector<std::string> tied;
  for (const std::string& name : names) tied.push_back(models::tie_param_name(impl_->spec(), name));
  std::shared_ptr<const models::Model> impl;
  try {
    impl = std::make_shared<const models::Model>(impl_->with_ties({tied}));
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("Model::tie: ") + e.what());
  }
  // A zoo model's title is its spec's description, a config's model name: it stays one (with
  // the tie in it), so that a config with the same tie resumes this model's checkpoints.
  std::string title;
  if (title_ == impl_->spec().describe()) {
    title = impl->spec().describe();
  } else {
    title = title_ + ", tie=";
    for (std::size_t i = 0; i < tied.size(); ++i) title += (i ? "=" : "") + tied[i];
  }
  return Model(std::move(impl), std::move(title));
}

std::vector<std::vector<std::string>> Model::ties() const {
  std::vector<std::vector<std::string>> out;
  for (const models::TieGroup& g : impl_->ties()) {
    std::vector<std::string> names;
    for (const models::TieCopy& c : g.copies) names.push_back(c.name);
    out.push_back(std::move(names));
  }
  return out;
}

}  // namespace tandem
