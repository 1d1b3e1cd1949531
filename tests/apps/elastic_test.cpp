// Elastic jobs through the executable users run (`tandem launch --elastic`): a rank killed with
// SIGKILL is re-planned around (the survivors re-form the job, cut the model into one stage per
// remaining rank and resume from the last checkpoint), and the job ends at its planned step
// with the weights of a run that lost nothing (GPipe: a flush schedule, so the new cut changes
// the layout, not the numbers); a loss beyond cluster.max_replans, or of rank 0, ends the job
// with an error saying why. At the door, a joiner of another job is refused naming the
// difference, and one gone before the checkpoint is dropped.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <iterator>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "rank_process.hpp"
#include "run_command.hpp"
#include "runtime/log.hpp"
#include "temp_dir.hpp"
#include "train/config.hpp"
#include "train/elastic_door.hpp"
#include "train/job_agreement.hpp"

namespace tandem::apps {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

const std::string kTandem = TANDEM_CLI;

// A 6-layer MLP under GPipe with 2 slices: `stages` is the pipeline's stage list.
std::string config(int steps, const std::string& stages, const std::string& cluster = "") {
  std::string out =
      "model: {name: mlp, widths: [8, 64, 64, 64, 64, 64, 4]}\n"
      "data: {kind: teacher, samples: 4096, seed: 1, hidden: 8}\n"
      "train:\n  minibatch: 16\n  steps: ";
  out += std::to_string(steps);
  out += "\n  optimizer: {kind: adamw, lr: 2.0e-3}\n  seed: 3\n  log_every: 50\n";
  out += "pipeline:\n  schedule: gpipe\n  slices: 2\n  stages:\n";
  out += stages;
  out += cluster;
  return out;
}

const std::string kFourStages =
    "    - {layers: \"0-1\"}\n    - {layers: \"2\"}\n    - {layers: \"3-4\"}\n"
    "    - {layers: \"5\"}\n";

double final_loss(const std::string& output) {
  const auto at = output.find("final train loss ");
  return at == std::string::npos ? NAN : std::stod(output.substr(at + 17));
}

std::string fingerprint(const std::string& output) {
  const auto at = output.find("parameters fingerprint ");
  return at == std::string::npos ? "(none)" : output.substr(at + 23, 16);
}

// Stages in the manifest `latest` names (0 while there is none).
size_t latest_stages(const fs::path& ck) {
  std::ifstream latest(ck / "latest");
  if (!latest) return 0;
  try {
    const auto pointer = nlohmann::json::parse(latest);
    std::ifstream manifest(ck / pointer.at("checkpoint").get<std::string>() / "manifest.json");
    return nlohmann::json::parse(manifest).at("stages").size();
  } catch (const std::exception&) {
    return 0;  // caught between two writes
  }
}

// A command run on a thread of its own: a launched job whose ranks the test kills meanwhile.
class BackgroundCommand {
 public:
  explicit BackgroundCommand(std::string command)
      : thread_([this, c = std::move(command)] {
          result_ = testing::run_command(c);
          ended_ = true;
        }) {}
  ~BackgroundCommand() {
    if (thread_.joinable()) thread_.join();
  }
  BackgroundCommand(const BackgroundCommand&) = delete;
  BackgroundCommand& operator=(const BackgroundCommand&) = delete;

  const std::atomic<bool>& ended() const { return ended_; }
  testing::CommandResult join() {
    thread_.join();
    return result_;
  }

 private:
  testing::CommandResult result_;
  std::atomic<bool> ended_{false};
  std::thread thread_;  // last: started once the others exist
};

// Kills the launched rank (by its first rank number) once `ready` holds; false when the job
// ended first (`ended`) or on timeout.
bool kill_when(const std::string& mark, int rank, const std::function<bool()>& ready,
               const std::atomic<bool>& ended) {
  const auto deadline = std::chrono::steady_clock::now() + 90s;
  while (std::chrono::steady_clock::now() < deadline && !ended) {
    if (ready()) {
      const pid_t pid = testing::find_rank(mark, rank);
      if (pid <= 0) return false;
      ::kill(pid, SIGKILL);
      return true;
    }
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

TEST(Elastic, ALostRankIsReplannedAroundAndTheJobEndsWithTheWeightsOfOneDevice) {
  testing::TempDir dir;
  const fs::path c = dir.write("c.yaml", config(400, kFourStages));
  const fs::path ck = dir.path() / "ck";
  const std::string mark = "TANDEM_TEST_MARK=" + std::to_string(::getpid()) + "-elastic";
  BackgroundCommand launcher(mark + " " + kTandem + " launch -n 4 --elastic " + c.string() +
                             " --checkpoint " + ck.string() + " --checkpoint-every 50");
  const std::atomic<bool>& ended = launcher.ended();
  const bool killed = kill_when(
      mark, 2, [&] { return latest_stages(ck) == 4; }, ended);
  const auto killed_at = std::chrono::steady_clock::now();
  const testing::CommandResult job = launcher.join();
  ASSERT_TRUE(killed) << job.output;
  std::printf("the job ended %.2f s after rank 2 was killed\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count());
  ASSERT_EQ(job.code, 0) << job.output;
  EXPECT_NE(job.output.find("[rank 0] rank 2 lost at step "), std::string::npos) << job.output;
  EXPECT_NE(job.output.find("re-planned 4 -> 3 ranks (stages 0-1 | 2-3 | 4-5); resuming from "
                            "step "),
            std::string::npos)
      << job.output;
  EXPECT_NE(job.output.find("rank 2 was killed by signal 9; the job went on without it"),
            std::string::npos)
      << job.output;
  EXPECT_EQ(latest_stages(ck), 3u);
  const testing::CommandResult one = testing::run_command(
      kTandem + " train " +
      dir.write("one.yaml", config(400, "    - {layers: \"0-5\"}\n")).string() + " --quiet");
  ASSERT_EQ(one.code, 0) << one.output;
  EXPECT_NEAR(final_loss(job.output), final_loss(one.output), 1e-5) << job.output;
  // GPipe's numbers do not depend on the cut: the weights are bit-identical.
  EXPECT_EQ(fingerprint(job.output), fingerprint(one.output)) << job.output;
}

// Ranks 2 and 3 killed at the same moment (a host of two ranks lost): one re-plan covers both,
// 4 -> 2 ranks, and the job ends with the weights of one device. Rank 0 used to decide on the
// first loss alone, and the survivors then waited 120 s for the second dead rank to register.
TEST(Elastic, TwoRanksLostTogetherAreReplannedAroundAtOnce) {
  testing::TempDir dir;
  const fs::path c = dir.write("c.yaml", config(400, kFourStages));
  const fs::path ck = dir.path() / "ck";
  const std::string mark = "TANDEM_TEST_MARK=" + std::to_string(::getpid()) + "-two";
  BackgroundCommand launcher(mark + " " + kTandem + " launch -n 4 --elastic " + c.string() +
                             " --checkpoint " + ck.string() + " --checkpoint-every 50");
  const std::atomic<bool>& ended = launcher.ended();
  bool killed = false;
  const auto deadline = std::chrono::steady_clock::now() + 90s;
  while (!killed && !ended && std::chrono::steady_clock::now() < deadline) {
    if (latest_stages(ck) == 4) {
      const pid_t two = testing::find_rank(mark, 2), three = testing::find_rank(mark, 3);
      if (two <= 0 || three <= 0) break;
      ::kill(two, SIGKILL);
      ::kill(three, SIGKILL);
      killed = true;
    }
    std::this_thread::sleep_for(10ms);
  }
  const testing::CommandResult job = launcher.join();
  ASSERT_TRUE(killed) << job.output;
  ASSERT_EQ(job.code, 0) << job.output;
  EXPECT_NE(job.output.find("re-planned 4 -> 2 ranks"), std::string::npos) << job.output;
  EXPECT_EQ(job.output.find("re-planned 3 -> 2"), std::string::npos) << job.output;
  EXPECT_EQ(latest_stages(ck), 2u);
  const testing::CommandResult one = testing::run_command(
      kTandem + " train " +
      dir.write("one.yaml", config(400, "    - {layers: \"0-5\"}\n")).string() + " --quiet");
  ASSERT_EQ(one.code, 0) << one.output;
  EXPECT_EQ(fingerprint(job.output), fingerprint(one.output)) << job.output;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Waits until `path` holds `text`; returns the file's text then ("" when the job ended first or
// on timeout).
std::string wait_for_text(const fs::path& path, const std::string& text,
                          const std::atomic<bool>& ended) {
  const auto deadline = std::chrono::steady_clock::now() + 90s;
  while (std::chrono::steady_clock::now() < deadline && !ended) {
    std::string now = read_file(path);
    if (now.find(text) != std::string::npos) return now;
    std::this_thread::sleep_for(10ms);
  }
  return "";
}

// After losing rank 2, the job takes a new process in at its next checkpoint (`tandem train
// --join DOOR`, with the job's token) and ends on 4 ranks again, with the weights of one
// device; a process without the token is refused at the door and the job goes on.
TEST(Elastic, ALateRankIsTakenInAtTheNextCheckpoint) {
  testing::TempDir dir;
  const fs::path c = dir.write("c.yaml", config(8000, kFourStages));
  const fs::path ck = dir.path() / "ck";
  const fs::path log = dir.path() / "job.log";
  const std::string token = "TANDEM_JOB_TOKEN=5ca1ab1e5ca1ab1e5ca1ab1e5ca1ab1e";
  const std::string mark = "TANDEM_TEST_MARK=" + std::to_string(::getpid()) + "-join";
  BackgroundCommand launcher(token + " " + mark + " " + kTandem + " launch -n 4 --elastic " +
                             c.string() + " --checkpoint " + ck.string() +
                             " --checkpoint-every 200 > " + log.string() + " 2>&1");
  const std::atomic<bool>& ended = launcher.ended();
  const bool killed = kill_when(
      mark, 2, [&] { return latest_stages(ck) == 4; }, ended);
  const std::string shrunk = wait_for_text(log, "re-planned 4 -> 3 ranks", ended);
  // Rank 0 logs where late ranks knock: "... --join 127.0.0.1:PORT` ...".
  std::string door;
  if (const auto at = shrunk.find("--join "); at != std::string::npos) {
    door = shrunk.substr(at + 7, shrunk.find('`', at) - at - 7);
  }
  const std::string join = kTandem + " train " + c.string() + " --checkpoint " + ck.string() +
                           " --checkpoint-every 200 --quiet --join " + door;
  const testing::CommandResult stranger =
      testing::run_command("TANDEM_JOB_TOKEN=0000000000000000 " + join);
  // A joiner of another job (its checkpoints every 100 steps, the job's every 200: taken in, it
  // would wait at step 200 for a checkpoint the others never write) is refused at the door, and
  // the job goes on to take in the next.
  std::string other = join;
  other.replace(other.find("--checkpoint-every 200"), 22, "--checkpoint-every 100");
  const testing::CommandResult differing = testing::run_command(token + " " + other);
  const testing::CommandResult joiner = testing::run_command(token + " " + join);
  testing::CommandResult job = launcher.join();
  job.output = read_file(log);
  ASSERT_TRUE(killed && !door.empty()) << job.output;
  EXPECT_NE(stranger.code, 0) << stranger.output;
  EXPECT_NE(stranger.output.find("token"), std::string::npos) << stranger.output;
  EXPECT_NE(differing.code, 0) << differing.output;
  EXPECT_NE(differing.output.find("checkpoints.every: this rank's job differs from rank 0's: rank "
                                  "0 has 'checkpoints.every: 200', this rank 'checkpoints.every: "
                                  "100'"),
            std::string::npos)
      << differing.output;
  ASSERT_EQ(joiner.code, 0) << joiner.output;
  ASSERT_EQ(job.code, 0) << job.output;
  EXPECT_NE(job.output.find("[rank 0] took in 1 rank at step "), std::string::npos) << job.output;
  EXPECT_NE(job.output.find(" runs another job than rank 0: rank 0 has 'checkpoints.every: 200', "
                            "the joiner 'checkpoints.every: 100'; refused, the job goes on"),
            std::string::npos)
      << job.output;
  EXPECT_NE(job.output.find("re-planned 3 -> 4 ranks (stages 0 | 1-2 | 3 | 4-5)"),
            std::string::npos)
      << job.output;
  EXPECT_EQ(latest_stages(ck), 4u);
  const testing::CommandResult one = testing::run_command(
      kTandem + " train " +
      dir.write("one.yaml", config(8000, "    - {layers: \"0-5\"}\n")).string() + " --quiet");
  ASSERT_EQ(one.code, 0) << one.output;
  EXPECT_EQ(fingerprint(job.output), fingerprint(one.output)) << job.output;
}

TEST(Elastic, ALossBeyondMaxReplansEndsTheJobSayingWhy) {
  testing::TempDir dir;
  const fs::path c =
      dir.write("c.yaml", config(4000, kFourStages, "cluster: {elastic: true, max_replans: 1}\n"));
  const fs::path ck = dir.path() / "ck";
  const std::string mark = "TANDEM_TEST_MARK=" + std::to_string(::getpid()) + "-replans";
  BackgroundCommand launcher(mark + " " + kTandem + " launch -n 4 " + c.string() +
                             " --checkpoint " + ck.string() + " --checkpoint-every 100");
  const std::atomic<bool>& ended = launcher.ended();
  const bool first = kill_when(
      mark, 2, [&] { return latest_stages(ck) == 4; }, ended);
  const bool second = first && kill_when(
                                   mark, 3, [&] { return latest_stages(ck) == 3; }, ended);
  const testing::CommandResult job = launcher.join();
  ASSERT_TRUE(first && second) << job.output;
  EXPECT_EQ(job.code, 1) << job.output;
  EXPECT_NE(job.output.find("re-planned 4 -> 3 ranks"), std::string::npos) << job.output;
  EXPECT_NE(job.output.find("[rank 0] tandem: error: rank 2 lost"), std::string::npos)
      << job.output;
  EXPECT_NE(job.output.find("the job already re-planned 1 times (cluster.max_replans: 1)"),
            std::string::npos)
      << job.output;
}

TEST(Elastic, LosingRankZeroEndsTheJobNamingIt) {
  testing::TempDir dir;
  const fs::path c = dir.write("c.yaml", config(4000, kFourStages));
  const fs::path ck = dir.path() / "ck";
  const std::string mark = "TANDEM_TEST_MARK=" + std::to_string(::getpid()) + "-master";
  BackgroundCommand launcher(mark + " " + kTandem + " launch -n 4 --elastic " + c.string() +
                             " --checkpoint " + ck.string() + " --checkpoint-every 100");
  const std::atomic<bool>& ended = launcher.ended();
  const bool killed = kill_when(
      mark, 0, [&] { return latest_stages(ck) == 4; }, ended);
  const testing::CommandResult job = launcher.join();
  ASSERT_TRUE(killed) << job.output;
  EXPECT_EQ(job.code, 1) << job.output;
  EXPECT_NE(job.output.find("rank 0 is the job's master"), std::string::npos) << job.output;
}

// A joiner let in at the door and killed before the job's next checkpoint is dropped when the
// job claims its joiners: the next generation never waits for a rank that cannot come (every
// rank failed after 120 s).
TEST(Elastic, AJoinerGoneBeforeTheCheckpointIsDroppedAtTheDoor) {
  testing::TempDir dir;
  const fs::path c = dir.write("c.yaml", config(8000, kFourStages));
  const train::Config job = train::load_config(c);
  std::mutex mu;
  std::vector<std::string> lines;
  log::set_handler([&](log::Level, std::string_view line) {
    std::lock_guard lock(mu);
    lines.emplace_back(line);
  });
  const auto logged = [&](const std::string& part) {
    std::lock_guard lock(mu);
    return std::any_of(lines.begin(), lines.end(),
                       [&](const std::string& l) { return l.find(part) != std::string::npos; });
  };
  const auto wait_until = [](const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    while (!done() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(20ms);
    return done();
  };
  const std::string token = "5ca1ab1e5ca1ab1e5ca1ab1e5ca1ab1e";
  {
    train::ElasticDoor door(
        "127.0.0.1", token,
        train::joiner_description(job, train::config_model(job), job.train.steps, 200));
    const fs::path out = dir.path() / "joiner.log";
    const testing::CommandResult started = testing::run_command(
        "TANDEM_JOB_TOKEN=" + token + " " + kTandem + " train " + c.string() + " --checkpoint " +
        (dir.path() / "ck").string() + " --checkpoint-every 200 --quiet --join 127.0.0.1:" +
        std::to_string(door.port()) + " > " + out.string() + " 2>&1 & echo $!");
    const pid_t joiner = static_cast<pid_t>(std::atol(started.output.c_str()));
    ASSERT_GT(joiner, 0) << started.output;
    const bool waiting = wait_until([&] { return logged("waits to join the job"); });
    ::kill(joiner, SIGKILL);
    ASSERT_TRUE(waiting) << read_file(out);
    // The door hears the connection close without a goodbye.
    EXPECT_TRUE(wait_until([&] { return logged("lost"); }));
    EXPECT_EQ(door.claim(), 0);
    EXPECT_TRUE(logged("elastic door: a joiner (")) << "no warning";
    EXPECT_TRUE(logged(") left before it was taken in; the job goes on without it"));
  }
  log::set_handler({});
}

}  // namespace
}  // namespace tandem::apps
