#include "schedules/validator.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "schedules/detail/graph.hpp"
#include "schedules/schedule_error.hpp"
#include "schedules/weight_versions.hpp"

namespace tandem::schedules {
namespace {

// Each version lives from the STEP that publishes it until its last use (the newest one
// always); the most alive at once must fit in versions_kept().
void check_versions(const detail::Graph& g, int d) {
  const ScheduleParams& p = g.list->params;
  const auto& actions = g.list->devices[d];
  const int stage = g.device_stage[d];
  const auto fail = [&](std::size_t i, const std::string& what) {
    throw ScheduleError("action list: " + detail::describe(g, g.device_begin[d] + i) + ": " + what);
  };
  const auto uses_weights = [](Op op) { return op == Op::F || op == Op::B || op == Op::W; };
  std::vector<std::int64_t> last_use(1, -1);
  std::int64_t latest = 0;
  for (std::size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
    if (a.op == Op::STEP) {
      if (a.minibatch != latest) {
        fail(i, "publishes version " + std::to_string(a.minibatch + 1) + " but the stage is at " +
                    "version " + std::to_string(latest) + " (expected round " +
                    std::to_string(latest) + ")");
      }
      ++latest;
      last_use.push_back(-1);
    } else if (uses_weights(a.op)) {
      const std::int64_t v = weight_version(p, stage, a.minibatch);
      if (v > latest) {
        fail(i, "needs weight version " + std::to_string(v) + ", but only " +
                    std::to_string(latest) + " STEPs precede it");
      }
      last_use[v] = static_cast<std::int64_t>(i);
    }
  }
  const int kept = versions_kept(p, stage);
  int alive = 1;
  latest = 0;
  for (std::size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
    const auto pos = static_cast<std::int64_t>(i);
    if (a.op == Op::STEP) {
      ++alive;
      if (last_use[latest] <= pos) --alive;  // the old version has no use left
      ++latest;
    } else if (uses_weights(a.op)) {
      const std::int64_t v = weight_version(p, stage, a.minibatch);
      if (last_use[v] == pos && v != latest) --alive;
    }
    if (alive > kept) {
      fail(i, "stage " + std::to_string(stage) + " would hold " + std::to_string(alive) +
                  " weight versions at once; schedule " + std::string(to_string(p.kind)) +
                  " keeps " + std::to_string(kept));
    }
  }
}

}  // namespace

void validate(const ActionList& list) {
  detail::Graph g;
  detail::build_graph(list, g);
  if (auto deadlock = detail::find_deadlock(g); !deadlock.empty()) {
    throw ScheduleError("action list: " + deadlock);
  }
  for (int d = 0; d < g.devices; ++d) check_versions(g, d);
}

}  // namespace tandem::schedules
