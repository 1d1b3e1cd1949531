#pragma once
// An application's loss (tandem::Loss, include/tandem/layer.hpp) as the models' loss of a
// model built in code. Like CustomLayer, each call gets the public view of the stage's kernels,
// and an exception or a result that does not fit comes back prefixed with the loss's describe().
#include <memory>
#include <string>

#include "models/loss.hpp"
#include "tandem/layer.hpp"

namespace tandem::api {

class CustomLoss final : public models::Loss {
 public:
  explicit CustomLoss(std::shared_ptr<const tandem::Loss> loss);

  std::string name() const override { return loss_->describe(); }
  bool classifies() const override { return false; }
  DType target_dtype() const override { return loss_->target_dtype(); }
  Shape target_shape(const Shape& output) const override;
  models::LossResult compute(const models::Context& ctx, const Tensor& output,
                             const Tensor& targets, bool need_grad,
                             float grad_scale) const override;

 private:
  std::string prefix(const char* op) const;
  template <class F>
  auto named(const char* op, F&& call) const -> decltype(call());

  std::shared_ptr<const tandem::Loss> loss_;
};

}  // namespace tandem::api
