// Linked instead of cuda_backend.cu when the CUDA backend is not built.
#include "runtime/detail/device_backend.hpp"

namespace tandem::detail {

DeviceBackend* cuda_backend() {
  return nullptr;
}

}  // namespace tandem::detail
