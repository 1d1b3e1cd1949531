#include "train/checkpoint.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <span>
#include <system_error>
#include <utility>

#include "models/safetensors.hpp"
#include "runtime/atomic_file.hpp"
#include "runtime/sha256.hpp"
#include "schedules/schedule_kind.hpp"
#include "train/model_identity.hpp"
#include "train/schedule_json.hpp"

namespace tandem::train {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kManifest = "manifest.json";
constexpr const char* kLatest = "latest";
constexpr const char* kFormat = "tandem-checkpoint";
constexpr const char* kWeightsPrefix = "weights/r";
constexpr const char* kOptimizerPrefix = "optimizer/r";
// Bounds on what is read before it is parsed: a manifest names a few entries per stage and a
// line per layer (a model of 100,000 layers writes about 10 MiB), and `latest` one name and a
// digest. With the count of values bounded too (kMaxJsonValues), reading one takes at most
// about a second and 120 MB; the writer refuses to write more.
constexpr std::uint64_t kMaxManifestBytes = 16u << 20;
constexpr std::uint64_t kMaxLatestBytes = 4096;

[[noreturn]] void refuse(const fs::path& file, const std::string& what) {
  throw CheckpointError(file.string() + ": " + what);
}

CheckpointRef read_latest(const fs::path& file);

std::string stage_file_name(std::size_t stage) {
  return "stage-" + std::to_string(stage) + ".safetensors";
}

std::string step_dir_name(std::int64_t step) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "step-%08lld", static_cast<long long>(step));
  return buffer;
}

// "step-<digits>" or "step-<digits>.<digits>": a checkpoint's directory.
std::optional<std::pair<std::int64_t, std::int64_t>> parse_step_dir_name(std::string_view name) {
  if (!name.starts_with("step-")) return std::nullopt;
  name.remove_prefix(5);
  std::int64_t step = 0;
  std::int64_t suffix = 0;
  const char* end = name.data() + name.size();
  auto [p, ec] = std::from_chars(name.data(), end, step);
  if (ec != std::errc() || p == name.data()) return std::nullopt;
  if (p != end) {
    if (*p != '.') return std::nullopt;
    const char* q = p + 1;
    auto [p2, ec2] = std::from_chars(q, end, suffix);
    if (ec2 != std::errc() || p2 == q || p2 != end) return std::nullopt;
  }
  return std::pair{step, suffix};
}

// A name `latest` may hold: one plain entry of DIR, never a path out of it.
bool is_plain_name(std::string_view name) {
  if (name.empty() || name == "." || name == "..") return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '-' || c == '_';
  });
}

std::vector<std::byte> read_file(const fs::path& file, std::uint64_t size) {
  std::vector<std::byte> bytes(size);
  std::ifstream in(file, std::ios::binary);
  if (!in) refuse(file, std::string("cannot open: ") + std::strerror(errno));
  if (size > 0) in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size));
  if (static_cast<std::uint64_t>(in.gcount()) != size) {
    refuse(file, "short read: the file changed while it was read");
  }
  return bytes;
}

std::uint64_t regular_file_size(const fs::path& file, const std::string& missing) {
  std::error_code ec;
  const fs::file_status status = fs::status(file, ec);
  if (!fs::exists(status)) refuse(file, missing);
  if (!fs::is_regular_file(status)) refuse(file, "not a regular file");
  const std::uint64_t size = fs::file_size(file, ec);
  if (ec) refuse(file, "cannot read: " + ec.message());
  return size;
}

std::string read_small_file(const fs::path& file, std::uint64_t limit, const std::string& missing) {
  const std::uint64_t size = regular_file_size(file, missing);
  if (size > limit) {
    refuse(file, std::to_string(size) + " bytes, more than the " + std::to_string(limit) +
                     " a checkpoint's " + file.filename().string() + " can hold");
  }
  const std::vector<std::byte> bytes = read_file(file, size);
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

std::string hex_of(std::string_view text) {
  return sha256_hex(std::as_bytes(std::span<const char>(text.data(), text.size())));
}

// Copying, comparing and printing a JSON value recurse once per level: a manifest nesting
// deeper than this is refused rather than allowed to overflow the stack.
constexpr int kMaxJsonDepth = 64;
// Each value parsed costs some 50 bytes however short its text ("0,"): a manifest holds a few
// per stage and a line per layer, and a bound on their count bounds a reader's memory where
// the byte bound alone allowed half a GiB (8 million zeros in 16 MiB).
constexpr std::int64_t kMaxJsonValues = 2'000'000;

json parse_json(std::string_view text, const fs::path& file) {
  struct TooDeep {};
  struct TooMany {};
  int depth = 0;
  std::int64_t values = 0;
  const json::parser_callback_t limit = [&](int, json::parse_event_t event, json&) {
    if (event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) {
      if (++depth > kMaxJsonDepth) throw TooDeep{};
    } else if (event == json::parse_event_t::object_end ||
               event == json::parse_event_t::array_end) {
      --depth;
    }
    if (event == json::parse_event_t::value && ++values > kMaxJsonValues) throw TooMany{};
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), limit);
  } catch (const json::exception& e) {
    refuse(file, std::string("not valid JSON: ") + e.what());
  } catch (const TooDeep&) {
    refuse(file, "JSON nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  } catch (const TooMany&) {
    refuse(file, "JSON holds more than " + std::to_string(kMaxJsonValues) +
                     " values, more than a manifest of any model has");
  }
}

// ---- manifest fields, read with errors that name the field ----

class Fields {
 public:
  explicit Fields(fs::path file) : file_(std::move(file)) {}

  const json& member(const json& object, const std::string& at, const std::string& key) const {
    if (!object.is_object()) refuse(file_, name(at, "") + " must be an object");
    const auto it = object.find(key);
    if (it == object.end()) refuse(file_, "missing field '" + name(at, key) + "'");
    return *it;
  }
  std::int64_t int64(const json& object, const std::string& at, const std::string& key,
                     std::int64_t min = 0) const {
    return int64_value(member(object, at, key), name(at, key), min);
  }
  std::int64_t int64_value(const json& v, const std::string& field, std::int64_t min = 0) const {
    constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
    const bool fits =
        v.is_number_integer() && (!v.is_number_unsigned() || v.get<std::uint64_t>() <= kMax);
    if (!fits || v.get<std::int64_t>() < min) {
      refuse(file_, "field '" + field + "' must be an integer >= " + std::to_string(min) +
                        ", not " + v.dump());
    }
    return v.get<std::int64_t>();
  }
  int int32(const json& object, const std::string& at, const std::string& key, int min = 0) const {
    const std::int64_t v = int64(object, at, key, min);
    if (v > std::numeric_limits<int>::max()) {
      refuse(file_, "field '" + name(at, key) + "' is out of range: " + std::to_string(v));
    }
    return static_cast<int>(v);
  }
  std::uint64_t uint64(const json& object, const std::string& at, const std::string& key) const {
    const json& v = member(object, at, key);
    if (!v.is_number_unsigned()) {
      refuse(file_,
             "field '" + name(at, key) + "' must be a non-negative integer, not " + v.dump());
    }
    return v.get<std::uint64_t>();
  }
  bool boolean(const json& object, const std::string& at, const std::string& key) const {
    const json& v = member(object, at, key);
    if (!v.is_boolean()) refuse(file_, "field '" + name(at, key) + "' must be true or false");
    return v.get<bool>();
  }
  // Printable text: names and lines of a manifest are printed (inspect, resume, reshard), and a
  // control byte would reach the terminal as an escape.
  std::string string(const json& object, const std::string& at, const std::string& key) const {
    const json& v = member(object, at, key);
    if (!v.is_string()) refuse(file_, "field '" + name(at, key) + "' must be a string");
    return printable(v.get<std::string>(), name(at, key));
  }
  std::string printable(std::string text, const std::string& field) const {
    for (std::size_t i = 0; i < text.size(); ++i) {
      const auto c = static_cast<unsigned char>(text[i]);
      // C0 controls and DEL, and C1 controls as UTF-8 writes them (U+0080-U+009F: 0xC2 0x80-0x9F).
      const bool c1 = c == 0xC2 && i + 1 < text.size() &&
                      (static_cast<unsigned char>(text[i + 1]) & 0xE0) == 0x80;
      if (c < 0x20 || c == 0x7F || c1) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02x", c1 ? static_cast<unsigned char>(text[i + 1]) : c);
        refuse(file_, "field '" + field + "' holds the control character " + hex + " at byte " +
                          std::to_string(i) + ": a manifest's text is printable");
      }
    }
    return text;
  }
  const json& array(const json& object, const std::string& at, const std::string& key) const {
    const json& v = member(object, at, key);
    if (!v.is_array()) refuse(file_, "field '" + name(at, key) + "' must be an array");
    return v;
  }
  const json& object(const json& object, const std::string& at, const std::string& key) const {
    const json& v = member(object, at, key);
    if (!v.is_object()) refuse(file_, "field '" + name(at, key) + "' must be an object");
    return v;
  }
  std::vector<std::int64_t> int64s(const json& values, const std::string& at) const {
    std::vector<std::int64_t> out;
    for (std::size_t i = 0; i < values.size(); ++i) {
      out.push_back(int64_value(values[i], at + "[" + std::to_string(i) + "]"));
    }
    return out;
  }
  [[noreturn]] void fail(const std::string& what) const { refuse(file_, what); }
  const fs::path& file() const { return file_; }

  static std::string name(const std::string& at, const std::string& key) {
    if (key.empty()) return at.empty() ? "the manifest" : at;
    return at.empty() ? key : at + "." + key;
  }

 private:
  fs::path file_;
};

// ---- the plan ----

json plan_to_json(const schedules::Plan& plan) {
  json stages = json::array();
  for (const schedules::StagePlan& stage : plan.stages) {
    json replicas = json::array();
    for (const schedules::Placement& r : stage.replicas) {
      replicas.push_back(json{{"host", r.host}, {"device", r.device}});
    }
    stages.push_back(json{{"layers", json::array({stage.layers.begin, stage.layers.end})},
                          {"replicas", replicas}});
  }
  return json{{"stages", stages}, {"schedule", schedule_to_json(plan.schedule)}};
}

std::vector<std::vector<std::int64_t>> compositions(const Fields& f, const json& values,
                                                    const std::string& at) {
  std::vector<std::vector<std::int64_t>> out;
  for (std::size_t i = 0; i < values.size(); ++i) {
    const std::string here = at + "[" + std::to_string(i) + "]";
    if (!values[i].is_array()) f.fail("field '" + here + "' must be an array");
    out.push_back(f.int64s(values[i], here));
  }
  return out;
}

// A stage's layers [begin, end), checked before anything prints or uses them: both fit an int,
// begin < end, and the stage starts where the previous one (`next`) ended, so the stages cover
// the model's layers in order from 0 (a resume then compares them with the model's plan).
schedules::LayerRange layer_range(const Fields& f, const json& layers, const std::string& at,
                                  int next) {
  const std::vector<std::int64_t> range = f.int64s(layers, at);
  for (std::size_t i = 0; i < 2; ++i) {
    if (range[i] > std::numeric_limits<int>::max()) {
      f.fail("field '" + at + "[" + std::to_string(i) + "]' is " + std::to_string(range[i]) +
             ", more than a layer index can be (" +
             std::to_string(std::numeric_limits<int>::max()) + ")");
    }
  }
  if (range[0] >= range[1]) {
    f.fail("field '" + at + "' is [" + std::to_string(range[0]) + ", " + std::to_string(range[1]) +
           "): a stage needs at least one layer (begin < end)");
  }
  if (range[0] != next) {
    f.fail("field '" + at + "' begins at layer " + std::to_string(range[0]) + ", expected " +
           std::to_string(next) + " (stages cover the layers in order from 0)");
  }
  return {static_cast<int>(range[0]), static_cast<int>(range[1])};
}

schedules::Plan plan_from_json(const Fields& f, const json& manifest) {
  const json& plan_json = f.object(manifest, "", "plan");
  schedules::Plan plan;
  const json& stages = f.array(plan_json, "plan", "stages");
  int next_layer = 0;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const std::string at = "plan.stages[" + std::to_string(s) + "]";
    schedules::StagePlan stage;
    const json& layers = f.array(stages[s], at, "layers");
    if (layers.size() != 2) f.fail("field '" + at + ".layers' must be [begin, end]");
    stage.layers = layer_range(f, layers, at + ".layers", next_layer);
    next_layer = stage.layers.end;
    stage.replicas.clear();
    const json& replicas = f.array(stages[s], at, "replicas");
    for (std::size_t r = 0; r < replicas.size(); ++r) {
      const std::string rat = at + ".replicas[" + std::to_string(r) + "]";
      stage.replicas.push_back(
          {f.string(replicas[r], rat, "host"), f.string(replicas[r], rat, "device")});
    }
    plan.stages.push_back(std::move(stage));
  }
  const json& sj = f.object(plan_json, "plan", "schedule");
  const std::string at = "plan.schedule";
  schedules::ScheduleParams& p = plan.schedule;
  const std::string kind = f.string(sj, at, "kind");
  try {
    p.kind = schedules::parse_schedule_kind(kind);
  } catch (const std::exception& e) {
    f.fail("field 'plan.schedule.kind': " + std::string(e.what()));
  }
  p.stages = f.int32(sj, at, "stages");
  p.slices = f.int32(sj, at, "slices");
  p.minibatch_size = f.int64(sj, at, "minibatch_size");
  const std::vector<std::int64_t> replicas =
      f.int64s(f.array(sj, at, "replicas"), at + ".replicas");
  for (const std::int64_t r : replicas) {
    if (r > std::numeric_limits<int>::max()) f.fail("field 'plan.schedule.replicas' out of range");
    p.replicas.push_back(static_cast<int>(r));
  }
  p.chunks = f.int32(sj, at, "chunks");
  p.rematerialize = f.boolean(sj, at, "rematerialize");
  p.minibatches = f.int64(sj, at, "minibatches");
  p.forward_slices = compositions(f, f.array(sj, at, "forward_slices"), at + ".forward_slices");
  p.backward_slices = compositions(f, f.array(sj, at, "backward_slices"), at + ".backward_slices");
  try {
    plan.validate();
  } catch (const std::exception& e) {
    f.fail("field 'plan' is not a valid plan: " + std::string(e.what()));
  }
  return plan;
}

// ---- writing ----

void check_writable(const Checkpoint& c) {
  auto fail = [](const std::string& what) { throw CheckpointError("write_checkpoint: " + what); };
  if (c.step < 0) fail("step " + std::to_string(c.step) + " is negative");
  if (c.data_position < 0)
    fail("data position " + std::to_string(c.data_position) + " is negative");
  if (c.stages.size() != c.plan.stages.size()) {
    fail(std::to_string(c.stages.size()) + " stages of state for a plan of " +
         std::to_string(c.plan.stages.size()) + " stages");
  }
  for (std::size_t s = 0; s < c.stages.size(); ++s) {
    const int replicas = static_cast<int>(c.plan.stages[s].replicas.size());
    const std::string stage = "stage " + std::to_string(s);
    std::set<std::pair<int, std::int64_t>> versions;
    for (const CheckpointWeights& w : c.stages[s].weights) {
      const std::string which =
          stage + " replica " + std::to_string(w.replica) + " version " + std::to_string(w.version);
      if (w.replica < 0 || w.replica >= replicas) {
        fail(which + ": the plan gives the stage " + std::to_string(replicas) + " replicas");
      }
      if (w.version < 0) fail(which + ": negative version");
      if (!versions.emplace(w.replica, w.version).second) fail(which + ": stored twice");
    }
    std::set<int> optimizers;
    for (const CheckpointOptimizer& o : c.stages[s].optimizers) {
      const std::string which = stage + " optimizer of replica " + std::to_string(o.replica);
      if (o.replica < 0 || o.replica >= replicas) {
        fail(which + ": the plan gives the stage " + std::to_string(replicas) + " replicas");
      }
      if (o.steps < 0) fail(which + ": negative step count");
      if (!optimizers.insert(o.replica).second) fail(which + ": stored twice");
    }
  }
}

std::string weights_prefix(int replica, std::int64_t version) {
  return kWeightsPrefix + std::to_string(replica) + "/v" + std::to_string(version) + "/";
}

std::string optimizer_prefix(int replica) {
  return kOptimizerPrefix + std::to_string(replica) + "/";
}

// The stage file's contents and its manifest entry (without size and checksum).
std::pair<models::ParamSet, json> stage_contents(const StageCheckpoint& stage) {
  models::ParamSet tensors;
  json weights = json::array();
  for (const CheckpointWeights& w : stage.weights) {
    const std::string prefix = weights_prefix(w.replica, w.version);
    for (std::int64_t i = 0; i < w.params.size(); ++i)
      tensors.add(prefix + w.params.name(i), w.params[i]);
    weights.push_back(
        json{{"replica", w.replica}, {"version", w.version}, {"tensors", w.params.size()}});
  }
  json optimizers = json::array();
  for (const CheckpointOptimizer& o : stage.optimizers) {
    const std::string prefix = optimizer_prefix(o.replica);
    for (std::int64_t i = 0; i < o.state.size(); ++i)
      tensors.add(prefix + o.state.name(i), o.state[i]);
    optimizers.push_back(
        json{{"replica", o.replica}, {"steps", o.steps}, {"tensors", o.state.size()}});
  }
  return {std::move(tensors),
          json{{"weights", weights}, {"optimizer", optimizers}, {"extras", stage.extras}}};
}

// A stage's manifest entry: its file, size, digest, what it holds and who wrote it.
json manifest_entry(const StageFileRecord& r) {
  json entry = r.contents;
  entry["file"] = r.file;
  entry["bytes"] = r.bytes;
  entry["sha256"] = r.sha256;
  entry["rank"] = r.rank;
  entry["host"] = r.host;
  return entry;
}

// A stage file's lists as another rank reported them: {"weights": [{replica, version, tensors}],
// "optimizer": [{replica, steps, tensors}], "extras": {}}, every number a non-negative integer.
template <typename Fail>
void check_contents_lists(const json& contents, const Fail& fail) {
  const auto count = [&fail](const json& item, const char* key) {
    const json* v = item.contains(key) ? &item[key] : nullptr;
    if (v == nullptr || !v->is_number_integer() || v->get<std::int64_t>() < 0) {
      fail(std::string("'") + key + "' is not a non-negative integer");
    }
  };
  for (const char* list : {"weights", "optimizer"}) {
    if (!contents.at(list).is_array()) fail(std::string("'") + list + "' is not a list");
    for (const json& item : contents.at(list)) {
      if (!item.is_object()) fail(std::string("an entry of '") + list + "' is not an object");
      count(item, "replica");
      count(item, list == std::string("weights") ? "version" : "steps");
      count(item, "tensors");
    }
  }
  if (!contents.at("extras").is_object()) fail("'extras' is not an object");
}

// The stage files of a checkpoint about to be committed: one per stage of `plan`, in order,
// each listing replicas the plan has, no version or optimizer twice.
void check_files(const std::vector<StageFileRecord>& files, const schedules::Plan& plan) {
  const auto fail = [](const std::string& what) {
    throw CheckpointError("commit_checkpoint: " + what);
  };
  if (files.size() != plan.stages.size()) {
    fail(std::to_string(files.size()) + " stage files for a plan of " +
         std::to_string(plan.stages.size()) + " stages");
  }
  for (std::size_t s = 0; s < files.size(); ++s) {
    if (files[s].stage != static_cast<int>(s)) {
      fail("stage " + std::to_string(s) + " has no file (stage " + std::to_string(files[s].stage) +
           " came instead, or twice)");
    }
    const auto replicas = static_cast<std::int64_t>(plan.stages[s].replicas.size());
    std::set<std::pair<std::int64_t, std::int64_t>> versions;
    std::set<std::int64_t> optimizers;
    const std::string stage = "stage " + std::to_string(s) + " (" + files[s].file + ", rank " +
                              std::to_string(files[s].rank) + ")";
    for (const json& w : files[s].contents["weights"]) {
      const auto r = w["replica"].get<std::int64_t>(), v = w["version"].get<std::int64_t>();
      if (r >= replicas)
        fail(stage + ": replica " + std::to_string(r) + " of " + std::to_string(replicas));
      if (!versions.emplace(r, v).second) fail(stage + ": version " + std::to_string(v) + " twice");
    }
    for (const json& o : files[s].contents["optimizer"]) {
      const auto r = o["replica"].get<std::int64_t>();
      if (r >= replicas)
        fail(stage + ": replica " + std::to_string(r) + " of " + std::to_string(replicas));
      if (!optimizers.insert(r).second)
        fail(stage + ": two optimizers of replica " + std::to_string(r));
    }
  }
}

// What `latest` holds, or nullopt when there is none or it cannot be read (a writer never
// trusts it beyond not overwriting what it names).
std::optional<CheckpointRef> latest_or_none(const fs::path& dir) {
  try {
    std::error_code ec;
    if (fs::exists(dir / kLatest, ec)) return read_latest(dir / kLatest);
  } catch (const CheckpointError&) {
  }
  return std::nullopt;
}

std::optional<CheckpointRef> parent_from_json(const Fields& f, const json& manifest);

// `parent` and its ancestors in `dir`, newest first, at most `limit`: each a step directory of
// that name whose manifest has the recorded SHA-256. A name that now holds another checkpoint
// (another run's), a missing or unreadable manifest, or a cycle ends the lineage.
std::vector<std::string> lineage(const fs::path& dir, std::optional<CheckpointRef> parent,
                                 std::size_t limit) {
  std::vector<std::string> names;
  while (parent && names.size() < limit && is_plain_name(parent->name) &&
         std::find(names.begin(), names.end(), parent->name) == names.end()) {
    const fs::path file = dir / parent->name / kManifest;
    try {
      const std::string text = read_small_file(file, kMaxManifestBytes, "missing");
      if (hex_of(text) != parent->manifest_sha256) break;
      names.push_back(parent->name);
      parent = parent_from_json(Fields(file), parse_json(text, file));
    } catch (const CheckpointError&) {
      break;
    }
  }
  return names;
}

// A directory name for the new checkpoint that touches neither the one `latest` names nor one
// of `kept` (the lineage).
std::string choose_step_dir(const fs::path& dir, std::int64_t step,
                            const std::optional<CheckpointRef>& latest,
                            const std::vector<std::string>& kept) {
  const std::string base = step_dir_name(step);
  for (int k = 0;; ++k) {
    const std::string name = k == 0 ? base : base + "." + std::to_string(k);
    if (latest && name == latest->name) continue;
    if (std::find(kept.begin(), kept.end(), name) != kept.end()) continue;
    std::error_code ec;
    // A directory of this name is a leftover of a killed writer, or a checkpoint off the
    // lineage: an older run's, or one of a run abandoned by resuming from an earlier step.
    fs::remove_all(dir / name, ec);
    if (ec) throw FileError("cannot remove '" + (dir / name).string() + "': " + ec.message());
    return name;
  }
}

// Removes leftovers of killed writers and, unless keep is 0, every checkpoint but `current` and
// the first keep - 1 of `ancestors`. Best effort: a checkpoint that is in place never fails
// because an old one could not be removed.
void prune(const fs::path& dir, const std::string& current, int keep,
           const std::vector<std::string>& ancestors) {
  std::error_code ec;
  std::vector<fs::path> complete;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    std::error_code ignored;
    if (name.starts_with(std::string(".") + kLatest + ".tmp-")) {
      fs::remove(entry.path(), ignored);
      continue;
    }
    if (!parse_step_dir_name(name) || name == current || !entry.is_directory(ignored)) continue;
    if (!fs::exists(entry.path() / kManifest, ignored)) {
      fs::remove_all(entry.path(), ignored);
    } else {
      complete.push_back(entry.path());
    }
  }
  if (keep <= 0) return;
  const auto kept_end =
      ancestors.begin() +
      static_cast<std::ptrdiff_t>(std::min(ancestors.size(), static_cast<std::size_t>(keep - 1)));
  for (const fs::path& path : complete) {
    if (std::find(ancestors.begin(), kept_end, path.filename().string()) == kept_end) {
      std::error_code ignored;
      fs::remove_all(path, ignored);
    }
  }
}

// ---- reading ----

CheckpointRef read_latest(const fs::path& file) {
  const json j = parse_json(read_small_file(file, kMaxLatestBytes, "missing"), file);
  const Fields f(file);
  CheckpointRef out{f.string(j, "", "checkpoint"), f.string(j, "", "manifest_sha256")};
  if (!is_plain_name(out.name)) {
    refuse(file, "names '" + out.name + "', which is not a directory name inside " +
                     file.parent_path().string());
  }
  return out;
}

bool is_sha256_hex(std::string_view text) {
  return text.size() == 64 && std::all_of(text.begin(), text.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

// The manifest's "parent": absent (written before lineages were recorded) or null for none.
std::optional<CheckpointRef> parent_from_json(const Fields& f, const json& manifest) {
  if (!manifest.is_object() || !manifest.contains("parent") || manifest["parent"].is_null()) {
    return std::nullopt;
  }
  const json& parent = f.object(manifest, "", "parent");
  CheckpointRef ref{f.string(parent, "parent", "checkpoint"),
                    f.string(parent, "parent", "manifest_sha256")};
  if (!is_plain_name(ref.name)) {
    f.fail("field 'parent.checkpoint' names '" + ref.name + "', not a step directory's name");
  }
  if (!is_sha256_hex(ref.manifest_sha256)) {
    f.fail("field 'parent.manifest_sha256' is not 64 lowercase hex digits");
  }
  return ref;
}

// An optional array of lines in the manifest ("model_layers", "history"; absent in manifests
// written before it was recorded: none): at most `max_lines` lines of at most 4,096 bytes.
std::vector<std::string> lines_from_json(const Fields& f, const json& manifest,
                                         const std::string& key, std::size_t max_lines) {
  std::vector<std::string> out;
  if (!manifest.contains(key)) return out;
  const json& a = f.array(manifest, "", key);
  if (a.size() > max_lines) {
    f.fail("field '" + key + "' holds " + std::to_string(a.size()) + " lines");
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    const std::string at = key + "[" + std::to_string(i) + "]";
    if (!a[i].is_string() || a[i].get<std::string>().size() > 4096) {
      f.fail("field '" + at + "' is not a line of text");
    }
    out.push_back(f.printable(a[i].get<std::string>(), at));
  }
  return out;
}

json parent_to_json(const std::optional<CheckpointRef>& parent) {
  if (!parent) return nullptr;
  return json{{"checkpoint", parent->name}, {"manifest_sha256", parent->manifest_sha256}};
}

// The step directory's own name, however the path to it is spelled ("ckpt/step-1/", ".").
std::string directory_name(const fs::path& step_dir) {
  fs::path p = fs::absolute(step_dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

// Tensor name -> (replica, version or -1 for optimizer state, the name within its set).
struct TensorKey {
  bool weights = true;
  int replica = 0;
  std::int64_t version = 0;
  std::string name;
};

// Parses a non-negative decimal number ending at '/', advancing `text` past the '/'.
std::optional<std::int64_t> take_number(std::string_view& text) {
  const std::size_t slash = text.find('/');
  if (slash == std::string_view::npos || slash == 0) return std::nullopt;
  std::int64_t value = 0;
  const auto [p, ec] = std::from_chars(text.data(), text.data() + slash, value);
  if (ec != std::errc() || p != text.data() + slash || value < 0) return std::nullopt;
  if (std::to_string(value).size() != slash) return std::nullopt;  // no leading zeros
  text.remove_prefix(slash + 1);
  return value;
}

std::optional<TensorKey> parse_tensor_name(std::string_view name) {
  TensorKey key;
  if (name.starts_with(kWeightsPrefix)) {
    name.remove_prefix(std::strlen(kWeightsPrefix));
    const auto replica = take_number(name);
    if (!replica || *replica > std::numeric_limits<int>::max() || !name.starts_with("v")) {
      return std::nullopt;
    }
    name.remove_prefix(1);
    const auto version = take_number(name);
    if (!version) return std::nullopt;
    key.replica = static_cast<int>(*replica);
    key.version = *version;
  } else if (name.starts_with(kOptimizerPrefix)) {
    name.remove_prefix(std::strlen(kOptimizerPrefix));
    const auto replica = take_number(name);
    if (!replica || *replica > std::numeric_limits<int>::max()) return std::nullopt;
    key.weights = false;
    key.replica = static_cast<int>(*replica);
  } else {
    return std::nullopt;
  }
  key.name = std::string(name);
  return key;
}

void check_size(const fs::path& file, std::uint64_t size, std::uint64_t expected) {
  if (size < expected) {
    refuse(file, "truncated: " + std::to_string(size) + " bytes, the manifest says " +
                     std::to_string(expected));
  }
  if (size > expected) {
    refuse(file, std::to_string(size) + " bytes, the manifest says " + std::to_string(expected) +
                     ": the file was changed after the checkpoint was written");
  }
}

using StageSource = std::function<std::vector<std::byte>(const fs::path&, std::uint64_t)>;

StageSource files_on_disk() {
  return [](const fs::path& file, std::uint64_t expected) {
    check_size(file, regular_file_size(file, "missing (the manifest lists it)"), expected);
    return read_file(file, expected);
  };
}

// Stage `s`'s manifest entry, every field checked before its file is opened; "rank" and "host"
// (who wrote the file) are optional, fields it does not know are left alone.
CheckpointStageEntry stage_entry(const fs::path& step_dir, const Fields& f, const json& entry,
                                 std::size_t s, std::int64_t step) {
  const std::string at = "stages[" + std::to_string(s) + "]";
  CheckpointStageEntry out;
  const std::string file_name = f.string(entry, at, "file");
  if (!is_plain_name(file_name)) {
    f.fail("field '" + at + ".file' names '" + file_name + "', not a file in " + step_dir.string());
  }
  out.file = step_dir / file_name;
  out.bytes = f.uint64(entry, at, "bytes");
  out.sha256 = f.string(entry, at, "sha256");
  const json& weight_list = f.array(entry, at, "weights");
  for (std::size_t i = 0; i < weight_list.size(); ++i) {
    const std::string wat = at + ".weights[" + std::to_string(i) + "]";
    out.weights.push_back({f.int32(weight_list[i], wat, "replica"),
                           f.int64(weight_list[i], wat, "version"),
                           f.int64(weight_list[i], wat, "tensors")});
  }
  const json& optimizer_list = f.array(entry, at, "optimizer");
  for (std::size_t i = 0; i < optimizer_list.size(); ++i) {
    const std::string oat = at + ".optimizer[" + std::to_string(i) + "]";
    CheckpointStageEntry::OptimizerListing o{f.int32(optimizer_list[i], oat, "replica"),
                                             f.int64(optimizer_list[i], oat, "steps"),
                                             f.int64(optimizer_list[i], oat, "tensors")};
    // Each update takes at least one minibatch; an optimizer counts on from its steps.
    if (o.steps > step) {
      f.fail("field '" + at + ".optimizer' gives replica " + std::to_string(o.replica) + " " +
             std::to_string(o.steps) + " optimizer steps, more than the " + std::to_string(step) +
             " steps done");
    }
    out.optimizers.push_back(o);
  }
  out.extras = f.member(entry, at, "extras");
  if (entry.contains("rank")) out.rank = f.int32(entry, at, "rank");
  if (entry.contains("host")) {
    out.host = f.string(entry, at, "host");
    if (out.host.size() > 255) f.fail("field '" + at + ".host' is longer than a host name");
  }
  return out;
}

// The stage file's tensors, grouped: weights by (replica, version), optimizer state by replica.
struct StageTensors {
  std::map<std::pair<int, std::int64_t>, models::ParamSet> weights;
  std::map<int, models::ParamSet> optimizers;
};

StageTensors stage_tensors(const CheckpointManifest& m, const CheckpointStageEntry& entry) {
  const fs::path& file = entry.file;
  const std::vector<std::byte> bytes = m.source(file, entry.bytes);
  if (m.verify_checksums) {
    const std::string actual = sha256_hex(bytes);
    if (actual != entry.sha256) {
      refuse(file, "checksum mismatch (sha256 " + actual + ", the manifest says " + entry.sha256 +
                       "): the file is corrupted");
    }
  }
  models::SafetensorsContent content;
  try {
    content = models::read_safetensors_bytes(bytes, file.string());
  } catch (const models::SafetensorsError& e) {
    throw CheckpointError(e.what());
  }
  StageTensors out;
  for (std::int64_t i = 0; i < content.tensors.size(); ++i) {
    const std::string& name = content.tensors.name(i);
    const auto key = parse_tensor_name(name);
    if (!key) {
      refuse(file, "tensor '" + name + "' is neither weights/r<replica>/v<version>/<name> nor " +
                       "optimizer/r<replica>/<name>");
    }
    models::ParamSet& set =
        key->weights ? out.weights[{key->replica, key->version}] : out.optimizers[key->replica];
    set.add(key->name, content.tensors[i]);
  }
  return out;
}

// The set `found` holds for `key`, checked against the manifest's tensor count (empty when the
// manifest lists none); taken out of `found`, so what remains the manifest does not list.
template <typename Key>
models::ParamSet take_listed(std::map<Key, models::ParamSet>& found, const Key& key,
                             std::int64_t count, const fs::path& file, const std::string& which,
                             const std::string& listed) {
  const auto it = found.find(key);
  if (it == found.end()) {
    if (count > 0) refuse(file, "holds no " + which + " (the manifest lists " + listed + ")");
    return {};
  }
  if (it->second.size() != count) {
    refuse(file, "holds " + std::to_string(it->second.size()) + " tensors of " + which +
                     ", the manifest says " + std::to_string(count));
  }
  models::ParamSet out = std::move(it->second);
  found.erase(it);
  return out;
}

void check_replicas(const CheckpointManifest& m, std::size_t s, const StageCheckpoint& stage) {
  const int replicas = static_cast<int>(m.checkpoint.plan.stages[s].replicas.size());
  for (const CheckpointWeights& w : stage.weights) {
    if (w.replica >= replicas) {
      refuse(m.manifest_file, "stage " + std::to_string(s) + " holds weights of replica " +
                                  std::to_string(w.replica) + " of " + std::to_string(replicas));
    }
  }
  for (const CheckpointOptimizer& o : stage.optimizers) {
    if (o.replica >= replicas) {
      refuse(m.manifest_file, "stage " + std::to_string(s) + " holds optimizer state of replica " +
                                  std::to_string(o.replica) + " of " + std::to_string(replicas));
    }
  }
}

// The manifest's fields, checked, and its stage entries; no stage file is opened.
CheckpointManifest parse_manifest(std::string_view text, const fs::path& manifest_file,
                                  const fs::path& step_dir, const CheckpointExpectations& expect) {
  const json manifest = parse_json(text, manifest_file);
  const Fields f(manifest_file);
  if (!manifest.is_object() || f.string(manifest, "", "format") != kFormat) {
    refuse(manifest_file,
           std::string("not a Tandem checkpoint manifest (no \"format\": \"") + kFormat + "\")");
  }
  const std::int64_t version = f.int64(manifest, "", "format_version");
  if (version != kCheckpointFormatVersion) {
    refuse(manifest_file, "format_version " + std::to_string(version) +
                              " is not supported (this build reads version " +
                              std::to_string(kCheckpointFormatVersion) + ")");
  }

  CheckpointManifest m;
  m.manifest_file = manifest_file;
  Checkpoint& c = m.checkpoint;
  c.step = f.int64(manifest, "", "step");
  c.model = f.string(manifest, "", "model");
  c.model_layers = lines_from_json(f, manifest, "model_layers", 1000000);
  c.optimizer = f.string(manifest, "", "optimizer");
  c.plan = plan_from_json(f, manifest);
  c.seed = f.uint64(manifest, "", "seed");
  c.rng = f.member(manifest, "", "rng");
  c.data_position = f.int64(manifest, "", "data_position");
  c.extras = f.member(manifest, "", "extras");
  c.parent = parent_from_json(f, manifest);
  c.history = lines_from_json(f, manifest, "history", 10000);

  if (expect.model && *expect.model != c.model) {
    refuse(manifest_file, "checkpoint of another model: '" + c.model + "', this run trains '" +
                              *expect.model + "'");
  }
  if (expect.model_layers && !c.model_layers.empty()) {
    if (const auto diff = identity_difference(c.model_layers, *expect.model_layers)) {
      refuse(manifest_file, "checkpoint of another model '" + c.model + "': " + *diff);
    }
  }
  if (expect.optimizer && *expect.optimizer != c.optimizer) {
    refuse(manifest_file, "checkpoint of another optimizer: '" + c.optimizer +
                              "', this run uses '" + *expect.optimizer + "'");
  }

  const json& stages = f.array(manifest, "", "stages");
  if (stages.size() != c.plan.stages.size()) {
    refuse(manifest_file, std::to_string(stages.size()) + " stage entries for a plan of " +
                              std::to_string(c.plan.stages.size()) + " stages");
  }
  for (std::size_t s = 0; s < stages.size(); ++s) {
    m.stages.push_back(stage_entry(step_dir, f, stages[s], s, c.step));
    for (std::size_t t = 0; t < s; ++t) {
      if (m.stages[t].file == m.stages[s].file) {
        f.fail("field 'stages[" + std::to_string(s) + "].file' names '" +
               m.stages[s].file.filename().string() + "', as stages[" + std::to_string(t) +
               "] does: each stage has a file of its own");
      }
    }
  }
  // Every layer of the model in some stage's file: the stages cover the layers in order from 0,
  // and model_layers, where recorded, holds a line per layer before its "loss: " line
  // (train/model_identity.hpp).
  const int covered = c.plan.stages.empty() ? 0 : c.plan.stages.back().layers.end;
  const auto loss = std::find_if(c.model_layers.begin(), c.model_layers.end(),
                                 [](const std::string& l) { return l.starts_with("loss: "); });
  const auto layers = static_cast<std::size_t>(loss - c.model_layers.begin());
  if (loss != c.model_layers.end() && static_cast<std::size_t>(covered) != layers) {
    f.fail("field 'plan.stages' covers layers 0-" + std::to_string(covered - 1) + ", but the " +
           "model has " + std::to_string(layers) + " (field 'model_layers')");
  }
  return m;
}

Checkpoint read_all_stages(const CheckpointManifest& m) {
  Checkpoint c = m.checkpoint;
  for (std::size_t s = 0; s < m.stages.size(); ++s) {
    c.stages.push_back(read_checkpoint_stage(m, s));
  }
  return c;
}

}  // namespace

fs::path write_checkpoint(const fs::path& dir, const Checkpoint& checkpoint,
                          const CheckpointWriteOptions& options) {
  check_writable(checkpoint);
  const CheckpointSlot slot = open_checkpoint(dir, checkpoint.step, checkpoint.parent, options);
  std::vector<StageFileRecord> files;
  try {
    for (std::size_t s = 0; s < checkpoint.stages.size(); ++s) {
      files.push_back(write_stage_file(slot.step_dir(), static_cast<int>(s), checkpoint.step,
                                       checkpoint.stages[s]));
    }
  } catch (...) {
    abandon_checkpoint(slot);
    throw;
  }
  return commit_checkpoint(slot, checkpoint, std::move(files), options);
}

CheckpointSlot open_checkpoint(const fs::path& dir, std::int64_t step,
                               const std::optional<CheckpointRef>& parent,
                               const CheckpointWriteOptions& options) {
  if (step < 0)
    throw CheckpointError("write_checkpoint: step " + std::to_string(step) + " is negative");
  std::error_code ec;
  const bool existed = fs::exists(dir, ec);
  fs::create_directories(dir, ec);
  if (ec) throw FileError("cannot create directory '" + dir.string() + "': " + ec.message());
  if (!existed) {
    const fs::path up = dir.parent_path();
    fsync_directory(up.empty() ? fs::path(".") : up);
  }
  CheckpointSlot slot;
  slot.dir = dir;
  const std::optional<CheckpointRef> latest = latest_or_none(dir);
  slot.parent = parent ? parent : latest;
  // The kept part of the lineage, and at least the parent, whose name the new one must not take.
  slot.ancestors =
      lineage(dir, slot.parent, static_cast<std::size_t>(std::max(options.keep - 1, 1)));
  slot.name = choose_step_dir(dir, step, latest, slot.ancestors);
  fs::create_directory(slot.step_dir(), ec);
  if (ec) {
    throw FileError("cannot create directory '" + slot.step_dir().string() + "': " + ec.message());
  }
  fsync_directory(dir);
  return slot;
}

StageFileRecord write_stage_file(const fs::path& step_dir, int stage, std::int64_t step,
                                 const StageCheckpoint& contents) {
  std::error_code ec;
  fs::create_directories(step_dir, ec);
  if (ec) throw FileError("cannot create directory '" + step_dir.string() + "': " + ec.message());
  auto [tensors, entry] = stage_contents(contents);
  StageFileRecord record;
  record.stage = stage;
  record.file = stage_file_name(static_cast<std::size_t>(stage));
  AtomicFile file(step_dir / record.file);
  Sha256 hash;
  try {
    record.bytes = models::write_safetensors(tensors,
                                             {{"format", "tandem-checkpoint-stage"},
                                              {"stage", std::to_string(stage)},
                                              {"step", std::to_string(step)}},
                                             [&](std::span<const std::byte> chunk) {
                                               hash.update(chunk);
                                               file.write(chunk);
                                             });
  } catch (const models::SafetensorsError& e) {
    throw CheckpointError(file.target().string() + ": " + e.what());
  }
  file.commit();
  record.sha256 = hash.hex_digest();
  record.contents = std::move(entry);
  return record;
}

fs::path commit_checkpoint(const CheckpointSlot& slot, const Checkpoint& checkpoint,
                           std::vector<StageFileRecord> files,
                           const CheckpointWriteOptions& options) {
  try {
    std::sort(files.begin(), files.end(),
              [](const StageFileRecord& a, const StageFileRecord& b) { return a.stage < b.stage; });
    check_files(files, checkpoint.plan);
    json stages = json::array();
    for (const StageFileRecord& f : files) stages.push_back(manifest_entry(f));
    const json manifest = {{"format", kFormat},
                           {"format_version", kCheckpointFormatVersion},
                           {"step", checkpoint.step},
                           {"model", checkpoint.model},
                           {"model_layers", checkpoint.model_layers},
                           {"optimizer", checkpoint.optimizer},
                           {"plan", plan_to_json(checkpoint.plan)},
                           {"seed", checkpoint.seed},
                           {"rng", checkpoint.rng},
                           {"data_position", checkpoint.data_position},
                           {"stages", stages},
                           {"extras", checkpoint.extras},
                           {"parent", parent_to_json(slot.parent)},
                           {"history", checkpoint.history}};
    const std::string text = manifest.dump(2) + "\n";
    if (text.size() > kMaxManifestBytes) {
      throw CheckpointError("write_checkpoint: the manifest would be " +
                            std::to_string(text.size() >> 20) + " MiB, more than the " +
                            std::to_string(kMaxManifestBytes >> 20) + " MiB a reader accepts");
    }
    write_file_atomically(slot.step_dir() / kManifest, text);
    const json pointer = {{"checkpoint", slot.name}, {"manifest_sha256", hex_of(text)}};
    write_file_atomically(slot.dir / kLatest, pointer.dump() + "\n");
  } catch (...) {
    abandon_checkpoint(slot);
    throw;
  }
  prune(slot.dir, slot.name, options.keep, slot.ancestors);
  return slot.step_dir();
}

bool is_step_dir_name(std::string_view name) {
  return parse_step_dir_name(name).has_value();
}

void abandon_checkpoint(const CheckpointSlot& slot) noexcept {
  std::error_code ec;
  fs::remove_all(slot.step_dir(), ec);
}

std::vector<std::string> kept_checkpoints(const CheckpointSlot& slot,
                                          const CheckpointWriteOptions& options) {
  if (options.keep <= 0) return slot.ancestors;
  const std::size_t n = std::min(slot.ancestors.size(), static_cast<std::size_t>(options.keep - 1));
  return {slot.ancestors.begin(), slot.ancestors.begin() + static_cast<std::ptrdiff_t>(n)};
}

void prune_local_checkpoints(const fs::path& dir, const std::vector<std::string>& names) noexcept {
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    std::error_code ignored;
    if (!parse_step_dir_name(name) || !entry.is_directory(ignored)) continue;
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      fs::remove_all(entry.path(), ignored);
    }
  }
}

json stage_file_record_to_json(const StageFileRecord& r) {
  json j = manifest_entry(r);
  j["stage"] = r.stage;
  return j;
}

StageFileRecord stage_file_record_from_json(const json& j, int stages, const std::string& from) {
  const auto fail = [&from](const std::string& what) -> void {
    throw CheckpointError(from + ": a malformed report of a stage file: " + what);
  };
  if (!j.is_object()) fail("not a JSON object");
  StageFileRecord r;
  try {
    r.stage = j.at("stage").get<int>();
    r.file = j.at("file").get<std::string>();
    r.bytes = j.at("bytes").get<std::uint64_t>();
    r.sha256 = j.at("sha256").get<std::string>();
    r.rank = j.at("rank").get<int>();
    r.host = j.at("host").get<std::string>();
    r.contents = {
        {"weights", j.at("weights")}, {"optimizer", j.at("optimizer")}, {"extras", j.at("extras")}};
  } catch (const json::exception& e) {
    fail(e.what());
  }
  if (r.stage < 0 || r.stage >= stages)
    fail("stage " + std::to_string(r.stage) + " of " + std::to_string(stages));
  if (r.file != stage_file_name(static_cast<std::size_t>(r.stage))) fail("file '" + r.file + "'");
  if (!is_sha256_hex(r.sha256)) fail("sha256 '" + r.sha256 + "'");
  if (r.host.size() > 255) fail("a host name of " + std::to_string(r.host.size()) + " bytes");
  check_contents_lists(r.contents, fail);
  return r;
}

std::optional<fs::path> latest_checkpoint(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir / kLatest, ec)) return std::nullopt;
  return dir / read_latest(dir / kLatest).name;
}

CheckpointManifest read_checkpoint_manifest(const fs::path& dir,
                                            const CheckpointExpectations& expect) {
  std::error_code ec;
  fs::path step_dir;
  std::optional<std::string> manifest_sha;
  if (fs::exists(dir / kLatest, ec)) {
    const CheckpointRef latest = read_latest(dir / kLatest);
    step_dir = dir / latest.name;
    manifest_sha = latest.manifest_sha256;
  } else if (fs::exists(dir / kManifest, ec)) {
    step_dir = dir;
  } else if (!fs::is_directory(dir, ec)) {
    refuse(dir, "no such checkpoint directory");
  } else {
    refuse(dir, "no checkpoint here (neither 'latest' nor 'manifest.json')");
  }

  const fs::path manifest_file = step_dir / kManifest;
  const std::string text = read_small_file(
      manifest_file, kMaxManifestBytes,
      manifest_sha ? "missing, though " + (dir / kLatest).string() + " names this checkpoint"
                   : std::string("missing"));
  if (manifest_sha && hex_of(text) != *manifest_sha) {
    refuse(manifest_file, "checksum mismatch (sha256 " + hex_of(text) + ", " +
                              (dir / kLatest).string() + " says " + *manifest_sha +
                              "): the file is corrupted");
  }
  CheckpointManifest m = parse_manifest(text, manifest_file, step_dir, expect);
  m.checkpoint.origin = {directory_name(step_dir), hex_of(text)};
  m.source = files_on_disk();
  return m;
}

StageCheckpoint read_checkpoint_stage(const CheckpointManifest& m, std::size_t s) {
  if (s >= m.stages.size()) {
    refuse(m.manifest_file, "has no stage " + std::to_string(s) + " (it lists " +
                                std::to_string(m.stages.size()) + ")");
  }
  const CheckpointStageEntry& entry = m.stages[s];
  StageTensors found = stage_tensors(m, entry);
  StageCheckpoint stage;
  for (const CheckpointStageEntry::WeightsListing& listed : entry.weights) {
    const std::string which = "weights of replica " + std::to_string(listed.replica) + " version " +
                              std::to_string(listed.version);
    stage.weights.push_back({listed.replica, listed.version,
                             take_listed(found.weights, std::pair{listed.replica, listed.version},
                                         listed.tensors, entry.file, which, "them")});
  }
  if (!found.weights.empty()) {
    const auto& [key, unused] = *found.weights.begin();
    refuse(entry.file, "holds weights of replica " + std::to_string(key.first) + " version " +
                           std::to_string(key.second) + " that the manifest does not list");
  }
  for (const CheckpointStageEntry::OptimizerListing& listed : entry.optimizers) {
    const std::string which = "optimizer state of replica " + std::to_string(listed.replica);
    stage.optimizers.push_back(
        {listed.replica, listed.steps,
         take_listed(found.optimizers, listed.replica, listed.tensors, entry.file, which, "it")});
  }
  if (!found.optimizers.empty()) {
    refuse(entry.file, "holds optimizer state of replica " +
                           std::to_string(found.optimizers.begin()->first) +
                           " that the manifest does not list");
  }
  stage.extras = entry.extras;
  stage.file = entry.file;
  stage.rank = entry.rank;
  stage.host = entry.host;
  check_replicas(m, s, stage);
  return stage;
}

Checkpoint read_checkpoint(const fs::path& dir, const CheckpointExpectations& expect) {
  return read_all_stages(read_checkpoint_manifest(dir, expect));
}

CheckpointRef checkpoint_ref(const fs::path& step_dir) {
  const std::string text = read_small_file(step_dir / kManifest, kMaxManifestBytes, "missing");
  return {directory_name(step_dir), hex_of(text)};
}

void check_stage_tensors(const StageCheckpoint& stage, const models::ParamSet& params,
                         const models::Optimizer& optimizer) {
  const fs::path file = stage.file.empty() ? fs::path("a stage") : stage.file;
  for (const CheckpointWeights& w : stage.weights) {
    const std::string prefix = weights_prefix(w.replica, w.version);
    for (std::int64_t i = 0; i < w.params.size(); ++i) {
      const std::string& name = w.params.name(i);
      if (!params.contains(name)) {
        refuse(file, "tensor '" + prefix + name + "': the stage has no parameter '" + name + "'");
      }
      const Tensor& want = params.at(name);
      const Tensor& got = w.params[i];
      if (got.shape() != want.shape() || got.dtype() != want.dtype()) {
        refuse(file, "tensor '" + prefix + name + "': " + std::string(dtype_name(got.dtype())) +
                         shape_str(got.shape()) + ", but the model's parameter is " +
                         std::string(dtype_name(want.dtype())) + shape_str(want.shape()));
      }
      // A run that diverged fails as it diverges: weights it could not train from are no state
      // to resume.
      if (const std::optional<std::string> bad = models::non_finite_value(got)) {
        refuse(file, "tensor '" + prefix + name + "' " + *bad +
                         ": the weights to resume from are finite");
      }
    }
    for (const std::string& name : params.names()) {
      if (!w.params.contains(name)) refuse(file, "tensor '" + prefix + name + "' is missing");
    }
  }
  for (const CheckpointOptimizer& o : stage.optimizers) {
    try {
      optimizer.check_state(o.state, params);
    } catch (const models::OptimizerStateError& e) {
      refuse(file, "tensor '" + optimizer_prefix(o.replica) + e.entry() + "': " + e.detail() +
                       " (" + e.who() + ")");
    }
    for (std::int64_t i = 0; i < o.state.size(); ++i) {
      if (const std::optional<std::string> bad = models::non_finite_value(o.state[i])) {
        refuse(file, "tensor '" + optimizer_prefix(o.replica) + o.state.name(i) + "' " + *bad +
                         ": the optimizer state to resume from is finite");
      }
    }
  }
}

Checkpoint read_checkpoint_bytes(std::string_view manifest,
                                 const std::map<std::string, std::span<const std::byte>>& files,
                                 const fs::path& name_for_errors, bool verify_checksums) {
  CheckpointManifest m = parse_manifest(manifest, name_for_errors / kManifest, name_for_errors, {});
  m.source = [&files](const fs::path& file, std::uint64_t expected) {
    const auto it = files.find(file.filename().string());
    if (it == files.end()) refuse(file, "missing (the manifest lists it)");
    check_size(file, it->second.size(), expected);
    return std::vector<std::byte>(it->second.begin(), it->second.end());
  };
  m.verify_checksums = verify_checksums;
  m.checkpoint.origin = {name_for_errors.filename().string(), hex_of(manifest)};
  return read_all_stages(m);
}

}  // namespace tandem::train
