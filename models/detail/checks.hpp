#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "models/layer.hpp"
#include "runtime/tensor.hpp"

namespace tandem::models::detail {

// Argument checks of the layers. Tensors must live where the Context's kernels compute, so the
// checks take those kernels rather than assuming the CPU.

// Throws std::invalid_argument "<who>: <what>: got <tensor>" unless t is defined and on k's
// device.
void require_on(const Kernels& k, const Tensor& t, const std::string& who, const char* what);
// An f32 view of t on k's device: t itself when already f32, a converted copy for bf16; throws
// for other dtypes.
Tensor as_f32(const Kernels& k, const Tensor& t, const std::string& who, const char* what);
// Throws unless t is f32 of exactly `shape` on k's device.
void require_f32_shape(const Kernels& k, const Tensor& t, const Shape& shape,
                       const std::string& who, const char* what);
// Throws unless params/sink hold one f32 tensor on k's device per spec with the spec's shape.
void require_params(const Kernels& k, ParamView params, const std::vector<ParamSpec>& specs,
                    const std::string& who);
void require_sink(const Kernels& k, const GradSink& sink, const std::vector<ParamSpec>& specs,
                  const std::string& who);
// Throws unless saved has at least n entries (a backward without its forward).
void require_saved(const Saved& saved, std::size_t n, const std::string& who);

// Addresses for the kernels. Unlike Tensor::data<T>() they work on any device with data (the
// kernels know what the pointer means), and only check the dtype. Throw std::logic_error for a
// tensor of another dtype, and for undefined or sim tensors.
float* ptr(Tensor& t);
const float* ptr(const Tensor& t);
std::int32_t* ids(Tensor& t);
const std::int32_t* ids(const Tensor& t);

// The CPU-only forms, for the loss (which computes on the CPU outside any Context).
void require_cpu(const Tensor& t, const std::string& who, const char* what);
Tensor as_f32(const Tensor& t, const std::string& who, const char* what);
Tensor new_f32(const Shape& shape);

}  // namespace tandem::models::detail
