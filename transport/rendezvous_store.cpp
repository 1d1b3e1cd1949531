#include "transport/rendezvous_store.hpp"

#include <fmt/format.h>
#include <gloo/common/error.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace tandem::transport {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::byte> to_bytes(const std::vector<char>& data) {
  std::vector<std::byte> out(data.size());
  if (!data.empty()) std::memcpy(out.data(), data.data(), data.size());
  return out;
}

std::vector<char> to_chars(const std::vector<std::byte>& data) {
  std::vector<char> out(data.size());
  if (!data.empty()) std::memcpy(out.data(), data.data(), data.size());
  return out;
}

std::string quoted(const std::vector<std::string>& keys) {
  std::string out;
  for (std::size_t i = 0; i < keys.size(); ++i) out += (i ? ", '" : "'") + keys[i] + "'";
  return out;
}

}  // namespace

RendezvousStore::RendezvousStore(Rendezvous& rendezvous, std::chrono::milliseconds timeout)
    : rendezvous_(rendezvous), timeout_(timeout) {
  if (timeout_ <= std::chrono::milliseconds::zero()) {
    throw std::invalid_argument(
        fmt::format("Gloo rendezvous store: timeout {} ms is not positive", timeout_.count()));
  }
}

void RendezvousStore::set(const std::string& key, const std::vector<char>& data) {
  try {
    rendezvous_.set(key, to_bytes(data));
  } catch (const RendezvousError& e) {
    throw gloo::IoException(fmt::format("Gloo rendezvous store: set '{}': {}", key, e.what()));
  }
}

std::vector<char> RendezvousStore::get(const std::string& key) {
  try {
    return to_chars(rendezvous_.get(key, timeout_));
  } catch (const RendezvousError& e) {
    // The Rendezvous's message already names the key, the timeout and the rank.
    throw gloo::IoException(fmt::format("Gloo rendezvous store: {}", e.what()));
  }
}

void RendezvousStore::wait(const std::vector<std::string>& keys) {
  wait(keys, timeout_);
}

void RendezvousStore::wait(const std::vector<std::string>& keys,
                           const std::chrono::milliseconds& timeout) {
  const std::chrono::milliseconds limit =
      timeout > std::chrono::milliseconds::zero() ? timeout : timeout_;
  const Clock::time_point deadline = Clock::now() + limit;
  // The Rendezvous has no "is it set" query: a get that returns is the proof, and the values
  // (a few addresses) are small.
  for (const std::string& key : keys) {
    const auto left =
        std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()),
                 std::chrono::milliseconds(1));
    try {
      (void)rendezvous_.get(key, left);
    } catch (const RendezvousError& e) {
      throw gloo::IoException(fmt::format("Gloo rendezvous store: wait for {} (up to {} ms): {}",
                                          quoted(keys), limit.count(), e.what()));
    }
  }
}

}  // namespace tandem::transport
