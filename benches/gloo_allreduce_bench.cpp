// Gloo all-reduce among processes on one machine, through GlooCollectives (what a stage's
// replicas call: queued to the member's own thread, its buffer packed and unpacked around the
// Gloo call), beside gloo::allreduce called directly on a context of the same kind (same TCP
// device, same rendezvous store, same algorithm) in place on the tensor's memory. For each
// world size the bench starts world-1 copies of itself; all meet through one Rendezvous on
// 127.0.0.1.
//   time per all-reduce (median of the repetitions; each repetition averages several calls),
//   algorithm bandwidth = bytes / time,
//   bus bandwidth = 2 (n - 1) / n * bytes / time (what each process sends and receives in a
//   ring, so that figures for different n compare; NCCL's convention).
//   usage: bench_gloo_allreduce [--procs 2,4] [--sizes-mib 1,4,16,64] [--reps 3]
//                               [--mib-per-rep 256]
#include <fmt/format.h>
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "transport/gloo_collectives.hpp"
#include "transport/rendezvous.hpp"
#include "transport/rendezvous_store.hpp"

extern char** environ;

namespace tandem::bench {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using transport::Endpoint;

constexpr auto kSetupTimeout = 60s;
constexpr auto kReduceTimeout = 120s;

struct Options {
  std::vector<int> procs{2, 4};
  std::vector<double> sizes_mib{1, 4, 16, 64};
  int reps = 3;
  double mib_per_rep = 256;  // bytes reduced per repetition: sets the calls per repetition
  // Set for the started copies: one world, this rank.
  int rank = -1;
  int world = 0;
  std::uint16_t port = 0;
  std::string token;
};

template <class T>
std::vector<T> parse_list(const std::string& what, const std::string& text) {
  std::vector<T> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    const double v = std::stod(item);
    if (v <= 0) throw std::invalid_argument(what + ": '" + item + "' is not positive");
    out.push_back(static_cast<T>(v));
    pos = comma + 1;
  }
  if (out.empty()) throw std::invalid_argument(what + ": empty");
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--procs") {
      o.procs = parse_list<int>(a, value());
    } else if (a == "--sizes-mib") {
      o.sizes_mib = parse_list<double>(a, value());
    } else if (a == "--reps") {
      o.reps = std::stoi(value());
    } else if (a == "--mib-per-rep") {
      o.mib_per_rep = std::stod(value());
    } else if (a == "--rank") {
      o.rank = std::stoi(value());
    } else if (a == "--world") {
      o.world = std::stoi(value());
    } else if (a == "--port") {
      o.port = static_cast<std::uint16_t>(std::stoul(value()));
    } else if (a == "--token") {
      o.token = value();
    } else if (a == "-h" || a == "--help") {
      std::printf(
          "usage: bench_gloo_allreduce [--procs 2,4] [--sizes-mib 1,4,16,64] [--reps 3]\n"
          "                            [--mib-per-rep 256]\n");
      std::exit(0);
    } else {
      throw std::invalid_argument("unknown argument '" + a + "' (see --help)");
    }
  }
  for (const int n : o.procs) {
    if (n < 2) throw std::invalid_argument("--procs: a world of at least 2 processes");
  }
  if (o.reps < 1) throw std::invalid_argument("--reps: at least 1");
  return o;
}

pid_t spawn_rank(int argc, char** argv, int rank, int world, std::uint16_t port,
                 const std::string& token) {
  const std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  std::vector<std::string> args{exe};
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  for (const std::string& a :
       {std::string("--rank"), std::to_string(rank), std::string("--world"), std::to_string(world),
        std::string("--port"), std::to_string(port), std::string("--token"), token}) {
    args.push_back(a);
  }
  std::vector<char*> cargs;
  for (std::string& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, exe.c_str(), nullptr, nullptr, cargs.data(), environ) != 0) {
    throw std::runtime_error(
        fmt::format("cannot start rank {} ({}): {}", rank, exe, std::strerror(errno)));
  }
  return pid;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One GlooCollectives all-reduce, waited for: what a stage's actor waits for between sending its
// gradients and applying them.
class Waiter {
 public:
  std::function<void()> done() {
    {
      std::lock_guard lock(mu_);
      done_ = false;
    }
    return [this] {
      std::lock_guard lock(mu_);
      done_ = true;
      cv_.notify_all();
    };
  }
  void wait(const std::string& what) {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, kReduceTimeout, [&] { return done_ || !error_.empty(); })) {
      throw std::runtime_error(what + ": no completion within " +
                               std::to_string(kReduceTimeout.count()) + " s");
    }
    if (!error_.empty()) throw std::runtime_error(what + ": " + error_);
  }
  void fail(const std::string& error) {
    std::lock_guard lock(mu_);
    error_ = error;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::string error_;
};

struct Figure {
  int procs = 0;
  std::size_t bytes = 0;
  int calls = 0;
  std::vector<double> ours_s;  // seconds per all-reduce, one per repetition
  std::vector<double> raw_s;
};

// One world: every rank runs this; rank 0 returns the figures.
std::vector<Figure> run_world(const Options& o, transport::Rendezvous& rendezvous) {
  const int rank = rendezvous.rank();
  const int world = rendezvous.world_size();
  rendezvous.join(kSetupTimeout);

  Waiter waiter;
  transport::GlooCollectivesOptions go;
  go.hostname = "127.0.0.1";
  go.timeout = kReduceTimeout;
  go.key_prefix = "bench";
  go.on_error = [&waiter](const std::string& e) { waiter.fail(e); };
  transport::GlooCollectives collectives(rendezvous, go);

  // The direct context: its own device and store prefix, the same store underneath.
  transport::RendezvousStore store(rendezvous, kSetupTimeout);
  gloo::rendezvous::PrefixStore raw_store("raw", store);
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto raw = std::make_shared<gloo::rendezvous::Context>(rank, world);
  raw->setTimeout(kReduceTimeout);
  std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
  raw->connectFullMesh(raw_store, device);

  std::vector<Endpoint> group(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) group[static_cast<std::size_t>(r)] = r;
  std::int64_t round = 0;
  std::uint32_t raw_tag = 0;
  auto ours = [&](Tensor& t) {
    collectives.all_reduce(group, rank, round, {t}, true, transport::Reduction::sum, waiter.done());
    waiter.wait(fmt::format("all-reduce round {}", round));
    ++round;
  };
  auto direct = [&](Tensor& t) {
    gloo::AllreduceOptions opts(raw);
    opts.setOutput(t.data<float>(), static_cast<std::size_t>(t.numel()));
    opts.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, std::size_t)>(&gloo::sum<float>));
    opts.setTag(raw_tag++);
    gloo::allreduce(opts);
  };

  std::vector<Figure> figures;
  int barrier = 0;
  for (const double mib : o.sizes_mib) {
    Figure f;
    f.procs = world;
    f.bytes = static_cast<std::size_t>(mib * (1 << 20)) / 4 * 4;
    f.calls = std::clamp(static_cast<int>(o.mib_per_rep / mib), 3, 200);
    Tensor t = Tensor::empty({static_cast<std::int64_t>(f.bytes / 4)}, DType::f32);
    // Small values: sums stay finite however many calls accumulate.
    for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = 1e-6f * (i % 7);
    // Warm-up: connects GlooCollectives' context, faults the pages in.
    ours(t);
    direct(t);
    auto timed = [&](auto&& call) {
      rendezvous.barrier(fmt::format("m{}", barrier++), kSetupTimeout);
      const auto t0 = Clock::now();
      for (int i = 0; i < f.calls; ++i) call(t);
      return std::chrono::duration<double>(Clock::now() - t0).count() / f.calls;
    };
    for (int r = 0; r < o.reps; ++r) {
      f.ours_s.push_back(timed(ours));
      f.raw_s.push_back(timed(direct));
    }
    figures.push_back(std::move(f));
  }
  rendezvous.barrier("measured", kSetupTimeout);
  return rank == 0 ? figures : std::vector<Figure>{};
}

transport::RendezvousOptions rendezvous_options(int rank, int world, std::uint16_t port,
                                                const std::string& token) {
  transport::RendezvousOptions ro;
  ro.rank = rank;
  ro.world_size = world;
  ro.master_host = "127.0.0.1";
  ro.master_port = port;
  ro.job_token = token;
  ro.host_name = "127.0.0.1";
  // Reductions keep every core busy (4 processes on 2 cores): a late heartbeat must not end the
  // job.
  ro.heartbeat_timeout = 60s;
  return ro;
}

int run(int argc, char** argv) {
  const Options o = parse(argc, argv);
  if (o.rank >= 0) {  // a started copy
    transport::Rendezvous rendezvous(rendezvous_options(o.rank, o.world, o.port, o.token));
    run_world(o, rendezvous);
    rendezvous.shutdown(kSetupTimeout);
    return 0;
  }
  std::printf(
      "bench_gloo_allreduce: f32 sum, processes on 127.0.0.1 (Gloo TCP), %d repetitions "
      "(median; every run in the JSON line); GB/s = 1e9 B/s\n",
      o.reps);
  std::printf("%-6s %-8s %-6s %-12s %-10s %-10s %-12s %-10s %-8s\n", "procs", "size", "calls",
              "ours ms", "algbw", "busbw", "direct ms", "busbw", "ours/direct");
  nlohmann::json results = nlohmann::json::object();
  int failed = 0;
  for (const int world : o.procs) {
    const std::string token = fmt::format("bench-gloo-{}-{}", getpid(), world);
    transport::Rendezvous rendezvous(rendezvous_options(0, world, 0, token));
    std::vector<pid_t> children;
    for (int r = 1; r < world; ++r) {
      children.push_back(spawn_rank(argc, argv, r, world, rendezvous.port(), token));
    }
    const std::vector<Figure> figures = run_world(o, rendezvous);
    rendezvous.shutdown(kSetupTimeout);
    for (const pid_t c : children) {
      int status = 0;
      waitpid(c, &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
    }
    for (const Figure& f : figures) {
      const double ours = median(f.ours_s);
      const double direct = median(f.raw_s);
      const double bus = 2.0 * (f.procs - 1) / f.procs;
      const double b = static_cast<double>(f.bytes);
      std::printf("%-6d %-8s %-6d %-12.3f %-10.3f %-10.3f %-12.3f %-10.3f %-8.2f\n", f.procs,
                  fmt::format("{} MiB", f.bytes >> 20).c_str(), f.calls, ours * 1e3, b / ours / 1e9,
                  bus * b / ours / 1e9, direct * 1e3, bus * b / direct / 1e9, direct / ours);
      std::fflush(stdout);
      results[fmt::format("allreduce/procs:{}/bytes:{}", f.procs, f.bytes)] = {
          {"real_ns", ours * 1e9},
          {"iterations", f.calls},
          {"counters",
           {{"algbw_GB_per_s", b / ours / 1e9},
            {"busbw_GB_per_s", bus * b / ours / 1e9},
            {"direct_ns", direct * 1e9},
            {"direct_busbw_GB_per_s", bus * b / direct / 1e9}}},
          {"runs_s", f.ours_s},
          {"direct_runs_s", f.raw_s}};
    }
  }
  const nlohmann::json line = {{"suite", "gloo_allreduce"}, {"reps", o.reps}, {"results", results}};
  std::printf("BENCH_JSON %s\n", line.dump().c_str());
  if (failed > 0) {
    std::fprintf(stderr, "bench_gloo_allreduce: %d started process(es) failed\n", failed);
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace tandem::bench

int main(int argc, char** argv) {
  try {
    return tandem::bench::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gloo_allreduce: %s\n", e.what());
    return 1;
  }
}
