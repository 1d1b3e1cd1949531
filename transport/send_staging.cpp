#include "transport/send_staging.hpp"

#include <utility>

namespace tandem::transport {

SendStaging::SendStaging(SendStagingOptions options) : options_(std::move(options)) {
  if (!options_.needs_copy) {
    options_.needs_copy = [](const Tensor& t) { return t.device().is_cuda(); };
  }
}

Stream SendStaging::stream_of(Device device) {
  if (options_.stream_for) return options_.stream_for(device);
  std::lock_guard lock(mu_);
  const std::pair key{static_cast<int>(device.kind()), device.index()};
  auto it = streams_.find(key);
  if (it == streams_.end()) it = streams_.emplace(key, Stream(device)).first;
  return it->second;
}

std::vector<Event> SendStaging::stage(Message& msg) {
  std::vector<Event> copies;
  for (Tensor& t : msg.tensors) {
    if (!t.defined() || !options_.needs_copy(t)) continue;
    Stream stream = stream_of(t.device());
    Tensor host = Tensor::empty_pinned(t.shape(), t.dtype());
    host.copy_from(t, stream);
    t = std::move(host);
    copies.push_back(stream.record());
  }
  return copies;
}

}  // namespace tandem::transport
