#pragma once
// A stage replica's received tensors, by what they are: port (input, target, activation,
// gradient), chunk, minibatch and samples. The stage actor puts what its messages carry and
// takes, for an action, the pieces its routes name, joined in sample order; what an action still
// waits for is named for a stalled run's report.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/tensor.hpp"
#include "schedules/action.hpp"
#include "schedules/routing.hpp"

namespace tandem::actors {

class Inbox {
 public:
  // Keeps `tensor` (rows `begin`..`end` of `minibatch` on `port` of `chunk`); `rows_total`
  // travels with targets (the minibatch's sample count, for the loss's mean). False when a
  // tensor of that key is already held (the caller reports the duplicate).
  bool put(schedules::Port port, int chunk, std::int64_t minibatch, std::int64_t begin,
           std::int64_t end, Tensor tensor, std::uint32_t rows_total, std::uint16_t edge = 0);
  // Whether every input `routes` names for action `a` has arrived.
  bool has(const schedules::Action& a, const std::vector<schedules::Route>& routes) const;
  // The pieces of `port` that `routes` name for `a`, removed and joined in sample order (an
  // undefined tensor when none is routed to that port); `rows_total` gets the last one's.
  // Throws std::logic_error when the routes do not tile the action's slice or a piece is
  // missing (the caller checks has() first).
  Tensor take(const schedules::Action& a, const std::vector<schedules::Route>& routes,
              schedules::Port port, std::uint32_t* rows_total);
  // The same for the routes of one tensor edge (Route::edge) only.
  Tensor take(const schedules::Action& a, const std::vector<schedules::Route>& routes,
              schedules::Port port, std::uint16_t edge);
  // "activation [0,2) from d1, gradient [0,2) from d3": what `routes` names for `a` that has
  // not arrived; empty when nothing is missing.
  std::string missing(const schedules::Action& a,
                      const std::vector<schedules::Route>& routes) const;

  std::size_t size() const { return held_.size(); }
  std::size_t peak() const { return peak_; }

 private:
  struct Key {
    std::uint8_t port;
    std::uint8_t chunk;
    std::int64_t minibatch;
    std::int64_t begin, end;
    std::uint16_t edge;
    friend bool operator<(const Key& a, const Key& b) {
      return std::tie(a.port, a.chunk, a.minibatch, a.begin, a.end, a.edge) <
             std::tie(b.port, b.chunk, b.minibatch, b.begin, b.end, b.edge);
    }
  };
  struct Held {
    Tensor tensor;
    std::uint32_t rows_total = 0;
  };
  static Key key_of(const schedules::Action& a, const schedules::Route& r);
  Tensor take_where(const schedules::Action& a, const std::vector<schedules::Route>& routes,
                    schedules::Port port, int edge, std::uint32_t* rows_total);

  std::map<Key, Held> held_;
  std::size_t peak_ = 0;
};

}  // namespace tandem::actors
