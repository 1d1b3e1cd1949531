#pragma once
// The library's log: one spdlog logger of Tandem's own, writing to stderr unless an embedding
// application routes its lines elsewhere (tandem::set_log_handler). An application's own spdlog
// default logger is neither used nor replaced, though both share one libspdlog.
#include <spdlog/spdlog.h>

#include <functional>
#include <string_view>
#include <utility>

namespace tandem::log {

enum class Level { debug, info, warn, error };

// Made on first use (a function-local static: one thread makes it, whichever logs first).
spdlog::logger& logger();

// Every line from now on goes to `handler` (called on the logging thread, one call at a time)
// instead of stderr; an empty handler writes to stderr again.
void set_handler(std::function<void(Level, std::string_view)> handler);

template <class... Args>
void debug(fmt::format_string<Args...> format, Args&&... args) {
  logger().debug(format, std::forward<Args>(args)...);
}
template <class... Args>
void info(fmt::format_string<Args...> format, Args&&... args) {
  logger().info(format, std::forward<Args>(args)...);
}
template <class... Args>
void warn(fmt::format_string<Args...> format, Args&&... args) {
  logger().warn(format, std::forward<Args>(args)...);
}
template <class... Args>
void error(fmt::format_string<Args...> format, Args&&... args) {
  logger().error(format, std::forward<Args>(args)...);
}

}  // namespace tandem::log
