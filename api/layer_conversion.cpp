#include "api/layer_conversion.hpp"

namespace tandem::api {
namespace {

models::Init to_models(ParamInit init) {
  switch (init) {
    case ParamInit::ones:
      return models::Init::ones;
    case ParamInit::normal:
      return models::Init::normal;
    case ParamInit::uniform_fan_in:
      return models::Init::uniform_fan_in;
    case ParamInit::zeros:
      break;
  }
  return models::Init::zeros;
}

ParamInit to_public(models::Init init) {
  switch (init) {
    case models::Init::ones:
      return ParamInit::ones;
    case models::Init::normal:
      return ParamInit::normal;
    case models::Init::uniform_fan_in:
      return ParamInit::uniform_fan_in;
    case models::Init::zeros:
      break;
  }
  return ParamInit::zeros;
}

}  // namespace

std::vector<models::ParamSpec> to_models(const std::vector<ParamSpec>& specs) {
  std::vector<models::ParamSpec> out;
  out.reserve(specs.size());
  for (const ParamSpec& s : specs) {
    out.push_back({s.name, s.shape, to_models(s.init), s.scale, s.fan_in});
  }
  return out;
}

std::vector<ParamSpec> to_public(const std::vector<models::ParamSpec>& specs) {
  std::vector<ParamSpec> out;
  out.reserve(specs.size());
  for (const models::ParamSpec& s : specs) {
    out.push_back({s.name, s.shape, to_public(s.init), s.scale, s.fan_in});
  }
  return out;
}

models::LayerCost to_models(const LayerCost& cost) {
  return {cost.forward_flops, cost.backward_input_flops, cost.backward_weight_flops};
}

LayerCost to_public(const models::LayerCost& cost) {
  return {cost.forward_flops, cost.backward_input_flops, cost.backward_weight_flops};
}

models::SavedLayout to_models(SavedLayout layout) {
  return layout == SavedLayout::rows ? models::SavedLayout::rows
                                     : models::SavedLayout::not_splittable;
}

SavedLayout to_public(models::SavedLayout layout) {
  return layout == models::SavedLayout::rows ? SavedLayout::rows : SavedLayout::not_splittable;
}

LayerContext to_public(const models::Context& ctx, const DeviceKernels& kernels) {
  LayerContext out;
  out.training = ctx.training;
  out.seed = ctx.seed;
  out.sample_begin = ctx.sample_begin;
  out.keep_saved = ctx.keep_saved;
  out.kernels = &kernels;
  return out;
}

models::Context to_models(const LayerContext& ctx) {
  models::Context out;
  out.training = ctx.training;
  out.seed = ctx.seed;
  out.sample_begin = ctx.sample_begin;
  out.keep_saved = ctx.keep_saved;
  out.kernels = &models_kernels(ctx.k());
  return out;
}

}  // namespace tandem::api
