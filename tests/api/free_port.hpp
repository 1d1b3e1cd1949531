#pragma once
// A TCP port of 127.0.0.1 that was free a moment ago: for the master of a job whose ranks a test
// starts (processes, or sessions on threads of the test).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>

namespace tandem::api_test {

inline std::uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t n = sizeof a;
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n), 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

}  // namespace tandem::api_test
