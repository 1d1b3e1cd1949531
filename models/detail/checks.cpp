#include "models/detail/checks.hpp"

#include <stdexcept>

namespace tandem::models::detail {
namespace {

void require_dtype(const Tensor& t, DType dtype) {
  if (t.dtype() != dtype) {
    throw std::logic_error("kernel argument must be " + std::string(dtype_name(dtype)) + ", got " +
                           t.describe());
  }
}

}  // namespace

void require_on(const Kernels& k, const Tensor& t, const std::string& who, const char* what) {
  if (!t.defined()) throw std::invalid_argument(who + ": " + what + " is undefined");
  if (t.device() != k.device()) {
    throw std::invalid_argument(who + ": " + what + " must be on the " + k.device().str() +
                                " (the context's kernels), got " + t.describe());
  }
}

Tensor as_f32(const Kernels& k, const Tensor& t, const std::string& who, const char* what) {
  require_on(k, t, who, what);
  if (t.dtype() == DType::f32) return t;
  if (t.dtype() == DType::bf16) return k.to_f32(t);
  throw std::invalid_argument(who + ": " + what + " must be f32 or bf16, got " + t.describe());
}

void require_f32_shape(const Kernels& k, const Tensor& t, const Shape& shape,
                       const std::string& who, const char* what) {
  require_on(k, t, who, what);
  if (t.dtype() != DType::f32 || t.shape() != shape) {
    throw std::invalid_argument(who + ": " + what + " must be f32" + shape_str(shape) + ", got " +
                                t.describe());
  }
}

void require_params(const Kernels& k, ParamView params, const std::vector<ParamSpec>& specs,
                    const std::string& who) {
  if (params.size() != specs.size()) {
    throw std::invalid_argument(who + ": expects " + std::to_string(specs.size()) +
                                " parameters, got " + std::to_string(params.size()));
  }
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const std::string what = "parameter '" + specs[i].name + "'";
    require_f32_shape(k, params[i], specs[i].shape, who, what.c_str());
  }
}

void require_sink(const Kernels& k, const GradSink& sink, const std::vector<ParamSpec>& specs,
                  const std::string& who) {
  if (sink.grads.size() != specs.size()) {
    throw std::invalid_argument(who + ": gradient sink has " + std::to_string(sink.grads.size()) +
                                " tensors for " + std::to_string(specs.size()) + " parameters");
  }
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const std::string what = "gradient of '" + specs[i].name + "'";
    require_f32_shape(k, sink.grads[i], specs[i].shape, who, what.c_str());
  }
}

void require_saved(const Saved& saved, std::size_t n, const std::string& who) {
  if (saved.size() < n) {
    throw std::invalid_argument(who + ": backward needs " + std::to_string(n) +
                                " saved tensors, got " + std::to_string(saved.size()) +
                                " (forward run without ctx.keep_saved?)");
  }
}

float* ptr(Tensor& t) {
  require_dtype(t, DType::f32);
  return static_cast<float*>(t.raw_data());
}

const float* ptr(const Tensor& t) {
  require_dtype(t, DType::f32);
  return static_cast<const float*>(t.raw_data());
}

std::int32_t* ids(Tensor& t) {
  require_dtype(t, DType::i32);
  return static_cast<std::int32_t*>(t.raw_data());
}

const std::int32_t* ids(const Tensor& t) {
  require_dtype(t, DType::i32);
  return static_cast<const std::int32_t*>(t.raw_data());
}

void require_cpu(const Tensor& t, const std::string& who, const char* what) {
  if (!t.defined()) throw std::invalid_argument(who + ": " + what + " is undefined");
  if (!t.device().is_cpu()) {
    throw std::invalid_argument(who + ": " + what + " must be on the cpu (CPU kernels), got " +
                                t.describe());
  }
}

Tensor as_f32(const Tensor& t, const std::string& who, const char* what) {
  return as_f32(cpu_kernels(), t, who, what);
}

Tensor new_f32(const Shape& shape) {
  return Tensor::empty(shape, DType::f32);
}

}  // namespace tandem::models::detail
