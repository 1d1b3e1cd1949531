#include "train/config_limits.hpp"

#include <unistd.h>

#include <cstdio>

#include "runtime/device.hpp"

namespace tandem::train {

Machine Machine::here() {
  Machine m;
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGESIZE);
  // Unknown (a sandbox hiding /proc): no limit rather than refusing every config.
  m.memory_bytes = pages > 0 && page_size > 0
                       ? static_cast<double>(pages) * static_cast<double>(page_size)
                       : 1e300;
  m.probe_cuda = true;
  return m;
}

CudaFacts cuda_facts(const Machine& machine) {
  if (!machine.probe_cuda) return {machine.cuda_built, machine.cuda_devices};
  return {cuda_backend_built(), cuda_device_count()};
}

double gpt_parameter_estimate(const models::ModelSpec& spec) {
  const auto d = static_cast<double>(spec.d_model);
  const auto d_ff = static_cast<double>(spec.d_ff > 0 ? spec.d_ff : 4 * spec.d_model);
  const auto vocab = static_cast<double>(spec.vocab);
  // Per block: attention (q, k, v, out) and the two MLP matrices; biases and norms are
  // negligible next to them and left out (a lower bound).
  const double block = 4 * d * d + 2 * d * d_ff;
  return static_cast<double>(spec.layers) * block + 2 * vocab * d +
         static_cast<double>(spec.seq_len) * d;
}

double parameter_count(const models::Model& model) {
  double count = 0;
  for (int i = 0; i < model.num_layers(); ++i) {
    for (const models::ParamSpec& p : model.layer(i).param_specs()) {
      double n = 1;
      for (const std::int64_t dim : p.shape) n *= static_cast<double>(dim);
      count += n;
    }
  }
  return count;
}

double activation_count(const models::Model& model, std::int64_t batch) {
  double count = 0;
  for (const Shape& shape : model.activation_shapes(batch)) {
    double n = 1;
    for (const std::int64_t dim : shape) n *= static_cast<double>(dim);
    count += n;
  }
  return count;
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024 && u < 6) {
    bytes /= 1024;
    ++u;
  }
  char text[48];
  std::snprintf(text, sizeof text, u == 0 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
  return text;
}

double optimizer_floats(const models::OptimizerSpec& o) {
  if (o.kind == "adamw") return 2;
  return o.momentum > 0 ? 1 : 0;
}

}  // namespace tandem::train
