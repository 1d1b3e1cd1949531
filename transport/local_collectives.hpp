#pragma once
// Collectives among actors of one process: the last member to arrive reduces on its own
// thread and completes everyone.
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "transport/collectives.hpp"

namespace tandem::transport {

class LocalCollectives final : public Collectives {
 public:
  void all_reduce(std::span<const Endpoint> group, Endpoint member, std::int64_t round,
                  std::vector<Tensor> tensors, bool contributes, Reduction op,
                  std::function<void()> done) override;

 private:
  struct Arrival {
    Endpoint member;
    std::vector<Tensor> tensors;
    bool contributes;
    std::function<void()> done;
  };
  struct Pending {
    std::vector<Endpoint> group;
    Reduction op;
    std::vector<Arrival> arrived;
  };
  // Keyed by (group, round): a member may belong to several groups (its stage's replicas, and
  // the stages a tied parameter spans) whose rounds share numbers.
  std::mutex mu_;
  std::map<std::pair<std::vector<Endpoint>, std::int64_t>, Pending> pending_;
};

}  // namespace tandem::transport
