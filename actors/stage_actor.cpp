#include "actors/stage_actor.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "actors/action_error.hpp"
#include "actors/messages.hpp"
#include "actors/step_seed.hpp"
#include "runtime/actor_system.hpp"
#include "schedules/pipeline_rules.hpp"
#include "schedules/weight_versions.hpp"

namespace tandem::actors {
namespace {

using schedules::Op;
using schedules::Port;
using schedules::Route;
using schedules::Slice;
using Clock = std::chrono::steady_clock;

// Rows [lo, hi) of a tensor whose row 0 is sample `first`.
Tensor rows(const Tensor& t, std::int64_t first, std::int64_t lo, std::int64_t hi) {
  if (lo == first && hi - lo == t.dim(0)) return t;
  return t.slice(lo - first, hi - first);
}

}  // namespace

StageActor::StageActor(std::string name, StageSetup setup)
    : Actor(std::move(name)),
      s_(std::move(setup)),
      params_(s_.routing->params()),
      versions_(std::move(s_.params), s_.first_round, std::move(s_.older_versions)),
      activations_(s_.model, s_.chunk_layers),
      end_(s_.minibatches) {
  stage_ = params_.stage_of(s_.device);
  replica_ = params_.replica_of(s_.device);
  stats_.device = s_.device;
  stats_.stage = stage_;
  stats_.replica = replica_;
  stats_.device_name = s_.executor->device().str();
  holds_ = s_.executor->uses_memory_after_return();
  stats_.peak_versions = versions_.held();
  std::vector<int> vstages;
  for (int c = 0; c < params_.chunks; ++c) vstages.push_back(vstage(c));
  edges_ = StageEdges(*s_.model, s_.chunk_layers, vstages, *s_.routing);
  ties_ = StageTies(*s_.model, s_.tie_stages, params_, stage_);
  written_.assign(static_cast<std::size_t>(params_.chunks), false);
  const models::ParamSet& w = versions_.get(versions_.latest());
  for (const Tensor& t : w.range(0, w.size())) stats_.weight_bytes += t.nbytes();
}

int StageActor::vstage(int chunk) const {
  return params_.virtual_stage(stage_, chunk);
}

bool StageActor::last_vstage(int chunk) const {
  return vstage(chunk) == params_.stages * params_.chunks - 1;
}

void StageActor::note_memory() {
  stats_.peak_bytes =
      std::max(stats_.peak_bytes, versions_.held() * stats_.weight_bytes + activations_.bytes());
}

std::string StageActor::where(const Action& a) const {
  std::string out = "stage " + std::to_string(stage_) + " replica " + std::to_string(replica_) +
                    " (d" + std::to_string(s_.device) + ", " + stats_.device_name + ") " +
                    schedules::to_string(a);
  // A resumed or segmented run counts its actions from its own start.
  if (s_.first_minibatch > 0 && (a.op == Op::F || a.op == Op::B || a.op == Op::W)) {
    out += " (minibatch ";
    out += std::to_string(s_.first_minibatch + a.minibatch);
    out += " of the training)";
  }
  return out;
}

void StageActor::on_message(Message& msg) {
  handling_.store(true, std::memory_order_relaxed);
  try {
    handle(msg);
  } catch (...) {
    // The actor stops with this error: it runs nothing more.
    publish_running(std::nullopt);
    handling_.store(false, std::memory_order_release);
    throw;
  }
  publish();
  handling_.store(false, std::memory_order_release);
  // After handling_ is cleared: a reader that sees this count sees the handler over.
  events_.fetch_add(1, std::memory_order_release);
}

bool StageActor::handle_next(Lanes& lanes) {
  // The message handled now counts as taken until its handler returned.
  taken_.store(lanes.size(), std::memory_order_relaxed);
  const bool handled = Actor::handle_next(lanes);
  taken_.store(lanes.size(), std::memory_order_relaxed);
  return handled;
}

void StageActor::publish_running(const std::optional<Action>& a) {
  std::lock_guard lock(progress_mu_);
  published_.running = a;
  published_.running_since = started_;
}

void StageActor::publish() {
  const Pending* oldest = pending_.empty() ? nullptr : &pending_.begin()->second;
  std::optional<Action> next;
  if (have_current_ && !running_ && !finished_) next = ahead_.front();
  // Only this worker writes published_, so it reads it without the lock, and locks only to
  // change it: most messages (an input stored while the action waits for another) change
  // nothing it shows.
  const Published& was = published_;
  const bool same_oldest =
      oldest == nullptr ? !was.oldest_op
                        : was.oldest_op == oldest->action && was.oldest_since == oldest->submitted;
  if (same_oldest && was.device_ops == pending_.size() && was.syncing == running_ &&
      was.next == next && was.finished == finished_) {
    return;
  }
  std::lock_guard lock(progress_mu_);
  Published& p = published_;
  p.device_ops = pending_.size();
  p.oldest_op.reset();
  if (oldest != nullptr) {
    p.oldest_op = oldest->action;
    p.oldest_since = oldest->submitted;
  }
  p.syncing = running_;
  p.next = next;
  p.finished = finished_;
}

StageProgress StageActor::progress() const {
  StageProgress out;
  out.stage = stage_;
  out.replica = replica_;
  out.events = events_.load(std::memory_order_acquire);
  out.handling = handling_.load(std::memory_order_acquire);
  out.unhandled = taken_.load(std::memory_order_relaxed) + inbox_size();
  const auto now = Clock::now();
  std::lock_guard lock(progress_mu_);
  const Published& p = published_;
  out.finished = p.finished;
  out.running = p.running;
  if (p.running) out.running_s = std::chrono::duration<double>(now - p.running_since).count();
  out.device_ops = p.device_ops;
  out.oldest_op = p.oldest_op;
  if (p.oldest_op) out.oldest_op_s = std::chrono::duration<double>(now - p.oldest_since).count();
  out.syncing = p.syncing;
  out.next = p.next;
  return out;
}

// Every message is stored or acted on as it arrives (the runtime's default lane order): the
// schedule, not the lane, orders the actions.
void StageActor::handle(Message& msg) {
  if (msg.is<ForwardTensor>() || msg.is<BackwardTensor>()) {
    store(msg, msg.is<ForwardTensor>());
  } else if (msg.is<OpDone>()) {
    auto it = pending_.find(msg.as<OpDone>().seq);
    if (it == pending_.end()) {
      throw std::logic_error("stage " + std::to_string(stage_) + ": completion of op " +
                             std::to_string(msg.as<OpDone>().seq) + ", which is not in flight");
    }
    if (it->second.done.recorded()) {
      if (const auto took = it->second.done.elapsed_since(it->second.started)) {
        stats_.busy_s += std::chrono::duration<double>(*took).count();
      }
      if (const std::exception_ptr failure = it->second.done.error()) {
        try {
          std::rethrow_exception(failure);
        } catch (const std::exception& e) {
          throw std::runtime_error("stage " + std::to_string(stage_) + " replica " +
                                   std::to_string(replica_) + " (" + stats_.device_name +
                                   "): device work failed: " + e.what());
        }
      }
    }
    flush(it->second.sends);
    pending_.erase(it);
  } else if (msg.is<SyncDone>()) {
    if (!running_) throw std::logic_error("stage: SYNC completion without a SYNC in flight");
    ++sync_phase_;
    if (!start_sync_phase()) {
      running_ = false;
      complete();
    }
  } else if (msg.is<StopAt>()) {
    stop_at(msg.as<StopAt>().minibatches);
  } else if (!msg.is<StartRun>()) {
    throw std::invalid_argument("stage " + std::to_string(stage_) + ": unexpected message '" +
                                std::string(message_type_name(msg.type())) + "' from actor " +
                                std::to_string(msg.env.source));
  }
  advance();
}

void StageActor::store(Message& msg, bool forward_lane) {
  const Tag& tag = msg.tag();
  const auto port = static_cast<Port>(tag.kind);
  const TensorMeta meta =
      forward_lane ? msg.as<ForwardTensor>().meta : msg.as<BackwardTensor>().meta;
  const std::string what = std::string(schedules::to_string(port)) + " of minibatch " +
                           std::to_string(tag.minibatch) + " samples " +
                           schedules::to_string(Slice{tag.begin, tag.end}) + " from actor " +
                           std::to_string(msg.env.source);
  const bool port_ok =
      forward_lane ? (port == Port::input || port == Port::target || port == Port::activation)
                   : port == Port::gradient;
  const bool edge_ok = edges_.graph() ? tag.aux < s_.routing->edges().size() : tag.aux == 0;
  if (!port_ok || !edge_ok || tag.minibatch < 0 || tag.end <= tag.begin ||
      tag.chunk >= params_.chunks) {
    throw std::invalid_argument("stage " + std::to_string(stage_) + ": malformed message: " + what);
  }
  if (msg.tensors.size() != 1 || !meta.describes(msg.tensors.front()) ||
      msg.tensors.front().dim(0) != tag.end - tag.begin) {
    throw std::invalid_argument("stage " + std::to_string(stage_) + ": " + what +
                                ": the tensor does not match its envelope");
  }
  const bool inserted = received_.put(port, tag.chunk, tag.minibatch, tag.begin, tag.end,
                                      msg.tensors.front(), meta.rows_total, tag.aux);
  stats_.peak_received = std::max(stats_.peak_received, received_.size());
  if (!inserted) {
    throw std::invalid_argument("stage " + std::to_string(stage_) + ": duplicate " + what);
  }
}

std::optional<schedules::Action> StageActor::pull() {
  while (!source_done_) {
    auto a = s_.actions();
    if (!a) {
      source_done_ = true;
      break;
    }
    if (schedules::runs_before(params_, stage_, *a, stop_at_)) return a;
  }
  return std::nullopt;
}

void StageActor::stop_at(std::int64_t minibatches) {
  stop_at_ = minibatches;
  end_ = std::min(end_, minibatches);
  // What was pulled ahead and is not running goes; the action taken as current only waits for
  // inputs (a running one completes first: SYNC holds running_, and a device op is already
  // submitted and was of an earlier minibatch).
  std::deque<Action> kept;
  for (std::size_t i = 0; i < ahead_.size(); ++i) {
    const bool running_now = i == 0 && have_current_ && running_;
    if (running_now || schedules::runs_before(params_, stage_, ahead_[i], stop_at_)) {
      kept.push_back(ahead_[i]);
    } else if (i == 0) {
      have_current_ = false;  // the next advance() takes the next action that still runs
    }
  }
  ahead_ = std::move(kept);
}

bool StageActor::next_action() {
  if (ahead_.empty()) {
    auto a = pull();
    if (!a) return false;
    ahead_.push_back(*a);
  }
  have_current_ = true;
  s_.routing->routes(s_.device, ahead_.front(), routes_);
  return true;
}

void StageActor::advance() {
  while (!running_ && !finished_) {
    if (!have_current_ && !next_action()) {
      if (pending_.empty()) finish();
      return;
    }
    const Action& a = ahead_.front();
    if (!ready(a)) return;
    execute(a);
    if (!running_) complete();
  }
}

bool StageActor::ready(const Action& a) const {
  // The all-reduce reads the gradients: everything submitted before must be done.
  if (a.op == Op::SYNC) return pending_.empty();
  if (a.op != Op::F && a.op != Op::B) return true;
  return received_.has(a, routes_.inputs);
}

std::string StageActor::describe_wait() const {
  if (finished_) return "";
  std::string out = "stage " + std::to_string(stage_) + " replica " + std::to_string(replica_);
  if (!have_current_) return out + ": no action taken yet";
  const Action& a = ahead_.front();
  out += " at " + schedules::to_string(a);
  if (running_) return out + " (running)";
  if (a.op == Op::SYNC && !pending_.empty()) {
    return out + " waits for " + std::to_string(pending_.size()) + " device ops to complete";
  }
  const std::string missing = received_.missing(a, routes_.inputs);
  return out + " waits for " + (missing.empty() ? "nothing" : missing);
}

void StageActor::execute(const Action& a) {
  started_ = Clock::now();
  publish_running(a);
  sends_.clear();
  ready_in_ = std::chrono::nanoseconds(0);
  ready_ = Event();
  ready_started_ = Event();
  held_.clear();
  try {
    switch (a.op) {
      case Op::F:
        run_forward(a);
        break;
      case Op::B:
        run_backward(a);
        break;
      case Op::W:
        run_weight(a);
        break;
      case Op::SYNC:
        run_sync(a);
        break;
      case Op::STEP:
        run_step(a);
        break;
    }
  } catch (const std::exception& e) {
    std::optional<std::int64_t> minibatch;
    if (a.op == Op::F || a.op == Op::B || a.op == Op::W)
      minibatch = s_.first_minibatch + a.minibatch;
    throw ActionError(where(a) + ": " + e.what(), stage_, replica_, minibatch,
                      std::current_exception());
  }
  ++stats_.actions;
  publish_running(std::nullopt);
  events_.fetch_add(1, std::memory_order_release);
}

void StageActor::charge(const models::Completion& done) {
  stats_.busy_s += std::chrono::duration<double>(done.busy).count();
  ready_in_ = done.ready_in;
  ready_ = done.done;
  ready_started_ = done.started;
}

void StageActor::hold(const Tensor& t) {
  if (holds_ && t.defined()) held_.push_back(t);
}

void StageActor::hold(const models::ParamSet& p) {
  if (!holds_) return;  // a copy per parameter and action, for nothing on cpu and sim
  for (std::int64_t i = 0; i < p.size(); ++i) hold(p[i]);
}

void StageActor::hold(const std::vector<models::Saved>& saved) {
  if (!holds_) return;
  for (const models::Saved& layer : saved) {
    for (const Tensor& t : layer) hold(t);
  }
}

void StageActor::flush(std::vector<Send>& sends) {
  for (Send& s : sends) {
    if (s.make) s.msg = s.make();
    // A peer that stopped has failed or the run is over; its error is reported by itself.
    (void)s_.channel->send(s_.device, s.to, std::move(s.msg));
  }
  sends.clear();
}

void StageActor::complete() {
  const Action a = ahead_.front();
  if (schedules::releases_admission(params_, stage_, a)) {
    sends_.push_back({s_.loader, make_message(Credit{a.minibatch})});
  }
  if (ready_.recorded() || ready_in_.count() > 0) {
    // Submitted to an asynchronous device: what the action sends leaves when the device says
    // it is done; meanwhile the actor goes on with the next action (stream order).
    ++seq_;
    Pending& later = pending_[seq_];
    later.sends.swap(sends_);
    later.action = a;
    later.submitted = started_;
    later.done = ready_;
    later.started = ready_started_;
    // Only an event says when the device is done with them; a sim op touches no memory.
    if (ready_.recorded()) later.held.swap(held_);
    if (ready_.recorded()) {
      system().send_when(ready_, this, make_message(OpDone{seq_}));
    } else {
      system().send_after(ready_in_, this, make_message(OpDone{seq_}));
    }
    ready_in_ = std::chrono::nanoseconds(0);
    ready_ = Event();
    ready_started_ = Event();
    held_.clear();
  } else {
    held_.clear();
    flush(sends_);
  }
  ahead_.pop_front();
  have_current_ = false;
}

void StageActor::finish() {
  finished_ = true;
  stats_.finished = true;
  (void)s_.channel->send(s_.device, s_.coordinator,
                         make_message(StageFinished{static_cast<std::int32_t>(s_.device)}));
  // After the send: a process waiting for its stages may close the channel once they are done.
  done_.store(true, std::memory_order_release);
}

std::int64_t StageActor::version_of(std::int64_t b) const {
  return schedules::weight_version(params_, stage_, s_.first_minibatch + b);
}

std::int64_t StageActor::kept_from() const {
  return version_of(end_);
}

std::map<std::int64_t, const models::ParamSet*> StageActor::older_versions() const {
  auto out = versions_.held_from(kept_from());
  out.erase(versions_.latest());
  return out;
}

std::int64_t StageActor::next_forward_version() {
  // The lookahead after the current action; pull from the schedule until a forward shows.
  for (std::size_t i = 1;; ++i) {
    if (i == ahead_.size()) {
      auto a = pull();
      if (!a) return std::numeric_limits<std::int64_t>::max();
      ahead_.push_back(*a);
    }
    if (ahead_[i].op == Op::F) return version_of(ahead_[i].minibatch);
  }
}

std::optional<models::FusedUpdate> StageActor::begin_fused_update(const Action& a,
                                                                  std::int64_t version) {
  // Whether the schedule allows it at all is the schedule's decision (Action::update_in_place,
  // schedules::InPlaceUpdates); what is checked here is the run's state.
  // Tied copies get their summed gradient before the update, so theirs is never written early.
  if (!s_.fuse_updates || !a.update_in_place || version != versions_.latest() ||
      !s_.executor->device().has_data() || !ties_.empty()) {
    return std::nullopt;
  }
  const std::int64_t min_needed = std::min(next_forward_version(), kept_from());
  if (!versions_.hands_over(min_needed)) return std::nullopt;
  // Someone else holds the weights (an evaluation snapshot): they must not change under it.
  const models::ParamSet& w = versions_.get(version);
  for (std::int64_t i = 0; i < w.size(); ++i) {
    if (!w[i].storage_unique()) return std::nullopt;
    // A buffer's slot takes its layer's statistics, which update_buffers reads at the STEP: an
    // in-place update would add them to the buffer itself.
    if (s_.model->is_buffer(w.name(i))) return std::nullopt;
  }
  // The round's STEP follows, and its round is this backward's minibatch.
  if (s_.lr_at) s_.optimizer->set_lr(s_.lr_at(s_.first_round + a.minibatch));
  std::optional<models::FusedUpdate> update = s_.optimizer->fused_update();
  if (update) fused_next_ = versions_.begin_update(min_needed);
  return update;
}

models::ParamSet& StageActor::grads() {
  if (!grads_) grads_ = versions_.get(versions_.latest()).zeros_like();
  return *grads_;
}

void StageActor::emit(const Action& a, std::int64_t version, const models::ParamSet* weights,
                      const models::ParamSet* grads, Clock::time_point start) {
  if (!s_.observer) return;
  StageEvent e;
  e.device = s_.device;
  e.stage = stage_;
  e.replica = replica_;
  e.action = a;
  e.version = version;
  e.weights = weights;
  e.grads = grads;
  e.start = start;
  e.end = Clock::now();
  e.device_started = ready_started_;
  e.device_done = ready_;
  s_.observer(e);
}

void StageActor::run_forward(const Action& a) {
  if (!schedules::trains(params_.kind)) {
    run_forward_only(a);
    return;
  }
  const schedules::LayerRange layers = s_.chunk_layers.at(static_cast<std::size_t>(a.chunk));
  const bool last = last_vstage(a.chunk);
  const ChunkEdges* ce = edges_.graph() ? &edges_.chunk(a.chunk) : nullptr;
  std::uint32_t rows_total = 0;
  ForwardInputs in = take_forward_inputs(a, ce);
  Tensor& x = in.x;
  std::vector<Tensor>& ins = in.reads;
  Tensor targets = last ? received_.take(a, routes_.inputs, Port::target, &rows_total) : Tensor();
  const std::int64_t v = version_of(a.minibatch);
  versions_.pin(v);
  const models::ParamSet& weights = versions_.get(v);

  models::Context ctx;
  ctx.training = true;
  ctx.keep_saved = !a.recompute;
  ctx.seed = step_seed(s_.seed, s_.first_minibatch + a.minibatch);
  ctx.sample_begin = a.slice.begin;
  KeptForward fwd;
  fwd.slice = a.slice;
  fwd.version = v;
  fwd.recompute = a.recompute;
  if (a.recompute) {
    fwd.input = x;
    fwd.inputs = ins;
  }
  Tensor y;
  std::vector<Tensor> outputs;
  models::LossResult loss;
  // What the work reads, held before it runs; what it writes, after.
  hold(x);
  for (const Tensor& t : ins) hold(t);
  hold(targets);
  hold(weights);
  const models::Completion device_time = s_.executor->run(ctx, [&](const models::Context& c) {
    models::Model::RangeForward r =
        ce != nullptr ? s_.model->forward(c, weights, ins, layers.begin, layers.end)
                      : s_.model->forward(c, weights, x, layers.begin, layers.end);
    if (!a.recompute) fwd.saved = std::move(r.saved);
    y = std::move(r.y);
    if (ce != nullptr) outputs = std::move(r.outputs);
    if (last) {
      const float scale = 1.0f / static_cast<float>(std::max<std::uint32_t>(1, rows_total));
      loss = s_.executor->loss(c, s_.model->loss(), y, targets, scale);
    }
  });
  if (last) {
    fwd.dlogits = loss.dlogits;
    Tag tag;
    tag.minibatch = a.minibatch;
    tag.begin = static_cast<std::int32_t>(a.slice.begin);
    tag.end = static_cast<std::int32_t>(a.slice.end);
    // Built when the loss is known: at once on the CPU, at the device's completion otherwise.
    models::LossResult sums = loss;
    sums.dlogits = Tensor();  // kept by the forward; the report needs only the sums
    auto report = [sums, rows_total, tag] {
      const models::LossResult l = sums.resolved();
      return make_message(LossReport{l.loss_sum, static_cast<std::int32_t>(l.count),
                                     static_cast<std::int32_t>(l.correct), rows_total},
                          {}, tag);
    };
    sends_.push_back({s_.coordinator, Message{}, report});
  } else {
    send_forward(a, ce, y, outputs, in);
  }
  hold(y);
  hold(fwd.saved);
  activations_.keep(a.chunk, a.minibatch, std::move(fwd));
  stats_.peak_activations = activations_.peak();
  note_memory();
  charge(device_time);
  emit(a, v, &weights, nullptr, started_);
}

void StageActor::run_forward_only(const Action& a) {
  const schedules::LayerRange layers = s_.chunk_layers.at(static_cast<std::size_t>(a.chunk));
  const bool last = last_vstage(a.chunk);
  const ChunkEdges* ce = edges_.graph() ? &edges_.chunk(a.chunk) : nullptr;
  ForwardInputs in = take_forward_inputs(a, ce);
  const Tensor& x = in.x;
  const std::vector<Tensor>& ins = in.reads;
  // No STEP ever publishes another version, and no backward needs this one later: nothing to pin.
  const std::int64_t v = version_of(a.minibatch);
  const models::ParamSet& weights = versions_.get(v);
  // What Model::forward computes for evaluation: no dropout, nothing kept.
  models::Context ctx;
  ctx.training = false;
  ctx.keep_saved = false;
  ctx.sample_begin = a.slice.begin;
  Tensor y;
  std::vector<Tensor> outputs;
  hold(x);
  for (const Tensor& t : ins) hold(t);
  hold(weights);
  const models::Completion device_time = s_.executor->run(ctx, [&](const models::Context& c) {
    models::Model::RangeForward r =
        ce != nullptr ? s_.model->forward(c, weights, ins, layers.begin, layers.end)
                      : s_.model->forward(c, weights, x, layers.begin, layers.end);
    y = std::move(r.y);
    if (ce != nullptr) outputs = std::move(r.outputs);
  });
  if (last) {
    Tag tag;
    tag.minibatch = a.minibatch;
    tag.begin = static_cast<std::int32_t>(a.slice.begin);
    tag.end = static_cast<std::int32_t>(a.slice.end);
    // Copied to the host once the device is done with it: the coordinator may run anywhere.
    auto report = [y, tag] {
      Tensor host = y.device().is_cuda() ? y.to(Device::cpu()) : y;
      const TensorMeta meta = TensorMeta::of(host);
      return make_message(OutputTensor{meta}, {host}, tag);
    };
    sends_.push_back({s_.coordinator, Message{}, report});
  } else {
    send_forward(a, ce, y, outputs, in);
  }
  hold(y);
  note_memory();
  charge(device_time);
  emit(a, v, &weights, nullptr, started_);
}

void StageActor::run_backward(const Action& a) {
  const schedules::LayerRange layers = s_.chunk_layers.at(static_cast<std::size_t>(a.chunk));
  const bool last = last_vstage(a.chunk);
  const bool need_dx = vstage(a.chunk) > 0;
  const ChunkEdges* ce = edges_.graph() ? &edges_.chunk(a.chunk) : nullptr;

  // The forwards' state over this backward's samples (UMPIPE: cut from several, joined below).
  BackwardState kept = activations_.take_for_backward(a.chunk, a.minibatch, a.slice);
  const std::int64_t version = s_.weight_stashing ? kept.version : versions_.latest();
  Tensor dy;
  EdgeTensors received;
  if (ce != nullptr) {
    received = take_edges(a, Port::gradient, ce->gradient_out);
  } else {
    dy = last ? kept.dlogits : arrived(received_.take(a, routes_.inputs, Port::gradient, nullptr));
  }
  // A split backward's W holds the version until it ran.
  if (!a.with_weight) versions_.pin(version);
  for (const std::int64_t v : kept.released) versions_.unpin(v);

  // Plain SGD on a round of one backward (a one-stage run, PipeDream's last stage): the update
  // goes straight into the weights, in the weight-gradient GEMMs, and no gradient is stored.
  const std::optional<models::FusedUpdate> fused = begin_fused_update(a, version);
  const models::ParamSet& weights = fused ? *fused_next_ : versions_.get(version);
  models::ParamSet& g = fused ? *fused_next_ : grads();
  // The round's first weight gradient is written, not added: no zeroing pass over the
  // gradients, and they are not read.
  const float alpha = fused ? fused->alpha : 1.0f;
  const float beta = fused ? fused->beta : fresh(a.chunk) ? 0.0f : 1.0f;
  models::Context ctx;
  ctx.training = true;
  ctx.keep_saved = true;
  ctx.seed = step_seed(s_.seed, s_.first_minibatch + a.minibatch);
  ctx.sample_begin = a.slice.begin;
  Tensor dx;
  EdgeTensors back;
  // What the work reads, held before it runs (Model::backward releases each layer's saved
  // tensors as it goes); what it writes, after.
  hold(kept.saved);
  hold(kept.input);
  for (const Tensor& t : kept.inputs) hold(t);
  for (const Tensor& t : received) hold(t);
  hold(dy);
  hold(weights);
  hold(g);
  for (const std::vector<models::Saved>& piece : kept.pieces) hold(piece);
  for (const Tensor& d : kept.dlogits_pieces) hold(d);
  std::vector<models::Saved>& saved = kept.saved;
  const models::Completion device_time = s_.executor->run(ctx, [&](const models::Context& c) {
    // Backward slices that cut across forward ones: the pieces are joined here, through the
    // device's kernels, after the forwards that wrote them.
    if (!kept.pieces.empty()) {
      activations_.join(a.chunk, kept, c.k());
      if (last) dy = kept.dlogits;
    }
    if (kept.recompute) {
      saved = ce != nullptr
                  ? s_.model->forward(c, weights, kept.inputs, layers.begin, layers.end).saved
                  : s_.model->forward(c, weights, kept.input, layers.begin, layers.end).saved;
    }
    if (ce != nullptr) {
      const std::vector<Tensor> dys = output_gradients(*ce, received, kept.dlogits, c.k());
      const std::vector<Tensor> dxs =
          a.with_weight
              ? s_.model->backward(c, weights, saved, dys, layers.begin, layers.end, g, alpha, beta)
              : s_.model->backward_input(c, weights, saved, dys, layers.begin, layers.end);
      back = input_gradients(*ce, dxs, received, c.k());
    } else if (a.with_weight) {
      // With a fused update, `g` is `weights`: each layer computes its input gradient before
      // it writes its weights (GradSink's contract).
      dx = s_.model->backward(c, weights, saved, dy, layers.begin, layers.end, need_dx, g, alpha,
                              beta);
    } else {
      dx = s_.model->backward_input(c, weights, saved, dy, layers.begin, layers.end, need_dx);
    }
  });
  hold(saved);
  hold(dx);
  hold(g);
  if (!a.with_weight) {
    activations_.keep_pending_weight(a.chunk, a.minibatch, a.slice,
                                     PendingWeight{std::move(saved), version});
  } else if (!fused) {
    written_[static_cast<std::size_t>(a.chunk)] = true;
  }
  contributed_ = true;
  if (ce != nullptr) {
    for (const Tensor& t : back) hold(t);
    for (const Route& r : routes_.outputs) send(r, back.at(r.edge), a.slice.begin, false);
  } else {
    for (const Route& r : routes_.outputs) send(r, dx, a.slice.begin, false);
  }
  charge(device_time);
  emit(a, version, fused ? nullptr : &weights, nullptr, started_);
}

void StageActor::run_weight(const Action& a) {
  const schedules::LayerRange layers = s_.chunk_layers.at(static_cast<std::size_t>(a.chunk));
  PendingWeight pw = activations_.take_pending_weight(a.chunk, a.minibatch, a.slice);
  models::ParamSet& g = grads();
  models::Context ctx;
  ctx.training = true;
  ctx.seed = step_seed(s_.seed, s_.first_minibatch + a.minibatch);
  ctx.sample_begin = a.slice.begin;
  // What the work reads, held before it runs: backward_weight releases the saved tensors as it
  // goes.
  hold(pw.saved);
  hold(g);
  hold(versions_.get(pw.version));
  const models::Completion device_time = s_.executor->run(ctx, [&](const models::Context& c) {
    s_.model->backward_weight(c, pw.saved, layers.begin, layers.end, g, 1.0f,
                              fresh(a.chunk) ? 0.0f : 1.0f);
  });
  written_[static_cast<std::size_t>(a.chunk)] = true;
  versions_.unpin(pw.version);
  contributed_ = true;
  charge(device_time);
  emit(a, pw.version, &versions_.get(pw.version), nullptr, started_);
}

void StageActor::run_sync(const Action& a) {
  models::ParamSet& g = grads();
  emit(a, versions_.latest(), nullptr, &g, started_);
  // Summing a stage's own copies first commutes with the sum among its replicas.
  if (!ties_.spread().empty()) sum_spread_copies();
  sync_round_ = a.minibatch;
  sync_phase_ = params_.replicas_of(stage_) > 1 ? 0 : 1;
  running_ = start_sync_phase();
}

bool StageActor::start_sync_phase() {
  models::ParamSet& g = grads();
  std::vector<Tensor> tensors;
  std::vector<int> group;
  bool contributes = contributed_;
  auto op = transport::Reduction::sum;
  const std::size_t tie_phases = ties_.reductions().size();
  if (sync_phase_ == 0) {
    for (std::int64_t i = 0; i < g.size(); ++i) tensors.push_back(g[i]);
    group = s_.routing->sync_group(stage_);
    if (schedules::gradient_reduction(params_) == schedules::GradientReduction::mean) {
      op = transport::Reduction::mean;
    }
  } else if (sync_phase_ - 1 < tie_phases) {
    const TieReduction& r = ties_.reductions()[sync_phase_ - 1];
    const std::vector<std::int64_t> first = models::first_local_copies(s_.model->ties(), g);
    for (const std::size_t t : r.ties) tensors.push_back(g[first[t]]);
    group.assign(r.members.begin(), r.members.end());
    // After its replicas' all-reduce, every replica holds the stage's sum: one of them counts.
    contributes = replica_ == 0;
  } else if (sync_phase_ - 1 == tie_phases && params_.global_sync && s_.norm_layout) {
    // Each slot is one stage's alone (zeros elsewhere), so the sum is exact in any order.
    norm_squares_ = norm_squares();
    tensors.push_back(norm_squares_);
    for (int d = 0; d < params_.total_replicas(); ++d) group.push_back(d);
    contributes = replica_ == 0;
  } else {
    return false;
  }
  ActorSystem* sys = &system();
  const std::int64_t round = sync_round_;
  s_.collectives->all_reduce(group, s_.device, round, std::move(tensors), contributes, op,
                             [sys, self = this, round] { (void)sys->send(self, SyncDone{round}); });
  return true;
}

void StageActor::sum_ties(const models::Kernels& k, models::ParamSet& g) {
  if (ties_summed_) return;
  // A SYNC left each spread tie's total in its first copy here; the local ties add up now.
  models::spread_first_copy(k, ties_.spread(), g);
  models::sum_tied_copies(k, ties_.local(), g);
  ties_summed_ = true;
}

Tensor StageActor::norm_squares() {
  models::ParamSet& g = grads();
  Tensor squares;
  models::Context ctx;
  const models::Completion done = s_.executor->run(ctx, [&](const models::Context& c) {
    sum_ties(c.k(), g);
    // A device without data (sim) has no values to add: its slots stay zero on the host.
    squares = s_.executor->device().has_data()
                  ? c.k().empty({s_.norm_layout->slots()}, DType::f32)
                  : Tensor::zeros({s_.norm_layout->slots()}, DType::f32, Device::cpu());
    if (s_.executor->device().has_data()) {
      models::gradient_squares(c.k(), *s_.norm_layout, g, squares);
    }
  });
  if (done.done.recorded()) done.done.synchronize();
  return squares;
}

double StageActor::round_squares() {
  if (!params_.global_sync) norm_squares_ = norm_squares();
  const Tensor host =
      norm_squares_.device() == Device::cpu() ? norm_squares_ : norm_squares_.to(Device::cpu());
  const double norm = models::fold_norm(host.data<float>(), s_.norm_layout->slots());
  return norm * norm;
}

void StageActor::report_norm(std::int64_t round, double squares) {
  Tag tag;
  tag.minibatch = round;
  const std::int32_t stage = params_.global_sync ? -1 : stage_;
  sends_.push_back({s_.coordinator, make_message(GradNormReport{squares, stage}, {}, tag), {}});
}

void StageActor::sum_spread_copies() {
  models::ParamSet& g = grads();
  const std::vector<models::TieGroup>& ties = ties_.spread();
  models::Context ctx;
  const models::Completion done = s_.executor->run(
      ctx, [&](const models::Context& c) { models::sum_tied_copies(c.k(), ties, g); });
  if (done.done.recorded()) done.done.synchronize();
}

void StageActor::run_step(const Action& a) {
  if (fused_next_) {
    // The backward already wrote the update into the next version.
    s_.optimizer->note_fused_step();
    versions_.publish(std::move(*fused_next_));
    fused_next_.reset();
    versions_.collect(std::min(next_forward_version(), kept_from()));
    stats_.peak_versions = std::max(stats_.peak_versions, versions_.peak_held());
    note_memory();
    emit(a, versions_.latest(), &versions_.get(versions_.latest()), nullptr, started_);
    contributed_ = false;
    return;
  }
  // The versions that forwards after the run's end use stay: a resume there replays them.
  const std::int64_t min_needed = std::min(next_forward_version(), kept_from());
  versions_.collect(min_needed);
  models::ParamSet& g = grads();
  models::ParamSet next = versions_.begin_update(min_needed);
  // Before the update: the tensors it reads (the latest version's, which `next` shares or took
  // over and the collect below may drop); after it, those it writes.
  hold(next);
  hold(g);
  if (s_.lr_at) s_.optimizer->set_lr(s_.lr_at(s_.first_round + a.minibatch));
  float clip = 1.0f;
  if (s_.norm_layout) {
    const double squares = round_squares();
    if (s_.clip_norm) clip = models::clip_coefficient(std::sqrt(squares), *s_.clip_norm);
    if (s_.report_norm) report_norm(a.minibatch, squares);
  }
  models::Context ctx;
  const models::Completion device_time = s_.executor->run(ctx, [&](const models::Context& c) {
    sum_ties(c.k(), g);
    if (clip != 1.0f) models::scale_gradients(c.k(), *s_.norm_layout, g, clip);
    s_.executor->step(c, *s_.optimizer, next, g);
  });
  ties_summed_ = false;
  hold(next);
  versions_.publish(std::move(next));
  versions_.collect(min_needed);
  stats_.peak_versions = std::max(stats_.peak_versions, versions_.peak_held());
  note_memory();
  charge(device_time);
  emit(a, versions_.latest(), &versions_.get(versions_.latest()), &g, started_);
  written_.assign(written_.size(), false);
  contributed_ = false;
}

StageActor::ForwardInputs StageActor::take_forward_inputs(const Action& a, const ChunkEdges* ce) {
  ForwardInputs in;
  const bool first = vstage(a.chunk) == 0;
  if (ce == nullptr) {
    in.x =
        arrived(received_.take(a, routes_.inputs, first ? Port::input : Port::activation, nullptr));
    return in;
  }
  in.arrived = take_edges(a, Port::activation, ce->in_edges);
  if (first) in.x = arrived(received_.take(a, routes_.inputs, Port::input, nullptr));
  in.reads = gather_reads(*ce, in.arrived, in.x);
  return in;
}

void StageActor::send_forward(const Action& a, const ChunkEdges* ce, const Tensor& y,
                              const std::vector<Tensor>& outputs, const ForwardInputs& in) {
  if (ce == nullptr) {
    for (const Route& r : routes_.outputs) send(r, y, a.slice.begin, true);
    return;
  }
  for (const Route& r : routes_.outputs) {
    send(r, edge_output(*ce, r.edge, outputs, in.arrived, in.x), a.slice.begin, true);
  }
  for (const Tensor& t : outputs) hold(t);
}

EdgeTensors StageActor::take_edges(const Action& a, Port port,
                                   const std::vector<std::uint16_t>& edges) {
  EdgeTensors out(s_.routing->edges().size());
  for (const std::uint16_t e : edges) {
    out[e] = arrived(received_.take(a, routes_.inputs, port, e));
  }
  return out;
}

Tensor StageActor::arrived(const Tensor& t) {
  return s_.executor->to_device(s_.executor->from_wire(t));
}

void StageActor::send(const Route& r, const Tensor& t, std::int64_t first, bool forward) {
  const Tensor part =
      s_.executor->to_wire(rows(t, first, r.samples.begin, r.samples.end), s_.wire_dtype);
  const TensorMeta meta = TensorMeta::of(part);
  stats_.bytes_sent += part.nbytes();
  sends_.push_back({r.device, forward ? make_message(ForwardTensor{meta}, {part}, tensor_tag(r))
                                      : make_message(BackwardTensor{meta}, {part}, tensor_tag(r))});
}

}  // namespace tandem::actors
