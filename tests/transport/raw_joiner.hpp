#pragma once
// A process that joins rank 0's control plane by hand, frame by frame, over a raw socket: for
// the tests that play strangers, replays and wrong proofs against a live Rendezvous.
#include <array>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>
#include <chrono>
#include <cstddef>
#include <functional>
#include <string_view>
#include <vector>

#include "transport/control_frame.hpp"
#include "transport/job_proof.hpp"

namespace tandem::transport::testing {

class RawJoiner {
 public:
  // Connects and sends `request`; nothing is read yet.
  RawJoiner(std::uint16_t port, JoinRequest request) : request_(request), socket_(io_) {
    socket_.connect({asio::ip::make_address("127.0.0.1"), port});
    write(encode_frame(request_));
  }

  // The next frame rank 0 sends (throws FrameError or asio's system_error when none comes).
  ControlMessage read_frame() {
    std::array<std::byte, kFrameHeaderSize> header{};
    asio::read(socket_, asio::buffer(header));
    const FrameHeader h = decode_header(header, kMaxFramePayload);
    std::vector<std::byte> payload(h.payload_size);
    asio::read(socket_, asio::buffer(payload));
    return decode_payload(h.type, payload);
  }
  // Reads rank 0's challenge (the answer to the join request).
  const Challenge& challenge() {
    challenge_ = std::get<Challenge>(read_frame());
    return challenge_;
  }
  // A hello for `self` whose proof is made with `token` against the challenge read last.
  Hello hello(PeerInfo self, std::string_view token) const {
    const ProofContext join{ProofPurpose::kControlJoin, challenge_.job,         request_.rank, 0, 0,
                            request_.client_nonce,      challenge_.server_nonce};
    return Hello{std::move(self), make_proof(token, join)};
  }

  void write(const std::vector<std::byte>& bytes) {
    std::error_code ec;
    asio::write(socket_, asio::buffer(bytes), ec);
  }
  // Half-closes and returns whatever comes until rank 0 closes (or 10 s pass).
  std::vector<std::byte> finish() {
    std::error_code ec;
    socket_.shutdown(asio::ip::tcp::socket::shutdown_send, ec);
    std::vector<std::byte> got;
    std::array<std::byte, 4096> buf{};
    std::function<void()> next = [&] {
      socket_.async_read_some(asio::buffer(buf), [&](std::error_code e, std::size_t n) {
        got.insert(got.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
        if (!e) next();
      });
    };
    next();
    io_.run_for(std::chrono::seconds(10));
    return got;
  }

 private:
  JoinRequest request_;
  Challenge challenge_;
  asio::io_context io_;
  asio::ip::tcp::socket socket_;
};

}  // namespace tandem::transport::testing
