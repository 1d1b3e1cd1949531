#include "actors/stage_progress.hpp"

#include <cstdio>

namespace tandem::actors {
namespace {

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

void append(std::string& out, const std::string& part) {
  out += out.empty() ? "" : "; ";
  out += part;
}

}  // namespace

bool StageProgress::has_work() const {
  if (finished) return false;
  return handling || running || device_ops > 0 || unhandled > 0;
}

std::string StageProgress::describe() const {
  std::string what;
  if (running) {
    append(what, "running " + schedules::to_string(*running) + " for " + seconds(running_s));
  } else if (handling) {
    append(what, "handling a message");
  }
  if (device_ops > 0) {
    std::string ops =
        std::to_string(device_ops) + " device op" + (device_ops == 1 ? "" : "s") + " in flight";
    if (oldest_op) {
      ops += ", the oldest " + schedules::to_string(*oldest_op) + " started " +
             seconds(oldest_op_s) + " ago";
    }
    append(what, ops);
  }
  if (unhandled > 0) {
    append(what,
           std::to_string(unhandled) + " message" + (unhandled == 1 ? "" : "s") + " unhandled");
  }
  if (syncing) append(what, "a SYNC waits for the stage's other replicas");
  if (!running && next) append(what, "next " + schedules::to_string(*next) + " waits for inputs");
  if (finished) append(what, "finished");
  return "stage " + std::to_string(stage) + " replica " + std::to_string(replica) + ": " +
         (what.empty() ? std::string("idle") : what);
}

}  // namespace tandem::actors
