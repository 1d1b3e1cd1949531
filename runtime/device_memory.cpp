#include "runtime/device_memory.hpp"

#include <fmt/format.h>

#include <stdexcept>

#include "runtime/detail/cpu_allocator.hpp"
#include "runtime/detail/device_backend.hpp"

namespace tandem {
namespace {

detail::DeviceBackend& backend_for(Device device, const char* op) {
  detail::DeviceBackend* backend = detail::cuda_backend();
  if (backend == nullptr) {
    throw std::runtime_error(fmt::format("{}({}): CUDA backend not built", op, device.str()));
  }
  return *backend;
}

}  // namespace

DeviceMemoryStats device_memory_stats(Device device) {
  switch (device.kind()) {
    case DeviceKind::cpu:
      return detail::cpu_memory_stats();
    case DeviceKind::cuda:
      return backend_for(device, "device_memory_stats").memory_stats(device.index());
    case DeviceKind::sim:
      break;
  }
  return {};
}

std::size_t release_cached_memory(Device device) {
  switch (device.kind()) {
    case DeviceKind::cpu:
      return detail::cpu_release_cached();
    case DeviceKind::cuda:
      return backend_for(device, "release_cached_memory").release_cached(device.index());
    case DeviceKind::sim:
      break;
  }
  return 0;
}

void reset_peak_memory(Device device) {
  switch (device.kind()) {
    case DeviceKind::cpu:
      detail::cpu_reset_peak();
      break;
    case DeviceKind::cuda:
      backend_for(device, "reset_peak_memory").reset_peak(device.index());
      break;
    case DeviceKind::sim:
      break;
  }
}

}  // namespace tandem
