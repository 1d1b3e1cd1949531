#pragma once
// What a stage replica reports to an observer after each action: for tests (weight versions,
// gradients), traces and metrics. Called on the actor's thread; keep it short.
#include <chrono>
#include <cstdint>
#include <functional>

#include "models/param_set.hpp"
#include "runtime/event.hpp"
#include "schedules/action.hpp"

namespace tandem::actors {

struct StageEvent {
  int device = 0;  // the schedule's device index of the replica
  int stage = 0;
  int replica = 0;
  schedules::Action action;
  // F, B, W: the weight version the action ran with; STEP: the version it published.
  std::int64_t version = -1;
  // F, B, W: the weights of that version; STEP: the new version's weights.
  const models::ParamSet* weights = nullptr;
  // STEP: the gradients it applied (after SYNC); SYNC: the replica's gradients before it.
  const models::ParamSet* grads = nullptr;
  // When the actor ran the action (on an asynchronous device: when it submitted the work).
  std::chrono::steady_clock::time_point start, end;
  // An asynchronous device's timed events around the action's work (Completion::started,
  // done), unrecorded otherwise: once complete, where the device actually ran it.
  Event device_started, device_done;
};

using StageObserver = std::function<void(const StageEvent&)>;

}  // namespace tandem::actors
