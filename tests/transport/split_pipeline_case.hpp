#pragma once
// One pipeline run two ways, for the tests of a pipeline spread over processes: the model,
// plan and data of a case, which endpoints each of two ranks runs, and the message types the
// data plane carries. Shared by the in-process reference and by every rank.
#include <cstdint>
#include <string>

#include "../actors/pipeline_harness.hpp"
#include "actors/messages.hpp"
#include "actors/pipeline.hpp"
#include "transport/wire_message.hpp"

namespace tandem::transport::testing {

inline WireTypes pipeline_wire_types() {
  namespace act = tandem::actors;
  WireTypes t;
  t.add<act::ForwardTensor>()
      .add<act::BackwardTensor>()
      .add<act::StartRun>()
      .add<act::OpDone>()
      .add<act::SyncDone>()
      .add<act::Credit>()
      .add<act::LossReport>()
      .add<act::StopRequest>()
      .add<act::StopAt>()
      .add<act::StageFinished>();
  return t;
}

// "mlp_1f1b", "mlp_pipedream" or "gpt_1f1b": 4 stages, minibatches of 8.
inline models::Model split_case_model(const std::string& name) {
  return name.rfind("gpt", 0) == 0 ? actors::testing::tiny_gpt() : actors::testing::tiny_mlp();
}

inline actors::PipelineSpec split_case_spec(const std::string& name, const models::Model& model) {
  using namespace actors::testing;
  const bool async = name.find("pipedream") != std::string::npos;
  schedules::ScheduleParams p;
  p.kind = async ? schedules::ScheduleKind::pipedream : schedules::ScheduleKind::one_f_one_b;
  p.stages = 4;
  p.replicas = {1, 1, 1, 1};
  p.slices = async ? 1 : 4;
  p.minibatch_size = 8;
  p.minibatches = async ? 9 : 3;
  actors::PipelineSpec spec;
  spec.model = &model;
  spec.plan = even_plan(model, p);
  spec.optimizer = sgd_momentum();
  spec.seed = 11;
  spec.data = [&model](std::int64_t b) { return make_minibatch(model, 8, b); };
  spec.cpu_threads_per_replica = 1;
  return spec;
}

// Rank 0 runs stages 0-1, the loader (endpoint 4) and the coordinator (5); rank 1 stages 2-3.
inline int split_rank_of(Endpoint e) {
  return e == 2 || e == 3 ? 1 : 0;
}
inline constexpr int kSplitEndpoints = 6;

}  // namespace tandem::transport::testing
