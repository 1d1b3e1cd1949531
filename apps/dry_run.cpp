#include "apps/dry_run.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "models/model.hpp"
#include "planner/plan_output.hpp"
#include "schedules/schedule.hpp"
#include "schedules/schedule_kind.hpp"
#include "schedules/simulator.hpp"
#include "train/config_limits.hpp"
#include "train/job_plan.hpp"

namespace tandem::apps {
namespace {

namespace ts = tandem::schedules;

// The pipeline a run without a pipeline section is: one stage on one cpu.
train::PipelineLayout effective_pipeline(const train::Config& config) {
  if (config.pipeline) return *config.pipeline;
  train::PipelineLayout p;
  p.schedule = "1f1b";
  p.stages.push_back(train::StageSpec{});
  return p;
}

double optimizer_floats(const models::OptimizerSpec& o) {
  if (o.kind == "adamw") return 2;
  return o.momentum > 0 ? 1 : 0;
}

// Per-sample figures of layers [begin, end).
struct StageFigures {
  double forward_ms = 0, backward_input_ms = 0, backward_weight_ms = 0;
  double parameters = 0;
  double activation_floats = 0;  // per sample, kept from F to B
  double output_floats = 0;      // per sample, sent to the next stage
};

StageFigures figures(const models::Model& model, int begin, int end) {
  StageFigures f;
  const std::vector<Shape> outputs = model.activation_shapes(1);
  const std::vector<Shape> inputs = model.input_shapes(1);
  const double ms_per_flop = 1e3 / kDryRunFlopsPerSecond;
  for (int l = begin; l < end; ++l) {
    const models::LayerCost c = model.layer(l).cost(inputs[static_cast<size_t>(l)]);
    f.forward_ms += c.forward_flops * ms_per_flop;
    f.backward_input_ms += c.backward_input_flops * ms_per_flop;
    f.backward_weight_ms += c.backward_weight_flops * ms_per_flop;
    for (const auto& p : model.layer(l).param_specs()) {
      double n = 1;
      for (const auto d : p.shape) n *= static_cast<double>(d);
      f.parameters += n;
    }
    double n = 1;
    for (const auto d : outputs[static_cast<size_t>(l)]) n *= static_cast<double>(d);
    f.activation_floats += n;
    if (l == end - 1) f.output_floats = model.cut_elements(1)[static_cast<size_t>(l)];
  }
  return f;
}

std::string range_text(const ts::LayerRange& r) {
  return r.end - r.begin == 1 ? std::to_string(r.begin)
                              : std::to_string(r.begin) + "-" + std::to_string(r.end - 1);
}

std::string devices_text(const train::StageSpec& st) {
  if (st.devices.empty()) return st.device.str();
  std::string out;
  for (const Device& d : st.devices) {
    if (!out.empty()) out += ',';
    out += d.str();
  }
  return out;
}

}  // namespace

DryRunPrediction predict(const train::Config& config) {
  const models::Model model = train::config_model(config);
  const train::PipelineLayout pipeline = effective_pipeline(config);
  const ts::ScheduleKind kind = ts::parse_schedule_kind(pipeline.schedule);
  // Flush schedules: one minibatch is one step. The others never flush: time enough
  // minibatches to fill the pipeline and divide.
  const auto stage_count = static_cast<int64_t>(pipeline.stages.size());
  const int64_t minibatches = ts::is_asynchronous(kind) ? std::max<int64_t>(8, 4 * stage_count) : 1;
  const ts::Plan plan =
      train::pipeline_plan(pipeline, config.train.minibatch, model.num_layers(), minibatches);
  const ts::ActionList list = ts::Schedule(plan.schedule).materialize();

  // One cost entry per virtual stage, with the layers the runtime gives it: a chunked plan
  // splits the model evenly (ts::virtual_stage_layers), whatever its stages' layer ranges say.
  DryRunPrediction out;
  out.stage_layers.resize(plan.stages.size());
  ts::SimulationCosts costs;
  std::vector<double> extra_bytes(plan.stages.size(), 0.0);  // gradients and optimizer state
  const double state = 1 + optimizer_floats(config.train.optimizer);
  const std::vector<ts::LayerRange> vstages =
      ts::virtual_stage_layers(plan, static_cast<int>(model.num_layers()));
  for (std::size_t v = 0; v < vstages.size(); ++v) {
    const StageFigures f = figures(model, vstages[v].begin, vstages[v].end);
    ts::StageCosts c;
    c.forward = ts::Cost::affine(0, f.forward_ms);
    c.backward = ts::Cost::affine(0, f.backward_input_ms);
    c.weight = ts::Cost::affine(0, f.backward_weight_ms);
    c.weight_bytes = 4 * f.parameters;
    c.activation_bytes = 4 * f.activation_floats;
    c.output_bytes = 4 * f.output_floats;
    costs.stages.push_back(c);
    const auto stage =
        static_cast<std::size_t>(plan.schedule.stage_of_virtual(static_cast<int>(v)));
    extra_bytes.at(stage) += 4 * f.parameters * state;
    std::string& text = out.stage_layers.at(stage);
    if (!text.empty()) text += ',';
    text += range_text(vstages[v]);
  }
  if (!costs.stages.empty()) {
    for (size_t s = 1; s < costs.stages.size(); ++s) {
      costs.stages[s].input_bytes = costs.stages[s - 1].output_bytes;
    }
  }
  const ts::SimulationResult r = ts::simulate(list, costs);
  out.step_ms = r.makespan / static_cast<double>(minibatches);
  out.bubble = r.bubble;
  out.busy_ms = r.busy;
  out.memory_bytes = r.memory;
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    for (size_t k = 0; k < plan.stages[s].replicas.size(); ++k) {
      const auto d =
          static_cast<size_t>(plan.schedule.device_of(static_cast<int>(s), static_cast<int>(k)));
      if (d < out.memory_bytes.size()) out.memory_bytes[d] += extra_bytes[s];
    }
  }
  return out;
}

void dry_run(const train::Config& config, std::ostream& out) {
  const models::Model model = train::config_model(config);
  const train::PipelineLayout pipeline = effective_pipeline(config);
  const DryRunPrediction p = predict(config);
  out << fmt::format("dry run: {} is valid; nothing was trained\n", config.file);
  out << fmt::format("model: {} ({} layers), minibatch {}, {} steps\n", config.model.describe(),
                     model.num_layers(), config.train.minibatch, config.train.steps);
  std::string slices;
  if (!pipeline.compositions.empty()) {
    slices = "unequal slices per stage";
  } else if (!pipeline.slices.empty()) {
    slices = std::to_string(pipeline.slices.front()) + " slices";
  } else {
    slices = "1 slice";
  }
  if (config.schedule_ranking) {
    out << "schedule: auto ranked every schedule (simulator on the profile; memory: weights x "
           "versions + kept activations):\n"
        << planner::format_ranking(*config.schedule_ranking);
    const planner::RankedSchedule* pick = config.schedule_ranking->pick();
    out << fmt::format("schedule: auto picked {}: {:.4g} ms per minibatch predicted\n",
                       pick->name(), pick->step_ms);
    for (const std::string& note : config.schedule_ranking->notes) {
      out << "note: " << note << "\n";
    }
  }
  out << fmt::format("plan: schedule {}, {}{}, {} stage{}\n", pipeline.schedule, slices,
                     pipeline.chunks > 1 ? fmt::format(", {} chunks", pipeline.chunks) : "",
                     pipeline.stages.size(), pipeline.stages.size() == 1 ? "" : "s");
  out << fmt::format("{:<6} {:<10} {:<9} {:<16} {:>12} {:>14}\n", "stage", "layers", "replicas",
                     "devices", "busy ms", "memory/device");
  // Under schedule: auto the figures are the pick's, from the costs it was ranked on.
  const planner::RankedSchedule* pick =
      config.schedule_ranking ? config.schedule_ranking->pick() : nullptr;
  const std::vector<planner::PlannedStage>* ranked =
      pick != nullptr && pick->planned.stages.size() == pipeline.stages.size()
          ? &pick->planned.stages
          : nullptr;
  size_t device = 0;
  for (size_t s = 0; s < pipeline.stages.size(); ++s) {
    const train::StageSpec& st = pipeline.stages[s];
    // Replicas of a stage are alike: show the first's device figures.
    double busy = device < p.busy_ms.size() ? p.busy_ms[device] : 0.0;
    double memory = device < p.memory_bytes.size() ? p.memory_bytes[device] : 0.0;
    if (ranked != nullptr) {
      busy = (*ranked)[s].compute_ms;
      memory = (*ranked)[s].memory_bytes;
    }
    out << fmt::format("{:<6} {:<10} {:<9} {:<16} {:>12.4g} {:>14}\n", s, p.stage_layers.at(s),
                       st.replicas, devices_text(st), busy, train::human_bytes(memory));
    device += static_cast<size_t>(st.replicas);
  }
  if (pick != nullptr) {
    // One prediction for the run, the ranking's (on the profile when there is one), not a
    // second one from FLOP counts.
    out << fmt::format(
        "predicted step time: {:.4g} ms per minibatch, bubble {:.1f}% (simulator, as ranked "
        "above{})\n",
        pick->step_ms, 100 * pick->bubble,
        ranked != nullptr ? ""
                          : fmt::format("; the table's busy times from FLOP counts at {:.0f} "
                                        "GFLOP/s per device",
                                        kDryRunFlopsPerSecond / 1e9));
    return;
  }
  out << fmt::format(
      "predicted step time: {:.4g} ms per minibatch, bubble {:.1f}% (simulator; durations from "
      "FLOP counts at {:.0f} GFLOP/s per device)\n",
      p.step_ms, 100 * p.bubble, kDryRunFlopsPerSecond / 1e9);
}

}  // namespace tandem::apps
