// The runtime against its own simulator. On the sim device nothing is computed: every op ends
// by a timer message after its configured duration, so the wall makespan of Pipeline::run()
// minus the simulator's makespan of the same action list, with the same durations, is the
// runtime's own overhead on top of the schedule (goal: within 2% for every schedule).
//
//   bench_pipeline_sim [--repetitions=N] [--filter=SUBSTRING] [--no-analysis] [--probe-only]
//                      [--timerslack-ns=N]
//
// Prints a table and, last, one BENCH_JSON line in the format of json_line_reporter.hpp.
#include <sys/prctl.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "actors/pipeline.hpp"
#include "models/model.hpp"
#include "models/model_spec.hpp"
#include "runtime/actor_system.hpp"
#include "runtime/scheduler.hpp"
#include "runtime/timer_service.hpp"
#include "schedules/detail/graph.hpp"
#include "schedules/schedule.hpp"
#include "schedules/simulator.hpp"

namespace tandem::bench {
namespace {

using Clock = std::chrono::steady_clock;
using schedules::Action;
using schedules::ActionList;
using schedules::Op;
using schedules::ScheduleKind;
using schedules::ScheduleParams;

constexpr double kStepMs = 0.2;

// Per-layer durations, slightly uneven so that stages differ: per stage of 2 layers F takes
// 1.0-1.2 ms and a fused B 1.6-1.9 ms (1.1-1.4 ms on stage 0, whose first layer computes no
// input gradient); split, B 0.9-1.0 ms and W 0.7-0.9 ms.
models::SimCosts layer_costs(int layers) {
  models::SimCosts c;
  for (int i = 0; i < layers; ++i) {
    c.forward_ms.push_back(0.50 + 0.05 * (i % 3));
    c.backward_input_ms.push_back(0.45 + 0.05 * (i % 2));
    c.backward_weight_ms.push_back(0.35 + 0.05 * (i % 3));
  }
  c.optimizer_step_ms = kStepMs;
  return c;
}

// The layers of every virtual stage, as Pipeline splits them (chunk c of stage s at c * p + s).
std::vector<schedules::LayerRange> vstage_layers(int layers, int vstages) {
  std::vector<schedules::LayerRange> out;
  for (int v = 0; v < vstages; ++v)
    out.push_back({v * layers / vstages, (v + 1) * layers / vstages});
  return out;
}

// Exactly what the sim device charges, per virtual stage: F the layers' forwards; B their input
// gradients (none for the model's first layer, whose input needs none) and W their weight
// gradients, which the simulator adds to B when the schedule does not split it.
schedules::SimulationCosts simulation_costs(const models::SimCosts& sim, int layers, int vstages) {
  schedules::SimulationCosts c;
  for (const auto& r : vstage_layers(layers, vstages)) {
    double f = 0, b = 0, w = 0;
    for (int i = r.begin; i < r.end; ++i) {
      f += sim.forward(i);
      if (i > 0) b += sim.backward_input(i);
      w += sim.backward_weight(i);
    }
    c.stages.push_back({.forward = f, .backward = b, .weight = w});
  }
  c.step = sim.optimizer_step_ms;
  c.sync = 0;  // an in-process all-reduce of sim tensors: messages only
  c.latency = 0;
  return c;
}

struct Case {
  std::string name;
  ScheduleParams params;
};

ScheduleParams flush(ScheduleKind kind, int p, int m) {
  ScheduleParams s;
  s.kind = kind;
  s.stages = p;
  s.slices = m;
  s.minibatch_size = m;
  s.minibatches = 1;
  return s;
}

ScheduleParams asynchronous(ScheduleKind kind, int p, int minibatches, std::vector<int> replicas) {
  ScheduleParams s;
  s.kind = kind;
  s.stages = p;
  s.slices = 1;
  s.minibatch_size = 1;
  s.replicas = std::move(replicas);
  s.minibatches = minibatches;
  return s;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  out.push_back({"gpipe_p8_m32", flush(ScheduleKind::gpipe, 8, 32)});
  out.push_back({"1f1b_p8_m32", flush(ScheduleKind::one_f_one_b, 8, 32)});
  ScheduleParams il = flush(ScheduleKind::interleaved, 8, 32);
  il.chunks = 2;
  out.push_back({"interleaved_v2_p8_m32", il});
  out.push_back({"zb_h1_p8_m32", flush(ScheduleKind::zb_h1, 8, 32)});
  out.push_back({"pipedream_p8_n32", asynchronous(ScheduleKind::pipedream, 8, 32, {})});
  out.push_back({"pipedream_2-1-1-1-1-1-1-1_n32",
                 asynchronous(ScheduleKind::pipedream, 8, 32, {2, 1, 1, 1, 1, 1, 1, 1})});
  out.push_back({"vsync_p8_n32", asynchronous(ScheduleKind::pipedream_vsync, 8, 32, {})});
  // 2BW accumulates over batches of m >= p slices: 4 batches of 8 make the same 32 slices and
  // exercise its no-flush double buffering.
  ScheduleParams bw = flush(ScheduleKind::pipedream_2bw, 8, 8);
  bw.minibatches = 4;
  out.push_back({"2bw_p8_m8_x4", bw});
  // UMPIPE: 64 samples, 32 slices per stage of sizes 1 and 3 alternating (the order flips from
  // stage to stage) forward, 2 each backward: every stage re-slices what it receives.
  ScheduleParams um = flush(ScheduleKind::umpipe, 8, 32);
  um.minibatch_size = 64;
  for (int s = 0; s < 8; ++s) {
    std::vector<std::int64_t> f, b;
    for (int i = 0; i < 16; ++i) {
      f.push_back(s % 2 == 0 ? 1 : 3);
      f.push_back(s % 2 == 0 ? 3 : 1);
      b.push_back(2);
      b.push_back(2);
    }
    um.forward_slices.push_back(f);
    um.backward_slices.push_back(b);
  }
  out.push_back({"umpipe_p8_b64_unequal", um});
  out.push_back({"gpipe_p16_m64", flush(ScheduleKind::gpipe, 16, 64)});
  out.push_back({"1f1b_p16_m64", flush(ScheduleKind::one_f_one_b, 16, 64)});
  return out;
}

double op_ms(const Action& a, const schedules::StageCosts& c,
             const schedules::SimulationCosts& sc) {
  switch (a.op) {
    case Op::F:
      return c.forward(a.slice.size());
    case Op::B:
      return c.backward(a.slice.size()) + (a.with_weight ? c.weight(a.slice.size()) : 0.0);
    case Op::W:
      return c.weight(a.slice.size());
    case Op::STEP:
      return sc.step;
    case Op::SYNC:
      return sc.sync;
  }
  return 0;
}

// The most actions on any chain of the simulated timeline where each action starts exactly
// when its predecessor (on its device, or a dependency) ends: the critical path's length in
// actions. Where several chains tie, the longest is taken, so the overhead per action it gives
// is a lower bound.
int critical_actions(const ActionList& list, const schedules::SimulationResult& r) {
  schedules::detail::Graph g;
  schedules::detail::build_graph(list, g);
  const std::uint32_t n = g.size();
  std::vector<double> start(n), end(n);
  for (const auto& iv : r.timeline) {
    const std::uint32_t id = g.device_begin[static_cast<std::size_t>(iv.device)] + iv.index;
    start[id] = iv.start;
    end[id] = iv.end;
  }
  // Ids are not topologically ordered across devices: relax until nothing changes.
  std::vector<int> depth(n, 1);
  for (bool changed = true; changed;) {
    changed = false;
    for (std::uint32_t id = 0; id < n; ++id) {
      int best = 1;
      auto consider = [&](std::uint32_t pred) {
        if (std::abs(end[pred] - start[id]) < 1e-9) best = std::max(best, depth[pred] + 1);
      };
      if (!g.first_on_device(id)) consider(id - 1);
      for (std::uint32_t k = g.pred_begin[id]; k < g.pred_begin[id + 1]; ++k) {
        consider(g.preds[k] & schedules::detail::kIdMask);
      }
      if (best != depth[id]) {
        depth[id] = best;
        changed = true;
      }
    }
  }
  int out = 0;
  for (std::uint32_t id = 0; id < n; ++id) {
    if (std::abs(end[id] - r.makespan) < 1e-9) out = std::max(out, depth[id]);
  }
  return out;
}

std::string loadavg() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

double load1() {
  std::ifstream f("/proc/loadavg");
  double a = 0;
  f >> a;
  return a;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

struct Run {
  double ms = 0;
  // The whole process during run(): CPU time (every thread), and how often its threads were
  // preempted (involuntary context switches: another process took the core).
  double cpu_ms = 0;
  long preempted = 0;
  long switches = 0;            // voluntary context switches (a thread went to sleep), all threads
  long main_switches = 0;       // those of the thread waiting in run()
  std::vector<double> busy_ms;  // what the sim device charged, per device
  // Filled by an observed run: one start per action, by device and position.
  std::vector<std::vector<Clock::time_point>> starts;
};

Run run_pipeline(const models::Model& model, const ScheduleParams& params,
                 const models::SimCosts& sim, bool observe) {
  actors::PipelineSpec spec;
  spec.model = &model;
  std::vector<schedules::StagePlan> stages;
  const int n = model.num_layers();
  for (int s = 0; s < params.stages; ++s) {
    schedules::StagePlan sp;
    sp.layers = {s * n / params.stages, (s + 1) * n / params.stages};
    sp.replicas.assign(static_cast<std::size_t>(params.replicas_of(s)),
                       schedules::Placement{"", "sim"});
    stages.push_back(sp);
  }
  spec.plan = schedules::Plan::make(stages, params);
  spec.sim_costs = sim;
  const std::int64_t rows = params.samples();
  const std::int64_t width = model.spec().widths.front();
  spec.data = [rows, width](std::int64_t) {
    return actors::MinibatchData::whole(Tensor::empty({rows, width}, DType::f32, Device::sim()),
                                        Tensor::empty({rows}, DType::i32, Device::sim()));
  };
  Run out;
  if (observe) {
    out.starts.resize(static_cast<std::size_t>(params.total_replicas()));
    for (auto& s : out.starts) s.reserve(4096);
    // Each replica appends to its own vector, on whichever worker runs it at the time; the
    // scheduler's hand-offs order those appends.
    spec.observer = [starts = &out.starts](const actors::StageEvent& e) {
      (*starts)[static_cast<std::size_t>(e.device)].push_back(e.start);
    };
  }
  actors::Pipeline pipeline(std::move(spec), make_work_sharing({.workers = 2}));
  rusage u0{}, u1{}, m0{}, m1{};
  getrusage(RUSAGE_SELF, &u0);
  getrusage(RUSAGE_THREAD, &m0);
  const auto t0 = Clock::now();
  const actors::PipelineResult result = pipeline.run();
  out.ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  getrusage(RUSAGE_THREAD, &m1);
  getrusage(RUSAGE_SELF, &u1);
  auto ms_of = [](const timeval& t) {
    return 1e3 * static_cast<double>(t.tv_sec) + 1e-3 * static_cast<double>(t.tv_usec);
  };
  out.cpu_ms = ms_of(u1.ru_utime) + ms_of(u1.ru_stime) - ms_of(u0.ru_utime) - ms_of(u0.ru_stime);
  out.preempted = u1.ru_nivcsw - u0.ru_nivcsw;
  out.switches = u1.ru_nvcsw - u0.ru_nvcsw;
  out.main_switches = m1.ru_nvcsw - m0.ru_nvcsw;
  for (const auto& st : result.stages) out.busy_ms.push_back(1e3 * st.busy_s);
  return out;
}

// Where the overhead goes, from one observed run: for each action, how late it started after
// the moment it could have (the nominal end, start + configured duration, of its device's
// previous action or of its latest input's producer, whichever is later). "own" are actions
// released by their device's previous op (the OpDone timer message), "input" those released
// by another device's op (its OpDone, then the tensor's message).
struct Reaction {
  std::vector<double> own_us, input_us;
  double run_ms = 0;
};

Reaction analyse(const ActionList& list, const schedules::SimulationCosts& sc, const Run& run) {
  schedules::detail::Graph g;
  schedules::detail::build_graph(list, g);
  const std::uint32_t n = g.size();
  std::vector<double> start(n, -1), end(n, -1);
  std::vector<bool> skip(n, false);
  const Clock::time_point t0 = [&] {
    Clock::time_point t = Clock::time_point::max();
    for (const auto& d : run.starts) {
      if (!d.empty()) t = std::min(t, d.front());
    }
    return t;
  }();
  for (int d = 0; d < g.devices; ++d) {
    const auto& s = run.starts[static_cast<std::size_t>(d)];
    const auto& acts = list.devices[static_cast<std::size_t>(d)];
    if (s.size() != acts.size()) {
      std::fprintf(stderr, "analysis: device %d reported %zu actions of %zu\n", d, s.size(),
                   acts.size());
      return {};
    }
    for (std::size_t i = 0; i < acts.size(); ++i) {
      const std::uint32_t id =
          g.device_begin[static_cast<std::size_t>(d)] + static_cast<std::uint32_t>(i);
      const Action& a = acts[i];
      start[id] = std::chrono::duration<double, std::micro>(s[i] - t0).count();
      const auto& c = sc.stages[static_cast<std::size_t>(g.vstage[id])];
      end[id] = start[id] + 1e3 * op_ms(a, c, sc);
      // A SYNC ends at the rendezvous, which its start does not tell.
      skip[id] = a.op == Op::SYNC;
    }
  }
  Reaction out;
  for (std::uint32_t id = 0; id < n; ++id) {
    if (skip[id]) continue;
    double own = -1e300, input = -1e300;
    bool bad = false;
    if (!g.first_on_device(id)) {
      own = end[id - 1];
      bad = skip[id - 1];
    }
    for (std::uint32_t k = g.pred_begin[id]; k < g.pred_begin[id + 1]; ++k) {
      const std::uint32_t p = g.preds[k] & schedules::detail::kIdMask;
      if (g.device[p] == g.device[id]) {
        own = std::max(own, end[p]);
      } else {
        input = std::max(input, end[p]);
      }
      bad = bad || skip[p];
    }
    if (bad || (own < -1e299 && input < -1e299)) continue;  // the first action of a device
    (own >= input ? out.own_us : out.input_us).push_back(start[id] - std::max(own, input));
  }
  return out;
}

// The timer path alone, outside any pipeline: an actor that asks for a message 1.5 ms later,
// 300 times, on the same 2-worker scheduler; lateness = arrival - deadline. Also the timer
// thread's own lateness (TimerService callback, before any actor is involved).
struct Tick {
  static constexpr std::string_view kName = "bench.pipeline_sim.tick";
  std::int64_t deadline_ns;
};

class Sleeper final : public Actor {
 public:
  Sleeper(int count, std::vector<double>* lateness, std::atomic<bool>* done)
      : Actor("sleeper"), left_(count), lateness_(lateness), done_(done) {}

 protected:
  void on_message(Message& m) override {
    const auto now = Clock::now().time_since_epoch().count();
    if (m.as<Tick>().deadline_ns != 0) {
      lateness_->push_back(static_cast<double>(now - m.as<Tick>().deadline_ns) / 1e3);
    }
    if (left_-- == 0) {
      done_->store(true, std::memory_order_release);
      done_->notify_all();
      return;
    }
    const auto delay = std::chrono::microseconds(1500);
    system().send_after(delay, this,
                        make_message(Tick{(Clock::now() + delay).time_since_epoch().count()}));
  }

 private:
  int left_;
  std::vector<double>* lateness_;
  std::atomic<bool>* done_;
};

struct Probe {
  std::vector<double> actor_us, timer_us, sleep_us, spin_us;
};

Probe timer_probe() {
  Probe out;
  out.actor_us.reserve(400);
  std::atomic<bool> done{false};
  {
    ActorSystem system(make_work_sharing({.workers = 2}));
    Sleeper* s = system.spawn<Sleeper>(300, &out.actor_us, &done);
    (void)system.send(s, Tick{0});
    done.wait(false, std::memory_order_acquire);
    system.wait_idle();
  }
  TimerService timers;
  for (int i = 0; i < 300; ++i) {
    std::atomic<bool> fired{false};
    const auto deadline = Clock::now() + std::chrono::microseconds(1500);
    timers.at(deadline, [&](bool) {
      out.timer_us.push_back(
          std::chrono::duration<double, std::micro>(Clock::now() - deadline).count());
      fired.store(true, std::memory_order_release);
      fired.notify_all();
    });
    fired.wait(false, std::memory_order_acquire);
  }
  // What a thread's wake-up itself costs, and what sleeping to 100 us before the deadline and
  // spinning the rest would give (a design a timer thread could adopt).
  for (int i = 0; i < 300; ++i) {
    const auto deadline = Clock::now() + std::chrono::microseconds(1500);
    std::this_thread::sleep_until(deadline);
    out.sleep_us.push_back(
        std::chrono::duration<double, std::micro>(Clock::now() - deadline).count());
  }
  for (int i = 0; i < 300; ++i) {
    const auto deadline = Clock::now() + std::chrono::microseconds(1500);
    std::this_thread::sleep_until(deadline - std::chrono::microseconds(100));
    while (Clock::now() < deadline) {
    }
    out.spin_us.push_back(
        std::chrono::duration<double, std::micro>(Clock::now() - deadline).count());
  }
  return out;
}

int main_impl(int argc, char** argv) {
  int repetitions = 5;
  std::string filter;
  bool analysis = true;
  bool probe_only = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a.starts_with("--repetitions=")) {
      repetitions = std::max(1, std::stoi(std::string(a.substr(14))));
    } else if (a.starts_with("--filter=")) {
      filter = std::string(a.substr(9));
    } else if (a == "--no-analysis") {
      analysis = false;
    } else if (a == "--probe-only") {
      probe_only = true;
    } else if (a.starts_with("--timerslack-ns=")) {
      // Threads inherit the slack of the thread that creates them: this sets it for the
      // workers and the timer thread of every system created below.
      const unsigned long ns = std::stoul(std::string(a.substr(16)));
      if (prctl(PR_SET_TIMERSLACK, ns, 0, 0, 0) != 0) {
        std::perror("prctl(PR_SET_TIMERSLACK)");
        return 1;
      }
    } else {
      std::fprintf(stderr,
                   "usage: bench_pipeline_sim [--repetitions=N] [--filter=SUBSTRING] "
                   "[--no-analysis] [--probe-only] [--timerslack-ns=N]\n");
      return 1;
    }
  }
  std::printf("load average at start: %s\n", loadavg().c_str());
  std::printf(
      "measured: wall time of Pipeline::run() on the sim device, make_work_sharing({.workers = "
      "2}), median (min) of %d runs\npredicted: schedules::Simulator, same action list, same "
      "durations, latency 0\nper action: (measured median - predicted) / actions on the "
      "critical path\ncpu ms: CPU time of the whole process during run() (median); preempt: "
      "involuntary context switches during run(); sleeps: voluntary ones (all threads), main: "
      "those of the thread waiting in run() (medians)\n\n",
      repetitions);
  std::printf("%-30s %7s %6s %10s %10s %10s %8s %8s %9s %6s %7s %7s %7s %7s %s\n", "case",
              "actions", "crit", "pred ms", "meas ms", "min ms", "ratio", "diff ms", "us/crit",
              "<=2%", "cpu ms", "preempt", "sleeps", "main", "load");
  nlohmann::json results = nlohmann::json::object();
  std::vector<std::pair<std::string, Reaction>> reactions;
  for (const Case& c : cases()) {
    if (probe_only) break;
    if (!filter.empty() && c.name.find(filter) == std::string::npos) continue;
    const int p = c.params.stages;
    const int layers = 2 * p;
    std::vector<std::int64_t> widths(static_cast<std::size_t>(layers + 1), 8);
    const models::Model model = models::Model::build(models::mlp_spec(widths));
    const models::SimCosts sim = layer_costs(layers);
    const schedules::SimulationCosts sc = simulation_costs(sim, layers, p * c.params.chunks);
    const ActionList list = schedules::Schedule(c.params).materialize();
    schedules::Simulator simulator;
    const schedules::SimulationResult predicted = simulator.run(list, sc, true);
    const int crit = critical_actions(list, predicted);

    const double load_before = load1();
    std::vector<double> ms, cpu, preempted, switches, main_switches;
    // Warm-up (first touches, thread start), and the check that the simulator is given exactly
    // what the sim device charges.
    const Run warm = run_pipeline(model, c.params, sim, false);
    double busy_error = 0;
    for (std::size_t d = 0; d < warm.busy_ms.size(); ++d) {
      busy_error = std::max(busy_error, std::abs(warm.busy_ms[d] - predicted.busy[d]));
    }
    if (busy_error > 1e-6) {
      std::fprintf(stderr, "%s: the sim device charged %.6f ms more or less than simulated\n",
                   c.name.c_str(), busy_error);
      return 1;
    }
    for (int r = 0; r < repetitions; ++r) {
      const Run run = run_pipeline(model, c.params, sim, false);
      ms.push_back(run.ms);
      cpu.push_back(run.cpu_ms);
      preempted.push_back(static_cast<double>(run.preempted));
      switches.push_back(static_cast<double>(run.switches));
      main_switches.push_back(static_cast<double>(run.main_switches));
    }
    const double load_after = load1();
    const double med = percentile(ms, 0.5);
    const double lo = *std::min_element(ms.begin(), ms.end());
    const double ratio = med / predicted.makespan;
    const double diff = med - predicted.makespan;
    const double per_action_us = 1e3 * diff / crit;
    std::printf(
        "%-30s %7zu %6d %10.2f %10.2f %10.2f %8.4f %8.2f %9.1f %6s %7.1f %7.0f %7.0f %7.0f "
        "%.2f-%.2f\n",
        c.name.c_str(), list.size(), crit, predicted.makespan, med, lo, ratio, diff, per_action_us,
        ratio <= 1.02 ? "yes" : "NO", percentile(cpu, 0.5), percentile(preempted, 0.5),
        percentile(switches, 0.5), percentile(main_switches, 0.5), load_before, load_after);
    std::fflush(stdout);
    results[c.name] = {{"real_ns", med * 1e6},
                       {"iterations", repetitions},
                       {"counters",
                        {{"predicted_ms", predicted.makespan},
                         {"measured_ms", med},
                         {"measured_min_ms", lo},
                         {"ratio", ratio},
                         {"diff_ms", diff},
                         {"per_critical_action_us", per_action_us},
                         {"critical_actions", crit},
                         {"cpu_ms", percentile(cpu, 0.5)},
                         {"preempted", percentile(preempted, 0.5)},
                         {"sleeps", percentile(switches, 0.5)},
                         {"main_thread_sleeps", percentile(main_switches, 0.5)},
                         {"actions", static_cast<double>(list.size())},
                         {"load_before", load_before},
                         {"load_after", load_after}}}};
    if (analysis) {
      const Run observed = run_pipeline(model, c.params, sim, true);
      Reaction re = analyse(list, sc, observed);
      re.run_ms = observed.ms;
      reactions.emplace_back(c.name, std::move(re));
    }
  }
  if (!reactions.empty()) {
    std::printf(
        "\nreaction: how late each action started after it could have (the nominal end of what "
        "released it), one observed run per case, microseconds\n");
    std::printf("%-30s %8s | %6s %8s %8s %8s | %6s %8s %8s %8s\n", "case", "run ms", "own n",
                "median", "p90", "max", "input n", "median", "p90", "max");
    for (const auto& [name, r] : reactions) {
      std::printf("%-30s %8.2f | %6zu %8.1f %8.1f %8.1f | %6zu %8.1f %8.1f %8.1f\n", name.c_str(),
                  r.run_ms, r.own_us.size(), percentile(r.own_us, 0.5), percentile(r.own_us, 0.9),
                  percentile(r.own_us, 1.0), r.input_us.size(), percentile(r.input_us, 0.5),
                  percentile(r.input_us, 0.9), percentile(r.input_us, 1.0));
      auto& counters = results[name]["counters"];
      counters["reaction_own_median_us"] = percentile(r.own_us, 0.5);
      counters["reaction_input_median_us"] = percentile(r.input_us, 0.5);
    }
  }
  if (analysis) {
    const Probe probe = timer_probe();
    std::printf(
        "\ntimer path alone, 1.5 ms delays, lateness after the deadline in microseconds "
        "(median / p90 / max):\n  TimerService callback on its thread: %.1f / %.1f / %.1f\n"
        "  send_after to an actor on 2 workers (timer + delivery + wake): %.1f / %.1f / %.1f\n"
        "  std::this_thread::sleep_until on the main thread: %.1f / %.1f / %.1f\n"
        "  sleep_until(deadline - 100 us), then spin: %.1f / %.1f / %.1f\n",
        percentile(probe.timer_us, 0.5), percentile(probe.timer_us, 0.9),
        percentile(probe.timer_us, 1.0), percentile(probe.actor_us, 0.5),
        percentile(probe.actor_us, 0.9), percentile(probe.actor_us, 1.0),
        percentile(probe.sleep_us, 0.5), percentile(probe.sleep_us, 0.9),
        percentile(probe.sleep_us, 1.0), percentile(probe.spin_us, 0.5),
        percentile(probe.spin_us, 0.9), percentile(probe.spin_us, 1.0));
    results["timer_probe"] = {{"real_ns", percentile(probe.actor_us, 0.5) * 1e3},
                              {"iterations", static_cast<double>(probe.actor_us.size())},
                              {"counters",
                               {{"timer_thread_median_us", percentile(probe.timer_us, 0.5)},
                                {"timer_thread_p90_us", percentile(probe.timer_us, 0.9)},
                                {"actor_median_us", percentile(probe.actor_us, 0.5)},
                                {"actor_p90_us", percentile(probe.actor_us, 0.9)},
                                {"sleep_until_median_us", percentile(probe.sleep_us, 0.5)},
                                {"sleep_then_spin_median_us", percentile(probe.spin_us, 0.5)}}}};
  }
  std::printf("load average at end: %s\n", loadavg().c_str());
  const nlohmann::json line = {{"suite", "pipeline_sim"}, {"results", results}};
  std::printf("BENCH_JSON %s\n", line.dump().c_str());
  return 0;
}

}  // namespace
}  // namespace tandem::bench

int main(int argc, char** argv) {
  return tandem::bench::main_impl(argc, argv);
}
