#include "models/kernels/cpu/activation.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "models/kernels/cpu/math.hpp"
#include "models/kernels/cpu/reduce.hpp"
#include "models/kernels/cpu/threading.hpp"
#include "models/kernels/cpu/vectorize.hpp"

namespace tandem::models::cpu {
namespace {

TANDEM_VECTOR_CLONES
void act_backward_range(const float* dy, const float* saved, float* dz, std::int64_t n,
                        Activation act) {
  switch (act) {
    case Activation::none:
      if (dz != dy) std::memcpy(dz, dy, static_cast<std::size_t>(n) * sizeof(float));
      break;
    case Activation::relu:
      for (std::int64_t i = 0; i < n; ++i) dz[i] = saved[i] > 0.0f ? dy[i] : 0.0f;
      break;
    case Activation::gelu:
      for (std::int64_t i = 0; i < n; ++i) dz[i] = dy[i] * gelu_grad(saved[i]);
      break;
    case Activation::sigmoid:
      for (std::int64_t i = 0; i < n; ++i) dz[i] = dy[i] * saved[i] * (1.0f - saved[i]);
      break;
    case Activation::tanh:
      for (std::int64_t i = 0; i < n; ++i) dz[i] = dy[i] * (1.0f - saved[i] * saved[i]);
      break;
  }
}

TANDEM_VECTOR_CLONES
void act_forward_range(const float* x, float* y, std::int64_t n, Activation act) {
  switch (act) {
    case Activation::none:
      if (x != y) std::memcpy(y, x, static_cast<std::size_t>(n) * sizeof(float));
      break;
    case Activation::relu:
      for (std::int64_t i = 0; i < n; ++i) y[i] = std::max(x[i], 0.0f);
      break;
    case Activation::gelu:
      for (std::int64_t i = 0; i < n; ++i) y[i] = gelu(x[i]);
      break;
    case Activation::sigmoid:
      for (std::int64_t i = 0; i < n; ++i) y[i] = sigmoid(x[i]);
      break;
    case Activation::tanh:
      for (std::int64_t i = 0; i < n; ++i) y[i] = fast_tanh(x[i]);
      break;
  }
}

// Adds the bias to each row of y, applies the activation in place; gelu keeps z in pre.
TANDEM_VECTOR_CLONES
void bias_act_rows(float* y, const float* bias, std::int64_t r0, std::int64_t r1, std::int64_t cols,
                   Activation act, float* pre) {
  for (std::int64_t r = r0; r < r1; ++r) {
    float* row = y + r * cols;
    if (bias != nullptr) {
      for (std::int64_t c = 0; c < cols; ++c) row[c] += bias[c];
    }
    switch (act) {
      case Activation::none:
        break;
      case Activation::relu:
        for (std::int64_t c = 0; c < cols; ++c) row[c] = std::max(row[c], 0.0f);
        break;
      case Activation::gelu: {
        float* keep = pre + r * cols;
        for (std::int64_t c = 0; c < cols; ++c) {
          keep[c] = row[c];
          row[c] = gelu(row[c]);
        }
        break;
      }
      case Activation::sigmoid:
        for (std::int64_t c = 0; c < cols; ++c) row[c] = sigmoid(row[c]);
        break;
      case Activation::tanh:
        for (std::int64_t c = 0; c < cols; ++c) row[c] = fast_tanh(row[c]);
        break;
    }
  }
}

}  // namespace

const char* activation_name(Activation act) {
  switch (act) {
    case Activation::none:
      return "none";
    case Activation::relu:
      return "relu";
    case Activation::gelu:
      return "gelu";
    case Activation::sigmoid:
      return "sigmoid";
    case Activation::tanh:
      return "tanh";
  }
  return "?";
}

void bias_act_forward(float* y, const float* bias, std::int64_t rows, std::int64_t cols,
                      Activation act, float* pre) {
  const std::int64_t grain =
      std::max<std::int64_t>(1, kElementGrain / std::max<std::int64_t>(cols, 1));
  parallel_for(rows, grain, [&](std::int64_t r0, std::int64_t r1) {
    bias_act_rows(y, bias, r0, r1, cols, act, pre);
  });
}

void act_forward(const float* x, float* y, std::int64_t n, Activation act) {
  parallel_for(n, kElementGrain, [&](std::int64_t i0, std::int64_t i1) {
    act_forward_range(x + i0, y + i0, i1 - i0, act);
  });
}

void act_backward(const float* dy, const float* saved, float* dz, std::int64_t n, Activation act) {
  if (act == Activation::none && dz == dy) return;
  parallel_for(n, kElementGrain, [&](std::int64_t i0, std::int64_t i1) {
    act_backward_range(dy + i0, saved == nullptr ? nullptr : saved + i0, dz + i0, i1 - i0, act);
  });
}

void act_backward_bias(const float* dy, const float* saved, float* dz, std::int64_t rows,
                       std::int64_t cols, Activation act, float* db, float alpha, float beta) {
  if (db == nullptr) {
    act_backward(dy, saved, dz, rows * cols, act);
    return;
  }
  // One pass: each fixed chunk of rows writes its dz and its partial column sums.
  const std::int64_t chunks = (rows + kReduceRows - 1) / kReduceRows;
  std::vector<float> partials(static_cast<std::size_t>(std::max<std::int64_t>(chunks, 1) * cols),
                              0.0f);
  parallel_for(chunks, 1, [&](std::int64_t k0, std::int64_t k1) {
    for (std::int64_t k = k0; k < k1; ++k) {
      float* acc = partials.data() + k * cols;
      const std::int64_t r1 = std::min(rows, (k + 1) * kReduceRows);
      for (std::int64_t r = k * kReduceRows; r < r1; ++r) {
        const std::int64_t off = r * cols;
        act_backward_range(dy + off, saved == nullptr ? nullptr : saved + off, dz + off, cols, act);
        const float* row = dz + off;
        for (std::int64_t c = 0; c < cols; ++c) acc[c] += row[c];
      }
    }
  });
  combine_partials(partials.data(), chunks, cols, alpha, beta, db);
}

}  // namespace tandem::models::cpu
