// Statistical efficiency of every schedule: one GPT learns the same generated Markov text with
// the same seed, data order, optimizer and number of minibatches through actors::Pipeline, once
// per schedule, and the loss of every minibatch is recorded against its step and against the
// wall time at which it completed. Flush schedules compute the single-device gradient (up to
// float rounding); asynchronous ones trade staleness for throughput, which these curves show.
//
//   bench_convergence [--steps=N] [--minibatch=B] [--slices=M] [--layers=L] [--d-model=D]
//                     [--heads=H] [--seq-len=T] [--vocab=V] [--data-vocab=V] [--sharpness=S]
//                     [--samples=N] [--eval-samples=N] [--lr=X] [--beta1=X] [--warmup=N]
//                     [--lr-schedule=constant|cosine] [--seed=N] [--workers=N] [--smooth=N]
//                     [--target=LOSS | --target-gap=X] [--schedules=a,b,...] [--out=PREFIX]
//                     [--replay=1]
//
// --replay=1 also replays every multi-stage schedule without the runtime: one process, whole
// minibatches, stage s's forward at weights version weight_version(s, b) and its backward at
// the same version (stashed) or at version b (PipeDream without stashing: the newest), the
// update applied in minibatch order. Its loss curve is what the schedule's semantics give; the
// runtime's must match it up to float rounding, which tells a runtime bug from staleness. For
// flush schedules (version b everywhere) the replay is single-device training: a check of the
// replay itself.
//
// Beside the schedules: pipedream-wp and pipedream-nesterov (PipeDream with
// pipeline.async_correction weight-prediction / nesterov), pipedream-vsync-wp and 2bw-wp; and
// tau-pipedream, tau-pipedream-wp, tau-pipedream-nesterov: no pipeline, one device with each
// stage's updates delayed by PipeDream's delays (models::DelayedTrainer), uncorrected and
// corrected. A corrected schedule's replay is the delay harness with its delays.
//
// Prints a table and, last, one BENCH_JSON line (json_line_reporter.hpp's format); writes
// PREFIX.csv (one row per schedule and step) and PREFIX.json (curves and summary), which
// scripts/convergence_plot.py turns into the SVG plots of docs/convergence.md.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <numbers>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "actors/dataset_source.hpp"
#include "actors/pipeline.hpp"
#include "actors/step_seed.hpp"
#include "models/data/markov_text.hpp"
#include "models/delay_correction.hpp"
#include "models/delayed_training.hpp"
#include "models/loss.hpp"
#include "models/model.hpp"
#include "models/model_spec.hpp"
#include "models/train_step.hpp"
#include "runtime/scheduler.hpp"
#include "schedules/plan.hpp"
#include "schedules/schedule_kind.hpp"
#include "schedules/weight_versions.hpp"

namespace tandem::bench {
namespace {

using Clock = std::chrono::steady_clock;
using schedules::ScheduleKind;

struct Options {
  std::int64_t steps = 300;
  std::int64_t minibatch = 32;
  int slices = 4;
  int stages = 4;
  std::int64_t layers = 4;
  std::int64_t d_model = 64;
  std::int64_t heads = 4;
  std::int64_t seq_len = 32;
  std::int64_t vocab = 32;
  std::int64_t data_vocab = 16;
  double sharpness = 3.0;
  std::int64_t samples = 8192;
  std::int64_t eval_samples = 512;
  double lr = 1.5e-3;
  double beta1 = 0.9;  // AdamW's momentum
  std::int64_t warmup = 20;
  std::string lr_schedule = "constant";
  std::uint64_t seed = 0;
  std::size_t workers = 0;
  std::int64_t smooth = 10;
  std::optional<double> target;
  double target_gap = 0.1;
  std::vector<std::string> only;
  std::string out = "convergence";
  bool replay = false;
};

// One schedule to train with; `stages == 1` is the single-device reference.
struct Variant {
  std::string name;
  ScheduleKind kind;
  int stages;
  int slices;
  bool stashing = true;
  bool umpipe_compositions = false;
  models::AsyncCorrection correction = models::AsyncCorrection::none;
  // Not a pipeline: one device with each stage's updates delayed as `kind` delays them
  // (models::DelayedTrainer, delays schedules::update_delay).
  bool harness = false;
};

struct Curve {
  Variant variant;
  std::vector<double> losses, seconds, smoothed;
  double total_seconds = 0;
  double eval_loss = NAN;
  double eval_accuracy = NAN;
  std::optional<std::int64_t> steps_to_target;
  std::optional<double> seconds_to_target;
  models::ParamSet params;
  std::vector<double> replay;  // --replay: the losses the schedule's semantics give
  std::string error;           // the run failed: what the pipeline said
};

[[noreturn]] void usage(const std::string& what) {
  throw std::invalid_argument(what + " (see the comment at the top of convergence_bench.cpp)");
}

Options parse(int argc, char** argv) {
  Options o;
  using Setter = std::function<void(const std::string&)>;
  const std::map<std::string, Setter> setters = {
      {"steps", [&](const std::string& v) { o.steps = std::stoll(v); }},
      {"minibatch", [&](const std::string& v) { o.minibatch = std::stoll(v); }},
      {"slices", [&](const std::string& v) { o.slices = std::stoi(v); }},
      {"layers", [&](const std::string& v) { o.layers = std::stoll(v); }},
      {"d-model", [&](const std::string& v) { o.d_model = std::stoll(v); }},
      {"heads", [&](const std::string& v) { o.heads = std::stoll(v); }},
      {"seq-len", [&](const std::string& v) { o.seq_len = std::stoll(v); }},
      {"vocab", [&](const std::string& v) { o.vocab = std::stoll(v); }},
      {"data-vocab", [&](const std::string& v) { o.data_vocab = std::stoll(v); }},
      {"sharpness", [&](const std::string& v) { o.sharpness = std::stod(v); }},
      {"samples", [&](const std::string& v) { o.samples = std::stoll(v); }},
      {"eval-samples", [&](const std::string& v) { o.eval_samples = std::stoll(v); }},
      {"lr", [&](const std::string& v) { o.lr = std::stod(v); }},
      {"beta1", [&](const std::string& v) { o.beta1 = std::stod(v); }},
      {"warmup", [&](const std::string& v) { o.warmup = std::stoll(v); }},
      {"lr-schedule", [&](const std::string& v) { o.lr_schedule = v; }},
      {"seed", [&](const std::string& v) { o.seed = std::stoull(v); }},
      {"workers", [&](const std::string& v) { o.workers = std::stoul(v); }},
      {"smooth", [&](const std::string& v) { o.smooth = std::stoll(v); }},
      {"target", [&](const std::string& v) { o.target = std::stod(v); }},
      {"target-gap", [&](const std::string& v) { o.target_gap = std::stod(v); }},
      {"out", [&](const std::string& v) { o.out = v; }},
      {"replay", [&](const std::string& v) { o.replay = v != "0"; }},
      {"schedules",
       [&](const std::string& v) {
         std::stringstream ss(v);
         for (std::string name; std::getline(ss, name, ',');) o.only.push_back(name);
       }},
  };
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    const auto eq = a.find('=');
    if (a.substr(0, 2) != "--" || eq == std::string_view::npos)
      usage("bad argument '" + std::string(a) + "'");
    const std::string key(a.substr(2, eq - 2));
    const std::string v(a.substr(eq + 1));
    const auto it = setters.find(key);
    if (it == setters.end()) usage("unknown flag --" + key);
    try {
      it->second(v);
    } catch (const std::logic_error&) {  // std::stoll and friends
      usage("bad value in '" + std::string(a) + "'");
    }
  }
  if (o.steps < 1 || o.minibatch < 8 || o.slices < 1 || o.smooth < 1) {
    usage("--steps, --slices and --smooth must be >= 1, --minibatch >= 8");
  }
  if (o.layers < o.stages) usage("--layers must be >= 4: every stage holds a block");
  // 2BW accumulates a batch of m >= p slices.
  if (o.slices < o.stages) usage("--slices must be >= 4 (2BW needs m >= p)");
  if (o.lr_schedule != "constant" && o.lr_schedule != "cosine")
    usage("--lr-schedule must be constant or cosine");
  return o;
}

std::vector<Variant> variants(const Options& o) {
  const int p = o.stages, m = o.slices;
  constexpr auto kNone = models::AsyncCorrection::none;
  constexpr auto kPredict = models::AsyncCorrection::weight_prediction;
  constexpr auto kNesterov = models::AsyncCorrection::nesterov;
  std::vector<Variant> all = {
      {"single-device", ScheduleKind::gpipe, 1, 1},
      {"gpipe", ScheduleKind::gpipe, p, m},
      {"1f1b", ScheduleKind::one_f_one_b, p, m},
      {"pipedream", ScheduleKind::pipedream, p, 1},
      {"pipedream-nostash", ScheduleKind::pipedream, p, 1, false},
      {"pipedream-vsync", ScheduleKind::pipedream_vsync, p, 1},
      {"2bw", ScheduleKind::pipedream_2bw, p, m},
      {"umpipe", ScheduleKind::umpipe, p, m, true, true},
      {"pipedream-wp", ScheduleKind::pipedream, p, 1, true, false, kPredict},
      {"pipedream-nesterov", ScheduleKind::pipedream, p, 1, true, false, kNesterov},
      {"pipedream-vsync-wp", ScheduleKind::pipedream_vsync, p, 1, true, false, kPredict},
      {"2bw-wp", ScheduleKind::pipedream_2bw, p, m, true, false, kPredict},
      {"tau-pipedream", ScheduleKind::pipedream, p, 1, true, false, kNone, true},
      {"tau-pipedream-wp", ScheduleKind::pipedream, p, 1, true, false, kPredict, true},
      {"tau-pipedream-nesterov", ScheduleKind::pipedream, p, 1, true, false, kNesterov, true},
  };
  if (o.only.empty()) return all;
  std::vector<Variant> out;
  for (const std::string& name : o.only) {
    auto it =
        std::find_if(all.begin(), all.end(), [&](const Variant& v) { return v.name == name; });
    if (it == all.end()) usage("unknown schedule '" + name + "' in --schedules");
    out.push_back(*it);
  }
  return out;
}

// GPT layers: embedding, `layers` blocks, final LayerNorm, head. Blocks are split evenly; the
// first stage also holds the embedding and the last the LayerNorm and head (as
// configs/default.yaml).
schedules::Plan make_plan(const Options& o, const Variant& v, int num_layers) {
  schedules::ScheduleParams params;
  params.kind = v.kind;
  params.slices = v.slices;
  params.minibatch_size = o.minibatch;
  params.minibatches = o.steps;
  const int p = v.stages;
  const auto blocks = static_cast<int>(o.layers);
  std::vector<schedules::StagePlan> stages;
  for (int s = 0; s < p; ++s) {
    schedules::StagePlan sp;
    sp.layers.begin = s == 0 ? 0 : 1 + s * blocks / p;
    sp.layers.end = s == p - 1 ? num_layers : 1 + (s + 1) * blocks / p;
    stages.push_back(sp);
  }
  if (v.umpipe_compositions) {
    // Unequal slices, different per stage: small forward slices first (the next stage starts
    // early), larger backward slices (fewer, more efficient GEMMs while the pipeline drains).
    const std::int64_t b = o.minibatch;
    for (int s = 0; s < p; ++s) {
      if (s % 2 == 0) {
        params.forward_slices.push_back({b / 8, 3 * b / 8, b - b / 2});
      } else {
        params.forward_slices.push_back({b / 4, b - b / 4});
      }
      params.backward_slices.push_back({b / 2, b - b / 2});
    }
  }
  schedules::Plan plan = schedules::Plan::make(std::move(stages), std::move(params));
  plan.validate(num_layers);
  return plan;
}

double lr_at(const Options& o, std::int64_t round) {
  if (round < o.warmup)
    return o.lr * static_cast<double>(round + 1) / static_cast<double>(o.warmup);
  if (o.lr_schedule == "constant") return o.lr;
  const double span = static_cast<double>(std::max<std::int64_t>(1, o.steps - o.warmup));
  const double progress = static_cast<double>(round - o.warmup) / span;
  const double final_lr = 0.1 * o.lr;
  return final_lr + (o.lr - final_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

// Trailing moving average over `w` values (fewer at the start).
std::vector<double> smooth(const std::vector<double>& v, std::int64_t w) {
  std::vector<double> out(v.size());
  double sum = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    sum += v[i];
    if (i >= static_cast<std::size_t>(w)) sum -= v[i - static_cast<std::size_t>(w)];
    out[i] = sum / static_cast<double>(std::min<std::size_t>(i + 1, static_cast<std::size_t>(w)));
  }
  return out;
}

std::pair<double, double> evaluate(const models::Model& model, const models::ParamSet& params,
                                   const models::data::Dataset& eval, std::int64_t minibatch) {
  double loss_sum = 0;
  std::int64_t correct = 0, count = 0;
  std::vector<std::int64_t> idx;
  for (std::int64_t first = 0; first < eval.size(); first += minibatch) {
    const std::int64_t b = std::min(minibatch, eval.size() - first);
    idx.resize(static_cast<std::size_t>(b));
    for (std::int64_t i = 0; i < b; ++i) idx[static_cast<std::size_t>(i)] = first + i;
    const models::data::Batch batch = eval.get(idx);
    const models::EvalOutput out =
        models::evaluate(model, params, batch.inputs.reshape(model.input_shape(b)),
                         batch.targets.reshape(model.target_shape(b)));
    loss_sum += static_cast<double>(out.loss) * static_cast<double>(out.count);
    correct += out.correct;
    count += out.count;
  }
  return {loss_sum / static_cast<double>(count),
          static_cast<double>(correct) / static_cast<double>(count)};
}

// Largest |a - b| over every weight, relative to the largest |b|: how far two runs' final
// weights are apart.
double weight_distance(const models::ParamSet& a, const models::ParamSet& b) {
  double diff = 0, scale = 0;
  for (std::int64_t i = 0; i < b.size(); ++i) {
    const Tensor& tb = b[i];
    const Tensor& ta = a.at(b.name(i));
    const float* pa = ta.data<float>();
    const float* pb = tb.data<float>();
    for (std::int64_t j = 0; j < tb.numel(); ++j) {
      diff = std::max(diff, static_cast<double>(std::fabs(pa[j] - pb[j])));
      scale = std::max(scale, static_cast<double>(std::fabs(pb[j])));
    }
  }
  return scale > 0 ? diff / scale : diff;
}

// The loss of every minibatch under a schedule's weight-version rules, computed in one
// process from whole minibatches (see --replay above).
std::vector<double> replay(const Options& o, const Variant& v, const schedules::Plan& plan,
                           const models::Model& model, const models::ParamSet& init,
                           const actors::DataSource& data) {
  const schedules::ScheduleParams& sp = plan.schedule;
  models::OptimizerSpec os;
  os.kind = "adamw";
  os.lr = o.lr;
  os.beta1 = o.beta1;
  auto optimizer = models::make_optimizer(os);
  models::ParamSet current = init.clone();
  std::map<std::int64_t, models::ParamSet> versions;  // version k: weights after k updates
  versions.emplace(0, init.clone());
  std::vector<double> losses;
  for (std::int64_t b = 0; b < o.steps; ++b) {
    const actors::MinibatchData d = data(b);
    models::Context ctx;
    ctx.training = true;
    ctx.seed = actors::step_seed(o.seed, b);
    std::vector<std::vector<models::Saved>> saved(plan.stages.size());
    Tensor x = d.rows({0, d.samples()}, false);
    for (std::size_t s = 0; s < plan.stages.size(); ++s) {
      const auto& r = plan.stages[s].layers;
      const models::ParamSet& w =
          versions.at(schedules::weight_version(sp, static_cast<int>(s), b));
      auto f = model.forward(ctx, w, x, r.begin, r.end);
      x = f.y;
      saved[s] = std::move(f.saved);
    }
    const auto loss = models::softmax_cross_entropy(x, d.rows({0, d.samples()}, true), true,
                                                    1.0f / static_cast<float>(d.loss_rows()));
    losses.push_back(loss.loss_sum / static_cast<double>(d.loss_rows()));
    models::ParamSet grads = current.zeros_like();
    Tensor dy = loss.dlogits;
    for (std::size_t s = plan.stages.size(); s-- > 0;) {
      const auto& r = plan.stages[s].layers;
      const std::int64_t version =
          v.stashing ? schedules::weight_version(sp, static_cast<int>(s), b) : b;
      dy = model.backward(ctx, versions.at(version), saved[s], dy, r.begin, r.end, s > 0, grads);
    }
    optimizer->set_lr(lr_at(o, b));
    optimizer->step(current, grads);
    versions.emplace(b + 1, current.clone());
    // Versions no later minibatch uses (the oldest any stage takes is b + 1 - (p - 1)).
    while (versions.begin()->first < b + 1 - (sp.stages - 1)) versions.erase(versions.begin());
  }
  return losses;
}

// The losses of one-device training with each stage's updates delayed as the schedule of `v`
// delays them (schedules::update_delay), corrected as `v` says, on the same minibatches: what
// the delays alone cost. For an asynchronous schedule with stashing this is also its replay.
std::vector<double> delayed(const Options& o, const Variant& v, const schedules::Plan& plan,
                            const models::Model& model, const models::ParamSet& init,
                            const actors::DataSource& data, models::ParamSet* final_params) {
  models::DelayedTrainingSpec spec;
  spec.model = &model;
  for (std::size_t s = 0; s < plan.stages.size(); ++s) {
    const auto& r = plan.stages[s].layers;
    spec.stages.push_back(
        {r.begin, r.end, schedules::update_delay(plan.schedule, static_cast<int>(s))});
  }
  spec.optimizer.kind = "adamw";
  spec.optimizer.lr = o.lr;
  spec.optimizer.beta1 = o.beta1;
  spec.correction = v.correction;
  spec.lr_at = [&o](std::int64_t t) { return lr_at(o, t); };
  models::DelayedTrainer trainer(spec, init);
  std::vector<double> losses;
  for (std::int64_t b = 0; b < o.steps; ++b) {
    const actors::MinibatchData d = data(b);
    const std::int64_t n = d.samples();
    const Tensor x = d.rows({0, n}, false).reshape(model.input_shape(n));
    const Tensor y = d.rows({0, n}, true).reshape(model.target_shape(n));
    losses.push_back(trainer.step(x, y, actors::step_seed(o.seed, b)).loss);
  }
  if (final_params != nullptr) *final_params = trainer.params();
  return losses;
}

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string line;
  std::getline(f, line);
  return line;
}

nlohmann::json opt(const std::optional<std::int64_t>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json();
}
nlohmann::json opt(const std::optional<double>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json();
}
nlohmann::json num(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json();
}

int run(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const std::string load_before = load_average();

  models::ModelSpec ms = models::gpt_spec(o.layers, o.d_model, o.heads, o.seq_len, o.vocab);
  const models::Model model = models::Model::build(ms);
  models::data::MarkovSpec chain;
  chain.vocab = o.data_vocab;
  chain.sharpness = o.sharpness;
  chain.seed = 1;
  auto text = std::make_shared<models::data::MarkovText>(chain, o.samples, o.seq_len, 0);
  const models::data::MarkovText eval(text->shared_chain(), o.eval_samples, o.seq_len, 1);
  const double target = o.target.value_or(text->optimal_loss() + o.target_gap);
  const models::ParamSet init = model.init_params(o.seed);

  std::printf("convergence: %s, %s\n", ms.describe().c_str(), text->describe().c_str());
  std::printf(
      "  %lld minibatches of %lld, adamw lr %g (%s, warm-up %lld), seed %llu, %d stages, "
      "%d slices; entropy rate %.4f, target loss %.4f (smoothed over %lld); loadavg %s\n",
      static_cast<long long>(o.steps), static_cast<long long>(o.minibatch), o.lr,
      o.lr_schedule.c_str(), static_cast<long long>(o.warmup),
      static_cast<unsigned long long>(o.seed), o.stages, o.slices, text->entropy_rate(), target,
      static_cast<long long>(o.smooth), load_before.c_str());
  std::fflush(stdout);

  std::vector<Curve> curves;
  for (const Variant& v : variants(o)) {
    Curve c;
    c.variant = v;
    c.seconds.assign(static_cast<std::size_t>(o.steps), NAN);
    actors::PipelineSpec spec;
    spec.model = &model;
    spec.plan = make_plan(o, v, model.num_layers());
    spec.optimizer.kind = "adamw";
    spec.optimizer.lr = o.lr;
    spec.optimizer.beta1 = o.beta1;
    spec.seed = o.seed;
    spec.initial_params = init.clone();
    spec.data = actors::dataset_source(text, model, o.minibatch, o.seed);
    spec.weight_stashing = v.stashing;
    spec.async_correction = v.correction;
    spec.lr_at = [&o](std::int64_t round) { return lr_at(o, round); };
    Clock::time_point start;
    // The coordinator calls this on its own thread; run() joins it before the vector is read.
    spec.on_minibatch = [&c, &start](std::int64_t b, const tandem::actors::MinibatchReport&) {
      if (b >= 0 && b < static_cast<std::int64_t>(c.seconds.size())) {
        c.seconds[static_cast<std::size_t>(b)] =
            std::chrono::duration<double>(Clock::now() - start).count();
      }
    };
    try {
      if (v.harness) {
        // Its seconds are not a schedule's: the curve is for steps only.
        start = Clock::now();
        c.losses = delayed(o, v, spec.plan, model, init, spec.data, &c.params);
        c.total_seconds = std::chrono::duration<double>(Clock::now() - start).count();
      } else {
        actors::Pipeline pipeline(std::move(spec), make_work_sharing({.workers = o.workers}));
        start = Clock::now();
        const actors::PipelineResult r = pipeline.run();
        c.total_seconds = std::chrono::duration<double>(Clock::now() - start).count();
        c.losses = r.losses;
        c.params = pipeline.params();
      }
    } catch (const std::exception& e) {
      c.error = e.what();
      std::printf("  %-18s FAILED: %s\n", v.name.c_str(), e.what());
    }
    if (c.error.empty()) {
      c.smoothed = smooth(c.losses, o.smooth);
      for (std::size_t i = 0; i < c.smoothed.size(); ++i) {
        // A diverged run's NaN never counts as reaching the target.
        if (c.smoothed[i] <= target) {
          c.steps_to_target = static_cast<std::int64_t>(i + 1);
          c.seconds_to_target = c.seconds[i];
          break;
        }
      }
      std::tie(c.eval_loss, c.eval_accuracy) = evaluate(model, c.params, eval, o.minibatch);
      if (o.replay && v.stages > 1 && !v.harness) {
        // A corrected schedule's semantics are the delay harness's with its delays.
        const schedules::Plan plan = make_plan(o, v, model.num_layers());
        const actors::DataSource data = actors::dataset_source(text, model, o.minibatch, o.seed);
        c.replay = v.correction == models::AsyncCorrection::none
                       ? replay(o, v, plan, model, init, data)
                       : delayed(o, v, plan, model, init, data, nullptr);
      }
      std::printf("  %-18s %7.2f s  final %.4f  eval %.4f\n", v.name.c_str(), c.total_seconds,
                  c.smoothed.back(), c.eval_loss);
      std::fflush(stdout);
    }
    curves.push_back(std::move(c));
  }

  const Curve* single = nullptr;
  for (const Curve& c : curves) {
    if (c.variant.stages == 1 && c.error.empty()) single = &c;
  }
  // Per-step agreement with the single-device run: the largest |loss difference| over the
  // first 1, 10 and all steps, and the first step where it exceeds 1e-4.
  struct Agreement {
    double first = NAN, first10 = NAN, all = NAN, weights = NAN;
    std::optional<std::int64_t> departs;
  };
  std::map<std::string, Agreement> agree;
  for (const Curve& c : curves) {
    if (single == nullptr || !c.error.empty() || &c == single) continue;
    Agreement a;
    double worst = 0;
    for (std::size_t i = 0; i < c.losses.size() && i < single->losses.size(); ++i) {
      const double d = std::fabs(c.losses[i] - single->losses[i]);
      worst = std::isnan(d) ? INFINITY : std::max(worst, d);
      if (i == 0) a.first = worst;
      if (i == 9) a.first10 = worst;
      if (!a.departs && !(d <= 1e-4)) a.departs = static_cast<std::int64_t>(i + 1);
    }
    a.all = worst;
    if (std::isnan(a.first10)) a.first10 = worst;  // fewer than 10 steps
    a.weights = weight_distance(c.params, single->params);
    agree[c.variant.name] = a;
  }

  std::printf(
      "\n| schedule | slices | steps to %.3f | seconds to %.3f | s/minibatch | final loss "
      "(smoothed) | eval loss | max abs dloss vs single: step 1 / 1-10 / all | first step "
      "dloss > 1e-4 | final weights rel. diff |\n",
      target, target);
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Curve& c : curves) {
    if (!c.error.empty()) {
      std::printf("| %s | failed: %s |||||||||\n", c.variant.name.c_str(), c.error.c_str());
      continue;
    }
    std::string to_steps = c.steps_to_target ? std::to_string(*c.steps_to_target) : "-";
    char to_secs[32] = "-";
    if (c.seconds_to_target) std::snprintf(to_secs, sizeof to_secs, "%.2f", *c.seconds_to_target);
    std::string slices =
        c.variant.umpipe_compositions ? "unequal" : std::to_string(c.variant.slices);
    char vs[160] = "(reference)";
    char dep[32] = "-";
    char wd[32] = "-";
    if (auto it = agree.find(c.variant.name); it != agree.end()) {
      std::snprintf(vs, sizeof vs, "%.1e / %.1e / %.1e", it->second.first, it->second.first10,
                    it->second.all);
      if (it->second.departs)
        std::snprintf(dep, sizeof dep, "%lld", static_cast<long long>(*it->second.departs));
      std::snprintf(wd, sizeof wd, "%.1e", it->second.weights);
    }
    std::printf("| %s | %s | %s | %s | %.3f | %.4f | %.4f | %s | %s | %s |\n",
                c.variant.name.c_str(), slices.c_str(), to_steps.c_str(), to_secs,
                c.total_seconds / static_cast<double>(o.steps), c.smoothed.back(), c.eval_loss, vs,
                dep, wd);
  }
  // The runtime against the replay of each asynchronous schedule's semantics.
  struct ReplayAgreement {
    double first10 = 0, all = 0;
    std::optional<std::int64_t> departs;
  };
  std::map<std::string, ReplayAgreement> replays;
  for (const Curve& c : curves) {
    if (c.replay.empty()) continue;
    ReplayAgreement a;
    for (std::size_t i = 0; i < c.losses.size() && i < c.replay.size(); ++i) {
      const double d = std::fabs(c.losses[i] - c.replay[i]);
      a.all = std::isnan(d) ? INFINITY : std::max(a.all, d);
      if (i < 10) a.first10 = a.all;
      if (!a.departs && !(d <= 1e-4)) a.departs = static_cast<std::int64_t>(i + 1);
    }
    replays[c.variant.name] = a;
  }
  if (!replays.empty()) {
    std::printf(
        "\n| schedule | final loss: runtime / replay | max abs dloss vs replay: steps 1-10 / "
        "all | first step dloss > 1e-4 |\n|---|---|---|---|\n");
    for (const Curve& c : curves) {
      auto it = replays.find(c.variant.name);
      if (it == replays.end()) continue;
      const std::string dep = it->second.departs ? std::to_string(*it->second.departs) : "-";
      std::printf("| %s | %.4f / %.4f | %.1e / %.1e | %s |\n", c.variant.name.c_str(),
                  c.smoothed.back(), smooth(c.replay, o.smooth).back(), it->second.first10,
                  it->second.all, dep.c_str());
    }
  }
  const std::string load_after = load_average();
  std::printf("\nentropy rate %.4f nats/token; loadavg before %s, after %s\n", text->entropy_rate(),
              load_before.c_str(), load_after.c_str());

  nlohmann::json doc;
  doc["config"] = {{"model", ms.describe()},
                   {"data", text->describe()},
                   {"steps", o.steps},
                   {"minibatch", o.minibatch},
                   {"slices", o.slices},
                   {"stages", o.stages},
                   {"lr", o.lr},
                   {"beta1", o.beta1},
                   {"warmup", o.warmup},
                   {"lr_schedule", o.lr_schedule},
                   {"seed", o.seed},
                   {"smooth", o.smooth},
                   {"eval_samples", o.eval_samples}};
  doc["entropy_rate"] = text->entropy_rate();
  doc["optimal_loss"] = text->optimal_loss();
  doc["target"] = target;
  doc["loadavg_before"] = load_before;
  doc["loadavg_after"] = load_after;
  nlohmann::json results = nlohmann::json::object();
  std::ofstream csv(o.out + ".csv");
  csv << "schedule,step,loss,smoothed,seconds\n";
  for (const Curve& c : curves) {
    nlohmann::json s = {
        {"name", c.variant.name},
        {"kind", std::string(schedules::to_string(c.variant.kind))},
        {"stages", c.variant.stages},
        {"slices", c.variant.umpipe_compositions ? nlohmann::json("unequal")
                                                 : nlohmann::json(c.variant.slices)},
        {"weight_stashing", c.variant.stashing}};
    if (!c.error.empty()) {
      s["error"] = c.error;
      doc["schedules"].push_back(s);
      continue;
    }
    nlohmann::json losses = nlohmann::json::array(), smoothed = nlohmann::json::array(),
                   seconds = nlohmann::json::array();
    for (std::size_t i = 0; i < c.losses.size(); ++i) {
      losses.push_back(num(c.losses[i]));
      smoothed.push_back(num(c.smoothed[i]));
      seconds.push_back(num(c.seconds[i]));
      char row[160];
      std::snprintf(row, sizeof row, "%s,%zu,%.7g,%.7g,%.6f\n", c.variant.name.c_str(), i + 1,
                    c.losses[i], c.smoothed[i], c.seconds[i]);
      csv << row;
    }
    s["losses"] = losses;
    s["smoothed"] = smoothed;
    s["seconds"] = seconds;
    s["total_seconds"] = c.total_seconds;
    s["final_loss"] = num(c.smoothed.back());
    s["eval_loss"] = num(c.eval_loss);
    s["eval_accuracy"] = num(c.eval_accuracy);
    s["steps_to_target"] = opt(c.steps_to_target);
    s["seconds_to_target"] = opt(c.seconds_to_target);
    nlohmann::json counters = {
        {"final_loss", num(c.smoothed.back())},
        {"eval_loss", num(c.eval_loss)},
        {"steps_to_target", opt(c.steps_to_target)},
        {"seconds_to_target", opt(c.seconds_to_target)},
        {"seconds_per_minibatch", c.total_seconds / static_cast<double>(o.steps)}};
    if (auto it = agree.find(c.variant.name); it != agree.end()) {
      const nlohmann::json a = {{"max_abs_dloss_step1", num(it->second.first)},
                                {"max_abs_dloss_first10", num(it->second.first10)},
                                {"max_abs_dloss_all", num(it->second.all)},
                                {"first_step_dloss_above_1e-4", opt(it->second.departs)},
                                {"final_weights_rel_diff", num(it->second.weights)}};
      s["vs_single_device"] = a;
      counters.update(a);
    }
    if (auto it = replays.find(c.variant.name); it != replays.end()) {
      nlohmann::json rl = nlohmann::json::array();
      for (double x : c.replay) rl.push_back(num(x));
      const nlohmann::json a = {{"max_abs_dloss_vs_replay_first10", num(it->second.first10)},
                                {"max_abs_dloss_vs_replay_all", num(it->second.all)},
                                {"first_step_dloss_vs_replay_above_1e-4", opt(it->second.departs)}};
      s["replay"] = a;
      s["replay_losses"] = rl;
      counters.update(a);
    }
    doc["schedules"].push_back(s);
    results[c.variant.name] = {
        {"real_ns", c.total_seconds * 1e9}, {"iterations", o.steps}, {"counters", counters}};
  }
  std::ofstream(o.out + ".json") << doc.dump(1) << "\n";
  std::printf("wrote %s.csv and %s.json\n", o.out.c_str(), o.out.c_str());
  const nlohmann::json line = {{"suite", "convergence"}, {"results", results}};
  std::printf("BENCH_JSON %s\n", line.dump().c_str());
  return 0;
}

}  // namespace
}  // namespace tandem::bench

int main(int argc, char** argv) {
  try {
    return tandem::bench::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_convergence: %s\n", e.what());
    return 2;
  }
}
