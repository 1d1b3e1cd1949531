#include "schedules/schedule_kind.hpp"

#include <array>
#include <string>
#include <utility>

#include "schedules/schedule_error.hpp"

namespace tandem::schedules {
namespace {

constexpr std::array<std::pair<ScheduleKind, std::string_view>, 13> kNames{{
    {ScheduleKind::naive, "naive"},
    {ScheduleKind::gpipe, "gpipe"},
    {ScheduleKind::one_f_one_b, "1f1b"},
    {ScheduleKind::pipedream, "pipedream"},
    {ScheduleKind::pipedream_vsync, "pipedream-vsync"},
    {ScheduleKind::pipedream_2bw, "2bw"},
    {ScheduleKind::interleaved, "interleaved"},
    {ScheduleKind::zb_h1, "zb-h1"},
    {ScheduleKind::zb_v, "zb-v"},
    {ScheduleKind::zb_2p, "zb-2p"},
    {ScheduleKind::umpipe, "umpipe"},
    {ScheduleKind::custom, "custom"},
    {ScheduleKind::forward, "forward"},
}};

}  // namespace

std::string_view to_string(ScheduleKind kind) {
  for (const auto& [k, name] : kNames) {
    if (k == kind) return name;
  }
  return "?";
}

ScheduleKind parse_schedule_kind(std::string_view name) {
  std::string valid;
  for (const auto& [k, n] : kNames) {
    if (n == name) return k;
    valid += valid.empty() ? "" : ", ";
    valid += n;
  }
  throw ScheduleError("unknown schedule '" + std::string(name) + "' (valid: " + valid + ")");
}

std::vector<std::string_view> pipeline_schedule_names() {
  std::vector<std::string_view> out;
  for (const auto& [k, name] : kNames) {
    if (k != ScheduleKind::naive && k != ScheduleKind::custom && k != ScheduleKind::forward) {
      out.push_back(name);
    }
  }
  return out;
}

bool is_asynchronous(ScheduleKind kind) {
  return kind == ScheduleKind::pipedream || kind == ScheduleKind::pipedream_vsync ||
         kind == ScheduleKind::pipedream_2bw;
}

bool trains(ScheduleKind kind) {
  return kind != ScheduleKind::forward;
}

}  // namespace tandem::schedules
