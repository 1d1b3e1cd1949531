// A service that runs a YAML config through the embedding API (tandem::Session from a file),
// as tests/api/config_session_test.cpp starts it: alone, or as one rank of a job when a
// launcher's variables are set. Prints what the test compares:
//   rank R of N
//   loss <minibatch> <loss, %a>        one per minibatch that ran
//   eval_at <step> <loss, %a>          each evaluation during the run (train.eval.every)
//   eval <loss, %a>                    with train.eval
//   fingerprint <16 hex digits>
//   weights <tensors> <elements> <digest>  what Session::weights() holds (weights_digest.hpp)
//   progress <step>                    each logged step, as it is logged (flushed)
// and, on stderr, a failure as `config_runner: error <code> [rank R] after <minibatches>
// minibatches: <what>`.
//   usage: config_runner CONFIG [--steps N] [--checkpoint-dir DIR] [--resume DIR]
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <tandem/tandem.hpp>

#include "weights_digest.hpp"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: config_runner CONFIG [--steps N] [--checkpoint-dir DIR] "
                 "[--resume DIR]\n");
    return 2;
  }
  tandem::ConfigRunOptions options;
  options.launch = tandem::Launch::from_environment();  // a rank when a launcher started it
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--steps")
      options.steps = std::atoll(argv[i + 1]);
    else if (flag == "--checkpoint-dir")
      options.checkpoints.dir = argv[i + 1];
    else if (flag == "--resume")
      options.resume = argv[i + 1];
    else {
      std::fprintf(stderr, "config_runner: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  options.on_progress = [](const tandem::Progress& p) {
    if (p.has_eval) std::printf("eval_at %" PRId64 " %a\n", p.step, p.eval.loss);
    std::printf("progress %" PRId64 "\n", p.step);
    std::fflush(stdout);
  };
  try {
    tandem::Session session(argv[1], options);
    const tandem::TrainResult r = session.run();
    std::printf("rank %d of %d\n", r.rank, r.processes);
    for (std::size_t i = 0; i < r.losses.size(); ++i) {
      std::printf("loss %" PRId64 " %a\n", r.first_minibatch + static_cast<std::int64_t>(i),
                  r.losses[i]);
    }
    if (r.has_eval) std::printf("eval %a\n", r.eval.loss);
    std::printf("fingerprint %016" PRIx64 "\n", r.weights_fingerprint);
    std::printf("weights %s\n", tandem::api_test::weights_digest(session.weights()).c_str());
  } catch (const tandem::Error& e) {
    std::string rank;
    if (e.where().rank) rank = " rank " + std::to_string(*e.where().rank);
    std::fprintf(stderr, "config_runner: error %s%s after %lld minibatches: %s\n",
                 std::string(tandem::error_code_name(e.code())).c_str(), rank.c_str(),
                 static_cast<long long>(e.partial() != nullptr ? e.partial()->minibatches : 0),
                 e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "config_runner: %s\n", e.what());
    return 1;
  }
  return 0;
}
