#pragma once
// A stage replica's weight versions: immutable once published, pinned by the minibatches in
// flight that use them, freed when neither a pinned minibatch nor a future forward needs them.
#include <cstdint>
#include <map>
#include <string>

#include "models/param_set.hpp"

namespace tandem::actors {

class VersionStore {
 public:
  // Starts at version `latest_version` (a resumed run numbers versions as the whole training
  // does), with the older versions that minibatches still to run need (`older`, all below it).
  explicit VersionStore(models::ParamSet initial, std::int64_t latest_version = 0,
                        std::map<std::int64_t, models::ParamSet> older = {});

  std::int64_t latest() const { return latest_; }
  // Version v's weights; throws std::logic_error naming v when it is not (or no longer) held.
  const models::ParamSet& get(std::int64_t v) const;
  bool holds(std::int64_t v) const { return versions_.count(v) != 0; }
  void pin(std::int64_t v);
  void unpin(std::int64_t v);

  // The weights to update into the next version. When the latest version is needed by no one
  // (`min_needed` > latest, no pins) it is handed over, so the optimizer updates in place
  // (copy-on-write never triggers); otherwise the handles are shared and the update copies.
  models::ParamSet begin_update(std::int64_t min_needed);
  // Whether begin_update(min_needed) would hand the latest version over (update in place).
  bool hands_over(std::int64_t min_needed) const;
  void publish(models::ParamSet next);

  // Frees every version older than the latest that is unpinned and older than `min_needed`
  // (the version of the next forward, which only grows).
  void collect(std::int64_t min_needed);

  std::size_t held() const { return versions_.size(); }
  // The versions held from `from` on, newest last.
  std::map<std::int64_t, const models::ParamSet*> held_from(std::int64_t from) const;
  std::size_t peak_held() const { return peak_; }

 private:
  struct Entry {
    models::ParamSet params;
    int pins = 0;
  };
  std::map<std::int64_t, Entry> versions_;
  std::int64_t latest_ = 0;
  bool updating_ = false;
  std::size_t peak_ = 1;
};

}  // namespace tandem::actors
