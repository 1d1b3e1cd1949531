#include "train/sim_run.hpp"

#include <fmt/format.h>

#include <memory>
#include <stdexcept>
#include <utility>

#include "actors/dataset_source.hpp"
#include "actors/stage_edges.hpp"
#include "planner/layer_op_times.hpp"
#include "train/config_flop_profile.hpp"
#include "train/process_group.hpp"
#include "train/process_placement.hpp"
#include "train/segment.hpp"
#include "train/train_data.hpp"

namespace tandem::train {

namespace ts = tandem::schedules;

models::SimCosts sim_costs_from_profile(const planner::Profile& profile, double slice_samples,
                                        double optimizer_step_ms) {
  if (!(slice_samples > 0) || profile.minibatch <= 0) {
    throw std::invalid_argument(fmt::format(
        "sim_costs_from_profile: slice of {} samples, profile minibatch {}: both must be positive",
        slice_samples, profile.minibatch));
  }
  const double scale = slice_samples / profile.minibatch;
  models::SimCosts c;
  const auto on_slice = [scale](const planner::OpTime& op) { return op.fixed + op.scaled * scale; };
  for (const planner::LayerProfile& l : profile.layers) {
    const planner::LayerOpTimes t = planner::layer_op_times(l);
    c.forward_ms.push_back(on_slice(t.forward));
    c.backward_input_ms.push_back(on_slice(t.backward_input));
    c.backward_weight_ms.push_back(on_slice(t.backward_weight));
    c.step_ms.push_back(l.step_ms);
  }
  c.optimizer_step_ms = optimizer_step_ms;
  return c;
}

models::SimCosts sim_costs_from_flops(const models::Model& model, double slice_samples) {
  const std::vector<Shape> inputs = model.input_shapes(1);
  const double ms = slice_samples * 1e3 / kNominalFlopsPerSecond;
  models::SimCosts c;
  for (int l = 0; l < model.num_layers(); ++l) {
    const models::LayerCost cost = model.layer(l).cost(inputs[static_cast<std::size_t>(l)]);
    c.forward_ms.push_back(cost.forward_flops * ms);
    c.backward_input_ms.push_back(cost.backward_input_flops * ms);
    c.backward_weight_ms.push_back(cost.backward_weight_flops * ms);
  }
  return c;
}

ts::SimulationCosts sim_simulation_costs(const models::SimCosts& sim,
                                         const std::vector<ts::LayerRange>& vstages) {
  ts::SimulationCosts c;
  for (const auto& r : vstages) {
    double f = 0, b = 0, w = 0, step = 0;
    for (int i = r.begin; i < r.end; ++i) {
      f += sim.forward(i);
      if (i > 0) b += sim.backward_input(i);
      w += sim.backward_weight(i);
      step += sim.layer_step(i);
    }
    c.stages.push_back({.forward = f, .backward = b, .weight = w, .step = step});
  }
  c.step = sim.optimizer_step_ms;
  c.sync = 0;
  c.latency = 0;
  return c;
}

std::vector<ts::EdgeBytes> sim_edge_bytes(const models::Model& model,
                                          const std::vector<ts::LayerRange>& vstages, bool relay,
                                          double wire_bytes) {
  const std::vector<Shape> outputs = model.activation_shapes(1);
  std::vector<ts::EdgeBytes> out;
  for (const ts::TensorEdge& e : actors::tensor_edges(model, vstages, relay)) {
    const Shape& shape = e.item == models::Model::kModelInput
                             ? model.input_shape(1)
                             : outputs.at(static_cast<std::size_t>(e.item));
    double elements = 1;
    for (const std::int64_t d : shape) elements *= static_cast<double>(d);
    out.push_back({e, wire_bytes * elements});
  }
  return out;
}

actors::PipelineSpec sim_pipeline_spec(const models::Model& model, const ts::Plan& plan,
                                       const models::SimCosts& sim, actors::DataSource data) {
  actors::PipelineSpec spec;
  spec.model = &model;
  spec.plan = plan;
  spec.sim_costs = sim;
  spec.data = std::move(data);
  return spec;
}

SimRun run_sim(const Config& config, const models::Model& model, const ts::Plan& plan,
               const models::SimCosts& sim, ProcessGroup* group) {
  const train::TrainData data = train::load_train_data(config, model);
  actors::PipelineSpec spec =
      sim_pipeline_spec(model, plan, sim,
                        actors::dataset_source(data.train, model, config.train.minibatch,
                                               config.train.seed, Device::sim()));
  spec.relay_skips = config.pipeline && config.pipeline->relay_skips;
  spec.wire_dtype = train::wire_dtype(config);
  std::unique_ptr<train::ProcessPlacement> placement;
  if (group != nullptr) {
    placement = std::make_unique<train::ProcessPlacement>(config, plan, group->world_size());
  }
  // Rank 0 reports every replica: the others hand it their statistics.
  const actors::PipelineResult result =
      train::run_segment(
          std::move(spec),
          {.group = group, .placement = placement.get(), .segment = 0, .gather_state = false})
          .pipeline;
  SimRun out;
  out.minibatches = result.minibatches;
  out.seconds = result.seconds;
  out.stages = result.stages;
  return out;
}

}  // namespace tandem::train
