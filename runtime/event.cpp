#include "runtime/event.hpp"

#include <utility>

#include "runtime/detail/progress_thread.hpp"
#include "runtime/detail/stream_impl.hpp"

namespace tandem {

Device Event::device() const {
  return impl_ == nullptr ? Device::cpu() : impl_->device();
}

bool Event::query() const {
  return impl_ == nullptr || impl_->query();
}

void Event::synchronize() const {
  if (impl_ != nullptr) impl_->synchronize();
}

void Event::on_complete(std::function<void()> fn) const {
  if (impl_ == nullptr) {
    detail::post_to_progress_thread(std::move(fn));
  } else {
    impl_->on_complete(std::move(fn));
  }
}

std::exception_ptr Event::error() const {
  return impl_ == nullptr ? nullptr : impl_->error();
}

}  // namespace tandem
