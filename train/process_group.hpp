#pragma once
// This process's part in a multi-process training job: who it is (transport::LaunchEnv), the
// control plane it joined (transport::Rendezvous), and, for each pipeline the trainer runs
// (one per segment between checkpoints), the pieces that spread it over the processes: which
// endpoints run here, the data plane that carries the others' messages, and the collectives
// of stages whose replicas run in several processes.
//
// Failures never hang: a rank the control plane loses (killed, its host gone) or a data-plane
// connection that fails ends the pipeline in progress with a PipelineError naming the rank and
// its host, and every later exchange throws the same (transport::RendezvousError).
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "actors/pipeline.hpp"
#include "train/group_failure.hpp"
#include "train/process_placement.hpp"
#include "transport/launch_env.hpp"
#include "transport/rendezvous.hpp"
#include "transport/tcp_channel.hpp"

namespace tandem::train {

struct ProcessGroupOptions {
  transport::LaunchEnv env;
  // The address the other processes reach this one at (its data plane listens there). Empty:
  // the local address of the route to the master (TANDEM_HOST overrides it in `tandem train`).
  std::string host;
  // The data plane: "tcp" or "ucx" ("auto": tcp).
  std::string transport = "auto";
  // Replicas' reductions across processes: "gloo", "nccl" or "auto" (nccl when every replica of
  // every replicated stage is on a cuda device and the build has NCCL).
  std::string collectives = "auto";
  // TCP streams per peer on the tcp data plane (TcpChannelOptions::lanes).
  int tcp_lanes = transport::kDefaultTcpLanes;
  std::chrono::milliseconds join_timeout{std::chrono::seconds(120)};
  // Silence on the control plane longer than this declares a rank lost.
  std::chrono::milliseconds heartbeat_timeout{std::chrono::seconds(3)};
  // A rank holding work without completing any for this long ends the job, named with its
  // stage and what it waits for (transport::RendezvousOptions::stall_timeout).
  std::chrono::milliseconds stall_timeout{std::chrono::minutes(5)};
  // Bounds each exchange between segments (a rank still training its part may take long).
  std::chrono::milliseconds exchange_timeout{std::chrono::minutes(30)};
};

class ProcessGroup {
 public:
  // Joins the job (rank 0 waits for every other rank); throws transport::RendezvousError
  // naming what failed (a refused token, a master that never answered).
  explicit ProcessGroup(ProcessGroupOptions options);
  // Without shutdown() first the others see this rank as lost (what a crash looks like).
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const;
  int world_size() const;
  const std::string& host() const;
  // What it was made with (the launch environment and host filled in).
  const ProcessGroupOptions& options() const;
  // "rank 2 (10.0.0.3)".
  std::string describe(int rank) const;
  transport::Rendezvous& rendezvous();

  // Before constructing segment `segment`'s Pipeline: sets spec.hosts, spec.make_channel and,
  // when replicas span processes, spec.collectives (owned here, alive until the next prepare).
  void prepare(actors::PipelineSpec& spec, const ProcessPlacement& placement, int segment);
  // After constructing it, before run(): publishes this rank's data-plane address, learns the
  // others' and starts the channel; failures of `pipeline` from then on fail its run.
  void connect(actors::Pipeline& pipeline, int segment);
  // After run() (or its failure): no failure reaches that pipeline any more.
  void release();
  // The first failure of the job this rank saw (kind none while there was none); it stays
  // once set.
  GroupFailure first_failure() const;

  // Any rank publishes `value` under `key` (put does not wait); one other rank takes it (take
  // waits until it is there, and rank 0 forgets the value once taken, so a key has one reader).
  // Values of any size, sent in pieces through the control plane's key-value store; a key is
  // written once per job.
  void put(const std::string& key, std::span<const std::byte> value);
  std::vector<std::byte> take(const std::string& key);
  // Rank 0's `text` on every rank: rank 0 puts it under "<key>/<k>" for each other rank k and
  // returns it; the others take theirs and return it (their `text` is ignored). Every rank
  // calls it with the same key.
  std::string broadcast_text(const std::string& key, std::string_view text);
  void barrier(const std::string& name);
  // After segment `segment`'s pipeline ran and its state was handed over: waits until every
  // rank is there (nobody closes a data plane another may still read from), then forgets this
  // rank's data-plane address of the segment on rank 0.
  void end_segment(int segment);

  // Orderly leave (rank 0 waits for the others). Idempotent.
  void shutdown();

 private:
  void connect_channel(int segment);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// When a launcher started this process as one of several (transport::read_launch_env of
// `lookup`, the process's environment by default), joins the job with `options` (their env and
// host filled in here; TANDEM_HOST, when set, is this process's address); otherwise null.
// Throws transport::LaunchEnvError for malformed variables, RendezvousError for a failed join.
std::unique_ptr<ProcessGroup> join_launched_job(
    ProcessGroupOptions options, const transport::EnvLookup& lookup = transport::process_env());

// The job token this process's environment gives (TANDEM_JOB_TOKEN, or the file
// TANDEM_JOB_TOKEN_FILE names); empty: none. Throws transport::LaunchEnvError for a token file
// that cannot be read or a malformed token.
std::string environment_job_token();

// How a launcher started this process, in words ("rank 1 of 2 under torchrun, rank 0 at
// host:port"). Throws transport::LaunchEnvError for malformed variables.
std::string launched_as();

// The options of a process that joins a running elastic job by its door rather than by a
// launcher's variables: `options` with the environment's job token, as a rank's.
ProcessGroupOptions joiner_options(ProcessGroupOptions options);

}  // namespace tandem::train
