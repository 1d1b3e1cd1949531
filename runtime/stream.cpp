#include "runtime/stream.hpp"

#include <fmt/format.h>

#include <stdexcept>
#include <utility>

#include "runtime/detail/device_backend.hpp"
#include "runtime/detail/stream_impl.hpp"

namespace tandem {
namespace {

std::shared_ptr<detail::StreamImpl> make_stream(Device device) {
  switch (device.kind()) {
    case DeviceKind::cpu:
      return detail::make_cpu_stream();
    case DeviceKind::cuda: {
      detail::DeviceBackend* backend = detail::cuda_backend();
      if (backend == nullptr) {
        throw std::runtime_error(fmt::format("Stream on {}: CUDA backend not built", device.str()));
      }
      return backend->make_stream(device.index());
    }
    case DeviceKind::sim:
      break;
  }
  throw std::invalid_argument(
      fmt::format("Stream on {}: the sim device has no streams (its ops complete by timer "
                  "messages, not by queued work)",
                  device.str()));
}

}  // namespace

Stream::Stream(Device device) : impl_(make_stream(device)) {}

Device Stream::device() const {
  return impl_->device();
}

void Stream::enqueue(std::function<void()> fn) {
  impl_->enqueue(std::move(fn));
}

Event Stream::record() {
  return Event(impl_->record());
}

Event Stream::record_timed() {
  return Event(impl_->record_timed());
}

void Stream::wait(const Event& event) {
  if (!event.recorded()) return;
  impl_->wait(event.impl_);
}

void Stream::synchronize() {
  record().synchronize();
}

void* Stream::native_handle() const {
  return impl_->native_handle();
}

}  // namespace tandem
