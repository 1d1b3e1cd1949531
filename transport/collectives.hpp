#pragma once
// Reductions among the replicas of a stage (SYNC). Actors reduce only through this interface:
// an in-process implementation, Gloo (host memory, across processes) and NCCL (GPUs).
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "runtime/tensor.hpp"
#include "transport/channel.hpp"

namespace tandem::transport {

enum class Reduction : std::uint8_t {
  sum,   // flush schedules: the replicas' slices add up to the minibatch's gradient
  mean,  // PipeDream: each replica's minibatch is its own mean; average over contributors
};

class Collectives {
 public:
  virtual ~Collectives() = default;
  // Starts the all-reduce number `round` of `tensors` among `group` (this caller is `member`).
  // A member that does not contribute (it had no samples this round) still takes part and
  // receives the result; a mean divides by the number of contributors. Never blocks: `done`
  // is called, on whichever thread completes the reduction, once `tensors` hold the result
  // (post a message from it, do not compute in it).
  virtual void all_reduce(std::span<const Endpoint> group, Endpoint member, std::int64_t round,
                          std::vector<Tensor> tensors, bool contributes, Reduction op,
                          std::function<void()> done) = 0;
};

}  // namespace tandem::transport
