#include "train/job_trace.hpp"

#include <cstring>
#include <exception>
#include <span>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "runtime/sha256.hpp"
#include "train/trace_file.hpp"
#include "train/trace_merge.hpp"
#include "transport/control_frame.hpp"

namespace tandem::train {
namespace {

// What a rank hands over: its trace, or why it has none, so that rank 0 never waits for a
// trace that is not coming.
constexpr char kTrace = 'T';
constexpr char kFailure = 'E';

std::string key_of(int rank) {
  return "trace/" + std::to_string(rank);
}

nlohmann::json rank_trace(const PipelineTrace& trace, ProcessGroup& group) {
  nlohmann::json j = trace.to_json();
  mark_trace_process(j, {group.rank(), group.world_size(),
                         trace_job_id(group.rendezvous().job_nonce()), group.host()});
  return j;
}

void hand_over(const PipelineTrace& trace, ProcessGroup& group) {
  std::string value;
  try {
    value = kTrace + rank_trace(trace, group).dump();
    if (value.size() - 1 > kMaxTraceBytes) {
      throw std::runtime_error("its trace has " + std::to_string(value.size() - 1) +
                               " bytes, more than a trace may hold (" +
                               std::to_string(kMaxTraceBytes) + ")");
    }
  } catch (const std::exception& e) {
    value = kFailure + std::string(e.what());
  }
  group.put(key_of(group.rank()), std::as_bytes(std::span(value.data(), value.size())));
}

TraceInput take_trace(ProcessGroup& group, int rank) {
  const std::vector<std::byte> bytes = group.take(key_of(rank));
  const std::string name = "the trace of " + group.describe(rank);
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  if (text.empty() || (text.front() != kTrace && text.front() != kFailure)) {
    throw std::runtime_error(name + ": not a trace (a malformed hand-over)");
  }
  if (text.front() == kFailure) {
    throw std::runtime_error(group.describe(rank) + " could not hand over its trace: " +
                             transport::printable(text.substr(1), 1000));
  }
  return {name, parse_trace(text.substr(1), name)};
}

}  // namespace

std::string trace_job_id(const transport::JobNonce& nonce) {
  Sha256 digest;
  digest.update("tandem trace job ");
  digest.update(std::as_bytes(std::span(nonce.data(), nonce.size())));
  return digest.hex_digest().substr(0, 32);
}

void write_job_trace(const PipelineTrace& trace, const std::filesystem::path& path,
                     ProcessGroup* group) {
  if (group == nullptr) {
    trace.write(path);
    return;
  }
  if (group->rank() > 0) {
    hand_over(trace, *group);
    return;
  }
  std::vector<TraceInput> inputs;
  inputs.push_back({"the trace of " + group->describe(0), rank_trace(trace, *group)});
  for (int k = 1; k < group->world_size(); ++k) inputs.push_back(take_trace(*group, k));
  write_trace_file(merge_traces(inputs), path);
}

}  // namespace tandem::train
