#include "actors/inbox.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace tandem::actors {
namespace {

std::string peer_name(int device) {
  if (device == schedules::kLoader) return "the loader";
  std::string out(1, 'd');
  out += std::to_string(device);
  return out;
}

}  // namespace

Inbox::Key Inbox::key_of(const schedules::Action& a, const schedules::Route& r) {
  return {static_cast<std::uint8_t>(r.port),
          static_cast<std::uint8_t>(a.chunk),
          a.minibatch,
          r.samples.begin,
          r.samples.end,
          r.edge};
}

bool Inbox::put(schedules::Port port, int chunk, std::int64_t minibatch, std::int64_t begin,
                std::int64_t end, Tensor tensor, std::uint32_t rows_total, std::uint16_t edge) {
  const Key key{static_cast<std::uint8_t>(port),
                static_cast<std::uint8_t>(chunk),
                minibatch,
                begin,
                end,
                edge};
  const bool inserted = held_.emplace(key, Held{std::move(tensor), rows_total}).second;
  peak_ = std::max(peak_, held_.size());
  return inserted;
}

bool Inbox::has(const schedules::Action& a, const std::vector<schedules::Route>& routes) const {
  return std::all_of(routes.begin(), routes.end(),
                     [&](const schedules::Route& r) { return held_.contains(key_of(a, r)); });
}

Tensor Inbox::take(const schedules::Action& a, const std::vector<schedules::Route>& routes,
                   schedules::Port port, std::uint32_t* rows_total) {
  return take_where(a, routes, port, -1, rows_total);
}

Tensor Inbox::take(const schedules::Action& a, const std::vector<schedules::Route>& routes,
                   schedules::Port port, std::uint16_t edge) {
  return take_where(a, routes, port, edge, nullptr);
}

Tensor Inbox::take_where(const schedules::Action& a, const std::vector<schedules::Route>& routes,
                         schedules::Port port, int edge, std::uint32_t* rows_total) {
  std::vector<Tensor> parts;
  std::int64_t at = a.slice.begin;
  for (const schedules::Route& r : routes) {
    if (r.port != port || (edge >= 0 && r.edge != edge)) continue;
    if (r.samples.begin != at) {
      std::string what = schedules::to_string(port);
      what += " routes do not tile the slice at ";
      what += std::to_string(at);
      throw std::logic_error(what);
    }
    auto it = held_.find(key_of(a, r));
    if (it == held_.end()) {
      std::string what = schedules::to_string(port);
      what += ' ';
      what += schedules::to_string(r.samples);
      what += " has not arrived";
      throw std::logic_error(what);
    }
    at = r.samples.end;
    parts.push_back(std::move(it->second.tensor));
    if (rows_total != nullptr) *rows_total = it->second.rows_total;
    held_.erase(it);
  }
  if (parts.empty()) return Tensor();
  if (at != a.slice.end) {
    std::string what = schedules::to_string(port);
    what += " routes end at ";
    what += std::to_string(at);
    what += ", not at the slice's end";
    throw std::logic_error(what);
  }
  return parts.size() == 1 ? parts.front() : concat_rows(parts);
}

std::string Inbox::missing(const schedules::Action& a,
                           const std::vector<schedules::Route>& routes) const {
  std::string out;
  for (const schedules::Route& r : routes) {
    if (held_.contains(key_of(a, r))) continue;
    if (!out.empty()) out += ", ";
    out += schedules::to_string(r.port);
    out += ' ';
    out += schedules::to_string(r.samples);
    out += " from ";
    out += peer_name(r.device);
  }
  return out;
}

}  // namespace tandem::actors
