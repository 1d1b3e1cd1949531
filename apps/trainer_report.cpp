#include "apps/trainer_report.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <ostream>
#include <stdexcept>

#include "apps/default_config.hpp"
#include "apps/pipeline_trainer.hpp"

namespace tandem::apps {
namespace {

std::string duration(double s) {
  if (s < 60) return fmt::format("{:.0f}s", s);
  if (s < 3600) return fmt::format("{:.0f}m{:02.0f}s", std::floor(s / 60), std::fmod(s, 60));
  return fmt::format("{:.0f}h{:02.0f}m", std::floor(s / 3600), std::fmod(s / 60, 60));
}

}  // namespace

std::string format_progress(const StepRecord& r) {
  const int width = static_cast<int>(std::to_string(r.steps).size());
  std::string line = fmt::format("step {:>{}}/{}  loss {:.4f}", r.step, width, r.steps, r.loss);
  if (r.accuracy) line += fmt::format("  acc {:5.1f}%", 100 * *r.accuracy);
  if (r.eval) {
    line += fmt::format("  eval loss {:.4f}", r.eval->loss);
    if (r.accuracy) line += fmt::format(" acc {:5.1f}%", 100 * r.eval->accuracy);
  }
  line += fmt::format("  {:.0f} samples/s  eta {}", r.samples_per_s, duration(r.eta_s));
  return line;
}

std::string format_summary(const TrainSummary& s) {
  std::string out = fmt::format("trained {} for {} steps in {} ({:.0f} samples/s) on {}\n", s.model,
                                s.steps, duration(s.seconds), s.samples_per_s, s.train_data);
  out += fmt::format("final train loss {:.4f}", s.final_loss);
  if (s.final_accuracy) out += fmt::format(", accuracy {:.2f}%", 100 * *s.final_accuracy);
  out += " (last log window)\n";
  if (s.eval) {
    out += fmt::format("held-out loss {:.4f}", s.eval->loss);
    if (s.final_accuracy) out += fmt::format(", accuracy {:.2f}%", 100 * s.eval->accuracy);
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

nlohmann::json to_json(const StepRecord& r) {
  nlohmann::json j{{"step", r.step},
                   {"steps", r.steps},
                   {"loss", r.loss},
                   {"samples_per_s", r.samples_per_s},
                   {"elapsed_s", r.elapsed_s},
                   {"eta_s", r.eta_s},
                   {"lr", r.lr}};
  if (r.accuracy) j["accuracy"] = *r.accuracy;
  if (r.eval) {
    j["eval_loss"] = r.eval->loss;
    if (r.accuracy) j["eval_accuracy"] = r.eval->accuracy;
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

}  // namespace

TrainSummary run_train_command(const TrainCommand& command, std::ostream& out) {
  Config config = command.config ? load_config(*command.config)
                                 : parse_config(std::string(default_config()), kDefaultConfigName);
  std::ofstream metrics = open_metrics(command.metrics_json);
  const auto on_record = [&](const StepRecord& r) {
    if (!command.quiet) out << format_progress(r) << std::endl;
    if (metrics.is_open()) metrics << to_json(r).dump() << '\n' << std::flush;
  };
  const auto check_metrics = [&] {
    if (metrics.is_open() && !metrics) {
      throw std::runtime_error(command.metrics_json->string() + ": writing the metrics failed");
    }
  };

  if (is_pipeline(config)) {
    PipelineTrainer trainer(std::move(config), TrainerOptions{command.steps});
    if (!command.quiet) {
      out << "model " << trainer.model().spec().describe() << ", " << trainer.parameters()
          << " parameters\n"
          << "data " << trainer.train_data().describe() << "\n"
          << format_plan_line(trainer.plan()) << "\n";
    }
    PipelineSummary summary = trainer.run(on_record);
    check_metrics();
    out << format_summary(summary.train) << format_stage_table(summary);
    return summary.train;
  }
  Trainer trainer(std::move(config), TrainerOptions{command.steps});
  if (!command.quiet) {
    out << "model " << trainer.model().spec().describe() << ", " << trainer.params().numel()
        << " parameters\n"
        << "data " << trainer.train_data().describe() << "\n";
  }
  TrainSummary summary = trainer.run(on_record);
  check_metrics();
  out << format_summary(summary);
  return summary;
}

}  // namespace tandem::apps
