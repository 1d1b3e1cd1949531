#include "transport/tcp_channel.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <asio/connect.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/read.hpp>
#include <asio/steady_timer.hpp>
#include <asio/write.hpp>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <limits>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <unordered_map>

#include "runtime/log.hpp"
#include "transport/wire_stripes.hpp"

namespace tandem::transport {
namespace {

// asio's default completion condition (transfer_all) hands the kernel at most 64 KiB per
// read or write: a 16 MiB tensor took 256 syscalls each way and the sender's TCP pushed
// 64 KiB at a time. Whole buffer sequences per syscall instead (the kernel still takes what
// its socket buffer holds).
std::size_t whole_buffers(const std::error_code& ec, std::size_t) {
  return ec ? 0 : std::size_t{1} << 30;
}

// Writes, though, go in pieces of at most 512 KiB. One sendmsg of a whole batch (up to 64
// messages: hundreds of MiB) holds the socket's lock for as long as it copies, so the peer's
// ACKs wait in the socket's backlog and the send window stays shut meanwhile: 16 MiB tensors
// streamed at 4.1-5.8 GB/s over loopback, and at 6.7-8.5 with 512 KiB pieces (256 KiB and 1 MiB
// did less; the same in a plain pair of processes: 4.8-7.1 -> 7.2-8.6 GB/s). Reads take what
// the socket holds: capping them changed nothing.
std::size_t write_pieces(const std::error_code& ec, std::size_t) {
  return ec ? 0 : std::size_t{512} << 10;
}

using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

constexpr std::chrono::milliseconds kFirstRetry{20};
constexpr std::chrono::milliseconds kMaxRetry{500};
// Messages gathered into one write: small control messages share a system call.
constexpr std::size_t kMaxBatch = 64;
// The channel's thread polls this long before it sleeps in epoll: a stream of messages keeps
// it awake instead of paying a sleep and a wake-up (tens of microseconds) for every piece of a
// tensor the kernel hands over.
constexpr std::chrono::microseconds kSpinBeforeSleep{50};
// How long accepting waits after the listener failed (out of file descriptors, say).
constexpr std::chrono::milliseconds kAcceptRetry{100};

struct Outgoing {
  std::vector<std::byte> head;  // prefix and meta part (or a whole goodbye frame)
  Message msg;                  // keeps the tensors alive until they are written
  bool goodbye = false;
};

std::string address_of(const tcp::socket& s) {
  std::error_code ec;
  const auto ep = s.remote_endpoint(ec);
  if (ec) return "<unknown address>";
  return fmt::format("{}:{}", ep.address().to_string(), ep.port());
}

std::string secs(std::chrono::milliseconds d) {
  return fmt::format("{:.1f} s", std::chrono::duration<double>(d).count());
}

}  // namespace

// One side of a lane's handshake: the hellos both ways, then the proofs (tcp_channel.hpp).
struct Handshake {
  JobNonce mine = fresh_nonce();
  WireHello theirs;            // the peer's hello, once read
  std::vector<std::byte> out;  // the frame being written
  std::array<std::byte, kWirePrefixBytes> prefix{};
  std::vector<std::byte> meta;  // the frame being read
};

// How reading a handshake frame ended: `socket`, the connection failed or closed; otherwise
// the frame was not the one expected (`what` says why).
struct FrameRead {
  bool failed = false;
  bool socket = false;
  std::string what;
};

// A lane of a connection after the first: it carries stripes of large messages' tensor bytes
// (wire_stripes.hpp) and, first thing, a handshake naming its lane.
struct Stripe {
  std::optional<tcp::socket> socket;
  Handshake handshake;  // the connecting side's
  std::vector<asio::const_buffer> out;
  std::vector<asio::mutable_buffer> in;
};

// One peer process and its connection. Fields under `mu` are shared with senders; the rest are
// touched on the channel's thread only. `ended`: the connection is over (end of stream, error
// or close()).
struct Peer : RoutedPeer {
  Peer(asio::io_context& io, TcpPeer p)
      : RoutedPeer(p.rank, fmt::format("rank {} ({}:{})", p.rank, p.host, p.port)),
        info(std::move(p)),
        timer(io) {}

  TcpPeer info;

  std::deque<Outgoing> queue;  // under mu
  bool writing = false;        // under mu: a write is posted or in flight

  std::optional<tcp::socket> socket;  // lane 0: every frame, and the first stripe of a message
  // Lanes 1.. (the connecting side's option; the accepting side follows its hello).
  std::size_t lanes = 1;
  std::vector<std::unique_ptr<Stripe>> stripes;
  std::size_t stripes_up = 0;      // lanes 1.. whose hellos were exchanged
  bool lane0_up = false;           // lane 0's hellos were exchanged
  std::size_t writes_pending = 0;  // lanes still writing the current batch
  std::size_t written = 0;         // bytes of the current batch written so far
  std::size_t batch_striped = 0;   // messages of the current batch spread over several lanes
  std::size_t reads_pending = 0;   // lanes still reading the current message's tensors
  asio::steady_timer timer;        // connect retries, the hello deadline
  Clock::time_point connect_start;
  std::chrono::milliseconds retry = kFirstRetry;
  std::vector<Outgoing> batch;
  std::vector<asio::const_buffer> out_buffers;
  std::array<std::byte, kWirePrefixBytes> prefix{};
  std::vector<std::byte> meta;
  Handshake handshake;  // lane 0's, on the connecting side
  WireHead head;
  std::vector<Tensor> tensors;
  std::vector<asio::mutable_buffer> in_buffers;
};

// A connection accepted but not yet proved: it is nobody's until its proof checks.
struct Pending {
  explicit Pending(asio::io_context& io) : socket(io), timer(io) {}
  tcp::socket socket;
  asio::steady_timer timer;  // the whole handshake's deadline
  std::string remote;
  Handshake handshake;
  bool done = false;  // proved and handed to its peer, or refused
};

struct TcpChannel::Impl {
  Impl(TcpChannel& c, TcpChannelOptions o)
      : owner(c),
        opt(std::move(o)),
        job_id(job_id_of(opt.credentials.job)),
        acceptor(io),
        accept_timer(io),
        guard(asio::make_work_guard(io)) {
    rules.job = job_id;
    rules.types = &opt.types;
    rules.max_data_bytes = opt.max_data_bytes;
  }

  TcpChannel& owner;  // the skeleton: routing, peer table, failures, statistics
  TcpChannelOptions opt;
  std::uint64_t job_id;  // in every frame: job_id_of(opt.credentials.job)
  WireRules rules;
  asio::io_context io;  // declared before every socket and timer, so destroyed after them
  tcp::acceptor acceptor;
  asio::steady_timer accept_timer;
  std::deque<std::shared_ptr<Pending>> pending;  // accepted, not yet proved, oldest first
  asio::executor_work_guard<asio::io_context::executor_type> guard;
  std::thread thread;
  std::vector<std::unique_ptr<Peer>> peers;
  bool stopped = false;  // channel's thread: everything closed
  std::atomic<bool> closing{false};
  bool closed = false;  // close() finished (caller's thread)

  std::atomic<std::uint64_t> striped{0};

  Peer* peer_of_rank(int rank) { return static_cast<Peer*>(owner.routed_peer_of_rank(rank)); }
  void notify() { owner.notify(); }
  void set_ended(Peer& p) {
    {
      std::lock_guard lock(p.mu);
      p.ended = true;
    }
    notify();
  }

  // The peer's connection is over: its queue is dropped, later sends to it fail, and unless the
  // channel is closing the failure is reported (and stops the run).
  void fail_peer(Peer& p, const std::string& what) {
    const bool quiet = closing.load();
    const ChannelError error{p.info.rank, p.name, what};
    {
      std::lock_guard lock(p.mu);
      // Recorded with the failure, under the peer's lock: whoever sees one (wait_connected, a
      // refused send) sees the other in errors().
      if (!owner.mark_failed_locked(p, error, quiet)) return;
      p.queue.clear();
    }
    p.timer.cancel();
    close_sockets(p);
    set_ended(p);
    if (quiet) {
      tandem::log::debug("tcp data plane (rank {}): {} while closing: {}", opt.rank, p.name, what);
      return;
    }
    owner.report(error, true, true);
  }

  static bool has_failed(Peer& p) {
    std::lock_guard lock(p.mu);
    return p.failed;
  }

  static void close_sockets(Peer& p) {
    std::error_code ec;
    if (p.socket) p.socket->close(ec);
    for (auto& s : p.stripes) {
      if (s->socket) s->socket->close(ec);
    }
  }

  // --- connecting (to peers of lower rank) ---
  // The peer's listening address; empty (and the peer failed) when it does not resolve.
  tcp::resolver::results_type resolve(Peer& p) {
    tcp::resolver resolver(io);
    std::error_code ec;
    auto endpoints = resolver.resolve(p.info.host, std::to_string(p.info.port), ec);
    if (ec) {
      fail_peer(p, fmt::format("cannot resolve {}:{}: {}", p.info.host, p.info.port, ec.message()));
      return {};
    }
    return endpoints;
  }

  void connect(Peer& p) {
    if (stopped) return;
    p.socket.emplace(io);
    const auto endpoints = resolve(p);
    if (endpoints.empty()) return;
    asio::async_connect(*p.socket, endpoints,
                        [this, &p](std::error_code err, const tcp::endpoint&) {
                          if (stopped) return;
                          if (err) {
                            retry_connect(p, err.message());
                            return;
                          }
                          // Pipeline messages are small and latency-bound: Nagle's delay
                          // against the peer's delayed ACK stalls every exchange for ~40 ms.
                          std::error_code nd;
                          p.socket->set_option(tcp::no_delay(true), nd);
                          send_hello(p);
                        });
  }
  void retry_connect(Peer& p, const std::string& why) {
    if (Clock::now() - p.connect_start >= opt.connect_timeout) {
      fail_peer(p, fmt::format("could not connect within {}: {}", secs(opt.connect_timeout), why));
      return;
    }
    p.timer.expires_after(p.retry);
    p.retry = std::min(p.retry * 2, kMaxRetry);
    p.timer.async_wait([this, &p](std::error_code ec) {
      if (!ec && !stopped) connect(p);
    });
  }
  WireHello hello(std::size_t lane, std::size_t lanes, const JobNonce& nonce) const {
    return {job_id, static_cast<std::uint32_t>(opt.rank), static_cast<std::uint16_t>(lane),
            static_cast<std::uint16_t>(lanes), nonce};
  }

  // --- the handshake of a lane (both sides) ---
  // Reads one frame of `kind` from `s` into `h.meta`, then `done(result)`.
  template <class Done>
  void read_frame(tcp::socket& s, Handshake& h, WireFrameKind kind, Done done) {
    asio::async_read(
        s, asio::buffer(h.prefix), [this, &s, &h, kind, done](std::error_code ec, std::size_t) {
          if (stopped) return;
          if (ec) return done(FrameRead{true, true, ec.message()});
          try {
            const WirePrefix pre = decode_wire_prefix(h.prefix);
            if (pre.kind != kind) {
              throw WireError(kind == WireFrameKind::hello ? "the first frame is not a hello"
                                                           : "the frame after the hello is not "
                                                             "a proof");
            }
            h.meta.resize(pre.meta_bytes);
          } catch (const std::exception& e) {
            return done(FrameRead{true, false, e.what()});
          }
          asio::async_read(s, asio::buffer(h.meta), [this, done](std::error_code ec2, std::size_t) {
            if (stopped) return;
            done(ec2 ? FrameRead{true, true, ec2.message()} : FrameRead{});
          });
        });
  }

  // This process's proof for lane `lane` to `peer_rank`, over the nonces of `h`.
  WireProof my_proof(const Handshake& h, int peer_rank, std::size_t lane) const {
    const ProofContext c{ProofPurpose::kDataTcp,
                         opt.credentials.job,
                         static_cast<std::uint32_t>(opt.rank),
                         static_cast<std::uint32_t>(peer_rank),
                         static_cast<std::uint32_t>(lane),
                         h.mine,
                         h.theirs.nonce};
    return {h.mine, make_proof(opt.credentials.token, c)};
  }

  // Throws WireError unless `meta` is the proof that `peer_rank` holds this job's credentials,
  // made for this lane, over its hello's nonce and this side's.
  void check_peer_proof(const Handshake& h, int peer_rank, std::size_t lane) const {
    const WireProof got = decode_wire_proof(h.meta);
    const ProofContext c{ProofPurpose::kDataTcp,
                         opt.credentials.job,
                         static_cast<std::uint32_t>(peer_rank),
                         static_cast<std::uint32_t>(opt.rank),
                         static_cast<std::uint32_t>(lane),
                         h.theirs.nonce,
                         h.mine};
    if (got.nonce != h.theirs.nonce || !check_proof(opt.credentials.token, c, got.proof)) {
      throw WireError(fmt::format(
          "data-plane proof of rank {} (lane {}) does not check: it does not hold this job's "
          "token and nonce",
          peer_rank, lane));
    }
  }

  void check_hello(const WireHello& h, int expected_rank, std::size_t lane,
                   std::size_t lanes) const {
    if (h.job != job_id) {
      throw WireError(
          fmt::format("data-plane hello: job {:#x}, but this job is {:#x}", h.job, job_id));
    }
    if (static_cast<std::int64_t>(h.rank) != expected_rank) {
      throw WireError(
          fmt::format("data-plane hello: rank {}, expected rank {}", h.rank, expected_rank));
    }
    if (h.lane != lane || h.lanes != lanes) {
      throw WireError(fmt::format("data-plane hello: lane {} of {}, expected lane {} of {}", h.lane,
                                  h.lanes, lane, lanes));
    }
  }

  // --- connecting (to peers of lower rank) ---
  void send_hello(Peer& p) {
    p.lanes = static_cast<std::size_t>(opt.lanes);
    p.timer.expires_after(opt.hello_timeout);
    p.timer.async_wait([this, &p](std::error_code ec) {
      if (ec || stopped) return;
      fail_peer(p, fmt::format("no hello and proof within {}", secs(opt.hello_timeout)));
    });
    handshake_out(p, *p.socket, p.handshake, 0, [this, &p] {
      p.timer.cancel();
      if (p.lanes > 1) connect_stripes(p);
      lane_up(p, true);
    });
  }

  // The connecting side of lane `lane` on `s`: its hello out, the peer's hello in and checked,
  // its proof out, the peer's proof in and checked (the peer proves itself only to a connection
  // that proved itself first), then `done`. A failure fails the peer, naming the lane after the
  // first; but lane 0 closed before its hello was answered connects again while connect_timeout
  // lasts (a listener drops its oldest unproven connection when more arrive).
  template <class Done>
  void handshake_out(Peer& p, tcp::socket& s, Handshake& h, std::size_t lane, Done done) {
    const auto failed = [this, &p, lane](const std::string& what) {
      fail_peer(p, lane == 0 ? what : fmt::format("lane {}: {}", lane, what));
    };
    h = Handshake{};
    h.out = encode_wire_hello(hello(lane, p.lanes, h.mine));
    asio::async_write(
        s, asio::buffer(h.out), [=, this, &p, &s, &h](std::error_code ec, std::size_t) {
          if (stopped) return;
          if (ec) return failed("writing the hello: " + ec.message());
          read_frame(s, h, WireFrameKind::hello, [=, this, &p, &s, &h](const FrameRead& r) {
            if (has_failed(p)) return;  // its sockets were closed under this read
            if (r.failed && r.socket && lane == 0 &&
                Clock::now() - p.connect_start < opt.connect_timeout) {
              return retry_connect(p, "closed before answering the hello: " + r.what);
            }
            if (r.failed) return failed("reading the hello: " + r.what);
            try {
              h.theirs = decode_wire_hello(h.meta);
              check_hello(h.theirs, p.info.rank, lane, p.lanes);
            } catch (const std::exception& e) {
              return failed(e.what());
            }
            h.out = encode_wire_proof(my_proof(h, p.info.rank, lane));
            asio::async_write(
                s, asio::buffer(h.out), [=, this, &p, &s, &h](std::error_code ec2, std::size_t) {
                  if (stopped) return;
                  if (ec2) return failed("writing the proof: " + ec2.message());
                  read_frame(s, h, WireFrameKind::proof, [=, this, &p, &h](const FrameRead& r2) {
                    if (r2.failed && r2.socket) {
                      return failed(
                          fmt::format("closed the connection after reading this process's proof "
                                      "({}): it refused "
                                      "the proof; do both hold this job's token and nonce?",
                                      r2.what));
                    }
                    if (r2.failed) return failed(r2.what);
                    try {
                      check_peer_proof(h, p.info.rank, lane);
                    } catch (const std::exception& e) {
                      return failed(e.what());
                    }
                    done();
                  });
                });
          });
        });
  }

  // Lanes 1.. once lane 0 is up: each connects and shakes hands naming its lane.
  void connect_stripes(Peer& p) {
    const auto endpoints = resolve(p);
    if (endpoints.empty()) return;
    p.timer.expires_after(opt.hello_timeout);
    p.timer.async_wait([this, &p](std::error_code e) {
      if (e || stopped) return;
      fail_peer(p, fmt::format("{} of its {} lanes answered within {}", p.stripes_up + 1, p.lanes,
                               secs(opt.hello_timeout)));
    });
    p.stripes.clear();
    for (std::size_t lane = 1; lane < p.lanes; ++lane) {
      p.stripes.push_back(std::make_unique<Stripe>());
      Stripe& s = *p.stripes.back();
      s.socket.emplace(io);
      asio::async_connect(
          *s.socket, endpoints, [this, &p, &s, lane](std::error_code err, const tcp::endpoint&) {
            if (stopped) return;
            if (err) {
              fail_peer(p, fmt::format("connecting lane {}: {}", lane, err.message()));
              return;
            }
            std::error_code nd;
            s.socket->set_option(tcp::no_delay(true), nd);
            handshake_out(p, *s.socket, s.handshake, lane, [this, &p] { lane_up(p, false); });
          });
    }
  }

  // A lane's handshake is done: the connection is up once every lane's is.
  void lane_up(Peer& p, bool lane0) {
    if (lane0) {
      p.lane0_up = true;
    } else {
      ++p.stripes_up;
    }
    if (!p.lane0_up || p.stripes_up + 1 < p.lanes) return;
    p.timer.cancel();
    established(p);
  }

  // --- accepting (from peers of higher rank) ---
  void accept_next() {
    if (stopped) return;
    auto c = std::make_shared<Pending>(io);
    acceptor.async_accept(c->socket, [this, c](std::error_code ec) {
      if (stopped) return;
      if (ec) {
        accept_later(ec);
        return;
      }
      std::error_code nd;
      c->socket.set_option(tcp::no_delay(true), nd);
      admit(c);
      accept_next();
    });
  }
  // Accepting failed (out of file descriptors, say): tries again shortly instead of spinning.
  void accept_later(std::error_code ec) {
    tandem::log::warn("tcp data plane (rank {}): accepting a connection: {}", opt.rank,
                      ec.message());
    accept_timer.expires_after(kAcceptRetry);
    accept_timer.async_wait([this](std::error_code e) {
      if (!e && !stopped) accept_next();
    });
  }
  // A new connection counts against max_pending_connections until it proved itself (or went):
  // the oldest unproven one makes room.
  void admit(const std::shared_ptr<Pending>& c) {
    c->remote = address_of(c->socket);
    std::erase_if(pending, [](const auto& q) { return q->done; });
    if (pending.size() >= opt.max_pending_connections) {
      refuse(pending.front(), fmt::format("dropped unproven: {} connections had not proved "
                                          "themselves (max_pending_connections), this the oldest",
                                          pending.size()));
      pending.pop_front();
    }
    pending.push_back(c);
    c->timer.expires_after(opt.hello_timeout);
    c->timer.async_wait([this, c](std::error_code ec) {
      if (ec || stopped) return;
      refuse(c, fmt::format("no hello and proof within {}", secs(opt.hello_timeout)));
    });
    read_frame(c->socket, c->handshake, WireFrameKind::hello, [this, c](const FrameRead& r) {
      if (c->done) return;
      if (r.failed) return refuse(c, r.socket ? "closed before its hello: " + r.what : r.what);
      on_hello(c);
    });
  }
  void refuse(const std::shared_ptr<Pending>& c, const std::string& what) {
    if (c->done) return;
    c->done = true;
    c->timer.cancel();
    std::error_code ec;
    c->socket.close(ec);
    stranger(c->remote, what);
  }
  // Reported through on_error, up to 100; then only counted (Stats::strangers), so that a
  // flood of strangers cannot grow errors() or the log without bound.
  void stranger(const std::string& address, const std::string& what) {
    if (closing.load()) return;
    owner.refusal({-1, "connection from " + address, what});
  }

  // The peer and lane a hello claims, while that lane is free; throws WireError otherwise.
  Peer& claimed(const WireHello& h) {
    if (h.job != job_id) {
      throw WireError(
          fmt::format("data-plane hello: job {:#x}, but this job is {:#x}", h.job, job_id));
    }
    Peer* p = h.rank <= static_cast<std::uint32_t>(std::numeric_limits<int>::max())
                  ? peer_of_rank(static_cast<int>(h.rank))
                  : nullptr;
    if (p == nullptr || p->info.rank <= opt.rank) {
      throw WireError(
          fmt::format("data-plane hello: rank {} is not a peer that connects here", h.rank));
    }
    std::lock_guard lock(p->mu);
    if (p->failed || (h.lane == 0 && p->socket)) {
      throw WireError(fmt::format("data-plane hello: rank {} is already connected", h.rank));
    }
    if (h.lane == 0) return *p;
    if (!p->socket) {
      throw WireError(
          fmt::format("data-plane hello: lane {} of rank {} before its lane 0", h.lane, h.rank));
    }
    if (h.lanes != p->lanes) {
      throw WireError(
          fmt::format("data-plane hello: lane {} of {} lanes, but rank {}'s lane 0 said {}", h.lane,
                      h.lanes, h.rank, p->lanes));
    }
    if (p->stripes[h.lane - 1]->socket) {
      throw WireError(
          fmt::format("data-plane hello: lane {} of rank {} is already connected", h.lane, h.rank));
    }
    return *p;
  }

  // The claim is plausible: this side's hello goes out, and the connection's proof is awaited.
  void on_hello(const std::shared_ptr<Pending>& c) {
    Handshake& h = c->handshake;
    try {
      h.theirs = decode_wire_hello(h.meta);
      (void)claimed(h.theirs);
    } catch (const std::exception& e) {
      return refuse(c, e.what());
    }
    h.out = encode_wire_hello(hello(h.theirs.lane, h.theirs.lanes, h.mine));
    asio::async_write(c->socket, asio::buffer(h.out), [this, c](std::error_code ec, std::size_t) {
      if (stopped || c->done) return;
      if (ec) return refuse(c, "writing the hello: " + ec.message());
      read_frame(c->socket, c->handshake, WireFrameKind::proof, [this, c](const FrameRead& r) {
        if (c->done) return;
        if (r.failed) return refuse(c, r.socket ? "closed before its proof: " + r.what : r.what);
        on_proof(c);
      });
    });
  }

  // Proved: the connection takes its rank's lane (unless another took it meanwhile), and this
  // side's proof answers.
  void on_proof(const std::shared_ptr<Pending>& c) {
    const WireHello& h = c->handshake.theirs;
    Peer* p = nullptr;
    try {
      check_peer_proof(c->handshake, static_cast<int>(h.rank), h.lane);
      p = &claimed(h);
    } catch (const std::exception& e) {
      return refuse(c, e.what());
    }
    c->done = true;
    c->timer.cancel();
    c->handshake.out = encode_wire_proof(my_proof(c->handshake, p->info.rank, h.lane));
    tcp::socket* s = nullptr;
    if (h.lane == 0) {
      p->socket.emplace(std::move(c->socket));
      p->lanes = h.lanes;
      p->stripes.clear();
      for (std::size_t lane = 1; lane < p->lanes; ++lane) {
        p->stripes.push_back(std::make_unique<Stripe>());
      }
      if (p->lanes > 1) await_stripes(*p);
      s = &*p->socket;
    } else {
      Stripe& stripe = *p->stripes[h.lane - 1];
      stripe.socket.emplace(std::move(c->socket));
      s = &*stripe.socket;
    }
    // `c` keeps the proof's bytes alive until they are written.
    asio::async_write(*s, asio::buffer(c->handshake.out),
                      [this, c, p, lane = h.lane](std::error_code ec, std::size_t) {
                        if (stopped) return;
                        if (ec) {
                          fail_peer(*p,
                                    fmt::format("writing lane {}'s proof: {}", lane, ec.message()));
                          return;
                        }
                        lane_up(*p, lane == 0);
                      });
  }

  // Lane 0 of `p` is up: its other lanes have hello_timeout to follow.
  void await_stripes(Peer& p) {
    p.timer.expires_after(opt.hello_timeout);
    p.timer.async_wait([this, &p](std::error_code e) {
      if (e || stopped) return;
      fail_peer(p, fmt::format("{} of its {} lanes connected within {}", p.stripes_up + 1, p.lanes,
                               secs(opt.hello_timeout)));
    });
  }
  // --- an identified connection: the writer and the reader ---
  void established(Peer& p) {
    bool kick = false;
    {
      std::lock_guard lock(p.mu);
      if (p.failed) return;
      p.connected = true;
      if (!p.queue.empty() && !p.writing) kick = p.writing = true;
    }
    notify();
    if (kick) write_next(p);
    read_prefix(p);
  }

  void write_next(Peer& p) {
    if (stopped) return;
    {
      std::unique_lock lock(p.mu);
      if (p.failed) return;
      if (p.queue.empty()) {
        p.writing = false;
        lock.unlock();
        notify();  // close() waits for drained queues
        return;
      }
      while (!p.queue.empty() && p.batch.size() < kMaxBatch) {
        p.batch.push_back(std::move(p.queue.front()));
        p.queue.pop_front();
      }
    }
    p.out_buffers.clear();
    for (auto& s : p.stripes) s->out.clear();
    const int lanes = static_cast<int>(p.lanes);
    for (const Outgoing& o : p.batch) {
      p.out_buffers.emplace_back(o.head.data(), o.head.size());
      const auto parts = wire_payload(o.msg);
      std::uint64_t bytes = 0;
      for (const auto part : parts) bytes += part.size();
      bool spread = false;
      for (int lane = 0; lane < lanes; ++lane) {
        auto& out = lane == 0 ? p.out_buffers : p.stripes[lane - 1]->out;
        for_each_wire_piece(parts, wire_stripe(bytes, lanes, lane), [&](auto piece) {
          out.emplace_back(piece.data(), piece.size());
          spread = spread || lane > 0;
        });
      }
      p.batch_striped += spread ? 1 : 0;
    }
    // The lanes write at once; the batch is done when all of them are.
    p.writes_pending = 1;
    p.written = 0;
    for (const auto& s : p.stripes) p.writes_pending += s->out.empty() ? 0 : 1;
    const auto done = [this, &p](std::error_code ec, std::size_t n) {
      if (stopped) return;
      if (ec) {
        fail_peer(p, "writing: " + ec.message());
        return;
      }
      p.written += n;
      if (--p.writes_pending == 0) batch_written(p);
    };
    asio::async_write(*p.socket, p.out_buffers, write_pieces, done);
    for (const auto& s : p.stripes) {
      if (!s->out.empty()) asio::async_write(*s->socket, s->out, write_pieces, done);
    }
  }

  void batch_written(Peer& p) {
    bool goodbye = false;
    std::uint64_t messages = 0;
    for (const Outgoing& o : p.batch) {
      goodbye = goodbye || o.goodbye;
      messages += o.goodbye ? 0 : 1;
    }
    owner.messages_sent_ += messages;
    owner.bytes_sent_ += p.written;
    striped += p.batch_striped;
    p.batch_striped = 0;
    p.batch.clear();
    if (goodbye) {
      std::error_code ignored;
      p.socket->shutdown(tcp::socket::shutdown_send, ignored);
      for (auto& s : p.stripes) s->socket->shutdown(tcp::socket::shutdown_send, ignored);
    }
    write_next(p);
  }

  void read_prefix(Peer& p) {
    asio::async_read(
        *p.socket, asio::buffer(p.prefix), [this, &p](std::error_code ec, std::size_t) {
          if (stopped) return;
          if (ec) {
            if (ec == asio::error::eof && (p.said_goodbye || closing.load())) {
              set_ended(p);
              return;
            }
            fail_peer(p, ec == asio::error::eof ? "closed the connection without a goodbye"
                                                : "reading: " + ec.message());
            return;
          }
          WirePrefix pre;
          try {
            pre = decode_wire_prefix(p.prefix);
          } catch (const std::exception& e) {
            fail_peer(p, e.what());
            return;
          }
          if (pre.kind == WireFrameKind::goodbye) {
            {
              std::lock_guard lock(p.mu);
              p.said_goodbye = true;
            }
            notify();
            read_prefix(p);
            return;
          }
          if (pre.kind == WireFrameKind::hello) {
            fail_peer(p, "a second hello on an established connection");
            return;
          }
          if (p.said_goodbye) {
            fail_peer(p, "a message after its goodbye");
            return;
          }
          p.meta.resize(pre.meta_bytes);
          asio::async_read(*p.socket, asio::buffer(p.meta),
                           [this, &p, data = pre.data_bytes](std::error_code ec2, std::size_t) {
                             if (stopped) return;
                             if (ec2) {
                               fail_peer(p, "reading a message: " + ec2.message());
                               return;
                             }
                             read_data(p, data);
                           });
        });
  }

  void read_data(Peer& p, std::uint64_t data_bytes) {
    try {
      p.head = decode_wire_head(p.meta, data_bytes, rules);
      owner.check_incoming(p.head, p);
      p.tensors = allocate_wire_tensors(p.head);
    } catch (const std::exception& e) {
      fail_peer(p, e.what());
      return;
    }
    p.in_buffers.clear();
    for (auto& s : p.stripes) s->in.clear();
    const auto parts = wire_receive_buffers(p.tensors);
    const int lanes = static_cast<int>(p.lanes);
    for (int lane = 0; lane < lanes; ++lane) {
      auto& in = lane == 0 ? p.in_buffers : p.stripes[lane - 1]->in;
      for_each_wire_piece(parts, wire_stripe(data_bytes, lanes, lane),
                          [&in](auto piece) { in.emplace_back(piece.data(), piece.size()); });
    }
    owner.bytes_received_ += kWirePrefixBytes + p.meta.size() + data_bytes;
    // The lanes read at once; the message is whole when all of them are done.
    p.reads_pending = p.in_buffers.empty() ? 0 : 1;
    for (const auto& s : p.stripes) p.reads_pending += s->in.empty() ? 0 : 1;
    if (p.reads_pending == 0) {
      deliver(p);
      return;
    }
    const auto done = [this, &p](std::error_code ec, std::size_t) {
      if (stopped) return;
      if (ec) {
        fail_peer(p, "reading the tensors of " + describe_wire_head(p.head) + ": " + ec.message());
        return;
      }
      if (--p.reads_pending == 0) deliver(p);
    };
    if (!p.in_buffers.empty()) asio::async_read(*p.socket, p.in_buffers, whole_buffers, done);
    for (const auto& s : p.stripes) {
      if (!s->in.empty()) asio::async_read(*s->socket, s->in, whole_buffers, done);
    }
  }

  void deliver(Peer& p) {
    owner.deliver(p.head.to, p.head.env, std::move(p.tensors));
    p.tensors.clear();
    read_prefix(p);
  }

  // The channel's thread. poll() runs ready handlers and asks epoll without waiting.
  void run_io() {
    while (!io.stopped()) {
      if (io.poll() > 0) continue;
      bool ran = false;
      const auto until = Clock::now() + kSpinBeforeSleep;
      while (!ran && !io.stopped() && Clock::now() < until) {
        ran = io.poll() > 0;
        // Gives the core to any other runnable thread: with more threads than cores, a poller
        // that kept it delayed the work it waits for (see UcxChannel's spin_for_work).
        if (!ran) std::this_thread::yield();
      }
      if (!ran) io.run_one();
    }
  }

  // On the channel's thread: closes every socket and timer; handlers still queued see `stopped`.
  void stop_io() {
    stopped = true;
    std::error_code ec;
    acceptor.close(ec);
    accept_timer.cancel();
    for (auto& c : pending) {
      c->timer.cancel();
      c->socket.close(ec);
    }
    for (auto& p : peers) {
      p->timer.cancel();
      close_sockets(*p);
      std::lock_guard lock(p->mu);
      p->ended = true;
    }
    io.stop();
  }
};

TcpChannel::TcpChannel(ActorSystem& system, TcpChannelOptions options)
    : RoutedChannel(system, skeleton_options(options, "TcpChannel", "tcp")),
      impl_(std::make_unique<Impl>(*this, std::move(options))) {
  // The library's logger is made on first use; made here, before this object's threads log,
  // rather than by two of them at once.
  (void)tandem::log::logger();
  auto& d = *impl_;
  if (d.opt.lanes < 1 || d.opt.lanes > kMaxWireLanes) {
    throw std::invalid_argument(
        fmt::format("tcp data plane: {} lanes, outside [1, {}]", d.opt.lanes, kMaxWireLanes));
  }
  if (d.opt.max_pending_connections < 1) {
    throw std::invalid_argument("tcp data plane: max_pending_connections must be at least 1");
  }
  std::error_code ec;
  tcp::resolver resolver(d.io);
  const auto found = resolver.resolve(d.opt.listen_host, std::to_string(d.opt.listen_port), ec);
  if (ec || found.empty()) {
    throw std::runtime_error(fmt::format("tcp data plane: cannot resolve {}:{}: {}",
                                         d.opt.listen_host, d.opt.listen_port, ec.message()));
  }
  const tcp::endpoint at = found.begin()->endpoint();
  d.acceptor.open(at.protocol(), ec);
  if (!ec) d.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) d.acceptor.bind(at, ec);
  if (!ec) d.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    throw std::runtime_error(fmt::format("tcp data plane: cannot listen on {}:{}: {}",
                                         d.opt.listen_host, d.opt.listen_port, ec.message()));
  }
  d.thread = std::thread([&d] { d.run_io(); });
}

TcpChannel::~TcpChannel() {
  close();
}

std::uint16_t TcpChannel::port() const {
  std::error_code ec;
  const auto ep = impl_->acceptor.local_endpoint(ec);
  return ec ? 0 : ep.port();
}

void TcpChannel::add_peer(TcpPeer peer) {
  auto& d = *impl_;
  auto p = std::make_unique<Peer>(d.io, std::move(peer));
  add_routed_peer(*p);
  d.peers.push_back(std::move(p));
}

void TcpChannel::start() {
  auto& d = *impl_;
  if (started()) throw std::logic_error("TcpChannel::start called twice");
  mark_started();
  asio::post(d.io, [&d] {
    d.accept_next();
    for (auto& p : d.peers) {
      if (p->info.rank < d.opt.rank) {
        p->connect_start = Clock::now();
        d.connect(*p);
      }
    }
  });
}

SendResult TcpChannel::post(RoutedPeer& peer, std::vector<std::byte> head, Message msg) {
  auto& d = *impl_;
  auto& p = static_cast<Peer&>(peer);
  Outgoing o;
  o.head = std::move(head);
  o.msg = std::move(msg);
  bool kick = false;
  {
    std::lock_guard lock(p.mu);
    // Checked under the peer's lock, which close() takes to queue the goodbye: a message is
    // either refused or queued before it.
    if (d.closing.load()) return SendResult{SendStatus::system_stopped};
    // A peer that said goodbye reads no more: the message would be lost.
    if (p.failed || p.said_goodbye) return SendResult{SendStatus::target_stopped};
    p.queue.push_back(std::move(o));
    if (p.connected && !p.writing) kick = p.writing = true;
  }
  if (kick) asio::post(d.io, [&d, &p] { d.write_next(p); });
  return SendResult{};
}

void TcpChannel::close(std::chrono::milliseconds timeout) {
  auto& d = *impl_;
  if (d.closed) return;
  // Staged messages are queued behind what is queued already, before the goodbyes.
  stop_sending(timeout);
  d.closing.store(true);
  // Goodbyes go behind what is queued, so the peers read every message first.
  for (auto& p : d.peers) {
    bool kick = false;
    {
      std::lock_guard lock(p->mu);
      if (!p->connected || p->failed) continue;
      Outgoing o;
      o.head = encode_wire_goodbye();
      o.goodbye = true;
      p->queue.push_back(std::move(o));
      if (!p->writing) kick = p->writing = true;
    }
    if (kick) asio::post(d.io, [&d, q = p.get()] { d.write_next(*q); });
  }
  {
    std::unique_lock lock(state_mu_);
    const auto drained = [&d] {
      for (auto& p : d.peers) {
        std::lock_guard pl(p->mu);
        if (p->connected && !p->failed && (!p->queue.empty() || p->writing)) return false;
      }
      return true;
    };
    if (!state_cv_.wait_for(lock, timeout, drained)) {
      tandem::log::warn("tcp data plane (rank {}): closing with messages still queued after {}",
                        d.opt.rank, secs(timeout));
    }
    // The peers' goodbyes, so that closing does not reset a connection they still read.
    (void)state_cv_.wait_for(lock, d.opt.close_linger, [&d] {
      for (auto& p : d.peers) {
        std::lock_guard pl(p->mu);
        if (p->connected && !p->failed && !p->said_goodbye && !p->ended) return false;
      }
      return true;
    });
  }
  asio::post(d.io, [&d] { d.stop_io(); });
  d.guard.reset();
  if (d.thread.joinable()) d.thread.join();
  d.closed = true;
}

TcpChannel::Stats TcpChannel::stats() const {
  const auto& d = *impl_;
  Stats s;
  static_cast<ChannelStats&>(s) = routed_stats();
  s.striped = d.striped.load();
  return s;
}

}  // namespace tandem::transport
