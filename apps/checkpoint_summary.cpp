#include "apps/checkpoint_summary.hpp"

#include <algorithm>
#include <map>
#include <sstream>
#include <system_error>

#include "schedules/schedule_kind.hpp"

namespace tandem::apps {
namespace {

namespace fs = std::filesystem;

std::uintmax_t file_bytes(const fs::path& path) {
  std::error_code ec;
  const std::uintmax_t n = fs::file_size(path, ec);
  return ec ? 0 : n;
}

std::uintmax_t total_bytes(const train::Checkpoint& checkpoint, const fs::path& step_dir) {
  std::uintmax_t total = file_bytes(step_dir / "manifest.json");
  for (const train::StageCheckpoint& s : checkpoint.stages) total += file_bytes(s.file);
  return total;
}

// "0-2" (inclusive, as configs write layers), ranges joined by ", ".
std::string layers_text(const std::vector<schedules::LayerRange>& ranges) {
  std::string out;
  for (const schedules::LayerRange& r : ranges) {
    if (!out.empty()) out += ", ";
    out += std::to_string(r.begin);
    if (r.end - 1 > r.begin) out.append("-").append(std::to_string(r.end - 1));
  }
  return out;
}

std::string placement_text(const schedules::Placement& p) {
  return p.host.empty() ? p.device : p.device + "@" + p.host;
}

std::string schedule_text(const schedules::ScheduleParams& sp) {
  std::string out = std::string(schedules::to_string(sp.kind)) + ": " + std::to_string(sp.stages) +
                    (sp.stages == 1 ? " stage, " : " stages, ") + std::to_string(sp.slices) +
                    (sp.slices == 1 ? " slice" : " slices");
  if (sp.chunks > 1) out += ", " + std::to_string(sp.chunks) + " chunks per device";
  return out + ", minibatch " + std::to_string(sp.minibatch_size);
}

// "replica 0: versions 8 (newest), 7, 6; 12 tensors each"
void print_weights(std::ostream& out, const train::StageCheckpoint& stage) {
  std::map<int, std::vector<const train::CheckpointWeights*>> by_replica;
  for (const train::CheckpointWeights& w : stage.weights) by_replica[w.replica].push_back(&w);
  for (auto& [replica, versions] : by_replica) {
    std::sort(versions.begin(), versions.end(),
              [](const auto* a, const auto* b) { return a->version > b->version; });
    out << "            weights    replica " << replica << ": version"
        << (versions.size() == 1 ? " " : "s ");
    for (size_t i = 0; i < versions.size(); ++i) {
      out << (i == 0 ? "" : ", ") << versions[i]->version << (i == 0 ? " (newest)" : "");
    }
    out << "; " << versions.front()->params.size() << " tensors"
        << (versions.size() == 1 ? "" : " each") << "\n";
  }
}

void print_stage(std::ostream& out, const train::Checkpoint& checkpoint, int s) {
  const train::StageCheckpoint& stage = checkpoint.stages[static_cast<size_t>(s)];
  const schedules::StagePlan& plan = checkpoint.plan.stages[static_cast<size_t>(s)];
  std::string devices;
  for (const schedules::Placement& p : plan.replicas) {
    devices += (devices.empty() ? "" : ", ") + placement_text(p);
  }
  out << "stage " << s << (s < 10 ? "     " : "    ") << "layers "
      << layers_text(stage_layers(checkpoint.plan, s)) << ", " << plan.replicas.size()
      << (plan.replicas.size() == 1 ? " replica (" : " replicas (") << devices << ")\n";
  out << "            " << stage.file.filename().string() << ", " << file_bytes(stage.file)
      << " bytes, written by rank " << stage.rank
      << (stage.host.empty() ? std::string() : " on " + stage.host) << "\n";
  print_weights(out, stage);
  for (const train::CheckpointOptimizer& o : stage.optimizers) {
    out << "            optimizer  replica " << o.replica << ": " << o.steps << " steps; "
        << o.state.size() << " tensors\n";
  }
}

nlohmann::json stage_json(const train::Checkpoint& checkpoint, int s) {
  const train::StageCheckpoint& stage = checkpoint.stages[static_cast<size_t>(s)];
  nlohmann::json j = {{"stage", s},
                      {"file", stage.file.filename().string()},
                      {"rank", stage.rank},
                      {"host", stage.host},
                      {"bytes", file_bytes(stage.file)}};
  j["layers"] = nlohmann::json::array();
  for (const schedules::LayerRange& r : stage_layers(checkpoint.plan, s)) {
    j["layers"].push_back({r.begin, r.end});
  }
  j["replicas"] = nlohmann::json::array();
  for (const schedules::Placement& p : checkpoint.plan.stages[static_cast<size_t>(s)].replicas) {
    j["replicas"].push_back({{"host", p.host}, {"device", p.device}});
  }
  j["weights"] = nlohmann::json::array();
  for (const train::CheckpointWeights& w : stage.weights) {
    j["weights"].push_back(
        {{"replica", w.replica}, {"version", w.version}, {"tensors", w.params.size()}});
  }
  j["optimizer"] = nlohmann::json::array();
  for (const train::CheckpointOptimizer& o : stage.optimizers) {
    j["optimizer"].push_back(
        {{"replica", o.replica}, {"steps", o.steps}, {"tensors", o.state.size()}});
  }
  return j;
}

}  // namespace

std::vector<schedules::LayerRange> stage_layers(const schedules::Plan& plan, int stage) {
  const int num_layers = plan.stages.back().layers.end;
  const std::vector<schedules::LayerRange> virtual_stages =
      schedules::virtual_stage_layers(plan, num_layers);
  std::vector<schedules::LayerRange> out;
  for (int c = 0; c < plan.schedule.chunks; ++c) {
    out.push_back(virtual_stages.at(static_cast<size_t>(plan.schedule.virtual_stage(stage, c))));
  }
  return out;
}

std::string format_checkpoint(const train::Checkpoint& checkpoint, const fs::path& step_dir) {
  std::ostringstream out;
  out << "checkpoint  " << step_dir.string() << "\n"
      << "step        " << checkpoint.step << "\n"
      << "model       " << checkpoint.model << "\n"
      << "optimizer   " << checkpoint.optimizer << "\n"
      << "seed        " << checkpoint.seed << "\n"
      << "schedule    " << schedule_text(checkpoint.plan.schedule) << "\n"
      << "parent      "
      << (checkpoint.parent ? checkpoint.parent->name + " (manifest sha256 " +
                                  checkpoint.parent->manifest_sha256 + ")"
                            : std::string("none"))
      << "\n";
  for (int s = 0; s < static_cast<int>(checkpoint.stages.size()); ++s) {
    print_stage(out, checkpoint, s);
  }
  out << "total       " << total_bytes(checkpoint, step_dir) << " bytes ("
      << checkpoint.stages.size() << " stage files and the manifest)\n";
  return out.str();
}

nlohmann::json checkpoint_json(const train::Checkpoint& checkpoint, const fs::path& step_dir) {
  const schedules::ScheduleParams& sp = checkpoint.plan.schedule;
  nlohmann::json j = {{"checkpoint", step_dir.string()},
                      {"step", checkpoint.step},
                      {"model", checkpoint.model},
                      {"optimizer", checkpoint.optimizer},
                      {"seed", checkpoint.seed}};
  j["schedule"] = {{"kind", std::string(schedules::to_string(sp.kind))},
                   {"stages", sp.stages},
                   {"slices", sp.slices},
                   {"chunks", sp.chunks},
                   {"minibatch_size", sp.minibatch_size}};
  j["parent"] = checkpoint.parent
                    ? nlohmann::json{{"checkpoint", checkpoint.parent->name},
                                     {"manifest_sha256", checkpoint.parent->manifest_sha256}}
                    : nlohmann::json(nullptr);
  j["stages"] = nlohmann::json::array();
  for (int s = 0; s < static_cast<int>(checkpoint.stages.size()); ++s) {
    j["stages"].push_back(stage_json(checkpoint, s));
  }
  j["bytes"] = total_bytes(checkpoint, step_dir);
  return j;
}

}  // namespace tandem::apps
