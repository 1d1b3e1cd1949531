#include "actors/coordinator.hpp"

#include <stdexcept>
#include <string>

#include "actors/messages.hpp"

namespace tandem::actors {

Coordinator::Coordinator(std::string name, int stage_replicas)
    : Actor(std::move(name)), expected_(stage_replicas), seen_(stage_replicas, false) {}

void Coordinator::on_message(Message& msg) {
  if (msg.is<LossReport>()) {
    const LossReport r = msg.as<LossReport>();
    MinibatchLoss& l = losses_[r.minibatch];
    l.loss_sum += r.loss_sum;
    l.rows += r.rows;
    l.correct += r.correct;
  } else if (msg.is<StageFinished>()) {
    const int d = msg.as<StageFinished>().device;
    if (d < 0 || d >= expected_ || seen_[d]) {
      throw std::invalid_argument("coordinator: unexpected end of stage replica d" +
                                  std::to_string(d));
    }
    seen_[d] = true;
    ++finished_;
  } else if (!msg.is<StartRun>()) {
    throw std::invalid_argument("coordinator: unexpected message '" +
                                std::string(message_type_name(msg.type())) + "'");
  }
}

}  // namespace tandem::actors
