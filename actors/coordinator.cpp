#include "actors/coordinator.hpp"

#include <chrono>
#include <stdexcept>
#include <string>

#include "actors/messages.hpp"

namespace tandem::actors {

Coordinator::Coordinator(std::string name, int stage_replicas, MinibatchCallback on_minibatch,
                         PipelineEventHook on_event)
    : Actor(std::move(name)),
      on_minibatch_(std::move(on_minibatch)),
      on_event_(std::move(on_event)),
      expected_(stage_replicas),
      seen_(stage_replicas, false) {}

void Coordinator::on_message(Message& msg) {
  const HandlerGauge::Scope scope(gauge_);
  if (msg.is<LossReport>()) {
    PipelineEvent event;
    if (on_event_) event.start = std::chrono::steady_clock::now();
    const LossReport r = msg.as<LossReport>();
    const std::int64_t b = msg.tag().minibatch;
    MinibatchLoss& l = losses_[b];
    l.loss_sum += r.loss_sum;
    l.rows += r.rows;
    l.correct += r.correct;
    if (l.rows > static_cast<std::int64_t>(r.rows_total)) {
      throw std::logic_error("coordinator: minibatch " + std::to_string(b) + " reported " +
                             std::to_string(l.rows) + " loss rows of " +
                             std::to_string(r.rows_total));
    }
    const bool complete = l.rows == static_cast<std::int64_t>(r.rows_total);
    if (complete && on_minibatch_) on_minibatch_(b, l);
    if (on_event_) {
      event.kind = PipelineEvent::Kind::coordinator_loss;
      event.minibatch = b;
      event.begin = msg.tag().begin;
      event.end = msg.tag().end;
      event.complete = complete;
      event.finish = std::chrono::steady_clock::now();
      on_event_(event);
    }
  } else if (msg.is<OutputTensor>()) {
    const Tag& tag = msg.tag();
    if (msg.tensors.size() != 1 || !msg.as<OutputTensor>().meta.describes(msg.tensors.front()) ||
        msg.tensors.front().rank() == 0 ||
        msg.tensors.front().dim(0) != static_cast<std::int64_t>(tag.end) - tag.begin) {
      throw std::invalid_argument("coordinator: malformed outputs of minibatch " +
                                  std::to_string(tag.minibatch) + " samples [" +
                                  std::to_string(tag.begin) + "," + std::to_string(tag.end) + ")");
    }
    if (!outputs_.emplace(std::pair{tag.minibatch, std::int64_t{tag.begin}}, msg.tensors.front())
             .second) {
      throw std::invalid_argument("coordinator: outputs of minibatch " +
                                  std::to_string(tag.minibatch) + " from sample " +
                                  std::to_string(tag.begin) + " arrived twice");
    }
  } else if (msg.is<StageFinished>()) {
    const int d = msg.as<StageFinished>().device;
    if (d < 0 || d >= expected_ || seen_[d]) {
      throw std::invalid_argument("coordinator: unexpected end of stage replica d" +
                                  std::to_string(d));
    }
    seen_[d] = true;
    finished_.fetch_add(1, std::memory_order_release);
  } else if (!msg.is<StartRun>()) {
    throw std::invalid_argument("coordinator: unexpected message '" +
                                std::string(message_type_name(msg.type())) + "'");
  }
}

}  // namespace tandem::actors
