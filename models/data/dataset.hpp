#pragma once
// A dataset is an indexed collection of samples; a Batch gathers any set of indices. Samples
// are pure functions of (dataset parameters, index), so loaders on different threads,
// processes or hosts see identical data for the same indices.
//
// Layouts of a Batch of B samples:
//   classification of vectors: inputs f32 [B, features],   targets i32 [B]
//   classification of images:  inputs f32 [B, C, H, W],    targets i32 [B]
//   language modelling:        inputs i32 [B, seq_len],     targets i32 [B, seq_len] (next token)
//   regression of vectors:     inputs f32 [B, features],   targets f32 [B, outputs]
#include <cstdint>
#include <span>
#include <string>

#include "models/data/batch.hpp"

namespace tandem::models::data {

enum class Task { classification, language_modeling, regression };

class Dataset {
 public:
  virtual ~Dataset() = default;

  virtual int64_t size() const = 0;
  // Throws std::out_of_range naming the index when one is outside [0, size()).
  virtual Batch get(std::span<const int64_t> indices) const = 0;
  virtual std::string describe() const = 0;

  virtual Task task() const = 0;
  // Shape of one sample's input (without the batch dimension) and its dtype.
  virtual Shape input_shape() const = 0;
  virtual DType input_dtype() const = 0;
  // Number of classes (the vocabulary size for language modelling, the outputs for regression).
  virtual int64_t classes() const = 0;

 protected:
  // Throws std::out_of_range unless every index is in [0, size()).
  void check_indices(std::span<const int64_t> indices) const;
};

}  // namespace tandem::models::data
