#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <optional>

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

  // When the device reached the event, on the host's steady clock: for a completed event of a
  // cpu stream (any record) or of a cuda stream (Stream::record_timed only); nullopt otherwise
  // (pending, untimed, never recorded). cuda: placed through an anchor event the stream
  // records when it is created, to within cudaEventElapsedTime's resolution (about 0.5 us,
  // coarser hours into a run since the offset is a float of milliseconds).
  std::optional<std::chrono::steady_clock::time_point> completed_at() const;
  // The device time from `earlier` to this event, both completed and timed and recorded on the
  // same device: what the work between them took on that device (queueing before `earlier`
  // excluded). nullopt otherwise.
  std::optional<std::chrono::nanoseconds> elapsed_since(const Event& earlier) const;

 private:
  friend class Stream;
  explicit Event(std::shared_ptr<detail::EventImpl> impl) : impl_(std::move(impl)) {}

  std::shared_ptr<detail::EventImpl> impl_;
};

}  // namespace tandem
