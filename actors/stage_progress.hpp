#pragma once
// A snapshot of one stage replica's motion, taken from any thread while its worker runs
// (StageActor::progress): what Pipeline::progress sums and describes.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "schedules/action.hpp"

namespace tandem::actors {

struct StageProgress {
  int stage = 0, replica = 0;
  std::uint64_t events = 0;  // messages handled and actions completed, since it was made
  bool finished = false;     // its schedule is over
  bool handling = false;     // its worker is inside the handler of a message now
  // The action its worker runs now (inside the handler), and for how long.
  std::optional<schedules::Action> running;
  double running_s = 0;
  // Actions submitted to an asynchronous device whose completion has not come back; the oldest
  // and how long ago it started.
  std::size_t device_ops = 0;
  std::optional<schedules::Action> oldest_op;
  double oldest_op_s = 0;
  bool syncing = false;  // a SYNC waits for the stage's other replicas
  // The action it takes next, waiting for its inputs (when nothing runs).
  std::optional<schedules::Action> next;
  std::size_t unhandled = 0;  // messages delivered and not yet handled

  // Something here could be moving: a handler or action running, device work in flight, or
  // messages not handled. Waiting for inputs or for a SYNC's peers is not work.
  bool has_work() const;
  // "stage 1 replica 0: running B(mb 4, [0,2)) for 31.2 s", "stage 1 replica 0: 3 messages
  // unhandled; next F(mb 5, [0,2)) waits for its inputs".
  std::string describe() const;
};

}  // namespace tandem::actors
