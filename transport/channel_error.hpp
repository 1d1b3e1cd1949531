#pragma once
// What went wrong with one peer of a data plane between processes (the tcp and ucx channels
// alike), as the channel's errors() lists it and its on_error callback receives it.
#include <string>

namespace tandem::transport {

struct ChannelError {
  int peer_rank = -1;  // -1: a connection or message that names no proven peer
  std::string peer;    // "rank 1 (127.0.0.1:40312)", or what is known of a stranger
  std::string what;
  // false: a refusal that failed nothing (a stranger's connection or message, a proof in a
  // peer's name that did not check); the peer it names, if any, may still prove itself.
  bool fatal = true;
};

}  // namespace tandem::transport
