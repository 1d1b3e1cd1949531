#include "schedules/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "schedules/schedule_error.hpp"
#include "schedules/text_form.hpp"

namespace tandem::schedules {
namespace {

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string percent(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * v);
  return buf;
}

std::string bytes(double v) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
  return buf;
}

// "d3". Built by appending: GCC 12 warns (-Wrestrict) on "d" + std::to_string(...).
std::string device_name(std::size_t d) {
  std::string out(1, 'd');
  out += std::to_string(d);
  return out;
}

std::string pad(const std::string& s, std::size_t width) {
  return s.size() >= width ? s + " " : s + std::string(width - s.size(), ' ');
}

void require_timeline(const ActionList& list, const SimulationResult& result) {
  if (result.timeline.size() != list.size()) {
    throw ScheduleError("report: the simulation result has no timeline for this list");
  }
}

char fill_of(Op op) {
  switch (op) {
    case Op::F:
      return '-';
    case Op::B:
      return '=';
    case Op::W:
      return '~';
    case Op::STEP:
      return 'S';
    case Op::SYNC:
      return 'Y';
  }
  return '?';
}

}  // namespace

std::string format_report(const ActionList& list, const SimulationResult& r) {
  const auto& p = list.params;
  std::string out =
      "schedule " + std::string(to_string(p.kind)) + ": " + std::to_string(p.stages) + " stages, " +
      (p.kind == ScheduleKind::umpipe ? std::string("per-stage slices, ")
                                      : std::to_string(p.slices) + " slices per minibatch, ") +
      std::to_string(p.minibatches) + " minibatches, " + std::to_string(p.total_replicas()) +
      " devices, " + std::to_string(list.size()) + " actions\n";
  out += "makespan " + number(r.makespan) + "   bubble " + percent(r.bubble) + "\n\n";
  const std::size_t w[] = {8, 7, 9, 12, 12, 8, 13, 14, 12};
  const char* heads[] = {"device", "stage",       "replica",      "busy",  "idle",
                         "bubble", "peak-slices", "peak-samples", "memory"};
  const auto end_row = [&out] {
    while (!out.empty() && out.back() == ' ') out.pop_back();
    out += '\n';
  };
  for (int i = 0; i < 9; ++i) out += pad(heads[i], w[i]);
  end_row();
  for (std::size_t d = 0; d < list.devices.size(); ++d) {
    const int dev = static_cast<int>(d);
    const double bubble = r.makespan > 0 ? r.idle[d] / r.makespan : 0.0;
    const std::string cells[] = {device_name(d),
                                 std::to_string(p.stage_of(dev)),
                                 std::to_string(p.replica_of(dev)),
                                 number(r.busy[d]),
                                 number(r.idle[d]),
                                 percent(bubble),
                                 std::to_string(r.peak_in_flight[d]),
                                 std::to_string(r.peak_in_flight_samples[d]),
                                 bytes(r.memory[d])};
    for (int i = 0; i < 9; ++i) out += pad(cells[i], w[i]);
    end_row();
  }
  return out;
}

std::string format_ascii_timeline(const ActionList& list, const SimulationResult& r, int width) {
  require_timeline(list, r);
  width = std::max(width, 10);
  const double per_column = r.makespan > 0 ? r.makespan / width : 1.0;
  std::string out = "timeline: 1 column = " + number(per_column) + " time units\n";
  std::vector<std::string> rows(list.devices.size(), std::string(width, '.'));
  for (const OpInterval& op : r.timeline) {
    if (op.end <= op.start) continue;
    const Action& a = list.devices[op.device][op.index];
    auto c0 = static_cast<int>(std::lround(op.start / per_column));
    auto c1 = static_cast<int>(std::lround(op.end / per_column));
    c0 = std::min(c0, width - 1);
    c1 = std::clamp(c1, c0 + 1, width);
    const std::string label = a.op == Op::STEP || a.op == Op::SYNC ? std::string(1, fill_of(a.op))
                                                                   : format_action(list.params, a);
    for (int c = c0; c < c1; ++c) {
      const auto k = static_cast<std::size_t>(c - c0);
      rows[op.device][c] = k < label.size() ? label[k] : fill_of(a.op);
    }
  }
  for (std::size_t d = 0; d < rows.size(); ++d) {
    out += pad(device_name(d), 5);
    out += '|';
    out += rows[d];
    out += "|\n";
  }
  return out;
}

std::string format_json(const ActionList& list, const SimulationResult& r) {
  const auto& p = list.params;
  nlohmann::json j;
  j["schedule"] = to_string(p.kind);
  j["stages"] = p.stages;
  j["slices"] = p.slices;
  j["chunks"] = p.chunks;
  j["makespan"] = r.makespan;
  j["bubble"] = r.bubble;
  auto& devices = j["devices"] = nlohmann::json::array();
  for (std::size_t d = 0; d < list.devices.size(); ++d) {
    const int dev = static_cast<int>(d);
    devices.push_back({{"device", d},
                       {"stage", p.stage_of(dev)},
                       {"replica", p.replica_of(dev)},
                       {"busy", r.busy[d]},
                       {"idle", r.idle[d]},
                       {"peak_in_flight", r.peak_in_flight[d]},
                       {"peak_in_flight_samples", r.peak_in_flight_samples[d]},
                       {"memory_bytes", r.memory[d]}});
  }
  auto& timeline = j["timeline"] = nlohmann::json::array();
  for (const OpInterval& op : r.timeline) {
    const Action& a = list.devices[op.device][op.index];
    nlohmann::json item = {{"device", op.device},
                           {"op", to_string(a.op)},
                           {"minibatch", a.minibatch},
                           {"start", op.start},
                           {"end", op.end}};
    if (a.op != Op::STEP && a.op != Op::SYNC) {
      item["samples"] = {a.slice.begin, a.slice.end};
      item["chunk"] = a.chunk;
    }
    timeline.push_back(std::move(item));
  }
  return j.dump(1) + "\n";
}

}  // namespace tandem::schedules
