#pragma once
// Gloo's rendezvous store on Tandem's control plane: Gloo contexts exchange the addresses of
// their TCP pairs through the Rendezvous's key-value store (held by rank 0), so a job needs
// neither Redis nor a shared file system to set up its collectives.
#include <gloo/rendezvous/store.h>

#include <chrono>
#include <string>
#include <vector>

#include "transport/rendezvous.hpp"

namespace tandem::transport {

// Keys are printable ASCII (at most kMaxTextField bytes) and values at most kMaxValueField
// bytes, as on the Rendezvous itself. A get or wait that times out, or fails because a rank was
// lost, throws gloo::IoException (what Gloo's own stores throw) naming the key; a malformed key
// throws std::invalid_argument naming it. Thread-safe, like the Rendezvous.
class RendezvousStore final : public gloo::rendezvous::Store {
 public:
  // `rendezvous` must have joined and must outlive the store. `timeout` bounds get() (Gloo's
  // interface gives it none) and every wait() without a timeout of its own, including Gloo's
  // kNoTimeout: nothing waits forever.
  explicit RendezvousStore(Rendezvous& rendezvous,
                           std::chrono::milliseconds timeout = kDefaultTimeout);

  // Does not wait (the value reaches rank 0 in order with this rank's later requests).
  void set(const std::string& key, const std::vector<char>& data) override;
  // Waits until some rank set `key`.
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  // Waits until every key is set; `timeout` bounds the whole wait, not each key.
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  Rendezvous& rendezvous_;
  std::chrono::milliseconds timeout_;
};

}  // namespace tandem::transport
