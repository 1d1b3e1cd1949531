#pragma once
// CIFAR-10 binary version: each file is a sequence of 3073-byte records, one label byte then
// 32x32 red, green and blue planes. Several files (data_batch_1.bin ...) form one dataset.
// Pixels become f32 in [0, 1].
#include <filesystem>
#include <vector>

#include "models/data/dataset.hpp"

namespace tandem::models::data {

class Cifar10 final : public Dataset {
 public:
  static constexpr int64_t kImageSize = 32;
  static constexpr int64_t kChannels = 3;
  static constexpr int64_t kRecordBytes = 1 + kChannels * kImageSize * kImageSize;

  // flatten: inputs [B, 3072] (for an MLP) instead of [B, 3, 32, 32]. Throws DataFileError on
  // an empty file, a file that ends inside a record, or a label >= classes.
  Cifar10(const std::vector<std::filesystem::path>& files, bool flatten, int64_t classes = 10);

  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  Batch get(std::span<const int64_t> indices) const override;
  std::string describe() const override;
  Task task() const override { return Task::classification; }
  Shape input_shape() const override;
  DType input_dtype() const override { return DType::f32; }
  int64_t classes() const override { return classes_; }

 private:
  std::vector<std::filesystem::path> files_;
  std::vector<uint8_t> labels_;
  std::vector<uint8_t> pixels_;  // [N, 3, 32, 32]
  bool flatten_;
  int64_t classes_;
};

}  // namespace tandem::models::data
