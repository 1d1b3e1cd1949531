#pragma once
// Collectives among the replicas of a stage on GPUs, with NCCL: the counterpart of
// GlooCollectives for f32 tensors on cuda:N, with the same results (non-contributors add zeros,
// a mean divides by the number of contributors, every member receives the result, no
// contributor at all gives zeros).
//
// Each (group, local member) gets its own NCCL communicator, of the group's size, whose rank is
// the member's index in the group, and its own CUDA stream on the device of its tensors. The
// member of rank 0 draws the communicator's unique id and publishes it on the Rendezvous's
// key-value store (key "<key_prefix>/<members>/id"); the others read it there, so a job needs no
// side channel of its own. A communicator is made at the member's first all-reduce and cached.
// NCCL runs one rank per GPU: the members of one group live on distinct GPUs (a process may host
// several members of several groups, each on its own GPU).
//
// The tensors must be ready when all_reduce is called (the stage calls it once its backward
// has completed), and must not be touched until `done`. A round runs on the member's thread:
// first the two counters (contributors, members asking for a mean), then, in one NCCL group,
// every tensor in place, scaled by NCCL's pre-multiplied sum when a mean needs it; `done` is
// called on that thread (a MemberThread) once the device has finished. Rounds run in the order they
// were started, and every member of a group must start them in the same order (the schedules do).
//
// Failures never hang: communicators are made non-blocking, and connecting, each round's NCCL
// calls and its completion on the device are bounded by `timeout`, after which the
// communicator is aborted. A failed round does not call its `done`; it calls `on_error` with a
// message naming the round, the group and the member (and NCCL's own last error), drops the
// member's queued rounds, and every later all_reduce of that member throws
// NcclCollectivesError with the same message.
//
// Built into the CUDA plugin (runtime/plugin.hpp) where NCCL is found
// (cmake/TandemDependencies.cmake); the core makes one through make_nccl_collectives, which
// loads the plugin and throws std::runtime_error saying so when there is no NCCL.
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "transport/collectives.hpp"
#include "transport/rendezvous.hpp"

namespace tandem::transport {

struct MemberRound;

struct NcclCollectivesOptions {
  // Bounds connecting a communicator (the wait for the unique id included), and each round.
  std::chrono::milliseconds timeout{30000};
  // First part of the store keys. Two NcclCollectives alive in one job at once, or one after
  // another on the same Rendezvous, need different prefixes (a key once set stays set).
  std::string key_prefix = "nccl";
  // Called on the failing member's thread, once per failed member; keep it short (stop the run).
  // Failures are logged either way.
  std::function<void(const std::string&)> on_error;
};

// A round that failed earlier, reported again to a later all_reduce of the same member.
class NcclCollectivesError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class NcclCollectives final : public Collectives {
 public:
  // `rendezvous` must have joined and must outlive this object. Touches no GPU: communicators
  // are made lazily, by the first all_reduce of each member.
  NcclCollectives(Rendezvous& rendezvous, NcclCollectivesOptions options);
  // Waits for the rounds in progress (each at most `timeout`); queued ones are dropped without
  // calling their `done`. Communicators are destroyed (aborted after a failure).
  ~NcclCollectives() override;
  NcclCollectives(const NcclCollectives&) = delete;
  NcclCollectives& operator=(const NcclCollectives&) = delete;

  // Throws std::invalid_argument, on the caller's thread, when `member` is not in `group`, the
  // group names a member twice, a tensor is not an f32 tensor on a cuda device, the tensors are
  // on different devices (or on another device than this member's earlier rounds), or two of
  // them overlap in memory (each is reduced in place, once).
  void all_reduce(std::span<const Endpoint> group, Endpoint member, std::int64_t round,
                  std::vector<Tensor> tensors, bool contributes, Reduction op,
                  std::function<void()> done) override;

 private:
  struct Member;
  // On the member's thread: makes its communicator and stream on `device`.
  void connect(Member& m, Device device);
  // On the member's thread: one round (MemberThread::Rounds::reduce).
  void reduce(Member& m, MemberRound& round, std::string& step);

  NcclCollectivesOptions options_;
  Rendezvous& rendezvous_;
  std::mutex mu_;
  // Declared last: destroyed (their threads joined) first.
  std::map<std::pair<std::vector<Endpoint>, Endpoint>, std::unique_ptr<Member>> members_;
};

// NcclCollectives through the CUDA plugin, which registers a factory when it loads (and was
// built with NCCL). nccl_available loads the plugin; make_nccl_collectives throws
// std::runtime_error, saying why, when there is no NCCL.
using NcclFactory = std::unique_ptr<Collectives> (*)(Rendezvous& rendezvous,
                                                     NcclCollectivesOptions options);
void register_nccl_factory(NcclFactory factory);
bool nccl_available();
std::unique_ptr<Collectives> make_nccl_collectives(Rendezvous& rendezvous,
                                                   NcclCollectivesOptions options);
// Defined in the CUDA plugin only (nccl_collectives.cpp).
std::unique_ptr<Collectives> make_nccl(Rendezvous& rendezvous, NcclCollectivesOptions options);

}  // namespace tandem::transport
