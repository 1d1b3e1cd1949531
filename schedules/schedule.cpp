#include "schedules/schedule.hpp"

#include <algorithm>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "schedules/detail/generator_state.hpp"
#include "schedules/schedule_error.hpp"
#include "schedules/weight_versions.hpp"

namespace tandem::schedules {
namespace {

using detail::Pattern;
using detail::PatternFactory;

Action make(Op op, std::int64_t minibatch, Slice slice, int chunk, int replica) {
  return Action{op, minibatch, slice, chunk, replica};
}

Action control(Op op, std::int64_t round, int replica) {
  return Action{op, round, Slice{}, 0, replica};
}

std::vector<Action> flush_epilogue(const ScheduleParams& p, int stage, int replica,
                                   std::int64_t minibatch) {
  std::vector<Action> out;
  if (p.syncs(stage)) out.push_back(control(Op::SYNC, minibatch, replica));
  out.push_back(control(Op::STEP, minibatch, replica));
  return out;
}

// Flush schedules with equal slices: replica j of stage s owns slices j, j + r_s, j + 2 r_s, ...
PatternFactory equal_slices(const ScheduleParams& p, int stage, int replica, std::int64_t warmup) {
  const int r = p.replicas_of(stage);
  const std::int64_t owned = replica < p.slices ? (p.slices - replica + r - 1) / r : 0;
  return [p, stage, replica, warmup, r, owned](std::int64_t b) {
    Pattern pat;
    pat.forwards = pat.backwards = owned;
    pat.warmup = warmup;
    pat.forward = [p, b, replica, r](std::int64_t k) {
      Action a = make(Op::F, b, p.equal_slice(static_cast<int>(replica + k * r)), 0, replica);
      a.recompute = p.rematerialize;
      return a;
    };
    pat.backward = [p, b, replica, r](std::int64_t k) {
      Action a = make(Op::B, b, p.equal_slice(static_cast<int>(replica + k * r)), 0, replica);
      a.recompute = p.rematerialize;
      return a;
    };
    pat.epilogue = flush_epilogue(p, stage, replica, b);
    return pat;
  };
}

// Forward only: replica j of stage s runs F of slices j, j + r_s, ... of each minibatch in order,
// and nothing else; a stage moves on to the next slice as soon as it has sent one, so slices
// pipeline across stages as GPipe's forwards do.
PatternFactory forward_only(const ScheduleParams& p, int stage, int replica) {
  const int r = p.replicas_of(stage);
  const std::int64_t owned = replica < p.slices ? (p.slices - replica + r - 1) / r : 0;
  return [p, replica, r, owned](std::int64_t b) {
    Pattern pat;
    pat.forwards = owned;
    pat.backwards = 0;
    pat.warmup = owned;
    pat.forward = [p, b, replica, r](std::int64_t k) {
      return make(Op::F, b, p.equal_slice(static_cast<int>(replica + k * r)), 0, replica);
    };
    return pat;
  };
}

// Split backward with W(i) right after B(i + lag): the deferred W's fill the cool-down.
// ZB-H1: 1F1B's warm-up (p - 1 - s forwards) and lag s, so that every stage peaks at p slices
// in flight. ZB-2P: 2(p - 1 - s) warm-up forwards (the next pair's F comes first, so 2p - 1 - 2s
// precede the first B, just enough to cover the first gradient's round trip) and lag 2s: every
// stage peaks at 2p - 1 in flight and, with equal F, B and W, only the pipeline's fill idles,
// message latency included.
PatternFactory zero_bubble(const ScheduleParams& p, int stage, std::int64_t warmup,
                           std::int64_t lag) {
  return [p, stage, warmup, lag](std::int64_t b) {
    const std::int64_t m = p.slices;
    Pattern pat;
    pat.forwards = pat.backwards = m;
    pat.warmup = std::min<std::int64_t>(warmup, m);
    pat.forward = [p, b](std::int64_t k) {
      return make(Op::F, b, p.equal_slice(static_cast<int>(k)), 0, 0);
    };
    pat.backward = [p, b](std::int64_t k) {
      Action a = make(Op::B, b, p.equal_slice(static_cast<int>(k)), 0, 0);
      a.with_weight = false;  // its W follows
      return a;
    };
    pat.after_backward = [p, b, lag](std::int64_t k, std::vector<Action>& out) {
      if (k >= lag) out.push_back(make(Op::W, b, p.equal_slice(static_cast<int>(k - lag)), 0, 0));
    };
    for (std::int64_t k = std::max<std::int64_t>(0, m - lag); k < m; ++k) {
      pat.epilogue.push_back(make(Op::W, b, p.equal_slice(static_cast<int>(k)), 0, 0));
    }
    for (const Action& a : flush_epilogue(p, stage, 0, b)) pat.epilogue.push_back(a);
    return pat;
  };
}

// ZB-V's order on device d (chunk 0 is virtual stage d, chunk 1 is 2p - 1 - d), over
// n = max(m, 2p - 1) slices so that the phases below are whole; the slices beyond m are then
// dropped, which removes whole slices from a runnable order and so keeps it runnable.
// Warm-up: 2(p - d) - 1 chunk-0 forwards (the V's descent reaches the bottom), d pairs
// (F chunk 1, F chunk 0), then p - d triples (F, B, W) of chunk 1 as gradients start to climb.
// Steady state: [F chunk 0], B W chunk 0, F B W chunk 1, until both chunks have every forward.
// Cool-down: d pairs (B chunk 0, B chunk 1), p - d pairs (B, W) of chunk 0, then the W's left,
// chunk 1's first. Every device keeps about 2p chunk activations (p whole-stage ones, 1F1B's
// peak); with equal F, B and W per chunk only the pipeline's fill idles.
std::vector<Action> zero_bubble_v_order(const ScheduleParams& p, int d, std::int64_t b) {
  const std::int64_t n = std::max<std::int64_t>(p.slices, 2 * p.stages - 1);
  std::int64_t f[2] = {0, 0}, bw[2] = {0, 0}, w[2] = {0, 0};
  std::vector<Action> out;
  const auto put = [&](Op op, int chunk) {
    std::int64_t& k = op == Op::F ? f[chunk] : op == Op::B ? bw[chunk] : w[chunk];
    if (k < p.slices) {
      Action a = make(op, b, p.equal_slice(static_cast<int>(k)), chunk, 0);
      a.with_weight = op != Op::B;  // every B is split: its W follows
      out.push_back(a);
    }
    ++k;
  };
  const auto bw_now = [&](int chunk) {  // a B with its W at once
    put(Op::B, chunk);
    put(Op::W, chunk);
  };
  for (int i = 0; i < 2 * (p.stages - d) - 1; ++i) put(Op::F, 0);
  for (int i = 0; i < d; ++i) {
    put(Op::F, 1);
    put(Op::F, 0);
  }
  for (int i = 0; i < p.stages - d; ++i) {
    put(Op::F, 1);
    bw_now(1);
  }
  while (f[1] < f[0] || f[0] < n) {
    if (f[0] < n) put(Op::F, 0);
    bw_now(0);
    put(Op::F, 1);
    bw_now(1);
  }
  for (int i = 0; i < d; ++i) {
    put(Op::B, 0);
    put(Op::B, 1);
  }
  for (int i = 0; i < p.stages - d; ++i) {
    put(Op::B, 0);
    put(Op::W, 0);
  }
  while (w[1] < bw[1]) put(Op::W, 1);
  while (w[0] < bw[0]) put(Op::W, 0);
  return out;
}

// A round given whole: no F/B pairing, the epilogue holds every action.
PatternFactory zero_bubble_v(const ScheduleParams& p, int stage) {
  return [p, stage](std::int64_t b) {
    Pattern pat;
    pat.epilogue = zero_bubble_v_order(p, stage, b);
    for (const Action& a : flush_epilogue(p, stage, 0, b)) pat.epilogue.push_back(a);
    return pat;
  };
}

// Megatron-LM's forward_backward_pipelining_with_interleaving, one device.
PatternFactory interleaved(const ScheduleParams& p, int stage) {
  return [p, stage](std::int64_t b) {
    const std::int64_t pv = static_cast<std::int64_t>(p.stages) * p.chunks;
    const std::int64_t total = static_cast<std::int64_t>(p.slices) * p.chunks;
    Pattern pat;
    pat.forwards = pat.backwards = total;
    pat.warmup =
        p.slices == p.stages
            ? total
            : std::min<std::int64_t>(2 * (p.stages - stage - 1) + (p.chunks - 1) * p.stages, total);
    auto slice_of = [p, pv](std::int64_t k) {
      return p.equal_slice(static_cast<int>((k / pv) * p.stages + k % p.stages));
    };
    pat.forward = [p, b, pv, slice_of](std::int64_t k) {
      return make(Op::F, b, slice_of(k), static_cast<int>((k % pv) / p.stages), 0);
    };
    pat.backward = [p, b, pv, slice_of](std::int64_t k) {
      return make(Op::B, b, slice_of(k), static_cast<int>(p.chunks - 1 - (k % pv) / p.stages), 0);
    };
    pat.epilogue = flush_epilogue(p, stage, 0, b);
    return pat;
  };
}

std::vector<Slice> slices_of(const std::vector<std::int64_t>& sizes) {
  std::vector<Slice> out;
  std::int64_t begin = 0;
  for (auto size : sizes) {
    out.push_back({begin, begin + size});
    begin += size;
  }
  return out;
}

PatternFactory umpipe(const ScheduleParams& p, int stage) {
  auto fwd = slices_of(p.forward_composition(stage));
  auto bwd = slices_of(p.backward_composition(stage));
  return [p, stage, fwd = std::move(fwd), bwd = std::move(bwd)](std::int64_t b) {
    Pattern pat;
    pat.forwards = static_cast<std::int64_t>(fwd.size());
    pat.backwards = static_cast<std::int64_t>(bwd.size());
    pat.warmup = pat.forwards;
    pat.forward = [fwd, b](std::int64_t k) { return make(Op::F, b, fwd[k], 0, 0); };
    pat.backward = [bwd, b](std::int64_t k) { return make(Op::B, b, bwd[k], 0, 0); };
    pat.epilogue = flush_epilogue(p, stage, 0, b);
    return pat;
  };
}

// Asynchronous 1F1B-RR: replica j of stage s runs minibatches j, j + r_s, ... and updates after
// every backward (after a SYNC among the replicas of the stage when replicated).
PatternFactory pipedream(const ScheduleParams& p, int stage, int replica) {
  const int r = p.replicas_of(stage);
  std::int64_t owned = Pattern::kUnbounded;
  std::int64_t rounds = 0;
  if (p.minibatches > 0) {
    owned = replica < p.minibatches ? (p.minibatches - replica + r - 1) / r : 0;
    rounds = (p.minibatches + r - 1) / r;
  }
  const std::int64_t w = warmup(p, stage);
  const Slice whole{0, p.samples()};
  const bool syncs = p.syncs(stage);
  return [owned, rounds, w, whole, replica, r, syncs](std::int64_t) {
    Pattern pat;
    pat.forwards = pat.backwards = owned;
    pat.warmup = w;
    // A replica without a minibatch in the last, partial round still joins its all-reduce (it
    // contributes no gradient) and its STEP: the others wait for it at SYNC, and the stage's
    // replicas must stay at one version.
    for (std::int64_t k = owned; k < rounds; ++k) {
      if (syncs) pat.epilogue.push_back(control(Op::SYNC, k, replica));
      pat.epilogue.push_back(control(Op::STEP, k, replica));
    }
    pat.forward = [=](std::int64_t k) { return make(Op::F, replica + k * r, whole, 0, replica); };
    pat.backward = [=](std::int64_t k) { return make(Op::B, replica + k * r, whole, 0, replica); };
    pat.after_backward = [=](std::int64_t k, std::vector<Action>& out) {
      if (syncs) out.push_back(control(Op::SYNC, k, replica));
      out.push_back(control(Op::STEP, k, replica));
    };
    return pat;
  };
}

// 2BW: 1F1B over slices without flush; batch t (m slices) updates after its last backward.
PatternFactory two_bw(const ScheduleParams& p, int stage) {
  const std::int64_t m = p.slices;
  const std::int64_t units = p.minibatches > 0 ? p.minibatches * m : Pattern::kUnbounded;
  return [p, stage, m, units](std::int64_t) {
    Pattern pat;
    pat.forwards = pat.backwards = units;
    pat.warmup = p.stages - 1 - stage;
    pat.forward = [p, m](std::int64_t u) {
      return make(Op::F, u / m, p.equal_slice(static_cast<int>(u % m)), 0, 0);
    };
    pat.backward = [p, m](std::int64_t u) {
      return make(Op::B, u / m, p.equal_slice(static_cast<int>(u % m)), 0, 0);
    };
    const bool syncs = p.syncs(stage);
    pat.after_backward = [m, syncs](std::int64_t u, std::vector<Action>& out) {
      if (u % m != m - 1) return;
      if (syncs) out.push_back(control(Op::SYNC, u / m, 0));
      out.push_back(control(Op::STEP, u / m, 0));
    };
    return pat;
  };
}

}  // namespace

Schedule::Schedule(ScheduleParams params) : params_(std::move(params)) {
  params_.validate();
  if (params_.kind == ScheduleKind::custom) {
    throw ScheduleError(
        "schedule custom: a custom order is data (parse its text form), not a "
        "generator");
  }
}

ActionGenerator Schedule::generator(int device) const {
  const auto& p = params_;
  if (device < 0 || device >= devices()) {
    throw ScheduleError("schedule " + std::string(to_string(p.kind)) + ": no device " +
                        std::to_string(device) + " (it has " + std::to_string(devices()) + ")");
  }
  const int stage = p.stage_of(device);
  const int replica = p.replica_of(device);
  const std::int64_t flush_rounds = p.minibatches;
  const auto make_generator = [](PatternFactory factory, std::int64_t rounds) {
    return ActionGenerator(std::make_unique<ActionGenerator::State>(std::move(factory), rounds));
  };
  switch (p.kind) {
    case ScheduleKind::naive:
      return make_generator(equal_slices(p, stage, replica, 0), flush_rounds);
    case ScheduleKind::gpipe:
      return make_generator(
          equal_slices(p, stage, replica, std::numeric_limits<std::int64_t>::max()), flush_rounds);
    case ScheduleKind::one_f_one_b:
      return make_generator(equal_slices(p, stage, replica, warmup(p, stage)), flush_rounds);
    case ScheduleKind::zb_h1:
      return make_generator(zero_bubble(p, stage, p.stages - 1 - stage, stage), flush_rounds);
    case ScheduleKind::zb_2p:
      return make_generator(zero_bubble(p, stage, 2 * (p.stages - 1 - stage), 2 * stage),
                            flush_rounds);
    case ScheduleKind::zb_v:
      return make_generator(zero_bubble_v(p, stage), flush_rounds);
    case ScheduleKind::interleaved:
      return make_generator(interleaved(p, stage), flush_rounds);
    case ScheduleKind::umpipe:
      return make_generator(umpipe(p, stage), flush_rounds);
    case ScheduleKind::pipedream:
    case ScheduleKind::pipedream_vsync:
      return make_generator(pipedream(p, stage, replica), 1);
    case ScheduleKind::pipedream_2bw:
      return make_generator(two_bw(p, stage), 1);
    case ScheduleKind::forward:
      return make_generator(forward_only(p, stage, replica), flush_rounds);
    case ScheduleKind::custom:
      break;
  }
  throw ScheduleError("schedule: no generator for this kind");
}

ActionList Schedule::materialize() const {
  if (!finite()) {
    throw ScheduleError("schedule " + std::string(to_string(params_.kind)) +
                        " is unbounded (minibatches = 0): materialize a prefix instead");
  }
  return materialize(std::numeric_limits<std::size_t>::max());
}

ActionList Schedule::materialize(std::size_t max_per_device) const {
  ActionList list;
  list.params = params_;
  list.devices.resize(devices());
  for (int d = 0; d < devices(); ++d) {
    auto gen = generator(d);
    list.devices[d] = take(gen, max_per_device);
  }
  return list;
}

}  // namespace tandem::schedules
