#include "train/port_reservation.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace tandem::train {

PortReservation::PortReservation(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), "0", &hints, &found); rc != 0) {
    throw std::runtime_error("cannot reserve a port on '" + host + "': " + gai_strerror(rc));
  }
  std::string error = "no address";
  for (addrinfo* a = found; a != nullptr && fd_ < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_storage bound{};
    socklen_t length = sizeof bound;
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length) == 0) {
      fd_ = fd;
      port_ = ntohs(bound.ss_family == AF_INET6
                        ? reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port
                        : reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
    } else {
      error = std::strerror(errno);
      ::close(fd);
    }
  }
  freeaddrinfo(found);
  if (fd_ < 0) throw std::runtime_error("cannot reserve a port on '" + host + "': " + error);
}

PortReservation::~PortReservation() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace tandem::train
