#pragma once
// The thread on which a collective library across processes (GlooCollectives, NcclCollectives)
// runs the rounds of one member of a group: all_reduce only queues a round here, so an actor's
// worker never blocks on the network or the device, and the rounds run one at a time in the
// order they were queued (every member of a group starts its rounds in the same order, which is
// what lets the library pair them with its peers').
//
// A round that throws fails the member for good: its `done` is not called (its tensors may hold
// partial results), the failure is logged and given to `on_error` once, as "<round>: <step>
// failed: <what>", the queued rounds are dropped without their `done`, and every later round
// is refused with the same message. The thread then only waits to be stopped.
//
// Stopping lets the round in progress finish and drops the queued ones without their `done`.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "transport/collectives.hpp"

namespace tandem::transport {

// One all-reduce as a member starts it: Collectives::all_reduce's arguments.
struct MemberRound {
  std::int64_t round = 0;
  std::vector<Tensor> tensors;
  bool contributes = false;
  Reduction op = Reduction::sum;
  std::function<void()> done;
};

// "Gloo all-reduce round 3 among {1,2} as endpoint 2": how errors name a member's round.
std::string round_text(std::string_view library, std::span<const Endpoint> group, Endpoint member,
                       std::int64_t round);

class MemberThread {
 public:
  // What a library does on the member's thread.
  class Rounds {
   public:
    virtual ~Rounds() = default;
    // Reduces `round.tensors` in place among the group, returning once they hold the result;
    // throws to fail the round. `step` is "connecting" at the call: set it to what follows, so
    // that a failure names it.
    virtual void reduce(MemberRound& round, std::string& step) = 0;
    // After a round failed, before the thread waits to be stopped: drops what the failure may
    // have left mid-protocol.
    virtual void failed() {}
    // The thread's last call, once stopped (after a failure or not).
    virtual void stopped() {}
  };

  // Starts the thread. `rounds` is first called after the first submit and must outlive this
  // object (an object that owns its MemberThread declares it last). `library` names the rounds
  // in failures (round_text). `on_error` is called on this thread; it may be empty.
  MemberThread(std::string library, std::vector<Endpoint> group, Endpoint endpoint, Rounds& rounds,
               std::function<void(const std::string&)> on_error);
  // Stops and joins.
  ~MemberThread();
  MemberThread(const MemberThread&) = delete;
  MemberThread& operator=(const MemberThread&) = delete;

  const std::vector<Endpoint>& group() const { return group_; }
  Endpoint endpoint() const { return endpoint_; }

  // Queues `round` and returns nothing, or, once the member has failed, drops it and returns the
  // failure's message.
  [[nodiscard]] std::optional<std::string> submit(MemberRound round);

  // Asks the thread to end after the round in progress, without waiting. Stopping several
  // members before joining any lets their rounds in progress finish in parallel.
  void stop();
  // Waits for the thread to end (call stop first).
  void join();

 private:
  void run();
  // Runs one round; returns the failure's message, or nothing.
  std::optional<std::string> attempt(MemberRound& round);

  const std::string library_;
  const std::vector<Endpoint> group_;
  const Endpoint endpoint_;
  Rounds& rounds_;
  const std::function<void(const std::string&)> on_error_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<MemberRound> queue_;
  bool stop_ = false;
  std::string error_;  // the first failure; no round runs after it
  // Declared last: started once everything it reads exists.
  std::thread thread_;
};

}  // namespace tandem::transport
