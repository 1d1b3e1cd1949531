#pragma once

#include <exception>
#include <functional>
#include <memory>

#include "runtime/device.hpp"

namespace tandem {

namespace detail {
class EventImpl;
}

// A point in a Stream's queue: it completes once everything enqueued on that stream before
// Stream::record() returned it has run. A cheap handle (copies refer to the same event).
// A default-constructed Event was never recorded and counts as complete.
class Event {
 public:
  Event() = default;

  bool recorded() const { return impl_ != nullptr; }
  // The device of the stream that recorded it (cpu for a default-constructed one).
  Device device() const;
  // Non-blocking: whether the work before the event has run. Throws std::runtime_error when
  // the device reports an error other than "not ready".
  bool query() const;
  // Blocks the calling thread until the event completes; rethrows the failure of work before
  // it (see error()). For tests and shutdown only: an actor worker must never block, it uses
  // on_complete().
  void synchronize() const;
  // Calls fn once the event has completed, on the runtime's progress thread: never on the
  // caller's thread (even when the event has already completed) and never on an actor worker.
  // Callbacks share that one thread, so they must be short: post a message and return.
  // Exceptions thrown by fn are logged and dropped.
  void on_complete(std::function<void()> fn) const;
  // After completion: the failure of work enqueued before the event on its stream (or on a
  // stream it waited on), or nullptr. Before completion: nullptr.
  std::exception_ptr error() const;

 private:
  friend class Stream;
  explicit Event(std::shared_ptr<detail::EventImpl> impl) : impl_(std::move(impl)) {}

  std::shared_ptr<detail::EventImpl> impl_;
};

}  // namespace tandem
