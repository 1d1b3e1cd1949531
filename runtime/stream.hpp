#pragma once

#include <functional>
#include <memory>

#include "runtime/device.hpp"
#include "runtime/event.hpp"

namespace tandem {

namespace detail {
class StreamImpl;
}

// An in-order queue of work on one device. Work enqueued on a stream runs in enqueue order;
// work on different streams may overlap unless ordered by wait(). Nothing here blocks the
// caller except Event::synchronize() and the destructor of the last handle.
//
// - cpu: one worker thread per stream runs enqueued host functions in order.
// - cuda:N: a cudaStream_t created non-blocking (it does not synchronise with the legacy
//   default stream); kernels are launched on native_handle() by models/.
// - sim: refused (std::invalid_argument); sim ops complete by timer messages instead.
//
// A cheap handle: copies refer to the same stream. When the last handle goes, the stream
// drains: work already enqueued runs (cpu) or finishes (cuda) before the destructor returns,
// so every event recorded on it completes and its on_complete callbacks are posted.
class Stream {
 public:
  // Throws std::invalid_argument for sim, std::runtime_error when cuda:N is not available
  // (backend not built, or N >= cuda_device_count()).
  explicit Stream(Device device = Device::cpu());

  Device device() const;

  // cpu streams: runs fn on the stream's worker after everything enqueued before it. If fn
  // throws, the stream has failed: later work is skipped, and every event recorded afterwards
  // completes with that error (Event::error(), Event::synchronize() rethrows). cuda streams
  // throw std::logic_error: host work on a CUDA stream would stall the device queue; use a
  // cpu stream that wait()s on a cuda event instead.
  void enqueue(std::function<void()> fn);
  // An event that completes after everything enqueued so far.
  Event record();
  // record(), and the event keeps the time it completed at (Event::completed_at,
  // Event::elapsed_since). cpu events always do; on cuda this one costs a timestamp on the
  // device, so untimed record() stays the default for ordering and lifetimes.
  Event record_timed();
  // Work enqueued on this stream from now on runs only after `event` has completed. Returns at
  // once (the caller never blocks). A cuda stream cannot wait on a pending cpu event
  // (std::invalid_argument): the device cannot observe host work without stalling a driver
  // thread.
  void wait(const Event& event);
  // record().synchronize(): for tests and shutdown only.
  void synchronize();

  // The cudaStream_t of a cuda stream, as void* so this header stays free of CUDA types;
  // nullptr for a cpu stream.
  void* native_handle() const;

 private:
  std::shared_ptr<detail::StreamImpl> impl_;
};

}  // namespace tandem
