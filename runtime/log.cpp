#include "runtime/log.hpp"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/dist_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <memory>
#include <mutex>
#include <string>

namespace tandem::log {
namespace {

// A sink that hands each line to the application's handler; base_sink's mutex serialises the
// calls.
class HandlerSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit HandlerSink(std::function<void(Level, std::string_view)> handler)
      : handler_(std::move(handler)) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    handler_(level_of(msg.level), std::string_view(msg.payload.data(), msg.payload.size()));
  }
  void flush_() override {}

 private:
  static Level level_of(spdlog::level::level_enum l) {
    if (l <= spdlog::level::debug) return Level::debug;
    if (l == spdlog::level::info) return Level::info;
    if (l == spdlog::level::warn) return Level::warn;
    return Level::error;
  }
  std::function<void(Level, std::string_view)> handler_;
};

struct Log {
  // The logger's one sink: it forwards to stderr or to the handler, and is swapped under its
  // own lock while other threads log.
  std::shared_ptr<spdlog::sinks::dist_sink_mt> route =
      std::make_shared<spdlog::sinks::dist_sink_mt>();
  spdlog::logger logger{"tandem", route};

  Log() { route->set_sinks({std::make_shared<spdlog::sinks::stderr_color_sink_mt>()}); }
};

Log& instance() {
  static Log log;
  return log;
}

}  // namespace

spdlog::logger& logger() {
  return instance().logger;
}

void set_handler(std::function<void(Level, std::string_view)> handler) {
  Log& log = instance();
  if (handler) {
    log.route->set_sinks({std::make_shared<HandlerSink>(std::move(handler))});
  } else {
    log.route->set_sinks({std::make_shared<spdlog::sinks::stderr_color_sink_mt>()});
  }
}

}  // namespace tandem::log
