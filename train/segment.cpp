#include "train/segment.hpp"

#include <algorithm>
#include <charconv>
#include <stdexcept>
#include <string>

#include "runtime/scheduler.hpp"
#include "train/process_group.hpp"
#include "train/process_placement.hpp"
#include "transport/control_frame.hpp"

namespace tandem::train {
namespace {

std::string key(const char* what, int segment, int rank) {
  return "segment/" + std::to_string(segment) + "/" + what + "/" + std::to_string(rank);
}

// Connects, runs and releases `pipeline`, telling on_running while it may be stopped.
actors::PipelineResult run_connected(actors::Pipeline& pipeline, const SegmentOptions& o) {
  const auto done = [&o] {
    if (o.on_running) o.on_running(nullptr);
    if (o.group != nullptr) o.group->release();
  };
  if (o.on_running) o.on_running(&pipeline);
  actors::PipelineResult result;
  try {
    if (o.group != nullptr) o.group->connect(pipeline, o.segment);
    result = pipeline.run();
  } catch (...) {
    done();
    throw;
  }
  done();
  return result;
}

// Where the loader runs the segment's end is known (a stop may cut it short): the others learn
// it, so every rank's next segment starts at the same step. One key per reader: a value taken
// is gone from rank 0's store.
void share_ran_count(ProcessGroup& group, int segment, int64_t length, int64_t& minibatches) {
  const std::string n = group.broadcast_text("segment/" + std::to_string(segment) + "/ran",
                                             std::to_string(minibatches));
  if (group.rank() > 0) minibatches = ran_minibatches(std::as_bytes(std::span(n)), length);
}

// The state of each stage some replica of which runs in this process (replicas agree at a
// segment's end: any one stands for the stage).
std::vector<StageState> own_states(actors::Pipeline& pipeline, const schedules::ScheduleParams& sp,
                                   const SegmentOptions& o) {
  std::vector<StageState> out;
  for (int st = 0; st < sp.stages; ++st) {
    const int r = pipeline.hosted_replica(st, 0);
    if (o.group != nullptr && !pipeline.hosts_stage(st, r)) continue;
    out.push_back({st, pipeline.stage(st, r).latest_params(), pipeline.optimizer_state(st),
                   pipeline.older_versions(st)});
  }
  return out;
}

// Rank 0 learns every other rank's replica statistics (how the job reports); the stages' state
// stays where it is: each rank checkpoints and continues its own.
void gather_stats_at_rank_0(ProcessGroup& group, int segment, SegmentResult& out) {
  if (group.rank() > 0) {
    group.put(key("state", segment, group.rank()),
              encode_stage_states(StageStateBundle{{}, out.pipeline.stages}));
    return;
  }
  for (int k = 1; k < group.world_size(); ++k) {
    StageStateBundle theirs = decode_stage_states(group.take(key("state", segment, k)));
    if (!theirs.stages.empty()) {
      throw std::runtime_error(group.describe(k) + " sent stage state with its statistics");
    }
    out.pipeline.stages.insert(out.pipeline.stages.end(), theirs.stats.begin(), theirs.stats.end());
  }
  std::sort(out.pipeline.stages.begin(), out.pipeline.stages.end(),
            [](const auto& a, const auto& b) { return a.device < b.device; });
}

}  // namespace

SegmentResult run_segment(actors::PipelineSpec spec, const SegmentOptions& options) {
  if (options.group != nullptr && options.placement == nullptr) {
    throw std::invalid_argument("run_segment: segment " + std::to_string(options.segment) +
                                " has a process group but no placement");
  }
  const schedules::ScheduleParams sp = spec.plan.schedule;
  if (options.group != nullptr) options.group->prepare(spec, *options.placement, options.segment);
  if (options.shared_threads) spec.cpu_threads = static_cast<int>(options.shared_threads->size());
  actors::Pipeline pipeline(
      std::move(spec),
      make_work_sharing({.workers = options.threads, .shared_threads = options.shared_threads}));
  SegmentResult out;
  out.pipeline = run_connected(pipeline, options);
  if (options.group != nullptr) {
    share_ran_count(*options.group, options.segment, sp.minibatches, out.pipeline.minibatches);
  }
  if (options.gather_state) out.states = own_states(pipeline, sp, options);
  if (options.group != nullptr) {
    gather_stats_at_rank_0(*options.group, options.segment, out);
    // Nobody closes its data plane while another may still read from it.
    options.group->end_segment(options.segment);
  }
  return out;
}

int64_t ran_minibatches(std::span<const std::byte> bytes, int64_t segment_length) {
  const std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  int64_t n = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size() || n < 0 || n > segment_length) {
    throw std::runtime_error("rank 0 sent a malformed count of the segment's minibatches '" +
                             transport::printable(text) + "' (expected 0 to " +
                             std::to_string(segment_length) + ")");
  }
  return n;
}

}  // namespace tandem::train
