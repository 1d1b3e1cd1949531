#pragma once
// The channel tests' numbered message: a forward tensor from `sender` numbered `seq` (its tag's
// minibatch), of one of three dtypes and shapes, so that order and contents can be checked.
#include <cstdint>

#include "actors/messages.hpp"
#include "runtime/message.hpp"
#include "wire_test_helpers.hpp"

namespace tandem::transport::testing {

inline Message numbered(int sender, std::int64_t seq) {
  Tensor t;
  switch (seq % 3) {
    case 0:
      t = f32_tensor({seq % 5 + 1, 3}, static_cast<float>(seq));
      break;
    case 1:
      t = i32_tensor({seq % 7 + 1}, static_cast<std::int32_t>(seq));
      break;
    default:
      t = bf16_tensor({2, seq % 4 + 1, 2}, static_cast<float>(seq % 100));
      break;
  }
  return make_message(actors::ForwardTensor{actors::TensorMeta::of(t)}, {t},
                      tag_of(seq, 0, 1, sender));
}

}  // namespace tandem::transport::testing
