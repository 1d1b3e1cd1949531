#include <utility>

#include "runtime/log.hpp"
#include "tandem/tandem.hpp"

namespace tandem {

void set_log_handler(std::function<void(LogLevel level, std::string_view message)> handler) {
  if (!handler) {
    log::set_handler({});
    return;
  }
  log::set_handler([h = std::move(handler)](log::Level level, std::string_view message) {
    h(static_cast<LogLevel>(level), message);  // the same four levels, in the same order
  });
}

}  // namespace tandem
