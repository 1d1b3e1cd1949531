#include "train/elastic_plan.hpp"

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "train/config_limits.hpp"
#include "train/job_error.hpp"

namespace tandem::train {

JobSpec replan_job(const JobSpec& job, int num_layers, int world_size) {
  JobSpec out = job;
  PipelineLayout layout = job.pipeline ? *job.pipeline : PipelineLayout{};
  if (!layout.compositions.empty()) {
    throw JobError("pipeline",
                   "an elastic job cannot re-plan UMPIPE slice compositions given per "
                   "stage; give one slice count instead");
  }
  const Device device = layout.stages.empty() ? Device::cpu() : layout.stages.front().device;
  // Interleaved stages hold `chunks` virtual stages of at least a layer each.
  const int per_stage = static_cast<int>(std::max<int64_t>(1, layout.chunks));
  const int stages = std::max(1, std::min(world_size, num_layers / per_stage));
  layout.stages.clear();
  for (int s = 0; s < stages; ++s) {
    StageSpec st;
    st.first_layer = static_cast<int64_t>(s) * num_layers / stages;
    st.last_layer = static_cast<int64_t>(s + 1) * num_layers / stages - 1;
    st.device = device;
    layout.stages.push_back(st);
  }
  if (layout.slices.size() > 1) layout.slices.erase(layout.slices.begin() + 1, layout.slices.end());
  out.pipeline = layout;
  return out;
}

std::string describe_cut(const schedules::Plan& plan) {
  std::ostringstream out;
  for (std::size_t s = 0; s < plan.stages.size(); ++s) {
    const schedules::LayerRange& r = plan.stages[s].layers;
    out << (s == 0 ? "" : " | ") << r.begin;
    if (r.end - 1 > r.begin) out << '-' << r.end - 1;
  }
  return out.str();
}

void check_replan_fits(const JobSpec& job, const models::Model& model, double memory_bytes) {
  if (!job.pipeline) return;
  const double per_parameter = 4 * (2 + optimizer_floats(job.train.optimizer));
  for (std::size_t s = 0; s < job.pipeline->stages.size(); ++s) {
    const StageSpec& st = job.pipeline->stages[s];
    if (!st.device.is_cpu()) continue;
    const int last = static_cast<int>(st.last_layer < 0 ? model.num_layers() - 1 : st.last_layer);
    const double bytes =
        per_parameter *
        static_cast<double>(
            model.init_params(0, static_cast<int>(st.first_layer), last + 1, Device::sim())
                .numel());
    if (bytes > memory_bytes) {
      throw std::runtime_error(
          "re-planned onto " + std::to_string(job.pipeline->stages.size()) + " ranks, stage " +
          std::to_string(s) + " (layers " + std::to_string(st.first_layer) + "-" +
          std::to_string(last) + ") would hold at least " + human_bytes(bytes) +
          " of weights, gradients and optimizer state, more than a rank's " +
          human_bytes(memory_bytes) + ": the model needs more ranks than are left");
    }
  }
}

}  // namespace tandem::train
