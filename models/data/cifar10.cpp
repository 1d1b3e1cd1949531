#include "models/data/cifar10.hpp"

#include <stdexcept>
#include <string>

#include "models/data/data_file_error.hpp"
#include "models/data/detail/read_file.hpp"

namespace tandem::models::data {

Cifar10::Cifar10(const std::vector<std::filesystem::path>& files, bool flatten, int64_t classes)
    : files_(files), flatten_(flatten), classes_(classes) {
  if (files.empty()) throw std::invalid_argument("cifar10: no files given");
  if (classes < 2 || classes > 256) {
    throw std::invalid_argument("cifar10: classes must be in [2, 256]");
  }
  const auto record = static_cast<size_t>(kRecordBytes);
  for (const auto& path : files) {
    const std::vector<unsigned char> bytes = detail::read_file(path);
    if (bytes.empty()) throw DataFileError(path, 0, "empty CIFAR-10 file");
    if (bytes.size() % record != 0) {
      const size_t whole = bytes.size() / record;
      throw DataFileError(path, whole * record,
                          "truncated: record " + std::to_string(whole) + " has " +
                              std::to_string(bytes.size() % record) + " of its " +
                              std::to_string(record) + " bytes");
    }
    for (size_t at = 0; at < bytes.size(); at += record) {
      if (bytes[at] >= classes_) {
        throw DataFileError(
            path, at,
            "label " + std::to_string(bytes[at]) + " >= classes " + std::to_string(classes_));
      }
      labels_.push_back(bytes[at]);
      pixels_.insert(pixels_.end(), bytes.begin() + static_cast<std::ptrdiff_t>(at + 1),
                     bytes.begin() + static_cast<std::ptrdiff_t>(at + record));
    }
  }
}

Shape Cifar10::input_shape() const {
  if (flatten_) return {kChannels * kImageSize * kImageSize};
  return {kChannels, kImageSize, kImageSize};
}

Batch Cifar10::get(std::span<const int64_t> indices) const {
  check_indices(indices);
  const auto b = static_cast<int64_t>(indices.size());
  Shape shape{b};
  for (int64_t d : input_shape()) shape.push_back(d);
  Batch batch{Tensor::empty(shape, DType::f32), Tensor::empty({b}, DType::i32)};
  float* x = batch.inputs.data<float>();
  int32_t* y = batch.targets.data<int32_t>();
  const auto per = static_cast<size_t>(kRecordBytes - 1);
  for (size_t i = 0; i < indices.size(); ++i) {
    const auto k = static_cast<size_t>(indices[i]);
    const uint8_t* src = pixels_.data() + k * per;
    for (size_t p = 0; p < per; ++p) x[i * per + p] = static_cast<float>(src[p]) / 255.0f;
    y[i] = labels_[k];
  }
  return batch;
}

std::string Cifar10::describe() const {
  return "cifar10(" + std::to_string(files_.size()) + " files, " + std::to_string(size()) +
         " images)";
}

}  // namespace tandem::models::data
