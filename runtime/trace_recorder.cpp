#include "runtime/trace_recorder.hpp"

#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace tandem {

TraceRecorder::TraceRecorder() : origin_(std::chrono::steady_clock::now()) {}

std::int64_t TraceRecorder::now_ns() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                              origin_)
      .count();
}

void TraceRecorder::push(Event e) {
  std::lock_guard lock(mu_);
  events_.push_back(std::move(e));
}

void TraceRecorder::set_process_name(std::string_view name) {
  std::lock_guard lock(mu_);
  process_name_ = name;
}

void TraceRecorder::set_track_name(std::uint32_t track, std::string_view name) {
  std::lock_guard lock(mu_);
  track_names_.emplace_back(track, std::string(name));
}

void TraceRecorder::set_track_sort_index(std::uint32_t track, int index) {
  std::lock_guard lock(mu_);
  track_order_.emplace_back(track, index);
}

void TraceRecorder::begin(std::string_view name, std::string_view category, std::uint32_t track) {
  push({'B', track, now_ns(), 0, 0, std::string(name), std::string(category), {}});
}

void TraceRecorder::end(std::uint32_t track) {
  push({'E', track, now_ns(), 0, 0, {}, {}, {}});
}

void TraceRecorder::complete(std::string_view name, std::string_view category, std::uint32_t track,
                             std::int64_t start_ns, std::int64_t duration_ns, TraceArgs args) {
  push({'X', track, start_ns, duration_ns, 0, std::string(name), std::string(category),
        std::move(args)});
}

void TraceRecorder::flow_start(std::uint64_t id, std::uint32_t track, std::string_view name,
                               std::int64_t ts_ns) {
  push({'s', track, ts_ns, 0, id, std::string(name), "flow", {}});
}

void TraceRecorder::flow_end(std::uint64_t id, std::uint32_t track, std::string_view name,
                             std::int64_t ts_ns) {
  push({'f', track, ts_ns, 0, id, std::string(name), "flow", {}});
}

std::size_t TraceRecorder::size() const {
  std::lock_guard lock(mu_);
  return events_.size();
}

nlohmann::json TraceRecorder::to_json() const {
  std::lock_guard lock(mu_);
  auto events = nlohmann::json::array();
  constexpr int kPid = 1;
  if (!process_name_.empty()) {
    events.push_back({{"name", "process_name"},
                      {"ph", "M"},
                      {"pid", kPid},
                      {"tid", 0},
                      {"args", {{"name", process_name_}}}});
  }
  for (const auto& [track, index] : track_order_) {
    events.push_back({{"name", "thread_sort_index"},
                      {"ph", "M"},
                      {"pid", kPid},
                      {"tid", track},
                      {"args", {{"sort_index", index}}}});
  }
  for (const auto& [track, name] : track_names_) {
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", kPid},
                      {"tid", track},
                      {"args", {{"name", name}}}});
  }
  for (const Event& e : events_) {
    nlohmann::json j = {{"ph", std::string(1, e.phase)},
                        {"ts", static_cast<double>(e.ts_ns) / 1000.0},  // microseconds
                        {"pid", kPid},
                        {"tid", e.track}};
    if (e.phase != 'E') {
      j["name"] = e.name;
      j["cat"] = e.category;
    }
    if (e.phase == 'X') j["dur"] = static_cast<double>(e.dur_ns) / 1000.0;
    if (!e.args.empty()) {
      auto& args = j["args"];
      for (const TraceArg& a : e.args) {
        std::visit([&](const auto& v) { args[a.key] = v; }, a.value);
      }
    }
    if (e.phase == 's' || e.phase == 'f') j["id"] = e.id;
    // Bind the arrow's head to the enclosing slice that starts at or after it.
    if (e.phase == 'f') j["bp"] = "e";
    events.push_back(std::move(j));
  }
  return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ns"}};
}

void TraceRecorder::write(const std::string& path) const {
  std::ofstream out(path);
  if (!out) throw std::runtime_error("trace: cannot open '" + path + "' for writing");
  out << to_json().dump() << '\n';
  if (!out) throw std::runtime_error("trace: failed writing '" + path + "'");
}

}  // namespace tandem
