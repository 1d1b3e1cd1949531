#pragma once
// Between the public layer types (include/tandem/layer.hpp) and the models' own
// (models/layer.hpp): the two sides of the custom- and built-in-layer adapters.
#include <vector>

#include "api/device_kernels.hpp"
#include "models/layer.hpp"
#include "tandem/layer.hpp"

namespace tandem::api {

std::vector<models::ParamSpec> to_models(const std::vector<ParamSpec>& specs);
std::vector<ParamSpec> to_public(const std::vector<models::ParamSpec>& specs);
models::LayerCost to_models(const LayerCost& cost);
LayerCost to_public(const models::LayerCost& cost);
models::SavedLayout to_models(SavedLayout layout);
// The models' record layouts (shape and dropout records) are not_splittable to an application.
SavedLayout to_public(models::SavedLayout layout);

// A public context over the models' one, computing through `kernels` (ctx.k()'s adapter).
LayerContext to_public(const models::Context& ctx, const DeviceKernels& kernels);
// The models' context behind a public one; throws std::invalid_argument unless its kernels are
// Tandem's (models_kernels).
models::Context to_models(const LayerContext& ctx);

}  // namespace tandem::api
