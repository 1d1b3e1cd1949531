#include "runtime/detail/storage.hpp"

#include <stdexcept>

#include "runtime/detail/cpu_allocator.hpp"
#include "runtime/detail/device_backend.hpp"

namespace tandem {

TensorStorage::TensorStorage(std::size_t size, Device where, bool page_locked)
    : bytes(size), device(where) {
  switch (device.kind()) {
    case DeviceKind::cpu: {
      // nullptr: no GPU in use (none loaded, or none on this machine), where page-locking buys
      // nothing; loading the CUDA plugin for it would cost a CPU-only run 200 MB.
      detail::DeviceBackend* backend = detail::loaded_cuda_backend();
      if (page_locked && backend != nullptr) ptr = backend->allocate_pinned(bytes);
      pinned = ptr != nullptr;
      if (!pinned) ptr = detail::cpu_allocate(bytes);
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
  if (pinned) {
    detail::loaded_cuda_backend()->deallocate_pinned(ptr);
  } else if (device.is_cpu()) {
    detail::cpu_deallocate(ptr, bytes);
  } else if (device.is_cuda()) {
    detail::cuda_backend()->deallocate(ptr, device.index());
  }
}

}  // namespace tandem
