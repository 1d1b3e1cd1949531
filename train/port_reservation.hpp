#pragma once
// A TCP port held for later: bound (not listening) on a host's address, so that nothing else on
// the machine takes it, until the control plane that will listen there releases it. An elastic
// job's rank 0 reserves the port of the job's next generation while the current one runs and
// tells the other ranks, so that after a loss every survivor knows where to re-form without
// asking anyone (the ports next to the master's are no choice: the kernel hands them out to the
// job's own outgoing connections).
#include <cstdint>
#include <string>

namespace tandem::train {

class PortReservation {
 public:
  // Binds a free port on `host` (an address or a name). Throws std::runtime_error naming the
  // host and the error.
  explicit PortReservation(const std::string& host);
  ~PortReservation();
  PortReservation(const PortReservation&) = delete;
  PortReservation& operator=(const PortReservation&) = delete;

  std::uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  std::uint16_t port_ = 0;
};

}  // namespace tandem::train
