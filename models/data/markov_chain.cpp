#include "models/data/markov_chain.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "runtime/counter_rng.hpp"

namespace tandem::models::data {
namespace {

constexpr uint64_t kChainStream = 0x3a7c0;
// Bounds the transition table (8 bytes per entry) and the work of one power iteration.
constexpr int64_t kMaxEntries = int64_t{1} << 22;
constexpr int kMaxIterations = 1'000'000;
// Power iteration's total work (entry updates): a sharp chain with many contexts mixes so
// slowly that a run would otherwise sit here for hours before its first step.
constexpr int64_t kMaxWork = int64_t{1} << 33;
constexpr double kTolerance = 1e-15;

double plogp(double p) {
  return p > 0 ? -p * std::log(p) : 0.0;
}

}  // namespace

int64_t MarkovChain::check(const MarkovSpec& spec) {
  if (spec.vocab < 2 || spec.vocab > 65536) {
    throw std::invalid_argument("markov chain: vocab must be in [2, 65536], got " +
                                std::to_string(spec.vocab));
  }
  if (spec.order < 1) throw std::invalid_argument("markov chain: order must be >= 1");
  if (!(spec.sharpness >= 0) || !std::isfinite(spec.sharpness)) {
    throw std::invalid_argument("markov chain: sharpness must be finite and >= 0");
  }
  int64_t states = 1;
  for (int i = 0; i < spec.order; ++i) {
    states *= spec.vocab;
    if (states * spec.vocab > kMaxEntries) {
      throw std::invalid_argument("markov chain: vocab^order * vocab is too large");
    }
  }
  return states;
}

MarkovChain::MarkovChain(const MarkovSpec& spec) : spec_(spec), states_(check(spec)) {
  const auto v = static_cast<size_t>(spec.vocab);
  const auto s_count = static_cast<size_t>(states_);

  auto rng = RngStream::from_key(stream_key(spec.seed, kChainStream, 0));
  transitions_.resize(s_count * v);
  for (size_t s = 0; s < s_count; ++s) {
    double* row = &transitions_[s * v];
    double max_score = -1e300;
    for (size_t c = 0; c < v; ++c) {
      row[c] = spec.sharpness * rng.normal();
      max_score = std::max(max_score, row[c]);
    }
    double sum = 0.0;
    for (size_t c = 0; c < v; ++c) sum += row[c] = std::exp(row[c] - max_score);
    for (size_t c = 0; c < v; ++c) row[c] /= sum;
  }

  // Power iteration: every transition is positive, so the chain over contexts is primitive
  // and the iteration converges geometrically to the unique stationary distribution.
  stationary_.assign(s_count, 1.0 / static_cast<double>(s_count));
  std::vector<double> next(s_count);
  bool converged = false;
  const int64_t entries = states_ * spec.vocab;
  const auto iterations = static_cast<int>(std::min<int64_t>(kMaxIterations, kMaxWork / entries));
  for (int it = 0; it < iterations && !converged; ++it) {
    std::fill(next.begin(), next.end(), 0.0);
    for (size_t s = 0; s < s_count; ++s) {
      const size_t shifted = (s * v) % s_count;  // drop the oldest token, make room for c
      for (size_t c = 0; c < v; ++c) next[shifted + c] += stationary_[s] * transitions_[s * v + c];
    }
    double sum = 0.0, change = 0.0;
    for (double p : next) sum += p;
    for (size_t s = 0; s < s_count; ++s) {
      next[s] /= sum;
      change = std::max(change, std::abs(next[s] - stationary_[s]));
    }
    stationary_.swap(next);
    converged = change < kTolerance;
  }
  if (!converged)
    throw std::runtime_error("markov chain: stationary distribution did not converge in " +
                             std::to_string(iterations) + " iterations over " +
                             std::to_string(states_) +
                             " contexts; lower order, vocab or sharpness");

  for (size_t s = 0; s < s_count; ++s) {
    double h = 0.0;
    for (size_t c = 0; c < v; ++c) h += plogp(transitions_[s * v + c]);
    entropy_rate_ += stationary_[s] * h;
  }
}

double MarkovChain::block_entropy(int m) const {
  // The stationary distribution over contexts is the joint of `order` consecutive tokens;
  // the joint of the newest m of them is a marginal.
  const auto v = static_cast<size_t>(spec_.vocab);
  size_t blocks = 1;
  for (int i = 0; i < m; ++i) blocks *= v;
  std::vector<double> joint(blocks, 0.0);
  for (size_t s = 0; s < stationary_.size(); ++s) joint[s % blocks] += stationary_[s];
  double h = 0.0;
  for (double p : joint) h += plogp(p);
  return h;
}

double MarkovChain::optimal_window_loss(int64_t seq_len) const {
  if (seq_len < 1) throw std::invalid_argument("markov chain: seq_len must be >= 1");
  // Target j (1-based) is predicted from the j tokens before it: H(X_j | X_0..X_{j-1}).
  double total = 0.0;
  for (int64_t j = 1; j <= seq_len; ++j) {
    if (j >= spec_.order) {
      total += entropy_rate_ * static_cast<double>(seq_len - j + 1);
      break;
    }
    total += block_entropy(static_cast<int>(j) + 1) - block_entropy(static_cast<int>(j));
  }
  return total / static_cast<double>(seq_len);
}

std::vector<uint16_t> MarkovChain::generate(int64_t length, uint64_t stream_seed) const {
  if (length < 0) throw std::invalid_argument("markov chain: negative length");
  const auto v = static_cast<size_t>(spec_.vocab);
  const auto s_count = static_cast<size_t>(states_);
  auto rng = RngStream::from_key(stream_key(spec_.seed, stream_seed, 1));
  auto draw = [&rng](const double* p, size_t n) {
    double u = rng.uniform();
    for (size_t i = 0; i + 1 < n; ++i) {
      if (u < p[i]) return i;
      u -= p[i];
    }
    return n - 1;
  };

  std::vector<uint16_t> out;
  out.reserve(static_cast<size_t>(length));
  size_t state = draw(stationary_.data(), s_count);
  // Emit the starting context, oldest token first.
  std::vector<uint16_t> context(static_cast<size_t>(spec_.order));
  size_t rest = state;
  for (size_t i = context.size(); i-- > 0;) {
    context[i] = static_cast<uint16_t>(rest % v);
    rest /= v;
  }
  for (size_t i = 0; i < context.size() && static_cast<int64_t>(out.size()) < length; ++i) {
    out.push_back(context[i]);
  }
  while (static_cast<int64_t>(out.size()) < length) {
    const size_t c = draw(&transitions_[state * v], v);
    out.push_back(static_cast<uint16_t>(c));
    state = (state * v) % s_count + c;
  }
  return out;
}

}  // namespace tandem::models::data
