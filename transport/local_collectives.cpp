#include "transport/local_collectives.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace tandem::transport {
namespace {

std::string who(std::span<const Endpoint> group, std::int64_t round) {
  std::string out = "all-reduce round " + std::to_string(round) + " among {";
  for (std::size_t i = 0; i < group.size(); ++i) {
    out += (i ? "," : "") + std::to_string(group[i]);
  }
  return out + "}";
}

void accumulate(std::vector<Tensor>& acc, const std::vector<Tensor>& add) {
  for (std::size_t i = 0; i < acc.size(); ++i) {
    float* a = acc[i].data<float>();
    const float* b = add[i].data<float>();
    const std::int64_t n = acc[i].numel();
    for (std::int64_t k = 0; k < n; ++k) a[k] += b[k];
  }
}

}  // namespace

void LocalCollectives::all_reduce(std::span<const Endpoint> group, Endpoint member,
                                  std::int64_t round, std::vector<Tensor> tensors, bool contributes,
                                  Reduction op, std::function<void()> done) {
  if (group.empty() || std::find(group.begin(), group.end(), member) == group.end()) {
    throw std::invalid_argument(who(group, round) + ": endpoint " + std::to_string(member) +
                                " is not a member");
  }
  std::vector<Arrival> complete;
  {
    std::lock_guard lock(mu_);
    const std::pair<std::vector<Endpoint>, std::int64_t> key{
        std::vector<Endpoint>(group.begin(), group.end()), round};
    auto& p = pending_[key];
    if (p.arrived.empty()) {
      p.group.assign(group.begin(), group.end());
      p.op = op;
    } else if (p.op != op) {
      throw std::invalid_argument(who(group, round) + ": endpoint " + std::to_string(member) +
                                  " disagrees with the others on the reduction");
    }
    for (const auto& a : p.arrived) {
      if (a.member == member) {
        throw std::logic_error(who(group, round) + ": endpoint " + std::to_string(member) +
                               " arrived twice");
      }
    }
    p.arrived.push_back({member, std::move(tensors), contributes, std::move(done)});
    if (p.arrived.size() < p.group.size()) return;
    complete = std::move(p.arrived);
    pending_.erase(key);
  }
  // Every member is here: reduce outside the lock, in member order (deterministic sums).
  std::sort(complete.begin(), complete.end(),
            [](const Arrival& a, const Arrival& b) { return a.member < b.member; });
  const std::size_t n = complete.front().tensors.size();
  for (const auto& a : complete) {
    if (a.tensors.size() != n) {
      throw std::invalid_argument(who(group, round) + ": members bring different tensor counts");
    }
  }
  const bool data = n > 0 && complete.front().tensors.front().device().has_data();
  int contributors = 0;
  for (const auto& a : complete) contributors += a.contributes ? 1 : 0;
  if (data) {
    std::vector<Tensor> acc;
    for (const auto& a : complete) {
      if (!a.contributes) continue;
      if (acc.empty()) {
        for (const Tensor& t : a.tensors) acc.push_back(t.clone());
      } else {
        accumulate(acc, a.tensors);
      }
    }
    if (acc.empty()) {
      for (const Tensor& t : complete.front().tensors) acc.push_back(Tensor::zeros(t.shape()));
    }
    if (op == Reduction::mean && contributors > 1) {
      const float scale = 1.0f / static_cast<float>(contributors);
      for (Tensor& t : acc) {
        float* p = t.data<float>();
        for (std::int64_t k = 0; k < t.numel(); ++k) p[k] *= scale;
      }
    }
    for (auto& a : complete) {
      for (std::size_t i = 0; i < n; ++i) a.tensors[i].copy_from(acc[i]);
    }
  }
  for (auto& a : complete) a.done();
}

}  // namespace tandem::transport
