#include "actors/pipeline.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "actors/coordinator.hpp"
#include "actors/data_source_error.hpp"
#include "actors/loader_actor.hpp"
#include "actors/messages.hpp"
#include "actors/stage_edges.hpp"
#include "models/delay_correction.hpp"
#include "models/executor.hpp"
#include "schedules/in_place_updates.hpp"
#include "schedules/pipeline_rules.hpp"
#include "schedules/routing.hpp"
#include "schedules/schedule.hpp"
#include "schedules/schedule_error.hpp"
#include "schedules/validator.hpp"
#include "schedules/weight_versions.hpp"
#include "transport/local_channel.hpp"
#include "transport/local_collectives.hpp"

namespace tandem::actors {
namespace {

using schedules::LayerRange;

[[noreturn]] void fail(const std::string& what) {
  throw std::invalid_argument("pipeline: " + what);
}

std::vector<LayerRange> virtual_stage_layers(const PipelineSpec& spec) {
  try {
    return schedules::virtual_stage_layers(spec.plan, spec.model->num_layers(), spec.chunk_layers);
  } catch (const schedules::ScheduleError& e) {
    fail(e.what());
  }
}

// The loader's or the coordinator's part of progress(): work while its worker is inside a
// handler (a data source or an on_minibatch that hangs) or messages wait for it.
void add_progress(PipelineProgress& out, bool running, const char* name,
                  const HandlerGauge::Reading& gauge, std::size_t unhandled) {
  out.completed += gauge.handled;
  if (!running || (!gauge.inside && unhandled == 0)) return;
  out.has_work = true;
  std::string what;
  if (gauge.inside) {
    char took[32];
    std::snprintf(took, sizeof took, "%.1f s", gauge.inside_s);
    what = std::string("handling a message for ") + took;
  }
  if (unhandled > 0) {
    what += what.empty() ? "" : "; ";
    what += std::to_string(unhandled) + " message" + (unhandled == 1 ? "" : "s") + " unhandled";
  }
  out.waiting_for += out.waiting_for.empty() ? "" : "\n";
  out.waiting_for += std::string(name) + ": " + what;
}

// What is wrong with the spec's own fields, before anything is built from them.
void check_spec(const PipelineSpec& spec) {
  if (spec.model == nullptr) fail("no model");
  if (!spec.data) fail("no data source");
  const auto& params = spec.plan.schedule;
  if (params.minibatches < 1) fail("the run needs schedule.minibatches >= 1");
  if (spec.first_minibatch < 0 ||
      schedules::stop_boundary(params, spec.first_minibatch) != spec.first_minibatch) {
    fail("a run cannot resume at minibatch " + std::to_string(spec.first_minibatch) +
         ": not a stop boundary of schedule " + std::string(schedules::to_string(params.kind)));
  }
  if (!spec.optimizer_states.empty() &&
      static_cast<int>(spec.optimizer_states.size()) != params.stages) {
    fail(std::to_string(spec.optimizer_states.size()) + " optimizer states for " +
         std::to_string(params.stages) + " stages");
  }
  if (spec.async_correction != models::AsyncCorrection::none &&
      (params.kind != schedules::ScheduleKind::pipedream &&
       params.kind != schedules::ScheduleKind::pipedream_vsync &&
       params.kind != schedules::ScheduleKind::pipedream_2bw)) {
    fail("async_correction " + std::string(models::async_correction_name(spec.async_correction)) +
         " applies to schedules pipedream, pipedream-vsync and 2bw only (their gradients are "
         "stale), not to " +
         std::string(schedules::to_string(params.kind)));
  }
  if (!spec.older_versions.empty() &&
      static_cast<int>(spec.older_versions.size()) != params.stages) {
    fail(std::to_string(spec.older_versions.size()) + " stages of older weight versions for " +
         std::to_string(params.stages) + " stages");
  }
}

// The custom order, proven runnable whole before anything starts, and describing this plan.
void check_order(const schedules::ActionList& order, const schedules::ScheduleParams& params) {
  // The list carries its own parameters; they must describe this plan.
  if (order.params.stages != params.stages ||
      order.params.total_replicas() != params.total_replicas() ||
      order.params.chunks != params.chunks) {
    fail("the custom order's stages, replicas or chunks differ from the plan's");
  }
  if (order.params.global_sync != params.global_sync) {
    fail(std::string("the custom order's header ") +
         (params.global_sync ? "lacks globalsync, which gradient clipping needs"
                             : "has globalsync, but the run clips no gradients"));
  }
  if (order.params.tied_stages != params.tied_stages) {
    fail(
        "the custom order's tied stages (its header's ties=) differ from the plan's: the "
        "model ties parameters across stages, which must SYNC every round");
  }
  schedules::validate(order);
}

// The schedule proven on a bounded prefix: the generators are uniform in the minibatch index, so
// a run of a few hundred minibatches has every pattern a longer one has (warm-up, steady state
// with every replica's turn, drain); validating a million-minibatch run whole took 8 s.
void check_schedule(const schedules::ScheduleParams& params) {
  schedules::ScheduleParams probe = params;
  probe.minibatches = std::min<std::int64_t>(
      params.minibatches,
      std::max<std::int64_t>(256, std::int64_t{16} * params.total_replicas() * params.chunks));
  schedules::validate(schedules::Schedule(probe).materialize());
}

// Threads each cpu replica's kernels get: stages on the CPU that compute at once split its cores
// rather than each spreading its kernels over all of them (oversubscribed threads preempt each
// other mid-GEMM).
int cpu_share(const PipelineSpec& spec) {
  int cpu_replicas = 0;
  for (const auto& st : spec.plan.stages) {
    for (const auto& pl : st.replicas) cpu_replicas += Device::parse(pl.device).is_cpu() ? 1 : 0;
  }
  const int cores = spec.cpu_threads > 0
                        ? spec.cpu_threads
                        : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // One cpu replica: `cpu_threads`, or 0 (oneTBB's default arena, the whole machine).
  return spec.cpu_threads_per_replica > 0 ? spec.cpu_threads_per_replica
         : cpu_replicas > 1               ? std::max(1, cores / cpu_replicas)
                                          : spec.cpu_threads;
}

// The whole model's initial weights on the CPU (none when every stage is on the sim device).
models::ParamSet initial_weights(const PipelineSpec& spec) {
  if (!spec.initial_params.empty()) return spec.initial_params;
  for (const auto& st : spec.plan.stages) {
    for (const auto& pl : st.replicas) {
      if (Device::parse(pl.device).has_data()) return spec.model->init_params(spec.seed);
    }
  }
  return {};
}

// Each replica gets its own copy of its layers' weights, on its device (sim parameters have
// shapes only).
models::ParamSet own_weights(const PipelineSpec& spec, const std::vector<LayerRange>& chunks,
                             const Device& device, const models::ParamSet& whole) {
  models::ParamSet own;
  for (const LayerRange& lr : chunks) {
    if (!device.has_data()) {
      own.merge(spec.model->init_params(spec.seed, lr.begin, lr.end, device));
      continue;
    }
    for (int l = lr.begin; l < lr.end; ++l) {
      for (const models::ParamSpec& ps : spec.model->layer(l).param_specs()) {
        const std::string name = spec.model->param_name(l, ps.name);
        const Tensor& t = whole.at(name);
        own.add(name, t.device() == device ? t.clone() : t.to(device));
      }
    }
  }
  return own;
}

// Weight version `v` of stage `s` as the spec hands it over, checked against the stage's own
// weights and copied to its device.
models::ParamSet given_version(const PipelineSpec& spec, int s, std::int64_t v,
                               const models::ParamSet& own, const Device& device) {
  const models::ParamSet* given = nullptr;
  if (!spec.older_versions.empty()) {
    const auto& versions = spec.older_versions[static_cast<std::size_t>(s)];
    if (auto it = versions.find(v); it != versions.end()) given = &it->second;
  }
  if (given == nullptr) {
    fail("resuming at minibatch " + std::to_string(spec.first_minibatch) +
         " needs weight version " + std::to_string(v) + " of stage " + std::to_string(s) +
         " (minibatches in flight at the stop use it in forward; the run that stopped "
         "hands it over as Pipeline::older_versions, a checkpoint stores it)");
  }
  models::ParamSet version;
  for (std::int64_t i = 0; i < own.size(); ++i) {
    const std::string& name = own.name(i);
    if (!given->contains(name)) {
      fail("weight version " + std::to_string(v) + " of stage " + std::to_string(s) + " lacks '" +
           name + "'");
    }
    const Tensor& t = given->at(name);
    if (t.shape() != own[i].shape()) {
      fail("weight version " + std::to_string(v) + " of stage " + std::to_string(s) + ": '" + name +
           "' has another shape than the model's");
    }
    version.add(name, t.device() == device ? t.clone() : t.to(device));
  }
  return version;
}

// The versions the minibatches in flight at a resumed run's start use (numbered as in the
// training), from `oldest` up to the stage's first update round.
std::map<std::int64_t, models::ParamSet> resumed_versions(const PipelineSpec& spec, int s,
                                                          std::int64_t oldest,
                                                          std::int64_t first_round,
                                                          const models::ParamSet& own,
                                                          const Device& device) {
  std::map<std::int64_t, models::ParamSet> out;
  for (std::int64_t v = oldest; v < first_round; ++v) {
    out[v] = device.has_data() ? given_version(spec, s, v, own, device) : own;  // sim: shapes
  }
  return out;
}

// Each minibatch's slices joined in sample order; every sample must have arrived once.
std::vector<Tensor> assemble_outputs(
    const std::map<std::pair<std::int64_t, std::int64_t>, Tensor>& parts,
    const schedules::ScheduleParams& params) {
  std::vector<Tensor> out;
  auto it = parts.begin();
  for (std::int64_t b = 0; b < params.minibatches; ++b) {
    std::vector<Tensor> rows;
    std::int64_t next = 0;
    for (; it != parts.end() && it->first.first == b; ++it) {
      if (it->first.second != next) break;
      next += it->second.dim(0);
      rows.push_back(it->second);
    }
    if (next != params.samples()) {
      throw PipelineError(PipelineError::Kind::internal,
                          "pipeline: the outputs of minibatch " + std::to_string(b) +
                              " cover samples [0," + std::to_string(next) + ") of " +
                              std::to_string(params.samples()));
    }
    out.push_back(rows.size() == 1 ? rows.front() : concat_rows(rows));
  }
  return out;
}

}  // namespace

struct Pipeline::Impl {
  // First, so destroyed last: a channel's thread may report a failure (stop_with_error) while
  // the channel below is being closed.
  std::mutex error_mu;
  std::vector<ActorError> errors;
  std::shared_ptr<const schedules::Routing> routing;
  std::vector<std::vector<int>> tie_stages;  // per model tie (actors/stage_ties.hpp)
  std::shared_ptr<const models::GradNormLayout> norm_layout;  // clipping only
  std::unique_ptr<transport::ActorChannel> channel;
  transport::LocalCollectives collectives;
  std::vector<StageActor*> stages;  // by device
  LoaderActor* loader = nullptr;
  Coordinator* coordinator = nullptr;
  std::optional<schedules::ActionList> order;
  std::optional<schedules::Schedule> schedule;  // without a custom order: the actions' source
  std::atomic<bool> running{false};             // inside run(): progress() may report work
};

bool global_norm_sync(const PipelineSpec& spec) {
  const schedules::ScheduleKind kind = spec.plan.schedule.kind;
  return spec.clip_grad_norm.has_value() && !schedules::is_asynchronous(kind) &&
         schedules::trains(kind);
}

std::vector<std::vector<int>> spread_tie_stages(const PipelineSpec& spec) {
  if (spec.model == nullptr || spec.model->ties().empty()) return {};
  return spread_ties(tie_stages(*spec.model, virtual_stage_layers(spec), spec.plan.schedule));
}

Pipeline::Pipeline(PipelineSpec spec, std::unique_ptr<Scheduler> scheduler)
    : spec_(std::move(spec)), impl_(std::make_unique<Impl>()) {
  validate();
  const std::vector<LayerRange> vlayers = virtual_stage_layers(spec_);
  // Stages that share a tied parameter sum its gradients at a SYNC of every round.
  impl_->tie_stages = tie_stages(*spec_.model, vlayers, spec_.plan.schedule);
  spec_.plan.schedule.tied_stages = spread_ties(impl_->tie_stages);
  spec_.plan.schedule.global_sync = global_norm_sync(spec_);
  if (spec_.clip_grad_norm) {
    impl_->norm_layout = std::make_shared<const models::GradNormLayout>(*spec_.model);
  }
  prove_runnable(vlayers);
  start_system(std::move(scheduler));
  spawn_stages(vlayers);
  spawn_loader_and_coordinator();
}

void Pipeline::validate() {
  check_spec(spec_);
  // Minibatch b of this run is minibatch first + b of the training; the source's failures are
  // named by that.
  spec_.data = [data = std::move(spec_.data), first = spec_.first_minibatch](std::int64_t b) {
    try {
      return data(first + b);
    } catch (const std::exception& e) {
      throw DataSourceError(e.what(), first + b);
    }
  };
  spec_.plan.validate(spec_.model->num_layers());
}

void Pipeline::prove_runnable(const std::vector<LayerRange>& vlayers) {
  // A graph model's tensors travel along their edges, straight to the stages that read them.
  std::vector<schedules::TensorEdge> edges = tensor_edges(*spec_.model, vlayers, spec_.relay_skips);
  if (spec_.order) {
    check_order(*spec_.order, spec_.plan.schedule);
    impl_->order = spec_.order;
    impl_->routing = std::make_shared<schedules::Routing>(*impl_->order, std::move(edges));
  } else {
    check_schedule(spec_.plan.schedule);
    impl_->schedule.emplace(spec_.plan.schedule);
    impl_->routing = std::make_shared<schedules::Routing>(spec_.plan.schedule, std::move(edges));
  }
}

void Pipeline::start_system(std::unique_ptr<Scheduler> scheduler) {
  system_ = std::make_unique<ActorSystem>(std::move(scheduler));
  system_->set_error_handler([impl = impl_.get()](const ActorError& e) {
    std::lock_guard lock(impl->error_mu);
    impl->errors.push_back(e);
  });
  impl_->channel = spec_.make_channel ? spec_.make_channel(*system_)
                                      : std::make_unique<transport::LocalChannel>(*system_);
  if (!impl_->channel) fail("make_channel made no channel");
  check_replicas_placement();
}

void Pipeline::spawn_stages(const std::vector<LayerRange>& vlayers) {
  const models::ParamSet whole = initial_weights(spec_);
  const int share = cpu_share(spec_);
  for (int d = 0; d < impl_->routing->params().total_replicas(); ++d) {
    StageActor* actor = nullptr;
    if (runs_here(d)) {
      const auto& p = impl_->routing->params();
      actor = system_->spawn<StageActor>(
          "stage" + std::to_string(p.stage_of(d)) + ".r" + std::to_string(p.replica_of(d)),
          stage_setup(d, vlayers, whole, share));
      impl_->channel->bind(d, actor);
    }
    impl_->stages.push_back(actor);  // nullptr: runs in another process
  }
}

bool Pipeline::runs_here(transport::Endpoint e) const {
  return !spec_.hosts || spec_.hosts(e);
}

void Pipeline::check_replicas_placement() const {
  const auto& p = impl_->routing->params();
  for (int s = 0; s < p.stages && spec_.collectives == nullptr; ++s) {
    for (int r = 1; r < p.replicas_of(s); ++r) {
      if (runs_here(p.device_of(s, r)) != runs_here(p.device_of(s, 0))) {
        fail("stage " + std::to_string(s) +
             "'s replicas run in several processes; a stage's replicas must share one unless "
             "PipelineSpec::collectives reduces across processes");
      }
    }
  }
}

ActionSource Pipeline::stage_actions(int d) const {
  schedules::InPlaceUpdates::Source source;
  if (impl_->order) {
    const std::vector<schedules::Action>* list = &impl_->order->devices[d];
    source = [list, i = std::size_t{0}]() mutable -> std::optional<schedules::Action> {
      if (i == list->size()) return std::nullopt;
      return (*list)[i++];
    };
  } else {
    auto gen = std::make_shared<schedules::ActionGenerator>(impl_->schedule->generator(d));
    source = [gen] { return gen->next(); };
  }
  // The schedule's decisions the actor obeys: where an update may be written in place.
  auto lowered = std::make_shared<schedules::InPlaceUpdates>(std::move(source));
  return [lowered] { return lowered->next(); };
}

StageSetup Pipeline::stage_setup(int d, const std::vector<LayerRange>& vlayers,
                                 const models::ParamSet& whole, int cpu_threads) {
  const auto& p = impl_->routing->params();
  const int s = p.stage_of(d);
  const int r = p.replica_of(d);
  const Device device = Device::parse(spec_.plan.stages[s].replicas[r].device);
  StageSetup setup;
  setup.device = d;
  setup.model = spec_.model;
  for (int c = 0; c < p.chunks; ++c) {
    setup.chunk_layers.push_back(vlayers[static_cast<std::size_t>(p.virtual_stage(s, c))]);
  }
  setup.routing = impl_->routing;
  setup.tie_stages = impl_->tie_stages;
  setup.actions = stage_actions(d);
  setup.params = own_weights(spec_, setup.chunk_layers, device, whole);
  setup.first_minibatch = spec_.first_minibatch;
  setup.first_round = schedules::update_rounds(p, s, spec_.first_minibatch);
  setup.older_versions =
      resumed_versions(spec_, s, schedules::weight_version(p, s, spec_.first_minibatch),
                       setup.first_round, setup.params, device);
  try {
    setup.optimizer = models::make_optimizer(spec_.optimizer, spec_.async_correction,
                                             schedules::update_delay(p, s));
  } catch (const std::invalid_argument& e) {
    fail("stage " + std::to_string(s) + ": " + e.what());
  }
  // Buffers (batch norm's running statistics) are updated by their layers, not trained.
  setup.optimizer->attach(*spec_.model);
  if (!spec_.optimizer_states.empty()) {
    const OptimizerState& os = spec_.optimizer_states[static_cast<std::size_t>(s)];
    try {
      setup.optimizer->load_state(os.state, os.steps, setup.params);
    } catch (const models::OptimizerStateError& e) {
      fail("optimizer state of stage " + std::to_string(s) + ": " + e.what());
    }
  }
  setup.minibatches = p.minibatches;
  // A sim stage's STEP also updates its own layers' weights (SimCosts::step_ms).
  models::SimCosts costs = spec_.sim_costs;
  for (const schedules::LayerRange& chunk : setup.chunk_layers) {
    for (int l = chunk.begin; l < chunk.end; ++l) costs.optimizer_step_ms += costs.layer_step(l);
  }
  setup.executor = spec_.make_executor
                       ? spec_.make_executor(device, cpu_threads)
                       : models::make_executor(device, costs, cpu_threads, spec_.matmul_precision);
  if (!setup.executor) fail("make_executor returned no executor for " + device.str());
  if (spec_.wire_dtype != DType::f32 && spec_.wire_dtype != DType::bf16) {
    fail("wire_dtype " + std::string(dtype_name(spec_.wire_dtype)) +
         ": tensors between stages travel in f32 or bf16");
  }
  setup.wire_dtype = spec_.wire_dtype;
  setup.channel = impl_->channel.get();
  setup.collectives = spec_.collectives != nullptr ? spec_.collectives : &impl_->collectives;
  setup.loader = p.total_replicas();
  setup.coordinator = p.total_replicas() + 1;
  setup.seed = spec_.seed;
  setup.weight_stashing = spec_.weight_stashing;
  // A clipped update needs every gradient's norm before any update.
  setup.fuse_updates = spec_.fuse_updates && !spec_.clip_grad_norm;
  setup.observer = spec_.observer;
  setup.lr_at = spec_.lr_at;
  setup.norm_layout = impl_->norm_layout;
  setup.clip_norm = spec_.clip_grad_norm;
  const NormReports norms = norm_reports();
  setup.report_norm = norms.kind == NormReports::Kind::global
                          ? d == 0
                          : norms.kind != NormReports::Kind::none && r == 0;
  return setup;
}

NormReports Pipeline::norm_reports() const {
  const schedules::ScheduleParams& p = spec_.plan.schedule;
  if (!spec_.clip_grad_norm) return {};
  if (p.global_sync) return {NormReports::Kind::global, p.stages};
  for (int s = 0; s < p.stages; ++s) {
    if (p.replicas_of(s) > 1) return {};
  }
  return {NormReports::Kind::per_stage, p.stages};
}

void Pipeline::spawn_loader_and_coordinator() {
  // Stage replica d is endpoint d, the loader R, the coordinator R + 1.
  const int R = impl_->routing->params().total_replicas();
  if (runs_here(R)) {
    LoaderSetup ls;
    ls.routing = impl_->routing;
    ls.data = spec_.data;
    ls.minibatches = impl_->routing->params().minibatches;
    ls.stage_replicas = R;
    ls.channel = impl_->channel.get();
    ls.self = R;
    ls.on_event = spec_.on_event;
    ls.fetch_stop = spec_.fetch_stop;
    impl_->loader = system_->spawn<LoaderActor>("loader", std::move(ls));
    impl_->channel->bind(R, impl_->loader);
  }
  if (runs_here(R + 1)) {
    MinibatchCallback progress;
    if (spec_.on_minibatch) {
      progress = [cb = spec_.on_minibatch, first = spec_.first_minibatch](std::int64_t b,
                                                                          const MinibatchLoss& l) {
        MinibatchReport report;
        report.loss = l.rows > 0 ? l.loss_sum / static_cast<double>(l.rows) : 0.0;
        report.correct = l.correct;
        report.rows = l.rows;
        report.grad_norm = l.grad_norm;
        cb(first + b, report);
      };
    }
    impl_->coordinator = system_->spawn<Coordinator>("coordinator", R, std::move(progress),
                                                     spec_.on_event, norm_reports());
    impl_->channel->bind(R + 1, impl_->coordinator);
  }
}

Pipeline::~Pipeline() {
  if (system_) system_->stop();
}

PipelineResult Pipeline::run() {
  if (ran_) throw std::logic_error("Pipeline::run called twice");
  ran_ = true;
  impl_->running.store(true, std::memory_order_release);
  struct Over {
    Impl* impl;
    ~Over() { impl->running.store(false, std::memory_order_release); }
  } over{impl_.get()};
  const auto start = std::chrono::steady_clock::now();
  for (StageActor* s : impl_->stages) {
    if (s != nullptr) (void)system_->send(s, StartRun{});
  }
  if (impl_->loader != nullptr) (void)system_->send(impl_->loader, StartRun{});
  // Done when this process's stages are, and, where the coordinator runs, when it heard from
  // every stage. With every endpoint here, an idle system that is not done went quiet (an
  // error); with endpoints elsewhere, an idle system waits for their messages (a channel that
  // loses its peer stops the system, which ends the wait).
  bool all_here = impl_->loader != nullptr && impl_->coordinator != nullptr;
  for (const StageActor* s : impl_->stages) all_here = all_here && s != nullptr;
  const auto done = [this] {
    for (const StageActor* s : impl_->stages) {
      if (s != nullptr && !s->done()) return false;
    }
    return impl_->coordinator == nullptr || impl_->coordinator->all_finished();
  };
  for (;;) {
    system_->wait_idle();
    if (all_here || done() || system_->stopped()) break;
    {
      std::lock_guard lock(impl_->error_mu);
      if (!impl_->errors.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  system_->wait_idle();
  PipelineResult result;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  {
    std::lock_guard lock(impl_->error_mu);
    if (!impl_->errors.empty()) {
      const ActorError& e = impl_->errors.front();
      system_->stop();
      if (e.actor.empty()) {
        throw PipelineError(PipelineError::Kind::stopped, "pipeline stopped: " + e.what);
      }
      throw PipelineError(PipelineError::Kind::failed,
                          "pipeline stopped: actor '" + e.actor + "' failed: " + e.what,
                          e.exception);
    }
  }
  if (!done()) {
    std::string waits;
    for (const StageActor* s : impl_->stages) {
      if (s == nullptr) continue;
      const std::string w = s->describe_wait();
      if (!w.empty()) waits += "\n  " + w;
    }
    const bool stopped = system_->stopped();
    system_->stop();
    if (stopped) {
      throw PipelineError(PipelineError::Kind::stopped,
                          "pipeline stopped before its end: its actor system was stopped (a "
                          "channel that lost its peer stops it)" +
                              (waits.empty() ? std::string() : ":" + waits));
    }
    const int finished = impl_->coordinator != nullptr ? impl_->coordinator->finished() : 0;
    throw PipelineError(PipelineError::Kind::quiet, "pipeline went quiet before its end (" +
                                                        std::to_string(finished) + " of " +
                                                        std::to_string(impl_->stages.size()) +
                                                        " stage replicas finished):" + waits);
  }
  if (impl_->coordinator != nullptr) {
    for (const auto& [b, l] : impl_->coordinator->losses()) {
      (void)b;
      result.losses.push_back(l.rows > 0 ? l.loss_sum / static_cast<double>(l.rows) : 0.0);
    }
  }
  if (impl_->coordinator != nullptr && !schedules::trains(impl_->routing->params().kind)) {
    result.outputs = assemble_outputs(impl_->coordinator->outputs(), impl_->routing->params());
  }
  for (const StageActor* s : impl_->stages) {
    if (s != nullptr) result.stages.push_back(s->stats());
  }
  result.minibatches = impl_->loader != nullptr ? impl_->loader->minibatches()
                                                : impl_->routing->params().minibatches;
  result.loader_peak_in_flight = impl_->loader != nullptr ? impl_->loader->peak_in_flight() : 0;
  return result;
}

PipelineProgress Pipeline::progress() const {
  PipelineProgress out;
  const bool running = impl_->running.load(std::memory_order_acquire);
  for (const StageActor* s : impl_->stages) {
    if (s == nullptr) continue;
    const StageProgress p = s->progress();
    out.completed += p.events;
    if (!running || !p.has_work()) continue;
    out.has_work = true;
    out.waiting_for += out.waiting_for.empty() ? "" : "\n";
    out.waiting_for += p.describe();
  }
  if (impl_->loader != nullptr) {
    add_progress(out, running, "loader", impl_->loader->gauge(), impl_->loader->inbox_size());
  }
  if (impl_->coordinator != nullptr) {
    add_progress(out, running, "coordinator", impl_->coordinator->gauge(),
                 impl_->coordinator->inbox_size());
  }
  return out;
}

void Pipeline::request_stop() {
  // The loader picks the stop: without it here, there is nothing to ask.
  if (impl_->loader == nullptr) return;
  // A fetch the stop does not need is cancelled now: the loader, blocked in it, would otherwise
  // see the request only once the fetch returns.
  if (spec_.fetch_stop) {
    spec_.fetch_stop->stop([routing = impl_->routing](std::int64_t b) {
      return schedules::stop_boundary(routing->params(), b) <= b;
    });
  }
  // The system refuses sends once stopped: the run is over then, nothing to stop.
  (void)system_->send(impl_->loader, StopRequest{});
}

void Pipeline::stop_with_error(std::string why) {
  {
    std::lock_guard lock(impl_->error_mu);
    // An empty actor name marks a failure from outside the actors.
    impl_->errors.push_back(ActorError{"", "", std::move(why)});
  }
  system_->stop();
}

int Pipeline::hosted_replica(int s, int preferred) const {
  // Replicas agree at the run's end: any one here stands for the stage.
  if (hosts_stage(s, preferred)) return preferred;
  for (int r = 0; r < impl_->routing->params().replicas_of(s); ++r) {
    if (hosts_stage(s, r)) return r;
  }
  return preferred;
}

bool Pipeline::hosts_stage(int stage, int replica) const {
  const auto& p = impl_->routing->params();
  return impl_->stages.at(static_cast<std::size_t>(p.device_of(stage, replica))) != nullptr;
}

namespace {

// What leaves the pipeline (checkpoints, evaluation, a resumed run's inputs) is on the CPU,
// whatever device a stage computed on; cpu and sim tensors are returned as they are.
models::ParamSet on_host(const models::ParamSet& p) {
  models::ParamSet out;
  for (std::int64_t i = 0; i < p.size(); ++i) {
    out.add(p.name(i), p[i].device().is_cuda() ? p[i].to(Device::cpu()) : p[i]);
  }
  return out;
}

}  // namespace

OptimizerState Pipeline::optimizer_state(int s) const {
  const models::Optimizer& o = stage(s, hosted_replica(s, 0)).optimizer();
  return {on_host(o.state()), o.steps()};
}

std::map<std::int64_t, models::ParamSet> Pipeline::older_versions(int s) const {
  std::map<std::int64_t, models::ParamSet> out;
  for (const auto& [v, params] : stage(s, hosted_replica(s, 0)).older_versions()) {
    out.emplace(v, on_host(*params));
  }
  return out;
}

const StageActor& Pipeline::stage(int stage, int replica) const {
  const auto& p = impl_->routing->params();
  const StageActor* s = impl_->stages.at(static_cast<std::size_t>(p.device_of(stage, replica)));
  if (s == nullptr) {
    throw std::out_of_range("pipeline: stage " + std::to_string(stage) + " replica " +
                            std::to_string(replica) + " runs in another process");
  }
  return *s;
}

models::ParamSet Pipeline::params(int replica) const {
  const auto& p = impl_->routing->params();
  models::ParamSet out;
  for (int s = 0; s < p.stages; ++s) {
    const int r = hosted_replica(s, std::min(replica, p.replicas_of(s) - 1));
    if (hosts_stage(s, r)) out.merge(on_host(stage(s, r).latest_params()));
  }
  return out;
}

}  // namespace tandem::actors
