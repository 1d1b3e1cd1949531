#include "actors/minibatch_data.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace tandem::actors {

MinibatchData MinibatchData::whole(Tensor inputs, Tensor targets) {
  if (!inputs.defined() || !targets.defined() || inputs.rank() == 0 || targets.rank() == 0 ||
      inputs.dim(0) != targets.dim(0)) {
    throw std::invalid_argument("MinibatchData: inputs " + inputs.describe() + " and targets " +
                                targets.describe() + " must have the same number of rows");
  }
  MinibatchData d;
  const std::int64_t n = inputs.dim(0);
  d.pieces.push_back({{0, n}, std::move(inputs), std::move(targets)});
  return d;
}

std::int64_t MinibatchData::loss_rows() const {
  std::int64_t n = 0;
  for (const auto& p : pieces) n += p.targets.numel();
  return n;
}

Tensor MinibatchData::rows(schedules::Slice samples, bool targets) const {
  std::vector<Tensor> parts;
  for (const auto& p : pieces) {
    if (!p.samples.overlaps(samples)) continue;
    const Tensor& t = targets ? p.targets : p.inputs;
    const std::int64_t lo = std::max(p.samples.begin, samples.begin);
    const std::int64_t hi = std::min(p.samples.end, samples.end);
    parts.push_back(lo == p.samples.begin && hi == p.samples.end
                        ? t
                        : t.slice(lo - p.samples.begin, hi - p.samples.begin));
  }
  if (parts.empty() || samples.end > this->samples()) {
    throw std::invalid_argument("minibatch data: samples [" + std::to_string(samples.begin) + "," +
                                std::to_string(samples.end) + ") outside its " +
                                std::to_string(this->samples()) + " samples");
  }
  return parts.size() == 1 ? parts.front() : concat_rows(parts);
}

}  // namespace tandem::actors
