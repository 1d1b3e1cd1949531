// Whole-model files (train/model_file.hpp): `tandem checkpoint export` writes a checkpoint's
// newest weights, read_model_file reads exactly those back (and a few lines of Python read the
// file too), `train.init_from` starts a run under another plan from them, a resume wins over
// it, and files of another model, with a tensor missing, extra or of another shape are refused
// naming the file and the tensor.
#include "train/model_file.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "models/safetensors.hpp"
#include "run_command.hpp"
#include "temp_dir.hpp"
#include "train/checkpoint.hpp"
#include "train/config.hpp"
#include "train/session.hpp"

namespace tandem::train {
namespace {

namespace fs = std::filesystem;
using apps::testing::run_command;
using apps::testing::TempDir;

const std::string kTandem = TANDEM_CLI;
const std::string kModel = "mlp(widths=8-16-16-16-4)";

std::string config(const std::string& pipeline, const std::string& train_extra = "",
                   const std::string& widths = "8, 16, 16, 16, 4") {
  return "model: {name: mlp, widths: [" + widths +
         "]}\n"
         "data: {kind: teacher, samples: 512, seed: 1, hidden: 8}\n"
         "train:\n  minibatch: 16\n  steps: 6\n  optimizer: {kind: adamw, lr: 2.0e-3}\n"
         "  seed: 3\n  log_every: 1\n" +
         train_extra + pipeline;
}

// Stashed weight versions in the checkpoint: "newest" has something to choose from.
const std::string kPipeDream2 =
    "pipeline:\n  schedule: pipedream\n  stages:\n    - {layers: \"0-1\"}\n"
    "    - {layers: \"2-3\"}\n";
const std::string k1F1B3 =
    "pipeline:\n  schedule: 1f1b\n  slices: 2\n  stages:\n    - {layers: \"0\"}\n"
    "    - {layers: \"1\"}\n    - {layers: \"2-3\"}\n";

bool same(const models::ParamSet& a, const models::ParamSet& b) {
  if (a.names() != b.names()) return false;
  for (std::int64_t i = 0; i < a.size(); ++i) {
    if (a[i].shape() != b[i].shape() || a[i].dtype() != b[i].dtype() ||
        std::memcmp(a[i].raw_data(), b[i].raw_data(), a[i].nbytes()) != 0) {
      return false;
    }
  }
  return true;
}

// A 6-step PipeDream run checkpointing every 2 steps (all kept), exported by the CLI.
struct Exported {
  TempDir dir;
  fs::path checkpoints = dir.path() / "ck";
  fs::path file = dir.path() / "model.safetensors";
  models::ParamSet trained;  // Session::params() after the run

  Exported() {
    const Config c = parse_config(config(kPipeDream2), "test.yaml");
    Session session(
        c,
        SessionOptions{.checkpoint_dir = checkpoints, .checkpoint_every = 2, .checkpoint_keep = 0});
    session.run();
    trained = session.params();
    const auto r = run_command(kTandem + " checkpoint export " + checkpoints.string() + " -o " +
                               file.string());
    EXPECT_EQ(r.code, 0) << r.output;
  }
};

std::string read_error(const fs::path& file, const models::Model& model, const std::string& name) {
  try {
    (void)read_model_file(file, model, name);
  } catch (const ModelFileError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ModelFile, ExportHoldsTheCheckpointsNewestWeights) {
  Exported ex;
  const models::Model model = models::Model::build(parse_config(config(""), "t.yaml").model);
  const Checkpoint ck = read_checkpoint(ex.checkpoints);
  ASSERT_EQ(ck.step, 6);
  ASSERT_GT(ck.stages.front().weights.size(), 1u) << "no stashed versions to choose from";
  const models::ParamSet read = read_model_file(ex.file, model, kModel);
  EXPECT_TRUE(same(read, newest_weights(ck)));
  EXPECT_TRUE(same(read, ex.trained));
  EXPECT_EQ(read.names(), model.init_params(0, Device::sim()).names());

  const models::SafetensorsContent raw = models::read_safetensors(ex.file);
  EXPECT_EQ(raw.metadata.at("format"), "tandem-model");
  EXPECT_EQ(raw.metadata.at("model"), kModel);
  EXPECT_EQ(raw.metadata.at("step"), "6");
  EXPECT_EQ(raw.metadata.at("checkpoint"), "step-00000006");

  // A range of layers: exactly those parameters.
  const models::ParamSet middle = read_model_file(ex.file, model, kModel, {1, 3});
  EXPECT_EQ(middle.names(), model.init_params(0, 1, 3, Device::sim()).names());
  EXPECT_TRUE(same(middle, read.subset(middle.names())));
}

// The reader of docs/checkpoints.md, "Whole-model files": the standard library only.
TEST(ModelFile, PythonReadsTheExportedFile) {
  Exported ex;
  const fs::path script = ex.dir.write("read.py", R"(import json, struct, sys
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
    data = f.read()
meta = header.pop("__metadata__")
w = header["2.weight"]
begin, end = w["data_offsets"]
values = struct.unpack(f"<{(end - begin) // 4}f", data[begin:end])
assert len(values) == w["shape"][0] * w["shape"][1] and w["dtype"] == "F32"
print(meta["format"], meta["step"], ",".join(sorted(header)), data[begin:end].hex())
)");
  const auto r = run_command("python3 " + script.string() + " " + ex.file.string());
  ASSERT_EQ(r.code, 0) << r.output;
  std::vector<std::string> names = ex.trained.names();
  std::sort(names.begin(), names.end());
  std::string joined;
  for (const std::string& n : names) joined += (joined.empty() ? "" : ",") + n;
  const Tensor& w = ex.trained.at("2.weight");
  std::string hex;
  const auto* bytes = static_cast<const unsigned char*>(w.raw_data());
  for (std::size_t i = 0; i < w.nbytes(); ++i) {
    static const char* digits = "0123456789abcdef";
    hex += digits[bytes[i] >> 4];
    hex += digits[bytes[i] & 15];
  }
  EXPECT_EQ(r.output, "tandem-model 6 " + joined + " " + hex + "\n");
}

TEST(ModelFile, InitFromStartsAnotherPlanFromTheFile) {
  Exported ex;
  const models::Model model = models::Model::build(parse_config(config(""), "t.yaml").model);
  const models::ParamSet weights = read_model_file(ex.file, model, kModel);
  const std::string init = "  init_from: " + ex.file.string() + "\n";

  Session three(parse_config(config(k1F1B3, init), "test.yaml"));
  EXPECT_EQ(three.plan().stages.size(), 3u);
  EXPECT_TRUE(same(three.params(), weights));
  const TrainSummary a = three.run();

  // The same start on one device: the first minibatch's loss is that of the same weights.
  Session one(parse_config(config("", init), "test.yaml"));
  EXPECT_TRUE(same(one.params(), weights));
  const TrainSummary b = one.run();
  ASSERT_FALSE(a.losses.empty());
  ASSERT_FALSE(b.losses.empty());
  EXPECT_NEAR(a.losses.front(), b.losses.front(), 1e-6 * std::abs(b.losses.front()));

  Session fresh(parse_config(config(k1F1B3), "test.yaml"));
  EXPECT_FALSE(same(fresh.params(), weights));
}

TEST(ModelFile, AResumeWinsOverInitFrom) {
  Exported ex;
  const std::string init = "  init_from: " + ex.file.string() + "\n";
  const fs::path step4 = ex.checkpoints / "step-00000004";
  Session resumed(parse_config(config(kPipeDream2, init), "test.yaml"),
                  SessionOptions{.resume = step4});
  EXPECT_EQ(resumed.first_step(), 4);
  EXPECT_TRUE(same(resumed.params(), newest_weights(read_checkpoint(step4))));
  EXPECT_FALSE(same(resumed.params(), ex.trained));
}

TEST(ModelFile, RefusesAnotherModelNamingBoth) {
  Exported ex;
  const std::string other = "mlp(widths=8-32-16-16-4)";
  const models::Model model =
      models::Model::build(parse_config(config("", "", "8, 32, 16, 16, 4"), "t.yaml").model);
  const std::string e = read_error(ex.file, model, other);
  EXPECT_NE(e.find(ex.file.string()), std::string::npos) << e;
  EXPECT_NE(e.find("model '" + kModel + "'"), std::string::npos) << e;
  EXPECT_NE(e.find("model is '" + other + "'"), std::string::npos) << e;

  // From a config: at train.init_from, with the config's file.
  const Config c = parse_config(
      config("", "  init_from: " + ex.file.string() + "\n", "8, 32, 16, 16, 4"), "test.yaml");
  try {
    at_config(c, [&] { Session s(c); });
    ADD_FAILURE() << "another model's file was accepted";
  } catch (const ConfigError& ce) {
    const std::string what = ce.what();
    EXPECT_NE(what.find("test.yaml"), std::string::npos) << what;
    EXPECT_NE(what.find("train.init_from"), std::string::npos) << what;
    EXPECT_NE(what.find(other), std::string::npos) << what;
  }
}

TEST(ModelFile, RefusesMissingExtraAndMisshapenTensorsNamingThem) {
  Exported ex;
  const models::Model model = models::Model::build(parse_config(config(""), "t.yaml").model);
  const models::ParamSet good = read_model_file(ex.file, model, kModel);
  const ModelFileInfo info{kModel, 6, ""};
  const fs::path bad = ex.dir.path() / "bad.safetensors";

  models::ParamSet missing;
  for (std::int64_t i = 0; i < good.size(); ++i) {
    if (good.name(i) != "1.bias") missing.add(good.name(i), good[i]);
  }
  write_model_file(bad, missing, info);
  std::string e = read_error(bad, model, kModel);
  EXPECT_NE(e.find(bad.string() + ": tensor '1.bias' is missing"), std::string::npos) << e;

  models::ParamSet extra = good.clone();
  extra.add("7.weight", Tensor::zeros({2, 2}));
  write_model_file(bad, extra, info);
  e = read_error(bad, model, kModel);
  EXPECT_NE(e.find("tensor '7.weight' is no parameter of the model"), std::string::npos) << e;

  models::ParamSet misshapen = good.clone();
  misshapen.at("0.weight") = Tensor::zeros({3, 8});
  write_model_file(bad, misshapen, info);
  e = read_error(bad, model, kModel);
  EXPECT_NE(e.find("tensor '0.weight': f32[3, 8], but the model's parameter is f32[16, 8]"),
            std::string::npos)
      << e;

  // A checkpoint's stage file is not a model file.
  const fs::path stage = ex.checkpoints / "step-00000006" / "stage-0.safetensors";
  e = read_error(stage, model, kModel);
  EXPECT_NE(e.find("one stage of a checkpoint"), std::string::npos) << e;
  e = read_error(ex.dir.path() / "absent.safetensors", model, kModel);
  EXPECT_NE(e.find("absent.safetensors"), std::string::npos) << e;
}

// Weights that are not finite are refused where they are read, naming the file, the tensor and
// the element: a model file to start from (init_from, predict), and a checkpoint to resume,
// weights and optimizer state alike. Without the check the run starts and fails at step 1,
// blaming the learning rate.
TEST(ModelFile, NonFiniteWeightsAreRefusedNamingTheFileAndTensor) {
  Exported ex;
  const models::Model model = models::Model::build(parse_config(config(""), "t.yaml").model);
  const models::ParamSet good = read_model_file(ex.file, model, kModel);
  const fs::path bad = ex.dir.path() / "nan.safetensors";
  models::ParamSet nan = good.clone();
  nan.at("1.bias").data<float>()[5] = std::nanf("");
  write_model_file(bad, nan, ModelFileInfo{kModel, 6, ""});
  std::string e = read_error(bad, model, kModel);
  EXPECT_NE(e.find(bad.string() + ": tensor '1.bias' holds nan at element 5 of 16"),
            std::string::npos)
      << e;
  models::ParamSet inf = good.clone();
  inf.at("0.weight").data<float>()[0] = -INFINITY;
  write_model_file(bad, inf, ModelFileInfo{kModel, 6, ""});
  e = read_error(bad, model, kModel);
  EXPECT_NE(e.find("tensor '0.weight' holds -inf at element 0"), std::string::npos) << e;

  // A checkpoint whose weights, or whose optimizer state, hold a NaN: read whole (the format
  // keeps bits), refused by the resume.
  const auto resume_error = [&](const Checkpoint& c, const std::string& name) {
    const fs::path dir = ex.dir.path() / name;
    write_checkpoint(dir, c);
    try {
      Session s(parse_config(config(kPipeDream2), "test.yaml"), SessionOptions{.resume = dir});
    } catch (const CheckpointError& err) {
      return std::string(err.what());
    }
    return std::string("(no error)");
  };
  const Checkpoint read = read_checkpoint(ex.checkpoints / "step-00000004");
  Checkpoint weights = read;
  weights.stages[1].weights.front().params = weights.stages[1].weights.front().params.clone();
  weights.stages[1].weights.front().params.at("2.weight").data<float>()[3] = INFINITY;
  e = resume_error(weights, "ck-weights");
  EXPECT_NE(e.find("stage-1.safetensors: tensor 'weights/r0/v"), std::string::npos) << e;
  EXPECT_NE(e.find("2.weight' holds inf at element 3"), std::string::npos) << e;
  Checkpoint state = read;
  ASSERT_FALSE(state.stages[0].optimizers.empty());
  models::ParamSet& moments = state.stages[0].optimizers.front().state;
  moments = moments.clone();
  ASSERT_GT(moments.size(), 0);
  moments[0].data<float>()[0] = std::nanf("");
  e = resume_error(state, "ck-state");
  EXPECT_NE(e.find("stage-0.safetensors: tensor 'optimizer/r0/" + moments.name(0) + "' holds nan"),
            std::string::npos)
      << e;
}

TEST(ModelFile, ConfigRefusesADirectoryAtItsLine) {
  TempDir dir;
  try {
    (void)parse_config(config("", "  init_from: " + dir.path().string() + "\n"), "test.yaml");
    ADD_FAILURE() << "a directory was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("test.yaml:9:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tandem::train
