#pragma once

#include <cstdint>

// Fused element-wise optimizer updates on the GPU: the inner loops of models/sgd.cpp and
// models/adamw.cpp, with the hyper-parameters in the optimizers' own (double) types and
// converted to f32 exactly as they convert them. Pointers are device memory; out may alias p
// (an in-place update). `stream` is a cudaStream_t from Stream::native_handle(). Launch
// failures throw std::runtime_error naming the kernel.
namespace tandem::models::cuda {

// PyTorch's SGD (dampening 0), as Sgd::step: d = g + wd * p; with momentum, buf = d on the
// first step (first_step) and buf = momentum * buf + d after, d = nesterov ? d + momentum * buf
// : buf; then out = p - lr * d. buf is not touched (and may be null) when momentum is 0.
void sgd_update(const float* p, const float* g, float* buf, float* out, std::int64_t n, double lr,
                double weight_decay, double momentum, bool nesterov, bool first_step, void* stream);

// PyTorch's AdamW, as AdamW::step with t = steps() + 1: m = b1 m + (1 - b1) g;
// v = b2 v + (1 - b2) g^2; out = p (1 - lr wd) - (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t)
// + eps).
void adamw_update(const float* p, const float* g, float* m, float* v, float* out, std::int64_t n,
                  double lr, double weight_decay, double beta1, double beta2, double eps,
                  std::int64_t t, void* stream);

}  // namespace tandem::models::cuda
