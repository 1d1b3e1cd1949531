#include "apps/trainer_report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <thread>

#include "apps/config_sets.hpp"
#include "apps/default_config.hpp"
#include "schedules/schedule_kind.hpp"
#include "train/cluster_options.hpp"
#include "train/config.hpp"
#include "train/elastic_job.hpp"
#include "train/process_group.hpp"
#include "train/process_placement.hpp"

namespace tandem::apps {
namespace {

std::string duration(double s) {
  if (s < 60) return fmt::format("{:.0f}s", s);
  if (s < 3600) return fmt::format("{:.0f}m{:02.0f}s", std::floor(s / 60), std::fmod(s, 60));
  return fmt::format("{:.0f}h{:02.0f}m", std::floor(s / 3600), std::fmod(s / 60, 60));
}

std::string layer_range(const schedules::LayerRange& r) {
  return r.end - r.begin == 1 ? std::to_string(r.begin) : fmt::format("{}-{}", r.begin, r.end - 1);
}

}  // namespace

std::string format_progress(const train::StepRecord& r) {
  const int width = static_cast<int>(std::to_string(r.steps).size());
  std::string line = fmt::format("step {:>{}}/{}  loss {:.4f}", r.step, width, r.steps, r.loss);
  if (r.accuracy) line += fmt::format("  acc {:5.1f}%", 100 * *r.accuracy);
  if (r.grad_norm) line += fmt::format("  grad norm {:.4f}", *r.grad_norm);
  if (r.eval) {
    line += fmt::format("  eval loss {:.4f}", r.eval->loss);
    if (r.eval->has_accuracy) line += fmt::format(" acc {:5.1f}%", 100 * r.eval->accuracy);
  }
  line += fmt::format("  {:.0f} samples/s  eta {}", r.samples_per_s, duration(r.eta_s));
  return line;
}

std::string format_summary(const train::TrainSummary& s) {
  std::string out = fmt::format("trained {} for {} steps in {} ({:.0f} samples/s) on {}\n", s.model,
                                s.steps, duration(s.seconds), s.samples_per_s, s.train_data);
  out += fmt::format("final train loss {:.4f}", s.final_loss);
  if (s.final_accuracy) out += fmt::format(", accuracy {:.2f}%", 100 * *s.final_accuracy);
  out += " (last log window)\n";
  if (s.eval) {
    out += fmt::format("held-out loss {:.4f}", s.eval->loss);
    if (s.eval->has_accuracy) out += fmt::format(", accuracy {:.2f}%", 100 * s.eval->accuracy);
    out += fmt::format(" on {} samples\n", s.eval->samples);
  }
  if (s.entropy_rate) {
    const double loss = s.eval ? s.eval->loss : s.final_loss;
    out +=
        fmt::format("markov text: entropy rate {:.4f} nats/token; {} loss {:.4f}, gap {:+.4f}",
                    *s.entropy_rate, s.eval ? "held-out" : "train", loss, loss - *s.entropy_rate);
    if (s.optimal_loss && *s.optimal_loss != *s.entropy_rate) {
      out += fmt::format(" (best reachable on windows {:.4f}, gap {:+.4f})", *s.optimal_loss,
                         loss - *s.optimal_loss);
    }
    out += "\n";
  }
  out += fmt::format("parameters fingerprint {:016x}\n", s.params_fingerprint);
  return out;
}

nlohmann::json to_json(const train::StepRecord& r) {
  nlohmann::json j{{"step", r.step},
                   {"steps", r.steps},
                   {"loss", r.loss},
                   {"samples_per_s", r.samples_per_s},
                   {"elapsed_s", r.elapsed_s},
                   {"eta_s", r.eta_s},
                   {"lr", r.lr}};
  if (r.accuracy) j["accuracy"] = *r.accuracy;
  if (r.grad_norm) j["grad_norm"] = *r.grad_norm;
  if (r.resident_mib) j["resident_mib"] = *r.resident_mib;
  if (r.eval) {
    j["eval_loss"] = r.eval->loss;
    if (r.eval->has_accuracy) j["eval_accuracy"] = r.eval->accuracy;
  }
  // Per stage replica: its actions' time within the window and its share of it (utilization;
  // 1 - busy is its bubble and waiting).
  if (!r.stages.empty()) {
    nlohmann::json stages = nlohmann::json::array();
    for (const train::StepRecord::StageBusy& st : r.stages) {
      stages.push_back({{"stage", st.stage},
                        {"replica", st.replica},
                        {"busy_s", st.busy_s},
                        // An action is counted in the window it ends in: clamp the share.
                        {"busy", r.window_s > 0 ? std::min(1.0, st.busy_s / r.window_s) : 0.0}});
    }
    j["stages"] = std::move(stages);
  }
  return j;
}

namespace {

std::ofstream open_metrics(const std::optional<std::filesystem::path>& path) {
  std::ofstream metrics;
  if (path) {
    metrics.open(*path, std::ios::trunc);
    if (!metrics) {
      throw std::runtime_error(path->string() +
                               ": cannot write the metrics file: " + std::strerror(errno));
    }
  }
  return metrics;
}

// While alive, SIGINT calls `on_interrupt` (from a watcher thread, not the handler) once and
// restores the default action, so that a second Ctrl-C ends the process.
class InterruptWatch {
 public:
  explicit InterruptWatch(std::function<void()> on_interrupt)
      : previous_(std::signal(SIGINT, &InterruptWatch::handle)),
        watcher_([this, cb = std::move(on_interrupt)] {
          while (!done_.load()) {
            if (interrupted_ != 0) {
              std::signal(SIGINT, SIG_DFL);
              cb();
              return;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
          }
        }) {}
  ~InterruptWatch() {
    done_ = true;
    watcher_.join();
    std::signal(SIGINT, previous_ == SIG_ERR ? SIG_DFL : previous_);
    interrupted_ = 0;
  }
  InterruptWatch(const InterruptWatch&) = delete;
  InterruptWatch& operator=(const InterruptWatch&) = delete;

 private:
  static void handle(int) { interrupted_ = 1; }
  static inline volatile std::sig_atomic_t interrupted_ = 0;
  void (*previous_)(int);
  std::atomic<bool> done_{false};
  std::thread watcher_;
};

// The trace is written after the run: refuse before training a path that could not take it.
void check_trace_path(const std::filesystem::path& path,
                      const std::optional<std::filesystem::path>& config) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw std::runtime_error(path.string() + ": --trace needs a file name, not a directory");
  }
  if (config && std::filesystem::equivalent(path, *config, ec)) {
    throw std::runtime_error(path.string() + ": --trace would overwrite the config it runs");
  }
  std::ofstream probe(path, std::ios::app);
  if (!probe) {
    throw std::runtime_error(path.string() + ": cannot write the trace: " + std::strerror(errno));
  }
}

// "host:port" or "[v6]:port" of --join, checked before use.
train::ElasticJoin parse_join(const std::string& text) {
  const auto colon = text.rfind(':');
  train::ElasticJoin j;
  int port = 0;
  if (colon != std::string::npos && colon > 0) {
    const char* first = text.data() + colon + 1;
    const char* last = text.data() + text.size();
    const auto [end, ec] = std::from_chars(first, last, port);
    if (ec == std::errc() && end == last && port > 0 && port < 65536) {
      j.host = text.substr(0, colon);
      if (j.host.size() > 2 && j.host.front() == '[' && j.host.back() == ']') {
        j.host = j.host.substr(1, j.host.size() - 2);
      }
      j.port = static_cast<std::uint16_t>(port);
      return j;
    }
  }
  throw std::runtime_error("--join '" + text +
                           "': expected HOST:PORT (the door rank 0 of the job logs at its start)");
}

}  // namespace

train::TrainSummary run_train_command(const TrainCommand& command, std::ostream& out) {
  train::Config config = load_command_config(command.config, command.sets);
  // Under a launcher (tandem launch, torchrun, mpirun, srun) this is one rank of a job: it
  // joins the others before anything trains, and rank 0 reports for all of them.
  if (command.elastic || command.join) config.cluster.elastic = true;
  std::unique_ptr<train::ProcessGroup> joined =
      command.join ? nullptr
                   : train::join_launched_job(train::process_group_options(config.cluster));
  const bool reporter = !command.join && (joined == nullptr || joined->rank() == 0);
  std::ofstream metrics = reporter ? open_metrics(command.metrics_json) : std::ofstream();
  const auto on_record = [&](const train::StepRecord& r) {
    if (!command.quiet) out << format_progress(r) << std::endl;
    if (metrics.is_open()) metrics << to_json(r).dump() << '\n' << std::flush;
  };
  const auto check_metrics = [&] {
    if (metrics.is_open() && !metrics) {
      throw std::runtime_error(command.metrics_json->string() + ": writing the metrics failed");
    }
  };

  if (command.trace) check_trace_path(*command.trace, command.config);
  train::SessionOptions options;
  options.steps = command.steps;
  options.trace = command.trace;
  options.checkpoint_dir = command.checkpoint_dir;
  options.checkpoint_every = command.checkpoint_every;
  options.resume = command.resume;
  options.steps_option = "train.steps (--steps)";
  options.checkpoint_every_option = "--checkpoint-every";
  std::optional<train::ElasticJob> job;
  train::at_config(config, [&] {
    if (command.join) {
      job.emplace(config, options,
                  train::joiner_options(train::process_group_options(config.cluster)),
                  parse_join(*command.join));
    } else {
      train::JobInputs inputs;
      inputs.model = train::config_model(config);
      job.emplace(config, options, std::move(joined), std::move(inputs));
    }
  });
  train::Session& trainer = job->session();
  train::ProcessGroup* group = job->group();
  const auto on_replan = [&](const std::string& line) {
    if (!command.quiet || reporter) out << line << std::endl;
  };
  if (group != nullptr && !command.quiet) {
    out << "job: "
        << (command.join
                ? "joined at " + *command.join + " as rank " + std::to_string(group->rank()) +
                      " of " + std::to_string(group->world_size())
                : train::launched_as())
        << "; this process (" << group->host() << ") runs "
        << train::ProcessPlacement(trainer.job(), trainer.plan(), group->world_size())
               .describe(group->rank())
        << (group->rank() == 0 ? ", the loader and the coordinator" : "") << "\n";
  }
  if (!reporter) {
    // Rank 0 prints progress and the summary for the whole job.
    const train::TrainSummary summary = job->run({}, on_replan);
    if (!command.quiet) {
      // A re-planned job renumbered its ranks: this rank's number is the current group's.
      const int rank = job->group() != nullptr ? job->group()->rank() : 0;
      out << "rank " << rank << ": done, " << summary.steps << " steps" << std::endl;
    }
    job->shutdown();
    return summary;
  }
  if (!command.quiet) {
    out << "model " << trainer.model().spec().describe() << ", " << trainer.parameters()
        << " parameters\n"
        << "data " << trainer.train_data().describe() << "\n"
        << format_plan_line(trainer.plan()) << "\n";
    if (trainer.first_step() > 0) {
      out << "resumed at step " << trainer.first_step() << " from " << command.resume->string()
          << "\n";
      if (!trainer.resume_note().empty()) out << trainer.resume_note() << "\n";
    }
  }
  train::TrainSummary summary;
  {
    // Ctrl-C ends the run at the next stop boundary (with its checkpoint when checkpointing);
    // a second Ctrl-C kills the process as usual.
    InterruptWatch watch([&job] { job->request_stop(); });
    summary = job->run(on_record, on_replan);
  }
  check_metrics();
  out << format_summary(summary) << format_stage_table(summary);
  if (summary.stopped) {
    out << "stopped at step " << summary.steps << " of " << job->session().steps();
    if (!summary.checkpoints.empty()) {
      out << "; resume with --resume " << command.checkpoint_dir->string();
    }
    out << "\n";
  }
  for (const auto& c : summary.checkpoints) {
    if (!command.quiet) out << "checkpoint " << c.string() << "\n";
  }
  job->shutdown();
  return summary;
}

std::string format_plan_line(const schedules::Plan& plan) {
  const auto& p = plan.schedule;
  std::string layers, replicas;
  for (const auto& st : plan.stages) {
    if (!layers.empty()) layers += " | ";
    layers += layer_range(st.layers);
    if (!replicas.empty()) replicas += "-";
    replicas += std::to_string(st.replicas.size());
  }
  std::string line = fmt::format("pipeline: schedule {}, {} stages: layers {}, replicas {}",
                                 schedules::to_string(p.kind), p.stages, layers, replicas);
  if (p.chunks > 1) {
    line += fmt::format(" ({} chunks per stage: the model split evenly into {} virtual stages)",
                        p.chunks, p.stages * p.chunks);
  }
  if (p.kind == schedules::ScheduleKind::umpipe && !p.forward_slices.empty()) {
    line += fmt::format(", umpipe slices per stage, minibatch {}", p.samples());
  } else {
    line += fmt::format(", {} slice{} of minibatch {}", p.slices, p.slices == 1 ? "" : "s",
                        p.samples());
  }
  if (p.rematerialize) line += ", rematerialized";
  return line;
}

std::string format_stage_table(const train::TrainSummary& summary) {
  // bubble: the share of the wall time the replica's device sat idle (waiting for inputs, for
  // the flush, or for a core); peak MiB: weight versions held plus what forwards kept for their
  // backwards, at their peak.
  std::string out = fmt::format("{:>5} {:>7}  {:<6} {:>7} {:>7} {:>6} {:>6}  {:>8} {:>8} {:>11}\n",
                                "stage", "replica", "device", "busy s", "idle s", "busy", "bubble",
                                "peak MiB", "versions", "activations");
  for (const actors::StageStats& st : summary.stages) {
    const double idle = std::max(0.0, summary.pipeline_seconds - st.busy_s);
    const double share =
        summary.pipeline_seconds > 0 ? std::min(1.0, st.busy_s / summary.pipeline_seconds) : 0;
    out += fmt::format(
        "{:>5} {:>7}  {:<6} {:>7.2f} {:>7.2f} {:>5.0f}% {:>5.0f}%  {:>8.2f} {:>8} {:>11}\n",
        st.stage, st.replica, st.device_name, st.busy_s, idle, 100 * share, 100 * (1 - share),
        static_cast<double>(st.peak_bytes) / (1 << 20), st.peak_versions, st.peak_activations);
  }
  return out;
}

}  // namespace tandem::apps
