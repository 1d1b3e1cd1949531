#pragma once

#include <cstdint>

namespace tandem::models::cpu {

struct CrossEntropySums {
  double loss_sum = 0;
  std::int64_t correct = 0;
};

// Softmax cross-entropy of logits [rows, classes] against class ids; when dlogits is not null
// writes scale * (softmax - onehot). Throws std::out_of_range naming a bad target.
CrossEntropySums cross_entropy(const float* logits, const std::int32_t* targets, std::int64_t rows,
                               std::int64_t classes, float* dlogits, float scale);

}  // namespace tandem::models::cpu
