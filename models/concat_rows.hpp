#pragma once

#include <span>

#include "models/kernels/kernels.hpp"
#include "runtime/tensor.hpp"

namespace tandem::models {

// The tensors stacked along dimension 0, allocated and copied through `k`, so that the copy is
// ordered after the work that produced them (runtime's concat_rows copies on the host at once,
// which reads a device's results before they exist). All parts on k's device, of one dtype,
// equal in every dimension but the first; throws std::invalid_argument naming the first that is
// not. One part is returned as it is.
Tensor concat_rows(const Kernels& k, std::span<const Tensor> parts);

}  // namespace tandem::models
