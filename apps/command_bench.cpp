// `tandem bench CONFIG [--steps N] [--profile P.json] [--trace FILE] [--json] [--realtime]`:
// runs the config's plan for N steps and prints samples/s, per-replica utilization, bubble and
// step time beside the simulator's prediction, with the ratio (apps/bench_run.hpp), then one
// BENCH_JSON line.
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "apps/bench_run.hpp"
#include "apps/commands.hpp"
#include "apps/config_sets.hpp"
#include "apps/output_file.hpp"
#include "runtime/realtime_scheduling.hpp"
#include "train/cluster_options.hpp"
#include "train/process_group.hpp"

namespace tandem::apps {

void add_bench_command(CLI::App& app) {
  struct Args {
    std::string config, profile, trace;
    std::vector<std::string> sets;
    std::int64_t steps = 0;
    bool json = false;
    bool realtime = false;
    double link_gbit_s = 0, link_latency_us = 0;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "bench",
      "run a config's plan for N steps; measured throughput, utilization, bubble and "
      "step time beside the simulator's prediction");
  sub->add_option("config", args->config, "config file (YAML)")->required();
  add_set_option(*sub, args->sets);
  sub->add_option("--steps", args->steps, "run this many steps instead of train.steps")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40));
  sub->add_option("--profile", args->profile,
                  "stages on sim: per-layer durations from this profile (`tandem profile`); "
                  "default: FLOP counts at the dry run's rate");
  sub->add_option("--trace", args->trace,
                  "stages that compute: keep the run's Chrome trace in FILE (the prediction is "
                  "made from it)");
  sub->add_option("--link-gbit-s", args->link_gbit_s,
                  "stages on sim: the prediction's link bandwidth between stages, Gbit/s, and "
                  "its all-reduce of replicated stages' gradients over it (default: unlimited)")
      ->check(CLI::Range(1e-6, 1e6));
  sub->add_option("--link-latency-us", args->link_latency_us,
                  "stages on sim: the prediction's link latency, microseconds")
      ->check(CLI::Range(0.0, 1e9));
  sub->add_flag("--json", args->json, "print one JSON object instead of the table");
  sub->add_flag(
      "--realtime", args->realtime,
      "run the runtime's threads under real-time scheduling (SCHED_RR, the lowest priority): "
      "on a machine shared with busy processes, hand-offs are not delayed behind them "
      "(needs CAP_SYS_NICE or `ulimit -r` >= 1; docs/cli.md)");
  sub->callback([args, sub] {
    if (args->realtime) use_realtime_scheduling();  // before any thread of the run starts
    BenchOptions options;
    if (sub->count("--steps") > 0) options.steps = args->steps;
    options.link_gbit_s = args->link_gbit_s;
    options.link_latency_us = args->link_latency_us;
    if (sub->count("--profile") > 0) options.profile = args->profile;
    if (sub->count("--trace") > 0) {
      check_output("bench: --trace", args->trace, {args->config, args->profile});
      options.trace = args->trace;
    }
    const train::Config config = load_command_config(args->config, args->sets);
    // Under a launcher (tandem launch bench ..., torchrun, ...) one rank of a job; rank 0 reports.
    const std::unique_ptr<train::ProcessGroup> group =
        train::join_launched_job(train::process_group_options(config.cluster));
    options.group = group.get();
    const BenchReport report = run_bench(config, options);
    if (group != nullptr) {
      group->shutdown();
      if (group->rank() > 0) {
        std::cout << "rank " << group->rank() << ": done\n";
        return;
      }
    }
    const nlohmann::json json = bench_to_json(report);
    if (args->json) {
      std::cout << json.dump(2) << '\n';
      return;
    }
    // The benches' line (benches/json_line_reporter.hpp): numbers only, per replica flattened.
    nlohmann::json counters = nlohmann::json::object();
    for (const auto& [key, value] : json.items()) {
      if (value.is_number()) counters[key] = value;
    }
    for (const BenchReplica& r : report.replicas) {
      counters["utilization_d" + std::to_string(r.device)] = r.utilization;
      counters["predicted_utilization_d" + std::to_string(r.device)] = r.predicted_utilization;
    }
    const nlohmann::json line = {{"suite", "tandem_bench"},
                                 {"results",
                                  {{report.config,
                                    {{"real_ns", report.step_ms * 1e6},
                                     {"iterations", report.steps},
                                     {"counters", counters}}}}}};
    std::cout << format_bench(report) << "BENCH_JSON " << line.dump() << '\n';
  });
}

}  // namespace tandem::apps
