#include "planner/plan_output.hpp"

#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "schedules/schedule_kind.hpp"

namespace tandem::planner {
namespace {

std::string layer_range(const schedules::LayerRange& layers) {
  if (layers.end - layers.begin == 1) return std::to_string(layers.begin);
  return std::to_string(layers.begin) + "-" + std::to_string(layers.end - 1);
}

std::string join(const std::vector<std::int64_t>& values) {
  std::string out;
  for (const auto v : values) {
    if (!out.empty()) out += ' ';
    out += std::to_string(v);
  }
  return out;
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  char text[32];
  std::snprintf(text, sizeof text, u == 0 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
  return text;
}

std::string workers_text(const std::vector<int>& workers) {
  std::string out;
  for (const int w : workers) {
    if (!out.empty()) out += ',';
    out += std::to_string(w);
  }
  return out;
}

std::string place_text(const schedules::Placement& place) {
  return place.host.empty() ? place.device : place.host + "/" + place.device;
}

}  // namespace

std::string format_plan(const PlannedPipeline& planned) {
  const schedules::Plan& plan = planned.plan;
  const schedules::ScheduleParams& params = plan.schedule;
  std::ostringstream os;
  char line[256];
  os << "schedule: " << schedules::to_string(params.kind) << " (" << planned.method << ")\n";
  int used = 0;
  for (const auto& stage : planned.stages) used += static_cast<int>(stage.workers.size());
  std::snprintf(line, sizeof line,
                "predicted time per minibatch: %.4g ms   bubble: %.1f%%   workers used: %d of %d",
                planned.time_per_minibatch_ms, 100 * planned.bubble, used, planned.workers);
  os << line;
  if (planned.noam > 0) os << "   NOAM: " << planned.noam;
  os << '\n';
  if (planned.simulated_ms > 0) {
    std::snprintf(line, sizeof line,
                  "simulated time per minibatch: %.4g ms (%.3gx the DP's estimate above)\n",
                  planned.simulated_ms, planned.simulated_ms / planned.time_per_minibatch_ms);
    os << line;
  }
  if (planned.equal_slices_ms > 0) {
    std::snprintf(line, sizeof line, "best equal slices: %.4g ms (UMPIPE gains %.3gx)\n",
                  planned.equal_slices_ms, planned.equal_slices_ms / planned.time_per_minibatch_ms);
    os << line;
  }
  const bool asynchronous = schedules::is_asynchronous(params.kind);
  std::snprintf(line, sizeof line, "%-6s %-10s %-8s %-16s %12s %10s %14s\n", "stage", "layers",
                "replicas", "placement", "compute ms", asynchronous ? "versions" : "in-flight",
                "memory/worker");
  os << line;
  for (std::size_t s = 0; s < plan.stages.size(); ++s) {
    const auto& stage = plan.stages[s];
    const PlannedStage& report = planned.stages[s];
    std::string where = place_text(stage.replicas.front());
    if (stage.replicas.size() > 1) where += " +" + std::to_string(stage.replicas.size() - 1);
    std::snprintf(line, sizeof line, "%-6zu %-10s %-8zu %-16s %12.4g %10d %14s\n", s,
                  layer_range(stage.layers).c_str(), stage.replicas.size(), where.c_str(),
                  report.compute_ms, asynchronous ? report.versions : report.in_flight,
                  human_bytes(report.memory_bytes).c_str());
    os << line;
    if (stage.replicas.size() > 1) os << "       workers " << workers_text(report.workers) << '\n';
  }
  if (params.kind == schedules::ScheduleKind::umpipe) {
    os << "slices (samples, in order):\n";
    for (int s = 0; s < params.stages; ++s) {
      os << "  stage " << s << ": forward " << join(params.forward_composition(s)) << " | backward "
         << join(params.backward_composition(s)) << '\n';
    }
  } else if (!asynchronous) {
    os << "slices: " << params.slices << " equal slices of a " << params.samples()
       << "-sample minibatch\n";
  }
  return os.str();
}

std::string format_ranking(const ScheduleRanking& ranking) {
  std::ostringstream os;
  char line[512];
  std::snprintf(line, sizeof line, "%-16s %-17s %7s %12s %8s %16s  %s\n", "schedule",
                "stages x replicas", "slices", "step ms", "bubble", "memory/device", "");
  os << line;
  const RankedSchedule* pick = ranking.pick();
  for (const RankedSchedule& e : ranking.entries) {
    if (!e.dropped.empty()) {
      std::snprintf(line, sizeof line, "%-16s %-17s %7s %12s %8s %16s  dropped: %s\n",
                    e.name().c_str(), "-", "-", "-", "-", "-", e.dropped.c_str());
      os << line;
      continue;
    }
    const schedules::ScheduleParams& params = e.planned.plan.schedule;
    bool uniform = true;
    for (int st = 0; st < params.stages; ++st) {
      uniform = uniform && params.replicas_of(st) == params.replicas_of(0);
    }
    const std::string shape =
        uniform ? std::to_string(e.stages) + " x " + std::to_string(e.devices / e.stages)
                : std::to_string(e.stages) + " on " + std::to_string(e.devices) + " devices";
    const std::string slices =
        params.forward_slices.empty() ? std::to_string(params.slices) : std::string("unequal");
    std::snprintf(line, sizeof line, "%-16s %-17s %7s %12.4g %7.1f%% %16s  %s\n", e.name().c_str(),
                  shape.c_str(), slices.c_str(), e.step_ms, 100 * e.bubble,
                  human_bytes(e.peak_memory_bytes).c_str(), &e == pick ? "<- pick" : "");
    os << line;
  }
  if (pick == nullptr) os << "no schedule fits: every candidate was dropped\n";
  return os.str();
}

std::string pipeline_yaml(const PlannedPipeline& planned) {
  const schedules::Plan& plan = planned.plan;
  const schedules::ScheduleParams& params = plan.schedule;
  YAML::Emitter out;
  out << YAML::BeginMap << YAML::Key << "pipeline" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "schedule" << YAML::Value << std::string(schedules::to_string(params.kind));
  if (params.kind == schedules::ScheduleKind::umpipe) {
    out << YAML::Key << "slices" << YAML::Value << YAML::BeginSeq;
    for (int s = 0; s < params.stages; ++s) {
      out << YAML::Flow << YAML::BeginMap;
      out << YAML::Key << "forward" << YAML::Value << YAML::Flow << params.forward_composition(s);
      out << YAML::Key << "backward" << YAML::Value << YAML::Flow << params.backward_composition(s);
      out << YAML::EndMap;
    }
    out << YAML::EndSeq;
  } else if (!schedules::is_asynchronous(params.kind) ||
             params.kind == schedules::ScheduleKind::pipedream_2bw) {
    out << YAML::Key << "slices" << YAML::Value << params.slices;
  }
  if (params.chunks > 1) out << YAML::Key << "chunks" << YAML::Value << params.chunks;
  if (params.rematerialize) out << YAML::Key << "rematerialize" << YAML::Value << true;
  out << YAML::Key << "stages" << YAML::Value << YAML::BeginSeq;
  for (std::size_t s = 0; s < plan.stages.size(); ++s) {
    const auto& stage = plan.stages[s];
    out << YAML::Flow << YAML::BeginMap;
    out << YAML::Key << "layers" << YAML::Value << YAML::DoubleQuoted << layer_range(stage.layers);
    if (stage.replicas.size() > 1) {
      out << YAML::Key << "replicas" << YAML::Value << stage.replicas.size();
    }
    bool same_device = true, same_place = true;
    for (const auto& place : stage.replicas) {
      same_device = same_device && place.device == stage.replicas.front().device;
      same_place = same_place && place == stage.replicas.front();
    }
    if (same_device) {
      out << YAML::Key << "device" << YAML::Value << stage.replicas.front().device;
    } else {
      // One device per replica, in order: `device:` would put every replica on the first's.
      out << YAML::Key << "devices" << YAML::Value << YAML::Flow << YAML::BeginSeq;
      for (const auto& place : stage.replicas) out << place.device;
      out << YAML::EndSeq;
    }
    out << YAML::EndMap;
    bool hosts = false;
    for (const auto& place : stage.replicas) hosts = hosts || !place.host.empty();
    if (!same_place && hosts) {  // hosts have no config key yet: shown for people
      std::string where;
      for (const auto& place : stage.replicas) {
        if (!where.empty()) where += ", ";
        where += place_text(place);
      }
      out << YAML::Comment("replicas on " + where);
    }
  }
  out << YAML::EndSeq << YAML::EndMap << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

std::string plan_json(const PlannedPipeline& planned) {
  const schedules::Plan& plan = planned.plan;
  const schedules::ScheduleParams& params = plan.schedule;
  nlohmann::ordered_json j;
  j["schedule"] = std::string(schedules::to_string(params.kind));
  j["method"] = planned.method;
  j["time_per_minibatch_ms"] = planned.time_per_minibatch_ms;
  j["bubble"] = planned.bubble;
  j["workers"] = planned.workers;
  if (planned.noam > 0) j["noam"] = planned.noam;
  if (planned.equal_slices_ms > 0) j["equal_slices_ms"] = planned.equal_slices_ms;
  if (planned.simulated_ms > 0) j["simulated_time_per_minibatch_ms"] = planned.simulated_ms;
  j["minibatch"] = params.samples();
  if (params.kind == schedules::ScheduleKind::umpipe) {
    auto& slices = j["slices"] = nlohmann::ordered_json::array();
    for (int s = 0; s < params.stages; ++s) {
      slices.push_back({{"forward", params.forward_composition(s)},
                        {"backward", params.backward_composition(s)}});
    }
  } else if (!schedules::is_asynchronous(params.kind)) {
    j["slices"] = params.slices;
  }
  auto& stages = j["stages"] = nlohmann::ordered_json::array();
  for (std::size_t s = 0; s < plan.stages.size(); ++s) {
    const auto& stage = plan.stages[s];
    const PlannedStage& report = planned.stages[s];
    nlohmann::ordered_json st;
    st["layers"] = {stage.layers.begin, stage.layers.end - 1};  // inclusive, as in configs
    auto& replicas = st["replicas"] = nlohmann::ordered_json::array();
    for (const auto& place : stage.replicas) {
      nlohmann::ordered_json r{{"device", place.device}};
      if (!place.host.empty()) r["host"] = place.host;
      replicas.push_back(r);
    }
    st["workers"] = report.workers;
    st["compute_ms"] = report.compute_ms;
    st["memory_bytes"] = report.memory_bytes;
    st["in_flight"] = report.in_flight;
    st["versions"] = report.versions;
    stages.push_back(st);
  }
  return j.dump(2) + "\n";
}

}  // namespace tandem::planner
