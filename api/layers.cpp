#include "api/builtin_layer.hpp"
#include "api/device_kernels.hpp"
#include "models/layers/activation.hpp"
#include "models/layers/dropout.hpp"
#include "models/layers/embedding.hpp"
#include "models/layers/flatten.hpp"
#include "models/layers/layer_norm.hpp"
#include "models/layers/linear.hpp"
#include "models/layers/merge_layer.hpp"
#include "models/layers/reshape.hpp"
#include "tandem/tandem.hpp"

namespace tandem::layers {
namespace {

LayerPtr builtin(std::shared_ptr<const models::Layer> layer) {
  return std::make_shared<const api::BuiltinLayer>(std::move(layer));
}

}  // namespace

LayerPtr linear(std::int64_t in, std::int64_t out, Activation act, bool bias) {
  return builtin(std::make_shared<const models::Linear>(in, out, api::to_models(act), bias));
}

LayerPtr relu() {
  return builtin(std::make_shared<const models::ReLU>());
}

LayerPtr gelu() {
  return builtin(std::make_shared<const models::GELU>());
}

LayerPtr layer_norm(std::int64_t features) {
  return builtin(std::make_shared<const models::LayerNorm>(features));
}

LayerPtr dropout(float p, std::uint64_t salt) {
  return builtin(std::make_shared<const models::Dropout>(p, salt));
}

LayerPtr add(int inputs) {
  return builtin(std::make_shared<const models::AddLayer>(inputs));
}

LayerPtr multiply() {
  return builtin(std::make_shared<const models::MultiplyLayer>());
}

LayerPtr concat(std::vector<std::int64_t> widths) {
  return builtin(std::make_shared<const models::ConcatLayer>(std::move(widths)));
}

LayerPtr embedding(std::int64_t vocab, std::int64_t dim, std::int64_t max_seq) {
  return builtin(std::make_shared<const models::Embedding>(vocab, dim, max_seq));
}

LayerPtr flatten() {
  return builtin(std::make_shared<const models::Flatten>());
}

LayerPtr reshape(std::vector<std::int64_t> shape) {
  return builtin(std::make_shared<const models::Reshape>(std::move(shape)));
}

}  // namespace tandem::layers
