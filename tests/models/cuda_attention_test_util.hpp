#pragma once
// Helpers of the causal attention kernels' GPU tests (cuda_flash_attention_test.cpp,
// cuda_flash_attention2_test.cpp): the shape of a packed qkv input with head size 64, the CPU's
// materialised attention as the reference, and the comparison of an input gradient part by part.
// CUDA builds only, like cuda_test_util.hpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "models/kernels/cpu/attention.hpp"
#include "tests/models/cuda_test_util.hpp"

namespace tandem::models::cuda_test {

// Packed qkv [batch, seq, 3, heads, 64].
struct Shape4 {
  std::int64_t batch, seq, heads;
  std::int64_t qkv_size() const { return batch * seq * 3 * heads * 64; }
  std::int64_t out_size() const { return batch * seq * heads * 64; }
  std::int64_t lse_size() const { return batch * heads * seq; }
  std::string label() const {
    return "batch=" + std::to_string(batch) + " seq=" + std::to_string(seq) +
           " heads=" + std::to_string(heads);
  }
};

// The CPU's forward output and backward dqkv for inputs qkv and output gradient dout.
struct Reference {
  std::vector<float> out, dqkv;
};

inline Reference cpu_reference(const std::vector<float>& qkv, const std::vector<float>& dout,
                               const Shape4& s) {
  Reference r;
  r.out.resize(static_cast<std::size_t>(s.out_size()));
  std::vector<float> probs(static_cast<std::size_t>(s.batch * s.heads * s.seq * s.seq));
  cpu::causal_attention_forward(qkv.data(), r.out.data(), probs.data(), s.batch, s.seq, s.heads,
                                64);
  r.dqkv.resize(qkv.size());
  cpu::causal_attention_backward(qkv.data(), probs.data(), dout.data(), r.dqkv.data(), s.batch,
                                 s.seq, s.heads, 64);
  return r;
}

// dqkv within `tolerance` as a whole and in each of its q, k and v parts, so that a small part
// (dq at seq 1 is exactly 0) cannot hide in the others.
inline void expect_dqkv_near(const std::vector<float>& got, const std::vector<float>& want,
                             const Shape4& s, const std::string& what, double tolerance) {
  EXPECT_LE(rel_error(got, want), tolerance) << s.label() << " " << what;
  const std::int64_t d = s.heads * 64;
  for (int part = 0; part < 3; ++part) {
    std::vector<float> g, w;
    for (std::int64_t row = 0; row < s.batch * s.seq; ++row) {
      for (std::int64_t c = 0; c < d; ++c) {
        const auto i = static_cast<std::size_t>(row * 3 * d + part * d + c);
        g.push_back(got[i]);
        w.push_back(want[i]);
      }
    }
    double largest = 0;
    for (float v : w) largest = std::max(largest, std::abs(static_cast<double>(v)));
    if (largest < 1e-6) continue;  // dq of a single position is exactly 0
    EXPECT_LE(rel_error(g, w), tolerance) << s.label() << " " << what << " part "
                                          << "qkv"[part];
  }
}

}  // namespace tandem::models::cuda_test
