#include "models/layers/activation.hpp"
#include "models/layers/dropout.hpp"
#include "models/layers/layer_norm.hpp"
#include "models/layers/linear.hpp"
#include "tandem/tandem.hpp"

namespace tandem::layers {
namespace {

models::cpu::Activation to_cpu(Activation act) {
  switch (act) {
    case Activation::relu:
      return models::cpu::Activation::relu;
    case Activation::gelu:
      return models::cpu::Activation::gelu;
    case Activation::none:
      break;
  }
  return models::cpu::Activation::none;
}

}  // namespace

LayerPtr linear(std::int64_t in, std::int64_t out, Activation act, bool bias) {
  return std::make_shared<const models::Linear>(in, out, to_cpu(act), bias);
}

LayerPtr relu() {
  return std::make_shared<const models::ReLU>();
}

LayerPtr gelu() {
  return std::make_shared<const models::GELU>();
}

LayerPtr layer_norm(std::int64_t features) {
  return std::make_shared<const models::LayerNorm>(features);
}

LayerPtr dropout(float p, std::uint64_t salt) {
  return std::make_shared<const models::Dropout>(p, salt);
}

}  // namespace tandem::layers
