#include "models/detail/checks.hpp"

#include <stdexcept>

namespace tandem::models::detail {

void require_cpu(const Tensor& t, const std::string& who, const char* what) {
  if (!t.defined()) throw std::invalid_argument(who + ": " + what + " is undefined");
  if (!t.device().is_cpu()) {
    throw std::invalid_argument(who + ": " + what + " must be on the cpu (CPU kernels), got " +
                                t.describe());
  }
}

Tensor as_f32(const Tensor& t, const std::string& who, const char* what) {
  require_cpu(t, who, what);
  if (t.dtype() == DType::f32) return t;
  if (t.dtype() == DType::bf16) return t.to(DType::f32);
  throw std::invalid_argument(who + ": " + what + " must be f32 or bf16, got " + t.describe());
}

void require_f32_shape(const Tensor& t, const Shape& shape, const std::string& who,
                       const char* what) {
  require_cpu(t, who, what);
  if (t.dtype() != DType::f32 || t.shape() != shape) {
    throw std::invalid_argument(who + ": " + what + " must be f32" + shape_str(shape) + ", got " +
                                t.describe());
  }
}

void require_params(ParamView params, const std::vector<ParamSpec>& specs, const std::string& who) {
  if (params.size() != specs.size()) {
    throw std::invalid_argument(who + ": expects " + std::to_string(specs.size()) +
                                " parameters, got " + std::to_string(params.size()));
  }
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const std::string what = "parameter '" + specs[i].name + "'";
    require_f32_shape(params[i], specs[i].shape, who, what.c_str());
  }
}

void require_sink(const GradSink& sink, const std::vector<ParamSpec>& specs,
                  const std::string& who) {
  if (sink.grads.size() != specs.size()) {
    throw std::invalid_argument(who + ": gradient sink has " + std::to_string(sink.grads.size()) +
                                " tensors for " + std::to_string(specs.size()) + " parameters");
  }
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const std::string what = "gradient of '" + specs[i].name + "'";
    require_f32_shape(sink.grads[i], specs[i].shape, who, what.c_str());
  }
}

void require_saved(const Saved& saved, std::size_t n, const std::string& who) {
  if (saved.size() < n) {
    throw std::invalid_argument(who + ": backward needs " + std::to_string(n) +
                                " saved tensors, got " + std::to_string(saved.size()) +
                                " (forward run without ctx.keep_saved?)");
  }
}

Tensor new_f32(const Shape& shape) {
  return Tensor::empty(shape, DType::f32);
}

}  // namespace tandem::models::detail
