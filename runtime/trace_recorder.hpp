#pragma once
// Records begin/end, complete and flow events and writes them as Chrome trace JSON (the
// format ui.perfetto.dev and chrome://tracing open): one track per actor (or per whatever the
// caller numbers tracks by), arrows from a send to its receive, and per-slice arguments that
// the viewers show on selection and that tools read back.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace tandem {

// One argument of a slice ("args" in the JSON).
struct TraceArg {
  std::string key;
  std::variant<std::int64_t, double, std::string> value;
};
using TraceArgs = std::vector<TraceArg>;

class TraceRecorder {
 public:
  TraceRecorder();

  std::int64_t now_ns() const;

  void set_process_name(std::string_view name);
  void set_track_name(std::uint32_t track, std::string_view name);
  // Viewers order tracks by this (lower first) rather than by their numbers.
  void set_track_sort_index(std::uint32_t track, int index);
  void begin(std::string_view name, std::string_view category, std::uint32_t track);
  void end(std::uint32_t track);
  void complete(std::string_view name, std::string_view category, std::uint32_t track,
                std::int64_t start_ns, std::int64_t duration_ns, TraceArgs args = {});
  // A flow arrow: start on the sender's track, end on the receiver's.
  std::uint64_t next_flow_id() { return next_flow_.fetch_add(1) + 1; }
  void flow_start(std::uint64_t id, std::uint32_t track, std::string_view name, std::int64_t ts_ns);
  void flow_end(std::uint64_t id, std::uint32_t track, std::string_view name, std::int64_t ts_ns);

  std::size_t size() const;
  nlohmann::json to_json() const;
  // Writes the JSON object format ({"traceEvents": [...]}); throws naming the path on failure.
  void write(const std::string& path) const;

 private:
  struct Event {
    char phase;
    std::uint32_t track;
    std::int64_t ts_ns;
    std::int64_t dur_ns;
    std::uint64_t id;
    std::string name;
    std::string category;
    TraceArgs args;
  };
  void push(Event e);

  std::chrono::steady_clock::time_point origin_;
  std::atomic<std::uint64_t> next_flow_{0};
  mutable std::mutex mu_;
  std::vector<Event> events_;
  std::string process_name_;
  std::vector<std::pair<std::uint32_t, std::string>> track_names_;
  std::vector<std::pair<std::uint32_t, int>> track_order_;
};

}  // namespace tandem
