// The defaults of the public tandem::Layer (include/tandem/layer.hpp).
#include "tandem/layer.hpp"

#include <stdexcept>

namespace tandem {

LayerCost Layer::cost(const Shape& /*input*/) const {
  return {};
}

void Layer::backward_weight_into(const LayerContext& /*ctx*/, const Saved& /*saved*/,
                                 const Tensor& /*dy*/, const GradSink& /*sink*/) const {
  if (!param_specs().empty()) {
    throw std::logic_error(describe() + " has parameters but does not override " +
                           "backward_weight_into");
  }
}

SavedLayout Layer::saved_layout(std::size_t /*k*/) const {
  return SavedLayout::rows;
}

std::int64_t Layer::param_numel() const {
  std::int64_t n = 0;
  for (const ParamSpec& s : param_specs()) n += shape_numel(s.shape);
  return n;
}

}  // namespace tandem
