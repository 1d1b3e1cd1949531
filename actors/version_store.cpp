#include "actors/version_store.hpp"

#include <stdexcept>

namespace tandem::actors {

VersionStore::VersionStore(models::ParamSet initial, std::int64_t latest_version,
                           std::map<std::int64_t, models::ParamSet> older)
    : latest_(latest_version) {
  for (auto& [v, params] : older) {
    if (v >= latest_version) {
      throw std::invalid_argument("weight version " + std::to_string(v) +
                                  " given as older than the latest, " +
                                  std::to_string(latest_version));
    }
    versions_[v] = Entry{std::move(params), 0};
  }
  versions_[latest_version] = Entry{std::move(initial), 0};
  peak_ = versions_.size();
}

std::map<std::int64_t, const models::ParamSet*> VersionStore::held_from(std::int64_t from) const {
  std::map<std::int64_t, const models::ParamSet*> out;
  for (auto it = versions_.lower_bound(from); it != versions_.end(); ++it) {
    out.emplace(it->first, &it->second.params);
  }
  return out;
}

const models::ParamSet& VersionStore::get(std::int64_t v) const {
  auto it = versions_.find(v);
  if (it == versions_.end()) {
    throw std::logic_error("weight version " + std::to_string(v) + " is not held (latest is " +
                           std::to_string(latest_) + ")");
  }
  return it->second.params;
}

void VersionStore::pin(std::int64_t v) {
  auto it = versions_.find(v);
  if (it == versions_.end()) {
    throw std::logic_error("cannot pin weight version " + std::to_string(v) +
                           ": not held (latest is " + std::to_string(latest_) + ")");
  }
  ++it->second.pins;
}

void VersionStore::unpin(std::int64_t v) {
  auto it = versions_.find(v);
  if (it == versions_.end() || it->second.pins == 0) {
    throw std::logic_error("weight version " + std::to_string(v) + " unpinned but not pinned");
  }
  --it->second.pins;
}

bool VersionStore::hands_over(std::int64_t min_needed) const {
  return !updating_ && versions_.at(latest_).pins == 0 && min_needed > latest_;
}

models::ParamSet VersionStore::begin_update(std::int64_t min_needed) {
  if (updating_) throw std::logic_error("VersionStore: an update is already in progress");
  updating_ = true;
  auto it = versions_.find(latest_);
  if (it->second.pins == 0 && min_needed > latest_) {
    models::ParamSet out = std::move(it->second.params);
    versions_.erase(it);
    return out;
  }
  return it->second.params;
}

void VersionStore::publish(models::ParamSet next) {
  if (!updating_) throw std::logic_error("VersionStore: publish without begin_update");
  updating_ = false;
  ++latest_;
  versions_[latest_] = Entry{std::move(next), 0};
  if (versions_.size() > peak_) peak_ = versions_.size();
}

void VersionStore::collect(std::int64_t min_needed) {
  for (auto it = versions_.begin(); it != versions_.end();) {
    if (it->first < latest_ && it->second.pins == 0 && it->first < min_needed) {
      it = versions_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace tandem::actors
