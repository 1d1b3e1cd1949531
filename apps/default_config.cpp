#include "apps/default_config.hpp"

namespace tandem::apps {

// Keep in step with configs/default.yaml (tests/apps/pipeline_trainer_test.cpp compares them).
std::string_view default_config() {
  static constexpr std::string_view kText =
      R"yaml(# What `tandem train` runs when given no config (and so what `scripts/run` runs): a small GPT
# cut into 4 stages learns text from a random first-order Markov chain under PipeDream's
# asynchronous 1F1B with weight stashing, on every core. The loss starts near ln(32) = 3.47
# nats and falls to within a few hundredths of a nat of the chain's entropy rate (1.25
# nats/token), which the summary reports the gap to; 15-40 s on two cores, as busy as they are.
# The model has 7 layers (embedding, 4 blocks, final LayerNorm, head); each stage holds one
# block. apps/default_config.cpp embeds this text; tests/apps/pipeline_trainer_test.cpp checks
# that the two are identical.
model: {name: gpt, layers: 4, d_model: 64, heads: 4, seq_len: 32, vocab: 32}
data: {kind: markov-text, vocab: 16, order: 1, sharpness: 3.0, samples: 8192, seed: 1}
train:
  minibatch: 32
  steps: 600
  optimizer: {kind: adamw, lr: 1.5e-3}
  lr_schedule: {kind: cosine, warmup_steps: 40, final_fraction: 0.1}
  seed: 0
  log_every: 20
  eval: {samples: 512}
pipeline:
  schedule: pipedream
  stages:
    - {layers: "0-1"}
    - {layers: "2"}
    - {layers: "3"}
    - {layers: "4-6"}
)yaml";
  return kText;
}

}  // namespace tandem::apps
