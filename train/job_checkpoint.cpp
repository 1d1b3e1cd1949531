#include "train/job_checkpoint.hpp"

#include <unistd.h>

#include <exception>
#include <nlohmann/json.hpp>
#include <string>

#include "train/process_group.hpp"
#include "transport/control_frame.hpp"

namespace tandem::train {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string key(const char* what, int segment, int rank) {
  return "ckpt/" + std::to_string(segment) + "/" + what + "/" + std::to_string(rank);
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "";
  return name;
}

void put_json(ProcessGroup& group, const std::string& k, const json& value) {
  const std::string text = value.dump();
  group.put(k, std::as_bytes(std::span(text.data(), text.size())));
}

// A JSON object from another rank, bounded and parsed before use.
json take_json(ProcessGroup& group, const std::string& k, int from) {
  constexpr std::size_t kMaxBytes = 16u << 20;
  const std::vector<std::byte> bytes = group.take(k);
  const std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  const std::string who = group.describe(from) + " ('" + k + "')";
  if (text.size() > kMaxBytes) {
    throw CheckpointError(who + " sent " + std::to_string(text.size()) +
                          " bytes, more than a checkpoint report holds");
  }
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    throw CheckpointError(who + " sent a malformed checkpoint message '" +
                          transport::printable(text.substr(0, 200)) + "'");
  }
  return j;
}

// This rank's stage files in the step directory, or what stopped it.
json write_own(const fs::path& step_dir, std::int64_t step, const std::vector<OwnStageFile>& own,
               int rank) {
  try {
    json files = json::array();
    for (const OwnStageFile& f : own) {
      StageFileRecord r = write_stage_file(step_dir, f.stage, step, f.contents);
      r.rank = rank;
      r.host = host_name();
      files.push_back(stage_file_record_to_json(r));
    }
    return json{{"files", files}};
  } catch (const std::exception& e) {
    return json{{"error", e.what()}};
  }
}

std::vector<StageFileRecord> records_of(const json& report, int stages, const std::string& from) {
  std::vector<StageFileRecord> out;
  if (!report.contains("files") || !report["files"].is_array()) {
    throw CheckpointError(from + " sent a checkpoint report without a list of files");
  }
  for (const json& f : report["files"]) out.push_back(stage_file_record_from_json(f, stages, from));
  return out;
}

fs::path commit_at_rank_0(ProcessGroup& group, int segment, const Checkpoint& checkpoint,
                          const std::vector<OwnStageFile>& own, const CheckpointSlot& slot,
                          const CheckpointWriteOptions& options) {
  const int stages = static_cast<int>(checkpoint.plan.stages.size());
  std::vector<StageFileRecord> files;
  std::string failure;
  const auto collect = [&](const json& report, int k) {
    if (report.contains("error")) {
      if (failure.empty()) {
        failure = group.describe(k) + " could not write its stages: " +
                  report["error"].dump();  // quoted: the other rank's text, not ours
      }
      return;
    }
    for (StageFileRecord& r : records_of(report, stages, group.describe(k))) {
      if (r.rank != k) {
        throw CheckpointError(group.describe(k) + " reported stage file " + r.file +
                              " as written by rank " + std::to_string(r.rank));
      }
      files.push_back(std::move(r));
    }
  };
  try {
    collect(write_own(slot.step_dir(), checkpoint.step, own, 0), 0);
    for (int k = 1; k < group.world_size(); ++k)
      collect(take_json(group, key("files", segment, k), k), k);
    if (!failure.empty()) throw CheckpointError(failure);
    const fs::path done = commit_checkpoint(slot, checkpoint, std::move(files), options);
    const json outcome = {{"checkpoint", slot.name}, {"kept", kept_checkpoints(slot, options)}};
    for (int k = 1; k < group.world_size(); ++k) put_json(group, key("done", segment, k), outcome);
    return done;
  } catch (const std::exception& e) {
    abandon_checkpoint(slot);
    const json outcome = {{"error", e.what()}};
    for (int k = 1; k < group.world_size(); ++k) put_json(group, key("done", segment, k), outcome);
    throw;
  }
}

// A step directory name from rank 0, checked before it becomes a path.
std::string slot_name(const json& j, const std::string& from) {
  if (j.contains("error")) {
    throw CheckpointError(from + " could not open the checkpoint: " + j["error"].dump());
  }
  if (!j.contains("name") || !j["name"].is_string() ||
      !is_step_dir_name(j["name"].get<std::string>())) {
    throw CheckpointError(from + " named no checkpoint directory: " + j.dump().substr(0, 200));
  }
  return j["name"].get<std::string>();
}

fs::path write_at_rank(ProcessGroup& group, int segment, const fs::path& dir,
                       const Checkpoint& checkpoint, const std::vector<OwnStageFile>& own) {
  const int k = group.rank();
  const std::string name =
      slot_name(take_json(group, key("open", segment, k), 0), group.describe(0));
  const fs::path step_dir = dir / name;
  put_json(group, key("files", segment, k), write_own(step_dir, checkpoint.step, own, k));
  const json outcome = take_json(group, key("done", segment, k), 0);
  if (outcome.contains("error")) {
    throw CheckpointError("the checkpoint of step " + std::to_string(checkpoint.step) +
                          " failed at " + group.describe(0) + ": " + outcome["error"].dump());
  }
  std::error_code ec;
  if (!fs::exists(step_dir / "manifest.json", ec) && outcome.contains("kept") &&
      outcome["kept"].is_array()) {
    // Not rank 0's disk: this rank prunes its own directory as rank 0 pruned its.
    std::vector<std::string> keep{name};
    for (const json& n : outcome["kept"]) {
      if (n.is_string() && is_step_dir_name(n.get<std::string>())) keep.push_back(n);
    }
    prune_local_checkpoints(dir, keep);
  }
  return step_dir;
}

}  // namespace

fs::path write_job_checkpoint(ProcessGroup* group, int segment, const fs::path& dir,
                              const Checkpoint& checkpoint, const std::vector<OwnStageFile>& own,
                              const CheckpointWriteOptions& options) {
  if (group == nullptr) {
    Checkpoint whole = checkpoint;
    whole.stages.clear();
    for (const OwnStageFile& f : own) whole.stages.push_back(f.contents);
    return write_checkpoint(dir, whole, options);
  }
  if (group->rank() > 0) return write_at_rank(*group, segment, dir, checkpoint, own);
  CheckpointSlot slot;
  try {
    slot = open_checkpoint(dir, checkpoint.step, checkpoint.parent, options);
  } catch (const std::exception& e) {
    for (int k = 1; k < group->world_size(); ++k) {
      put_json(*group, key("open", segment, k), json{{"error", e.what()}});
    }
    throw;
  }
  for (int k = 1; k < group->world_size(); ++k) {
    put_json(*group, key("open", segment, k), json{{"name", slot.name}});
  }
  return commit_at_rank_0(*group, segment, checkpoint, own, slot, options);
}

}  // namespace tandem::train
