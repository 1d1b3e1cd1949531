#pragma once
// What Stream and Event forward to: one implementation per device kind (cpu_stream.cpp,
// cuda_stream.cu), chosen when the Stream is created, so the core never names CUDA.
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <optional>

#include "runtime/device.hpp"

namespace tandem::detail {

class EventImpl {
 public:
  virtual ~EventImpl() = default;
  virtual Device device() const = 0;
  virtual bool query() = 0;
  virtual void synchronize() = 0;
  virtual void on_complete(std::function<void()> fn) = 0;
  virtual std::exception_ptr error() = 0;
  // Event::completed_at / elapsed_since; nullopt where the event keeps no time.
  virtual std::optional<std::chrono::steady_clock::time_point> completed_at() {
    return std::nullopt;
  }
  virtual std::optional<std::chrono::nanoseconds> elapsed_since(EventImpl& earlier) {
    const auto end = completed_at();
    const auto start = earlier.completed_at();
    if (!end || !start) return std::nullopt;
    return std::chrono::duration_cast<std::chrono::nanoseconds>(*end - *start);
  }
};

class StreamImpl {
 public:
  virtual ~StreamImpl() = default;
  virtual Device device() const = 0;
  virtual void enqueue(std::function<void()> fn) = 0;
  virtual std::shared_ptr<EventImpl> record() = 0;
  // Stream::record_timed: an event that keeps the time it completed at.
  virtual std::shared_ptr<EventImpl> record_timed() { return record(); }
  virtual void wait(const std::shared_ptr<EventImpl>& event) = 0;
  virtual void* native_handle() const = 0;
};

std::shared_ptr<StreamImpl> make_cpu_stream();

}  // namespace tandem::detail
