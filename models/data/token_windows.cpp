#include "models/data/token_windows.hpp"

#include <stdexcept>

namespace tandem::models::data {

TokenWindows::TokenWindows(std::shared_ptr<const std::vector<uint16_t>> tokens, int64_t seq_len,
                           int64_t vocab, std::string source)
    : tokens_(std::move(tokens)), seq_len_(seq_len), vocab_(vocab), source_(std::move(source)) {
  if (!tokens_) throw std::invalid_argument(source_ + ": no token stream");
  if (seq_len_ < 1 || vocab_ < 1) {
    throw std::invalid_argument(source_ + ": seq_len and vocab must be >= 1");
  }
  const auto n = static_cast<int64_t>(tokens_->size());
  if (n < seq_len_ + 1) {
    throw std::invalid_argument(
        source_ + ": " + std::to_string(n) +
        " tokens are fewer than one window of seq_len + 1 = " + std::to_string(seq_len_ + 1));
  }
  for (size_t i = 0; i < tokens_->size(); ++i) {
    if ((*tokens_)[i] >= vocab_) {
      throw std::invalid_argument(source_ + ": token " + std::to_string((*tokens_)[i]) +
                                  " at position " + std::to_string(i) + " is >= vocab " +
                                  std::to_string(vocab_));
    }
  }
  windows_ = (n - 1) / seq_len_;
}

Batch TokenWindows::get(std::span<const int64_t> indices) const {
  check_indices(indices);
  const auto b = static_cast<int64_t>(indices.size());
  Batch batch{Tensor::empty({b, seq_len_}, DType::i32), Tensor::empty({b, seq_len_}, DType::i32)};
  int32_t* x = batch.inputs.data<int32_t>();
  int32_t* y = batch.targets.data<int32_t>();
  const auto t = static_cast<size_t>(seq_len_);
  for (size_t i = 0; i < indices.size(); ++i) {
    const uint16_t* w = tokens_->data() + static_cast<size_t>(indices[i]) * t;
    for (size_t j = 0; j < t; ++j) {
      x[i * t + j] = w[j];
      y[i * t + j] = w[j + 1];
    }
  }
  return batch;
}

std::string TokenWindows::describe() const {
  return "tokens(" + source_ + ", seq_len=" + std::to_string(seq_len_) +
         ", vocab=" + std::to_string(vocab_) + ", windows=" + std::to_string(windows_) + ")";
}

}  // namespace tandem::models::data
