#include "actors/pipeline_wire_types.hpp"

#include "actors/messages.hpp"

namespace tandem::actors {

transport::WireTypes pipeline_wire_types() {
  transport::WireTypes t;
  t.add<ForwardTensor>()
      .add<BackwardTensor>()
      .add<StartRun>()
      .add<OpDone>()
      .add<SyncDone>()
      .add<Credit>()
      .add<LossReport>()
      .add<GradNormReport>()
      .add<OutputTensor>()
      .add<StopRequest>()
      .add<StopAt>()
      .add<StageFinished>();
  return t;
}

}  // namespace tandem::actors
