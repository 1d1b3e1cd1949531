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

std::optional<std::chrono::steady_clock::time_point> Event::completed_at() const {
  if (impl_ == nullptr) return std::nullopt;
  return impl_->completed_at();
}

std::optional<std::chrono::nanoseconds> Event::elapsed_since(const Event& earlier) const {
  if (impl_ == nullptr || earlier.impl_ == nullptr) return std::nullopt;
  if (impl_->device() != earlier.impl_->device()) return std::nullopt;
  return impl_->elapsed_since(*earlier.impl_);
}

}  // namespace tandem
