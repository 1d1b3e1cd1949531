#include "actors/coordinator.hpp"

#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>

#include "actors/messages.hpp"

namespace tandem::actors {

Coordinator::Coordinator(std::string name, int stage_replicas, MinibatchCallback on_minibatch,
                         PipelineEventHook on_event, NormReports norms)
    : Actor(std::move(name)),
      on_minibatch_(std::move(on_minibatch)),
      norms_(norms),
      on_event_(std::move(on_event)),
      expected_(stage_replicas),
      seen_(stage_replicas, false) {}

void Coordinator::on_loss(const Message& msg) {
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
  rows_total_[b] = r.rows_total;
  const bool complete = l.rows == static_cast<std::int64_t>(r.rows_total);
  if (complete) maybe_complete(b);
  if (on_event_) {
    event.kind = PipelineEvent::Kind::coordinator_loss;
    event.minibatch = b;
    event.begin = msg.tag().begin;
    event.end = msg.tag().end;
    event.complete = complete;
    event.finish = std::chrono::steady_clock::now();
    on_event_(event);
  }
}

void Coordinator::on_norm(const Message& msg) {
  const GradNormReport r = msg.as<GradNormReport>();
  const std::int64_t b = msg.tag().minibatch;
  const std::string what = "coordinator: gradient norm of round " + std::to_string(b) +
                           " from stage " + std::to_string(r.stage);
  if (norms_.kind == NormReports::Kind::none) throw std::invalid_argument(what + ": none expected");
  const bool global = norms_.kind == NormReports::Kind::global;
  if (b < 0 || (global ? r.stage != -1 : r.stage < 0 || r.stage >= norms_.stages)) {
    throw std::invalid_argument(what + ": no such round or stage");
  }
  // NaN is a diverged gradient, reported as such; a negative sum of squares is not one.
  if (r.squares < 0) throw std::invalid_argument(what + ": negative sum of squares");
  if (norm_done_.contains(b)) throw std::invalid_argument(what + ": reported twice");
  NormParts& parts = norm_parts_[b];
  const std::size_t n = global ? 1 : static_cast<std::size_t>(norms_.stages);
  if (parts.squares.empty()) {
    parts.squares.assign(n, 0.0);
    parts.seen.assign(n, false);
  }
  const std::size_t at = global ? 0 : static_cast<std::size_t>(r.stage);
  if (parts.seen[at]) throw std::invalid_argument(what + ": reported twice");
  parts.seen[at] = true;
  parts.squares[at] = r.squares;
  ++parts.have;
  if (parts.have == static_cast<int>(n)) {
    double total = 0;
    for (const double s : parts.squares) total += s;
    losses_[b].grad_norm = std::sqrt(total);
    norm_parts_.erase(b);
    norm_done_.insert(b);
    maybe_complete(b);
  }
}

void Coordinator::maybe_complete(std::int64_t b) {
  const MinibatchLoss& l = losses_[b];
  const auto rows = rows_total_.find(b);
  if (rows == rows_total_.end() || l.rows != static_cast<std::int64_t>(rows->second)) return;
  if (norms_.kind != NormReports::Kind::none && !norm_done_.contains(b)) return;
  if (on_minibatch_) on_minibatch_(b, l);
}

void Coordinator::on_message(Message& msg) {
  const HandlerGauge::Scope scope(gauge_);
  if (msg.is<LossReport>()) {
    on_loss(msg);
  } else if (msg.is<GradNormReport>()) {
    on_norm(msg);
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
