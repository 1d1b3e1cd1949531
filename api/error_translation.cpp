#include "api/error_translation.hpp"

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

namespace tandem::api {
namespace {

// Whether this rank's process group saw the job fail; if so, `code` and `where.rank` say how
// and which rank.
bool group_failure(const train::ProcessGroup* group, ErrorCode& code, ErrorWhere& where) {
  if (group == nullptr) return false;
  const train::GroupFailure f = group->first_failure();
  if (f.kind == train::GroupFailure::Kind::none) return false;
  code = f.kind == train::GroupFailure::Kind::stalled ? ErrorCode::stalled : ErrorCode::lost_rank;
  if (f.rank >= 0) where.rank = f.rank;
  return true;
}

// An actor's failure: a stage action's (a layer's exception, unless the job lost a rank under
// it) or the data source's.
ErrorCode actor_failure(const std::exception_ptr& cause, const train::ProcessGroup* group,
                        ErrorWhere& where) {
  ErrorCode code = ErrorCode::internal;
  if (group_failure(group, code, where)) return code;
  if (!cause) return ErrorCode::internal;
  try {
    std::rethrow_exception(cause);
  } catch (const actors::ActionError& e) {
    where.stage = e.stage();
    where.replica = e.replica();
    if (e.minibatch()) where.minibatch = *e.minibatch();
    if (group != nullptr) where.rank = group->rank();
    return ErrorCode::layer;
  } catch (const actors::DataSourceError& e) {
    where.minibatch = e.minibatch();
    return ErrorCode::data;
  } catch (...) {
    return ErrorCode::internal;
  }
}

ErrorCode pipeline_failure(const actors::PipelineError& e, const train::ProcessGroup* group,
                           ErrorWhere& where) {
  ErrorCode code = ErrorCode::internal;
  switch (e.kind()) {
    case actors::PipelineError::Kind::failed:
      return actor_failure(e.cause(), group, where);
    case actors::PipelineError::Kind::stopped:
      return group_failure(group, code, where) ? code : ErrorCode::lost_rank;
    case actors::PipelineError::Kind::quiet:
      return group_failure(group, code, where) ? code : ErrorCode::stalled;
    case actors::PipelineError::Kind::internal:
      return ErrorCode::internal;
  }
  return ErrorCode::internal;
}

// The code of an exception the library threw, and where it sits.
ErrorCode classify(const std::exception_ptr& failure, const train::ProcessGroup* group,
                   ErrorWhere& where) {
  ErrorCode code = ErrorCode::internal;
  try {
    std::rethrow_exception(failure);
  } catch (const train::ConfigError& e) {
    where.key = e.key();
    return ErrorCode::config;
  } catch (const train::JobError& e) {
    where.key = e.key();
    return ErrorCode::config;
  } catch (const train::CheckpointError&) {
    return ErrorCode::checkpoint;
  } catch (const train::ModelFileError&) {
    return ErrorCode::checkpoint;
  } catch (const models::SafetensorsError&) {
    return ErrorCode::checkpoint;
  } catch (const models::OptimizerStateError&) {
    return ErrorCode::checkpoint;
  } catch (const schedules::ScheduleError&) {
    return ErrorCode::plan;
  } catch (const models::GraphError&) {
    return ErrorCode::config;
  } catch (const models::data::DataFileError&) {
    return ErrorCode::data;
  } catch (const train::DivergedError& e) {
    where.minibatch = e.step();
    return ErrorCode::diverged;
  } catch (const actors::PipelineError& e) {
    return pipeline_failure(e, group, where);
  } catch (const transport::LaunchEnvError&) {
    return ErrorCode::config;
  } catch (const transport::RendezvousError&) {
    return group_failure(group, code, where) ? code : ErrorCode::lost_rank;
  } catch (const std::invalid_argument&) {
    return ErrorCode::config;
  } catch (...) {
    // A multi-process job's failure surfaces in many places (an exchange between segments, an
    // elastic job that cannot go on); the group knows what it was.
    return group_failure(group, code, where) ? code : ErrorCode::internal;
  }
}

std::string message_of(const std::exception_ptr& failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

}  // namespace

Error to_error(std::exception_ptr failure, const train::ProcessGroup* group,
               const std::string& prefix) {
  try {
    std::rethrow_exception(failure);
  } catch (const Error& e) {
    if (prefix.empty()) return e;
    return Error(e.code(), prefix + e.what(), e.where());
  } catch (...) {
  }
  ErrorWhere where;
  const ErrorCode code = classify(failure, group, where);
  return Error(code, prefix + message_of(failure), std::move(where));
}

Error option_error(const std::string& key, const std::string& detail) {
  ErrorWhere where;
  where.key = key;
  return Error(ErrorCode::config, key + ": " + detail, std::move(where));
}

Error plan_error(const std::string& key, const std::string& detail) {
  ErrorWhere where;
  where.key = key;
  return Error(ErrorCode::plan, key + ": " + detail, std::move(where));
}

}  // namespace tandem::api
