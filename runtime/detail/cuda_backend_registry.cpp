// The CUDA backend as the core sees it: a pointer the CUDA plugin registers when it loads.
#include <atomic>

#include "runtime/detail/device_backend.hpp"
#include "runtime/plugin.hpp"

namespace tandem::detail {
namespace {

std::atomic<DeviceBackend*> registered{nullptr};

}  // namespace

void register_cuda_backend(DeviceBackend* backend) {
  registered.store(backend, std::memory_order_release);
}

DeviceBackend* loaded_cuda_backend() {
  return registered.load(std::memory_order_acquire);
}

DeviceBackend* cuda_backend() {
  if (DeviceBackend* b = loaded_cuda_backend()) return b;
  load_plugin("cuda");
  return loaded_cuda_backend();
}

}  // namespace tandem::detail
