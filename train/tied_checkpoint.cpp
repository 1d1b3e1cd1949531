#include "train/tied_checkpoint.hpp"

#include <set>
#include <string>
#include <vector>

#include "schedules/pipeline_rules.hpp"
#include "schedules/weight_versions.hpp"
#include "train/reshard.hpp"

namespace tandem::train {
namespace {

// "exp_avg.0.tokens" -> {"exp_avg", "0.tokens"}: optimizer state kinds hold no '.'.
std::pair<std::string, std::string> split_state_name(const std::string& entry) {
  const std::size_t dot = entry.find('.');
  if (dot == std::string::npos) return {entry, ""};
  return {entry.substr(0, dot), entry.substr(dot + 1)};
}

// The follower copies of the model's ties with the leader each takes its values from.
struct Follower {
  const models::TieCopy* copy = nullptr;
  const models::TieCopy* leader = nullptr;
};

std::vector<Follower> followers(const models::Model& model) {
  std::vector<Follower> out;
  for (const models::TieGroup& g : model.ties()) {
    for (std::size_t i = 1; i < g.copies.size(); ++i) out.push_back({&g.copies[i], &g.copies[0]});
  }
  return out;
}

models::ParamSet without(const models::ParamSet& params, const std::set<std::string>& names) {
  models::ParamSet out;
  for (std::int64_t i = 0; i < params.size(); ++i) {
    if (names.count(params.name(i)) == 0) out.add(params.name(i), params[i]);
  }
  return out;
}

// `params` in the order of `order` (the stage's parameters in model order), then anything else
// it holds (which the checks that follow refuse, naming it).
models::ParamSet in_order(const models::ParamSet& params, const std::vector<std::string>& order) {
  models::ParamSet out;
  for (const std::string& name : order) {
    if (params.contains(name)) out.add(name, params.at(name));
  }
  for (std::int64_t i = 0; i < params.size(); ++i) {
    if (!out.contains(params.name(i))) out.add(params.name(i), params[i]);
  }
  return out;
}

const CheckpointWeights* find_version(const StageCheckpoint& stage, int replica,
                                      std::int64_t version, const std::string& name) {
  const CheckpointWeights* fallback = nullptr;
  for (const CheckpointWeights& w : stage.weights) {
    if (w.version != version || !w.params.contains(name)) continue;
    if (w.replica == replica) return &w;
    if (w.replica == 0) fallback = &w;
  }
  return fallback;
}

const CheckpointOptimizer* find_optimizer(const StageCheckpoint& stage, int replica) {
  const CheckpointOptimizer* fallback = nullptr;
  for (const CheckpointOptimizer& o : stage.optimizers) {
    if (o.replica == replica) return &o;
    if (o.replica == 0) fallback = &o;
  }
  return fallback;
}

std::string file_of(const StageCheckpoint& stage, int index) {
  return stage.file.empty() ? "stage " + std::to_string(index) : stage.file.string();
}

}  // namespace

void leave_out_tied_copies(StageCheckpoint& contents, const models::Model& model,
                           const schedules::Plan& plan, int stage, std::int64_t step) {
  const std::vector<Follower> tied = followers(model);
  if (tied.empty()) return;
  const std::vector<int> owner = stage_of_layers(plan, model.num_layers());
  const schedules::ScheduleParams& sp = plan.schedule;
  // Whether the leader's stage stores its weights of version `version` (read back for a
  // follower of replica `replica`: that replica's or replica 0's).
  const auto leader_has = [&](const Follower& f, int replica, std::int64_t version) {
    const int t = owner[static_cast<std::size_t>(f.leader->layer)];
    if (t == stage) return find_version(contents, replica, version, f.leader->name) != nullptr;
    return version >= schedules::weight_version(sp, t, step) &&
           version <= schedules::update_rounds(sp, t, step);
  };
  for (CheckpointWeights& w : contents.weights) {
    std::set<std::string> out;
    for (const Follower& f : tied) {
      if (w.params.contains(f.copy->name) && leader_has(f, w.replica, w.version)) {
        out.insert(f.copy->name);
      }
    }
    if (!out.empty()) w.params = without(w.params, out);
  }
  for (CheckpointOptimizer& o : contents.optimizers) {
    std::set<std::string> out;
    for (std::int64_t i = 0; i < o.state.size(); ++i) {
      const auto [kind, param] = split_state_name(o.state.name(i));
      for (const Follower& f : tied) {
        if (param != f.copy->name) continue;
        const int t = owner[static_cast<std::size_t>(f.leader->layer)];
        const bool same = t == stage ? o.state.contains(kind + "." + f.leader->name)
                                     : schedules::update_rounds(sp, t, step) == o.steps;
        if (same) out.insert(o.state.name(i));
      }
    }
    if (!out.empty()) o.state = without(o.state, out);
  }
}

void fill_tied_copies(std::map<int, StageCheckpoint>& stages, const models::Model& model,
                      const schedules::Plan& plan,
                      const std::function<StageCheckpoint(int)>& read) {
  const std::vector<Follower> tied = followers(model);
  if (tied.empty()) return;
  const int n = model.num_layers();
  const std::vector<int> owner = stage_of_layers(plan, n);
  std::map<int, StageCheckpoint> others;  // leaders' stages read for this
  const auto stage_at = [&](int t) -> const StageCheckpoint& {
    if (const auto it = stages.find(t); it != stages.end()) return it->second;
    if (const auto it = others.find(t); it != others.end()) return it->second;
    return others.emplace(t, read(t)).first->second;
  };
  for (auto& [s, stage] : stages) {
    bool filled = false;
    for (const Follower& f : tied) {
      if (owner[static_cast<std::size_t>(f.copy->layer)] != s) continue;
      const int t = owner[static_cast<std::size_t>(f.leader->layer)];
      const StageCheckpoint& lead = stage_at(t);
      for (CheckpointWeights& w : stage.weights) {
        if (w.params.contains(f.copy->name)) continue;
        const CheckpointWeights* from = find_version(lead, w.replica, w.version, f.leader->name);
        if (from == nullptr) {
          throw CheckpointError(file_of(stage, s) + ": tensor 'weights/r" +
                                std::to_string(w.replica) + "/v" + std::to_string(w.version) + "/" +
                                f.copy->name + "' is missing, and " + file_of(lead, t) +
                                " holds no version " + std::to_string(w.version) +
                                " of the parameter it is tied to, '" + f.leader->name + "'");
        }
        const Tensor value = from->params.at(f.leader->name);
        // Checked here, where the tensor's own file can be named: the stage checks that follow
        // would name the copy's file.
        const Shape want = model.layer(f.copy->layer).param_specs()[f.copy->index].shape;
        if (value.shape() != want || value.dtype() != DType::f32) {
          throw CheckpointError(file_of(lead, t) + ": tensor 'weights/r" +
                                std::to_string(from->replica) + "/v" + std::to_string(w.version) +
                                "/" + f.leader->name +
                                "': " + std::string(dtype_name(value.dtype())) +
                                shape_str(value.shape()) + ", but the model's parameter is " +
                                std::string(dtype_name(DType::f32)) + shape_str(want));
        }
        w.params.add(f.copy->name, value.clone());
        filled = true;
      }
      for (CheckpointOptimizer& o : stage.optimizers) {
        const CheckpointOptimizer* from = find_optimizer(lead, o.replica);
        if (from == nullptr) continue;  // a stage without optimizer state: nothing to copy
        for (std::int64_t i = 0; i < from->state.size(); ++i) {
          const auto [kind, param] = split_state_name(from->state.name(i));
          const std::string entry = kind + "." + f.copy->name;
          if (param != f.leader->name || o.state.contains(entry)) continue;
          if (from->steps != o.steps) {
            throw CheckpointError(file_of(stage, s) + ": optimizer state '" + entry +
                                  "' is missing, and the optimizer of " + file_of(lead, t) +
                                  " holding '" + from->state.name(i) + "' took " +
                                  std::to_string(from->steps) + " steps, not " +
                                  std::to_string(o.steps));
          }
          const Tensor value = from->state[i];
          o.state.add(entry, value.clone());
        }
      }
    }
    if (!filled) continue;
    std::vector<std::string> order;
    for (const int l : layers_of_stage(plan, n, s)) {
      for (const models::ParamSpec& ps : model.layer(l).param_specs()) {
        order.push_back(model.param_name(l, ps.name));
      }
    }
    for (CheckpointWeights& w : stage.weights) w.params = in_order(w.params, order);
  }
}

}  // namespace tandem::train
