#pragma once
// A pipeline in one process: builds the actor topology of a plan (one StageActor per stage
// replica, a loader, a coordinator), wires them through a channel and collectives, runs a
// bounded number of minibatches and reports. The single-device case is a one-stage plan.
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "actors/coordinator.hpp"
#include "actors/fetch_stop.hpp"
#include "actors/minibatch_data.hpp"
#include "actors/pipeline_event.hpp"
#include "actors/pipeline_progress.hpp"
#include "actors/stage_actor.hpp"
#include "actors/stage_event.hpp"
#include "models/delay_correction.hpp"
#include "models/executor.hpp"
#include "models/model.hpp"
#include "models/optimizer.hpp"
#include "models/sim_costs.hpp"
#include "runtime/actor_system.hpp"
#include "schedules/action_list.hpp"
#include "schedules/plan.hpp"
#include "transport/channel.hpp"
#include "transport/collectives.hpp"

namespace tandem::actors {

class Coordinator;
class LoaderActor;

// An optimizer's state on one stage (every replica of a stage holds the same at a stop
// boundary): Optimizer::state() and its step count.
struct OptimizerState {
  models::ParamSet state;
  std::int64_t steps = 0;
};

// One minibatch's results, as the coordinator completes them.
struct MinibatchReport {
  double loss = 0;  // mean over its loss rows
  std::int64_t correct = 0;
  std::int64_t rows = 0;
  // Its update round's gradient norm before clipping (PipelineSpec::clip_grad_norm); NaN when
  // the run takes none.
  double grad_norm = std::numeric_limits<double>::quiet_NaN();
};

struct PipelineSpec {
  const models::Model* model = nullptr;  // not owned; outlives the pipeline
  // Stages, replicas' devices and the schedule; schedule.minibatches is the run's length (>= 1).
  schedules::Plan plan;
  // A hand-written order to run instead of the schedule's (validated before anything starts).
  std::optional<schedules::ActionList> order;
  // Layers of every virtual stage (chunk c of stage s at c * p + s) for interleaved schedules;
  // empty: the plan's stages (one chunk) or an even split of the model (several chunks).
  std::vector<schedules::LayerRange> chunk_layers;
  models::OptimizerSpec optimizer;
  std::uint64_t seed = 0;           // dropout, and initial weights when none are given
  models::ParamSet initial_params;  // the whole model on the CPU; empty: init_params(seed)
  DataSource data;
  // The token of the data source's fetch in progress, stopped by request_stop() when the run
  // does not need that minibatch (actors/fetch_stop.hpp); null: fetches are never cancelled.
  std::shared_ptr<FetchStop> fetch_stop;
  models::SimCosts sim_costs;   // durations on the sim device
  bool weight_stashing = true;  // false only to show what stashing is for
  // Asynchronous schedules (pipedream, pipedream-vsync, 2bw): each stage's optimizer corrects
  // its versions for the stage's delay (schedules::update_delay); refused for the others.
  models::AsyncCorrection async_correction = models::AsyncCorrection::none;
  // A graph's tensors that skip stages are relayed by the stages in between instead of sent
  // straight to their readers (tensor_edges).
  bool relay_skips = false;
  // Plain SGD writes its update straight into the weights inside a stage's backward when that
  // backward is its round's only one and nothing else needs the weights (a one-stage run,
  // PipeDream's last stage): no gradient tensor, one pass less. false: never (for tests).
  bool fuse_updates = true;
  StageObserver observer;      // called on the stages' threads
  PipelineEventHook on_event;  // the loader's and coordinator's events, on their threads
  // The learning rate of update round k on every stage (empty: constant optimizer.lr).
  std::function<double(std::int64_t round)> lr_at;
  // Called (on the coordinator's thread) as each minibatch's loss (and, clipping, its gradient
  // norm) completes: progress output.
  std::function<void(std::int64_t minibatch, const MinibatchReport&)> on_minibatch;
  // Scale each update's gradients down to this global norm (PyTorch's clip_grad_norm_): a flush
  // schedule's over the whole model, every stage and replica (ScheduleParams::global_sync; one
  // device's norm bit for bit, models/grad_norm.hpp); an asynchronous schedule's over each
  // stage's own gradient (its stages update at no common moment). The norm before clipping is
  // reported with each minibatch (per-stage norms added in stage order; none when a PipeDream
  // stage is replicated, its rounds then span several minibatches).
  std::optional<double> clip_grad_norm;
  // Resuming: this run's minibatch 0 is minibatch `first_minibatch` of the whole training (a
  // schedules::stop_boundary): data, dropout seeds, learning-rate rounds and on_minibatch's
  // numbers count from there.
  std::int64_t first_minibatch = 0;
  // Per stage, the optimizer state to start from (empty: fresh optimizers).
  std::vector<OptimizerState> optimizer_states;
  // Per stage, the older weight versions a resumed run's first forwards use (PipeDream, vertical
  // sync and 2BW keep minibatches in flight across a stop: their forwards are replayed at the
  // versions they had): Pipeline::older_versions of the run that stopped, by version number,
  // each holding at least that stage's weights (on the CPU). Required when resuming those
  // schedules; empty for flush schedules.
  std::vector<std::map<std::int64_t, models::ParamSet>> older_versions;
  // Threads each cpu replica's kernels use; 0: `cpu_threads` split among the cpu replicas
  // (all of them for a one-replica pipeline).
  int cpu_threads_per_replica = 0;
  // The threads the cpu replicas' kernels share; 0: the machine's cores.
  int cpu_threads = 0;
  // How cuda replicas run matrix products (f32, TF32, bf16 with f32 accumulation).
  models::MatmulPrecision matmul_precision = models::MatmulPrecision::f32;
  // The dtype of activations and gradients between stages: f32, or bf16 (half the bytes, each
  // value rounded to nearest even where it leaves its stage and widened exactly where it
  // arrives; cuda stages send f32 whatever this says, models::Executor::to_wire).
  DType wire_dtype = DType::f32;
  // Makes each replica's executor from its device and its share of the CPU threads. Unset:
  // models::make_executor. A device of one's own plugs in here, as long as its executor keeps
  // the contract of models/executor.hpp.
  std::function<std::unique_ptr<models::Executor>(Device device, int cpu_threads)> make_executor;
  // Makes the channel the actors send through, over the pipeline's actor system; the pipeline
  // binds every endpoint to it (stage replica d is endpoint d, the loader R, the coordinator
  // R + 1, for R replicas in all). Unset: a LocalChannel (everything in this process).
  std::function<std::unique_ptr<transport::ActorChannel>(ActorSystem&)> make_channel;
  // The endpoints this process runs (unset: all). A pipeline spread over processes is one
  // Pipeline per process, each with the same spec but `hosts` and a channel (make_channel)
  // that carries the other endpoints' messages; the caller connects the channels before run().
  // The loader and the coordinator run where the stage replicas' results are wanted: losses,
  // minibatches and request_stop() work in the process that hosts them. Replicas of a stage
  // must all run in one process (their gradients are reduced in process) unless `collectives`
  // reduces across processes.
  std::function<bool(transport::Endpoint)> hosts;
  // What a replicated stage reduces its gradients through (not owned; outlives the pipeline).
  // Unset: in this process (transport::LocalCollectives). A stage's replicas may run in
  // several processes when this reaches them all (transport::GlooCollectives).
  transport::Collectives* collectives = nullptr;
};

// The stages a pipeline built from `spec` sums each spread tie among at SYNC (its schedule's
// tied_stages): one list per tied parameter whose copies sit on two or more stages. Throws
// std::invalid_argument as the pipeline would for a plan that does not fit the model.
std::vector<std::vector<int>> spread_tie_stages(const PipelineSpec& spec);

// Whether every stage of a pipeline built from `spec` meets at each round's SYNC
// (ScheduleParams::global_sync): clipping on a flush schedule.
bool global_norm_sync(const PipelineSpec& spec);

struct PipelineResult {
  std::vector<double>
      losses;  // mean loss of every minibatch, in order (where the coordinator runs)
  std::vector<StageStats> stages;  // of the replicas this process hosts
  double seconds = 0;
  std::int64_t minibatches = 0;  // that ran: the plan's, or fewer after request_stop()
  int loader_peak_in_flight = 0;
  // A forward-only schedule's: the model's outputs of every minibatch, rows in sample order
  // (where the coordinator runs).
  std::vector<Tensor> outputs;
};

// What failed: an actor's error (naming stage, replica and action), or a run that went quiet
// before its end (naming what every stage waits for).
class PipelineError : public std::runtime_error {
 public:
  enum class Kind {
    failed,    // an actor's handler threw: cause() is what (ActionError, DataSourceError, ...)
    stopped,   // stopped from outside (stop_with_error, a channel that lost its peer)
    quiet,     // went quiet before its end: no actor can go on
    internal,  // the run broke its own rules (outputs that do not cover a minibatch)
  };
  PipelineError(Kind kind, const std::string& what, std::exception_ptr cause = nullptr)
      : std::runtime_error(what), kind_(kind), cause_(std::move(cause)) {}
  Kind kind() const noexcept { return kind_; }
  const std::exception_ptr& cause() const noexcept { return cause_; }

 private:
  Kind kind_;
  std::exception_ptr cause_;
};

class Pipeline {
 public:
  // Throws std::invalid_argument (or schedules::ScheduleError) naming what is wrong with the
  // spec; nothing runs then.
  Pipeline(PipelineSpec spec, std::unique_ptr<Scheduler> scheduler);
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  // Runs every minibatch of the plan; once per pipeline. Throws PipelineError.
  PipelineResult run();

  // Whether this process runs stage replica (stage, replica): its stage(), params,
  // optimizer_state and older_versions are here.
  bool hosts_stage(int stage, int replica = 0) const;
  // `preferred` when this process runs that replica of `stage`, else the first replica of it that
  // it runs (else `preferred`).
  int hosted_replica(int stage, int preferred = 0) const;

  // From any thread, before or during run(): the run ends early, at the first stop boundary
  // (schedules::stop_boundary) at or after the minibatches already admitted. Every minibatch
  // before it completes (forward, backward, update); none after it starts. No effect after the
  // run or when the boundary is the plan's end.
  void request_stop();

  // From any thread, before or during run(): the run cannot go on (a peer process was lost, a
  // collective failed). Stops the actor system; run() throws PipelineError with `why` (the
  // first reason given, when several are). No effect after run() returned.
  void stop_with_error(std::string why);

  // From any thread, at any time while the pipeline exists, also while a stage's worker is stuck
  // in an action or run() blocks: whether this process's stage replicas move (see
  // PipelineProgress; has_work only while run() runs). Reads what each stage replica publishes
  // for it (a short lock per replica), never the actors' own state; allocates only the text.
  PipelineProgress progress() const;

  // After run(): the whole model's weights (on the CPU, copied from a GPU stage), stage by
  // stage from replica min(replica, r_s - 1) (the stages this process hosts, when spread over
  // processes).
  models::ParamSet params(int replica = 0) const;
  const StageActor& stage(int stage, int replica = 0) const;
  // After run(): the optimizer state of a stage (from its replica 0, or the first replica this
  // process runs), to resume from.
  OptimizerState optimizer_state(int stage) const;
  // After run(): the weight versions of a stage (from its replica 0) older than its latest that
  // the minibatches after the run's end use in forward, for PipelineSpec::older_versions.
  std::map<std::int64_t, models::ParamSet> older_versions(int stage) const;
  ActorSystem& system() { return *system_; }

 private:
  struct Impl;
  // The constructor's steps, in order.
  // The spec and plan checked; the data shifted to the run's first minibatch.
  void validate();
  // The schedule (or the explicit order) proven runnable before anything starts; its routing.
  void prove_runnable(const std::vector<schedules::LayerRange>& vlayers);
  // The actor system, its error handler and the channel.
  void start_system(std::unique_ptr<Scheduler> scheduler);
  // A StageActor for every replica this process runs, bound to its endpoint.
  void spawn_stages(const std::vector<schedules::LayerRange>& vlayers);
  // Whether endpoint `e` runs in this process (PipelineSpec::hosts).
  bool runs_here(transport::Endpoint e) const;
  // Throws when a stage's replicas run in several processes and nothing reduces across them.
  void check_replicas_placement() const;
  ActionSource stage_actions(int device) const;
  StageSetup stage_setup(int device, const std::vector<schedules::LayerRange>& vlayers,
                         const models::ParamSet& whole, int cpu_threads);
  void spawn_loader_and_coordinator();
  // Which gradient norms the stages report to the coordinator.
  NormReports norm_reports() const;

  PipelineSpec spec_;
  std::unique_ptr<ActorSystem> system_;
  std::unique_ptr<Impl> impl_;
  bool ran_ = false;
};

}  // namespace tandem::actors
