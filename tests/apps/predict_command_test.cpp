// `tandem predict CONFIG --weights W --input F -o OUT` end to end: from a finished checkpoint and
// from an exported whole-model file, the outputs are the evaluation forward's on those weights;
// hostile input files are refused with one error line naming the file and the tensor.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "models/model.hpp"
#include "models/safetensors.hpp"
#include "run_command.hpp"
#include "temp_dir.hpp"
#include "train/config.hpp"

namespace tandem::apps {
namespace {

using Result = testing::CommandResult;
namespace fs = std::filesystem;

Result tandem(const std::string& args) {
  return testing::run_command(std::string(TANDEM_CLI) + " " + args);
}

const char* kConfig = R"(model:
  input: {name: x, shape: [6]}
  graph:
    - {name: h0, layer: linear, out: 8, activation: relu}
    - {name: h1, layer: linear, out: 8}
    - {name: r, layer: add, inputs: [h1, h0]}
    - {name: out, layer: linear, out: 3}
data: {kind: teacher, samples: 512, seed: 1, hidden: 8}
train:
  minibatch: 16
  steps: 6
  optimizer: {kind: sgd, lr: 0.1}
  seed: 2
pipeline:
  schedule: gpipe
  slices: 2
  stages:
    - {layers: "0-1"}
    - {layers: "2-3"}
)";

void write_input(const fs::path& path, const std::string& name, const Tensor& t) {
  models::ParamSet p;
  p.add(name, t);
  models::write_safetensors(path, p);
}

Tensor rows(std::int64_t n, std::int64_t width) {
  std::vector<float> v(static_cast<std::size_t>(n * width));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 13) % 11) / 5.0f - 1;
  return Tensor::from_vector(v, {n, width});
}

TEST(PredictCommand, CheckpointAndExportedFileGiveTheEvaluationForward) {
  testing::TempDir dir;
  const fs::path config = dir.write("g.yaml", kConfig);
  const fs::path ckpt = dir.path() / "ckpt";
  const Result train =
      tandem("train " + config.string() + " --checkpoint " + ckpt.string() + " --quiet");
  ASSERT_EQ(train.code, 0) << train.output;
  const Tensor x = rows(5, 6);
  write_input(dir.path() / "in.safetensors", "input", x);
  const fs::path out1 = dir.path() / "out1.safetensors";
  const Result p1 =
      tandem("predict " + config.string() + " --weights " + ckpt.string() + " --input " +
             (dir.path() / "in.safetensors").string() + " -o " + out1.string());
  ASSERT_EQ(p1.code, 0) << p1.output;
  const fs::path exported = dir.path() / "model.safetensors";
  const Result ex = tandem("checkpoint export " + ckpt.string() + " -o " + exported.string());
  ASSERT_EQ(ex.code, 0) << ex.output;
  const fs::path out2 = dir.path() / "out2.safetensors";
  const Result p2 =
      tandem("predict " + config.string() + " --weights " + exported.string() + " --input " +
             (dir.path() / "in.safetensors").string() + " -o " + out2.string());
  ASSERT_EQ(p2.code, 0) << p2.output;

  const Tensor y1 = models::read_safetensors(out1).tensors.at("output");
  const Tensor y2 = models::read_safetensors(out2).tensors.at("output");
  EXPECT_EQ(y1.shape(), (Shape{5, 3}));
  EXPECT_EQ(y1.to_float_vector(), y2.to_float_vector());
  // The evaluation forward on the exported weights, on one device.
  const train::Config c = train::load_config(config);
  const models::Model model = models::Model::build(c.model);
  const models::ParamSet w = models::read_safetensors(exported).tensors;
  models::Context ctx;
  ctx.training = false;
  ctx.keep_saved = false;
  const Tensor want = model.forward(ctx, w, x, 0, model.num_layers()).y;
  EXPECT_EQ(y1.to_float_vector(), want.to_float_vector());
}

TEST(PredictCommand, HostileInputsAreRefusedNamingFileAndTensor) {
  testing::TempDir dir;
  const fs::path config = dir.write("g.yaml", kConfig);
  const fs::path ckpt = dir.path() / "ckpt";
  ASSERT_EQ(tandem("train " + config.string() + " --checkpoint " + ckpt.string() + " --quiet").code,
            0);
  auto predict = [&](const fs::path& input) {
    return tandem("predict " + config.string() + " --weights " + ckpt.string() + " --input " +
                  input.string() + " -o " + (dir.path() / "out.safetensors").string());
  };
  auto refused = [&](const fs::path& input, const std::string& words) {
    const Result r = predict(input);
    EXPECT_NE(r.code, 0) << input;
    EXPECT_NE(r.output.find("tandem: error:"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(words), std::string::npos) << words << " not in: " << r.output;
  };
  const fs::path wrong_name = dir.path() / "wrong_name.safetensors";
  write_input(wrong_name, "x", rows(2, 6));
  refused(wrong_name, "input");
  const fs::path wrong_shape = dir.path() / "wrong_shape.safetensors";
  write_input(wrong_shape, "input", rows(2, 7));
  refused(wrong_shape, "[2, 7]");
  const fs::path wrong_dtype = dir.path() / "wrong_dtype.safetensors";
  write_input(wrong_dtype, "input", Tensor::zeros({2, 6}, DType::i32));
  refused(wrong_dtype, "i32");
  const fs::path garbage = dir.write("garbage.safetensors", "\xff\xff\xff\xff\xff\xff\xff\x7f{}");
  refused(garbage, garbage.string());
  refused(dir.path(), dir.path().string());  // a directory
  refused(dir.path() / "missing.safetensors", "missing.safetensors");
  // Two tensors: the input and a stranger.
  models::ParamSet two;
  two.add("input", rows(2, 6));
  two.add("extra", rows(2, 6));
  const fs::path extra = dir.path() / "extra.safetensors";
  models::write_safetensors(extra, two);
  refused(extra, "extra");
  // Weights that are not there.
  const Result no_weights =
      tandem("predict " + config.string() + " --weights " + (dir.path() / "none").string() +
             " --input " + wrong_name.string() + " -o " + (dir.path() / "o").string());
  EXPECT_NE(no_weights.code, 0);
  EXPECT_NE(no_weights.output.find("none"), std::string::npos) << no_weights.output;
}

}  // namespace
}  // namespace tandem::apps
