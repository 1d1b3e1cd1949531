#include "models/data/markov_text.hpp"

#include <stdexcept>

namespace tandem::models::data {
namespace {

std::shared_ptr<const std::vector<uint16_t>> stream(const MarkovChain& chain, int64_t samples,
                                                    int64_t seq_len, uint64_t split) {
  if (samples < 1 || seq_len < 1) {
    throw std::invalid_argument("markov text: samples and seq_len must be >= 1");
  }
  return std::make_shared<const std::vector<uint16_t>>(
      chain.generate(samples * seq_len + 1, split));
}

std::shared_ptr<const MarkovChain> checked(std::shared_ptr<const MarkovChain> chain) {
  if (!chain) throw std::invalid_argument("markov text: no chain");
  return chain;
}

}  // namespace

MarkovText::MarkovText(std::shared_ptr<const MarkovChain> chain, int64_t samples, int64_t seq_len,
                       uint64_t split)
    : chain_(checked(std::move(chain))),
      split_(split),
      windows_(stream(*chain_, samples, seq_len, split), seq_len, chain_->spec().vocab,
               "markov-text") {}

MarkovText::MarkovText(const MarkovSpec& spec, int64_t samples, int64_t seq_len, uint64_t split)
    : MarkovText(std::make_shared<const MarkovChain>(spec), samples, seq_len, split) {}

std::string MarkovText::describe() const {
  const MarkovSpec& s = chain_->spec();
  return "markov-text(vocab=" + std::to_string(s.vocab) + ", order=" + std::to_string(s.order) +
         ", sharpness=" + std::to_string(s.sharpness) + ", seed=" + std::to_string(s.seed) +
         ", split=" + std::to_string(split_) + ", samples=" + std::to_string(size()) +
         ", seq_len=" + std::to_string(windows_.seq_len()) +
         ", entropy_rate=" + std::to_string(entropy_rate()) + " nats)";
}

}  // namespace tandem::models::data
