#pragma once
// What a tandem::Run shares with the Session that started it: the run's result as it will be,
// and the job to stop.
#include <future>

#include "api/job_run.hpp"
#include "tandem/tandem.hpp"

namespace tandem {

struct Run::State {
  std::shared_future<TrainResult> result;
  api::JobRun* job = nullptr;  // the Session's; it outlives the Run
};

}  // namespace tandem
