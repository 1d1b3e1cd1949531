#pragma once
// What Stream and Event forward to: one implementation per device kind (cpu_stream.cpp,
// cuda_stream.cu), chosen when the Stream is created, so the core never names CUDA.
#include <exception>
#include <functional>
#include <memory>

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
};

class StreamImpl {
 public:
  virtual ~StreamImpl() = default;
  virtual Device device() const = 0;
  virtual void enqueue(std::function<void()> fn) = 0;
  virtual std::shared_ptr<EventImpl> record() = 0;
  virtual void wait(const std::shared_ptr<EventImpl>& event) = 0;
  virtual void* native_handle() const = 0;
};

std::shared_ptr<StreamImpl> make_cpu_stream();

}  // namespace tandem::detail
