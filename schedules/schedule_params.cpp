#include "schedules/schedule_params.hpp"

#include <algorithm>
#include <limits>
#include <numeric>
#include <string>

#include "schedules/schedule_error.hpp"

namespace tandem::schedules {
namespace {

constexpr std::int64_t kMaxVirtualStages = std::int64_t{1} << 20;

[[noreturn]] void fail(const ScheduleParams& p, const std::string& what) {
  throw ScheduleError("schedule " + std::string(to_string(p.kind)) + ": " + what);
}

void check_compositions(const ScheduleParams& p,
                        const std::vector<std::vector<std::int64_t>>& comps, const char* name) {
  if (comps.empty()) return;
  if (p.kind != ScheduleKind::umpipe) fail(p, std::string(name) + " applies to umpipe only");
  if (static_cast<int>(comps.size()) != p.stages) {
    fail(p, std::string(name) + " has " + std::to_string(comps.size()) + " entries for " +
                std::to_string(p.stages) + " stages");
  }
  for (std::size_t s = 0; s < comps.size(); ++s) {
    if (comps[s].empty()) continue;
    std::int64_t sum = 0;
    for (std::size_t i = 0; i < comps[s].size(); ++i) {
      if (comps[s][i] <= 0) {
        fail(p, std::string(name) + "[" + std::to_string(s) + "][" + std::to_string(i) +
                    "] = " + std::to_string(comps[s][i]) + " is not positive");
      }
      sum += comps[s][i];
    }
    if (sum != p.samples()) {
      fail(p, std::string(name) + "[" + std::to_string(s) + "] sums to " + std::to_string(sum) +
                  ", not the minibatch size " + std::to_string(p.samples()));
    }
  }
}

// Each tie lists two or more stages in ascending order. PipeDream averages a replicated stage's
// minibatches (each its own mean), which a sum with another stage's gradient cannot follow.
void check_ties(const ScheduleParams& p) {
  for (std::size_t t = 0; t < p.tied_stages.size(); ++t) {
    const std::vector<int>& g = p.tied_stages[t];
    const std::string label = "tied_stages[" + std::to_string(t) + "]";
    if (g.size() < 2) fail(p, label + " lists fewer than two stages");
    for (std::size_t i = 0; i < g.size(); ++i) {
      if (g[i] < 0 || g[i] >= p.stages) {
        fail(p, label + " names stage " + std::to_string(g[i]) + " of " + std::to_string(p.stages));
      }
      if (i > 0 && g[i] <= g[i - 1]) fail(p, label + " is not strictly ascending");
      if (is_asynchronous(p.kind) && p.kind != ScheduleKind::pipedream_2bw &&
          p.replicas_of(g[i]) > 1) {
        fail(p, label + ": stage " + std::to_string(g[i]) +
                    " is replicated; PipeDream ties only unreplicated stages (a replicated "
                    "stage's gradient is a mean over its minibatches)");
      }
    }
  }
}

std::vector<std::int64_t> composition(const ScheduleParams& p,
                                      const std::vector<std::vector<std::int64_t>>& comps,
                                      int stage) {
  if (stage < static_cast<int>(comps.size()) && !comps[stage].empty()) return comps[stage];
  std::vector<std::int64_t> sizes(p.slices);
  for (int i = 0; i < p.slices; ++i) sizes[i] = p.equal_slice(i).size();
  return sizes;
}

}  // namespace

void ScheduleParams::validate() const {
  if (stages < 1) fail(*this, "stages must be at least 1, got " + std::to_string(stages));
  if (slices < 1) fail(*this, "slices must be at least 1, got " + std::to_string(slices));
  if (chunks < 1) fail(*this, "chunks must be at least 1, got " + std::to_string(chunks));
  // Every device keeps per-chunk state: bound the virtual stages before anything allocates them
  // (a text-form header with chunks=33333332 asked for gigabytes).
  if (chunks > 1 && static_cast<std::int64_t>(stages) * chunks > kMaxVirtualStages) {
    fail(*this, std::to_string(stages) + " stages x " + std::to_string(chunks) +
                    " chunks: more than " + std::to_string(kMaxVirtualStages) + " virtual stages");
  }
  if (minibatch_size < 0) fail(*this, "minibatch_size is negative");
  if (minibatches < 0) fail(*this, "minibatches is negative");
  if (!replicas.empty() && static_cast<int>(replicas.size()) != stages) {
    fail(*this, "replicas lists " + std::to_string(replicas.size()) + " stages, expected " +
                    std::to_string(stages));
  }
  bool replicated = false;
  std::int64_t devices = 0;  // summed wide: total_replicas() must not overflow
  for (std::size_t s = 0; s < replicas.size(); ++s) {
    if (replicas[s] < 1) fail(*this, "replicas[" + std::to_string(s) + "] must be at least 1");
    replicated = replicated || replicas[s] > 1;
    devices += replicas[s];
  }
  if (devices > std::numeric_limits<int>::max()) {
    fail(*this, "replicas add up to " + std::to_string(devices) + " devices, more than " +
                    std::to_string(std::numeric_limits<int>::max()));
  }
  const bool async = is_asynchronous(kind);
  if (minibatches == 0 && !async) fail(*this, "a flush schedule needs minibatches >= 1");
  if (kind == ScheduleKind::zb_v && chunks != 2) {
    fail(*this, "zb-v holds two chunks per device in V order: chunks must be 2, got " +
                    std::to_string(chunks));
  }
  if (chunks > 1 && kind != ScheduleKind::interleaved && kind != ScheduleKind::zb_v &&
      kind != ScheduleKind::custom) {
    fail(*this, "chunks > 1 applies to interleaved and zb-v schedules only");
  }
  if (rematerialize && kind != ScheduleKind::gpipe) fail(*this, "rematerialize applies to gpipe");
  if (replicated && kind != ScheduleKind::naive && kind != ScheduleKind::gpipe &&
      kind != ScheduleKind::one_f_one_b && kind != ScheduleKind::pipedream &&
      kind != ScheduleKind::custom && kind != ScheduleKind::forward) {
    fail(*this,
         "replicated stages are supported by naive, gpipe, 1f1b, pipedream and forward only");
  }
  if ((kind == ScheduleKind::pipedream || kind == ScheduleKind::pipedream_vsync) && slices != 1) {
    fail(*this,
         "PipeDream runs whole minibatches: slices must be 1, got " + std::to_string(slices));
  }
  if (kind == ScheduleKind::pipedream_2bw && slices < stages) {
    fail(*this, "2BW needs at least as many slices per batch as stages (m=" +
                    std::to_string(slices) + " < p=" + std::to_string(stages) + ")");
  }
  if (kind == ScheduleKind::interleaved && slices % stages != 0) {
    fail(*this, "interleaved 1F1B requires slices (m=" + std::to_string(slices) +
                    ") to be a multiple of stages (p=" + std::to_string(stages) + ")");
  }
  check_ties(*this);
  if (global_sync && (is_asynchronous(kind) || !trains(kind))) {
    fail(*this,
         "global_sync needs a flush schedule (an asynchronous one has no round that every stage "
         "updates at)");
  }
  check_compositions(*this, forward_slices, "forward_slices");
  check_compositions(*this, backward_slices, "backward_slices");
  auto composed = [&](const std::vector<std::vector<std::int64_t>>& comps) {
    if (static_cast<int>(comps.size()) != stages) return false;
    for (const auto& c : comps) {
      if (c.empty()) return false;
    }
    return true;
  };
  const bool all_composed = composed(forward_slices) && composed(backward_slices);
  if (!all_composed && samples() < slices) {
    fail(*this, "minibatch_size " + std::to_string(samples()) + " is smaller than slices " +
                    std::to_string(slices) + ": a slice would be empty");
  }
}

bool ScheduleParams::tied(int stage) const {
  for (const std::vector<int>& g : tied_stages) {
    if (std::find(g.begin(), g.end(), stage) != g.end()) return true;
  }
  return false;
}

int ScheduleParams::replicas_of(int stage) const {
  return replicas.empty() ? 1 : replicas.at(stage);
}

int ScheduleParams::total_replicas() const {
  return replicas.empty() ? stages : std::accumulate(replicas.begin(), replicas.end(), 0);
}

// One replica per stage is the common case and must stay O(1): the simulator and the text form
// ask for every device of pipelines with tens of thousands of stages.
int ScheduleParams::device_of(int stage, int replica) const {
  if (replicas.empty()) return stage + replica;
  int device = 0;
  for (int s = 0; s < stage; ++s) device += replicas_of(s);
  return device + replica;
}

int ScheduleParams::stage_of(int device) const {
  if (replicas.empty() && device >= 0 && device < stages) return device;
  for (int s = 0; s < stages; ++s) {
    if (device < replicas_of(s)) return s;
    device -= replicas_of(s);
  }
  throw ScheduleError("device " + std::to_string(device) + " is beyond the last stage");
}

int ScheduleParams::replica_of(int device) const {
  if (replicas.empty() && device >= 0 && device < stages) return 0;
  for (int s = 0; s < stages; ++s) {
    if (device < replicas_of(s)) return device;
    device -= replicas_of(s);
  }
  throw ScheduleError("device index beyond the last stage");
}

std::int64_t ScheduleParams::samples() const {
  if (minibatch_size > 0) return minibatch_size;
  for (const auto* comps : {&forward_slices, &backward_slices}) {
    for (const auto& c : *comps) {
      if (!c.empty()) return std::accumulate(c.begin(), c.end(), std::int64_t{0});
    }
  }
  return slices;
}

int ScheduleParams::virtual_stage(int stage, int chunk) const {
  if (kind == ScheduleKind::zb_v && chunk == 1) return 2 * stages - 1 - stage;
  return chunk * stages + stage;
}

int ScheduleParams::stage_of_virtual(int vstage) const {
  if (kind == ScheduleKind::zb_v && vstage >= stages) return 2 * stages - 1 - vstage;
  return vstage % stages;
}

int ScheduleParams::chunk_of_virtual(int vstage) const {
  return vstage / stages;
}

Slice ScheduleParams::equal_slice(int i) const {
  const std::int64_t b = samples();
  return {i * b / slices, (i + 1) * b / slices};
}

std::vector<std::int64_t> ScheduleParams::forward_composition(int stage) const {
  return composition(*this, forward_slices, stage);
}

std::vector<std::int64_t> ScheduleParams::backward_composition(int stage) const {
  return composition(*this, backward_slices, stage);
}

}  // namespace tandem::schedules
