#include "train/memory_check.hpp"

#include <string>

#include "train/config_limits.hpp"
#include "train/job_error.hpp"

namespace tandem::train {

void check_job_memory(const JobSpec& c, const models::Model& model, double parameters,
                      const DataBytes& data, double memory_bytes) {
  double weight_copies = 1;  // a model on one device
  if (c.pipeline) {
    weight_copies = 0;
    const double per_layer = 1.0 / model.num_layers();  // stages' share, by layer count
    for (const StageSpec& st : c.pipeline->stages) {
      double holding = 0;  // replicas on a device with data
      if (st.devices.empty()) {
        holding = st.device.has_data() ? static_cast<double>(st.replicas) : 0.0;
      } else {
        for (const Device& d : st.devices) holding += d.has_data() ? 1 : 0;
      }
      const int64_t last = st.last_layer < 0 ? model.num_layers() - 1 : st.last_layer;
      weight_copies += holding * static_cast<double>(last - st.first_layer + 1) * per_layer;
    }
  }
  const double weights = 4 * parameters * weight_copies * (2 + optimizer_floats(c.train.optimizer));
  const double activations = 4 * activation_count(model, c.train.minibatch);
  const double data_part = data.all;
  const double total = weights + activations + data_part;
  if (total <= memory_bytes) return;
  const std::string what = "the run would need at least " + human_bytes(total) + " (weights, " +
                           "gradients and optimizer state " + human_bytes(weights) +
                           ", activations of a minibatch " + human_bytes(activations) + ", data " +
                           human_bytes(data_part) + "), more than this machine's " +
                           human_bytes(memory_bytes) + " of memory";
  if (activations >= weights && activations >= data_part) throw JobError("train.minibatch", what);
  if (data_part >= weights) {
    if (data.training >= data_part - data.training) throw JobError("data", what);
    throw JobError("train.eval.samples", what);
  }
  throw JobError("model", what);
}

}  // namespace tandem::train
