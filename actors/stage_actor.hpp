#pragma once
// One replica of one pipeline stage. It executes; it does not decide: its schedule's action
// stream says what runs next, the routing says where inputs come from and outputs go, the
// executor runs the kernels, the channel carries tensors and the collectives reduce gradients.
//
// The loop: take the next action; when its inputs (looked up by tag) are all here, run it, else
// keep receiving. An action on an asynchronous device (sim, CUDA) completes by a message,
// so the actor never blocks its worker. Weight versions are pinned by the minibatches that use
// them (stashing); activations are kept per (chunk, minibatch, slice) until their backward.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "actors/activation_store.hpp"
#include "actors/inbox.hpp"
#include "actors/stage_edges.hpp"
#include "actors/stage_event.hpp"
#include "actors/stage_progress.hpp"
#include "actors/stage_ties.hpp"
#include "actors/version_store.hpp"
#include "models/executor.hpp"
#include "models/grad_norm.hpp"
#include "models/model.hpp"
#include "models/optimizer.hpp"
#include "runtime/actor.hpp"
#include "runtime/event.hpp"
#include "schedules/plan.hpp"
#include "schedules/routing.hpp"
#include "schedules/schedule_params.hpp"
#include "transport/channel.hpp"
#include "transport/collectives.hpp"

namespace tandem::actors {

// The actions of one replica, in order; nothing once its schedule is over.
using ActionSource = std::function<std::optional<schedules::Action>()>;

struct StageSetup {
  int device = 0;  // the schedule's device index, also this actor's endpoint
  const models::Model* model = nullptr;
  std::vector<schedules::LayerRange> chunk_layers;  // layers of each of its chunks
  std::shared_ptr<const schedules::Routing> routing;
  ActionSource actions;
  models::ParamSet params;  // initial weights of its layers, on its device, its own copy
  // A resumed run: the older weight versions (numbered as in the whole training, below
  // schedules::update_rounds at first_minibatch) that its first minibatches' forwards use,
  // because they were in flight when the run that wrote them stopped (weight stashing).
  std::map<std::int64_t, models::ParamSet> older_versions;
  // Per tie of the model, the stages that hold its copies (tie_stages).
  std::vector<std::vector<int>> tie_stages;
  std::unique_ptr<models::Optimizer> optimizer;
  std::unique_ptr<models::Executor> executor;
  DType wire_dtype = DType::f32;  // of the activations and gradients it sends (PipelineSpec)
  transport::Channel* channel = nullptr;
  transport::Collectives* collectives = nullptr;
  transport::Endpoint loader = -1;
  transport::Endpoint coordinator = -1;
  std::uint64_t seed = 0;       // dropout (step_seed per minibatch)
  bool weight_stashing = true;  // false: backward uses the latest weights (for experiments)
  bool fuse_updates = true;     // false: never write an update inside a backward (for tests)
  StageObserver observer;
  // The learning rate of update round k (empty: the optimizer's own, constant).
  std::function<double(std::int64_t round)> lr_at;
  // A resumed run: its minibatch 0 and update round 0 are these of the whole training (dropout
  // seeds and learning rates count from there).
  std::int64_t first_minibatch = 0;
  std::int64_t first_round = 0;
  // The run's minibatches (StopAt may end it earlier): what it keeps at the end follows.
  std::int64_t minibatches = 0;
  // Gradient norms (models/grad_norm.hpp): the model's slots; null takes none. Under
  // ScheduleParams::global_sync the SYNC all-reduces every stage's squares and each STEP clips by
  // the whole model's norm; otherwise (asynchronous schedules) by the stage's own.
  std::shared_ptr<const models::GradNormLayout> norm_layout;
  std::optional<double> clip_norm;  // scale gradients down to this norm; none: only report
  bool report_norm = false;         // send each round's GradNormReport to the coordinator
};

struct StageStats {
  int device = 0, stage = 0, replica = 0;
  std::string device_name;
  std::int64_t actions = 0;
  // Time its device was busy: measured on cpu, charged on sim, from timed events on an
  // asynchronous device (cuda), added as each action completes.
  double busy_s = 0;
  std::size_t peak_versions = 0;
  std::size_t peak_activations = 0;  // forward slices kept for backward at once
  std::size_t peak_received = 0;     // tensors received and not yet consumed, at once
  // Bytes of the activations and gradients it sent (a sim tensor counts what its data would).
  std::uint64_t bytes_sent = 0;
  // Bytes of one weight version, and the peak of the weight versions held plus what forwards
  // keep for their backwards (activations, masks, re-materialization inputs): the replica's
  // peak memory but for gradients, optimizer state and transient buffers.
  std::size_t weight_bytes = 0;
  std::size_t peak_bytes = 0;
  bool finished = false;
};

class StageActor final : public Actor {
 public:
  StageActor(std::string name, StageSetup setup);

  const StageStats& stats() const { return stats_; }
  // Whether its schedule is over; safe from any thread (stats() only once the system is idle).
  bool done() const { return done_.load(std::memory_order_acquire); }
  const models::ParamSet& latest_params() const { return versions_.get(versions_.latest()); }
  const models::Optimizer& optimizer() const { return *s_.optimizer; }
  // After the run: the versions older than the latest that the minibatches after its end use
  // in forward (a run that resumes there replays them at these versions), by version number.
  std::map<std::int64_t, const models::ParamSet*> older_versions() const;
  // For a run that went quiet before its end: the action waited on and its missing inputs.
  std::string describe_wait() const;
  // From any thread, at any time while the actor exists, even while its worker is stuck in an
  // action: what its worker last published (at each action's start and end and after each
  // message) plus the messages not yet handled. Never touches the worker's own state.
  StageProgress progress() const;

 protected:
  void on_message(Message& msg) override;
  // Counts the messages taken from the inbox and not yet handled, for progress().
  bool handle_next(Lanes& lanes) override;

 private:
  using Action = schedules::Action;
  struct Send {
    transport::Endpoint to;
    Message msg;
    // Builds msg when the action's results are ready (a loss an asynchronous device computed);
    // empty for messages complete at once.
    std::function<Message()> make;
  };
  // An action submitted to an asynchronous device: its sends, held until the completion
  // message, and the event that carries the device's failure (recorded on cuda only).
  struct Pending {
    std::vector<Send> sends;
    schedules::Action action;  // what was submitted, and when (progress())
    std::chrono::steady_clock::time_point submitted;
    Event started, done;       // done.elapsed_since(started): its device time (busy_s), when timed
    std::vector<Tensor> held;  // what the work reads or writes (see hold)
  };
  // What progress() reads of the worker's state, copied by the worker under progress_mu_.
  struct Published {
    std::optional<schedules::Action> running;  // inside execute()
    std::chrono::steady_clock::time_point running_since;
    std::size_t device_ops = 0;
    std::optional<schedules::Action> oldest_op;
    std::chrono::steady_clock::time_point oldest_since;
    bool syncing = false;
    std::optional<schedules::Action> next;
    bool finished = false;
  };

  void handle(Message& msg);
  // Copies what progress() reports of the state between messages.
  void publish();
  void publish_running(const std::optional<schedules::Action>& a);
  void store(Message& msg, bool forward_lane);
  std::optional<Action> pull();
  void stop_at(std::int64_t minibatches);
  void advance();
  bool next_action();
  bool ready(const Action& a) const;
  void execute(const Action& a);
  void complete();
  void finish();

  void run_forward(const Action& a);
  // F of a forward-only schedule (prediction): evaluation mode, nothing kept, no targets; the
  // last stage hands its outputs to the coordinator.
  void run_forward_only(const Action& a);
  void run_backward(const Action& a);
  // What an F reads: the one input of a chain (`x`); a graph's reads, the tensors of its
  // incoming edges (relayed ones included) and, on virtual stage 0, the loader's input (`x`).
  struct ForwardInputs {
    Tensor x;
    std::vector<Tensor> reads;
    EdgeTensors arrived;
  };
  ForwardInputs take_forward_inputs(const Action& a, const ChunkEdges* ce);
  // Sends F's results along its output routes: `y` for a chain, each edge's tensor for a graph.
  void send_forward(const Action& a, const ChunkEdges* ce, const Tensor& y,
                    const std::vector<Tensor>& outputs, const ForwardInputs& in);
  // A graph model's F and B (StageEdges): what arrived on each of `edges` for `a`.
  // A received tensor in f32 where this stage computes (the wire's bf16 widened).
  Tensor arrived(const Tensor& t);
  EdgeTensors take_edges(const Action& a, schedules::Port port,
                         const std::vector<std::uint16_t>& edges);
  // Sends rows of `t` (whose row 0 is sample `first`) along `r`.
  void send(const schedules::Route& r, const Tensor& t, std::int64_t first, bool forward);
  void run_weight(const Action& a);
  void run_sync(const Action& a);
  // Starts the current SYNC's all-reduce number sync_phase_ (0: among the stage's replicas, then
  // one per TieReduction); false once none is left.
  bool start_sync_phase();
  // Sums this stage's copies of each tie that also has copies on other stages (inside device
  // work, waited for: the SYNC's all-reduce reads them next). The ties held here alone are
  // summed in run_step, with the update.
  void sum_spread_copies();
  // Adds the copies of every tie into each (the spread ties' totals a SYNC left in their first
  // copies, the local ones summed here), once per round.
  void sum_ties(const models::Kernels& k, models::ParamSet& g);
  // The squares of this stage's gradients in the model's norm slots (ties summed first), on its
  // device, once the device has computed them.
  Tensor norm_squares();
  // The norm this round's STEP clips by and reports: the whole model's (the SYNC all-reduced
  // norm_squares_) or, without global_sync, the stage's own; and its sum of squares.
  double round_squares();
  void report_norm(std::int64_t round, double squares);
  void run_step(const Action& a);

  std::int64_t next_forward_version();
  // The version minibatch `b` of this run uses (numbered as in the whole training).
  std::int64_t version_of(std::int64_t b) const;
  // The oldest version a minibatch after the run's end uses: kept to the end (a resume needs it).
  std::int64_t kept_from() const;
  models::ParamSet& grads();
  // When backward `a` of weight version `version` may write the round's update straight into
  // the weights: the schedule marked it (Action::update_in_place: its round's only contribution,
  // the round's STEP next), the optimizer's update is stateless (plain SGD), `version` is the
  // latest and nothing else needs it. Then hands the latest version over into fused_next_ and
  // returns the update with the round's learning rate.
  std::optional<models::FusedUpdate> begin_fused_update(const Action& a, std::int64_t version);
  void charge(const models::Completion& done);
  // Keeps tensors the current action's device work uses until that work has completed. The
  // actor drops its own handles as soon as it has submitted the work (activations after their
  // backward, old weight versions after a step); on a GPU that work may still be queued, and
  // the caching allocator would hand the memory to the next allocation, of any stream.
  void hold(const Tensor& t);
  void hold(const models::ParamSet& p);
  void hold(const std::vector<models::Saved>& saved);
  void flush(std::vector<Send>& sends);
  void emit(const Action& a, std::int64_t version, const models::ParamSet* weights,
            const models::ParamSet* grads, std::chrono::steady_clock::time_point start);
  std::string where(const Action& a) const;
  void note_memory();
  bool last_vstage(int chunk) const;
  int vstage(int chunk) const;

  StageSetup s_;
  const schedules::ScheduleParams& params_;
  int stage_ = 0, replica_ = 0;
  StageEdges edges_;  // empty for a chain
  StageTies ties_;    // empty without tied parameters
  std::int64_t sync_round_ = 0;
  std::size_t sync_phase_ = 0;
  VersionStore versions_;
  Inbox received_;               // the tensors messages brought, until an action takes them
  ActivationStore activations_;  // what forwards keep for backwards, and B for W
  std::optional<models::ParamSet> grads_;
  Tensor norm_squares_;       // this round's gradient-norm slots (global_sync: all-reduced)
  bool ties_summed_ = false;  // this round's tied copies already hold their totals
  // The next version, already updated by a fused backward; its STEP publishes it.
  std::optional<models::ParamSet> fused_next_;
  bool contributed_ = false;
  // The chunks whose gradients hold this round's values: a chunk's first weight gradient of a
  // round overwrites them (beta 0) instead of being added to zeros.
  std::vector<bool> written_;  // by chunk
  bool fresh(int chunk) const { return !written_[static_cast<std::size_t>(chunk)]; }
  std::deque<Action> ahead_;  // current action first, then lookahead
  bool have_current_ = false;
  bool source_done_ = false;
  std::int64_t stop_at_ = std::numeric_limits<std::int64_t>::max();  // StopAt: run's new end
  std::int64_t end_ = 0;  // the run's minibatches: s_.minibatches, or stop_at_ when earlier
  bool running_ = false;  // a SYNC is in flight: nothing runs until it completes
  bool finished_ = false;
  std::atomic<bool> done_{false};
  std::uint64_t seq_ = 0;
  schedules::Routes routes_;
  std::vector<Send> sends_;               // sent when the current action completes
  std::chrono::nanoseconds ready_in_{0};  // the current action's results are ready this late
  Event ready_;                           // or then (an asynchronous device's completion)
  Event ready_started_;                   // timed, before the current action's device work
  std::vector<Tensor> held_;              // by the current action, until ready_ (hold)
  // Whether hold() keeps anything: only where the device uses the tensors after run() returns.
  bool holds_ = false;
  // Actions submitted to an asynchronous device, by sequence number.
  std::map<std::uint64_t, Pending> pending_;
  std::chrono::steady_clock::time_point started_;
  StageStats stats_;
  // Read by progress() from other threads. Cheap to write: a lock per action start and end and
  // per message (uncontended unless a watchdog samples at that instant), relaxed stores else.
  mutable std::mutex progress_mu_;
  Published published_;
  std::atomic<std::uint64_t> events_{0};
  std::atomic<bool> handling_{false};
  std::atomic<std::size_t> taken_{0};  // taken from the inbox into the lanes, not handled
};

}  // namespace tandem::actors
