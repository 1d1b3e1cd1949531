#pragma once
#include "runtime/tensor.hpp"

namespace tandem::models::data {

// One minibatch (or slice of one) as the model consumes it; see dataset.hpp for the layouts.
struct Batch {
  Tensor inputs;
  Tensor targets;
};

}  // namespace tandem::models::data
