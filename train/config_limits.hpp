#pragma once
// What a config may ask of the machine it is read on. Reading a config builds no tensors, but
// what it describes can be far larger than the machine (`layers: 100000000`), so every size is
// estimated from the spec, in floating point, before anything is built or allocated, and a
// config that cannot fit is refused at the key that makes it big, instead of by std::bad_alloc
// seconds later. The estimates are lower bounds (weights, gradients, optimizer state, one
// minibatch's activations, materialised data): a refusal is certain, an acceptance is not a
// promise.
#include <cstdint>
#include <string>

#include "models/model.hpp"
#include "models/model_spec.hpp"
#include "models/optimizer.hpp"

namespace tandem::train {

// The machine a config is checked against.
struct Machine {
  double memory_bytes = 0;  // physical memory
  int cuda_devices = 0;     // GPUs this build can use (0 without the CUDA backend)
  bool cuda_built = false;  // whether this build has the CUDA backend
  // here(): the two fields above are asked of the runtime only when a config names a cuda
  // device (cuda_facts), since asking loads the CUDA plugin, which a CPU-only run never maps.
  bool probe_cuda = false;

  static Machine here();  // this process's machine (sysconf, runtime/device.hpp)
};

// `machine`'s cuda_built and cuda_devices, asked of the runtime when it says probe_cuda.
struct CudaFacts {
  bool built = false;
  int devices = 0;
};
CudaFacts cuda_facts(const Machine& machine);

// Largest value of a model dimension or count a config may give: far beyond any real model,
// small enough that products of a few of them stay exact in double and never overflow int64
// on the way (shape products, seq_len * samples).
inline constexpr std::int64_t kMaxDimension = std::int64_t{1} << 31;

// Parameters of a GPT spec, from the formula (embedding, blocks, head), without building it.
double gpt_parameter_estimate(const models::ModelSpec& spec);

// Parameters of a built model, from its layers' parameter shapes (nothing allocated).
double parameter_count(const models::Model& model);

// Floats of the activations of one minibatch of `batch` samples through every layer.
double activation_count(const models::Model& model, std::int64_t batch);

// Optimizer state per parameter, in floats (AdamW: two moments; SGD: momentum, if any).
double optimizer_floats(const models::OptimizerSpec& optimizer);

// "1.50 GiB".
std::string human_bytes(double bytes);

}  // namespace tandem::train
