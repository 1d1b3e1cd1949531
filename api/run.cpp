#include <chrono>
#include <future>

#include "api/run_state.hpp"
#include "tandem/tandem.hpp"

namespace tandem {

TrainResult Run::wait() const {
  return state_->result.get();  // rethrows the run's Error
}

bool Run::wait_for(std::chrono::milliseconds timeout) const {
  return state_->result.wait_for(timeout) == std::future_status::ready;
}

void Run::stop() const {
  state_->job->stop();
}

}  // namespace tandem
