#include "train/job_plan.hpp"

#include <limits>
#include <string>
#include <utility>

#include "schedules/schedule_error.hpp"
#include "schedules/schedule_kind.hpp"
#include "train/job_error.hpp"

namespace tandem::train {

std::vector<int64_t> equal_sizes(int64_t samples, int64_t count) {
  std::vector<int64_t> sizes;
  for (int64_t i = 0; i < count; ++i)
    sizes.push_back((i + 1) * samples / count - i * samples / count);
  return sizes;
}

namespace {

schedules::ScheduleParams schedule_params(const PipelineLayout& pipeline, int64_t minibatch,
                                          int64_t minibatches) {
  schedules::ScheduleParams params;
  params.kind = schedules::parse_schedule_kind(pipeline.schedule);
  params.minibatch_size = minibatch;
  params.minibatches = minibatches;
  params.chunks = static_cast<int>(pipeline.chunks);
  params.rematerialize = pipeline.rematerialize;
  if (!pipeline.slices.empty()) params.slices = static_cast<int>(pipeline.slices.front());
  const bool umpipe = params.kind == schedules::ScheduleKind::umpipe;
  if (!umpipe || (pipeline.compositions.empty() && pipeline.slices.size() <= 1)) return params;
  // A count per stage is that many equal slices on that stage, forward and backward.
  for (size_t s = 0; s < pipeline.stages.size(); ++s) {
    if (!pipeline.compositions.empty()) {
      params.forward_slices.push_back(pipeline.compositions[s].forward);
      params.backward_slices.push_back(pipeline.compositions[s].backward);
      continue;
    }
    const std::vector<int64_t> sizes = equal_sizes(minibatch, pipeline.slices[s]);
    params.forward_slices.push_back(sizes);
    params.backward_slices.push_back(sizes);
  }
  return params;
}

}  // namespace

schedules::Plan pipeline_plan(const PipelineLayout& pipeline, int64_t minibatch, int num_layers,
                              int64_t minibatches) {
  schedules::ScheduleParams params = schedule_params(pipeline, minibatch, minibatches);
  std::vector<schedules::StagePlan> stages;
  for (const StageSpec& st : pipeline.stages) {
    schedules::StagePlan sp;
    sp.layers.begin = static_cast<int>(st.first_layer);
    sp.layers.end = static_cast<int>(st.last_layer < 0 ? num_layers : st.last_layer + 1);
    sp.replicas.assign(static_cast<size_t>(st.replicas), schedules::Placement{"", st.device.str()});
    for (size_t r = 0; r < st.devices.size() && r < sp.replicas.size(); ++r) {
      sp.replicas[r].device = st.devices[r].str();
    }
    stages.push_back(std::move(sp));
  }
  schedules::Plan plan = schedules::Plan::make(std::move(stages), std::move(params));
  plan.validate(num_layers);
  return plan;
}

bool is_pipeline(const JobSpec& job) {
  return job.pipeline &&
         (job.pipeline->stages.size() > 1 || job.pipeline->stages.front().replicas > 1);
}

PipelineLayout accumulated(PipelineLayout p, int64_t k) {
  if (k == 1) return p;
  const auto kind = schedules::parse_schedule_kind(p.schedule);
  if (kind == schedules::ScheduleKind::pipedream ||
      kind == schedules::ScheduleKind::pipedream_vsync) {
    throw JobError("train.accumulate",
                   std::to_string(k) + " minibatches per step, but " + p.schedule +
                       " updates after every minibatch; accumulating over slices is 2bw's "
                       "batch (pipeline.slices)");
  }
  if (p.slices.empty()) p.slices.push_back(1);
  for (int64_t& m : p.slices) {
    if (m > std::numeric_limits<std::int32_t>::max() / k) {
      throw JobError("train.accumulate", std::to_string(k) + " minibatches of " +
                                             std::to_string(m) + " slices make too many slices");
    }
    m *= k;
  }
  for (SliceComposition& c : p.compositions) {
    const SliceComposition one = c;
    for (int64_t i = 1; i < k; ++i) {
      c.forward.insert(c.forward.end(), one.forward.begin(), one.forward.end());
      c.backward.insert(c.backward.end(), one.backward.begin(), one.backward.end());
    }
  }
  return p;
}

schedules::Plan training_plan(const JobSpec& job, int num_layers, int64_t steps) {
  PipelineLayout one;  // no pipeline section: one stage of every layer on the CPU
  one.stages.push_back(StageSpec{});
  if (job.train.accumulate < 1) {
    throw JobError("train.accumulate", "must be >= 1, got " + std::to_string(job.train.accumulate));
  }
  // k minibatches of m slices each make one minibatch of k * m slices: the schedule's flush
  // (or 2BW's batch) is the step, and every slice's loss is scaled by the k minibatches' rows.
  const PipelineLayout p = accumulated(job.pipeline ? *job.pipeline : one, job.train.accumulate);
  for (size_t s = 0; s < p.stages.size(); ++s) {
    // Sim stages compute no values, so there would be no loss to learn from.
    if (!p.stages[s].device.has_data()) {
      throw JobError("pipeline.stages[" + std::to_string(s) + "].device",
                     "device " + p.stages[s].device.str() +
                         " holds no data; training needs cpu or cuda (`tandem simulate` "
                         "times a schedule without data)");
    }
  }
  try {
    return pipeline_plan(p, step_samples(job.train), num_layers, steps);
  } catch (const schedules::ScheduleError& e) {
    throw JobError(job.pipeline ? "pipeline" : "train", e.what());
  }
}

}  // namespace tandem::train
