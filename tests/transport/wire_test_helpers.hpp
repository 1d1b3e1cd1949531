#pragma once
// What the data-plane tests share: tensors with recognizable contents, exact comparison of a
// message as sent and as received, and tags.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "runtime/dtype.hpp"
#include "runtime/message.hpp"
#include "runtime/tensor.hpp"

namespace tandem::transport::testing {

inline Tensor f32_tensor(Shape shape, float base) {
  Tensor t = Tensor::empty(std::move(shape), DType::f32);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = base + 0.25f * i;
  return t;
}

inline Tensor i32_tensor(Shape shape, std::int32_t base) {
  Tensor t = Tensor::empty(std::move(shape), DType::i32);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<std::int32_t>()[i] = base - 3 * i;
  return t;
}

inline Tensor bf16_tensor(Shape shape, float base) {
  Tensor t = Tensor::empty(std::move(shape), DType::bf16);
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    t.data<BFloat16>()[i] = BFloat16::from_float(base - 0.5f * i);
  }
  return t;
}

inline std::vector<std::byte> bytes_of(const Tensor& t) {
  const auto* p = static_cast<const std::byte*>(t.raw_data());
  return {p, p + t.nbytes()};
}

inline void expect_same_message(const Message& got, const Message& sent) {
  EXPECT_EQ(got.env.type, sent.env.type);
  EXPECT_EQ(got.env.lane, sent.env.lane);
  EXPECT_EQ(got.env.flags, sent.env.flags);
  EXPECT_EQ(got.env.tag, sent.env.tag);
  EXPECT_EQ(std::memcmp(got.env.body, sent.env.body, kEnvelopeBodyBytes), 0);
  ASSERT_EQ(got.tensors.size(), sent.tensors.size());
  for (std::size_t i = 0; i < sent.tensors.size(); ++i) {
    const Tensor& a = got.tensors[i];
    const Tensor& b = sent.tensors[i];
    ASSERT_EQ(a.defined(), b.defined()) << "tensor " << i;
    if (!b.defined()) continue;
    EXPECT_EQ(a.describe(), b.describe()) << "tensor " << i;
    if (b.device().is_cpu()) {
      EXPECT_EQ(bytes_of(a), bytes_of(b)) << "tensor " << i;
      EXPECT_FALSE(a.shares_storage(b));
    }
  }
}

inline Tag tag_of(std::int64_t minibatch, int begin, int end, int kind, int chunk = 0) {
  Tag t;
  t.minibatch = minibatch;
  t.begin = begin;
  t.end = end;
  t.kind = static_cast<std::uint8_t>(kind);
  t.chunk = static_cast<std::uint8_t>(chunk);
  t.aux = 0xbeef;
  return t;
}

}  // namespace tandem::transport::testing
