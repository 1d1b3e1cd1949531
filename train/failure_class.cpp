#include "train/failure_class.hpp"

#include <stdexcept>

#include "actors/action_error.hpp"
#include "actors/data_source_error.hpp"
#include "actors/pipeline.hpp"
#include "models/data/data_file_error.hpp"
#include "models/graph_builder.hpp"
#include "models/optimizer.hpp"
#include "models/safetensors.hpp"
#include "schedules/schedule_error.hpp"
#include "train/checkpoint.hpp"
#include "train/config_error.hpp"
#include "train/diverged_error.hpp"
#include "train/job_error.hpp"
#include "train/model_file.hpp"
#include "train/process_group.hpp"
#include "transport/launch_env.hpp"
#include "transport/rendezvous.hpp"

namespace tandem::train {
namespace {

// Whether this rank's process group saw the job fail; if so, `code` and `where.rank` say how
// and which rank.
bool group_failure(const ProcessGroup* group, FailureKind& code, FailurePlace& where) {
  if (group == nullptr) return false;
  const GroupFailure f = group->first_failure();
  if (f.kind == GroupFailure::Kind::none) return false;
  code = f.kind == GroupFailure::Kind::stalled ? FailureKind::stalled : FailureKind::lost_rank;
  if (f.rank >= 0) where.rank = f.rank;
  return true;
}

// An actor's failure: a stage action's (a layer's exception, unless the job lost a rank under
// it) or the data source's.
FailureKind actor_failure(const std::exception_ptr& cause, const ProcessGroup* group,
                          FailurePlace& where) {
  FailureKind code = FailureKind::internal;
  if (group_failure(group, code, where)) return code;
  if (!cause) return FailureKind::internal;
  try {
    std::rethrow_exception(cause);
  } catch (const actors::ActionError& e) {
    where.stage = e.stage();
    where.replica = e.replica();
    if (e.minibatch()) where.minibatch = *e.minibatch();
    if (group != nullptr) where.rank = group->rank();
    return FailureKind::layer;
  } catch (const actors::DataSourceError& e) {
    where.minibatch = e.minibatch();
    return FailureKind::data;
  } catch (...) {
    return FailureKind::internal;
  }
}

FailureKind pipeline_failure(const actors::PipelineError& e, const ProcessGroup* group,
                             FailurePlace& where) {
  FailureKind code = FailureKind::internal;
  switch (e.kind()) {
    case actors::PipelineError::Kind::failed:
      return actor_failure(e.cause(), group, where);
    case actors::PipelineError::Kind::stopped:
      return group_failure(group, code, where) ? code : FailureKind::lost_rank;
    case actors::PipelineError::Kind::quiet:
      return group_failure(group, code, where) ? code : FailureKind::stalled;
    case actors::PipelineError::Kind::internal:
      return FailureKind::internal;
  }
  return FailureKind::internal;
}

FailureKind kind_of(const std::exception_ptr& failure, const ProcessGroup* group,
                    FailurePlace& where) {
  FailureKind code = FailureKind::internal;
  try {
    std::rethrow_exception(failure);
  } catch (const ConfigError& e) {
    where.key = e.key();
    return FailureKind::config;
  } catch (const JobError& e) {
    where.key = e.key();
    return FailureKind::config;
  } catch (const CheckpointError&) {
    return FailureKind::checkpoint;
  } catch (const ModelFileError&) {
    return FailureKind::checkpoint;
  } catch (const models::SafetensorsError&) {
    return FailureKind::checkpoint;
  } catch (const models::OptimizerStateError&) {
    return FailureKind::checkpoint;
  } catch (const schedules::ScheduleError&) {
    return FailureKind::plan;
  } catch (const models::GraphError&) {
    return FailureKind::config;
  } catch (const models::data::DataFileError&) {
    return FailureKind::data;
  } catch (const DivergedError& e) {
    where.minibatch = e.step();
    return FailureKind::diverged;
  } catch (const actors::PipelineError& e) {
    return pipeline_failure(e, group, where);
  } catch (const transport::LaunchEnvError&) {
    return FailureKind::config;
  } catch (const transport::RendezvousError&) {
    return group_failure(group, code, where) ? code : FailureKind::lost_rank;
  } catch (const std::invalid_argument&) {
    return FailureKind::config;
  } catch (...) {
    // A multi-process job's failure surfaces in many places (an exchange between segments, an
    // elastic job that cannot go on); the group knows what it was.
    return group_failure(group, code, where) ? code : FailureKind::internal;
  }
}

}  // namespace

FailureClass classify_failure(const std::exception_ptr& failure, const ProcessGroup* group) {
  FailureClass out;
  out.kind = kind_of(failure, group, out.where);
  return out;
}

}  // namespace tandem::train
