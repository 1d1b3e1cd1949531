// A service that runs a training job described by a YAML config (any of Tandem's configs/,
// docs/config.md) through the embedding API: it checkpoints halfway, evaluates the held-out
// data, then resumes the checkpoint in a second session and checks that the resumed run ends
// with the very weights the whole run ended with. It asks to join a launcher's job
// (Launch::from_environment()): started under tandem launch, torchrun, mpirun or srun, each
// process joins the job as its rank and rank 0 reports; started alone, it runs alone. The
// resumed session runs through start(), as a service that waits with a timeout does, and
// failures arrive as tandem::Error with a code.
//   config_job_example [CONFIG] [KEY=VALUE]...   without CONFIG: a small MLP job held as text;
//                                                KEY=VALUE overrides a key (as --set does)
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <tandem/tandem.hpp>

namespace {

const char* kJob = R"(model: {name: mlp, widths: [8, 64, 64, 4]}
data: {kind: teacher, samples: 4096, seed: 1, hidden: 8}
train:
  minibatch: 64
  steps: 40
  optimizer: {kind: adamw, lr: 2.0e-3}
  seed: 7
  log_every: 10
  eval: {samples: 512}
pipeline:
  schedule: 1f1b
  slices: 4
  stages:
    - {layers: "0-1"}
    - {layers: "2"}
)";

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  // The job's checkpoints: one directory for every rank of a job that tandem launch started
  // (its ranks share the parent), one per process otherwise.
  const char* master = std::getenv("TANDEM_MASTER");
  const fs::path work =
      fs::temp_directory_path() /
      ("tandem-config-job-" + std::to_string(master != nullptr ? ::getppid() : ::getpid()));
  fs::create_directories(work);
  try {
    // The job: a file named on the command line, or the text above, with any key overridden.
    const bool named = argc > 1 && std::string(argv[1]).find('=') == std::string::npos;
    tandem::Config config = named ? tandem::Config::file(argv[1])
                                  : tandem::Config::text(kJob, "config_job_example's job");
    for (int i = named ? 2 : 1; i < argc; ++i) {
      const std::string arg = argv[i];
      const auto eq = arg.find('=');
      if (eq == std::string::npos) {
        std::fprintf(stderr, "config_job_example: '%s': expected KEY=VALUE\n", arg.c_str());
        return 2;
      }
      config.set(arg.substr(0, eq), arg.substr(eq + 1));
    }
    tandem::ConfigRunOptions whole;
    whole.launch = tandem::Launch::from_environment();
    whole.checkpoints = {(work / "checkpoints").string(), 20, 2};
    whole.on_progress = [](const tandem::Progress& p) {
      std::printf("step %" PRId64 "/%" PRId64 "  loss %.4f%s\n", p.step, p.steps, p.loss,
                  p.has_eval ? "  (evaluated)" : "");
    };
    tandem::Session first(config, whole);
    const tandem::TrainResult a = first.run();
    if (a.rank != 0) return 0;  // rank 0 reports for the job
    std::printf("whole run: weights %016" PRIx64 "\n", a.weights_fingerprint);
    if (a.has_eval) {
      std::printf("held-out loss %.4f, accuracy %.1f%% on %" PRId64 " samples\n", a.eval.loss,
                  100 * a.eval.accuracy, a.eval.samples);
    }
    if (a.processes > 1 || a.checkpoints.size() < 2) {
      std::printf("%d process(es), %zu checkpoint(s)\nOK\n", a.processes, a.checkpoints.size());
      fs::remove_all(work);
      return 0;
    }
    tandem::ConfigRunOptions rest;
    rest.resume = a.checkpoints.front();
    tandem::Session resumed(config, rest);
    const tandem::Run run = resumed.start();
    int waits = 0;
    while (!run.wait_for(std::chrono::milliseconds(100))) ++waits;
    const tandem::TrainResult b = run.wait();
    std::printf("the resumed run ended (%s) after %d waits of 100 ms\n",
                b.status == tandem::RunStatus::completed ? "completed" : "stopped", waits);
    std::printf("resumed at step %" PRId64 ": weights %016" PRIx64 ", the whole run's %016" PRIx64
                "\n",
                b.first_minibatch, b.weights_fingerprint, a.weights_fingerprint);
    if (b.weights_fingerprint != a.weights_fingerprint) {
      std::fprintf(stderr, "config_job_example: the resumed run ended with other weights\n");
      return 1;
    }
  } catch (const tandem::Error& e) {
    std::fprintf(stderr, "config_job_example: %s error: %s\n",
                 std::string(tandem::error_code_name(e.code())).c_str(), e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "config_job_example: %s\n", e.what());
    return 1;
  }
  fs::remove_all(work);
  std::printf("OK\n");
  return 0;
}
