#pragma once
// tandem::Error: what every failure of a Session reaches the application as. A service tells a
// bad plan from a corrupt checkpoint, a lost rank or its own layer's exception by code(), never
// by parsing what(); where the failure is known to sit (stage, replica, rank, minibatch, the
// option or config key) it is in where(). When run() fails, partial() holds what the run did
// up to the failure: its minibatches' losses and the checkpoints it wrote.
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace tandem {

struct TrainResult;

enum class ErrorCode {
  config,      // an option or config key that cannot be (names the key)
  plan,        // a plan the model or the schedule cannot run
  checkpoint,  // a checkpoint or weights file that cannot be read, or holds another model
  data,        // the data: a DataFn that threw or returned a batch that does not fit, a data file
  layer,       // a layer's (or loss's) forward or backward threw while the run ran
  lost_rank,   // another process of a multi-process job was lost, or could not be joined
  stalled,     // the run went quiet: no stage can go on (names what each waits for)
  diverged,    // the loss or the gradients' norm became NaN or infinite
  stopped,     // the session can no longer do what was asked: its run ended by failing
  internal,    // a fault of Tandem itself; please report it
};

// "config", "plan", ...: the code's name as written above.
std::string_view error_code_name(ErrorCode code);

// Where a failure sits, as far as it is known.
struct ErrorWhere {
  std::optional<int> stage;
  std::optional<int> replica;
  std::optional<int> rank;  // the process of a multi-process job
  std::optional<std::int64_t> minibatch;
  std::string key;  // the option (TrainOptions.plan.minibatch) or config key (train.seed)
};

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message, ErrorWhere where = {},
        std::shared_ptr<const TrainResult> partial = nullptr);

  ErrorCode code() const noexcept { return code_; }
  const ErrorWhere& where() const noexcept { return where_; }
  // Session::run's failure: the run up to it (its status RunStatus::failed); else null.
  const TrainResult* partial() const noexcept { return partial_.get(); }

 private:
  ErrorCode code_;
  ErrorWhere where_;
  std::shared_ptr<const TrainResult> partial_;
};

}  // namespace tandem
