#include "train/reshard.hpp"

#include <optional>
#include <set>
#include <utility>

#include "schedules/pipeline_rules.hpp"
#include "schedules/schedule_kind.hpp"
#include "schedules/weight_versions.hpp"

namespace tandem::train {
namespace {

std::string layer_span(const schedules::LayerRange& r) {
  const std::string first = std::to_string(r.begin);
  return r.end - r.begin == 1 ? first : first + "-" + std::to_string(r.end - 1);
}

// "2-stage gpipe [0-3 x2|4-7]": stage count, schedule, each stage's layers (chunks joined by
// ',') and replica count beyond one.
std::string describe(const schedules::Plan& plan, int num_layers) {
  const std::vector<schedules::LayerRange> v = schedules::virtual_stage_layers(plan, num_layers);
  const int stages = static_cast<int>(plan.stages.size());
  std::string cut;
  for (int s = 0; s < stages; ++s) {
    if (s > 0) cut += "|";
    for (int c = 0; c < plan.schedule.chunks; ++c) {
      if (c > 0) cut += ",";
      cut += layer_span(v[static_cast<std::size_t>(plan.schedule.virtual_stage(s, c))]);
    }
    const std::size_t replicas = plan.stages[static_cast<std::size_t>(s)].replicas.size();
    if (replicas > 1) cut += " x" + std::to_string(replicas);
  }
  return std::to_string(stages) + "-stage " +
         std::string(schedules::to_string(plan.schedule.kind)) + " [" + cut + "]";
}

// The same stages holding the same layers with the same replicas under the same schedule: the
// checkpoint's versions are exactly those the run needs.
bool same_layout(const schedules::Plan& a, const schedules::Plan& b, int num_layers) {
  if (a.stages.size() != b.stages.size() || a.schedule.kind != b.schedule.kind ||
      a.schedule.chunks != b.schedule.chunks) {
    return false;
  }
  for (std::size_t s = 0; s < a.stages.size(); ++s) {
    if (a.stages[s].replicas.size() != b.stages[s].replicas.size()) return false;
  }
  return schedules::virtual_stage_layers(a, num_layers) ==
         schedules::virtual_stage_layers(b, num_layers);
}

// What else of the plan differs in the same layout (none of it changes the stored state).
std::optional<std::string> other_difference(const schedules::ScheduleParams& a,
                                            const schedules::ScheduleParams& b) {
  auto differs = [](const std::string& what, const std::string& x, const std::string& y) {
    return what + " " + x + " in the checkpoint, " + y + " in this run";
  };
  if (a.slices != b.slices) {
    return differs("slices", std::to_string(a.slices), std::to_string(b.slices));
  }
  if (a.minibatch_size != b.minibatch_size) {
    return differs("minibatch size", std::to_string(a.minibatch_size),
                   std::to_string(b.minibatch_size));
  }
  if (a.forward_slices != b.forward_slices || a.backward_slices != b.backward_slices) {
    return "other slice compositions";
  }
  return std::nullopt;
}

// Replica 0's stored versions, and its optimizer's step count (0 when it stores none).
std::set<std::int64_t> listed_versions(const CheckpointStageEntry& entry) {
  std::set<std::int64_t> out;
  for (const auto& w : entry.weights) {
    if (w.replica == 0) out.insert(w.version);
  }
  return out;
}

std::int64_t listed_steps(const CheckpointStageEntry& entry) {
  for (const auto& o : entry.optimizers) {
    if (o.replica == 0) return o.steps;
  }
  return 0;
}

// "v9-v10", "v8, v10" or "no version".
std::string versions_str(const std::set<std::int64_t>& versions) {
  if (versions.empty()) return "no version";
  const std::int64_t lo = *versions.begin();
  const std::int64_t hi = *versions.rbegin();
  std::string out;
  if (hi - lo + 1 == static_cast<std::int64_t>(versions.size())) {
    out.append("v").append(std::to_string(lo));
    if (hi != lo) out.append("-v").append(std::to_string(hi));
    return out;
  }
  for (const std::int64_t v : versions) {
    out.append(out.empty() ? "v" : ", v").append(std::to_string(v));
  }
  return out;
}

// Why the stored versions do not give every stage of `plan` what its minibatches in flight use
// (a version missing, another newest version, optimizers at other step counts), or nullopt.
std::optional<std::string> unmappable(const CheckpointManifest& manifest,
                                      const schedules::Plan& plan, int num_layers) {
  const std::int64_t step = manifest.checkpoint.step;
  const std::vector<int> owners = stage_of_layers(manifest.checkpoint.plan, num_layers);
  for (int s = 0; s < static_cast<int>(plan.stages.size()); ++s) {
    const std::string stage = "stage " + std::to_string(s);
    const std::int64_t first = schedules::weight_version(plan.schedule, s, step);
    const std::int64_t newest = schedules::update_rounds(plan.schedule, s, step);
    std::optional<std::pair<int, std::int64_t>> steps;  // (old stage, its optimizer's steps)
    for (const int l : layers_of_stage(plan, num_layers, s)) {
      const int o = owners[static_cast<std::size_t>(l)];
      const CheckpointStageEntry& entry = manifest.stages[static_cast<std::size_t>(o)];
      const std::set<std::int64_t> held = listed_versions(entry);
      const std::string layer = "layer " + std::to_string(l) + " holds " + versions_str(held);
      if (held.empty() || *held.rbegin() != newest) {
        return stage + " trains v" + std::to_string(newest) + ", " + layer;
      }
      for (std::int64_t v = first; v < newest; ++v) {
        if (held.count(v) == 0) return stage + " needs v" + std::to_string(v) + ", " + layer;
      }
      const std::int64_t o_steps = listed_steps(entry);
      if (steps && steps->second != o_steps) {
        return stage + " takes layers of stages " + std::to_string(steps->first) + " and " +
               std::to_string(o) + ", whose optimizers took " + std::to_string(steps->second) +
               " and " + std::to_string(o_steps) + " steps";
      }
      steps = std::pair{o, o_steps};
    }
  }
  return std::nullopt;
}

const CheckpointWeights& newest_weights(const StageCheckpoint& stage) {
  const CheckpointWeights* newest = nullptr;
  for (const CheckpointWeights& w : stage.weights) {
    if (w.replica == 0 && (newest == nullptr || w.version > newest->version)) newest = &w;
  }
  if (newest == nullptr) {
    throw CheckpointError(stage.file.string() + ": the stage holds no weights of replica 0");
  }
  return *newest;
}

const CheckpointWeights* weights_version(const StageCheckpoint& stage, std::int64_t version) {
  for (const CheckpointWeights& w : stage.weights) {
    if (w.replica == 0 && w.version == version) return &w;
  }
  return nullptr;
}

// Layers' parameters out of `from`, by their global names.
void add_layers(models::ParamSet& to, const models::ParamSet& from, const models::Model& model,
                const std::vector<int>& layers) {
  for (const int l : layers) {
    for (const models::ParamSpec& ps : model.layer(l).param_specs()) {
      const std::string name = model.param_name(l, ps.name);
      to.add(name, from.at(name));
    }
  }
}

// Version `version` of `layers`, each from its old stage, or nullopt when one lacks it (the
// caller's check of the versions in flight names it).
std::optional<models::ParamSet> layers_version(const std::map<int, StageCheckpoint>& old,
                                               const std::vector<int>& owners,
                                               const models::Model& model,
                                               const std::vector<int>& layers,
                                               std::int64_t version) {
  models::ParamSet out;
  for (const int l : layers) {
    const CheckpointWeights* w =
        weights_version(old.at(owners[static_cast<std::size_t>(l)]), version);
    if (w == nullptr) return std::nullopt;
    add_layers(out, w->params, model, {l});
  }
  return out;
}

// The optimizer state entries "<kind>.<parameter>" of `stage`'s replica 0 whose parameter is in
// `params`, and its step count.
std::pair<models::ParamSet, std::int64_t> optimizer_part(const StageCheckpoint& stage,
                                                         const models::ParamSet& params) {
  for (const CheckpointOptimizer& o : stage.optimizers) {
    if (o.replica != 0) continue;
    models::ParamSet part;
    for (std::int64_t i = 0; i < o.state.size(); ++i) {
      const std::string& name = o.state.name(i);
      const std::size_t dot = name.find('.');
      if (dot != std::string::npos && params.contains(std::string_view(name).substr(dot + 1))) {
        part.add(name, o.state[i]);
      }
    }
    return {std::move(part), o.steps};
  }
  return {models::ParamSet{}, 0};
}

actors::OptimizerState stage_optimizer(const std::filesystem::path& path, const Reshard& reshard,
                                       const Checkpoint& checkpoint,
                                       const std::map<int, StageCheckpoint>& old,
                                       const std::set<int>& from, const models::ParamSet& params,
                                       const schedules::Plan& plan, int stage) {
  actors::OptimizerState out;
  std::optional<std::pair<int, std::int64_t>> steps;
  for (const int o : from) {
    auto [part, o_steps] = optimizer_part(old.at(o), params);
    out.state.merge(part);
    if (steps && steps->second != o_steps && reshard.kind != ReshardKind::fresh_start) {
      throw CheckpointError(path.string() + ": stage " + std::to_string(stage) +
                            " of this plan takes layers of the checkpoint's stages " +
                            std::to_string(steps->first) + " and " + std::to_string(o) +
                            ", whose optimizers took " + std::to_string(steps->second) + " and " +
                            std::to_string(o_steps) + " steps");
    }
    steps = std::pair{o, o_steps};
  }
  // A fresh start counts the update rounds the new schedule gives the stage by this step, as
  // its weight versions do.
  out.steps = reshard.kind == ReshardKind::fresh_start
                  ? schedules::update_rounds(plan.schedule, stage, checkpoint.step)
                  : (steps ? steps->second : 0);
  return out;
}

}  // namespace

std::vector<int> stage_of_layers(const schedules::Plan& plan, int num_layers) {
  const std::vector<schedules::LayerRange> v = schedules::virtual_stage_layers(plan, num_layers);
  const int stages = static_cast<int>(plan.stages.size());
  std::vector<int> out(static_cast<std::size_t>(num_layers), -1);
  for (std::size_t i = 0; i < v.size(); ++i) {
    for (int l = v[i].begin; l < v[i].end && l < num_layers; ++l) {
      out[static_cast<std::size_t>(l)] = static_cast<int>(i) % stages;
    }
  }
  return out;
}

std::vector<int> layers_of_stage(const schedules::Plan& plan, int num_layers, int stage) {
  const std::vector<schedules::LayerRange> v = schedules::virtual_stage_layers(plan, num_layers);
  std::vector<int> out;
  for (int c = 0; c < plan.schedule.chunks; ++c) {
    const schedules::LayerRange& r =
        v[static_cast<std::size_t>(plan.schedule.virtual_stage(stage, c))];
    for (int l = r.begin; l < r.end; ++l) out.push_back(l);
  }
  return out;
}

Reshard plan_reshard(const CheckpointManifest& manifest, const schedules::Plan& plan,
                     int num_layers) {
  const schedules::Plan& old = manifest.checkpoint.plan;
  if (same_layout(old, plan, num_layers)) {
    const auto other = other_difference(old.schedule, plan.schedule);
    return {ReshardKind::same_layout, other ? "resumed under another plan (" + *other + ")" : ""};
  }
  const std::string from_to =
      "resharded from " + describe(old, num_layers) + " to " + describe(plan, num_layers) + ": ";
  const schedules::ScheduleKind was = old.schedule.kind;
  const schedules::ScheduleKind is = plan.schedule.kind;
  const std::string fresh =
      "fresh start of " + std::string(schedules::to_string(is)) + " from the newest weights";
  if (!schedules::is_asynchronous(was) && !schedules::is_asynchronous(is)) {
    return {ReshardKind::exact, from_to + "weights and optimizer state laid out anew, exact"};
  }
  if (was != is) {
    return {ReshardKind::fresh_start, from_to + "the schedule changes from " +
                                          std::string(schedules::to_string(was)) + ": " + fresh};
  }
  if (const auto why = unmappable(manifest, plan, num_layers)) {
    return {ReshardKind::fresh_start, from_to + "versions not mappable (" + *why + "): " + fresh};
  }
  return {ReshardKind::mapped, from_to + "stashed versions mapped exactly"};
}

models::ParamSet newest_layer_weights(const StageCheckpoint& stage, const models::Model& model,
                                      int layer) {
  models::ParamSet out;
  add_layers(out, newest_weights(stage).params, model, {layer});
  return out;
}

ResumedStage reshard_stage(const std::filesystem::path& path, const Reshard& reshard,
                           const Checkpoint& checkpoint, const std::map<int, StageCheckpoint>& old,
                           const models::Model& model, const models::Optimizer& optimizer,
                           const schedules::Plan& plan, int stage) {
  const int num_layers = model.num_layers();
  const std::vector<int> owners = stage_of_layers(checkpoint.plan, num_layers);
  const std::vector<int> layers = layers_of_stage(plan, num_layers, stage);
  ResumedStage out;
  std::set<int> from;
  for (const int l : layers) {
    const int o = owners[static_cast<std::size_t>(l)];
    from.insert(o);
    out.params.merge(newest_layer_weights(old.at(o), model, l));
  }
  out.optimizer = stage_optimizer(path, reshard, checkpoint, old, from, out.params, plan, stage);
  try {
    optimizer.check_state(out.optimizer.state, out.params);
  } catch (const models::OptimizerStateError& e) {
    throw CheckpointError(path.string() + ": stage " + std::to_string(stage) +
                          " of this plan: the optimizer state of its layers: " + e.what());
  }
  const std::int64_t first = schedules::weight_version(plan.schedule, stage, checkpoint.step);
  const std::int64_t newest = schedules::update_rounds(plan.schedule, stage, checkpoint.step);
  for (std::int64_t v = first; v < newest; ++v) {
    if (reshard.kind == ReshardKind::fresh_start) {
      out.older_versions.emplace(v, out.params);  // replayed on the newest weights
    } else if (auto version = layers_version(old, owners, model, layers, v)) {
      out.older_versions.emplace(v, std::move(*version));
    }
  }
  return out;
}

}  // namespace tandem::train
