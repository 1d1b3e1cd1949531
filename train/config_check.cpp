#include "train/config_check.hpp"

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <variant>

#include "models/delay_correction.hpp"
#include "models/optimizer.hpp"
#include "planner/cluster.hpp"
#include "planner/profile.hpp"
#include "schedules/schedule.hpp"
#include "schedules/schedule_error.hpp"
#include "train/job_plan.hpp"
#include "train/memory_check.hpp"
#include "train/partition_choice.hpp"
#include "train/schedule_choice.hpp"

namespace tandem::train {
namespace {

namespace data = models::data;

planner::Profile load_profile_of(const std::filesystem::path& path, int num_layers) {
  planner::Profile profile;
  try {
    profile = planner::load_profile(path);
  } catch (const std::exception& e) {
    throw JobError("pipeline.profile", e.what());
  }
  if (static_cast<int64_t>(profile.layers.size()) != num_layers) {
    throw JobError("pipeline.profile",
                   "profiles " + std::to_string(profile.layers.size()) + " layers; the model has " +
                       std::to_string(num_layers) +
                       " (profile this config's model: tandem profile CONFIG -o FILE)");
  }
  return profile;
}

planner::Cluster load_cluster_of(const std::filesystem::path& path) {
  try {
    return planner::load_cluster(path);
  } catch (const std::exception& e) {
    throw JobError("pipeline.cluster", e.what());
  }
}

// cpu stages of one process share its cores: their ops run at the speed of a profile measured
// with as many copies at once (`tandem profile --concurrent`), which the ranking says when the
// profile differs, or when there is none (the FLOP counts know nothing of this machine).
void note_profile_fit(const std::optional<planner::Profile>& profile, const PipelineLayout& p,
                      planner::ScheduleRanking& ranking) {
  std::map<int64_t, int> cpu_per_rank;
  for (const StageSpec& st : p.stages) {
    for (int64_t r = 0; r < st.replicas; ++r) {
      const auto i = static_cast<std::size_t>(r);
      const Device& d = i < st.devices.size() ? st.devices[i] : st.device;
      if (d.kind() != DeviceKind::cpu) continue;
      ++cpu_per_rank[i < st.ranks.size() ? st.ranks[i] : 0];
    }
  }
  int most = 0;
  for (const auto& [rank, n] : cpu_per_rank) most = std::max(most, n);
  if (most == 0) return;
  if (!profile) {
    ranking.notes.push_back(
        "timed on the model's FLOP counts at a nominal speed: the order of schedules, not this "
        "machine's step time; `tandem profile CONFIG --concurrent " +
        std::to_string(most) + " -o P.json` and `profile: P.json` predict it");
  } else if (profile->concurrent != most) {
    ranking.notes.push_back(
        "the profile was measured " + std::to_string(profile->concurrent) + " cop" +
        (profile->concurrent == 1 ? "y" : "ies") + " at a time, but " + std::to_string(most) +
        " cpu stages share one process's cores here: `tandem profile " + "CONFIG --concurrent " +
        std::to_string(most) + "` measures what they see");
  }
}

// `partition: auto` plans the stages from the profile and cluster files; `schedule: auto` on
// the config's own stages ranks every schedule that runs them, timed on the `profile:` if the
// config names one, else on the model's FLOP counts, over the `cluster:`'s links if it names
// one, else free links and no memory bound (the machine's memory is checked after, for the
// pick).
void plan_stages(Config& c, const models::Model& model) {
  PipelineLayout& p = *c.pipeline;
  const ConfigPlanning& planning = c.planning;
  if (planning.partition) {
    PartitionInputs inputs{load_profile_of(*planning.profile, model.num_layers()),
                           load_cluster_of(*planning.cluster), planning.allow_async};
    c.schedule_ranking = plan_partition(p, c.train.minibatch, inputs);
    c.where.stages.assign(p.stages.size(), c.where.of("pipeline.partition"));
    return;
  }
  if (p.schedule != "auto") return;
  ScheduleChoiceInputs inputs;
  if (planning.profile) inputs.profile = load_profile_of(*planning.profile, model.num_layers());
  if (planning.cluster) inputs.cluster = load_cluster_of(*planning.cluster);
  inputs.allow_async = planning.allow_async;
  c.schedule_ranking = choose_schedule(p, c.train.minibatch, model, inputs);
  note_profile_fit(inputs.profile, p, *c.schedule_ranking);
}

// Devices this machine has: a stage on a missing GPU would fail only once its actor starts.
void check_device(const Device& device, const Machine& machine, const std::string& key) {
  if (!device.is_cuda()) return;
  const CudaFacts cuda = cuda_facts(machine);
  if (!cuda.built) {
    throw JobError(key, "'" + device.str() +
                            "' does not exist: this build has no CUDA backend (devices: cpu, sim)");
  }
  if (device.index() >= cuda.devices) {
    throw JobError(key, "'" + device.str() + "' does not exist: this machine has " +
                            std::to_string(cuda.devices) + " CUDA device" +
                            (cuda.devices == 1 ? "" : "s"));
  }
}

// Each stage's devices, at its `device` or `devices` key (planned stages: the cluster's).
void check_devices(const Config& c, const Machine& machine) {
  const std::vector<StageSpec>& stages = c.pipeline->stages;
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const StageSpec& st = stages[i];
    const std::string stage = "pipeline.stages[" + std::to_string(i) + "].";
    const std::string key = c.planning.partition ? "pipeline.cluster"
                            : st.devices.empty() ? stage + "device"
                                                 : stage + "devices";
    check_device(st.device, machine, key);
    for (const Device& d : st.devices) check_device(d, machine, key);
  }
}

// Slices and chunks against the stages, which partition: auto knows only once it has planned.
void check_layout(const PipelineLayout& p, int num_layers) {
  const bool interleaved = p.schedule == "interleaved";
  const bool v_shape = p.schedule == "zb-v";
  const auto stage_count = static_cast<int64_t>(p.stages.size());
  if (p.slices.size() > 1 && p.slices.size() != p.stages.size()) {
    throw JobError("pipeline.slices", "gives " + std::to_string(p.slices.size()) + " values for " +
                                          std::to_string(p.stages.size()) + " stages");
  }
  if (p.slices.size() > 1 && p.schedule != "umpipe" &&
      std::adjacent_find(p.slices.begin(), p.slices.end(), std::not_equal_to<>()) !=
          p.slices.end()) {
    throw JobError("pipeline.slices",
                   "schedule " + p.schedule +
                       " cuts every stage's minibatch alike; different counts per stage need "
                       "umpipe");
  }
  if (!p.compositions.empty() && p.compositions.size() != p.stages.size()) {
    throw JobError("pipeline.slices",
                   "gives slice sizes for " + std::to_string(p.compositions.size()) +
                       " stages, the pipeline has " + std::to_string(p.stages.size()));
  }
  if (interleaved) {
    const int64_t m_slices = p.slices.empty() ? 1 : p.slices.front();
    if (m_slices % stage_count != 0) {
      throw JobError("pipeline.slices", "interleaved needs slices to be a multiple of the " +
                                            std::to_string(stage_count) + " stages, got " +
                                            std::to_string(m_slices));
    }
  }
  if ((interleaved || v_shape) && stage_count * p.chunks > num_layers) {
    throw JobError("pipeline.chunks", std::to_string(stage_count) + " stages x " +
                                          std::to_string(p.chunks) + " chunks need " +
                                          std::to_string(stage_count * p.chunks) +
                                          " layers; the model has " + std::to_string(num_layers));
  }
}

// A delay correction corrects stale gradients, which only the asynchronous schedules have (with
// schedule: auto, the pick's), and needs an optimizer it can correct.
void check_async_correction(const Config& c) {
  const PipelineLayout& p = *c.pipeline;
  if (p.async_correction == models::AsyncCorrection::none) return;
  if (p.schedule != "pipedream" && p.schedule != "pipedream-vsync" && p.schedule != "2bw") {
    throw JobError("pipeline.async_correction",
                   "applies to schedules pipedream, pipedream-vsync and 2bw only (their "
                   "gradients are stale); schedule " +
                       p.schedule + " flushes");
  }
  try {
    (void)models::make_optimizer(c.train.optimizer, p.async_correction, 1);
  } catch (const std::invalid_argument& e) {
    throw JobError("pipeline.async_correction", e.what());
  }
}

// Whatever the schedule itself refuses (2BW with fewer slices than stages, replicas under a
// schedule without data parallelism, ...), at the pipeline section.
void check_runnable(const Config& c, int num_layers) {
  try {
    const schedules::Plan plan =
        pipeline_plan(*c.pipeline, c.train.minibatch, num_layers, c.train.steps);
    (void)schedules::Schedule(plan.schedule);
  } catch (const schedules::ScheduleError& e) {
    throw JobError("pipeline", std::string("cannot run this pipeline: ") + e.what());
  }
}

// A graph with sim nodes (models/layers/sim_node.hpp) computes nothing: every stage on sim.
void check_sim_nodes(const Config& c) {
  if (c.model.name != "graph") return;
  const auto sim = std::find_if(c.model.graph.nodes.begin(), c.model.graph.nodes.end(),
                                [](const models::GraphNode& n) { return n.layer == "sim"; });
  if (sim == c.model.graph.nodes.end()) return;
  const std::string node = "node '" + sim->name + "' is a sim layer, which computes nothing";
  if (!c.pipeline) {
    throw JobError("model.graph",
                   node + ": it runs only in a pipeline whose stages are all on device sim");
  }
  for (std::size_t i = 0; i < c.pipeline->stages.size(); ++i) {
    const StageSpec& st = c.pipeline->stages[i];
    bool all_sim = st.device.is_sim();
    for (const Device& d : st.devices) all_sim = all_sim && d.is_sim();
    if (!all_sim) {
      throw JobError("pipeline.stages[" + std::to_string(i) + "].device",
                     node + ": every stage must be on device sim");
    }
  }
}

// PipeDream updates after every minibatch (with schedule: auto, if it is the pick).
void check_accumulate(const Config& c) {
  if (!c.pipeline || c.train.accumulate <= 1) return;
  const std::string& schedule = c.pipeline->schedule;
  if (schedule == "pipedream" || schedule == "pipedream-vsync") {
    throw JobError("train.accumulate",
                   std::to_string(c.train.accumulate) + " minibatches per step, but " + schedule +
                       " updates after every minibatch; accumulating over slices is 2bw's batch "
                       "(pipeline.slices)");
  }
}

// Bytes the data needs in memory: every generated token stream and epoch permutation (8 bytes
// a sample), and the files, read whole.
double data_bytes(const data::DataSpec& spec, int64_t eval_samples) {
  const auto eval = static_cast<double>(eval_samples);
  const auto file_bytes = [](const std::filesystem::path& path) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    return ec ? 0.0 : static_cast<double>(size);
  };
  return std::visit(
      [&](const auto& d) -> double {
        using T = std::decay_t<decltype(d)>;
        if constexpr (std::is_same_v<T, data::TeacherData> ||
                      std::is_same_v<T, data::TeacherRegressionData> ||
                      std::is_same_v<T, data::ProceduralImagesData>) {
          return 8 * static_cast<double>(d.samples);
        } else if constexpr (std::is_same_v<T, data::SequencePairsData>) {
          return 8 * static_cast<double>(d.samples);
        } else if constexpr (std::is_same_v<T, data::VideoCaptionsData>) {
          // The permutations, and the token embeddings the frames are drawn from.
          return 8 * static_cast<double>(d.samples) +
                 4 * static_cast<double>(d.spec.vocab) * static_cast<double>(d.spec.features);
        } else if constexpr (std::is_same_v<T, data::MarkovTextData>) {
          return (8 + 2 * static_cast<double>(d.seq_len)) * (static_cast<double>(d.samples) + eval);
        } else if constexpr (std::is_same_v<T, data::TokenFileData>) {
          return 2 * (file_bytes(d.train) + (d.eval ? file_bytes(*d.eval) : 0.0));
        } else if constexpr (std::is_same_v<T, data::MnistData>) {
          return file_bytes(d.images) + (d.eval_images ? file_bytes(*d.eval_images) : 0.0);
        } else {
          double bytes = 0;
          for (const auto& f : d.files) bytes += file_bytes(f);
          for (const auto& f : d.eval_files) bytes += file_bytes(f);
          return bytes;
        }
      },
      spec);
}

// The whole run against the machine's memory, the data's bytes included.
void check_memory(const Config& c, const models::Model& model, const Machine& machine) {
  const int64_t eval = c.train.eval ? c.train.eval->samples : 0;
  const double all = data_bytes(c.data, eval);
  check_job_memory(c, model, c.parameters, {all, data_bytes(c.data, 0)}, machine.memory_bytes);
}

}  // namespace

void check_config(Config& c, const Machine& machine) {
  auto model = std::make_shared<const models::Model>(models::Model::build(c.model));
  at_config(c, [&] {
    if (c.pipeline) {
      plan_stages(c, *model);
      check_devices(c, machine);
      check_layout(*c.pipeline, model->num_layers());
      check_async_correction(c);
      check_runnable(c, model->num_layers());
    }
    check_sim_nodes(c);
    check_accumulate(c);
    check_memory(c, *model, machine);
  });
  c.model_built = std::move(model);
}

}  // namespace tandem::train
