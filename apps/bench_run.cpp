#include "apps/bench_run.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <system_error>

#include "apps/dry_run.hpp"
#include "apps/trace_summary.hpp"
#include "apps/trainer_report.hpp"
#include "apps/usage_error.hpp"
#include "planner/layer_op_times.hpp"
#include "schedules/schedule.hpp"
#include "schedules/schedule_error.hpp"
#include "train/job_plan.hpp"
#include "train/process_group.hpp"
#include "train/process_placement.hpp"
#include "train/segment.hpp"
#include "train/session.hpp"

namespace tandem::apps {
namespace {

namespace ts = tandem::schedules;

// A temporary trace file, removed when the bench is done with it (or fails).
class TempFile {
 public:
  TempFile() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            fmt::format("tandem-bench-{}-{}.json", ::getpid(), counter++);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Samples per slice on average: what the sim device's per-op durations are taken at.
double mean_slice_samples(const ts::ScheduleParams& p) {
  return static_cast<double>(p.samples()) / std::max(1, p.slices);
}

std::int64_t action_count(const ts::ActionList& list) {
  std::int64_t n = 0;
  for (const auto& d : list.devices) n += static_cast<std::int64_t>(d.size());
  return n;
}

double per_action_us(double measured_ms, double predicted_ms, std::int64_t actions, int devices) {
  if (actions <= 0 || devices <= 0) return 0;
  return 1e3 * (measured_ms - predicted_ms) /
         (static_cast<double>(actions) / static_cast<double>(devices));
}

// Every replica on sim, or none (cpu, cuda): the two ways a bench runs.
bool on_sim(const ts::Plan& plan, const train::Config& config) {
  bool sim = false, data = false;
  for (const auto& st : plan.stages) {
    for (const auto& r : st.replicas) {
      (Device::parse(r.device).is_sim() ? sim : data) = true;
    }
  }
  if (sim && data) {
    throw train::ConfigError(
        config.pipeline ? config.where.pipeline : config.where.train, "pipeline.stages",
        "tandem bench runs stages all on sim (timed, no data) or all on devices "
        "with data, not both");
  }
  return sim;
}

// The prediction's SYNC over links of `bytes_per_ms`: the longest ring all-reduce of a
// replicated stage's gradients, 2 (r - 1) W / (r B) for W bytes of weights on r replicas (what
// Gloo moves for sim gradients; the simulator has one SYNC duration for every stage).
double ring_sync_ms(const models::Model& model, const ts::Plan& plan, double bytes_per_ms) {
  double sync = 0;
  for (const ts::StagePlan& stage : plan.stages) {
    const auto r = static_cast<double>(stage.replicas.size());
    if (r < 2) continue;
    const auto weights = static_cast<double>(
        model.init_params(0, stage.layers.begin, stage.layers.end, Device::sim()).nbytes());
    sync = std::max(sync, 2 * (r - 1) * weights / (r * bytes_per_ms));
  }
  return sync;
}

BenchReport bench_sim(const train::Config& config, const BenchOptions& options) {
  const models::Model model = train::config_model(config);
  const std::int64_t steps = options.steps.value_or(config.train.steps);
  const ts::Plan plan =
      train::pipeline_plan(*config.pipeline, config.train.minibatch, model.num_layers(), steps);
  const double slice = mean_slice_samples(plan.schedule);
  models::SimCosts sim;
  BenchReport out;
  if (options.profile) {
    const planner::Profile profile = planner::load_profile(*options.profile);
    if (static_cast<int>(profile.layers.size()) != model.num_layers()) {
      throw std::runtime_error(fmt::format(
          "{}: the profile has {} layers, the config's model {} has {}", options.profile->string(),
          profile.layers.size(), config.model.describe(), model.num_layers()));
    }
    sim = train::sim_costs_from_profile(profile, slice);
    out.durations = fmt::format("sim durations from the profile {} at {:.4g} samples per slice",
                                options.profile->string(), slice);
  } else {
    sim = train::sim_costs_from_flops(model, slice);
    out.durations = fmt::format(
        "sim durations from FLOP counts at {:.0f} GFLOP/s, {:.4g} samples per slice (no "
        "--profile)",
        kDryRunFlopsPerSecond / 1e9, slice);
  }
  const auto vstages = ts::virtual_stage_layers(plan, model.num_layers());
  ts::SimulationCosts costs = train::sim_simulation_costs(sim, vstages);
  if (options.link_gbit_s > 0 || options.link_latency_us > 0) {
    // What a sim tensor costs on the wire: its data's size (transport/wire_message.hpp). A
    // chain's stage sends its output on; a graph's tensors travel along its edges, straight to
    // their readers or relayed, as the run sends them.
    const std::vector<double> cuts = model.cut_elements(1);
    const auto wire = static_cast<double>(dtype_size(train::wire_dtype(config)));
    for (std::size_t v = 0; v < vstages.size(); ++v) {
      costs.stages[v].output_bytes = wire * cuts.at(static_cast<std::size_t>(vstages[v].end - 1));
    }
    costs.edges = train::sim_edge_bytes(model, vstages, config.pipeline->relay_skips, wire);
    costs.latency = options.link_latency_us / 1e3;
    if (options.link_gbit_s > 0) {
      costs.bandwidth = options.link_gbit_s * 1e9 / 8 / 1e3;
      costs.sync = ring_sync_ms(model, plan, costs.bandwidth);
    }
    costs.contention = true;
    out.durations += fmt::format("; links {} Gbit/s, {} us latency", options.link_gbit_s,
                                 options.link_latency_us);
  }
  const ts::ActionList list = ts::Schedule(plan.schedule).materialize();
  const ts::SimulationResult predicted = ts::simulate(list, costs);

  train::ProcessGroup* const group = options.group;
  const train::SimRun result = train::run_sim(config, model, plan, sim, group);
  if (group != nullptr) {
    out.processes = group->world_size();
    out.rank = group->rank();
    if (group->rank() > 0) return out;
  }

  out.mode = "sim";
  out.plan_line = format_plan_line(plan);
  out.steps = result.minibatches;
  out.minibatch = config.train.minibatch;
  out.actions = action_count(list);
  out.devices = plan.schedule.total_replicas();
  out.seconds = result.seconds;
  out.makespan_ms = 1e3 * result.seconds;
  out.predicted_makespan_ms = predicted.makespan;
  const double samples = static_cast<double>(out.steps * out.minibatch);
  out.samples_per_s = result.seconds > 0 ? samples / result.seconds : 0;
  out.predicted_samples_per_s = predicted.makespan > 0 ? 1e3 * samples / predicted.makespan : 0;
  double busy = 0;
  for (const train::StageStats& st : result.stages) {
    const auto d = static_cast<std::size_t>(st.device);
    BenchReplica r{st.device, st.stage, st.replica, st.device_name, st.actions, st.busy_s, 0, 0};
    r.utilization = result.seconds > 0 ? std::clamp(st.busy_s / result.seconds, 0.0, 1.0) : 0;
    r.predicted_utilization = d < predicted.busy.size() && predicted.makespan > 0
                                  ? predicted.busy[d] / predicted.makespan
                                  : 0;
    busy += st.busy_s;
    out.bytes_per_step += static_cast<double>(st.bytes_sent);
    out.replicas.push_back(r);
  }
  out.bytes_per_step /= static_cast<double>(std::max<std::int64_t>(1, out.steps));
  out.bubble = result.seconds > 0 && out.devices > 0
                   ? std::clamp(1 - busy / (out.devices * result.seconds), 0.0, 1.0)
                   : 0;
  out.predicted_bubble = predicted.bubble;
  out.steady = false;
  const double n = static_cast<double>(std::max<std::int64_t>(1, out.steps));
  out.step_ms = out.makespan_ms / n;
  out.predicted_step_ms = predicted.makespan / n;
  out.ratio = predicted.makespan > 0 ? out.makespan_ms / predicted.makespan
                                     : std::numeric_limits<double>::infinity();
  out.overhead_us_per_action =
      per_action_us(out.makespan_ms, out.predicted_makespan_ms, out.actions, out.devices);
  double unhidden = 0;
  for (const BenchReplica& r : out.replicas) {
    unhidden += std::max(0.0, r.predicted_utilization - r.utilization) * result.seconds;
  }
  out.unhidden_s = out.replicas.empty() ? 0 : unhidden / static_cast<double>(out.replicas.size());
  return out;
}

BenchReport bench_trained(train::Config config, const BenchOptions& options) {
  // Evaluation would run beside training and take its cores: the bench times training alone.
  config.train.eval.reset();
  TempFile temp;
  train::SessionOptions to;
  to.steps = options.steps;
  to.trace = options.trace.value_or(temp.path());
  train::Session trainer(config, to);
  const train::TrainSummary s = trainer.run();
  const TraceSummary t = summarize_trace_file(*to.trace);

  BenchReport out;
  out.mode = trainer.plan().stages.front().replicas.front().device;
  out.plan_line = format_plan_line(trainer.plan());
  out.durations =
      "durations measured in this run (per virtual stage, F/B/W means; STEP, SYNC "
      "and the median message delay), as `tandem trace summarize` does";
  out.steps = s.steps;
  out.minibatch = config.train.minibatch;
  out.devices = trainer.plan().schedule.total_replicas();
  out.seconds = s.pipeline_seconds;
  out.samples_per_s = s.samples_per_s;
  out.makespan_ms = 1e3 * t.span_s;
  out.predicted_makespan_ms = 1e3 * t.predicted_makespan_s;
  out.predicted_samples_per_s =
      t.predicted_makespan_s > 0
          ? static_cast<double>(s.steps * out.minibatch) / t.predicted_makespan_s
          : 0;
  double busy = 0;
  for (const train::StageStats& st : s.stages) {
    const auto d = static_cast<std::size_t>(st.device);
    BenchReplica r{st.device, st.stage, st.replica, st.device_name, st.actions, st.busy_s, 0, 0};
    r.utilization =
        s.pipeline_seconds > 0 ? std::clamp(st.busy_s / s.pipeline_seconds, 0.0, 1.0) : 0;
    r.predicted_utilization = d < t.predicted_utilization.size() ? t.predicted_utilization[d] : 0.0;
    out.actions += st.actions;
    busy += st.busy_s;
    out.bytes_per_step += static_cast<double>(st.bytes_sent);
    out.replicas.push_back(r);
  }
  out.bytes_per_step /= static_cast<double>(std::max<std::int64_t>(1, out.steps));
  out.bubble = s.pipeline_seconds > 0 && out.devices > 0
                   ? std::clamp(1 - busy / (out.devices * s.pipeline_seconds), 0.0, 1.0)
                   : 0;
  out.predicted_bubble = t.predicted_bubble;
  out.steady = t.steady;
  out.step_ms = 1e3 * t.step_s;
  out.predicted_step_ms = 1e3 * t.predicted_step_s;
  out.ratio = t.ratio;
  out.overhead_us_per_action =
      per_action_us(out.makespan_ms, out.predicted_makespan_ms, out.actions, out.devices);
  return out;
}

}  // namespace

namespace {

BenchReport run_bench_checked(const train::Config& config, const BenchOptions& options) {
  const models::Model model = train::config_model(config);
  const std::int64_t steps = options.steps.value_or(config.train.steps);
  bool sim = false;
  if (config.pipeline) {
    try {
      sim = on_sim(
          train::pipeline_plan(*config.pipeline, config.train.minibatch, model.num_layers(), steps),
          config);
    } catch (const ts::ScheduleError& e) {
      throw train::ConfigError(config.where.pipeline, "pipeline", e.what());
    }
  }
  if (!sim && options.group != nullptr) {
    throw UsageError(
        "bench: across processes, tandem bench runs plans on sim stages (timed, no data); for "
        "stages that compute, tandem train's summary reports a job's throughput and utilization");
  }
  if (!sim && (options.link_gbit_s > 0 || options.link_latency_us > 0)) {
    throw UsageError(
        "bench: --link-gbit-s and --link-latency-us model the links of sim stages; this config's "
        "stages compute (their messages are measured)");
  }
  if (!sim && options.profile) {
    throw UsageError(
        "bench: --profile gives the durations of sim stages; this config's stages compute "
        "(their durations are measured)");
  }
  BenchReport out = sim ? bench_sim(config, options) : bench_trained(config, options);
  out.config = config.file;
  return out;
}

}  // namespace

BenchReport run_bench(const train::Config& config, const BenchOptions& options) {
  return train::at_config(config, [&] { return run_bench_checked(config, options); });
}

std::string format_bench(const BenchReport& r) {
  std::string out = fmt::format("bench {}: {} steps of minibatch {} on {}\n{}\n", r.config, r.steps,
                                r.minibatch, r.mode, r.plan_line);
  out += fmt::format("prediction: schedules::Simulator, {}\n\n", r.durations);
  out += fmt::format("{:<24} {:>8} {:>10} {:>12} {:>12}\n", "replica", "actions", "busy s",
                     "utilization", "predicted");
  for (const BenchReplica& x : r.replicas) {
    const std::string name = fmt::format("stage {} replica {} ({})", x.stage, x.replica,
                                         x.placement.empty() ? "-" : x.placement);
    out += fmt::format("{:<24} {:>8} {:>10.4f} {:>11.1f}% {:>11.1f}%\n", name, x.actions, x.busy_s,
                       100 * x.utilization, 100 * x.predicted_utilization);
  }
  out += "\n";
  out += fmt::format("{:<28} {:>12} {:>12} {:>8}\n", "", "measured", "predicted", "ratio");
  const auto row = [&](const std::string& name, double m, double p, const char* unit) {
    out += fmt::format("{:<28} {:>12.4g} {:>12.4g} {:>8.3f}{}\n", name, m, p,
                       p > 0 ? m / p : std::numeric_limits<double>::infinity(), unit);
  };
  row("samples/s", r.samples_per_s, r.predicted_samples_per_s, "");
  row(r.steady ? "step ms (steady state)" : "step ms (makespan / steps)", r.step_ms,
      r.predicted_step_ms, "");
  row("makespan ms", r.makespan_ms, r.predicted_makespan_ms, "");
  out += fmt::format("{:<28} {:>11.1f}% {:>11.1f}%\n", "bubble", 100 * r.bubble,
                     100 * r.predicted_bubble);
  out += fmt::format("{:<28} {:>12.4g}\n", "MB sent per step", r.bytes_per_step / 1e6);
  out += fmt::format(
      "ratio (step time, measured / predicted): {:.4f}; overhead {:.1f} us per action ({} "
      "actions on {} replicas)\n",
      r.ratio, r.overhead_us_per_action, r.actions, r.devices);
  if (r.processes > 1) {
    out += fmt::format(
        "{} processes: each replica waited {:.4f} s ({:.1f}% of the run) beyond the schedule's "
        "bubble (communication not hidden by compute, and overhead)\n",
        r.processes, r.unhidden_s, r.seconds > 0 ? 100 * r.unhidden_s / r.seconds : 0.0);
  }
  return out;
}

nlohmann::json bench_to_json(const BenchReport& r) {
  nlohmann::json replicas = nlohmann::json::array();
  for (const BenchReplica& x : r.replicas) {
    replicas.push_back({{"device", x.device},
                        {"stage", x.stage},
                        {"replica", x.replica},
                        {"placement", x.placement},
                        {"actions", x.actions},
                        {"busy_s", x.busy_s},
                        {"utilization", x.utilization},
                        {"predicted_utilization", x.predicted_utilization}});
  }
  return {{"config", r.config},
          {"mode", r.mode},
          {"plan", r.plan_line},
          {"durations", r.durations},
          {"steps", r.steps},
          {"minibatch", r.minibatch},
          {"actions", r.actions},
          {"replicas", replicas},
          {"seconds", r.seconds},
          {"samples_per_s", r.samples_per_s},
          {"predicted_samples_per_s", r.predicted_samples_per_s},
          {"bubble", r.bubble},
          {"predicted_bubble", r.predicted_bubble},
          {"steady", r.steady},
          {"processes", r.processes},
          {"unhidden_s", r.unhidden_s},
          {"step_ms", r.step_ms},
          {"predicted_step_ms", r.predicted_step_ms},
          {"makespan_ms", r.makespan_ms},
          {"predicted_makespan_ms", r.predicted_makespan_ms},
          {"ratio", r.ratio},
          {"overhead_us_per_action", r.overhead_us_per_action},
          {"bytes_per_step", r.bytes_per_step}};
}

}  // namespace tandem::apps
