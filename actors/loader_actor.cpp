#include "actors/loader_actor.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>

#include "actors/messages.hpp"
#include "schedules/pipeline_rules.hpp"

namespace tandem::actors {

LoaderActor::LoaderActor(std::string name, LoaderSetup setup)
    : Actor(std::move(name)), s_(std::move(setup)) {
  window_ = schedules::admission_window(s_.routing->params());
  releases_needed_ = schedules::admission_releases_per_minibatch(s_.routing->params());
}

void LoaderActor::on_message(Message& msg) {
  const HandlerGauge::Scope scope(gauge_);
  if (msg.is<Credit>()) {
    const std::int64_t b = msg.as<Credit>().minibatch;
    if (b < 0 || b >= next_) {
      throw std::invalid_argument("loader: credit for minibatch " + std::to_string(b) +
                                  ", which was never admitted (admitted: " + std::to_string(next_) +
                                  ")");
    }
    if (++releases_[b] == releases_needed_) {
      releases_.erase(b);
      --in_flight_;
    }
  } else if (msg.is<StopRequest>()) {
    stop();
  } else if (!msg.is<StartRun>()) {
    throw std::invalid_argument("loader: unexpected message '" +
                                std::string(message_type_name(msg.type())) + "'");
  }
  admit();
}

void LoaderActor::stop() {
  // The loader alone knows how far admission got, so it picks the stop; every minibatch before
  // it was or will be admitted, none after it ever is, and the stages drop the actions of those.
  const std::int64_t at =
      std::min(s_.minibatches, schedules::stop_boundary(s_.routing->params(), next_));
  if (at == s_.minibatches) return;
  s_.minibatches = at;
  for (int d = 0; d < s_.stage_replicas; ++d) {
    (void)s_.channel->send(s_.self, d, make_message(StopAt{at}));
  }
}

std::optional<MinibatchData> LoaderActor::build(std::int64_t b) {
  PipelineEvent event;
  if (s_.on_event) event.start = std::chrono::steady_clock::now();
  std::stop_token token;  // never stopped without a FetchStop
  if (s_.fetch_stop) token = s_.fetch_stop->begin(b);
  const struct EndFetch {
    FetchStop* fetch;
    ~EndFetch() {
      if (fetch != nullptr) fetch->end();
    }
  } ending{s_.fetch_stop.get()};
  MinibatchData data = s_.data(b);
  if (token.stop_requested() && data.pieces.empty()) return std::nullopt;
  if (s_.on_event) {
    event.minibatch = b;
    event.end = s_.routing->params().samples();
    event.finish = std::chrono::steady_clock::now();
    s_.on_event(event);
  }
  return data;
}

void LoaderActor::declined(std::int64_t b) {
  // Only a fetch the stop does not need is cancelled, so the stop boundary lies at or before b;
  // stop() picks it (the StopRequest that cancelled the fetch may still be queued).
  if (schedules::stop_boundary(s_.routing->params(), b) > b) {
    throw std::logic_error("loader: the data source declined minibatch " + std::to_string(b) +
                           ", which the run's stop still needs");
  }
  stop();
}

void LoaderActor::admit() {
  while (in_flight_ < window_ && next_ < s_.minibatches) {
    const std::int64_t b = next_;
    MinibatchData data;
    if (ahead_ && ahead_->first == b) {
      data = std::move(ahead_->second);
    } else {
      std::optional<MinibatchData> built = build(b);
      if (!built) return declined(b);
      data = std::move(*built);
    }
    ahead_.reset();
    ++next_;
    ++in_flight_;
    peak_ = std::max(peak_, in_flight_);
    const auto rows_total = static_cast<std::uint32_t>(data.loss_rows());
    s_.routing->loader_routes(b, routes_);
    for (const schedules::Route& r : routes_) {
      const bool targets = r.port == schedules::Port::target;
      Tensor t = data.rows(r.slice, targets);
      const TensorMeta meta = TensorMeta::of(t, rows_total);
      (void)s_.channel->send(s_.self, r.device,
                             make_message(ForwardTensor{meta}, {t}, tensor_tag(r)));
    }
  }
  // The window is full (or the run fed): build the next one now, while the stages compute.
  if (!ahead_ && next_ < s_.minibatches) {
    std::optional<MinibatchData> built = build(next_);
    if (!built) return declined(next_);
    ahead_.emplace(next_, std::move(*built));
  }
}

}  // namespace tandem::actors
