#include "schedules/detail/graph.hpp"

#include <algorithm>
#include <numeric>
#include <string>
#include <tuple>

#include "schedules/schedule_error.hpp"

namespace tandem::schedules::detail {
namespace {

using Entry = Graph::Entry;

std::string stage_name(const Graph& g, int vs) {
  if (g.chunks == 1) return "stage " + std::to_string(vs);
  const ScheduleParams& p = g.list->params;
  return "stage " + std::to_string(p.stage_of_virtual(vs)) + " chunk " +
         std::to_string(p.chunk_of_virtual(vs));
}

std::string range(std::int64_t begin, std::int64_t end) {
  return to_string(Slice{begin, end});
}

[[noreturn]] void fail(const Graph& g, std::uint32_t id, const std::string& what) {
  throw ScheduleError("action list: " + describe(g, id) + ": " + what);
}

bool entry_less(const Entry& a, const Entry& b) {
  return std::tie(a.minibatch, a.begin) < std::tie(b.minibatch, b.begin);
}

// For every entry of `down`, the entries of `up` with the same minibatch whose samples overlap
// it. Both are sorted by (minibatch, begin) and disjoint within a minibatch, so the first
// overlapping `up` entry only moves forward: linear time. `on_gap` reports samples of a `down`
// entry that no `up` entry covers.
template <class OnEdge, class OnGap>
void match(const Entry* down, std::size_t nd, const Entry* up, std::size_t nu, OnEdge&& on_edge,
           OnGap&& on_gap) {
  std::size_t j = 0;
  for (std::size_t i = 0; i < nd; ++i) {
    const Entry& e = down[i];
    while (j < nu && (up[j].minibatch < e.minibatch ||
                      (up[j].minibatch == e.minibatch && up[j].end <= e.begin))) {
      ++j;
    }
    std::int64_t covered = e.begin;
    for (std::size_t k = j; k < nu && up[k].minibatch == e.minibatch && up[k].begin < e.end; ++k) {
      if (up[k].begin > covered) on_gap(e, covered, up[k].begin);
      covered = std::max(covered, up[k].end);
      on_edge(e.id, up[k].id);
    }
    if (covered < e.end) on_gap(e, covered, e.end);
  }
}

// recompute mirrors the schedule's rematerialize on F and B; with_weight = false marks a split
// B, checked against its W in link_stages.
void check_flags(const Graph& g, const ScheduleParams& p, std::uint32_t id, const Action& a) {
  const bool computes = a.op == Op::F || a.op == Op::B;
  if (a.recompute) {
    if (p.kind != ScheduleKind::gpipe) {
      fail(g, id,
           "recompute (re-materialization) applies to gpipe only, not to a " +
               std::string(to_string(p.kind)) + " schedule");
    }
    if (!computes) fail(g, id, "recompute applies to F and B only");
  }
  if (computes && a.recompute != p.rematerialize) {
    fail(g, id,
         std::string("recompute is ") + (a.recompute ? "set" : "not set") +
             " but the schedule's rematerialize is " + (p.rematerialize ? "on" : "off"));
  }
  if (!a.with_weight && a.op != Op::B) fail(g, id, "with_weight = false applies to B only");
  if (!trains(p.kind) && a.op != Op::F) {
    fail(g, id, "a forward-only schedule runs F only (it keeps nothing for a backward)");
  }
}

void check_fields(Graph& g, const ScheduleParams& p) {
  const auto& devices = g.list->devices;
  std::uint32_t id = 0;
  int replica = 0;
  const std::int64_t samples = p.samples();
  for (int d = 0; d < g.devices; ++d) {
    const int stage = g.device_stage[d];
    // Devices are numbered stage by stage: a stage's replicas are consecutive.
    replica = d > 0 && g.device_stage[d - 1] == stage ? replica + 1 : 0;
    for (const Action& a : devices[d]) {
      g.device[id] = d;
      g.op[id] = a.op;
      g.dest[id] = -1;
      g.vstage[id] = stage;  // refined below for F/B/W; set first for messages
      if (a.replica != replica) {
        fail(g, id,
             "replica field is " + std::to_string(a.replica) + " but device d" + std::to_string(d) +
                 " is replica " + std::to_string(replica));
      }
      if (a.minibatch < 0) fail(g, id, "negative minibatch");
      if (a.op == Op::STEP || a.op == Op::SYNC) {
        g.samples[id] = 0;
      } else {
        if (a.op != Op::F && a.op != Op::B && a.op != Op::W) fail(g, id, "unknown op");
        if (a.chunk < 0 || a.chunk >= g.chunks) {
          fail(
              g, id,
              "chunk " + std::to_string(a.chunk) + " outside [0," + std::to_string(g.chunks) + ")");
        }
        if (a.slice.begin < 0 || a.slice.end <= a.slice.begin) {
          fail(g, id, "empty or negative slice " + range(a.slice.begin, a.slice.end));
        }
        if (a.slice.end > samples) {
          fail(g, id,
               "slice " + range(a.slice.begin, a.slice.end) + " is outside its minibatch " +
                   range(0, samples) + " (" + std::to_string(samples) + " samples)");
        }
        g.vstage[id] = p.virtual_stage(stage, a.chunk);
        g.samples[id] = a.slice.size();
      }
      check_flags(g, p, id, a);
      ++id;
    }
  }
}

int op_index(Op op) {
  return op == Op::F ? 0 : op == Op::B ? 1 : op == Op::W ? 2 : -1;
}

void fill_buckets(Graph& g) {
  const int nb = 3 * g.virtual_stages;
  g.bucket_begin.assign(nb + 1, 0);
  const std::uint32_t n = g.size();
  for (std::uint32_t id = 0; id < n; ++id) {
    const int o = op_index(g.op[id]);
    if (o >= 0) ++g.bucket_begin[o * g.virtual_stages + g.vstage[id] + 1];
  }
  for (int b = 0; b < nb; ++b) g.bucket_begin[b + 1] += g.bucket_begin[b];
  g.entries.resize(g.bucket_begin[nb]);
  g.cursor.assign(g.bucket_begin.begin(), g.bucket_begin.end() - 1);
  for (std::uint32_t id = 0; id < n; ++id) {
    const int o = op_index(g.op[id]);
    if (o < 0) continue;
    const Action& a = g.action(id);
    g.entries[g.cursor[o * g.virtual_stages + g.vstage[id]]++] =
        Entry{a.minibatch, a.slice.begin, a.slice.end, id};
  }
  if (g.entries.empty()) return;  // no F, B or W (e.g. "d0:"): data() may be null
  for (int b = 0; b < nb; ++b) {
    Entry* first = g.entries.data() + g.bucket_begin[b];
    Entry* last = g.entries.data() + g.bucket_begin[b + 1];
    if (!std::is_sorted(first, last, entry_less)) std::sort(first, last, entry_less);
    for (Entry* e = first; e + 1 < last; ++e) {
      if (e[0].minibatch == e[1].minibatch && e[0].end > e[1].begin) {
        fail(g, e[1].id,
             "computes samples " + range(e[1].begin, std::min(e[0].end, e[1].end)) +
                 " again, already done by " + describe(g, e[0].id));
      }
    }
  }
}

void add_edge(Graph& g, std::uint32_t target, std::uint32_t source) {
  if (g.device[target] == g.device[source]) {
    g.edges.emplace_back(target, source | kNoDelay);
    return;
  }
  auto& dest = g.dest[source];
  dest = dest == -1 || dest == g.device[target] ? g.device[target] : -2;
  g.edges.emplace_back(target, source);
}

// On a graph's routing: `target` waits for `source`, and across devices for the message that
// carries `route`'s samples of its tensor edge.
void add_edge(Graph& g, std::uint32_t target, std::uint32_t source, const Route& route) {
  if (g.device[target] == g.device[source]) {
    g.edges.emplace_back(target, source | kNoDelay);
    return;
  }
  g.dest[source] =
      g.dest[source] == -1 || g.dest[source] == g.device[target] ? g.device[target] : -2;
  g.edges.emplace_back(target, source, static_cast<std::uint32_t>(g.unordered.size()));
  g.unordered.push_back(Message{source, g.device[target], route.edge, route.samples.size()});
}

// The entry of [first, last) keyed (minibatch, begin), or nullptr. `hint` is where the
// previous lookup in this bucket landed: the routes of consecutive entries move forward a step or
// two, so a short scan from there beats a binary search.
const Entry* find_entry(const Entry* first, const Entry* last, const Entry*& hint,
                        std::int64_t minibatch, std::int64_t begin) {
  const auto before = [&](const Entry& e) {
    return e.minibatch < minibatch || (e.minibatch == minibatch && e.begin < begin);
  };
  const Entry* it = first;
  if (hint < last &&
      (hint->minibatch < minibatch || (hint->minibatch == minibatch && hint->begin <= begin))) {
    it = hint;
  }
  for (int steps = 0; it < last && before(*it); ++it) {
    if (++steps == 8) {
      it = std::lower_bound(it, last, 0, [&](const Entry& e, int) { return before(e); });
      break;
    }
  }
  hint = it;
  return it < last && it->minibatch == minibatch && it->begin == begin ? it : nullptr;
}

// "d3": piece by piece, as GCC 12 warns (-Wrestrict) on "d" + std::to_string(...).
std::string device_name(int device) {
  std::string out(1, 'd');
  out += std::to_string(device);
  return out;
}

std::string expected_peer(const Route& r) {
  Action peer;
  peer.op = r.op;
  peer.minibatch = r.minibatch;
  peer.slice = r.slice;
  peer.chunk = r.chunk;
  return " (the routing expects " + to_string(peer) + " on " + device_name(r.device) + ")";
}

// Edges to `target` from the actions its routing names on `port`, looked up in the bucket
// [first, last) of the peer virtual stage. `missing(lo, hi, why)` reports samples of the target
// that no listed action provides (it throws).
template <class Missing>
void link_inputs(Graph& g, std::uint32_t target, Port port, const Entry* first, const Entry* last,
                 const Entry*& hint, Missing&& missing) {
  const Action& a = g.action(target);
  g.routing->inputs(g.device[target], a, g.routes);
  std::int64_t covered = a.slice.begin;
  for (const Route& r : g.routes) {
    if (r.port != port) continue;
    if (r.samples.begin > covered) missing(covered, r.samples.begin, std::string());
    const Entry* peer = find_entry(first, last, hint, r.minibatch, r.slice.begin);
    if (peer == nullptr || peer->end != r.slice.end) {
      missing(r.samples.begin, r.samples.end, expected_peer(r));
      continue;
    }
    if (g.device[peer->id] != r.device) {
      fail(g, target,
           "takes samples " + range(r.samples.begin, r.samples.end) + " from " +
               device_name(r.device) + " (its routing), but " + describe(g, peer->id) +
               " computes them");
    }
    add_edge(g, target, peer->id);
    covered = std::max(covered, r.samples.end);
  }
  if (covered < a.slice.end) missing(covered, a.slice.end, std::string());
}

// A graph's routing: edges to `target` from the actions its routes name on `port`, each tensor
// edge's routes (ordered by samples) covering the target's slice on their own. `bucket(vs)`
// is the peer virtual stage's entries of the peer op; `missing(lo, hi, vs, why)` reports
// samples of the target that no listed action of virtual stage vs provides (it throws).
template <class Bucket, class Missing>
void link_edge_inputs(Graph& g, std::uint32_t target, Port port, Bucket&& bucket,
                      Missing&& missing) {
  const Action& a = g.action(target);
  const std::vector<TensorEdge>& edges = g.routing->edges();
  g.routing->inputs(g.device[target], a, g.routes);
  int edge = -1;
  int peer_vs = 0;
  std::int64_t covered = a.slice.end;
  const Entry* first = nullptr;
  const Entry* last = nullptr;
  const Entry* hint = nullptr;
  for (const Route& r : g.routes) {
    if (r.port != port) continue;
    if (r.edge != edge) {
      if (covered < a.slice.end) missing(covered, a.slice.end, peer_vs, std::string());
      edge = r.edge;
      peer_vs = port == Port::activation ? edges[r.edge].from : edges[r.edge].to;
      const auto [begin, count] = bucket(peer_vs);
      first = hint = begin;
      last = begin + count;
      covered = a.slice.begin;
    }
    if (r.samples.begin > covered) missing(covered, r.samples.begin, peer_vs, std::string());
    const Entry* peer = find_entry(first, last, hint, r.minibatch, r.slice.begin);
    if (peer == nullptr || peer->end != r.slice.end) {
      missing(r.samples.begin, r.samples.end, peer_vs, expected_peer(r));
      continue;
    }
    if (g.device[peer->id] != r.device) {
      fail(g, target,
           "takes samples " + range(r.samples.begin, r.samples.end) + " from " +
               device_name(r.device) + " (its routing), but " + describe(g, peer->id) +
               " computes them");
    }
    add_edge(g, target, peer->id, r);
    covered = std::max(covered, r.samples.end);
  }
  if (covered < a.slice.end) missing(covered, a.slice.end, peer_vs, std::string());
}

void link_stages(Graph& g) {
  const int V = g.virtual_stages;
  auto bucket = [&](int o, int vs) {
    const std::uint32_t b = o * V + vs;
    return std::pair<const Entry*, std::size_t>{g.entries.data() + g.bucket_begin[b],
                                                g.bucket_begin[b + 1] - g.bucket_begin[b]};
  };
  const bool graph = !g.routing->edges().empty();
  auto no_edge = [](std::uint32_t, std::uint32_t) {};
  auto local_edge = [&](const char* what) {
    return [&g, what](std::uint32_t t, std::uint32_t s) {
      if (g.device[t] != g.device[s]) {
        fail(g, t,
             std::string("runs on another device than ") + describe(g, s) + ", which " + what);
      }
      g.edges.emplace_back(t, s | kNoDelay);
    };
  };
  if (!g.routing_from_list) {
    // The runtime sends an action's inputs to the device the rule names: it must run there.
    for (int vs = 0; vs < V; ++vs) {
      const int stage = g.list->params.stage_of_virtual(vs);
      const int chunk = g.list->params.chunk_of_virtual(vs);
      // A stage of one replica has one device: its bucket holds that device's actions only.
      if (g.list->params.replicas_of(stage) == 1) continue;
      for (const auto& [first, count] : {bucket(0, vs), bucket(1, vs), bucket(2, vs)}) {
        for (std::size_t i = 0; i < count; ++i) {
          const Entry& e = first[i];
          const int owner = g.routing->owner(stage, chunk, e.minibatch, Slice{e.begin, e.end});
          if (owner != g.device[e.id]) {
            fail(g, e.id,
                 "runs on " + device_name(g.device[e.id]) + ", but the routing places it on " +
                     device_name(owner));
          }
        }
      }
    }
  }
  for (int vs = 0; vs < V; ++vs) {
    auto [f, nf] = bucket(0, vs);
    auto [b, nbk] = bucket(1, vs);
    auto [w, nw] = bucket(2, vs);
    g.split[vs] = nw > 0;
    if (graph) {
      for (std::size_t i = 0; vs > 0 && i < nf; ++i) {
        const Entry& e = f[i];
        link_edge_inputs(
            g, e.id, Port::activation, [&](int peer) { return bucket(0, peer); },
            [&](std::int64_t lo, std::int64_t hi, int peer, const std::string& why) {
              fail(g, e.id,
                   "samples " + range(lo, hi) + " of minibatch " + std::to_string(e.minibatch) +
                       " are never computed by an F on " + stage_name(g, peer) + why);
            });
      }
    } else if (vs > 0) {
      auto [fu, nfu] = bucket(0, vs - 1);
      const Entry* hint = fu;
      for (std::size_t i = 0; i < nf; ++i) {
        const Entry& e = f[i];
        link_inputs(g, e.id, Port::activation, fu, fu + nfu, hint,
                    [&](std::int64_t lo, std::int64_t hi, const std::string& why) {
                      fail(g, e.id,
                           "samples " + range(lo, hi) + " of minibatch " +
                               std::to_string(e.minibatch) + " are never computed by an F on " +
                               stage_name(g, vs - 1) + why);
                    });
      }
    }
    match(b, nbk, f, nf, local_edge("holds its activations"),
          [&](const Entry& e, std::int64_t lo, std::int64_t hi) {
            fail(g, e.id, "no F on its stage computed samples " + range(lo, hi));
          });
    if (trains(g.list->params.kind)) {
      match(f, nf, b, nbk, no_edge, [&](const Entry& e, std::int64_t lo, std::int64_t hi) {
        fail(g, e.id, "has no B for samples " + range(lo, hi));
      });
    }
    if (graph) {
      for (std::size_t i = 0; i < nbk; ++i) {
        const Entry& e = b[i];
        link_edge_inputs(
            g, e.id, Port::gradient, [&](int peer) { return bucket(1, peer); },
            [&](std::int64_t lo, std::int64_t hi, int peer, const std::string& why) {
              fail(g, e.id,
                   "samples " + range(lo, hi) + " get no gradient: no B on " + stage_name(g, peer) +
                       " covers them" + why);
            });
      }
    } else if (vs + 1 < V) {
      auto [bd, nbd] = bucket(1, vs + 1);
      const Entry* hint = bd;
      for (std::size_t i = 0; i < nbk; ++i) {
        const Entry& e = b[i];
        link_inputs(g, e.id, Port::gradient, bd, bd + nbd, hint,
                    [&](std::int64_t lo, std::int64_t hi, const std::string& why) {
                      fail(g, e.id,
                           "samples " + range(lo, hi) + " get no gradient: no B on " +
                               stage_name(g, vs + 1) + " covers them" + why);
                    });
      }
    }
    if (nw > 0) {
      match(w, nw, b, nbk, local_edge("holds its saved inputs"),
            [&](const Entry& e, std::int64_t lo, std::int64_t hi) {
              fail(g, e.id, "no B on its stage computed samples " + range(lo, hi));
            });
      match(b, nbk, w, nw, no_edge, [&](const Entry& e, std::int64_t lo, std::int64_t hi) {
        fail(g, e.id,
             "is split (its stage has W actions) but has no W for samples " + range(lo, hi));
      });
    }
    // The flag the runtime reads must say what the order does: a split B leaves the weight
    // gradient to its W.
    for (std::size_t i = 0; i < nbk; ++i) {
      const bool with_weight = g.action(b[i].id).with_weight;
      if (nw > 0 && with_weight) {
        fail(g, b[i].id,
             "has with_weight = true, but W actions on its stage compute the weight gradient");
      }
      if (nw == 0 && !with_weight) {
        fail(g, b[i].id,
             "has with_weight = false, but no W on its stage computes the weight gradient of "
             "samples " +
                 range(b[i].begin, b[i].end));
      }
    }
  }
}

// Which stages' SYNCs of one round meet: a stage's replicas, and stages tied together (their
// all-reduce of the tied gradients joins them), merged transitively; the smallest stage names it.
std::vector<int> sync_meetings(const ScheduleParams& p) {
  std::vector<int> meets(static_cast<std::size_t>(p.stages));
  std::iota(meets.begin(), meets.end(), 0);
  if (p.global_sync) {
    std::fill(meets.begin(), meets.end(), 0);
    return meets;
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (const std::vector<int>& tie : p.tied_stages) {
      int least = p.stages;
      for (const int s : tie) least = std::min(least, meets[static_cast<std::size_t>(s)]);
      for (const int s : tie) {
        if (meets[static_cast<std::size_t>(s)] != least) {
          meets[static_cast<std::size_t>(s)] = least;
          changed = true;
        }
      }
    }
  }
  return meets;
}

// Fails unless each stage of a meeting of SYNCs (sorted by device) brings all its replicas: an
// all-reduce completes only when every member joins it; one that never does would hang the
// others at run time.
void check_sync_members(const Graph& g, const std::vector<std::uint32_t>& ids,
                        const std::vector<int>& meets) {
  const ScheduleParams& p = g.list->params;
  for (int stage = 0; stage < p.stages; ++stage) {
    if (meets[static_cast<std::size_t>(stage)] !=
        meets[static_cast<std::size_t>(p.stage_of(g.device[ids[0]]))]) {
      continue;
    }
    std::vector<std::uint32_t> mine;
    for (const std::uint32_t id : ids) {
      if (g.device[id] >= p.device_of(stage, 0) &&
          g.device[id] < p.device_of(stage, 0) + p.replicas_of(stage)) {
        mine.push_back(id);
      }
    }
    for (std::size_t a = 1; a < mine.size(); ++a) {
      if (g.device[mine[a]] == g.device[mine[a - 1]])
        fail(g, mine[a], "repeats " + describe(g, mine[a - 1]));
    }
    if (static_cast<int>(mine.size()) < p.replicas_of(stage)) {
      int missing = 0;
      while (missing < static_cast<int>(mine.size()) &&
             g.device[mine[missing]] == p.device_of(stage, missing)) {
        ++missing;
      }
      fail(g, ids[0],
           "SYNC round " + std::to_string(g.action(ids[0]).minibatch) + " of stage " +
               std::to_string(stage) + " lacks replica " + std::to_string(missing) + " (" +
               device_name(p.device_of(stage, missing)) +
               "): every replica of a stage, and every stage tied to it, joins every SYNC round");
    }
  }
}

// SYNC of round k: an all-reduce among the replicas of a stage and the stages tied to it, so
// each waits for the others to reach it (the action before their SYNC to end).
void link_syncs(Graph& g) {
  const ScheduleParams& p = g.list->params;
  const std::vector<int> meets = sync_meetings(p);
  struct Sync {
    int meeting;
    std::int64_t round;
    int device;
    std::uint32_t id;
  };
  std::vector<Sync> syncs;
  for (std::uint32_t id = 0; id < g.size(); ++id) {
    if (g.op[id] != Op::SYNC) continue;
    const int stage = p.stage_of(g.device[id]);
    syncs.push_back(
        {meets[static_cast<std::size_t>(stage)], g.action(id).minibatch, g.device[id], id});
  }
  std::sort(syncs.begin(), syncs.end(), [](const Sync& a, const Sync& b) {
    return std::tie(a.meeting, a.round, a.device, a.id) <
           std::tie(b.meeting, b.round, b.device, b.id);
  });
  for (std::size_t i = 0; i < syncs.size();) {
    std::size_t j = i;
    while (j < syncs.size() && syncs[j].meeting == syncs[i].meeting &&
           syncs[j].round == syncs[i].round) {
      ++j;
    }
    std::vector<std::uint32_t> ids;
    for (std::size_t a = i; a < j; ++a) ids.push_back(syncs[a].id);
    check_sync_members(g, ids, meets);
    for (std::size_t a = i; a < j; ++a) {
      for (std::size_t b = i; b < j; ++b) {
        if (a != b && !g.first_on_device(syncs[b].id)) {
          g.edges.emplace_back(syncs[a].id, (syncs[b].id - 1) | kNoDelay);
        }
      }
    }
    i = j;
  }
}

// A graph's messages, found target by target, put in the order their senders send them: by
// source, then tensor edge (a sender's outgoing routes), then as found (an edge's peers by
// samples). The dependencies' message indices follow.
void order_messages(Graph& g) {
  const std::uint32_t n = g.size();
  const auto count = static_cast<std::uint32_t>(g.unordered.size());
  if (count == 0) {  // a chain's routing, or a graph's on one device
    g.messages.clear();
    g.message_begin.clear();
    return;
  }
  g.order.resize(count);
  for (std::uint32_t m = 0; m < count; ++m) g.order[m] = m;
  std::stable_sort(g.order.begin(), g.order.end(), [&](std::uint32_t x, std::uint32_t y) {
    const Message& a = g.unordered[x];
    const Message& b = g.unordered[y];
    return std::tie(a.source, a.edge) < std::tie(b.source, b.edge);
  });
  g.messages.resize(count);
  g.message_begin.assign(n + 1, 0);
  for (std::uint32_t m = 0; m < count; ++m) {
    g.messages[m] = g.unordered[g.order[m]];
    ++g.message_begin[g.messages[m].source + 1];
  }
  for (std::uint32_t i = 0; i < n; ++i) g.message_begin[i + 1] += g.message_begin[i];
  // order[new] = old, turned into old -> new for the dependencies.
  g.cursor.resize(count);
  for (std::uint32_t m = 0; m < count; ++m) g.cursor[g.order[m]] = m;
  for (Dependency& d : g.edges) {
    if (d.message != kNoMessage) d.message = g.cursor[d.message];
  }
}

void build_csr(Graph& g) {
  const std::uint32_t n = g.size();
  const bool graph = !g.messages.empty();
  g.pred_begin.assign(n + 1, 0);
  for (const Dependency& d : g.edges) ++g.pred_begin[d.target + 1];
  for (std::uint32_t i = 0; i < n; ++i) g.pred_begin[i + 1] += g.pred_begin[i];
  g.preds.resize(g.edges.size());
  g.pred_message.resize(graph ? g.edges.size() : 0);
  g.cursor.assign(g.pred_begin.begin(), g.pred_begin.end() - 1);
  for (const Dependency& d : g.edges) {
    const std::uint32_t k = g.cursor[d.target]++;
    g.preds[k] = d.source;
    if (graph) g.pred_message[k] = d.message;
  }
}

}  // namespace

std::string describe(const Graph& g, std::uint32_t id) {
  const int d = g.device[id];
  const Action& a = g.action(id);
  std::string out(1, 'd');
  out += std::to_string(d);
  out += " #";
  out += std::to_string(id - g.device_begin[d]);
  out += ' ';
  out += to_string(a);
  if (a.op == Op::F || a.op == Op::B || a.op == Op::W) {
    out += " on " + stage_name(g, g.vstage[id]);
  } else {
    out += " on stage " + std::to_string(g.vstage[id]);
  }
  return out;
}

void build_graph(const ActionList& list, Graph& g, const std::vector<TensorEdge>& edges) {
  const auto& p = list.params;
  p.validate();
  g.list = &list;
  g.stages = p.stages;
  g.chunks = p.chunks;
  g.virtual_stages = p.stages * p.chunks;
  g.devices = p.total_replicas();
  if (static_cast<int>(list.devices.size()) != g.devices) {
    throw ScheduleError("action list: " + std::to_string(list.devices.size()) +
                        " device orders for " + std::to_string(g.devices) +
                        " devices (stages x replicas)");
  }
  g.device_stage.resize(g.devices);
  g.device_begin.resize(g.devices + 1);
  for (int s = 0, d = 0; s < p.stages; ++s) {
    for (int r = p.replicas_of(s); r > 0; --r) g.device_stage[d++] = s;
  }
  std::uint64_t total = 0;
  for (int d = 0; d < g.devices; ++d) {
    g.device_begin[d] = static_cast<std::uint32_t>(total);
    total += list.devices[d].size();
    if (total > kIdMask) throw ScheduleError("action list: more than 2^31 actions");
  }
  g.device_begin[g.devices] = static_cast<std::uint32_t>(total);
  const std::uint32_t n = g.size();
  g.device.resize(n);
  g.vstage.resize(n);
  g.op.resize(n);
  g.samples.resize(n);
  g.dest.resize(n);
  g.split.assign(g.virtual_stages, 0);
  g.edges.clear();
  g.unordered.clear();
  check_fields(g, p);
  fill_buckets(g);
  g.routing_from_list = p.kind == ScheduleKind::custom;
  if (g.routing_from_list && edges.empty()) {
    g.routing.emplace(list);
  } else if (g.routing_from_list) {
    g.routing.emplace(list, edges);
  } else if (edges.empty()) {
    g.routing.emplace(p);
  } else {
    g.routing.emplace(p, edges);
  }
  link_stages(g);
  link_syncs(g);
  order_messages(g);
  build_csr(g);
}

std::string find_deadlock(const Graph& g) {
  const std::uint32_t n = g.size();
  std::vector<std::uint8_t> done(n, 0);
  std::vector<std::uint32_t> next(g.device_begin.begin(), g.device_begin.end() - 1);
  auto first_missing = [&](std::uint32_t id) -> std::int64_t {
    for (std::uint32_t e = g.pred_begin[id]; e < g.pred_begin[id + 1]; ++e) {
      const std::uint32_t src = g.preds[e] & kIdMask;
      if (!done[src]) return src;
    }
    return -1;
  };
  // Runs every device as far as it can, a device blocked on an action going to sleep on that
  // action until it is done: linear in actions + edges (sweeping every device until nothing
  // moves is quadratic in the stages of a pipeline, whose devices unblock one by one).
  std::vector<std::uint32_t> edge(g.devices);         // next unchecked dependency of next[d]
  std::vector<std::int32_t> sleeper(n, -1);           // first device waiting for an action
  std::vector<std::int32_t> next_sleeper(g.devices);  // the next device waiting for the same
  std::vector<int> ready(g.devices);
  for (int d = 0; d < g.devices; ++d) {
    edge[d] = g.pred_begin[next[d]];
    ready[d] = g.devices - 1 - d;
  }
  while (!ready.empty()) {
    const int d = ready.back();
    ready.pop_back();
    while (next[d] < g.device_begin[d + 1]) {
      const std::uint32_t id = next[d];
      while (edge[d] < g.pred_begin[id + 1] && done[g.preds[edge[d]] & kIdMask]) ++edge[d];
      if (edge[d] < g.pred_begin[id + 1]) {
        const std::uint32_t src = g.preds[edge[d]] & kIdMask;
        next_sleeper[d] = sleeper[src];
        sleeper[src] = d;
        break;
      }
      done[id] = 1;
      edge[d] = g.pred_begin[++next[d]];
      for (std::int32_t w = sleeper[id]; w >= 0; w = next_sleeper[w]) ready.push_back(w);
      sleeper[id] = -1;
    }
  }
  std::string out;
  for (int d = 0; d < g.devices; ++d) {
    if (next[d] == g.device_begin[d + 1]) continue;
    const auto missing = static_cast<std::uint32_t>(first_missing(next[d]));
    out += out.empty() ? "deadlock: " : "; ";
    out += describe(g, next[d]) + " waits for " + describe(g, missing);
  }
  return out;
}

}  // namespace tandem::schedules::detail
