#pragma once
// What a sender learns about a send. Sending to a stopped actor is an error the sender sees,
// never a silent drop.
#include <string>

namespace tandem {

enum class SendStatus { ok, target_stopped, system_stopped, no_target };

struct [[nodiscard]] SendResult {
  SendStatus status = SendStatus::ok;
  bool ok() const { return status == SendStatus::ok; }
  explicit operator bool() const { return ok(); }
};

std::string to_string(SendStatus s);

}  // namespace tandem
