#pragma once
// Language-modelling samples cut from one token stream: sample i is the window
// tokens[i*seq_len, i*seq_len + seq_len + 1); inputs are its first seq_len tokens, targets
// the last seq_len (the next token at each position). Windows do not overlap.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/data/dataset.hpp"

namespace tandem::models::data {

class TokenWindows final : public Dataset {
 public:
  // Throws std::invalid_argument when the stream holds fewer than seq_len + 1 tokens or a
  // token is >= vocab.
  TokenWindows(std::shared_ptr<const std::vector<uint16_t>> tokens, int64_t seq_len, int64_t vocab,
               std::string source);

  int64_t size() const override { return windows_; }
  Batch get(std::span<const int64_t> indices) const override;
  std::string describe() const override;
  Task task() const override { return Task::language_modeling; }
  Shape input_shape() const override { return {seq_len_}; }
  DType input_dtype() const override { return DType::i32; }
  int64_t classes() const override { return vocab_; }

  int64_t seq_len() const { return seq_len_; }
  const std::vector<uint16_t>& tokens() const { return *tokens_; }

 private:
  std::shared_ptr<const std::vector<uint16_t>> tokens_;
  int64_t seq_len_;
  int64_t vocab_;
  int64_t windows_;
  std::string source_;
};

}  // namespace tandem::models::data
