// Routing against the materialized schedules: every route names an action that exists on that
// device with that slice, inputs and outputs tile the action's slice, both ends of an edge agree,
// and the loader feeds exactly the first and last virtual stages' forwards.
#include "schedules/routing.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "schedules/schedule.hpp"
#include "schedules/schedule_error.hpp"
#include "schedules/text_form.hpp"

namespace tandem::schedules {
namespace {

using Key = std::tuple<int, Op, int, std::int64_t, std::int64_t, std::int64_t>;

Key key(int device, Op op, int chunk, std::int64_t minibatch, Slice slice) {
  return {device, op, chunk, minibatch, slice.begin, slice.end};
}

std::string name(const ScheduleParams& p) {
  std::string out(to_string(p.kind));
  out += " p=" + std::to_string(p.stages) + " m=" + std::to_string(p.slices) +
         " v=" + std::to_string(p.chunks) + " n=" + std::to_string(p.minibatches) + " r=";
  for (int s = 0; s < p.stages; ++s) out += std::to_string(p.replicas_of(s)) + ",";
  return out;
}

// Samples of `routes` on `ports`, in order, must tile `slice` exactly.
void expect_tiles(const std::vector<Route>& routes, std::set<Port> ports, Slice slice,
                  const std::string& what) {
  std::vector<Slice> parts;
  for (const Route& r : routes) {
    if (ports.count(r.port)) parts.push_back(r.samples);
  }
  std::sort(parts.begin(), parts.end(),
            [](const Slice& a, const Slice& b) { return a.begin < b.begin; });
  std::int64_t covered = slice.begin;
  for (const Slice& s : parts) {
    EXPECT_EQ(s.begin, covered) << what << ": gap or overlap";
    EXPECT_LT(s.begin, s.end) << what << ": empty samples";
    covered = s.end;
  }
  EXPECT_EQ(covered, slice.end) << what << ": does not reach the end of the slice";
}

// Checks the routing against `list`. Only actions of minibatches below `complete` are checked:
// a prefix of an unbounded schedule holds every action of those minibatches on every device.
void check(const Routing& routing, const ActionList& list, std::int64_t complete) {
  const ScheduleParams& p = list.params;
  const int V = p.stages * p.chunks;
  std::set<Key> actions;
  for (int d = 0; d < static_cast<int>(list.devices.size()); ++d) {
    for (const Action& a : list.devices[d])
      actions.insert(key(d, a.op, a.chunk, a.minibatch, a.slice));
  }
  Routes routes;
  Routes back;
  std::map<std::int64_t, std::set<std::tuple<int, std::int64_t, std::int64_t>>> first_forwards,
      last_forwards;
  std::map<std::pair<int, std::int64_t>, int> sync_members;  // (stage, round) -> count
  for (int d = 0; d < static_cast<int>(list.devices.size()); ++d) {
    const int stage = p.stage_of(d);
    for (const Action& a : list.devices[d]) {
      if (a.minibatch >= complete) continue;  // STEP, SYNC: round k <= its minibatches
      const std::string what = "d" + std::to_string(d) + " " + to_string(a) + " in " + name(p);
      SCOPED_TRACE(what);
      routing.routes(d, a, routes);
      const int vs = p.virtual_stage(stage, a.chunk);
      if (a.op == Op::F || a.op == Op::B || a.op == Op::W) {
        EXPECT_EQ(routing.owner(stage, a.chunk, a.minibatch, a.slice), d);
      }
      if (a.op == Op::SYNC) {
        std::vector<Route> expected;
        for (int peer : routing.sync_group(stage)) {
          if (peer != d)
            expected.push_back({peer, Port::gradient, Op::SYNC, 0, a.minibatch, {}, {}});
        }
        EXPECT_EQ(routes.inputs, expected);
        EXPECT_EQ(routes.outputs, expected);
        ++sync_members[{stage, a.minibatch}];
        continue;
      }
      if (a.op == Op::W || a.op == Op::STEP) {
        EXPECT_TRUE(routes.inputs.empty());
        EXPECT_TRUE(routes.outputs.empty());
        continue;
      }
      if (a.op == Op::F) {
        if (vs == 0) first_forwards[a.minibatch].insert({d, a.slice.begin, a.slice.end});
        if (vs == V - 1) last_forwards[a.minibatch].insert({d, a.slice.begin, a.slice.end});
        expect_tiles(routes.inputs, {Port::input, Port::activation}, a.slice, "F inputs");
        if (vs == V - 1) {
          expect_tiles(routes.inputs, {Port::target}, a.slice, "F targets");
          EXPECT_TRUE(routes.outputs.empty());
        } else {
          expect_tiles(routes.outputs, {Port::activation}, a.slice, "F outputs");
        }
        for (const Route& r : routes.inputs) {
          if (vs == 0 || r.port == Port::target) {
            EXPECT_EQ(r.device, kLoader);
          } else {
            EXPECT_EQ(r.port, Port::activation);
          }
        }
      } else {
        if (vs == V - 1) {
          EXPECT_TRUE(routes.inputs.empty());
        } else {
          expect_tiles(routes.inputs, {Port::gradient}, a.slice, "B inputs");
        }
        if (vs == 0) {
          EXPECT_TRUE(routes.outputs.empty());
        } else {
          expect_tiles(routes.outputs, {Port::gradient}, a.slice, "B outputs");
        }
      }
      // Every peer exists, and names this action back with the same samples.
      for (const bool input : {true, false}) {
        for (const Route& r : input ? routes.inputs : routes.outputs) {
          if (r.device == kLoader) continue;
          EXPECT_EQ(r.op, a.op);
          EXPECT_EQ(r.minibatch, a.minibatch);
          EXPECT_EQ(p.virtual_stage(p.stage_of(r.device), r.chunk),
                    input == (a.op == Op::F) ? vs - 1 : vs + 1);
          ASSERT_TRUE(actions.count(key(r.device, r.op, r.chunk, r.minibatch, r.slice)))
              << "routes to a missing " << to_string(Action{r.op, r.minibatch, r.slice, r.chunk})
              << " on d" << r.device;
          Action peer{r.op, r.minibatch, r.slice, r.chunk, p.replica_of(r.device)};
          routing.routes(r.device, peer, back);
          const Route mirror{d, r.port, a.op, a.chunk, a.minibatch, a.slice, r.samples};
          const auto& other = input ? back.outputs : back.inputs;
          EXPECT_EQ(std::count(other.begin(), other.end(), mirror), 1)
              << "the peer " << to_string(peer) << " on d" << r.device << " does not name it back";
        }
      }
    }
  }
  for (const auto& [round, count] : sync_members) {
    EXPECT_EQ(count, p.replicas_of(round.first)) << "SYNC round " << round.second;
  }
  // The loader feeds exactly the forwards of the first and last virtual stages.
  std::vector<Route> loader;
  for (const auto& [b, expected] : first_forwards) {
    routing.loader_routes(b, loader);
    std::set<std::tuple<int, std::int64_t, std::int64_t>> inputs, targets;
    for (const Route& r : loader) {
      EXPECT_EQ(r.minibatch, b);
      EXPECT_EQ(r.samples, r.slice);
      EXPECT_EQ(r.op, Op::F);
      auto& into = r.port == Port::input ? inputs : targets;
      EXPECT_TRUE(into.insert({r.device, r.slice.begin, r.slice.end}).second);
      EXPECT_EQ(r.chunk, r.port == Port::input ? 0 : p.chunks - 1);
    }
    EXPECT_EQ(inputs, expected) << "minibatch " << b << " of " << name(p);
    EXPECT_EQ(targets, last_forwards[b]) << "minibatch " << b << " of " << name(p);
  }
}

std::vector<ScheduleParams> every_kind() {
  std::vector<ScheduleParams> all;
  const auto add = [&](ScheduleKind kind, int p, int m, std::vector<int> replicas = {},
                       std::int64_t minibatches = 2) {
    ScheduleParams sp;
    sp.kind = kind;
    sp.stages = p;
    sp.slices = m;
    sp.replicas = std::move(replicas);
    sp.minibatches = minibatches;
    all.push_back(sp);
    return &all.back();
  };
  for (auto kind : {ScheduleKind::naive, ScheduleKind::gpipe, ScheduleKind::one_f_one_b}) {
    add(kind, 3, 5, {2, 1, 1});
    add(kind, 3, 4, {1, 2, 3})->minibatch_size = 11;
    add(kind, 1, 3, {2});
    add(kind, 4, 2);
  }
  add(ScheduleKind::gpipe, 3, 4, {2, 1, 1})->rematerialize = true;
  add(ScheduleKind::zb_h1, 3, 4);
  add(ScheduleKind::zb_h1, 4, 6)->minibatch_size = 13;
  add(ScheduleKind::interleaved, 2, 4)->chunks = 2;
  add(ScheduleKind::interleaved, 3, 6)->chunks = 2;
  add(ScheduleKind::interleaved, 1, 2)->chunks = 3;
  add(ScheduleKind::zb_v, 3, 5)->chunks = 2;
  add(ScheduleKind::zb_v, 2, 4)->chunks = 2;
  add(ScheduleKind::zb_2p, 3, 7)->minibatch_size = 11;
  auto* um = add(ScheduleKind::umpipe, 3, 1);
  um->forward_slices = {{1, 5}, {2, 2, 2}, {3, 3}};
  um->backward_slices = {{4, 2}, {1, 1, 4}, {6}};
  auto* um2 = add(ScheduleKind::umpipe, 2, 3);
  um2->minibatch_size = 7;
  um2->forward_slices = {{7}, {}};  // stage 1: 3 equal slices
  um2->backward_slices = {{1, 6}, {2, 1, 1, 3}};
  for (std::int64_t n : {1, 7, 9}) {
    add(ScheduleKind::pipedream, 3, 1, {2, 1, 1}, n)->minibatch_size = 8;
    add(ScheduleKind::pipedream, 3, 1, {1, 3, 2}, n);
    add(ScheduleKind::pipedream_vsync, 4, 1, {}, n);
  }
  add(ScheduleKind::pipedream_2bw, 3, 4, {}, 3);
  return all;
}

TEST(ScheduleRouting, EveryRouteOfEveryGeneratedActionExistsAndIsSymmetric) {
  for (const ScheduleParams& sp : every_kind()) {
    const Routing routing(sp);
    check(routing, Schedule(sp).materialize(), std::numeric_limits<std::int64_t>::max());
  }
}

TEST(ScheduleRouting, UnboundedSchedulesByGeneratorPrefixes) {
  std::vector<ScheduleParams> all;
  for (auto kind :
       {ScheduleKind::pipedream, ScheduleKind::pipedream_vsync, ScheduleKind::pipedream_2bw}) {
    ScheduleParams sp;
    sp.kind = kind;
    sp.stages = 3;
    sp.slices = kind == ScheduleKind::pipedream_2bw ? 3 : 1;
    sp.minibatches = 0;
    if (kind == ScheduleKind::pipedream) sp.replicas = {2, 1, 1};
    all.push_back(sp);
  }
  all.push_back(all.front());
  all.back().replicas = {1, 2, 3};
  for (const ScheduleParams& sp : all) {
    // 300 actions per device cover every action of the first 20 minibatches everywhere.
    check(Routing(sp), Schedule(sp).materialize(300), 20);
  }
}

TEST(ScheduleRouting, ListRoutingAgreesWithTheRule) {
  for (const ScheduleParams& sp : every_kind()) {
    const ActionList list = Schedule(sp).materialize();
    const Routing rule(sp);
    const Routing from_list(list);
    Routes want, got;
    std::vector<Route> want_loader, got_loader;
    for (int d = 0; d < static_cast<int>(list.devices.size()); ++d) {
      for (const Action& a : list.devices[d]) {
        rule.routes(d, a, want);
        from_list.routes(d, a, got);
        EXPECT_EQ(got.inputs, want.inputs) << name(sp) << " d" << d << " " << to_string(a);
        EXPECT_EQ(got.outputs, want.outputs) << name(sp) << " d" << d << " " << to_string(a);
      }
    }
    for (std::int64_t b = 0; b < sp.minibatches; ++b) {
      rule.loader_routes(b, want_loader);
      from_list.loader_routes(b, got_loader);
      EXPECT_EQ(got_loader, want_loader) << name(sp) << " minibatch " << b;
    }
  }
}

TEST(ScheduleRouting, CustomOrdersRouteFromTheirList) {
  // Two stages, the second re-slicing the first's [0,3) [3,4) as [0,1) [1,4), replicated.
  const ActionList list = parse_actions(
      "schedule custom stages=2 replicas=1,2 slices=2 minibatch=4\n"
      "d0: F0[0:3) F0[3:4) B0[0:1) B0[1:4) STEP\n"
      "d1: F0[1:4) B0[1:4) SYNC STEP\n"
      "d2: F0[0:1) B0[0:1) SYNC STEP\n");
  const Routing routing(list);
  check(routing, list, 1);
  const Routes r = routing.routes(1, list.devices[1][0]);
  ASSERT_EQ(r.inputs.size(), 3u);
  EXPECT_EQ(r.inputs[0], (Route{0, Port::activation, Op::F, 0, 0, {0, 3}, {1, 3}}));
  EXPECT_EQ(r.inputs[1], (Route{0, Port::activation, Op::F, 0, 0, {3, 4}, {3, 4}}));
  EXPECT_EQ(r.inputs[2], (Route{kLoader, Port::target, Op::F, 0, 0, {1, 4}, {1, 4}}));
  EXPECT_EQ(routing.owner(1, 0, 0, {0, 1}), 2);
  EXPECT_EQ(routing.sync_group(1), (std::vector<int>{1, 2}));
  EXPECT_THROW(routing.owner(1, 0, 1, {0, 1}), ScheduleError);  // no minibatch 1
  EXPECT_THROW(Routing(list.params), ScheduleError);            // custom has no rule
}

TEST(ScheduleRouting, RulesOfThePlacement) {
  ScheduleParams pd;
  pd.kind = ScheduleKind::pipedream;
  pd.stages = 3;
  pd.replicas = {2, 1, 1};
  pd.minibatches = 0;
  const Routing rr(pd);
  // Minibatch b on replica b mod r_s, both ways.
  EXPECT_EQ(rr.owner(0, 0, 5, {0, 1}), 1);
  EXPECT_EQ(rr.owner(0, 0, 6, {0, 1}), 0);
  EXPECT_EQ(rr.owner(1, 0, 5, {0, 1}), 2);
  const Routes b1 = rr.routes(2, Action{Op::B, 5, {0, 1}});
  ASSERT_EQ(b1.outputs.size(), 1u);
  EXPECT_EQ(b1.outputs[0].device, 1);
  EXPECT_EQ(rr.sync_group(0), (std::vector<int>{0, 1}));

  ScheduleParams il;
  il.kind = ScheduleKind::interleaved;
  il.stages = 2;
  il.slices = 2;
  il.chunks = 2;
  const Routing ir(il);
  // (stage 0, chunk 1) takes from (stage 1, chunk 0) and the last virtual stage has the target.
  const Routes f = ir.routes(0, Action{Op::F, 0, {1, 2}, 1});
  ASSERT_EQ(f.inputs.size(), 1u);
  EXPECT_EQ(f.inputs[0], (Route{1, Port::activation, Op::F, 0, 0, {1, 2}, {1, 2}}));
  const Routes last = ir.routes(1, Action{Op::F, 0, {1, 2}, 1});
  ASSERT_EQ(last.inputs.size(), 2u);
  EXPECT_EQ(last.inputs[1], (Route{kLoader, Port::target, Op::F, 0, 0, {1, 2}, {1, 2}}));
  EXPECT_TRUE(last.outputs.empty());

  // The hot path reuses its buffers.
  Routes out;
  ir.routes(0, Action{Op::F, 0, {0, 1}, 1}, out);
  const auto* data = out.inputs.data();
  ir.routes(0, Action{Op::F, 0, {1, 2}, 1}, out);
  EXPECT_EQ(out.inputs.data(), data);
}

}  // namespace
}  // namespace tandem::schedules
