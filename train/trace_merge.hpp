#pragma once
// `tandem trace merge`: the pipeline traces the ranks of a multi-process job recorded (each
// holding the stages, the loader and the coordinator that ran in its process) as one trace of
// the whole job, which `tandem trace summarize` and the viewers read as they read the trace of
// the same plan run in one process.
//
// One clock: every rank's trace says where its zero lies on steady_clock and on system_clock
// (PipelineTrace::to_json, "tandem.clock"). Ranks of one boot (the same
// /proc/sys/kernel/random/boot_id) share steady_clock, so their traces align on it exactly;
// ranks on several hosts align on system_clock, as closely as the hosts' clocks agree (NTP keeps
// a LAN within a millisecond or so, PTP far closer). A barrier before the run would give a
// shared instant too, but only as precise as the barrier's own message delays, on one host as
// across hosts, and it would cost every run a round trip.
//
// The merged trace keeps each rank's events on their tracks (the track numbers are the plan's,
// one per stage replica, so a device's track has events in one rank only), one process per rank
// in the viewers (pid rank + 1), flow ids renumbered to stay distinct, and the arrows between
// actions of different ranks, which no rank could draw alone, rebuilt from the schedule's
// routing. The plan's metadata is kept once; "tandem.job" says which ranks were merged, from
// which hosts, on which clock.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tandem::train {

// Who recorded a trace in a job of several processes ("tandem.process"): what the inputs of a
// merge are checked against each other by, beside the plan.
struct TraceProcess {
  int rank = 0;
  int world_size = 1;
  std::string job;   // the same on every rank of one job, different between jobs
  std::string host;  // the rank's address, for the viewers' process names
};

// Marks `trace` (PipelineTrace::to_json) as `process`'s.
void mark_trace_process(nlohmann::json& trace, const TraceProcess& process);

struct TraceInput {
  std::string name;  // the file, or e.g. "rank 2's trace": every error about it names it
  nlohmann::json trace;
};

// One trace of the job whose ranks recorded `inputs`, one input per rank, every rank of the
// job given. Throws std::runtime_error naming the input and the field: a trace that is not a
// rank's (no "tandem.process"; a trace merged already), traces of different jobs or plans, a
// rank given twice or missing, a field of the wrong type, an event on a track the plan has not,
// a track with events in two ranks' traces.
nlohmann::json merge_traces(const std::vector<TraceInput>& inputs);

}  // namespace tandem::train
