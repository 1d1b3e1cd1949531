#pragma once
// One pipeline run two ways, for the tests of a pipeline spread over processes: the model,
// plan and data of a named case, which endpoints each of N ranks runs, and the message types
// the data plane carries. Shared by the in-process reference and by every rank.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "../actors/pipeline_harness.hpp"
#include "actors/messages.hpp"
#include "actors/pipeline.hpp"
#include "actors/pipeline_wire_types.hpp"
#include "test_credentials.hpp"
#include "transport/wire_message.hpp"

namespace tandem::transport::testing {

inline WireTypes pipeline_wire_types() {
  return actors::pipeline_wire_types();
}

struct SplitCase {
  const char* name;
  const char* model;  // mlp | gpt
  schedules::ScheduleKind kind;
  int stages;
  std::int64_t minibatches;
};

// Minibatches of 8 samples, one replica per stage; 1F1B cuts each into 4 slices, PipeDream
// runs whole ones. "*_long" runs so many minibatches that it is killed long before its end
// (the lost-peer tests); the others take well under a second.
inline SplitCase split_case(const std::string& name) {
  using schedules::ScheduleKind;
  static const SplitCase cases[] = {
      {"mlp_1f1b", "mlp", ScheduleKind::one_f_one_b, 4, 3},
      {"mlp_pipedream", "mlp", ScheduleKind::pipedream, 4, 9},
      {"gpt_1f1b", "gpt", ScheduleKind::one_f_one_b, 4, 3},
      {"gpt_pipedream", "gpt", ScheduleKind::pipedream, 4, 9},
      {"mlp3_1f1b", "mlp", ScheduleKind::one_f_one_b, 3, 3},
      {"mlp3_pipedream", "mlp", ScheduleKind::pipedream, 3, 9},
      {"mlp3_long", "mlp", ScheduleKind::one_f_one_b, 3, 16000},
  };
  for (const SplitCase& c : cases) {
    if (name == c.name) return c;
  }
  throw std::invalid_argument("no split pipeline case named '" + name + "'");
}

inline models::Model split_case_model(const std::string& name) {
  return std::string(split_case(name).model) == "gpt" ? actors::testing::tiny_gpt()
                                                      : actors::testing::tiny_mlp();
}

inline actors::PipelineSpec split_case_spec(const std::string& name, const models::Model& model) {
  using namespace actors::testing;
  const SplitCase c = split_case(name);
  const bool async = c.kind == schedules::ScheduleKind::pipedream;
  schedules::ScheduleParams p;
  p.kind = c.kind;
  p.stages = c.stages;
  p.replicas.assign(static_cast<std::size_t>(c.stages), 1);
  p.slices = async ? 1 : 4;
  p.minibatch_size = 8;
  p.minibatches = c.minibatches;
  actors::PipelineSpec spec;
  spec.model = &model;
  spec.plan = even_plan(model, p);
  spec.optimizer = sgd_momentum();
  spec.seed = 11;
  spec.data = [&model](std::int64_t b) { return make_minibatch(model, 8, b); };
  spec.cpu_threads_per_replica = 1;
  return spec;
}

// Endpoints of a case: stage s is endpoint s, the loader `stages`, the coordinator `stages + 1`.
inline int split_endpoints(const std::string& name) {
  return split_case(name).stages + 2;
}

// Which of `world` ranks runs endpoint `e` of a case with `stages` stages: consecutive stages
// split as evenly as possible (4 stages on 2 ranks: 0-1 and 2-3), the loader and the
// coordinator in rank 0.
inline int split_rank_of(Endpoint e, int stages, int world) {
  if (e >= stages) return 0;
  return e * world / stages;
}

}  // namespace tandem::transport::testing
