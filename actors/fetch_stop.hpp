#pragma once
// A stop token for the data source's fetch in progress. When a run is asked to stop while its
// loader is blocked fetching a minibatch the stop point does not need (the source waits on I/O
// for data no stage will ever train on), the fetch's token is stopped, so a source that watches it
// returns at once, declining the minibatch (an empty MinibatchData), instead of holding the stop
// until its I/O ends. A fetch the stop point still needs (an asynchronous schedule stops only at
// a multiple of its replica counts) is never cancelled.
#include <cstdint>
#include <functional>
#include <mutex>
#include <stop_token>

namespace tandem::actors {

class FetchStop {
 public:
  // The loader, before fetching minibatch b (of its run) and after: the token of that fetch is
  // stopped already when a stop was asked for and b is not needed.
  std::stop_token begin(std::int64_t b);
  void end();
  // The token of the fetch in progress: what the data source hands its callback. From the
  // loader's thread, between begin() and end().
  std::stop_token token() const;

  // From any thread, once a stop is asked for: `not_needed(b)` says whether the run may stop
  // before minibatch b; the fetch in progress, and every later one, is cancelled when it may.
  void stop(std::function<bool(std::int64_t)> not_needed);

 private:
  mutable std::mutex mu_;
  std::stop_source fetch_;
  std::int64_t fetching_ = -1;
  std::function<bool(std::int64_t)> not_needed_;
};

}  // namespace tandem::actors
