#pragma once
// Collectives among processes with Gloo on host memory (f32 tensors on the CPU), the
// multi-process counterpart of LocalCollectives with the same results: non-contributors are
// excluded (they add zeros), a mean divides by the number of contributors, every member
// receives the result, and no contributor at all gives zeros.
//
// Each (group, local member) gets its own Gloo context, of the group's size, whose rank is the
// member's index in the group: a process may host any of a group's members, one or several.
// The context connects lazily, at the member's first all-reduce, through Gloo's rendezvous
// store on the Rendezvous (keys "<key_prefix>/<members>/<rank>"), over Gloo's TCP transport.
// Its reductions run on a thread of its own (MemberThread), in the order they were started:
// all_reduce only queues, so an actor's worker never blocks on the network. Every member of a group
// must start its rounds in the same order (the schedules do); the round is Gloo's tag, so a
// mismatch fails the reduction rather than mixing rounds.
//
// Sim tensors (shapes without data) carry zeros of their size through the same reduction, in
// calls of at most 4 MiB from one buffer, so that a sim stage's gradients cost the links what
// real ones would (as a sim tensor's message does, transport/wire_message.hpp); their values
// stay none.
//
// Failures never hang: connecting and each Gloo call of a reduction are bounded by `timeout`.
// A failed reduction (a member that never came, a lost peer, members that disagree on the
// reduction) does not call its `done` (the tensors it reduces in place may hold partial sums);
// it calls `on_error` with a message naming the round, the group and the member, drops the
// context's queued reductions, and every later all_reduce of that member throws
// GlooCollectivesError with the same message.
#include <atomic>
#include <chrono>
#include <cstdint>
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
#include "transport/rendezvous_store.hpp"

namespace gloo::transport {
class Device;
}  // namespace gloo::transport

namespace tandem::transport {

struct MemberRound;

struct GlooCollectivesOptions {
  // Where this process's Gloo pairs listen, which the others connect to: a host name or address
  // of this machine ("127.0.0.1" on loopback) or, instead, a network interface ("eth0"). Both
  // empty: the address this machine's host name resolves to.
  std::string hostname;
  std::string iface;
  // Bounds connecting a context (the store's waits included) and each Gloo call of a reduction.
  std::chrono::milliseconds timeout{30000};
  // A tensor of at least this many bytes is reduced in place on its own memory, by a Gloo call of
  // its own; smaller ones are packed into one buffer with the round's counters (one call for
  // them all). Packing costs two copies of the tensor; a call of its own costs a round trip of
  // the ring (a second call in a one-tensor round, for the counters). 0: every tensor in place.
  std::size_t in_place_bytes = std::size_t{4} << 20;
  // First part of the store keys. Two GlooCollectives alive in one job at once, or one after
  // another on the same Rendezvous, need different prefixes (a key once set stays set).
  std::string key_prefix = "gloo";
  // Called on the failing context's thread, once per failed member; keep it short (stop the
  // run). Failures are logged either way.
  std::function<void(const std::string&)> on_error;
};

// A reduction that failed earlier, reported again to a later all_reduce of the same member.
class GlooCollectivesError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class GlooCollectives final : public Collectives {
 public:
  // `rendezvous` must have joined and must outlive this object. Creates the TCP device (throws
  // std::runtime_error naming the host or interface when it cannot be used).
  GlooCollectives(Rendezvous& rendezvous, GlooCollectivesOptions options);
  // Waits for the reductions in progress (each at most `timeout`); queued ones are dropped
  // without calling their `done`.
  ~GlooCollectives() override;
  GlooCollectives(const GlooCollectives&) = delete;
  GlooCollectives& operator=(const GlooCollectives&) = delete;

  // Payload bytes this object's members have handed to Gloo's all-reduce calls so far (each
  // member counts its own), counters included: what the links carried, for tests and reports.
  std::uint64_t reduced_bytes() const { return reduced_bytes_.load(std::memory_order_relaxed); }

  // Throws std::invalid_argument, on the caller's thread, when `member` is not in `group`, the
  // group names a member twice, or a tensor is neither an f32 tensor on the CPU nor (all of
  // them) sim tensors; sim tensors synchronise the members and move their size in zeros.
  void all_reduce(std::span<const Endpoint> group, Endpoint member, std::int64_t round,
                  std::vector<Tensor> tensors, bool contributes, Reduction op,
                  std::function<void()> done) override;

 private:
  struct Member;
  // On the member's thread: makes its context (a group of more than one member).
  void connect(Member& m);
  // On the member's thread: one round (MemberThread::Rounds::reduce).
  void reduce(Member& m, MemberRound& round, std::string& step);

  GlooCollectivesOptions options_;
  RendezvousStore store_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::mutex mu_;
  std::atomic<std::uint64_t> reduced_bytes_{0};
  // Declared last: destroyed (their threads joined) before the device and the store.
  std::map<std::pair<std::vector<Endpoint>, Endpoint>, std::unique_ptr<Member>> members_;
};

}  // namespace tandem::transport
