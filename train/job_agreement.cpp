#include "train/job_agreement.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <optional>
#include <span>
#include <string_view>
#include <utility>

#include "schedules/schedule_kind.hpp"
#include "train/elastic_plan.hpp"
#include "train/job_error.hpp"
#include "train/model_identity.hpp"
#include "train/process_group.hpp"

namespace tandem::train {
namespace {

std::string number(double v) {
  return fmt::format("{:.9g}", v);
}

std::string optimizer_line(const models::OptimizerSpec& o) {
  std::string out = o.kind + " lr " + number(o.lr) + " weight_decay " + number(o.weight_decay);
  if (o.kind == "sgd") {
    out += " momentum " + number(o.momentum);
    if (o.nesterov) out += " nesterov";
  } else {
    out += " betas " + number(o.beta1) + " " + number(o.beta2) + " eps " + number(o.eps);
  }
  return out;
}

std::string replica_counts(const schedules::ScheduleParams& sp) {
  std::string out;
  for (int s = 0; s < sp.stages; ++s) {
    if (s > 0) out += '-';
    out += std::to_string(sp.replicas_of(s));
  }
  return out;
}

std::vector<std::byte> bytes_of(const std::string& text) {
  const auto b = std::as_bytes(std::span(text.data(), text.size()));
  return {b.begin(), b.end()};
}

// The training's lines, every process's alike.
void add_train_lines(const TrainSpec& t, std::int64_t steps, std::vector<std::string>& out) {
  out.push_back("train.minibatch: " + std::to_string(t.minibatch));
  out.push_back("train.steps: " + std::to_string(steps));
  out.push_back("train.accumulate: " + std::to_string(t.accumulate));
  out.push_back("train.optimizer: " + optimizer_line(t.optimizer));
  out.push_back("train.seed: " + std::to_string(t.seed));
  out.push_back("train.clip_grad_norm: " +
                (t.clip_grad_norm ? number(*t.clip_grad_norm) : std::string("none")));
  out.push_back("train.precision: " +
                std::string(t.precision ? models::matmul_precision_name(*t.precision) : "f32"));
}

}  // namespace

std::vector<std::string> job_description(const JobSpec& job, const Session& session) {
  std::vector<std::string> out;
  for (const std::string& line : model_identity(session.model())) out.push_back("model " + line);
  const schedules::Plan& plan = session.plan();
  const schedules::ScheduleParams& sp = plan.schedule;
  out.push_back("pipeline.schedule: " + std::string(schedules::to_string(sp.kind)));
  out.push_back("pipeline.stages: " + describe_cut(plan));
  out.push_back("pipeline.replicas: " + replica_counts(sp));
  out.push_back("pipeline.slices: " + std::to_string(sp.slices));
  out.push_back("pipeline.chunks: " + std::to_string(sp.chunks));
  add_train_lines(job.train, session.steps(), out);
  return out;
}

std::vector<std::string> joiner_description(const JobSpec& job, const models::Model& model,
                                            std::int64_t steps, std::int64_t checkpoint_every) {
  std::vector<std::string> out;
  for (const std::string& line : model_identity(model)) out.push_back("model " + line);
  add_train_lines(job.train, steps, out);
  out.push_back("checkpoints.every: " + std::to_string(checkpoint_every));
  return out;
}

void agree_on_job(ProcessGroup& group, const std::vector<std::string>& mine,
                  const std::string& key) {
  const std::string rank0_text = group.broadcast_text(key, description_text(mine));
  if (group.rank() != 0) {
    AgreementCheck check = check_against_rank0(rank0_text, mine);
    group.put(key + "/answer/" + std::to_string(group.rank()), bytes_of(check.answer));
    // put does not wait: leaving before rank 0 has the answer would look like a lost rank.
    group.barrier(key);
    if (check.refusal) throw *check.refusal;
    return;
  }
  std::optional<JobError> refusal;
  for (int k = 1; k < group.world_size(); ++k) {
    const std::vector<std::byte> answer = group.take(key + "/answer/" + std::to_string(k));
    if (!refusal) refusal = refusal_of_answer(answer, group.describe(k), k);
  }
  group.barrier(key);
  if (refusal) throw *refusal;
}

}  // namespace tandem::train
