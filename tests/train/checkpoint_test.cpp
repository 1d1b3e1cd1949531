// Checkpoint directories: round trips, refusals naming the file, and writers killed mid-write.
#include "train/checkpoint.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "models/safetensors.hpp"
#include "runtime/atomic_file.hpp"
#include "runtime/sha256.hpp"

namespace tandem::apps {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Bit patterns from a seed (NaNs included: the checkpoint must keep bits, not values).
Tensor filled(Shape shape, DType dtype, std::uint64_t seed) {
  Tensor t = Tensor::empty(std::move(shape), dtype);
  auto* bytes = static_cast<unsigned char*>(t.raw_data());
  std::uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (std::size_t i = 0; i < t.nbytes(); ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    bytes[i] = static_cast<unsigned char>(x);
  }
  return t;
}

models::ParamSet params(std::uint64_t seed, std::int64_t width) {
  models::ParamSet p;
  p.add("0.weight", filled({width, 8}, DType::f32, seed));
  p.add("0.bias", filled({8}, DType::bf16, seed + 1));
  p.add("1.embedding", filled({3, 2}, DType::i32, seed + 2));
  return p;
}

schedules::Plan test_plan() {
  schedules::ScheduleParams schedule;
  schedule.kind = schedules::ScheduleKind::pipedream;
  schedule.minibatch_size = 32;
  schedule.minibatches = 0;
  return schedules::Plan::make(
      {schedules::StagePlan{{0, 2}, {{"", "cpu"}, {"", "cpu"}}}, schedules::StagePlan{{2, 4}}},
      schedule);
}

// A PipeDream-like state at `step`: stage 0 has two replicas and a stashed older version.
train::Checkpoint make_checkpoint(std::int64_t step, std::int64_t width = 4) {
  train::Checkpoint c;
  c.step = step;
  c.model = "mlp(widths=[4, 8, 8, 2])";
  c.plan = test_plan();
  c.optimizer = "adamw";
  c.seed = 0xfedcba9876543210ull;  // above INT64_MAX
  c.rng = {{"dropout", {{"counter", step * 3}}}};
  c.data_position = step * 32;
  c.extras = {{"in_flight", {step, step + 1}}};
  const auto u = static_cast<std::uint64_t>(step) * 100;
  c.stages.resize(2);
  c.stages[0].weights.push_back({0, step, params(u + 1, width)});
  c.stages[0].weights.push_back({0, step - 1, params(u + 2, width)});
  c.stages[0].weights.push_back({1, step, params(u + 3, width)});
  c.stages[0].optimizers.push_back({0, step, params(u + 4, width)});
  c.stages[0].optimizers.push_back({1, step, params(u + 5, width)});
  c.stages[0].extras = {{"stashed_for", {step}}};
  c.stages[1].weights.push_back({0, step, params(u + 6, width)});
  c.stages[1].optimizers.push_back({0, step, models::ParamSet{}});  // a stateless SGD
  return c;
}

void expect_same_params(const models::ParamSet& a, const models::ParamSet& b) {
  ASSERT_EQ(a.names(), b.names());
  for (std::int64_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].shape(), b[i].shape()) << a.name(i);
    ASSERT_EQ(a[i].dtype(), b[i].dtype()) << a.name(i);
    EXPECT_EQ(std::memcmp(a[i].raw_data(), b[i].raw_data(), a[i].nbytes()), 0) << a.name(i);
  }
}

void expect_same(const train::Checkpoint& a, const train::Checkpoint& b) {
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.model, b.model);
  EXPECT_EQ(a.optimizer, b.optimizer);
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.rng, b.rng);
  EXPECT_EQ(a.data_position, b.data_position);
  EXPECT_EQ(a.extras, b.extras);
  EXPECT_EQ(a.plan.stages, b.plan.stages);
  const schedules::ScheduleParams& x = a.plan.schedule;
  const schedules::ScheduleParams& y = b.plan.schedule;
  EXPECT_EQ(x.kind, y.kind);
  EXPECT_EQ(x.stages, y.stages);
  EXPECT_EQ(x.slices, y.slices);
  EXPECT_EQ(x.minibatch_size, y.minibatch_size);
  EXPECT_EQ(x.replicas, y.replicas);
  EXPECT_EQ(x.chunks, y.chunks);
  EXPECT_EQ(x.rematerialize, y.rematerialize);
  EXPECT_EQ(x.minibatches, y.minibatches);
  EXPECT_EQ(x.forward_slices, y.forward_slices);
  EXPECT_EQ(x.backward_slices, y.backward_slices);
  ASSERT_EQ(a.stages.size(), b.stages.size());
  for (std::size_t s = 0; s < a.stages.size(); ++s) {
    SCOPED_TRACE("stage " + std::to_string(s));
    ASSERT_EQ(a.stages[s].weights.size(), b.stages[s].weights.size());
    for (std::size_t i = 0; i < a.stages[s].weights.size(); ++i) {
      EXPECT_EQ(a.stages[s].weights[i].replica, b.stages[s].weights[i].replica);
      EXPECT_EQ(a.stages[s].weights[i].version, b.stages[s].weights[i].version);
      expect_same_params(a.stages[s].weights[i].params, b.stages[s].weights[i].params);
    }
    ASSERT_EQ(a.stages[s].optimizers.size(), b.stages[s].optimizers.size());
    for (std::size_t i = 0; i < a.stages[s].optimizers.size(); ++i) {
      EXPECT_EQ(a.stages[s].optimizers[i].replica, b.stages[s].optimizers[i].replica);
      EXPECT_EQ(a.stages[s].optimizers[i].steps, b.stages[s].optimizers[i].steps);
      expect_same_params(a.stages[s].optimizers[i].state, b.stages[s].optimizers[i].state);
    }
    EXPECT_EQ(a.stages[s].extras, b.stages[s].extras);
  }
}

std::string slurp(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void spit(const fs::path& file, const std::string& text) {
  std::ofstream(file, std::ios::binary | std::ios::trunc) << text;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("tandem_checkpoint_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The error read_checkpoint gives, checked to name `file`.
  std::string refusal(const fs::path& from, const fs::path& file,
                      const train::CheckpointExpectations& expect = {}) {
    try {
      train::read_checkpoint(from, expect);
    } catch (const train::CheckpointError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(file.string() + ": "), std::string::npos) << what;
      return what;
    }
    ADD_FAILURE() << "train::read_checkpoint(" << from << ") accepted a bad checkpoint";
    return "";
  }

  // Every file and directory under dir_, relative.
  std::set<std::string> tree() const {
    std::set<std::string> out;
    for (const auto& e : fs::recursive_directory_iterator(dir_)) {
      out.insert(fs::relative(e.path(), dir_).string());
    }
    return out;
  }

  fs::path dir_;
};

TEST_F(CheckpointTest, RoundTripIsBitIdentical) {
  const train::Checkpoint c = make_checkpoint(7);
  const fs::path step_dir = train::write_checkpoint(dir_, c);
  EXPECT_EQ(step_dir, dir_ / "step-00000007");
  expect_same(train::read_checkpoint(dir_), c);
  expect_same(train::read_checkpoint(step_dir), c);  // a step directory reads on its own
  EXPECT_EQ(train::latest_checkpoint(dir_), step_dir);
  EXPECT_EQ(train::latest_checkpoint(dir_ / "nothing"), std::nullopt);
}

TEST_F(CheckpointTest, FilesAreSafetensorsAndTheManifestChecksumsThem) {
  const train::Checkpoint c = make_checkpoint(3);
  const fs::path step_dir = train::write_checkpoint(dir_, c);
  EXPECT_EQ(tree(), (std::set<std::string>{"latest", "step-00000003", "step-00000003/manifest.json",
                                           "step-00000003/stage-0.safetensors",
                                           "step-00000003/stage-1.safetensors"}));
  const json latest = json::parse(slurp(dir_ / "latest"));
  EXPECT_EQ(latest.at("checkpoint"), "step-00000003");
  const std::string manifest_text = slurp(step_dir / "manifest.json");
  EXPECT_EQ(latest.at("manifest_sha256"),
            sha256_hex(std::as_bytes(std::span(manifest_text.data(), manifest_text.size()))));
  const json manifest = json::parse(manifest_text);
  EXPECT_EQ(manifest.at("format_version"), train::kCheckpointFormatVersion);
  EXPECT_EQ(manifest.at("step"), 3);
  EXPECT_EQ(manifest.at("model"), c.model);
  EXPECT_EQ(manifest.at("plan").at("schedule").at("kind"), "pipedream");
  EXPECT_EQ(manifest.at("stages").at(0).at("weights").size(), 3u);
  for (int s = 0; s < 2; ++s) {
    const json& entry = manifest.at("stages").at(s);
    const fs::path file = step_dir / entry.at("file").get<std::string>();
    const std::string bytes = slurp(file);
    EXPECT_EQ(entry.at("bytes"), bytes.size());
    EXPECT_EQ(entry.at("sha256"), sha256_hex(std::as_bytes(std::span(bytes.data(), bytes.size()))));
    // Any safetensors reader sees the weights under their prefixed names.
    const models::SafetensorsContent content = models::read_safetensors(file);
    EXPECT_EQ(content.metadata.at("stage"), std::to_string(s));
    EXPECT_EQ(content.metadata.at("step"), "3");
  }
  const models::SafetensorsContent stage0 =
      models::read_safetensors(step_dir / "stage-0.safetensors");
  EXPECT_TRUE(stage0.tensors.contains("weights/r0/v3/0.weight"));
  EXPECT_TRUE(stage0.tensors.contains("weights/r0/v2/0.bias"));
  EXPECT_TRUE(stage0.tensors.contains("weights/r1/v3/1.embedding"));
  EXPECT_TRUE(stage0.tensors.contains("optimizer/r1/0.weight"));
}

TEST_F(CheckpointTest, KeepsTheNewestAndNeverOverwritesTheLatest) {
  for (int step = 1; step <= 3; ++step) train::write_checkpoint(dir_, make_checkpoint(step));
  EXPECT_EQ(train::read_checkpoint(dir_).step, 3);
  EXPECT_FALSE(fs::exists(dir_ / "step-00000001"));
  EXPECT_TRUE(fs::exists(dir_ / "step-00000002" / "manifest.json"));
  // The same step again (the end of a run that also checkpointed at its last step).
  train::Checkpoint again = make_checkpoint(3);
  again.extras = {{"final", true}};
  EXPECT_EQ(train::write_checkpoint(dir_, again), dir_ / "step-00000003.1");
  expect_same(train::read_checkpoint(dir_), again);
  EXPECT_FALSE(fs::exists(dir_ / "step-00000002"));
  train::write_checkpoint(dir_, make_checkpoint(4), {.keep = 0});
  train::write_checkpoint(dir_, make_checkpoint(5), {.keep = 0});
  EXPECT_EQ(tree().count("step-00000003.1"), 1u);
  EXPECT_EQ(tree().count("step-00000004"), 1u);
}

// The step directories in dir_ (complete or not).
std::set<std::string> step_dirs(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_directory()) out.insert(entry.path().filename().string());
  }
  return out;
}

train::Checkpoint child_of(std::int64_t step, const fs::path& parent, std::int64_t width = 4) {
  train::Checkpoint c = make_checkpoint(step, width);
  c.parent = train::checkpoint_ref(parent);
  return c;
}

// Pruning keeps the run's own lineage (each checkpoint's parent, found by name and manifest
// SHA-256), not the newest steps in the directory: after a resume from an older checkpoint the
// abandoned run's newer ones go, and the resumed run's own stay.
TEST_F(CheckpointTest, PruningKeepsTheRunsOwnLineage) {
  for (int step = 10; step <= 30; step += 10) {
    train::write_checkpoint(dir_, make_checkpoint(step), {.keep = 0});  // each continues `latest`
  }
  EXPECT_EQ(train::read_checkpoint(dir_ / "step-00000020").parent,
            train::checkpoint_ref(dir_ / "step-00000010"));
  const train::CheckpointRef abandoned_20 = train::checkpoint_ref(dir_ / "step-00000020");
  // Resumed from step 10: the new step 20 (other contents) replaces the abandoned run's, which
  // is off the lineage; keep 2 keeps it and its parent, step 10, and drops the newer step 30.
  const train::Checkpoint resumed = child_of(20, dir_ / "step-00000010", 6);
  EXPECT_EQ(train::write_checkpoint(dir_, resumed), dir_ / "step-00000020");
  EXPECT_EQ(step_dirs(dir_), (std::set<std::string>{"step-00000010", "step-00000020"}));
  expect_same(train::read_checkpoint(dir_), resumed);
  EXPECT_NE(train::checkpoint_ref(dir_ / "step-00000020"), abandoned_20);
  // The same step again: neither `latest` nor the lineage is overwritten.
  EXPECT_EQ(train::write_checkpoint(dir_, child_of(20, dir_ / "step-00000020", 6), {.keep = 3}),
            dir_ / "step-00000020.1");
  EXPECT_EQ(step_dirs(dir_),
            (std::set<std::string>{"step-00000010", "step-00000020", "step-00000020.1"}));
  train::write_checkpoint(dir_, child_of(40, dir_ / "step-00000020.1", 6), {.keep = 2});
  EXPECT_EQ(step_dirs(dir_), (std::set<std::string>{"step-00000020.1", "step-00000040"}));
  EXPECT_EQ(train::read_checkpoint(dir_).parent, train::checkpoint_ref(dir_ / "step-00000020.1"));
}

// An ancestor's name that now holds another checkpoint (its manifest's digest differs from the
// one recorded) ends the lineage: that directory is not the run's and is pruned.
TEST_F(CheckpointTest, ALineageEndsWhereANameHoldsAnotherCheckpoint) {
  for (int step = 1; step <= 3; ++step)
    train::write_checkpoint(dir_, make_checkpoint(step), {.keep = 0});
  train::write_checkpoint(dir_, make_checkpoint(4), {.keep = 4});
  EXPECT_EQ(step_dirs(dir_), (std::set<std::string>{"step-00000001", "step-00000002",
                                                    "step-00000003", "step-00000004"}));
  const fs::path manifest = dir_ / "step-00000002" / "manifest.json";
  json m = json::parse(slurp(manifest));
  m["extras"] = {{"another", "run"}};
  spit(manifest, m.dump(2));
  train::write_checkpoint(dir_, make_checkpoint(5), {.keep = 4});
  EXPECT_EQ(step_dirs(dir_),
            (std::set<std::string>{"step-00000003", "step-00000004", "step-00000005"}));
}

TEST_F(CheckpointTest, RefusesAMalformedParent) {
  train::write_checkpoint(dir_, make_checkpoint(1));
  const fs::path step_dir = train::write_checkpoint(dir_, make_checkpoint(2));
  const fs::path manifest_file = step_dir / "manifest.json";
  const json manifest = json::parse(slurp(manifest_file));
  ASSERT_TRUE(manifest.contains("parent"));
  EXPECT_EQ(manifest["parent"]["checkpoint"], "step-00000001");
  auto refusal_with = [&](const json& parent) {
    json m = manifest;
    m["parent"] = parent;
    spit(manifest_file, m.dump(2));
    return refusal(step_dir, manifest_file);
  };
  EXPECT_NE(refusal_with(5).find("field 'parent' must be an object"), std::string::npos);
  EXPECT_NE(refusal_with({{"checkpoint", "../x"}, {"manifest_sha256", std::string(64, 'a')}})
                .find("field 'parent.checkpoint' names '../x'"),
            std::string::npos);
  EXPECT_NE(refusal_with({{"checkpoint", "step-1"}, {"manifest_sha256", "AB"}})
                .find("field 'parent.manifest_sha256'"),
            std::string::npos);
  // Manifests written before lineages were recorded have none.
  json old = manifest;
  old.erase("parent");
  spit(manifest_file, old.dump(2));
  EXPECT_EQ(train::read_checkpoint(step_dir).parent, std::nullopt);
}

TEST_F(CheckpointTest, RefusesTruncatedCorruptedAndMissingFiles) {
  const fs::path step_dir = train::write_checkpoint(dir_, make_checkpoint(2));
  const fs::path stage1 = step_dir / "stage-1.safetensors";
  const std::string original = slurp(stage1);

  spit(stage1, original.substr(0, original.size() - 5));
  EXPECT_NE(refusal(dir_, stage1).find("truncated"), std::string::npos);

  std::string corrupted = original;
  corrupted[corrupted.size() - 3] ^= 0x10;
  spit(stage1, corrupted);
  EXPECT_NE(refusal(dir_, stage1).find("checksum mismatch"), std::string::npos);

  spit(stage1, original + "x");
  EXPECT_NE(refusal(dir_, stage1).find("the manifest says"), std::string::npos);

  fs::remove(stage1);
  EXPECT_NE(refusal(dir_, stage1).find("missing"), std::string::npos);
  spit(stage1, original);
  expect_same(train::read_checkpoint(dir_), make_checkpoint(2));

  const fs::path manifest = step_dir / "manifest.json";
  const std::string manifest_text = slurp(manifest);
  spit(manifest, manifest_text.substr(0, manifest_text.size() / 2));
  EXPECT_NE(refusal(dir_, manifest).find("checksum mismatch"), std::string::npos);
  EXPECT_NE(refusal(step_dir, manifest).find("not valid JSON"), std::string::npos);
  fs::remove(manifest);
  EXPECT_NE(refusal(dir_, manifest).find("missing"), std::string::npos);

  spit(dir_ / "latest", "{\"checkpoint\": \"../elsewhere\", \"manifest_sha256\": \"\"}");
  EXPECT_NE(refusal(dir_, dir_ / "latest").find("not a directory name"), std::string::npos);
  spit(dir_ / "latest", "step-00000002");
  EXPECT_NE(refusal(dir_, dir_ / "latest").find("not valid JSON"), std::string::npos);

  fs::remove(dir_ / "latest");
  fs::remove_all(step_dir);
  EXPECT_NE(refusal(dir_, dir_).find("no checkpoint here"), std::string::npos);
  EXPECT_NE(refusal(dir_ / "absent", dir_ / "absent").find("no such"), std::string::npos);
}

TEST_F(CheckpointTest, RefusesManifestsItCannotTrust) {
  const fs::path step_dir = train::write_checkpoint(dir_, make_checkpoint(2));
  const fs::path manifest_file = step_dir / "manifest.json";
  const json manifest = json::parse(slurp(manifest_file));
  // Read directly: through `latest` the edit would fail the manifest's checksum first.
  auto refusal_with = [&](const std::function<void(json&)>& edit,
                          const fs::path& named = fs::path()) {
    json m = manifest;
    edit(m);
    spit(manifest_file, m.dump(2));
    return refusal(step_dir, named.empty() ? manifest_file : named);
  };
  EXPECT_NE(refusal_with([](json& m) {
              m["format_version"] = 2;
            }).find("format_version 2 is not supported"),
            std::string::npos);
  EXPECT_NE(refusal_with([](json& m) { m["format"] = "other"; }).find("not a Tandem checkpoint"),
            std::string::npos);
  EXPECT_NE(refusal_with([](json& m) { m.erase("seed"); }).find("missing field 'seed'"),
            std::string::npos);
  EXPECT_NE(refusal_with([](json& m) { m["step"] = -1; }).find("field 'step'"), std::string::npos);
  EXPECT_NE(refusal_with([](json& m) {
              m["plan"]["schedule"]["kind"] = "nope";
            }).find("plan.schedule.kind"),
            std::string::npos);
  EXPECT_NE(refusal_with([](json& m) {
              m["stages"][1]["file"] = "../stage-1.safetensors";
            }).find("not a file in"),
            std::string::npos);
  EXPECT_NE(refusal_with([](json& m) { m["stages"].erase(1); }).find("1 stage entries"),
            std::string::npos);
  // The manifest and the stage file must agree on what the file holds.
  const fs::path stage0 = step_dir / "stage-0.safetensors";
  EXPECT_NE(refusal_with([](json& m) { m["stages"][0]["weights"][1]["tensors"] = 99; }, stage0)
                .find("the manifest says 99"),
            std::string::npos);
  EXPECT_NE(refusal_with([](json& m) { m["stages"][0]["weights"].erase(2); }, stage0)
                .find("that the manifest does not list"),
            std::string::npos);
  EXPECT_NE(refusal_with([](json& m) { m["stages"][0]["weights"][0]["version"] = 5; }, stage0)
                .find("holds no weights of replica 0 version 5"),
            std::string::npos);
  EXPECT_NE(refusal_with([](json& m) { m["stages"][0]["optimizer"][0]["replica"] = 3; }, stage0)
                .find("optimizer state of replica"),
            std::string::npos);
  EXPECT_NE(refusal_with([](json& m) {
              m["plan"]["stages"][0]["replicas"].erase(1);
              m["plan"]["schedule"]["replicas"][0] = 1;
            }).find("holds weights of replica 1 of 1"),
            std::string::npos);
  EXPECT_NE(refusal_with([](json& m) { m["plan"]["stages"][0]["replicas"].erase(1); })
                .find("field 'plan' is not a valid plan: plan: stage 0: has 1 replicas but the "
                      "schedule says 2"),
            std::string::npos);
  EXPECT_NE(refusal_with([](json& m) {
              m["model_layers"] = "layer 0";
            }).find("field 'model_layers' must be an array"),
            std::string::npos);
  EXPECT_NE(refusal_with([](json& m) {
              m["model_layers"] = json::array({"layer 0", 7});
            }).find("field 'model_layers[1]' is not a line of text"),
            std::string::npos);
  EXPECT_NE(refusal_with([](json& m) {
              m["model_layers"] = json::array({std::string(5000, 'x')});
            }).find("field 'model_layers[0]' is not a line of text"),
            std::string::npos);
  // One file named by two stages: export merged them and failed with ParamSet's internal text.
  EXPECT_NE(refusal_with([](json& m) {
              m["stages"][1]["file"] = m["stages"][0]["file"];
            }).find("field 'stages[1].file' names 'stage-0.safetensors', as stages[0] does"),
            std::string::npos);
  // A plan that leaves the model's last layer to no file: export wrote a model without it.
  EXPECT_NE(refusal_with([](json& m) {
              m["model_layers"] = json::array(
                  {"layer 0", "layer 1", "layer 2", "layer 3", "layer 4", "loss: xent"});
            }).find("field 'plan.stages' covers layers 0-3, but the model has 5"),
            std::string::npos);
  // Terminal escapes in what inspect, resume and reshard print: refused, not printed raw.
  EXPECT_NE(refusal_with([](json& m) {
              m["model"] = "mlp\x1b]0;owned\x07";
            }).find("field 'model' holds the control character 0x1b at byte 3"),
            std::string::npos);
  EXPECT_NE(refusal_with([](json& m) {
              m["stages"][0]["host"] =
                  "node\xc2\x9b"
                  "2J";
            }).find("field 'stages[0].host' holds the control character 0x9b at byte 4"),
            std::string::npos);
  EXPECT_NE(refusal_with([](json& m) {
              m["plan"]["stages"][0]["replicas"][0]["host"] = "a\rb";
            }).find("field 'plan.stages[0].replicas[0].host' holds the control character 0x0d"),
            std::string::npos);
  EXPECT_NE(refusal_with([](json& m) {
              m["model_layers"] = json::array({"layer 0\x1b[2J"});
            }).find("field 'model_layers[0]' holds the control character 0x1b"),
            std::string::npos);
  // Printable UTF-8 is text like any other.
  json utf8 = manifest;
  utf8["stages"][0]["host"] = "n\xc5\x93ud-\xe6\x97\xa5";
  spit(manifest_file, utf8.dump());
  EXPECT_EQ(train::read_checkpoint(step_dir).stages[0].host, "n\xc5\x93ud-\xe6\x97\xa5");
  // Values beyond any manifest's count (each costs memory however short its text) are refused
  // while parsing: 8 million zeros in 16 MiB took half a GiB to read.
  std::string many = manifest.dump();
  std::string zeros = "[0";
  for (int i = 0; i < 2'000'000; ++i) zeros += ",0";
  many.insert(many.rfind('}'), ",\"pad\":" + zeros + "]");
  spit(manifest_file, many);
  EXPECT_NE(refusal(step_dir, manifest_file).find("JSON holds more than 2000000 values"),
            std::string::npos);
  // A manifest over the bound is refused before it is parsed.
  spit(manifest_file, std::string((16u << 20) + 1, ' '));
  EXPECT_NE(refusal(step_dir, manifest_file).find("manifest.json"), std::string::npos);
  spit(manifest_file, manifest.dump());
  expect_same(train::read_checkpoint(step_dir), make_checkpoint(2));
}

// Layer ranges and indices are checked before anything prints or uses them: [2^40, 4) was
// cast to int and printed as [0, 4).
TEST_F(CheckpointTest, RefusesLayerRangesAndIndicesOutOfRange) {
  const fs::path step_dir = train::write_checkpoint(dir_, make_checkpoint(2));
  const fs::path manifest_file = step_dir / "manifest.json";
  const json manifest = json::parse(slurp(manifest_file));
  auto refusal_with = [&](const std::function<void(json&)>& edit) {
    json m = manifest;
    edit(m);
    spit(manifest_file, m.dump(2));
    return refusal(step_dir, manifest_file);
  };
  const std::int64_t huge = std::int64_t{1} << 40;
  EXPECT_NE(refusal_with([&](json& m) {
              m["plan"]["stages"][0]["layers"] = {huge, 4};
            })
                .find("field 'plan.stages[0].layers[0]' is 1099511627776, more than a layer index "
                      "can be"),
            std::string::npos);
  EXPECT_NE(refusal_with([&](json& m) {
              m["plan"]["stages"][1]["layers"] = {2, huge + 4};
            }).find("field 'plan.stages[1].layers[1]' is 1099511627780"),
            std::string::npos);
  EXPECT_NE(refusal_with([](json& m) {
              m["plan"]["stages"][0]["layers"] = {2, 0};
            }).find("field 'plan.stages[0].layers' is [2, 0): a stage needs at least one layer"),
            std::string::npos);
  EXPECT_NE(refusal_with([](json& m) {
              m["plan"]["stages"][1]["layers"] = {3, 4};
            }).find("field 'plan.stages[1].layers' begins at layer 3, expected 2"),
            std::string::npos);
  EXPECT_NE(refusal_with([](json& m) {
              m["plan"]["stages"][0]["layers"] = {-1, 2};
            }).find("field 'plan.stages[0].layers[0]' must be an integer >= 0"),
            std::string::npos);
  EXPECT_NE(refusal_with([](json& m) {
              m["plan"]["schedule"]["stages"] = 3;
            }).find("field 'plan' is not a valid plan"),
            std::string::npos);
  // Versions and optimizer steps count updates: never more than the steps done.
  EXPECT_NE(refusal_with([](json& m) {
              m["stages"][1]["optimizer"][0]["steps"] = std::numeric_limits<std::int64_t>::max();
            }).find("optimizer steps, more than the 2 steps done"),
            std::string::npos);
  spit(manifest_file, manifest.dump());
  expect_same(train::read_checkpoint(step_dir), make_checkpoint(2));
}

// Another model or optimizer is refused naming both; another plan is not (a resume lays the
// stages out anew, train/reshard.hpp), nor are other devices or a longer run.
TEST_F(CheckpointTest, RefusesAnotherModelOrOptimizerNamingBoth) {
  train::write_checkpoint(dir_, make_checkpoint(2));
  const fs::path manifest = dir_ / "step-00000002" / "manifest.json";
  EXPECT_NE(refusal(dir_, manifest, {.model = "mlp(widths=[4, 9, 8, 2])"})
                .find("checkpoint of another model: 'mlp(widths=[4, 8, 8, 2])', this run trains "
                      "'mlp(widths=[4, 9, 8, 2])'"),
            std::string::npos);
  EXPECT_NE(refusal(dir_, manifest, {.optimizer = "sgd"})
                .find("checkpoint of another optimizer: 'adamw', this run uses 'sgd'"),
            std::string::npos);
  const train::Checkpoint c =
      train::read_checkpoint(dir_, {.model = "mlp(widths=[4, 8, 8, 2])", .optimizer = "adamw"});
  expect_same(c, make_checkpoint(2));
}

// A checkpoint records every layer's line (train::model_identity): a model whose name and
// parameter shapes agree but whose one activation differs is refused, naming the two lines; a
// manifest written before the lines were recorded is compared by name only.
TEST_F(CheckpointTest, RefusesAModelThatDiffersInOneLayerNamingTheLine) {
  train::Checkpoint written = make_checkpoint(2);
  written.model_layers = {"layer 0: linear(4->8, relu)", "layer 1: relu", "layer 2: linear(8->8)",
                          "layer 3: linear(8->2)", "loss: xent"};  // the plan's 4 layers
  train::write_checkpoint(dir_, written);
  const fs::path manifest = dir_ / "step-00000002" / "manifest.json";
  std::vector<std::string> gelu = written.model_layers;
  gelu[0] = "layer 0: linear(4->8, gelu)";
  EXPECT_NE(refusal(dir_, manifest, {.model = written.model, .model_layers = gelu})
                .find("the file has 'layer 0: linear(4->8, relu)' where this model has 'layer 0: "
                      "linear(4->8, gelu)'"),
            std::string::npos);
  std::vector<std::string> longer = written.model_layers;
  longer.push_back("tie: 0.weight=1.weight");
  EXPECT_NE(refusal(dir_, manifest, {.model_layers = longer})
                .find("this model has 'tie: 0.weight=1.weight', which the file lacks"),
            std::string::npos);
  EXPECT_EQ(train::read_checkpoint(dir_, {.model_layers = written.model_layers}).model_layers,
            written.model_layers);
  json m = json::parse(slurp(manifest));
  m.erase("model_layers");
  spit(manifest, m.dump(2));
  EXPECT_TRUE(
      train::read_checkpoint(manifest.parent_path(), {.model_layers = gelu}).model_layers.empty());
}

// The manifest reads on its own; each stage file is read, and checked, when asked for.
TEST_F(CheckpointTest, ReadsTheManifestAloneAndStagesOnDemand) {
  const fs::path step_dir = train::write_checkpoint(dir_, make_checkpoint(2));
  const fs::path stage1 = step_dir / "stage-1.safetensors";
  fs::remove(step_dir / "stage-0.safetensors");
  std::string corrupted = slurp(stage1);
  corrupted[corrupted.size() - 3] ^= 0x10;
  spit(stage1, corrupted);

  const train::CheckpointManifest m = train::read_checkpoint_manifest(dir_);
  const train::Checkpoint expected = make_checkpoint(2);
  EXPECT_EQ(m.checkpoint.step, 2);
  EXPECT_TRUE(m.checkpoint.stages.empty());
  EXPECT_EQ(m.checkpoint.plan.stages, expected.plan.stages);
  ASSERT_EQ(m.stages.size(), 2u);
  EXPECT_EQ(m.stages[0].file, step_dir / "stage-0.safetensors");
  ASSERT_EQ(m.stages[0].weights.size(), 3u);
  EXPECT_EQ(m.stages[0].weights[1].version, 1);
  EXPECT_EQ(m.stages[0].weights[2].replica, 1);
  ASSERT_EQ(m.stages[1].optimizers.size(), 1u);
  EXPECT_EQ(m.stages[1].optimizers[0].steps, 2);
  EXPECT_EQ(m.checkpoint.origin, train::checkpoint_ref(step_dir));

  auto stage_refusal = [&](std::size_t s) -> std::string {
    try {
      train::read_checkpoint_stage(m, s);
    } catch (const train::CheckpointError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(stage_refusal(0).find((step_dir / "stage-0.safetensors").string() + ": missing"),
            std::string::npos);
  EXPECT_NE(stage_refusal(1).find(stage1.string() + ": checksum mismatch"), std::string::npos);
  EXPECT_NE(stage_refusal(2).find("has no stage 2"), std::string::npos);

  const fs::path other = train::write_checkpoint(dir_ / "other", expected);
  const train::CheckpointManifest good = train::read_checkpoint_manifest(other);
  const train::StageCheckpoint stage = train::read_checkpoint_stage(good, 1);
  ASSERT_EQ(stage.weights.size(), 1u);
  expect_same_params(stage.weights[0].params, expected.stages[1].weights[0].params);
  EXPECT_EQ(stage.file, other / "stage-1.safetensors");
}

// Per-stage fields the reader does not know (where a rank wrote its file) are ignored.
TEST_F(CheckpointTest, IgnoresUnknownPerStageFields) {
  const fs::path step_dir = train::write_checkpoint(dir_, make_checkpoint(2));
  const fs::path manifest_file = step_dir / "manifest.json";
  json m = json::parse(slurp(manifest_file));
  m["stages"][0]["rank"] = 1;
  m["stages"][1]["host"] = "node-2";
  spit(manifest_file, m.dump(2));
  expect_same(train::read_checkpoint(step_dir), make_checkpoint(2));
}

TEST_F(CheckpointTest, RefusesToWriteStateThePlanCannotHold) {
  train::write_checkpoint(dir_, make_checkpoint(1));
  const std::set<std::string> before = tree();
  auto expect_refused = [&](train::Checkpoint c, const std::string& message) {
    try {
      train::write_checkpoint(dir_, c);
      ADD_FAILURE() << "written: " << message;
    } catch (const train::CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
    EXPECT_EQ(tree(), before);  // nothing left behind, the previous checkpoint untouched
  };
  train::Checkpoint c = make_checkpoint(2);
  c.stages.pop_back();
  expect_refused(c, "1 stages of state for a plan of 2 stages");
  c = make_checkpoint(2);
  c.stages[1].weights[0].replica = 1;
  expect_refused(c, "stage 1 replica 1 version 2: the plan gives the stage 1 replicas");
  c = make_checkpoint(2);
  c.stages[0].weights.push_back(c.stages[0].weights[0]);
  expect_refused(c, "stored twice");
  c = make_checkpoint(2);
  c.stages[0].optimizers.push_back(c.stages[0].optimizers[0]);
  expect_refused(c, "stored twice");
  // Found while writing: a tensor without data, in the second stage's file.
  c = make_checkpoint(2);
  c.stages[1].weights[0].params.add("sim", Tensor::empty({2}, DType::f32, Device::sim()));
  expect_refused(c, "stage-1.safetensors");
  expect_same(train::read_checkpoint(dir_), make_checkpoint(1));
}

// Runs write_checkpoint(dir, c) in a child process that stops the first time `file` reaches
// `point`, and kills it there with SIGKILL (no destructor, no handler runs).
void kill_writer_at(const fs::path& dir, const train::Checkpoint& c, const std::string& file,
                    AtomicWritePoint point) {
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(ready[0]);
    ::alarm(20);  // never outlive a parent that failed before killing us
    set_atomic_write_hook_for_testing([&](const fs::path& target, AtomicWritePoint at) {
      if (at != point || target.filename() != file) return;
      const char byte = 'x';
      if (::write(ready[1], &byte, 1) != 1) ::_exit(3);
      for (;;) ::pause();
    });
    try {
      train::write_checkpoint(dir, c);
    } catch (...) {
      ::_exit(2);
    }
    ::_exit(0);
  }
  ::close(ready[1]);
  char byte = 0;
  const ssize_t got = ::read(ready[0], &byte, 1);
  ::close(ready[0]);
  ::kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_EQ(got, 1) << "the writer did not reach " << file;
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

TEST_F(CheckpointTest, WriterKilledAtAnyPointLeavesThePreviousCheckpoint) {
  const train::Checkpoint first = make_checkpoint(1);
  const train::Checkpoint second = make_checkpoint(2);
  train::write_checkpoint(dir_, first);
  struct Stop {
    const char* file;
    AtomicWritePoint point;
    bool second_complete;  // the step directory is whole (only `latest` is missing)
  };
  const std::vector<Stop> stops = {
      {"stage-0.safetensors", AtomicWritePoint::wrote_bytes, false},
      {"stage-1.safetensors", AtomicWritePoint::before_rename, false},
      {"stage-1.safetensors", AtomicWritePoint::after_rename, false},
      {"manifest.json", AtomicWritePoint::wrote_bytes, false},
      {"manifest.json", AtomicWritePoint::after_rename, true},
      {"latest", AtomicWritePoint::before_rename, true},
  };
  for (const Stop& stop : stops) {
    SCOPED_TRACE(stop.file + std::string(" at point ") + std::to_string(int(stop.point)));
    kill_writer_at(dir_, second, stop.file, stop.point);
    expect_same(train::read_checkpoint(dir_), first);
    const fs::path partial = dir_ / "step-00000002";
    ASSERT_TRUE(fs::exists(partial));
    if (stop.second_complete) {
      expect_same(train::read_checkpoint(partial), second);
    } else {
      EXPECT_THROW(train::read_checkpoint(partial), train::CheckpointError);
    }
  }
  // The next write succeeds and clears what the killed writers left, a complete step directory
  // that `latest` never named included; its parent (what `latest` named) is kept.
  train::write_checkpoint(dir_, make_checkpoint(3));
  expect_same(train::read_checkpoint(dir_), make_checkpoint(3));
  for (const std::string& entry : tree()) {
    EXPECT_EQ(entry.find(".tmp-"), std::string::npos) << entry;
    EXPECT_FALSE(entry.starts_with("step-00000002")) << entry;
  }
  expect_same(train::read_checkpoint(dir_ / "step-00000001"), first);
}

// Kills a writer that rewrites a large checkpoint in a loop at arbitrary moments (after 0, 1 or
// 2 completed writes, then a delay): whatever `latest` names then reads back whole and
// bit-identical.
TEST_F(CheckpointTest, RandomlyKilledWriterNeverLeavesACorruptCheckpoint) {
  constexpr std::int64_t kWidth = 16384;  // about 4 MB per checkpoint
  const std::vector<train::Checkpoint> versions = {
      make_checkpoint(1, kWidth), make_checkpoint(2, kWidth), make_checkpoint(3, kWidth)};
  train::write_checkpoint(dir_, versions[0]);
  int kills = 0;
  const int delays_us[] = {300, 1700, 4100, 9000, 15000, 700};
  for (int round = 0; round < 6; ++round) {
    int written[2];
    ASSERT_EQ(::pipe(written), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::close(written[0]);
      ::alarm(20);
      try {
        for (std::size_t i = 1;; i = i % 2 + 1) {
          train::write_checkpoint(dir_, versions[i]);
          const char byte = 'w';
          if (::write(written[1], &byte, 1) != 1) ::_exit(3);
        }
      } catch (...) {
        ::_exit(2);
      }
    }
    ::close(written[1]);
    for (int done = 0; done < round % 3; ++done) {
      char byte = 0;
      ASSERT_EQ(::read(written[0], &byte, 1), 1) << "the writer stopped";
    }
    std::this_thread::sleep_for(std::chrono::microseconds(delays_us[round]));
    ::kill(child, SIGKILL);
    ::close(written[0]);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the writer failed";
    ++kills;
    const train::Checkpoint back = train::read_checkpoint(dir_);
    ASSERT_TRUE(back.step >= 1 && back.step <= 3);
    expect_same(back, versions[static_cast<std::size_t>(back.step - 1)]);
  }
  EXPECT_EQ(kills, 6);
}

}  // namespace
}  // namespace tandem::apps
