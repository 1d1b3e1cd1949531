#pragma once
// Where `tandem train --trace FILE` puts the trace of its pipeline run. A single process writes
// its own. In a multi-process job every rank hands its trace to rank 0 through the process
// group (the control plane's store, whose every connection proved it belongs to the job), and
// rank 0 writes one trace of the whole job at FILE (train/trace_merge.hpp): the ranks need no
// file system in common, and no rank leaves a file of its own behind.
#include <filesystem>
#include <string>

#include "train/pipeline_trace.hpp"
#include "train/process_group.hpp"
#include "transport/job_proof.hpp"

namespace tandem::train {

// Every rank of `group` (null: this process alone) calls it at the same point of the run, as
// it calls the group's other exchanges. Throws std::runtime_error naming the file, or the rank
// whose trace could not be had.
void write_job_trace(const PipelineTrace& trace, const std::filesystem::path& path,
                     ProcessGroup* group);

// The job's name in its ranks' traces: a digest of the nonce rank 0 drew for the job, the same
// on every rank and different for every job, which says nothing of the nonce itself.
std::string trace_job_id(const transport::JobNonce& nonce);

}  // namespace tandem::train
