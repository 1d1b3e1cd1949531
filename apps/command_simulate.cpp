// `tandem simulate`: builds a schedule (or reads a hand-written order), validates it, times
// it with the discrete-event simulator, prints a table and an ASCII timeline (or JSON; or, with
// --print-order, the action list alone), and draws an SVG timeline.
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "apps/commands.hpp"
#include "apps/output_file.hpp"
#include "apps/usage_error.hpp"
#include "schedules/report.hpp"
#include "schedules/schedule.hpp"
#include "schedules/simulator.hpp"
#include "schedules/text_form.hpp"
#include "schedules/timeline_svg.hpp"
#include "schedules/validator.hpp"
#include "train/config_limits.hpp"

namespace tandem::apps {
namespace {

namespace ts = tandem::schedules;

// Runs with more actions than this report their phases on stderr.
constexpr double kLargeRun = 2e6;

struct SimulateOptions {
  std::string schedule = "1f1b";
  int stages = 4;
  int slices = 8;
  int chunks = 1;
  std::int64_t minibatch = 0;
  std::int64_t minibatches = 0;
  std::string replicas;
  std::string forward_slices, backward_slices;
  bool remat = false;
  std::string order;
  std::string tf = "1", tb = "2", tw = "0";
  double delay = 0;
  double bandwidth = std::numeric_limits<double>::infinity();
  bool contention = false;
  double sync = 0, step = 0;
  std::string send_bytes = "0", weight_bytes = "0", activation_bytes = "0";
  std::string svg;
  bool json = false;
  bool print_order = false;
  bool table = false;
  int width = 100;
};

[[noreturn]] void bad(const std::string& flag, const std::string& what) {
  throw UsageError("simulate: " + flag + ": " + what);
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::string piece;
  std::istringstream in(text);
  while (std::getline(in, piece, sep)) out.push_back(piece);
  if (!text.empty() && text.back() == sep) out.emplace_back();
  return out;
}

double real(const std::string& flag, std::string_view text) {
  double v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size() || !(v >= 0) ||
      v == std::numeric_limits<double>::infinity()) {
    bad(flag, "'" + std::string(text) + "' is not a non-negative number");
  }
  return v;
}

std::int64_t integer(const std::string& flag, std::string_view text) {
  std::int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size() || v < 1) {
    bad(flag, "'" + std::string(text) + "' is not a positive integer");
  }
  return v;
}

// "2", "b", "0.5b" or "2+0.5b": a duration as a function of the slice's sample count b.
ts::Cost cost(const std::string& flag, const std::string& text) {
  const auto plus = text.find('+');
  const std::string fixed = plus == std::string::npos ? "" : text.substr(0, plus);
  const std::string rest = plus == std::string::npos ? text : text.substr(plus + 1);
  if (!rest.empty() && rest.back() == 'b') {
    const std::string_view k = std::string_view(rest).substr(0, rest.size() - 1);
    const double per_sample = k.empty() ? 1.0 : real(flag, k);
    return ts::Cost::affine(fixed.empty() ? 0.0 : real(flag, fixed), per_sample);
  }
  if (plus != std::string::npos) bad(flag, "'" + text + "': expected a+kb");
  return ts::Cost(real(flag, text));
}

// One value for every stage, or one per stage (per virtual stage when `alternative` > 0).
template <class T, class Parse>
std::vector<T> per_stage(const std::string& flag, const std::string& text, int stages,
                         int alternative, Parse parse) {
  std::vector<T> out;
  for (const auto& piece : split(text, ',')) out.push_back(parse(flag, piece));
  const int n = static_cast<int>(out.size());
  if (n == 1) return std::vector<T>(stages, out[0]);
  if (n != stages && n != alternative) {
    bad(flag, "expected 1 or " + std::to_string(stages) + " values" +
                  (alternative > 0 ? " (or " + std::to_string(alternative) + ", one per chunk)"
                                   : std::string()) +
                  ", got " + std::to_string(n));
  }
  return out;
}

std::vector<std::vector<std::int64_t>> compositions(const std::string& flag,
                                                    const std::string& text) {
  std::vector<std::vector<std::int64_t>> out;
  if (text.empty()) return out;
  for (const auto& stage : split(text, ';')) {
    out.emplace_back();
    for (const auto& piece : split(stage, ',')) out.back().push_back(integer(flag, piece));
  }
  return out;
}

// Bytes the simulator holds per action (the list, its dependency graph, the timeline and the
// validator's indexes), measured on large runs with some margin; only for refusing runs that
// cannot fit before they start.
constexpr double kBytesPerAction = 200;

// Actions the schedule will have, from its parameters alone: each slice of each minibatch visits
// every (virtual) stage once with F and B (+ W when split, + a recomputed F), plus a STEP per
// minibatch per device.
double estimated_actions(const ts::ScheduleParams& p) {
  const bool split = p.kind == ts::ScheduleKind::zb_h1 || p.kind == ts::ScheduleKind::zb_v ||
                     p.kind == ts::ScheduleKind::zb_2p;
  const double ops = 2 + (split ? 1 : 0) + (p.rematerialize ? 1 : 0);
  double per_minibatch = 0;
  if (!p.forward_slices.empty() || !p.backward_slices.empty()) {
    for (const auto& f : p.forward_slices) per_minibatch += static_cast<double>(f.size());
    for (const auto& b : p.backward_slices) per_minibatch += static_cast<double>(b.size());
  } else {
    per_minibatch = ops * static_cast<double>(p.slices) * p.chunks * p.stages;
  }
  double devices = 0;
  for (int s = 0; s < p.stages; ++s) {
    devices += p.replicas.empty() ? 1 : p.replicas[static_cast<std::size_t>(s)];
  }
  const double minibatches = static_cast<double>(std::max<std::int64_t>(p.minibatches, 1));
  return minibatches * (per_minibatch + 2 * devices);
}

// Generator flags given with --order, or flags the schedule does not use: the user expects
// an effect that would silently not happen.
void check_flags(const SimulateOptions& o, const CLI::App& cmd, ts::ScheduleKind kind) {
  const auto given = [&](const char* flag) { return cmd.count(flag) > 0; };
  if (!o.order.empty()) {
    for (const char* flag :
         {"--schedule", "--stages", "--slices", "--chunks", "--minibatch", "--minibatches",
          "--replicas", "--forward-slices", "--backward-slices", "--remat"}) {
      if (given(flag)) {
        bad(flag, "does not apply with --order: the action list's header and tokens give it");
      }
    }
    return;
  }
  const std::string name(ts::to_string(kind));
  if ((given("--forward-slices") || given("--backward-slices")) &&
      kind != ts::ScheduleKind::umpipe) {
    bad(given("--forward-slices") ? "--forward-slices" : "--backward-slices",
        "per-stage slice sizes apply to schedule umpipe only, not " + name);
  }
  if (given("--slices") && kind == ts::ScheduleKind::umpipe && !o.forward_slices.empty()) {
    bad("--slices", "does not apply with --forward-slices: those give the slices");
  }
  if (given("--slices") && given("--minibatches") &&
      (kind == ts::ScheduleKind::pipedream || kind == ts::ScheduleKind::pipedream_vsync)) {
    bad("--slices", "schedule " + name + " runs whole minibatches: -m counts them, as does -n");
  }
  if (given("--chunks") && kind != ts::ScheduleKind::interleaved &&
      kind != ts::ScheduleKind::zb_v) {
    bad("--chunks",
        "model chunks per device apply to schedules interleaved and zb-v only, not " + name);
  }
  if (o.remat && kind != ts::ScheduleKind::gpipe) {
    bad("--remat", "applies to schedule gpipe only, not " + name);
  }
}

ts::ActionList build_list(const SimulateOptions& o, const CLI::App& cmd) {
  if (!o.order.empty()) {
    check_flags(o, cmd, ts::ScheduleKind::custom);
    std::error_code ec;
    const auto status = std::filesystem::status(o.order, ec);
    if (!ec && std::filesystem::exists(status) && !std::filesystem::is_regular_file(status)) {
      bad("--order", "'" + o.order + "' is not a regular file");
    }
    if (!ec && std::filesystem::file_size(o.order, ec) > (std::uintmax_t{1} << 30)) {
      bad("--order", "'" + o.order + "' is larger than 1 GiB");
    }
    std::ifstream in(o.order);
    if (!in) throw std::runtime_error("simulate: --order: cannot read '" + o.order + "'");
    std::stringstream text;
    text << in.rdbuf();
    try {
      return ts::parse_actions(text.str());
    } catch (const std::exception& e) {
      throw std::runtime_error("simulate: " + o.order + ": " + e.what());
    }
  }
  ts::ScheduleParams p;
  try {
    p.kind = ts::parse_schedule_kind(o.schedule);
  } catch (const std::exception& e) {
    bad("--schedule", e.what());
  }
  check_flags(o, cmd, p.kind);
  p.stages = o.stages;
  p.slices = o.slices;
  p.chunks = o.chunks;
  if (p.kind == ts::ScheduleKind::zb_v && cmd.count("--chunks") == 0) p.chunks = 2;
  p.minibatch_size = o.minibatch;
  p.rematerialize = o.remat;
  if (!o.replicas.empty()) {
    for (const auto& r : split(o.replicas, ',')) {
      p.replicas.push_back(static_cast<int>(integer("--replicas", r)));
    }
  }
  p.forward_slices = compositions("--forward-slices", o.forward_slices);
  p.backward_slices = compositions("--backward-slices", o.backward_slices);
  // The compositions give the slices; -m's default would go into the text form's header as a
  // slice count larger than the minibatch (`slices=8 minibatch=4`), which --order refuses.
  for (const auto* lists : {&p.forward_slices, &p.backward_slices}) {
    if (!lists->empty() && !lists->front().empty() && cmd.count("--slices") == 0) {
      p.slices = static_cast<int>(lists->front().size());
      break;
    }
  }
  // PipeDream takes whole minibatches: -m counts them unless --minibatches does.
  const bool whole =
      p.kind == ts::ScheduleKind::pipedream || p.kind == ts::ScheduleKind::pipedream_vsync;
  if (whole) p.slices = 1;
  p.minibatches = o.minibatches > 0                           ? o.minibatches
                  : whole                                     ? o.slices
                  : p.kind == ts::ScheduleKind::pipedream_2bw ? 2
                                                              : 1;
  ts::Schedule schedule(p);
  // Refuse what cannot fit before building it (`-p 100000 -m 100000`: 2e10 actions).
  const double actions = estimated_actions(schedule.params());
  const double bytes = actions * kBytesPerAction;
  const train::Machine machine = train::Machine::here();
  if (bytes > machine.memory_bytes) {
    throw UsageError("simulate: about " + std::to_string(static_cast<std::int64_t>(actions)) +
                     " actions would need about " + train::human_bytes(bytes) +
                     ", more than this " + "machine's " + train::human_bytes(machine.memory_bytes) +
                     " of memory; use fewer stages (-p), slices (-m) or minibatches (-n)");
  }
  if (actions > kLargeRun) {
    std::cerr << "simulate: building " << static_cast<std::int64_t>(actions) << " actions ("
              << train::human_bytes(bytes) << ")...\n";
  }
  return schedule.materialize();
}

ts::SimulationCosts build_costs(const SimulateOptions& o, const ts::ScheduleParams& p) {
  const int stages = p.stages;
  const int virtual_stages = p.chunks > 1 ? p.stages * p.chunks : 0;
  const auto tf = per_stage<ts::Cost>("--tf", o.tf, stages, virtual_stages, cost);
  const auto tb = per_stage<ts::Cost>("--tb", o.tb, stages, virtual_stages, cost);
  const auto tw = per_stage<ts::Cost>("--tw", o.tw, stages, virtual_stages, cost);
  const auto send = per_stage<double>("--send-bytes", o.send_bytes, stages, 0, real);
  const auto weights = per_stage<double>("--weight-bytes", o.weight_bytes, stages, 0, real);
  const auto acts = per_stage<double>("--activation-bytes", o.activation_bytes, stages, 0, real);
  if (tf.size() != tb.size() || tf.size() != tw.size()) {
    bad("--tf/--tb/--tw", "give all three per stage, or all three per chunk");
  }
  ts::SimulationCosts costs;
  for (std::size_t s = 0; s < tf.size(); ++s) {
    ts::StageCosts c;
    c.forward = tf[s];
    c.backward = tb[s];
    c.weight = tw[s];
    const std::size_t stage = s % static_cast<std::size_t>(stages);
    const double share = tf.size() > static_cast<std::size_t>(stages) ? 1.0 / p.chunks : 1.0;
    c.output_bytes = send[stage];
    c.weight_bytes = weights[stage] * share;
    c.activation_bytes = acts[stage] * share;
    c.input_bytes = stage > 0 ? send[stage - 1] : 0.0;
    costs.stages.push_back(c);
  }
  costs.latency = o.delay;
  costs.bandwidth = o.bandwidth;
  costs.contention = o.contention;
  costs.sync = o.sync;
  costs.step = o.step;
  return costs;
}

// Progress on stderr between the phases of a large run.
class Progress {
 public:
  explicit Progress(bool on) : on_(on) {}
  void operator()(const std::string& what) const {
    if (!on_) return;
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    std::cerr << "simulate: " << what << " (" << s << " s)\n";
  }

 private:
  bool on_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

std::size_t action_count(const ts::ActionList& list) {
  std::size_t n = 0;
  for (const auto& d : list.devices) n += d.size();
  return n;
}

// A result that is not a finite number is an error naming it, not a table with "inf".
void check_finite(const ts::SimulationResult& r) {
  const auto check = [](const char* what, double v) {
    if (!std::isfinite(v)) {
      throw std::runtime_error(std::string("simulate: the ") + what + " is " + std::to_string(v) +
                               ": the durations or sizes given (--tf, --tb, --tw, --sync, --step, "
                               "--delay, --*-bytes) are too large to add up");
    }
  };
  check("makespan", r.makespan);
  for (const double b : r.busy) check("busy time of a device", b);
  for (const double m : r.memory) check("memory of a device", m);
}

void run(const SimulateOptions& o, const CLI::App& cmd) {
  if (!(o.bandwidth > 0)) bad("--bandwidth", "must be positive");
  if (!(o.delay >= 0)) bad("--delay", "must be non-negative");
  if (!o.svg.empty()) check_output("simulate: --svg", o.svg, {o.order});
  const ts::ActionList list = build_list(o, cmd);
  const Progress progress(action_count(list) > kLargeRun);
  progress("built " + std::to_string(action_count(list)) + " actions; validating");
  ts::validate(list);
  progress("valid; simulating");
  const ts::SimulationCosts costs = build_costs(o, list.params);
  const ts::SimulationResult result = ts::simulate(list, costs);
  progress("simulated");
  check_finite(result);
  if (!o.svg.empty()) write_output(o.svg, ts::timeline_svg(list, result));
  // The order alone reads back with --order; the table follows it only when asked for.
  if (o.print_order) {
    std::cout << ts::format_actions(list);
    if (!o.table) return;
    std::cout << '\n';
  }
  if (o.json) {
    std::cout << ts::format_json(list, result);
  } else {
    std::cout << ts::format_report(list, result) << '\n'
              << ts::format_ascii_timeline(list, result, o.width);
  }
}

}  // namespace

void add_simulate_command(CLI::App& app) {
  auto o = std::make_shared<SimulateOptions>();
  CLI::App* sub =
      app.add_subcommand("simulate", "Time a pipeline schedule with the discrete-event simulator");
  sub->add_option("--schedule", o->schedule,
                  "naive, gpipe, 1f1b, pipedream, pipedream-vsync, 2bw, interleaved, zb-h1, "
                  "zb-v, zb-2p, umpipe")
      ->capture_default_str();
  const auto count = CLI::Range(1, 1'000'000'000);
  const auto big_count = CLI::Range(std::int64_t{1}, std::int64_t{1} << 40);
  sub->add_option("-p,--stages", o->stages, "Pipeline stages")->check(count)->capture_default_str();
  sub->add_option("-m,--slices", o->slices,
                  "Slices per minibatch (PipeDream: minibatches simulated)")
      ->check(count)
      ->capture_default_str();
  sub->add_option("-v,--chunks", o->chunks, "Model chunks per device (interleaved; zb-v: 2)")
      ->check(count)
      ->capture_default_str();
  sub->add_option("--minibatch", o->minibatch, "Samples per minibatch (default: one per slice)")
      ->check(big_count);
  sub->add_option("-n,--minibatches", o->minibatches,
                  "Minibatches (2BW: batches) to simulate (default: 1; PipeDream: -m; 2BW: 2)")
      ->check(big_count);
  sub->add_option("--replicas", o->replicas, "Replicas per stage, e.g. 2,1,1");
  sub->add_option("--forward-slices", o->forward_slices,
                  "UMPIPE forward slice sizes per stage, e.g. '1,3;1,3'");
  sub->add_option("--backward-slices", o->backward_slices,
                  "UMPIPE backward slice sizes per stage, e.g. '3,1;3,1'");
  sub->add_flag("--remat", o->remat, "GPipe: recompute the forward before each B");
  sub->add_option("--order", o->order, "Simulate a hand-written action list (text form)");
  sub->add_option("--tf", o->tf,
                  "F duration: one value or one per stage (per chunk); a, kb or a+kb in the "
                  "slice's samples b")
      ->capture_default_str();
  sub->add_option("--tb", o->tb, "B duration (also computes W unless the schedule splits it)")
      ->capture_default_str();
  sub->add_option("--tw", o->tw, "W (weight gradient) duration")->capture_default_str();
  sub->add_option("--delay", o->delay, "Latency of every message between devices")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  sub->add_option("--bandwidth", o->bandwidth, "Bytes per time unit of every link")
      ->check(CLI::PositiveNumber);
  sub->add_flag("--contention", o->contention, "Messages on one link travel one at a time");
  sub->add_option("--send-bytes", o->send_bytes,
                  "Bytes per sample a stage sends on (one value or one per stage)");
  sub->add_option("--weight-bytes", o->weight_bytes, "Bytes of one weight version per stage");
  sub->add_option("--activation-bytes", o->activation_bytes,
                  "Bytes per sample a stage keeps from F to B");
  sub->add_option("--sync", o->sync, "SYNC (all-reduce) duration")->check(CLI::NonNegativeNumber);
  sub->add_option("--step", o->step, "STEP (optimizer) duration")->check(CLI::NonNegativeNumber);
  sub->add_option("--svg", o->svg, "Write an SVG timeline to this file");
  auto* json = sub->add_flag("--json", o->json, "Print JSON instead of the table and timeline");
  auto* print_order =
      sub->add_flag("--print-order", o->print_order,
                    "Print only the action list in text form (what --order reads), not the table");
  sub->add_flag("--table", o->table,
                "With --print-order: print the table and timeline after the action list")
      ->needs(print_order);
  json->excludes(print_order);
  sub->add_option("--width", o->width, "Columns of the ASCII timeline")
      ->check(CLI::Range(20, 100000))
      ->capture_default_str();
  sub->callback([o, sub] { run(*o, *sub); });
}

}  // namespace tandem::apps
