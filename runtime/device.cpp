#include "runtime/device.hpp"

#include <charconv>
#include <stdexcept>
#include <string>

#include "runtime/detail/device_backend.hpp"

namespace tandem {

Device Device::cuda(int index) {
  if (index < 0) {
    throw std::invalid_argument("Device::cuda: negative device index " + std::to_string(index));
  }
  return Device(DeviceKind::cuda, index);
}

Device Device::parse(std::string_view text) {
  if (text == "cpu") return cpu();
  if (text == "sim") return sim();
  if (text == "cuda") return cuda(0);
  constexpr std::string_view prefix = "cuda:";
  if (text.starts_with(prefix)) {
    const std::string_view digits = text.substr(prefix.size());
    int index = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && end == digits.data() + digits.size() && !digits.empty() &&
        index >= 0) {
      return cuda(index);
    }
  }
  throw std::invalid_argument("Device::parse: unknown device '" + std::string(text) +
                              "' (expected cpu, sim, cuda or cuda:N)");
}

std::string Device::str() const {
  switch (kind_) {
    case DeviceKind::cpu:
      return "cpu";
    case DeviceKind::cuda:
      return "cuda:" + std::to_string(index_);
    case DeviceKind::sim:
      return "sim";
  }
  return "invalid-device";
}

bool cuda_backend_built() {
  return detail::cuda_backend() != nullptr;
}

int cuda_device_count() {
  detail::DeviceBackend* backend = detail::cuda_backend();
  return backend == nullptr ? 0 : backend->device_count();
}

}  // namespace tandem
