#include "transport/cuda_ipc_channel.hpp"

#include <fmt/format.h>

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
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>

#include "runtime/log.hpp"
#include "runtime/stream.hpp"
#include "transport/cuda_ipc_frame.hpp"
#include "transport/cuda_ipc_memory.hpp"
#include "transport/cuda_ipc_outstanding.hpp"
#include "transport/cuda_ipc_segments.hpp"

namespace tandem::transport {
namespace {

using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

constexpr std::chrono::milliseconds kFirstRetry{20};
constexpr std::chrono::milliseconds kMaxRetry{500};
constexpr std::size_t kMaxBatch = 64;

// What a peer's writer sends: a cuda-ipc frame (`pre`: tensors, ack, probe or answer) and/or a
// wire frame (`head` and the host tensors of `msg`).
struct Out {
  std::vector<std::byte> pre;
  std::vector<std::byte> head;
  Message msg;  // keeps the host tensors alive until written
  bool goodbye = false;
};

// A message read from a peer, waiting for its device copies or for the ones before it.
struct Arrival {
  std::uint64_t id = 0;  // this side's, for the copy's completion
  WireHead head;
  std::vector<Tensor> tensors;
  std::uint64_t seq = 0;  // the sender's, acknowledged once the copies ran (0: no copies)
  std::size_t ipc = 0;    // tensors that came by IPC
  bool pending = false;
  std::string failed;
};

std::string secs(std::chrono::milliseconds d) {
  return fmt::format("{:.1f} s", std::chrono::duration<double>(d).count());
}

std::string address_of(const tcp::socket& s) {
  std::error_code ec;
  const auto ep = s.remote_endpoint(ec);
  return ec ? "<unknown address>" : fmt::format("{}:{}", ep.address().to_string(), ep.port());
}

std::string error_of(const Event& e) {
  if (const std::exception_ptr x = e.error()) {
    try {
      std::rethrow_exception(x);
    } catch (const std::exception& err) {
      return err.what();
    } catch (...) {
      return "unknown error";
    }
  }
  return {};
}

bool is_local_host(const std::string& host, const std::string& listen_host) {
  return host == listen_host || host == "localhost" || host == "::1" || host.starts_with("127.");
}

struct Handshake {
  JobNonce mine = fresh_nonce();
  WireHello theirs;
  std::vector<std::byte> out;
  std::array<std::byte, kWirePrefixBytes> prefix{};
  std::vector<std::byte> meta;
};

struct Peer : RoutedPeer {
  Peer(asio::io_context& io, CudaIpcPeer p)
      : RoutedPeer(p.rank, fmt::format("rank {} ({}:{})", p.rank, p.host, p.port)),
        info(std::move(p)),
        timer(io) {}

  CudaIpcPeer info;
  std::atomic<bool> ipc{false};  // the peer mapped this side's probe
  CudaIpcOutstanding outstanding;

  std::deque<Out> queue;        // under mu
  bool writing = false;         // under mu
  bool goodbye_queued = false;  // under mu: nothing may follow it
  std::size_t arriving = 0;     // under mu: arrivals not yet delivered

  std::optional<tcp::socket> socket;
  asio::steady_timer timer;
  Clock::time_point connect_start;
  std::chrono::milliseconds retry = kFirstRetry;
  Handshake handshake;
  std::vector<Out> batch;
  std::vector<asio::const_buffer> out_buffers;
  std::size_t written = 0;
  std::array<std::byte, kWirePrefixBytes> prefix{};
  std::vector<std::byte> body;
  std::optional<CudaIpcSlots> slots;  // a tensors frame, for the message frame after it
  WireHead head;
  std::vector<Tensor> tensors;
  std::vector<asio::mutable_buffer> in_buffers;
  std::deque<Arrival> arrivals;
};

struct Pending {
  explicit Pending(asio::io_context& io) : socket(io), timer(io) {}
  tcp::socket socket;
  asio::steady_timer timer;
  std::string remote;
  Handshake handshake;
  bool done = false;
};

}  // namespace

// What copy completions reach the channel through; cleared when its thread stops.
struct IpcLifeline {
  std::mutex mu;
  asio::io_context* io = nullptr;
};

struct CudaIpcChannel::Impl {
  Impl(CudaIpcChannel& c, CudaIpcChannelOptions o)
      : owner(c),
        opt(std::move(o)),
        job_id(job_id_of(opt.credentials.job)),
        fallback(opt.rank, opt.warn),
        acceptor(io),
        guard(asio::make_work_guard(io)),
        life(std::make_shared<IpcLifeline>()) {
    rules.job = job_id;
    rules.types = &opt.types;
    rules.max_data_bytes = opt.max_data_bytes;
    life->io = &io;
  }

  CudaIpcChannel& owner;
  CudaIpcChannelOptions opt;
  std::uint64_t job_id;
  WireRules rules;
  CudaIpcFallback fallback;
  asio::io_context io;
  tcp::acceptor acceptor;
  std::deque<std::shared_ptr<Pending>> pending;
  asio::executor_work_guard<asio::io_context::executor_type> guard;
  std::thread thread;
  std::vector<std::unique_ptr<Peer>> peers;
  std::shared_ptr<IpcLifeline> life;
  bool stopped = false;
  std::atomic<bool> closing{false};
  bool closed = false;

  // The device side, when this process has cuda:`device` (why not, otherwise).
  std::string no_device;
  std::unique_ptr<CudaIpcSegments> segments;
  std::optional<Stream> copies;  // the receiver's copy stream
  Tensor probe_memory;           // exported to every peer
  std::mutex streams_mu;
  std::map<int, Stream> event_streams;  // the sender's, by device
  std::uint64_t next_arrival = 1;
  std::atomic<std::uint64_t> ipc_sent{0}, ipc_received{0}, acks{0};

  void open_device() {
    if (!cuda_ipc_built()) {
      no_device = "this build has no CUDA backend";
    } else if (opt.device < 0 || opt.device >= cuda_device_count()) {
      no_device = fmt::format("this process has no cuda:{}", opt.device);
    } else {
      segments = std::make_unique<CudaIpcSegments>(cuda_ipc_segment_ops(opt.device));
      copies.emplace(Device::cuda(opt.device));
    }
  }

  Peer* peer_of_rank(int rank) { return static_cast<Peer*>(owner.routed_peer_of_rank(rank)); }

  void fail_peer(Peer& p, const std::string& what) {
    const bool quiet = closing.load();
    const ChannelError error{p.info.rank, p.name, what};
    {
      std::lock_guard lock(p.mu);
      if (!owner.mark_failed_locked(p, error, quiet)) return;
      p.queue.clear();
      p.ended = true;
    }
    p.timer.cancel();
    std::error_code ec;
    if (p.socket) p.socket->close(ec);
    p.outstanding.release_all();
    owner.notify();
    if (quiet) {
      tandem::log::debug("cuda-ipc data plane (rank {}): {} while closing: {}", opt.rank, p.name,
                         what);
      return;
    }
    owner.report(error, true, true);
  }

  // Queues a frame of this side's own (ack, probe, answer); dropped once the goodbye is queued
  // (the peer reads nothing after it) or the peer failed.
  void queue_frame(Peer& p, std::vector<std::byte> frame, bool first = false) {
    bool kick = false;
    {
      std::lock_guard lock(p.mu);
      if (p.failed || p.goodbye_queued) return;
      Out o;
      o.pre = std::move(frame);
      if (first) {
        p.queue.push_front(std::move(o));
      } else {
        p.queue.push_back(std::move(o));
      }
      if (p.connected && !p.writing) kick = p.writing = true;
    }
    if (kick) write_next(p);
  }

  // --- the handshake (tcp_channel.hpp's, one stream) ---
  WireHello hello(const JobNonce& nonce) const {
    return {job_id, static_cast<std::uint32_t>(opt.rank), 0, 1, nonce};
  }
  ProofContext context(int from, int to, const JobNonce& from_nonce,
                       const JobNonce& to_nonce) const {
    return {ProofPurpose::kDataCudaIpc,
            opt.credentials.job,
            static_cast<std::uint32_t>(from),
            static_cast<std::uint32_t>(to),
            0,
            from_nonce,
            to_nonce};
  }
  WireProof my_proof(const Handshake& h, int peer_rank) const {
    return {h.mine, make_proof(opt.credentials.token,
                               context(opt.rank, peer_rank, h.mine, h.theirs.nonce))};
  }
  void check_peer_proof(const Handshake& h, int peer_rank) const {
    const WireProof got = decode_wire_proof(h.meta);
    if (got.nonce != h.theirs.nonce ||
        !check_proof(opt.credentials.token, context(peer_rank, opt.rank, h.theirs.nonce, h.mine),
                     got.proof)) {
      throw WireError(
          fmt::format("data-plane proof of rank {} does not check: it does not hold "
                      "this job's token and nonce",
                      peer_rank));
    }
  }
  void check_hello(const WireHello& h, int expected_rank) const {
    if (h.job != job_id) {
      throw WireError(
          fmt::format("data-plane hello: job {:#x}, but this job is {:#x}", h.job, job_id));
    }
    if (static_cast<std::int64_t>(h.rank) != expected_rank || h.lane != 0 || h.lanes != 1) {
      throw WireError(
          fmt::format("data-plane hello: rank {} lane {} of {}, expected rank {} lane "
                      "0 of 1",
                      h.rank, h.lane, h.lanes, expected_rank));
    }
  }

  // Reads one frame of `kind` into h.meta; done(error) with "" on success. `socket_error`:
  // the connection failed rather than sent something else.
  template <class Done>
  void read_frame(tcp::socket& s, Handshake& h, WireFrameKind kind, Done done) {
    asio::async_read(
        s, asio::buffer(h.prefix), [this, &s, &h, kind, done](std::error_code ec, std::size_t) {
          if (stopped) return;
          if (ec) return done("the connection: " + ec.message());
          try {
            const WirePrefix pre = decode_wire_prefix(h.prefix);
            if (pre.kind != kind) {
              throw WireError(kind == WireFrameKind::hello ? "the first frame is not a hello"
                                                           : "the frame after the hello is not a "
                                                             "proof");
            }
            h.meta.resize(pre.meta_bytes);
          } catch (const std::exception& e) {
            return done(std::string(e.what()));
          }
          asio::async_read(s, asio::buffer(h.meta), [this, done](std::error_code ec2, std::size_t) {
            if (stopped) return;
            done(ec2 ? "the connection: " + ec2.message() : std::string());
          });
        });
  }

  tcp::resolver::results_type resolve(Peer& p) {
    tcp::resolver resolver(io);
    std::error_code ec;
    auto found = resolver.resolve(p.info.host, std::to_string(p.info.port), ec);
    if (ec) {
      fail_peer(p, fmt::format("cannot resolve {}:{}: {}", p.info.host, p.info.port, ec.message()));
      return {};
    }
    return found;
  }

  void connect(Peer& p) {
    if (stopped) return;
    p.socket.emplace(io);
    const auto endpoints = resolve(p);
    if (endpoints.empty()) return;
    asio::async_connect(*p.socket, endpoints, [this, &p](std::error_code err, const auto&) {
      if (stopped) return;
      if (err) return retry_connect(p, err.message());
      std::error_code nd;
      p.socket->set_option(tcp::no_delay(true), nd);
      handshake_out(p);
    });
  }
  void retry_connect(Peer& p, const std::string& why) {
    if (Clock::now() - p.connect_start >= opt.connect_timeout) {
      return fail_peer(
          p, fmt::format("could not connect within {}: {}", secs(opt.connect_timeout), why));
    }
    p.timer.expires_after(p.retry);
    p.retry = std::min(p.retry * 2, kMaxRetry);
    p.timer.async_wait([this, &p](std::error_code ec) {
      if (!ec && !stopped) connect(p);
    });
  }

  // The connecting side: hello out, hello in, proof out, proof in.
  void handshake_out(Peer& p) {
    p.timer.expires_after(opt.hello_timeout);
    p.timer.async_wait([this, &p](std::error_code ec) {
      if (ec || stopped) return;
      fail_peer(p, fmt::format("no hello and proof within {}", secs(opt.hello_timeout)));
    });
    Handshake& h = p.handshake;
    h = Handshake{};
    h.out = encode_wire_hello(hello(h.mine));
    asio::async_write(
        *p.socket, asio::buffer(h.out), [this, &p, &h](std::error_code ec, std::size_t) {
          if (stopped) return;
          if (ec) return fail_peer(p, "writing the hello: " + ec.message());
          read_frame(*p.socket, h, WireFrameKind::hello, [this, &p, &h](const std::string& e) {
            if (!e.empty()) return fail_peer(p, "reading the hello: " + e);
            try {
              h.theirs = decode_wire_hello(h.meta);
              check_hello(h.theirs, p.info.rank);
            } catch (const std::exception& x) {
              return fail_peer(p, x.what());
            }
            h.out = encode_wire_proof(my_proof(h, p.info.rank));
            asio::async_write(
                *p.socket, asio::buffer(h.out), [this, &p, &h](std::error_code ec2, std::size_t) {
                  if (stopped) return;
                  if (ec2) return fail_peer(p, "writing the proof: " + ec2.message());
                  read_frame(*p.socket, h, WireFrameKind::proof,
                             [this, &p, &h](const std::string& e2) {
                               if (!e2.empty()) {
                                 return fail_peer(
                                     p,
                                     "reading the proof (did it refuse this process's proof? do "
                                     "both hold this job's token and nonce?): " +
                                         e2);
                               }
                               try {
                                 check_peer_proof(h, p.info.rank);
                               } catch (const std::exception& x) {
                                 return fail_peer(p, x.what());
                               }
                               p.timer.cancel();
                               established(p);
                             });
                });
          });
        });
  }

  void accept_next() {
    if (stopped) return;
    auto c = std::make_shared<Pending>(io);
    acceptor.async_accept(c->socket, [this, c](std::error_code ec) {
      if (stopped) return;
      if (ec) {
        tandem::log::warn("cuda-ipc data plane (rank {}): accepting: {}", opt.rank, ec.message());
        return accept_next();
      }
      std::error_code nd;
      c->socket.set_option(tcp::no_delay(true), nd);
      admit(c);
      accept_next();
    });
  }
  void admit(const std::shared_ptr<Pending>& c) {
    c->remote = address_of(c->socket);
    std::erase_if(pending, [](const auto& q) { return q->done; });
    if (pending.size() >= opt.max_pending_connections) {
      refuse(pending.front(), "dropped unproven: too many connections had not proved themselves");
      pending.pop_front();
    }
    pending.push_back(c);
    c->timer.expires_after(opt.hello_timeout);
    c->timer.async_wait([this, c](std::error_code ec) {
      if (ec || stopped) return;
      refuse(c, fmt::format("no hello and proof within {}", secs(opt.hello_timeout)));
    });
    read_frame(c->socket, c->handshake, WireFrameKind::hello, [this, c](const std::string& e) {
      if (c->done) return;
      if (!e.empty()) return refuse(c, "before its hello: " + e);
      on_hello(c);
    });
  }
  void refuse(const std::shared_ptr<Pending>& c, const std::string& what) {
    if (c->done) return;
    c->done = true;
    c->timer.cancel();
    std::error_code ec;
    c->socket.close(ec);
    if (!closing.load()) owner.refusal({-1, "connection from " + c->remote, what});
  }
  // The peer a hello claims, while it is not connected; throws WireError otherwise.
  Peer& claimed(const WireHello& h) {
    if (h.job != job_id) {
      throw WireError(
          fmt::format("data-plane hello: job {:#x}, but this job is {:#x}", h.job, job_id));
    }
    Peer* p = h.rank <= static_cast<std::uint32_t>(std::numeric_limits<int>::max())
                  ? peer_of_rank(static_cast<int>(h.rank))
                  : nullptr;
    if (p == nullptr || p->info.rank <= opt.rank || h.lane != 0 || h.lanes != 1) {
      throw WireError(
          fmt::format("data-plane hello: rank {} lane {} of {} is not a peer that connects here",
                      h.rank, h.lane, h.lanes));
    }
    std::lock_guard lock(p->mu);
    if (p->failed || p->socket) {
      throw WireError(fmt::format("data-plane hello: rank {} is already connected", h.rank));
    }
    return *p;
  }
  void on_hello(const std::shared_ptr<Pending>& c) {
    Handshake& h = c->handshake;
    try {
      h.theirs = decode_wire_hello(h.meta);
      (void)claimed(h.theirs);
    } catch (const std::exception& e) {
      return refuse(c, e.what());
    }
    h.out = encode_wire_hello(hello(h.mine));
    asio::async_write(c->socket, asio::buffer(h.out), [this, c](std::error_code ec, std::size_t) {
      if (stopped || c->done) return;
      if (ec) return refuse(c, "writing the hello: " + ec.message());
      read_frame(c->socket, c->handshake, WireFrameKind::proof, [this, c](const std::string& e) {
        if (c->done) return;
        if (!e.empty()) return refuse(c, "before its proof: " + e);
        on_proof(c);
      });
    });
  }
  void on_proof(const std::shared_ptr<Pending>& c) {
    Peer* p = nullptr;
    try {
      check_peer_proof(c->handshake, static_cast<int>(c->handshake.theirs.rank));
      p = &claimed(c->handshake.theirs);
    } catch (const std::exception& e) {
      return refuse(c, e.what());
    }
    c->done = true;
    c->timer.cancel();
    c->handshake.out = encode_wire_proof(my_proof(c->handshake, p->info.rank));
    {
      std::lock_guard lock(p->mu);
      p->socket.emplace(std::move(c->socket));
    }
    asio::async_write(*p->socket, asio::buffer(c->handshake.out),
                      [this, c, p](std::error_code ec, std::size_t) {
                        if (stopped) return;
                        if (ec) return fail_peer(*p, "writing the proof: " + ec.message());
                        established(*p);
                      });
  }

  // --- an identified connection ---
  void established(Peer& p) {
    {
      std::lock_guard lock(p.mu);
      if (p.failed) return;
      p.connected = true;
    }
    owner.notify();
    queue_frame(p, encode_cuda_ipc_probe(make_probe(p)), true);
    bool kick = false;
    {
      std::lock_guard lock(p.mu);
      if (!p.queue.empty() && !p.writing) kick = p.writing = true;
    }
    if (kick) write_next(p);
    read_prefix(p);
  }

  // This side's probe for `p`: a small allocation of cuda:`device`, exported; when that is
  // impossible, the peer is refused here and the probe says why.
  CudaIpcProbe make_probe(Peer& p) {
    CudaIpcProbe probe;
    if (!no_device.empty()) {
      probe.why = no_device;
    } else {
      try {
        if (!probe_memory.defined()) {
          probe_memory = Tensor::zeros({1}, DType::f32, Device::cuda(opt.device));
        }
        probe.tensor = cuda_ipc_export(probe_memory);
        probe.ok = true;
      } catch (const std::exception& e) {
        probe.why = e.what();
      }
    }
    if (!probe.ok) fallback.refuse(p.info.rank, "this process cannot export: " + probe.why);
    return probe;
  }
  // Whether this side maps the peer's probe.
  CudaIpcProbe answer_probe(const CudaIpcProbe& theirs) {
    CudaIpcProbe answer;
    if (!theirs.ok) {
      answer.why = "it cannot export: " + theirs.why;
    } else if (!segments) {
      answer.why = "it cannot map: " + no_device;
    } else {
      try {
        (void)segments->base(theirs.tensor.memory);
        answer.ok = true;
      } catch (const std::exception& e) {
        answer.why = "it cannot map: " + std::string(e.what());
      }
    }
    return answer;
  }

  void write_next(Peer& p) {
    if (stopped) return;
    {
      std::unique_lock lock(p.mu);
      if (p.failed) return;
      if (p.queue.empty()) {
        p.writing = false;
        lock.unlock();
        owner.notify();
        return;
      }
      while (!p.queue.empty() && p.batch.size() < kMaxBatch) {
        p.batch.push_back(std::move(p.queue.front()));
        p.queue.pop_front();
      }
    }
    p.out_buffers.clear();
    for (const Out& o : p.batch) {
      if (!o.pre.empty()) p.out_buffers.emplace_back(o.pre.data(), o.pre.size());
      if (o.head.empty()) continue;
      p.out_buffers.emplace_back(o.head.data(), o.head.size());
      for (const auto part : wire_payload(o.msg))
        p.out_buffers.emplace_back(part.data(), part.size());
    }
    asio::async_write(*p.socket, p.out_buffers, [this, &p](std::error_code ec, std::size_t n) {
      if (stopped) return;
      if (ec) return fail_peer(p, "writing: " + ec.message());
      batch_written(p, n);
    });
  }
  void batch_written(Peer& p, std::size_t n) {
    bool goodbye = false;
    for (const Out& o : p.batch) {
      goodbye = goodbye || o.goodbye;
      if (!o.head.empty() && !o.goodbye) ++owner.messages_sent_;
    }
    owner.bytes_sent_ += n;
    p.batch.clear();
    if (goodbye) {
      std::error_code ignored;
      p.socket->shutdown(tcp::socket::shutdown_send, ignored);
    }
    write_next(p);
  }

  // --- the reader ---
  void read_prefix(Peer& p) {
    asio::async_read(
        *p.socket, asio::buffer(p.prefix), [this, &p](std::error_code ec, std::size_t) {
          if (stopped) return;
          if (ec) {
            if (ec == asio::error::eof && (p.said_goodbye || closing.load())) {
              {
                std::lock_guard lock(p.mu);
                p.ended = true;
              }
              owner.notify();
              return;
            }
            // A reset is a close too: a peer that exits with this side's probe unread resets.
            if (ec == asio::error::eof) {
              return fail_peer(p, "closed the connection without a goodbye");
            }
            if (ec == asio::error::connection_reset) {
              return fail_peer(p, "closed the connection without a goodbye (" + ec.message() + ")");
            }
            return fail_peer(p, "reading: " + ec.message());
          }
          try {
            if (is_cuda_ipc_frame(p.prefix))
              return read_ipc_frame(p, decode_cuda_ipc_prefix(p.prefix));
            on_wire_prefix(p, decode_wire_prefix(p.prefix));
          } catch (const std::exception& e) {
            fail_peer(p, e.what());
          }
        });
  }

  void on_wire_prefix(Peer& p, const WirePrefix& pre) {
    if (p.slots && pre.kind != WireFrameKind::message) {
      throw WireError("cuda-ipc tensors frame not followed by a message frame");
    }
    if (pre.kind == WireFrameKind::goodbye) {
      {
        std::lock_guard lock(p.mu);
        p.said_goodbye = true;
      }
      owner.notify();
      return read_prefix(p);
    }
    if (pre.kind != WireFrameKind::message) throw WireError("a handshake frame on a connection");
    if (p.said_goodbye) throw WireError("a message after its goodbye");
    p.body.resize(pre.meta_bytes);
    asio::async_read(*p.socket, asio::buffer(p.body),
                     [this, &p, data = pre.data_bytes](std::error_code ec, std::size_t) {
                       if (stopped) return;
                       if (ec) return fail_peer(p, "reading a message: " + ec.message());
                       read_data(p, data);
                     });
  }

  void read_ipc_frame(Peer& p, const CudaIpcPrefix& pre) {
    if (p.slots) throw WireError("cuda-ipc tensors frame not followed by a message frame");
    p.body.resize(pre.body_bytes);
    asio::async_read(*p.socket, asio::buffer(p.body),
                     [this, &p, kind = pre.kind](std::error_code ec, std::size_t) {
                       if (stopped) return;
                       if (ec) return fail_peer(p, "reading a cuda-ipc frame: " + ec.message());
                       try {
                         on_ipc_frame(p, kind);
                       } catch (const std::exception& e) {
                         return fail_peer(p, e.what());
                       }
                       read_prefix(p);
                     });
  }

  void on_ipc_frame(Peer& p, CudaIpcFrameKind kind) {
    switch (kind) {
      case CudaIpcFrameKind::tensors:
        if (p.said_goodbye) throw WireError("a message after its goodbye");
        p.slots = decode_cuda_ipc_slots(p.body, opt.max_data_bytes);
        return;
      case CudaIpcFrameKind::ack:
        p.outstanding.acknowledge(decode_cuda_ipc_ack(p.body));
        ++acks;
        owner.notify();
        return;
      case CudaIpcFrameKind::probe:
        queue_frame(p, encode_cuda_ipc_answer(answer_probe(decode_cuda_ipc_probe(p.body))));
        return;
      case CudaIpcFrameKind::answer: {
        const CudaIpcProbe a = decode_cuda_ipc_answer(p.body);
        if (a.ok) {
          p.ipc.store(true);
        } else {
          fallback.refuse(p.info.rank, "the peer's answer to the probe: " + a.why);
        }
        return;
      }
    }
  }

  // The tensors frame's slots must be the head's data tensors of the descriptors' dtype and
  // shape, all of one seq; their bytes are not in the data part.
  void take_slots(Peer& p) {
    std::uint64_t seq = 0;
    for (std::size_t i = 0; i < p.slots->slots.size(); ++i) {
      const std::size_t slot = p.slots->slots[i];
      const CudaIpcTensor& d = p.slots->tensors[i];
      if (slot >= p.head.tensors.size()) {
        throw WireError(fmt::format("cuda-ipc slot {} of a message of {} tensors", slot,
                                    p.head.tensors.size()));
      }
      WireTensorSpec& spec = p.head.tensors[slot];
      if (spec.storage != WireStorage::data || spec.dtype != d.dtype || spec.shape != d.shape) {
        throw WireError(
            fmt::format("cuda-ipc slot {}: the descriptor is not the message's tensor", slot));
      }
      if (i > 0 && d.seq != seq) throw WireError("cuda-ipc descriptors of one message, two seqs");
      seq = d.seq;
      spec.storage = WireStorage::undefined;
    }
  }

  void read_data(Peer& p, std::uint64_t data_bytes) {
    try {
      p.head = decode_wire_head(p.body, data_bytes, rules);
      owner.check_incoming(p.head, p);
      if (p.slots) take_slots(p);
      p.tensors = allocate_wire_tensors(p.head);
    } catch (const std::exception& e) {
      return fail_peer(p, e.what());
    }
    p.in_buffers.clear();
    std::uint64_t bytes = 0;
    for (const auto part : wire_receive_buffers(p.tensors)) {
      p.in_buffers.emplace_back(part.data(), part.size());
      bytes += part.size();
    }
    owner.bytes_received_ += kWirePrefixBytes + p.body.size() + bytes;
    asio::async_read(*p.socket, p.in_buffers, [this, &p](std::error_code ec, std::size_t) {
      if (stopped) return;
      if (ec) {
        return fail_peer(
            p, "reading the tensors of " + describe_wire_head(p.head) + ": " + ec.message());
      }
      arrived(p);
    });
  }

  // A message is read: its IPC tensors are copied (delivered once the copies ran), after the
  // messages before it.
  void arrived(Peer& p) {
    Arrival a;
    a.id = next_arrival++;
    a.head = std::move(p.head);
    a.tensors = std::move(p.tensors);
    p.tensors.clear();
    if (p.slots) {
      try {
        start_copies(p, a);
      } catch (const std::exception& e) {
        return fail_peer(
            p, "copying the IPC tensors of " + describe_wire_head(a.head) + ": " + e.what());
      }
      p.slots.reset();
    }
    {
      std::lock_guard lock(p.mu);
      ++p.arriving;
    }
    p.arrivals.push_back(std::move(a));
    deliver_ready(p);
    read_prefix(p);
  }

  void start_copies(Peer& p, Arrival& a) {
    if (!segments) throw CudaIpcRefused("this process cannot map: " + no_device);
    for (std::size_t i = 0; i < p.slots->slots.size(); ++i) {
      const CudaIpcTensor& d = p.slots->tensors[i];
      a.seq = d.seq;
      const auto* base = static_cast<const char*>(segments->base(d.memory));
      cuda_ipc_wait(d.event, *copies);
      Tensor dst = Tensor::empty(d.shape, d.dtype, Device::cuda(opt.device));
      cuda_ipc_copy(dst, base + d.offset, d.bytes, *copies);
      a.tensors[p.slots->slots[i]] = std::move(dst);
    }
    a.ipc = p.slots->slots.size();
    a.pending = true;
    const Event done = copies->record();
    done.on_complete([life = life, this, pp = &p, id = a.id, done] {
      std::lock_guard lock(life->mu);
      if (life->io == nullptr) return;
      asio::post(*life->io, [this, pp, id, done] { copied(*pp, id, done); });
    });
  }

  void copied(Peer& p, std::uint64_t id, const Event& done) {
    if (stopped) return;
    for (Arrival& a : p.arrivals) {
      if (a.id != id) continue;
      a.pending = false;
      a.failed = error_of(done);
      if (a.failed.empty()) queue_frame(p, encode_cuda_ipc_ack(a.seq));
    }
    deliver_ready(p);
  }

  void deliver_ready(Peer& p) {
    std::size_t delivered = 0;
    while (!p.arrivals.empty() && !p.arrivals.front().pending) {
      Arrival a = std::move(p.arrivals.front());
      p.arrivals.pop_front();
      ++delivered;
      if (!a.failed.empty()) {
        fail_peer(p, "copying the IPC tensors of " + describe_wire_head(a.head) + ": " + a.failed);
        break;
      }
      ipc_received += a.ipc;
      owner.deliver(a.head.to, a.head.env, std::move(a.tensors));
    }
    if (delivered == 0) return;
    {
      std::lock_guard lock(p.mu);
      p.arriving -= std::min(p.arriving, delivered);
    }
    owner.notify();
  }

  // --- the sender's export ---
  Stream& event_stream(int device) {
    std::lock_guard lock(streams_mu);
    auto it = event_streams.find(device);
    if (it == event_streams.end())
      it = event_streams.emplace(device, Stream(Device::cuda(device))).first;
    return it->second;
  }

  // The descriptors of msg's cuda tensors, with their events (seq left 0).
  CudaIpcSlots export_tensors(const Message& msg, std::vector<CudaIpcEvent>& events) {
    CudaIpcSlots s;
    for (std::size_t i = 0; i < msg.tensors.size(); ++i) {
      const Tensor& t = msg.tensors[i];
      if (!t.defined() || !t.device().is_cuda()) continue;
      CudaIpcTensor d = cuda_ipc_export(t);
      events.push_back(CudaIpcEvent::record(event_stream(t.device().index())));
      d.event = events.back().handle();
      s.slots.push_back(static_cast<std::uint8_t>(i));
      s.tensors.push_back(d);
    }
    return s;
  }

  void run_io() {
    while (!io.stopped()) io.run_one();
  }

  void stop_io() {
    stopped = true;
    std::error_code ec;
    acceptor.close(ec);
    for (auto& c : pending) {
      c->timer.cancel();
      c->socket.close(ec);
    }
    for (auto& p : peers) {
      p->timer.cancel();
      if (p->socket) p->socket->close(ec);
      std::lock_guard lock(p->mu);
      p->ended = true;
    }
    io.stop();
  }
};

CudaIpcChannel::CudaIpcChannel(ActorSystem& system, CudaIpcChannelOptions options)
    : RoutedChannel(system, skeleton_options(options, "CudaIpcChannel", "cuda-ipc")),
      impl_(std::make_unique<Impl>(*this, std::move(options))) {
  (void)tandem::log::logger();
  auto& d = *impl_;
  if (d.opt.max_pending_connections < 1) {
    throw std::invalid_argument("cuda-ipc data plane: max_pending_connections must be at least 1");
  }
  d.open_device();
  std::error_code ec;
  tcp::resolver resolver(d.io);
  const auto found = resolver.resolve(d.opt.listen_host, std::to_string(d.opt.listen_port), ec);
  if (ec || found.empty()) {
    throw std::runtime_error(fmt::format("cuda-ipc data plane: cannot resolve {}:{}: {}",
                                         d.opt.listen_host, d.opt.listen_port, ec.message()));
  }
  const tcp::endpoint at = found.begin()->endpoint();
  d.acceptor.open(at.protocol(), ec);
  if (!ec) d.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) d.acceptor.bind(at, ec);
  if (!ec) d.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    throw std::runtime_error(fmt::format("cuda-ipc data plane: cannot listen on {}:{}: {}",
                                         d.opt.listen_host, d.opt.listen_port, ec.message()));
  }
  d.thread = std::thread([&d] { d.run_io(); });
}

CudaIpcChannel::~CudaIpcChannel() {
  close();
}

std::uint16_t CudaIpcChannel::port() const {
  std::error_code ec;
  const auto ep = impl_->acceptor.local_endpoint(ec);
  return ec ? 0 : ep.port();
}

void CudaIpcChannel::add_peer(CudaIpcPeer peer) {
  auto& d = *impl_;
  const bool same_host = is_local_host(peer.host, d.opt.listen_host);
  auto p = std::make_unique<Peer>(d.io, std::move(peer));
  add_routed_peer(*p);
  d.fallback.add_peer(p->info.rank, same_host);
  d.peers.push_back(std::move(p));
}

void CudaIpcChannel::start() {
  auto& d = *impl_;
  if (started()) throw std::logic_error("CudaIpcChannel::start called twice");
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

bool CudaIpcChannel::stages_for(const RoutedPeer& peer) const {
  const auto& p = static_cast<const Peer&>(peer);
  return !p.ipc.load() || impl_->fallback.route(p.rank) != CudaIpcRoute::ipc;
}

SendResult CudaIpcChannel::post(RoutedPeer& peer, std::vector<std::byte> head, Message msg) {
  auto& d = *impl_;
  auto& p = static_cast<Peer&>(peer);
  Out o;
  o.head = std::move(head);
  std::vector<CudaIpcEvent> events;
  CudaIpcSlots slots;
  if (!stages_for(p)) {
    try {
      slots = d.export_tensors(msg, events);
    } catch (const std::exception& e) {
      // The message cannot leave, and the peer would miss it.
      d.fallback.refuse(p.rank, e.what());
      const ChannelError error{p.rank, p.name, std::string("exporting a cuda tensor: ") + e.what()};
      bool first = false;
      {
        std::lock_guard lock(p.mu);
        first = mark_failed_locked(p, error, false);
      }
      if (first) report(error, true, true);
      notify();
      return SendResult{SendStatus::target_stopped};
    }
  }
  bool kick = false;
  {
    std::lock_guard lock(p.mu);
    if (d.closing.load()) return SendResult{SendStatus::system_stopped};
    if (p.failed || p.said_goodbye) return SendResult{SendStatus::target_stopped};
    if (!slots.slots.empty()) {
      const std::uint64_t seq = p.outstanding.hold(msg, std::move(events));
      for (CudaIpcTensor& t : slots.tensors) t.seq = seq;
      o.pre = encode_cuda_ipc_slots(slots);
      d.ipc_sent += slots.slots.size();
    }
    o.msg = std::move(msg);
    p.queue.push_back(std::move(o));
    if (p.connected && !p.writing) kick = p.writing = true;
  }
  if (kick) asio::post(d.io, [&d, &p] { d.write_next(p); });
  return SendResult{};
}

void CudaIpcChannel::close(std::chrono::milliseconds timeout) {
  auto& d = *impl_;
  if (d.closed) return;
  stop_sending(timeout);
  d.closing.store(true);
  const auto live = [](Peer& p) { return p.connected && !p.failed && !p.ended; };
  std::unique_lock lock(state_mu_);
  // The copies this side runs, so that their acknowledgements go before the goodbye.
  (void)state_cv_.wait_for(lock, timeout, [&] {
    for (auto& p : d.peers) {
      std::lock_guard pl(p->mu);
      if (live(*p) && p->arriving > 0) return false;
    }
    return true;
  });
  for (auto& p : d.peers) {
    std::lock_guard pl(p->mu);
    if (!p->connected || p->failed) continue;
    Out o;
    o.head = encode_wire_goodbye();
    o.goodbye = true;
    p->queue.push_back(std::move(o));
    p->goodbye_queued = true;
    if (!p->writing) {
      p->writing = true;
      asio::post(d.io, [&d, q = p.get()] { d.write_next(*q); });
    }
  }
  // What is queued, and the acknowledgements of what was sent (the peer reads it until then).
  if (!state_cv_.wait_for(lock, timeout, [&] {
        for (auto& p : d.peers) {
          std::lock_guard pl(p->mu);
          if (!live(*p)) continue;
          if (!p->queue.empty() || p->writing) return false;
          if (!p->said_goodbye && p->outstanding.held() > 0) return false;
        }
        return true;
      })) {
    tandem::log::warn(
        "cuda-ipc data plane (rank {}): closing with messages queued or unacknowledged "
        "after {}",
        d.opt.rank, fmt::format("{:.1f} s", std::chrono::duration<double>(timeout).count()));
  }
  (void)state_cv_.wait_for(lock, d.opt.close_linger, [&] {
    for (auto& p : d.peers) {
      std::lock_guard pl(p->mu);
      if (live(*p) && !p->said_goodbye) return false;
    }
    return true;
  });
  lock.unlock();
  asio::post(d.io, [&d] { d.stop_io(); });
  d.guard.reset();
  if (d.thread.joinable()) d.thread.join();
  {
    std::lock_guard l(d.life->mu);
    d.life->io = nullptr;
  }
  for (auto& p : d.peers) p->outstanding.release_all();
  d.closed = true;
}

CudaIpcChannel::Stats CudaIpcChannel::stats() const {
  const auto& d = *impl_;
  Stats s;
  static_cast<ChannelStats&>(s) = routed_stats();
  s.ipc_tensors_sent = d.ipc_sent.load();
  s.ipc_tensors_received = d.ipc_received.load();
  s.acks_received = d.acks.load();
  return s;
}

bool CudaIpcChannel::serves_ipc(int peer_rank) const {
  const RoutedPeer* p = routed_peer_of_rank(peer_rank);
  if (p == nullptr) {
    throw std::out_of_range(fmt::format("CudaIpcChannel: no peer of rank {}", peer_rank));
  }
  return !stages_for(*p);
}

std::vector<CudaIpcRefusal> CudaIpcChannel::refusals() const {
  return impl_->fallback.refusals();
}

}  // namespace tandem::transport
