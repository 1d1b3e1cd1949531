#pragma once
// Feeds minibatches into the pipeline: each admitted minibatch's samples go, slice by slice as
// the routing says, to the input stage (inputs) and the last stage (targets). Admission control:
// at most the schedule's window of minibatches is out at once; the input stage hands each back
// (Credit) when it is done with it, so memory never grows with the run's length. While the
// window is full the loader builds the next minibatch, so loading overlaps compute.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "actors/fetch_stop.hpp"
#include "actors/handler_gauge.hpp"
#include "actors/minibatch_data.hpp"
#include "actors/pipeline_event.hpp"
#include "runtime/actor.hpp"
#include "schedules/routing.hpp"
#include "transport/channel.hpp"

namespace tandem::actors {

struct LoaderSetup {
  std::shared_ptr<const schedules::Routing> routing;
  DataSource data;
  std::int64_t minibatches = 0;  // to feed in all
  int stage_replicas = 0;        // endpoints 0..n-1 get StopAt when the run stops early
  transport::Channel* channel = nullptr;
  transport::Endpoint self = -1;
  PipelineEventHook on_event;  // loader_send per admitted minibatch (traces)
  // The token of each fetch, stopped when the run stops and the fetch is not needed (may be
  // null: fetches are never cancelled). A cancelled fetch's empty data declines the minibatch.
  std::shared_ptr<FetchStop> fetch_stop;
};

class LoaderActor final : public Actor {
 public:
  LoaderActor(std::string name, LoaderSetup setup);

  std::int64_t admitted() const { return next_; }
  // The run's length: the planned one, or where it stopped on request.
  std::int64_t minibatches() const { return s_.minibatches; }
  int peak_in_flight() const { return peak_; }
  // From any thread: its handlers (Pipeline::progress; a data source that hangs shows here).
  HandlerGauge::Reading gauge() const { return gauge_.read(); }

 protected:
  void on_message(Message& msg) override;

 private:
  void admit();
  void stop();
  // Builds minibatch b's data (and reports it to on_event); none when the source declined it,
  // its fetch cancelled by a stop that does not need it.
  std::optional<MinibatchData> build(std::int64_t b);
  // After a declined fetch of minibatch b: the run stops before it.
  void declined(std::int64_t b);

  LoaderSetup s_;
  int window_ = 1;
  int releases_needed_ = 1;
  std::int64_t next_ = 0;
  int in_flight_ = 0;
  int peak_ = 0;
  std::map<std::int64_t, int> releases_;
  std::vector<schedules::Route> routes_;
  // The next minibatch's data, built while the window is full: a flush schedule admits one
  // minibatch at a time, and its stages would otherwise wait for every load.
  std::optional<std::pair<std::int64_t, MinibatchData>> ahead_;
  HandlerGauge gauge_;
};

}  // namespace tandem::actors
