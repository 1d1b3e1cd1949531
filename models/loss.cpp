#include "models/loss.hpp"

#include <cstring>
#include <stdexcept>

#include "models/losses/bce_with_logits.hpp"
#include "models/losses/cross_entropy.hpp"
#include "models/losses/mse.hpp"

namespace tandem::models {

LossResult LossResult::resolved() const {
  LossResult r = *this;
  if (pending_sums.defined()) {
    // Written by the device as a CrossEntropySums: a double and an int64.
    const auto* bytes = static_cast<const unsigned char*>(pending_sums.raw_data());
    std::memcpy(&r.loss_sum, bytes, sizeof r.loss_sum);
    std::memcpy(&r.correct, bytes + sizeof(double), sizeof r.correct);
    r.pending_sums = Tensor();
  }
  return r;
}

void Loss::check_targets(const Shape& output, DType dtype, const Shape& targets,
                         std::string_view what) const {
  const Shape want = target_shape(output);
  if (dtype == target_dtype() && targets == want) return;
  throw std::invalid_argument("loss " + name() + ": " + std::string(what) + " are " +
                              std::string(dtype_name(dtype)) + shape_str(targets) +
                              ", the model's output " + shape_str(output) + " takes " +
                              std::string(dtype_name(target_dtype())) + shape_str(want));
}

LossPtr make_loss(std::string_view name) {
  if (name == "cross_entropy") return std::make_shared<losses::CrossEntropy>();
  if (name == "mse") return std::make_shared<losses::MeanSquaredError>();
  if (name == "bce_with_logits") return std::make_shared<losses::BceWithLogits>();
  throw std::invalid_argument("loss '" + std::string(name) + "': expected " + loss_names());
}

const char* loss_names() {
  return "cross_entropy, mse or bce_with_logits";
}

}  // namespace tandem::models
