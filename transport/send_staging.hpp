#pragma once
// How a message's device tensors reach host memory on their way to another process without
// blocking the sender. Each tensor that needs it is copied on a communication stream of its
// device into a pinned host tensor (Tensor::empty_pinned: page-locked blocks cached and reused,
// so a copy runs asynchronously at full speed), and the message carries that host tensor from
// then on; the returned events complete when the copies have run. The copy keeps the device
// tensor alive until it has run (Tensor::copy_from on a stream), so the sender may drop it.
//
// By default the cuda tensors are staged, on one copy stream per device made on first use. The
// choice of tensors and of streams is an option, so that the same path runs on a cpu stream
// whose work the caller holds back (what the tests use to see a send return before its copy).
#include <functional>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "runtime/event.hpp"
#include "runtime/message.hpp"
#include "runtime/stream.hpp"

namespace tandem::transport {

struct SendStagingOptions {
  // Whether a tensor must be copied to host memory before it travels. Default: it is on a cuda
  // device.
  std::function<bool(const Tensor&)> needs_copy;
  // The stream a tensor of `device` is copied on. Default: one Stream(device) per device,
  // made on first use and kept (a stream of its own, so copies overlap the compute stream).
  std::function<Stream(Device)> stream_for;
};

class SendStaging {
 public:
  SendStaging() : SendStaging(SendStagingOptions{}) {}
  explicit SendStaging(SendStagingOptions options);

  // Replaces each tensor of `msg` that needs a copy by a host tensor the copy fills, and returns
  // one event per copy (none when no tensor needed one): the message may leave once all have
  // completed. Never waits for a copy. Thread-safe.
  std::vector<Event> stage(Message& msg);

 private:
  Stream stream_of(Device device);

  SendStagingOptions options_;
  std::mutex mu_;
  std::map<std::pair<int, int>, Stream> streams_;  // by (kind, index), without stream_for
};

}  // namespace tandem::transport
