// tandem::Session from a YAML config: the CLI's job through the embedding API. The same
// losses and weights as `tandem train` bit for bit, checkpoints that either front end resumes,
// and a job of two processes started the way a launcher starts them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <tandem/tandem.hpp>
#include <thread>
#include <utility>
#include <vector>

#include "../train/temp_dir.hpp"
#include "free_port.hpp"
#include "weights_digest.hpp"

namespace tandem {
namespace {

namespace fs = std::filesystem;
using api_test::free_port;
using apps::testing::TempDir;

const std::string kModel =
    "model: {name: mlp, widths: [8, 32, 32, 32, 4]}\n"
    "data: {kind: teacher, samples: 2048, seed: 1, hidden: 8}\n"
    "train:\n  minibatch: 32\n  steps: 8\n  optimizer: {kind: adamw, lr: 2.0e-3}\n"
    "  lr_schedule: {kind: cosine, warmup_steps: 2}\n  seed: 4\n  log_every: 1\n"
    "  eval: {samples: 256}\n";
// A flush schedule, and PipeDream with a replicated stage (2-1-1).
const std::string kFlush = kModel +
                           "pipeline:\n  schedule: 1f1b\n  slices: 4\n  stages:\n"
                           "    - {layers: \"0-1\"}\n    - {layers: \"2-3\"}\n";
const std::string kPipeDream = kModel +
                               "pipeline:\n  schedule: pipedream\n  stages:\n"
                               "    - {layers: \"0-1\", replicas: 2}\n    - {layers: \"2\"}\n"
                               "    - {layers: \"3\"}\n";

struct RunFigures {
  std::vector<double> losses;  // from first
  std::int64_t first = 0;
  std::string fingerprint;  // 16 hex digits
  bool has_eval = false;
  double eval = 0;
  std::map<std::int64_t, double> evals;  // held-out loss by step, during the run
  std::string weights;                   // weights_digest() of Session::weights()
};

std::string hex(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

RunFigures api_run(const fs::path& config, ConfigRunOptions options = {}) {
  Session session(config.string(), std::move(options));
  const TrainResult r = session.run();
  EXPECT_EQ(r.minibatches, static_cast<std::int64_t>(r.losses.size()));
  EXPECT_FALSE(session.weights().empty());
  return {r.losses, r.first_minibatch, hex(r.weights_fingerprint), r.has_eval, r.eval.loss};
}

std::string run_command(const std::string& command, int* code = nullptr) {
  std::string out;
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
  const int status = ::pclose(p);
  if (code != nullptr) *code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

// `tandem train CONFIG ARGS`: its per-step losses (log_every 1: each record is one step) from
// the metrics file, and the fingerprint it prints.
RunFigures cli_run(const fs::path& config, const fs::path& metrics, const std::string& args = "") {
  int code = 0;
  const std::string out =
      run_command(std::string(TANDEM_CLI) + " train " + config.string() +
                      " --quiet --metrics-json " + metrics.string() + " " + args,
                  &code);
  EXPECT_EQ(code, 0) << out;
  RunFigures r;
  const auto at = out.find("parameters fingerprint ");
  if (at != std::string::npos) r.fingerprint = out.substr(at + 23, 16);
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    const auto l = line.find("\"loss\":");
    if (l != std::string::npos) r.losses.push_back(std::stod(line.substr(l + 7)));
  }
  return r;
}

// Losses as the summaries keep them (f32 per step).
std::vector<float> as_f32(const std::vector<double>& v) {
  return {v.begin(), v.end()};
}

class ConfigSession : public ::testing::TestWithParam<const std::string*> {};

TEST_P(ConfigSession, TrainsAsTheCliBitForBit) {
  TempDir dir;
  const fs::path config = dir.write("c.yaml", *GetParam());
  const RunFigures api = api_run(config);
  const RunFigures cli = cli_run(config, dir.path() / "m.jsonl");
  ASSERT_EQ(api.losses.size(), 8u);
  EXPECT_EQ(as_f32(api.losses), as_f32(cli.losses));
  EXPECT_EQ(api.fingerprint, cli.fingerprint);
  EXPECT_TRUE(api.has_eval);
}

// The run of 8 steps checkpoints at step 4 (and 8); a session resumed from the step-4 checkpoint
// trains the last 4 exactly as the whole run did.
TEST_P(ConfigSession, ACheckpointThenAResumeIsTheWholeRun) {
  TempDir dir;
  const fs::path config = dir.write("c.yaml", *GetParam());
  const RunFigures whole = api_run(config);
  ConfigRunOptions first;
  first.checkpoints = {(dir.path() / "ck").string(), 4, 2};
  Session a(config.string(), first);
  const TrainResult ra = a.run();
  ASSERT_EQ(ra.checkpoints.size(), 2u);
  EXPECT_EQ(ra.losses, whole.losses);  // checkpointing changes nothing
  ConfigRunOptions rest;
  rest.resume = ra.checkpoints.front();
  const RunFigures b = api_run(config, rest);
  EXPECT_EQ(b.first, 4);
  EXPECT_EQ(b.losses, std::vector<double>(whole.losses.begin() + 4, whole.losses.end()));
  EXPECT_EQ(b.fingerprint, whole.fingerprint);
}

// A checkpoint at step 4 written by one front end, resumed by the other: the whole run's weights.
TEST_P(ConfigSession, CheckpointsMoveBetweenTheApiAndTheCli) {
  TempDir dir;
  const fs::path config = dir.write("c.yaml", *GetParam());
  const RunFigures whole = api_run(config);
  // The API writes, the CLI resumes.
  ConfigRunOptions first;
  first.checkpoints = {(dir.path() / "api").string(), 4, 2};
  const TrainResult ra = Session(config.string(), first).run();
  ASSERT_EQ(ra.checkpoints.size(), 2u);
  const RunFigures cli =
      cli_run(config, dir.path() / "m1.jsonl", "--resume " + ra.checkpoints.front());
  EXPECT_EQ(cli.fingerprint, whole.fingerprint);
  EXPECT_EQ(as_f32(cli.losses),
            as_f32(std::vector<double>(whole.losses.begin() + 4, whole.losses.end())));
  // The CLI writes, the API resumes.
  const fs::path cli_dir = dir.path() / "cli";
  (void)cli_run(config, dir.path() / "m2.jsonl",
                "--checkpoint " + cli_dir.string() + " --checkpoint-every 4");
  std::vector<fs::path> steps;
  for (const auto& e : fs::directory_iterator(cli_dir)) {
    if (e.is_directory()) steps.push_back(e.path());
  }
  std::sort(steps.begin(), steps.end());
  ASSERT_EQ(steps.size(), 2u);
  ConfigRunOptions rest;
  rest.resume = steps.front().string();
  const RunFigures api = api_run(config, rest);
  EXPECT_EQ(api.first, 4);
  EXPECT_EQ(api.fingerprint, whole.fingerprint);
}

// The same job built in code: the zoo's MLP, the plan written out, the config's own data
// (config_data) and the same optimizer and seed train the config's losses, weights and
// held-out figures bit for bit.
TEST_P(ConfigSession, TheSameJobBuiltInCodeTrainsAsTheConfig) {
  TempDir dir;
  std::string text = *GetParam();
  const std::string cosine = "  lr_schedule: {kind: cosine, warmup_steps: 2}\n";
  text.erase(text.find(cosine), cosine.size());  // the code's learning rate is constant
  const fs::path config = dir.write("c.yaml", text);
  Session from_config(config.string());
  const TrainResult a = from_config.run();

  const ConfigData cd = config_data(config.string());
  TrainOptions o;
  if (GetParam() == &kFlush) {
    o.plan.stages = {{0, 2, {tandem::Device::cpu()}}, {2, 4, {tandem::Device::cpu()}}};
    o.plan.schedule = Schedule::one_f_one_b;
    o.plan.slices = 4;
  } else {
    o.plan.stages = {{0, 2, {tandem::Device::cpu(), tandem::Device::cpu()}},
                     {2, 3, {tandem::Device::cpu()}},
                     {3, 4, {tandem::Device::cpu()}}};
    o.plan.schedule = Schedule::pipedream;
  }
  o.plan.minibatch = cd.minibatch;
  o.minibatches = 8;
  o.optimizer = tandem::AdamWOptions{.lr = 2.0e-3};
  o.seed = 4;
  o.data = cd.data;
  o.eval_data = cd.eval;
  o.eval_minibatches = cd.eval_minibatches;
  Session in_code(Model::mlp({8, 32, 32, 32, 4}), o);
  const TrainResult b = in_code.run();
  EXPECT_EQ(b.losses, a.losses);
  EXPECT_EQ(b.weights_fingerprint, a.weights_fingerprint);
  ASSERT_TRUE(a.has_eval && b.has_eval);
  EXPECT_EQ(b.eval.loss, a.eval.loss);
  EXPECT_EQ(b.eval.accuracy, a.eval.accuracy);
}

// Every option a config's job has, set in code: the two train alike bit for bit.
TEST(CodeJobTwin, EveryOptionOfAConfigSetInCodeTrainsAsItsYamlTwin) {
  TempDir dir;
  const fs::path config = dir.write(
      "twin.yaml",
      "model: {name: mlp, widths: [8, 32, 32, 32, 4]}\n"
      "data: {kind: teacher, samples: 2048, seed: 1, hidden: 8}\n"
      "train:\n  minibatch: 32\n  steps: 6\n  accumulate: 2\n  clip_grad_norm: 0.5\n"
      "  precision: bf16\n"
      "  optimizer: {kind: adamw, lr: 3.0e-3, betas: [0.8, 0.95], eps: 1.0e-6, "
      "weight_decay: 0.01}\n"
      "  lr_schedule: {kind: cosine, warmup_steps: 2, final_fraction: 0.1}\n"
      "  seed: 9\n  log_every: 2\n"
      "pipeline:\n  schedule: umpipe\n  slices:\n"
      "    - {forward: [8, 24], backward: [16, 16]}\n"
      "    - {forward: [16, 16], backward: [8, 8, 16]}\n"
      "  stages:\n    - {layers: \"0-1\", ranks: [0]}\n    - {layers: \"2-3\", ranks: [0]}\n"
      "cluster: {transport: tcp, collectives: gloo, tcp_lanes: 3, stall_timeout: 60, "
      "max_replans: 1}\n");
  std::vector<Progress> yaml_progress, code_progress;
  ConfigRunOptions co;
  co.on_progress = [&](const Progress& p) { yaml_progress.push_back(p); };
  Session from_config(config.string(), co);
  const TrainResult a = from_config.run();

  const ConfigData cd = config_data(config.string());
  TrainOptions o;
  o.plan.stages = {{0, 2, {Device::cpu()}, {0}}, {2, 4, {Device::cpu()}, {0}}};
  o.plan.schedule = Schedule::umpipe;
  o.plan.compositions = {{{8, 24}, {16, 16}}, {{16, 16}, {8, 8, 16}}};
  o.plan.minibatch = cd.minibatch;
  o.minibatches = 6;
  o.accumulate = 2;
  o.clip_grad_norm = 0.5;
  o.precision = Precision::bf16;
  o.optimizer =
      AdamWOptions{.lr = 3.0e-3, .beta1 = 0.8, .beta2 = 0.95, .eps = 1.0e-6, .weight_decay = 0.01};
  o.lr_schedule = {LrSchedule::Kind::cosine, 2, 0.1};
  o.seed = 9;
  o.log_every = 2;
  o.cluster.transport = ClusterOptions::Transport::tcp;
  o.cluster.collectives = ClusterOptions::Collectives::gloo;
  o.cluster.tcp_lanes = 3;
  o.cluster.stall_timeout_s = 60;
  o.cluster.max_replans = 1;
  o.data = cd.data;
  o.on_progress = [&](const Progress& p) { code_progress.push_back(p); };
  Session in_code(Model::mlp({8, 32, 32, 32, 4}), o);
  const TrainResult b = in_code.run();
  ASSERT_EQ(a.losses.size(), 6u);
  EXPECT_EQ(b.losses, a.losses);
  EXPECT_EQ(b.weights_fingerprint, a.weights_fingerprint);
  ASSERT_EQ(code_progress.size(), yaml_progress.size());
  for (std::size_t i = 0; i < code_progress.size(); ++i) {
    EXPECT_EQ(code_progress[i].lr, yaml_progress[i].lr) << i;  // the cosine schedule's
    EXPECT_EQ(code_progress[i].grad_norm, yaml_progress[i].grad_norm) << i;
    EXPECT_TRUE(code_progress[i].has_grad_norm) << i;
  }
}

// The option a Session of a 2-stage MLP under `schedule` refuses once `edit` changed its
// options ("accepted" when it takes them), checking that the refusal's code is `code`.
std::string refused_key(Schedule schedule, int slices, ErrorCode code, const DataFn& data,
                        const std::function<void(TrainOptions&)>& edit) {
  TrainOptions o;
  o.plan = Plan::split_evenly(Model::mlp({8, 32, 32, 32, 4}), 2, schedule, 32, slices);
  o.minibatches = 2;
  o.data = data;
  edit(o);
  try {
    Session s(Model::mlp({8, 32, 32, 32, 4}), o);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    return e.where().key;
  }
  return "accepted";
}

// `schedule: auto` and Schedule::automatic: one ranking chooses for both front ends (the same
// pick, slices and chunks), and the two runs are bit-identical; TrainResult says what ran.
TEST(CodeJobTwin, AnAutomaticScheduleInCodeChoosesAsTheConfigsAuto) {
  for (const bool async : {false, true}) {
    SCOPED_TRACE(async ? "allow_async" : "synchronous only");
    TempDir dir;
    const fs::path config = dir.write(
        "auto.yaml",
        std::string("model: {name: mlp, widths: [8, 32, 32, 32, 4]}\n"
                    "data: {kind: teacher, samples: 2048, seed: 1, hidden: 8}\n"
                    "train: {minibatch: 32, steps: 4, seed: 3, optimizer: {kind: sgd, lr: 0.05}}\n"
                    "pipeline:\n  schedule: auto\n") +
            (async ? "  allow_async: true\n" : "") +
            "  stages:\n    - {layers: \"0-1\"}\n    - {layers: \"2-3\"}\n");
    const TrainResult a = Session(config.string()).run();
    EXPECT_NE(a.schedule, Schedule::automatic);

    const ConfigData cd = config_data(config.string());
    TrainOptions o;
    o.plan = Plan::split_evenly(Model::mlp({8, 32, 32, 32, 4}), 2, Schedule::automatic, 32);
    o.plan.allow_async = async;
    o.minibatches = 4;
    o.optimizer = SgdOptions{.lr = 0.05};
    o.seed = 3;
    o.data = cd.data;
    const TrainResult b = Session(Model::mlp({8, 32, 32, 32, 4}), o).run();
    EXPECT_EQ(b.schedule, a.schedule) << to_string(a.schedule) << " vs " << to_string(b.schedule);
    EXPECT_EQ(b.slices, a.slices);
    if (!async) {  // a flush schedule over slices of the minibatch
      EXPECT_NE(b.schedule, Schedule::pipedream);
      EXPECT_NE(b.schedule, Schedule::pipedream_vsync);
      EXPECT_NE(b.schedule, Schedule::pipedream_2bw);
      EXPECT_GT(b.slices, 1);
    }
    EXPECT_EQ(b.losses, a.losses);
    EXPECT_EQ(b.weights_fingerprint, a.weights_fingerprint);
  }
}

// What Schedule::automatic chooses itself is refused when fixed, and allow_async without it.
TEST(CodeJobTwin, AnAutomaticScheduleRefusesTheFieldsItChooses) {
  const ConfigData cd = config_data(Config::text(kFlush));
  const auto refused = [&](const std::function<void(TrainOptions&)>& edit) {
    return refused_key(Schedule::automatic, 1, ErrorCode::plan, cd.data, edit);
  };
  EXPECT_EQ(refused([](TrainOptions&) {}), "accepted");
  EXPECT_EQ(refused([](TrainOptions& o) { o.plan.chunks = 2; }), "plan.chunks");
  EXPECT_EQ(refused([](TrainOptions& o) { o.plan.rematerialize = true; }), "plan.rematerialize");
  EXPECT_EQ(refused([](TrainOptions& o) {
              o.plan.compositions = {{{32}, {32}}, {{32}, {32}}};
            }),
            "plan.compositions");
  EXPECT_EQ(refused([](TrainOptions& o) {
              o.plan.schedule = Schedule::gpipe;
              o.plan.allow_async = true;
            }),
            "plan.allow_async");
  EXPECT_EQ(to_string(Schedule::automatic), "auto");
}

// The rules a config's keys meet hold for the same options set in code, named as options.
TEST(CodeJobTwin, OptionsBreakingAConfigsRulesAreRefusedByName) {
  const ConfigData cd = config_data(Config::text(kFlush));
  const auto refused = [&](const std::function<void(TrainOptions&)>& edit) {
    return refused_key(Schedule::one_f_one_b, 2, ErrorCode::config, cd.data, edit);
  };
  EXPECT_EQ(refused([](TrainOptions& o) { o.cluster.tcp_lanes = 9; }),
            "TrainOptions.cluster.tcp_lanes");
  EXPECT_EQ(refused([](TrainOptions& o) { o.cluster.stall_timeout_s = 0.1; }),
            "TrainOptions.cluster.stall_timeout_s");
  EXPECT_EQ(refused([](TrainOptions& o) { o.cluster.max_replans = -1; }),
            "TrainOptions.cluster.max_replans");
  EXPECT_EQ(refused([](TrainOptions& o) { o.lr_schedule.final_fraction = 1.5; }),
            "TrainOptions.lr_schedule.final_fraction");
  EXPECT_EQ(refused([](TrainOptions& o) { o.lr_schedule.warmup_steps = -2; }),
            "TrainOptions.lr_schedule.warmup_steps");
  EXPECT_EQ(refused([](TrainOptions& o) { o.optimizer = SgdOptions{.lr = 0.1, .nesterov = true}; }),
            "TrainOptions.optimizer.nesterov");
  EXPECT_EQ(refused([](TrainOptions& o) {
              o.optimizer = AdamWOptions{.eps = std::numeric_limits<double>::quiet_NaN()};
            }),
            "TrainOptions.optimizer.eps");
  EXPECT_EQ(refused([](TrainOptions& o) {
              o.plan.schedule = Schedule::umpipe;
              o.plan.compositions = {{{16, 8}, {32}}, {{32}, {32}}};
            }),
            "TrainOptions.plan.slices[0].forward");
  // The memory check a config's job meets (train/memory_check.hpp), before any allocation.
  EXPECT_EQ(refused([](TrainOptions& o) { o.plan.minibatch = std::int64_t{1} << 40; }),
            "TrainOptions.plan.minibatch");
  TrainOptions huge;
  huge.plan = Plan::split_evenly(Model::mlp({8, 32, 32, 32, 4}), 2, Schedule::one_f_one_b,
                                 std::int64_t{1} << 40, 2);
  huge.minibatches = 2;
  huge.data = cd.data;
  try {
    Session s(Model::mlp({8, 32, 32, 32, 4}), huge);
    ADD_FAILURE() << "a minibatch of 2^40 samples was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("activations of a minibatch"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("of memory"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Schedules, ConfigSession, ::testing::Values(&kFlush, &kPipeDream),
                         [](const auto& p) {
                           return p.param == &kFlush ? std::string("flush_1f1b")
                                                     : std::string("pipedream_2_1_1");
                         });

// kFlush with three keys edited in its text: what the overrides below must equal.
std::string edited_flush() {
  std::string text = kFlush;
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"steps: 8", "steps: 6"}, {"slices: 4", "slices: 2"}, {"lr: 2.0e-3", "lr: 1.0e-3"}}) {
    const auto at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
  }
  return text;
}

TEST(ConfigText, TextWithOverridesTrainsAsTheEditedFileBitForBit) {
  TempDir dir;
  const RunFigures file = api_run(dir.write("edited.yaml", edited_flush()));
  Config config = Config::text(kFlush, "flush text");
  config.set("train.steps", 6).set("pipeline.slices", "2").set("train.optimizer.lr", 1.0e-3);
  Session session(config);
  const TrainResult r = session.run();
  ASSERT_EQ(r.losses.size(), 6u);
  EXPECT_EQ(as_f32(r.losses), as_f32(file.losses));
  EXPECT_EQ(hex(r.weights_fingerprint), file.fingerprint);
  // The CLI's --set is the same overrides.
  const RunFigures cli =
      cli_run(dir.write("flush.yaml", kFlush), dir.path() / "m.jsonl",
              "--set train.steps=6 --set pipeline.slices=2 --set train.optimizer.lr=1.0e-3");
  EXPECT_EQ(cli.fingerprint, file.fingerprint);
  EXPECT_EQ(as_f32(cli.losses), as_f32(file.losses));
}

TEST(ConfigText, AnOverrideProblemNamesTheOverrideAndItsKey) {
  try {
    Session session(Config::text(kFlush).set("train.steps", 0));
    ADD_FAILURE() << "no error";
  } catch (const tandem::Error& e) {
    EXPECT_EQ(e.code(), tandem::ErrorCode::config) << e.what();
    EXPECT_EQ(e.where().key, "train.steps") << e.what();
    EXPECT_NE(std::string(e.what()).find("override train.steps:1:1"), std::string::npos)
        << e.what();
  }
  try {
    Session session(Config::text(kFlush).set("pipeline.stages[5].replicas", 2));
    ADD_FAILURE() << "no error";
  } catch (const tandem::Error& e) {
    EXPECT_EQ(e.code(), tandem::ErrorCode::config) << e.what();
    EXPECT_NE(std::string(e.what()).find("pipeline.stages has 2 items"), std::string::npos)
        << e.what();
  }
  // A problem in the text itself is at the text's name and line.
  try {
    Session session(Config::text("model: {name: mlp}\n", "inline"));
    ADD_FAILURE() << "no error";
  } catch (const tandem::Error& e) {
    EXPECT_EQ(e.code(), tandem::ErrorCode::config) << e.what();
    EXPECT_NE(std::string(e.what()).find("inline:1:"), std::string::npos) << e.what();
  }
}

TEST(ConfigSessionErrors, AConfigProblemNamesItsLineAndKey) {
  TempDir dir;
  const fs::path config = dir.write("bad.yaml", kModel +
                                                    "pipeline:\n  schedule: warp\n"
                                                    "  stages:\n    - {layers: \"0-3\"}\n");
  try {
    Session session(config.string());
    ADD_FAILURE() << "no error";
  } catch (const tandem::Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.code(), tandem::ErrorCode::config) << what;
    EXPECT_EQ(e.where().key, "pipeline.schedule") << what;
    EXPECT_NE(what.find("bad.yaml:12:"), std::string::npos) << what;
    EXPECT_NE(what.find("pipeline.schedule"), std::string::npos) << what;
  }
  ConfigRunOptions o;
  o.resume = (dir.path() / "nowhere").string();
  const fs::path good = dir.write("good.yaml", kFlush);
  try {
    Session session(good.string(), o);
    ADD_FAILURE() << "resumed from nowhere";
  } catch (const tandem::Error& e) {
    EXPECT_EQ(e.code(), tandem::ErrorCode::checkpoint) << e.what();
    EXPECT_EQ(e.where().key, "ConfigRunOptions.resume") << e.what();
  }
}

// config_runner's lines into a RunFigures.
RunFigures parse_runner(const std::string& out) {
  RunFigures r;
  std::istringstream in(out);
  for (std::string word; in >> word;) {
    if (word == "loss") {
      std::int64_t b = 0;
      std::string v;
      in >> b >> v;
      r.losses.push_back(std::strtod(v.c_str(), nullptr));
    } else if (word == "eval_at") {
      std::int64_t step = 0;
      std::string v;
      in >> step >> v;
      r.evals[step] = std::strtod(v.c_str(), nullptr);
    } else if (word == "eval") {
      std::string v;
      in >> v;
      r.has_eval = true;
      r.eval = std::strtod(v.c_str(), nullptr);
    } else if (word == "fingerprint") {
      in >> r.fingerprint;
    } else if (word == "weights") {
      std::getline(in, r.weights);
      if (!r.weights.empty() && r.weights[0] == ' ') r.weights.erase(0, 1);
    }
  }
  return r;
}

// Two processes of an application that embeds Tandem, started with a launcher's variables:
// rank 0 reports the job, which trains exactly as one process does, held-out evaluations every
// 3 steps included.
TEST(ConfigSessionJob, TwoProcessesTrainAsOne) {
  TempDir dir;
  std::string text = kPipeDream;
  text.replace(text.find("eval: {samples: 256}"), 20, "eval: {samples: 256, every: 3}");
  const fs::path config = dir.write("c.yaml", text);
  RunFigures alone;
  {
    ConfigRunOptions o;
    o.on_progress = [&](const Progress& p) {
      if (p.has_eval) alone.evals[p.step] = p.eval.loss;
    };
    Session session(config.string(), o);
    const TrainResult r = session.run();
    alone.losses = r.losses;
    alone.fingerprint = hex(r.weights_fingerprint);
    alone.weights = api_test::weights_digest(session.weights());
    alone.has_eval = r.has_eval;
    alone.eval = r.eval.loss;
  }
  ASSERT_EQ(alone.evals.size(), 3u);  // steps 3, 6 and the last (8)
  const std::string env =
      "TANDEM_WORLD_SIZE=2 TANDEM_MASTER=127.0.0.1:" + std::to_string(free_port()) +
      " TANDEM_JOB_TOKEN=api-test-token ";
  const fs::path out0 = dir.path() / "rank0.out", out1 = dir.path() / "rank1.out";
  const std::string runner = std::string(TANDEM_CONFIG_RUNNER) + " " + config.string();
  int code = 0;
  const std::string shell =
      run_command("timeout 120 sh -c '" + env + "TANDEM_RANK=1 " + runner + " > " + out1.string() +
                      " 2>&1 & " + env + "TANDEM_RANK=0 " + runner + " > " + out0.string() +
                      " 2>&1; r0=$?; wait $!; r1=$?; exit $((r0 + r1))'",
                  &code);
  std::ifstream f0(out0), f1(out1);
  const std::string o0((std::istreambuf_iterator<char>(f0)), std::istreambuf_iterator<char>());
  const std::string o1((std::istreambuf_iterator<char>(f1)), std::istreambuf_iterator<char>());
  ASSERT_EQ(code, 0) << shell << "\nrank 0:\n" << o0 << "\nrank 1:\n" << o1;
  EXPECT_NE(o0.find("rank 0 of 2"), std::string::npos) << o0;
  EXPECT_NE(o1.find("rank 1 of 2"), std::string::npos) << o1;
  const RunFigures job = parse_runner(o0);
  EXPECT_EQ(as_f32(job.losses), as_f32(alone.losses));
  EXPECT_EQ(job.fingerprint, alone.fingerprint);
  // Rank 0's Session::weights() is the whole model, as one process's is (not its own stages).
  EXPECT_EQ(job.weights, alone.weights);
  ASSERT_TRUE(job.has_eval);
  EXPECT_EQ(job.eval, alone.eval);
  EXPECT_EQ(job.evals, alone.evals);
}

// Rank 1 killed while the job trains: rank 0's run ends with ErrorCode::lost_rank naming rank 1,
// and the minibatches it ran before in the partial result.
TEST(ConfigSessionJob, AKilledRankIsALostRankNamedWithThePartialRun) {
  TempDir dir;
  const fs::path config = dir.write("c.yaml", kFlush);
  const std::string env =
      "TANDEM_WORLD_SIZE=2 TANDEM_MASTER=127.0.0.1:" + std::to_string(free_port()) +
      " TANDEM_JOB_TOKEN=api-test-token ";
  const fs::path out0 = dir.path() / "rank0.out", out1 = dir.path() / "rank1.out";
  const fs::path pid0 = dir.path() / "rank0.pid", pid1 = dir.path() / "rank1.pid";
  const std::string runner =
      std::string(TANDEM_CONFIG_RUNNER) + " " + config.string() + " --steps 1000000";
  run_command("sh -c '" + env + "TANDEM_RANK=1 exec " + runner + " > " + out1.string() +
              " 2>&1 & echo $! > " + pid1.string() + "; " + env + "TANDEM_RANK=0 exec " + runner +
              " > " + out0.string() + " 2>&1 & echo $! > " + pid0.string() + "'");
  const auto read = [](const fs::path& path) {
    std::ifstream f(path);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  };
  const auto pid_of = [&](const fs::path& path) {
    return static_cast<pid_t>(std::atol(read(path).c_str()));
  };
  // Killed once rank 0 has logged a step of training.
  const auto wait_for = [](const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!done() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return done();
  };
  const bool trained = wait_for([&] { return read(out0).find("progress ") != std::string::npos; });
  const pid_t rank0 = pid_of(pid0), rank1 = pid_of(pid1);
  ASSERT_GT(rank1, 0);
  ::kill(rank1, SIGKILL);
  ASSERT_TRUE(trained) << read(out0) << read(out1);
  ASSERT_GT(rank0, 0);
  // Gone, or a zombie its new parent has not reaped yet.
  const auto ended_as = [&](pid_t pid) {
    const std::string stat = read("/proc/" + std::to_string(pid) + "/stat");
    const auto paren = stat.rfind(')');
    return stat.empty() || (paren != std::string::npos && stat.substr(paren + 2, 1) == "Z");
  };
  const bool ended = wait_for([&] { return ended_as(rank0); });
  if (!ended) ::kill(rank0, SIGKILL);
  ASSERT_TRUE(ended) << "rank 0 did not end after rank 1 was killed:\n" << read(out0);
  const std::string o0 = read(out0);
  const auto at = o0.find("config_runner: error ");
  ASSERT_NE(at, std::string::npos) << o0;
  const std::string line = o0.substr(at, o0.find('\n', at) - at);
  EXPECT_NE(line.find("error lost_rank rank 1 after "), std::string::npos) << line;
  EXPECT_EQ(line.find("after 0 minibatches"), std::string::npos) << line;
}

// Two ranks started with different plans (4 slices and 2): both refuse the job before it
// trains, naming the key and both values, rank 0 naming the rank that differs.
TEST(ConfigSessionJob, RanksWithDifferentPlansRefuseEachOtherNamingTheDifference) {
  TempDir dir;
  const fs::path four = dir.write("four.yaml", kFlush);
  std::string text = kFlush;
  text.replace(text.find("slices: 4"), 9, "slices: 2");
  const fs::path two = dir.write("two.yaml", text);
  const std::string env =
      "TANDEM_WORLD_SIZE=2 TANDEM_MASTER=127.0.0.1:" + std::to_string(free_port()) +
      " TANDEM_JOB_TOKEN=api-test-token ";
  const fs::path out0 = dir.path() / "rank0.out", out1 = dir.path() / "rank1.out";
  const std::string runner = std::string(TANDEM_CONFIG_RUNNER) + " ";
  int code = 0;
  const std::string shell = run_command(
      "timeout 120 sh -c '" + env + "TANDEM_RANK=1 " + runner + two.string() + " > " +
          out1.string() + " 2>&1 & " + env + "TANDEM_RANK=0 " + runner + four.string() + " > " +
          out0.string() + " 2>&1; r0=$?; wait $!; r1=$?; exit $((r0 * 10 + r1))'",
      &code);
  std::ifstream f0(out0), f1(out1);
  const std::string o0((std::istreambuf_iterator<char>(f0)), std::istreambuf_iterator<char>());
  const std::string o1((std::istreambuf_iterator<char>(f1)), std::istreambuf_iterator<char>());
  EXPECT_EQ(code, 11) << shell << "\nrank 0:\n" << o0 << "\nrank 1:\n" << o1;
  EXPECT_EQ(o0.find("progress "), std::string::npos) << o0;
  EXPECT_NE(o0.find("config_runner: error config after 0 minibatches: "), std::string::npos) << o0;
  EXPECT_NE(o0.find("pipeline.slices: rank 1 (127.0.0.1) runs another job than rank 0"),
            std::string::npos)
      << o0;
  EXPECT_NE(o0.find("rank 0 has 'pipeline.slices: 4', rank 1 'pipeline.slices: 2'"),
            std::string::npos)
      << o0;
  EXPECT_NE(o1.find("this rank's job differs from rank 0's: rank 0 has 'pipeline.slices: 4', "
                    "this rank 'pipeline.slices: 2'"),
            std::string::npos)
      << o1;
}

// `tandem launch -n 2 -- PROGRAM CONFIG`: an application of the API started as the ranks of a
// job (Launch::from_environment()) trains what one process trains.
TEST(ConfigSessionJob, TandemLaunchStartsAnApplicationAsTheRanks) {
  TempDir dir;
  const fs::path config = dir.write("c.yaml", kPipeDream);
  int code = 0;
  const std::string alone =
      run_command(std::string(TANDEM_CONFIG_RUNNER) + " " + config.string(), &code);
  ASSERT_EQ(code, 0) << alone;
  const std::string job = run_command(
      std::string(TANDEM_CLI) + " launch -n 2 -- " + TANDEM_CONFIG_RUNNER + " " + config.string(),
      &code);
  ASSERT_EQ(code, 0) << job;
  // Rank 0's lines, without the launcher's prefix.
  std::string rank0;
  std::istringstream in(job);
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("[rank 0] ")) rank0 += line.substr(9) + "\n";
  }
  EXPECT_NE(rank0.find("rank 0 of 2"), std::string::npos) << job;
  EXPECT_NE(job.find("[rank 1] rank 1 of 2"), std::string::npos) << job;
  const RunFigures a = parse_runner(alone), j = parse_runner(rank0);
  ASSERT_FALSE(a.losses.empty()) << alone;
  EXPECT_EQ(j.losses, a.losses);
  EXPECT_EQ(j.fingerprint, a.fingerprint);
  EXPECT_EQ(j.weights, a.weights);
}

}  // namespace
}  // namespace tandem
