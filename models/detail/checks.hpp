#pragma once

#include <span>
#include <string>
#include <vector>

#include "models/layer.hpp"
#include "runtime/tensor.hpp"

namespace tandem::models::detail {

// Throws std::invalid_argument "<who>: <what>: got <tensor>" unless t is a defined CPU tensor.
void require_cpu(const Tensor& t, const std::string& who, const char* what);
// A CPU f32 view of t: t itself when already f32, a converted copy for bf16; throws for i32.
Tensor as_f32(const Tensor& t, const std::string& who, const char* what);
// Throws unless t is CPU f32 of exactly `shape`.
void require_f32_shape(const Tensor& t, const Shape& shape, const std::string& who,
                       const char* what);
// Throws unless params/sink hold one CPU f32 tensor per spec with the spec's shape.
void require_params(ParamView params, const std::vector<ParamSpec>& specs, const std::string& who);
void require_sink(const GradSink& sink, const std::vector<ParamSpec>& specs,
                  const std::string& who);
// Throws unless saved has at least n entries (a backward without its forward).
void require_saved(const Saved& saved, std::size_t n, const std::string& who);
// A new tensor of dy's shape with the layer-input gradient convention: f32 on the CPU.
Tensor new_f32(const Shape& shape);

}  // namespace tandem::models::detail
