#pragma once
// MNIST (or any images + labels pair in IDX format, e.g. Fashion-MNIST): images an IDX array
// [N, rows, cols] of bytes, labels an IDX array [N]. Pixels become f32 in [0, 1].
#include <filesystem>

#include "models/data/dataset.hpp"
#include "models/data/idx_file.hpp"

namespace tandem::models::data {

class Mnist final : public Dataset {
 public:
  // flatten: inputs [B, rows*cols] (for an MLP) instead of [B, 1, rows, cols]. Throws
  // DataFileError on malformed files, a label >= classes, or counts that differ.
  Mnist(const std::filesystem::path& images, const std::filesystem::path& labels, bool flatten,
        int64_t classes = 10);

  int64_t size() const override { return count_; }
  Batch get(std::span<const int64_t> indices) const override;
  std::string describe() const override;
  Task task() const override { return Task::classification; }
  Shape input_shape() const override;
  DType input_dtype() const override { return DType::f32; }
  int64_t classes() const override { return classes_; }

 private:
  std::filesystem::path images_path_;
  IdxArray images_, labels_;
  bool flatten_;
  int64_t classes_;
  int64_t count_ = 0, rows_ = 0, cols_ = 0;
};

}  // namespace tandem::models::data
