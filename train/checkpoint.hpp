#pragma once
// Checkpoints of a pipeline run: what a run needs to continue exactly where it stopped.
//
// On disk (docs/checkpoints.md has the details):
//   DIR/latest                      {"checkpoint": "step-00000100", "manifest_sha256": "..."}
//   DIR/step-00000100/stage-0.safetensors ... stage-<p-1>.safetensors
//   DIR/step-00000100/manifest.json
// Stage files hold tensors named "weights/r<replica>/v<version>/<param>" and
// "optimizer/r<replica>/<state>" (safetensors layout: other tools read them). The manifest holds
// the step, model, plan and schedule, seed, RNG and data position, and each stage file's size
// and SHA-256. Every file is written atomically (runtime/atomic_file.hpp): stage files first,
// then the manifest, then `latest`, so a checkpoint exists once `latest` names it, and a writer
// killed at any point leaves the previous checkpoint as it was.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "models/optimizer.hpp"
#include "models/param_set.hpp"
#include "schedules/plan.hpp"

namespace tandem::train {

// Names the file and what is wrong with it: "run/step-00000100/stage-1.safetensors: checksum
// mismatch (sha256 ab12..., the manifest says 9f3c...): the file is corrupted".
class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One weight version of one replica of a stage.
struct CheckpointWeights {
  int replica = 0;
  std::int64_t version = 0;  // the version's number in the run (updates applied to it)
  models::ParamSet params;
};

// One replica's optimizer (models::Optimizer::state(), steps()).
struct CheckpointOptimizer {
  int replica = 0;
  std::int64_t steps = 0;
  models::ParamSet state;
};

struct StageCheckpoint {
  // The weights each replica trains (its newest version) and the older versions that
  // minibatches in flight still need (weight stashing). Replicas that hold equal weights may
  // store them once (replica 0): the format keeps whatever entries it is given, in order.
  std::vector<CheckpointWeights> weights;
  std::vector<CheckpointOptimizer> optimizers;       // at most one per replica
  nlohmann::json extras = nlohmann::json::object();  // per-stage state the format does not know
  std::filesystem::path file;  // the stage file it was read from (empty when built in memory)
  // Who wrote that file (the manifest's "rank" and "host"; 0 and empty in one process's and
  // older checkpoints).
  int rank = 0;
  std::string host;
};

// A checkpoint in its directory: the step directory's name and its manifest's SHA-256 (what
// `latest` records; names repeat across runs, the digest tells their checkpoints apart).
struct CheckpointRef {
  std::string name;  // "step-00000100"
  std::string manifest_sha256;
  friend bool operator==(const CheckpointRef&, const CheckpointRef&) = default;
};

struct Checkpoint {
  std::int64_t step = 0;  // minibatches done
  std::string model;      // models::ModelSpec::describe(): a resume refuses another model
  // train::model_identity(): every layer's line, the loss, the ties (empty in manifests written
  // before it was recorded: then only `model` and the parameter shapes are compared).
  std::vector<std::string> model_layers;
  schedules::Plan plan;   // stages (layer ranges, replicas, devices) and schedule parameters
  std::string optimizer;  // models::OptimizerSpec::kind
  std::uint64_t seed = 0;
  nlohmann::json rng = nlohmann::json::object();  // RNG state beyond the seed (stream counters)
  std::int64_t data_position = 0;                 // the sampler's next minibatch
  std::vector<StageCheckpoint> stages;            // one per plan stage
  nlohmann::json extras = nlohmann::json::object();
  // The checkpoint this one continues: the one its run resumed from, then each one the run
  // wrote. The chain of parents is the run's lineage, which pruning keeps (see
  // CheckpointWriteOptions::keep). Writing with nullopt: the checkpoint DIR/latest names.
  std::optional<CheckpointRef> parent;
  // How the run's layout changed on the way to this checkpoint: one line per resume under
  // another plan ("step 20: resharded from ..."), carried from each checkpoint to the next.
  std::vector<std::string> history;
  // Set by read_checkpoint: the checkpoint read (what a run resuming from it gives as parent).
  // Not written.
  CheckpointRef origin;
};

struct CheckpointWriteOptions {
  // Complete checkpoints kept in DIR: the new one and its newest keep - 1 ancestors (its
  // parent, the parent's parent, ...: the run's own lineage, each found by name and manifest
  // SHA-256). Every other checkpoint in DIR (older ancestors, and those of a run abandoned by
  // resuming from an older checkpoint) and leftovers of killed writers are removed once the new
  // one is in place. 0 keeps all.
  int keep = 2;
};

// Writes DIR/step-<step>/ and then points DIR/latest at it; returns the step directory. Creates
// DIR when missing. Writing a step again that `latest` or the lineage kept already names goes
// to step-<step>.1 (then .2, ...), so neither is ever overwritten; a directory of that name off
// the lineage (an abandoned run's) is replaced. One writer per DIR at a time. Throws
// CheckpointError (stages or replicas disagree with the plan, duplicate versions) or FileError
// (I/O, with the path and errno text).
std::filesystem::path write_checkpoint(const std::filesystem::path& dir,
                                       const Checkpoint& checkpoint,
                                       const CheckpointWriteOptions& options = {});

// ---- Writing in phases: how a multi-process job writes one checkpoint from every rank ----
// write_checkpoint above is open_checkpoint, write_stage_file for each stage and
// commit_checkpoint. In a job (train/job_checkpoint.hpp) rank 0 opens and commits, and each
// rank writes the stages it runs into the opened directory and reports what it wrote; until
// the commit writes the manifest and `latest`, the previous checkpoint is the one read.

// A step directory opened for a checkpoint, not yet committed.
struct CheckpointSlot {
  std::filesystem::path dir;            // the checkpoint directory
  std::string name;                     // "step-00000100" (or "step-00000100.1", ...)
  std::optional<CheckpointRef> parent;  // the checkpoint the new one continues
  std::vector<std::string> ancestors;   // the parent's lineage, newest first (kept by pruning)
  std::filesystem::path step_dir() const { return dir / name; }
};

// Where one stage's file went and what it holds, as the manifest records it.
struct StageFileRecord {
  int stage = 0;
  std::string file;  // "stage-<s>.safetensors", in the step directory
  std::uint64_t bytes = 0;
  std::string sha256;
  nlohmann::json contents;  // {"weights": [...], "optimizer": [...], "extras": {...}}
  int rank = 0;             // the rank that wrote it
  std::string host;         // that rank's host name (node-local checkpoint directories)
};

// Creates DIR (when missing) and the step directory of a checkpoint of `step` continuing
// `parent` (nullopt: the one `latest` names), chosen as write_checkpoint describes.
CheckpointSlot open_checkpoint(const std::filesystem::path& dir, std::int64_t step,
                               const std::optional<CheckpointRef>& parent,
                               const CheckpointWriteOptions& options = {});

// Writes stage `stage`'s file atomically into `step_dir` (created when missing: on node-local
// disks only the committing rank's exists). Throws CheckpointError or FileError.
StageFileRecord write_stage_file(const std::filesystem::path& step_dir, int stage,
                                 std::int64_t step, const StageCheckpoint& contents);

// Writes the manifest of `checkpoint` (its stages' contents are ignored: `files`, one per plan
// stage, say where each stage is) and then `latest`, and prunes; returns the step directory.
// Throws CheckpointError when `files` do not cover the plan's stages once each.
std::filesystem::path commit_checkpoint(const CheckpointSlot& slot, const Checkpoint& checkpoint,
                                        std::vector<StageFileRecord> files,
                                        const CheckpointWriteOptions& options = {});

// "step-00000100", "step-00000100.1": a name open_checkpoint gives.
bool is_step_dir_name(std::string_view name);

// Removes an opened checkpoint that will not be committed (a writer failed).
void abandon_checkpoint(const CheckpointSlot& slot) noexcept;

// The checkpoints pruning keeps besides `slot`'s own (its nearest keep - 1 ancestors).
std::vector<std::string> kept_checkpoints(const CheckpointSlot& slot,
                                          const CheckpointWriteOptions& options);

// On a rank whose checkpoint directory is its own disk (node-local): removes every step
// directory but `names`. Best effort.
void prune_local_checkpoints(const std::filesystem::path& dir,
                             const std::vector<std::string>& names) noexcept;

// A StageFileRecord as bytes travel between ranks, and back: the JSON is checked field by
// field (a stage in [0, stages), its file name, the digest, the contents' lists), naming
// `from` in errors.
nlohmann::json stage_file_record_to_json(const StageFileRecord& record);
StageFileRecord stage_file_record_from_json(const nlohmann::json& j, int stages,
                                            const std::string& from);

// What the run that resumes is: a checkpoint of another model or optimizer is refused, naming
// both. The plan may differ (cut, replicas, schedule, slices, chunks, minibatch size, process
// count): a resume lays the stages out anew (train/resume_state.hpp).
struct CheckpointExpectations {
  std::optional<std::string> model;  // ModelSpec::describe()
  // train::model_identity(): compared line by line when the manifest records it.
  std::optional<std::vector<std::string>> model_layers;
  std::optional<std::string> optimizer;  // OptimizerSpec::kind
};

// What a manifest lists of one stage file, checked before the file is opened: the versions
// and optimizer step counts are there to decide how a resume lays the stages out without
// reading a stage file.
struct CheckpointStageEntry {
  struct WeightsListing {
    int replica = 0;
    std::int64_t version = 0;
    std::int64_t tensors = 0;
  };
  struct OptimizerListing {
    int replica = 0;
    std::int64_t steps = 0;
    std::int64_t tensors = 0;
  };
  std::filesystem::path file;  // in the step directory
  std::uint64_t bytes = 0;
  std::string sha256;
  std::vector<WeightsListing> weights;
  std::vector<OptimizerListing> optimizers;
  nlohmann::json extras = nlohmann::json::object();
  int rank = 0;      // who wrote the file (absent: 0)
  std::string host;  // and where (absent or one process: empty)
};

// A checkpoint's manifest, read and checked as read_checkpoint checks it, whose stage files are
// read one at a time (read_checkpoint_stage): a process that resumes some stages reads only the
// files that hold them. Optional per-stage fields the reader does not know (a stage's "rank" or
// "host") are ignored.
struct CheckpointManifest {
  Checkpoint checkpoint;                     // everything but the stages' contents (`stages` empty)
  std::vector<CheckpointStageEntry> stages;  // one per plan stage
  std::filesystem::path manifest_file;       // for errors
  // A stage file's bytes, once its size is checked against `bytes` (so nothing larger than the
  // manifest claims is allocated). Reads the step directory, or the bytes read_checkpoint_bytes
  // was given (valid during that call only).
  std::function<std::vector<std::byte>(const std::filesystem::path& file, std::uint64_t bytes)>
      source;
  bool verify_checksums = true;
};

// Reads and checks the manifest of the checkpoint `latest` names in `dir`, or of `dir` itself
// when it is a step directory (holds manifest.json), without opening a stage file. Throws
// CheckpointError naming the file and the problem: no checkpoint, unknown format version,
// malformed manifest, or a mismatch with `expect`.
CheckpointManifest read_checkpoint_manifest(const std::filesystem::path& dir,
                                            const CheckpointExpectations& expect = {});

// Reads stage `stage` of `manifest`: its file's size and SHA-256 against the manifest, the
// safetensors layout, and its tensors against the manifest's lists. Tensors come back on the
// CPU. Throws CheckpointError naming the file (truncated, corrupted, missing, ...).
StageCheckpoint read_checkpoint_stage(const CheckpointManifest& manifest, std::size_t stage);

// read_checkpoint_manifest, then read_checkpoint_stage for every stage.
Checkpoint read_checkpoint(const std::filesystem::path& dir,
                           const CheckpointExpectations& expect = {});

// read_checkpoint's checks on a checkpoint held in memory: `manifest` is manifest.json's text
// and `files` the stage files' bytes by file name; errors name `name_for_errors`/<file>. For the
// fuzzer, which passes verify_checksums = false to reach the stage files' parsing (it cannot
// forge SHA-256 digests).
Checkpoint read_checkpoint_bytes(std::string_view manifest,
                                 const std::map<std::string, std::span<const std::byte>>& files,
                                 const std::filesystem::path& name_for_errors,
                                 bool verify_checksums = true);

// Checks a stage read from a checkpoint against the stage's parameters as the model defines
// them (`params`: names, shapes, dtypes) before anything uses it: every weight version holds
// exactly those tensors, and every replica's optimizer state passes optimizer.check_state.
// Throws CheckpointError naming the stage file and the tensor as the file names it:
// "ckpt/step-00000010/stage-0.safetensors: tensor 'optimizer/r0/exp_avg.0.weight': shape [3],
// but parameter '0.weight' has shape [3, 4] (optimizer adamw)".
void check_stage_tensors(const StageCheckpoint& stage, const models::ParamSet& params,
                         const models::Optimizer& optimizer);

// The checkpoint in `step_dir` as a later checkpoint's parent names it. Throws CheckpointError
// when its manifest is missing or unreadable.
CheckpointRef checkpoint_ref(const std::filesystem::path& step_dir);

// The step directory DIR/latest names, or nullopt when DIR has no `latest` (no checkpoint was
// completed there). Throws CheckpointError when `latest` is unreadable or malformed.
std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& dir);

// The format version written, and the only one read.
inline constexpr int kCheckpointFormatVersion = 1;

}  // namespace tandem::train
