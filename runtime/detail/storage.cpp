#include "runtime/detail/storage.hpp"

#include <stdexcept>

#include "runtime/detail/cpu_allocator.hpp"
#include "runtime/detail/device_backend.hpp"

namespace tandem {

TensorStorage::TensorStorage(std::size_t size, Device where) : bytes(size), device(where) {
  switch (device.kind()) {
    case DeviceKind::cpu: {
      ptr = detail::cpu_allocate(bytes);
      break;
    }
    case DeviceKind::cuda: {
      detail::DeviceBackend* backend = detail::cuda_backend();
      if (backend == nullptr) {
        throw std::runtime_error("Tensor on " + device.str() + ": CUDA backend not built");
      }
      ptr = backend->allocate(bytes, device.index());
      break;
    }
    case DeviceKind::sim:
      bytes = 0;  // a shape and no data: nothing is allocated
      break;
  }
}

TensorStorage::~TensorStorage() {
  if (ptr == nullptr) return;
  if (device.is_cpu()) {
    detail::cpu_deallocate(ptr, bytes);
  } else if (device.is_cuda()) {
    detail::cuda_backend()->deallocate(ptr, device.index());
  }
}

}  // namespace tandem
