#pragma once
// A random Markov chain over tokens whose entropy rate is known exactly: the best possible
// next-token loss of a language model trained on its output. The chain has order k: the next
// token depends on the last k tokens. Every transition has positive probability (softmax of
// Gaussian scores scaled by `sharpness`), so the chain is ergodic and its stationary
// distribution unique.
#include <cstdint>
#include <vector>

namespace tandem::models::data {

struct MarkovSpec {
  int64_t vocab = 16;
  int order = 1;
  double sharpness = 2.0;  // larger: more predictable text, lower entropy rate
  uint64_t seed = 1;
};

class MarkovChain {
 public:
  explicit MarkovChain(const MarkovSpec& spec);

  // Throws std::invalid_argument for what the constructor would refuse, without building the
  // tables (a config is checked long before, and far more often than, its chain is built);
  // returns vocab^order.
  static int64_t check(const MarkovSpec& spec);

  const MarkovSpec& spec() const { return spec_; }
  int64_t states() const { return states_; }  // vocab^order contexts
  // P(next = c | context s) at [s * vocab + c]; context s is the last `order` tokens in base
  // vocab, the newest token least significant.
  const std::vector<double>& transitions() const { return transitions_; }
  // Stationary distribution over contexts.
  const std::vector<double>& stationary() const { return stationary_; }

  // H(X_t | X_{t-k..t-1}) under the stationary distribution, in nats per token.
  double entropy_rate() const { return entropy_rate_; }
  // Best mean loss, in nats, over the seq_len targets of one window of a stationary stream
  // (TokenWindows): targets 1..k-1 see fewer than k tokens of context and cost more than the
  // entropy rate. Equals entropy_rate() for order 1.
  double optimal_window_loss(int64_t seq_len) const;

  // `length` tokens of a stationary stream (the first context drawn from the stationary
  // distribution), fully determined by `stream_seed`.
  std::vector<uint16_t> generate(int64_t length, uint64_t stream_seed) const;

 private:
  // Entropy of m consecutive tokens of the stationary stream, m <= order.
  double block_entropy(int m) const;

  MarkovSpec spec_;
  int64_t states_ = 0;
  std::vector<double> transitions_;
  std::vector<double> stationary_;
  double entropy_rate_ = 0.0;
};

}  // namespace tandem::models::data
