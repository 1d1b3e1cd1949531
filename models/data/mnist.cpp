#include "models/data/mnist.hpp"

#include <stdexcept>
#include <string>

#include "models/data/data_file_error.hpp"

namespace tandem::models::data {

Mnist::Mnist(const std::filesystem::path& images, const std::filesystem::path& labels, bool flatten,
             int64_t classes)
    : images_path_(images),
      images_(read_idx_ubyte(images)),
      labels_(read_idx_ubyte(labels)),
      flatten_(flatten),
      classes_(classes) {
  if (classes < 2 || classes > 256)
    throw std::invalid_argument("mnist: classes must be in [2, 256]");
  if (images_.dims.size() != 3) {
    throw DataFileError(images, 3,
                        "images need 3 dimensions [count, rows, cols], the file has " +
                            std::to_string(images_.dims.size()));
  }
  if (labels_.dims.size() != 1) {
    throw DataFileError(
        labels, 3,
        "labels need 1 dimension [count], the file has " + std::to_string(labels_.dims.size()));
  }
  count_ = images_.dims[0];
  rows_ = images_.dims[1];
  cols_ = images_.dims[2];
  if (labels_.dims[0] != count_) {
    throw DataFileError(labels, 4,
                        "holds " + std::to_string(labels_.dims[0]) + " labels but " +
                            images.string() + " holds " + std::to_string(count_) + " images");
  }
  for (size_t i = 0; i < labels_.data.size(); ++i) {
    if (labels_.data[i] >= classes_) {
      throw DataFileError(
          labels, labels_.data_offset + i,
          "label " + std::to_string(labels_.data[i]) + " >= classes " + std::to_string(classes_));
    }
  }
}

Shape Mnist::input_shape() const {
  if (flatten_) return {rows_ * cols_};
  return {1, rows_, cols_};
}

Batch Mnist::get(std::span<const int64_t> indices) const {
  check_indices(indices);
  const auto b = static_cast<int64_t>(indices.size());
  Shape shape{b};
  for (int64_t d : input_shape()) shape.push_back(d);
  Batch batch{Tensor::empty(shape, DType::f32), Tensor::empty({b}, DType::i32)};
  float* x = batch.inputs.data<float>();
  int32_t* y = batch.targets.data<int32_t>();
  const auto pixels = static_cast<size_t>(rows_ * cols_);
  for (size_t i = 0; i < indices.size(); ++i) {
    const auto k = static_cast<size_t>(indices[i]);
    const uint8_t* src = images_.data.data() + k * pixels;
    for (size_t p = 0; p < pixels; ++p) x[i * pixels + p] = static_cast<float>(src[p]) / 255.0f;
    y[i] = labels_.data[k];
  }
  return batch;
}

std::string Mnist::describe() const {
  return "mnist(" + images_path_.string() + ", " + std::to_string(count_) + " images " +
         std::to_string(rows_) + "x" + std::to_string(cols_) + ")";
}

}  // namespace tandem::models::data
