#pragma once
// What `tandem predict` and train::predict refuse (train/predict.hpp, train/predict_inputs.hpp).
#include <stdexcept>

namespace tandem::train {

// Inputs or weights that do not fit the model, a plan predict cannot run. The message names
// the tensor (and the file, for what was read from one).
class PredictError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace tandem::train
