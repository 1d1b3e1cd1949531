#pragma once
// One rank's part in a training job that may outlive its ranks. A job runs its Session over
// its ProcessGroup; with cluster.elastic, when a rank is lost the survivors end the segment,
// re-form the job among themselves (a new control plane on the master's port + the re-plan's
// number, ranks renumbered in their old order), re-plan the model onto the ranks that remain
// (train/elastic_plan.hpp; rank 0 announces its plan and every rank checks it computed the
// same), resume from the last checkpoint under the new plan (train/resume_state.hpp), and
// train on, at most cluster.max_replans times. Rank 0 is the job's master: its loss ends the
// job, as does a loss with elasticity off.
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "train/job_inputs.hpp"
#include "train/job_spec.hpp"
#include "train/process_group.hpp"
#include "train/session.hpp"

namespace tandem::train {

class ElasticJob {
 public:
  // `group`: the job joined (null: one process, never re-planned); the next generations use its
  // options. Builds the first Session (throws what its constructor throws).
  // `inputs`: what a job built in code brings (train/job_inputs.hpp), each generation's Session
  // gets a copy.
  ElasticJob(JobSpec job, SessionOptions options, std::unique_ptr<ProcessGroup> group,
             JobInputs inputs = {});
  ~ElasticJob();

  // Trains to the end, re-forming and re-planning on lost ranks as the job allows. `on_replan`
  // gets one line per re-plan ("rank 2 lost at step 340; re-planned 4 -> 3 ranks (stages 0-4 |
  // 5-9 | 10-16); resuming from step 300"), at every rank. Throws what the Session throws when
  // the job may not go on, with the reason it stopped.
  TrainSummary run(const std::function<void(const StepRecord&)>& on_record,
                   const std::function<void(const std::string&)>& on_replan = {});

  // From any thread: the current session stops at its next boundary.
  void request_stop();

  // The current session and group (the group is null in one process, or once the job shrank
  // to one).
  Session& session() { return *session_; }
  ProcessGroup* group() { return group_.get(); }
  // Orderly leave of the group in use.
  void shutdown();

 private:
  // The lost ranks the group knows of, waiting a little for rank 0's word of them.
  std::vector<transport::LostRank> lost_ranks() const;
  // Re-forms the job without `lost`, re-plans and builds the next session; returns the line.
  std::string replan(const std::vector<transport::LostRank>& lost, int64_t at_step);
  // Rank 0 tells the others the plan it computed; they check theirs is the same.
  void announce_plan(const Session& session);

  JobSpec job_;
  SessionOptions options_;
  JobInputs inputs_;
  std::unique_ptr<ProcessGroup> group_;
  ProcessGroupOptions group_options_;
  int num_layers_ = 0;
  int replans_ = 0;
  std::mutex mu_;  // session_ against request_stop
  std::unique_ptr<Session> session_;
  bool stop_requested_ = false;
};

}  // namespace tandem::train
