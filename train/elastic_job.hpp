#pragma once
// One rank's part in a training job that may outlive its ranks, or take in new ones. A job runs
// its Session over its ProcessGroup; with cluster.elastic:
// - when a rank is lost, the survivors end the segment, re-form the job among themselves (a new
//   control plane on the master's host, at the port rank 0 reserved for it and told every rank
//   when the current generation started; ranks renumbered in their old order), re-plan the model
//   onto the ranks that remain (train/elastic_plan.hpp; rank 0 announces its plan and every rank
//   checks it computed the same), resume from the last checkpoint under the new plan
//   (train/resume_state.hpp) and train on;
// - a process that knocks at rank 0's door (train/elastic_door.hpp) with the job's token is
//   taken in at the next checkpoint: every rank ends the segment there, the joiners get the
//   next ranks, and the larger job re-plans and resumes from that checkpoint.
// At most cluster.max_replans re-plans of either kind. Rank 0 is the job's master: its loss ends
// the job, as does a loss with elasticity off.
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "train/elastic_door.hpp"
#include "train/job_inputs.hpp"
#include "train/job_spec.hpp"
#include "train/port_reservation.hpp"
#include "train/process_group.hpp"
#include "train/session.hpp"

namespace tandem::train {

// Where a process joining a running job knocks: the door's address, which rank 0 logs when the
// job starts ("late ranks join with ... --join HOST:PORT").
struct ElasticJoin {
  std::string host;
  std::uint16_t port = 0;
};

class ElasticJob {
 public:
  // `group`: the job joined (null: one process); the next generations use its options.
  // `inputs`: what a job built in code brings (train/job_inputs.hpp); each generation's Session
  // gets a copy. Builds the first Session (throws what its constructor throws).
  ElasticJob(JobSpec job, SessionOptions options, std::unique_ptr<ProcessGroup> group,
             JobInputs inputs = {});
  // A process joining the running job at `join` (`group_options` without its env: the door
  // assigns rank and size; the job token is group_options.env.job_token): waits at the door
  // until the job's next checkpoint, then joins the re-formed job and resumes from that
  // checkpoint (options.checkpoint_dir, which must be the job's). Throws
  // transport::RendezvousError when no door answers or the token is refused.
  ElasticJob(JobSpec job, SessionOptions options, ProcessGroupOptions group_options,
             ElasticJoin join);
  ~ElasticJob();

  // Trains to the end, re-forming and re-planning as the job allows. `on_replan` gets one line
  // per re-plan ("rank 2 lost at step 340; re-planned 4 -> 3 ranks (stages 0-4 | 5-9 |
  // 10-16); resuming from step 300"), at every rank. Throws what the Session throws when the
  // job may not go on, with the reason it stopped.
  TrainSummary run(const std::function<void(const StepRecord&)>& on_record,
                   const std::function<void(const std::string&)>& on_replan = {});

  // From any thread: the current session stops at its next boundary.
  void request_stop();

  // The current session and group (the group is null in one process, or once the job shrank
  // to one).
  Session& session() { return *session_; }
  ProcessGroup* group() { return group_.get(); }
  const ProcessGroup* group() const { return group_.get(); }
  // Orderly leave of the group in use.
  void shutdown();

 private:
  // What a joiner and the job compare at the door (train/job_agreement.hpp).
  std::vector<std::string> joiner_job() const;
  // The lost ranks the group knows of, as rank 0 decided them.
  std::vector<transport::LostRank> lost_ranks() const;
  // Rank 0: `lost` and the losses that follow it closely, once none has come for a while.
  std::vector<transport::LostRank> settled_losses(std::vector<transport::LostRank> lost) const;
  // Re-forms the job without `lost`; returns the line.
  std::string shrink(const std::vector<transport::LostRank>& lost, int64_t at_step);
  // Re-forms the job with the joiners claimed at the last checkpoint; returns the line.
  std::string grow();
  // Joins generation `replans_` as `rank` of `world`, re-plans, resumes: the next session.
  void start_generation(int rank, int world);
  // After a checkpoint, on every rank: whether joiners wait (rank 0 decides and tells).
  bool decide_growth(int segment);
  // Rank 0 tells the others the plan it computed; they check theirs is the same.
  void announce_plan(const Session& session);
  // Rank 0 reserves the next generation's port and tells the others (every generation's start).
  void exchange_next_port();
  SessionOptions session_options();

  JobSpec job_;
  SessionOptions options_;
  JobInputs inputs_;
  std::unique_ptr<ProcessGroup> group_;
  ProcessGroupOptions group_options_;   // env.master_port: the job's first
  std::optional<models::Model> model_;  // what re-plans cut
  int replans_ = 0;
  int grow_to_ = 0;  // the job's size after the joiners claimed at the last checkpoint
  std::unique_ptr<ElasticDoor> door_;  // rank 0 of an elastic job of several processes
  std::unique_ptr<PortReservation> next_reservation_;  // rank 0
  std::uint16_t next_port_ = 0;  // where the next generation's control plane listens
  std::mutex mu_;                // session_ against request_stop
  std::unique_ptr<Session> session_;
  bool stop_requested_ = false;
};

}  // namespace tandem::train
