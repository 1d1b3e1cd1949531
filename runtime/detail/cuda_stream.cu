// CUDA streams and events behind Stream/Event.
//
// on_complete uses cudaLaunchHostFunc, not an event-polling thread. A polling thread either
// spins (a core lost per process) or sleeps between polls (a sleep quantum of latency on every
// completion); a host function runs as soon as the driver sees the event. The host function is
// launched on a companion "notify" stream, after a cudaStreamWaitEvent on the event, never on
// the compute stream itself: a host function stalls its stream until it returns, and the
// compute stream must not wait for a round trip through the driver's callback thread. The host
// function calls no CUDA API (CUDA forbids it there); it only hands the callback to the
// progress thread (progress_thread.hpp), which runs it.
#include <cuda_runtime.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "runtime/detail/cuda_stream.hpp"
#include "runtime/detail/cuda_util.hpp"
#include "runtime/detail/progress_thread.hpp"

namespace tandem::detail {
namespace {

// Events are recorded once per Event handle; recycling them keeps cudaEventCreate off the hot
// path. Re-recording a recycled event is safe: cudaStreamWaitEvent and a pending query see the
// record that was current when they were called. Timed events (record_timed) are pooled apart:
// untimed ones are cheaper to record and to wait on.
class EventPool {
 public:
  cudaEvent_t take(int index, bool timed) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      std::vector<cudaEvent_t>& free = free_[{index, timed}];
      if (!free.empty()) {
        cudaEvent_t e = free.back();
        free.pop_back();
        return e;
      }
    }
    CudaDeviceGuard guard(index);
    cudaEvent_t e = nullptr;
    cuda_check(cudaEventCreateWithFlags(&e, timed ? cudaEventDefault : cudaEventDisableTiming),
               "cudaEventCreateWithFlags", index);
    return e;
  }

  void give(int index, bool timed, cudaEvent_t e) noexcept {
    try {
      std::lock_guard<std::mutex> lock(mu_);
      free_[{index, timed}].push_back(e);
    } catch (...) {
      cudaEventDestroy(e);
    }
  }

 private:
  std::mutex mu_;
  std::map<std::pair<int, bool>, std::vector<cudaEvent_t>> free_;
};

EventPool& event_pool() {
  static EventPool* pool = new EventPool();  // never destroyed: events outlive static teardown
  return *pool;
}

void CUDART_CB run_host_callback(void* data) {
  std::unique_ptr<std::function<void()>> fn(static_cast<std::function<void()>*>(data));
  post_to_progress_thread(std::move(*fn));
}

class CudaStream;

// A timed event a stream records when it is created (the stream empty, so it completes at once)
// together with the host's time then: timed events are placed on the host's clock by their
// elapsed time from it.
struct CudaAnchor {
  int index = 0;
  cudaEvent_t event = nullptr;
  std::chrono::steady_clock::time_point host;
  ~CudaAnchor() {
    if (event != nullptr) event_pool().give(index, true, event);
  }
};

class CudaEvent final : public EventImpl {
 public:
  CudaEvent(std::weak_ptr<CudaStream> stream, int index, cudaEvent_t event,
            std::shared_ptr<const CudaAnchor> anchor)
      : stream_(std::move(stream)), index_(index), event_(event), anchor_(std::move(anchor)) {}
  ~CudaEvent() override { event_pool().give(index_, anchor_ != nullptr, event_); }

  Device device() const override { return Device::cuda(index_); }
  cudaEvent_t native() const { return event_; }

  bool query() override {
    const cudaError_t status = cudaEventQuery(event_);
    if (status == cudaErrorNotReady) return false;
    cuda_check(status, "cudaEventQuery", index_);
    return true;
  }

  void synchronize() override {
    cuda_check(cudaEventSynchronize(event_), "cudaEventSynchronize", index_);
  }

  std::exception_ptr error() override {
    const cudaError_t status = cudaEventQuery(event_);
    if (status == cudaSuccess || status == cudaErrorNotReady) return nullptr;
    try {
      cuda_check(status, "work before an event", index_);
    } catch (...) {
      return std::current_exception();
    }
    return nullptr;
  }

  void on_complete(std::function<void()> fn) override;

  std::optional<std::chrono::steady_clock::time_point> completed_at() override {
    if (anchor_ == nullptr) return std::nullopt;
    const std::optional<float> ms = elapsed_ms(anchor_->event, event_);
    if (!ms) return std::nullopt;
    return anchor_->host + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                               std::chrono::duration<double, std::milli>(*ms));
  }

  std::optional<std::chrono::nanoseconds> elapsed_since(EventImpl& earlier) override {
    auto* start = dynamic_cast<CudaEvent*>(&earlier);
    if (anchor_ == nullptr || start == nullptr || start->anchor_ == nullptr) return std::nullopt;
    const std::optional<float> ms = elapsed_ms(start->event_, event_);
    if (!ms) return std::nullopt;
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::duration<double, std::milli>(*ms));
  }

 private:
  // Both complete and timed: the milliseconds between them; else nullopt (a pending event, or a
  // device error, which error() reports).
  static std::optional<float> elapsed_ms(cudaEvent_t from, cudaEvent_t to) {
    if (cudaEventQuery(to) != cudaSuccess || cudaEventQuery(from) != cudaSuccess) {
      return std::nullopt;
    }
    float ms = 0;
    if (cudaEventElapsedTime(&ms, from, to) != cudaSuccess) return std::nullopt;
    return ms;
  }

  std::weak_ptr<CudaStream> stream_;
  int index_;
  cudaEvent_t event_;
  std::shared_ptr<const CudaAnchor> anchor_;  // set for a timed event
};

class CudaStream final : public StreamImpl, public std::enable_shared_from_this<CudaStream> {
 public:
  explicit CudaStream(int index) : index_(index) {
    CudaDeviceGuard guard(index);
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
               "cudaStreamCreateWithFlags", index);
    const cudaError_t status = cudaStreamCreateWithFlags(&notify_, cudaStreamNonBlocking);
    if (status != cudaSuccess) {
      cudaStreamDestroy(stream_);
      cuda_check(status, "cudaStreamCreateWithFlags (notify stream)", index);
    }
    try {
      auto anchor = std::make_shared<CudaAnchor>();
      anchor->index = index;
      anchor->event = event_pool().take(index, true);
      cuda_check(cudaEventRecord(anchor->event, stream_), "cudaEventRecord (anchor)", index);
      cuda_check(cudaEventSynchronize(anchor->event), "cudaEventSynchronize (anchor)", index);
      anchor->host = std::chrono::steady_clock::now();
      anchor_ = std::move(anchor);
    } catch (...) {
      cudaStreamDestroy(notify_);
      cudaStreamDestroy(stream_);
      throw;
    }
  }

  // Drains, as the cpu stream does: every event recorded here has completed and its callbacks
  // are queued on the progress thread when this returns.
  ~CudaStream() override {
    cudaSetDevice(index_);
    cudaStreamSynchronize(stream_);
    cudaStreamSynchronize(notify_);
    cudaStreamDestroy(notify_);
    cudaStreamDestroy(stream_);
  }

  Device device() const override { return Device::cuda(index_); }

  void enqueue(std::function<void()>) override {
    throw std::logic_error(
        "Stream::enqueue on cuda:" + std::to_string(index_) +
        ": host work on a CUDA stream would stall it; launch kernels on native_handle(), or run "
        "host work on a cpu stream that waits on a cuda event");
  }

  std::shared_ptr<EventImpl> record() override { return record(false); }
  std::shared_ptr<EventImpl> record_timed() override { return record(true); }

  void wait(const std::shared_ptr<EventImpl>& event) override {
    if (auto* cuda = dynamic_cast<CudaEvent*>(event.get())) {
      cuda_check(cudaStreamWaitEvent(stream_, cuda->native(), 0), "cudaStreamWaitEvent", index_);
      return;
    }
    if (event->query()) {
      event->synchronize();  // returns at once; rethrows the failure of the work before it
      return;
    }
    throw std::invalid_argument(
        "Stream::wait: a cuda:" + std::to_string(index_) + " stream cannot wait on a pending " +
        event->device().str() +
        " event (the device cannot observe host work without blocking a driver thread); wait "
        "for it with on_complete and enqueue the device work then");
  }

  void* native_handle() const override { return static_cast<void*>(stream_); }

  std::shared_ptr<EventImpl> record(bool timed) {
    cudaEvent_t e = event_pool().take(index_, timed);
    const cudaError_t status = cudaEventRecord(e, stream_);
    if (status != cudaSuccess) {
      event_pool().give(index_, timed, e);
      cuda_check(status, "cudaEventRecord", index_);
    }
    return std::make_shared<CudaEvent>(weak_from_this(), index_, e,
                                       timed ? anchor_ : std::shared_ptr<const CudaAnchor>());
  }

  void notify_after(cudaEvent_t event, std::function<void()> fn) {
    auto holder = std::make_unique<std::function<void()>>(std::move(fn));
    // Keeps each wait next to its host function on the notify stream, so a callback never
    // waits behind another thread's later event.
    std::lock_guard<std::mutex> lock(notify_mu_);
    cuda_check(cudaStreamWaitEvent(notify_, event, 0), "cudaStreamWaitEvent (notify stream)",
               index_);
    cuda_check(cudaLaunchHostFunc(notify_, &run_host_callback, holder.get()), "cudaLaunchHostFunc",
               index_);
    holder.release();  // run_host_callback owns it now
  }

 private:
  int index_;
  cudaStream_t stream_ = nullptr;
  cudaStream_t notify_ = nullptr;
  std::mutex notify_mu_;
  std::shared_ptr<const CudaAnchor> anchor_;
};

void CudaEvent::on_complete(std::function<void()> fn) {
  std::shared_ptr<CudaStream> stream = stream_.lock();
  // A destroyed stream drained first, so its events have completed. A failed event counts as
  // completed too: its callback must still run, or whoever waits for it would wait forever.
  if (stream == nullptr || cudaEventQuery(event_) != cudaErrorNotReady) {
    post_to_progress_thread(std::move(fn));
    return;
  }
  stream->notify_after(event_, std::move(fn));
}

}  // namespace

std::shared_ptr<StreamImpl> make_cuda_stream(int index) {
  return std::make_shared<CudaStream>(index);
}

}  // namespace tandem::detail
