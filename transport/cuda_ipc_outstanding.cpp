#include "transport/cuda_ipc_outstanding.hpp"

#include <fmt/format.h>

#include <utility>

#include "transport/wire_message.hpp"

namespace tandem::transport {

std::uint64_t CudaIpcOutstanding::hold(Message msg, std::vector<CudaIpcEvent> events) {
  std::uint64_t bytes = 0;
  for (const Tensor& t : msg.tensors) {
    if (t.defined()) bytes += t.nbytes();
  }
  std::lock_guard lock(mu_);
  const std::uint64_t seq = next_seq_++;
  held_.emplace(seq, Held{std::move(msg), std::move(events), bytes});
  held_bytes_ += bytes;
  return seq;
}

void CudaIpcOutstanding::acknowledge(std::uint64_t seq) {
  Held released;  // destroyed outside the lock: freeing a tensor may take the allocator's
  {
    std::lock_guard lock(mu_);
    auto it = held_.find(seq);
    if (it == held_.end()) {
      throw WireError(fmt::format(
          "cuda-ipc acknowledgement of message {}: not awaiting one ({} sent, {} awaiting)", seq,
          next_seq_ - 1, held_.size()));
    }
    held_bytes_ -= it->second.bytes;
    released = std::move(it->second);
    held_.erase(it);
  }
}

std::size_t CudaIpcOutstanding::release_all() {
  std::map<std::uint64_t, Held> released;
  {
    std::lock_guard lock(mu_);
    released.swap(held_);
    held_bytes_ = 0;
  }
  return released.size();
}

std::size_t CudaIpcOutstanding::held() const {
  std::lock_guard lock(mu_);
  return held_.size();
}

std::uint64_t CudaIpcOutstanding::held_bytes() const {
  std::lock_guard lock(mu_);
  return held_bytes_;
}

}  // namespace tandem::transport
