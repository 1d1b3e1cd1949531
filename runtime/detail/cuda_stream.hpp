#pragma once
// Defined by cuda_stream.cu; called only from cuda_backend.cu (CUDA builds).
#include <memory>

#include "runtime/detail/stream_impl.hpp"

namespace tandem::detail {

// index must be a visible device (the backend checks).
std::shared_ptr<StreamImpl> make_cuda_stream(int index);

}  // namespace tandem::detail
