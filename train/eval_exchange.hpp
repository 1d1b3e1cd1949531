#pragma once
// How the ranks of a multi-process job bring one segment's periodic evaluations to rank 0
// (train/eval_snapshots.hpp): each rank that runs some stage's replica 0 puts its stages'
// weights of step E to rank 0's store under "eval/<segment>/<E>/<rank>" (train/stage_state's
// encoding) as its stages publish them, or, after the segment, an empty value for each step a
// stop kept it from reaching, so each key is written once and taken once. Rank 0's thread takes
// the parts step by step, once its own replicas reached the step (so a take waits for the other
// ranks' last stretch to E, not for the whole run to E), and evaluates each step every stage
// reached. Only evaluation steps' weights travel, and rank 0 takes them as they come.
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "models/param_set.hpp"

namespace tandem::train {

class ProcessGroup;

class EvalExchange {
 public:
  // The whole model's weights at `step`, by stage; at rank 0, on the exchange's thread.
  using Evaluate = std::function<void(int64_t step, const std::map<int, models::ParamSet>& stages)>;

  // `contributors`: the ranks that run some stage's replica 0 (of a model of `stages` stages);
  // `steps`: the segment's evaluation steps, ascending. Rank 0 starts its thread here.
  EvalExchange(ProcessGroup& group, std::set<int> contributors, int stages, int segment,
               std::vector<int64_t> steps, Evaluate evaluate);
  // At rank 0, waits for its thread (which ends once every rank's part or mark for each step
  // arrived, or the group failed).
  ~EvalExchange();
  EvalExchange(const EvalExchange&) = delete;
  EvalExchange& operator=(const EvalExchange&) = delete;

  // On the stage thread that completed this rank's part of `step`: its replicas 0's weights by
  // stage (empty at a rank 0 that runs none, once its replicas reached the step). Ranks > 0
  // encode and put it (Rendezvous::set only queues the bytes for the control plane's thread).
  void add(int64_t step, const std::map<int, models::ParamSet>& stages);

  // After the segment's pipeline ran: ranks > 0 mark the steps they did not reach; rank 0 waits
  // until its thread has evaluated what every stage reached. Throws what the thread threw.
  void finish();

 private:
  void gather();
  void gather_step(int64_t step);
  std::string key(int64_t step, int rank) const;

  ProcessGroup& group_;
  const std::set<int> contributors_;
  const int stages_;
  const int segment_;
  const std::vector<int64_t> steps_;
  const Evaluate evaluate_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int64_t, std::map<int, models::ParamSet>> local_;  // rank 0: its parts not yet taken
  std::set<int64_t> sent_;                                    // ranks > 0
  bool finished_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // rank 0
};

}  // namespace tandem::train
