// Losses other than cross-entropy through `tandem train`: a regression config learns its
// teacher under mse and reports no accuracy, and a loss whose targets the data does not give is
// refused with one error line at the config's key.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "run_command.hpp"

namespace tandem::apps {
namespace {

using Result = testing::CommandResult;

Result tandem(const std::string& args) {
  return testing::run_command(std::string(TANDEM_CLI) + " " + args);
}

const std::string kSource = TANDEM_SOURCE_DIR;

// The loss of every progress line ("step  50/400  loss 0.1234 ...").
std::vector<double> losses(const std::string& output) {
  std::vector<double> out;
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    const auto at = line.find("  loss ");
    if (line.rfind("step ", 0) != 0 || at == std::string::npos) continue;
    out.push_back(std::stod(line.substr(at + 7)));
  }
  return out;
}

TEST(Regression, MseLearnsTheTeacherThroughTandemTrain) {
  const Result r = tandem("train " + kSource + "/configs/mlp-regression.yaml");
  ASSERT_EQ(r.code, 0) << r.output;
  const std::vector<double> l = losses(r.output);
  ASSERT_GE(l.size(), 4u) << r.output;
  EXPECT_LT(l.back(), 0.2 * l.front()) << r.output;
  // A regression has no accuracy: neither the progress lines nor the summary show one.
  EXPECT_EQ(r.output.find("acc"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("held-out loss"), std::string::npos) << r.output;
}

std::filesystem::path write_config(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("tandem_loss_" + name + "_" + std::to_string(::getpid()) + ".yaml");
  std::ofstream(path) << text;
  return path;
}

TEST(Regression, LossesWhoseTargetsTheDataDoesNotGiveAreRefusedAtTheConfig) {
  const std::string train = "train: {minibatch: 8, steps: 1, optimizer: {kind: sgd, lr: 0.1}}\n";
  for (const auto& [name, text, words] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"mse_ids",
            "model: {name: mlp, widths: [8, 4], loss: mse}\ndata: {kind: teacher, samples: 64}\n" +
                train,
            "data 'teacher' gives i32 targets, the model's loss 'mse' takes f32"},
           {"ce_f32",
            "model: {name: mlp, widths: [8, 4]}\ndata: {kind: teacher-regression, samples: 64}\n" +
                train,
            "data 'teacher-regression' gives f32 targets, the model's loss 'cross_entropy' takes "
            "i32"},
           {"unknown",
            "model: {name: mlp, widths: [8, 4], loss: hinge}\ndata: {kind: teacher}\n" + train,
            "loss 'hinge': expected cross_entropy, mse or bce_with_logits"},
           {"outputs",
            "model: {name: mlp, widths: [8, 4], loss: mse}\n"
            "data: {kind: teacher-regression, outputs: 3}\n" +
                train,
            "outputs: must equal the model's output width 4, got 3"}}) {
    const auto path = write_config(name, text);
    const Result r = tandem("train --dry-run " + path.string());
    std::filesystem::remove(path);
    EXPECT_EQ(r.code, 1) << name << "\n" << r.output;
    // file:line:col of the key at fault
    EXPECT_EQ(r.output.rfind("tandem: error: " + path.string() + ":", 0), 0u) << name << "\n"
                                                                              << r.output;
    EXPECT_NE(r.output.find(words), std::string::npos) << name << "\n" << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << name << "\n" << r.output;
  }
}

}  // namespace
}  // namespace tandem::apps
