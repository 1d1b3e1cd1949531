#include "transport/rendezvous.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <asio/connect.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/host_name.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/read.hpp>
#include <asio/steady_timer.hpp>
#include <asio/write.hpp>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "runtime/log.hpp"

namespace tandem::transport {
namespace {

using Clock = std::chrono::steady_clock;
using asio::ip::tcp;

constexpr std::chrono::milliseconds kFirstRetry{50};
constexpr std::chrono::milliseconds kMaxRetry{1000};
// How long a closing connection waits for the peer to close its side, so the last frame (a
// refusal, a goodbye) is read rather than lost to a reset.
constexpr std::chrono::milliseconds kLinger{1000};
// Beyond a join's own timeout, how long its caller waits for the rendezvous thread to report.
constexpr std::chrono::milliseconds kJoinGrace{2000};
constexpr std::chrono::milliseconds kStopGrace{2000};
// Rank 0 keeps the newest refusals only, so that a flood of strangers cannot grow the list.
constexpr std::size_t kMaxRefusalsKept = 4096;

std::string secs(Clock::duration d) {
  return fmt::format("{:.1f} s", std::chrono::duration<double>(d).count());
}

void check_text(std::string_view what, std::string_view text) {
  if (text.empty()) throw std::invalid_argument(std::string(what) + " is empty");
  if (text.size() > kMaxTextField) {
    throw std::invalid_argument(fmt::format("{} '{}' is {} bytes, more than the limit of {}", what,
                                            printable(text), text.size(), kMaxTextField));
  }
  for (const char c : text) {
    if (c < 0x20 || c > 0x7e) {
      throw std::invalid_argument(
          fmt::format("{} '{}' holds a character that is not printable "
                      "ASCII",
                      what, printable(text)));
    }
  }
}

// One TCP connection with its frame reader and write queue; touched on the rendezvous thread
// only.
struct Conn {
  explicit Conn(asio::io_context& io) : socket(io), timer(io) {}
  tcp::socket socket;
  asio::steady_timer timer;  // hello deadline, then the linger of a graceful close
  std::array<std::byte, kFrameHeaderSize> header{};
  std::vector<std::byte> payload;
  std::array<std::byte, 256> drain{};
  std::deque<std::vector<std::byte>> out;
  bool writing = false;
  bool reading = false;  // a frame read is outstanding
  bool closing = false;  // close once `out` is written
  bool closed = false;
  int rank = -1;       // rank 0's side: -1 until its hello is accepted
  std::string remote;  // "127.0.0.1:40312"
  Clock::time_point last_seen = Clock::now();
  std::uint64_t seq = 0;  // rank 0's side: accept order, to drop the oldest stranger first
  // The join handshake (transport/job_proof.hpp).
  bool challenged = false;  // rank 0's side: its join request was answered
  bool admitted = false;    // a rank's side: rank 0 proved itself and the hello is sent
  std::uint32_t claimed_rank = 0;
  std::uint32_t claimed_world = 0;
  JobNonce client_nonce{};  // the joining rank's
  JobNonce server_nonce{};  // rank 0's, fresh for this connection
};

// Rank 0's view of what a rank last reported of its work.
struct Progress {
  std::uint64_t completed = 0;
  bool has_work = false;
  std::string waiting_for;
  Clock::time_point since = Clock::now();  // when `completed` last moved or the rank was idle
};

void note_progress(Progress& p, const RankProgress& now_reported) {
  if (!now_reported.has_work || !p.has_work || now_reported.completed != p.completed) {
    p.since = Clock::now();
  }
  p.completed = now_reported.completed;
  p.has_work = now_reported.has_work;
  p.waiting_for = now_reported.waiting_for;
}

// A name (not an address literal, not "localhost", which say what they mean) that resolves to
// a loopback address: the first such address, else empty.
std::string loopback_behind_name(asio::io_context& io, const std::string& host) {
  std::error_code ec;
  (void)asio::ip::make_address(host, ec);
  if (!ec || host == "localhost") return "";
  tcp::resolver r(io);
  const auto endpoints = r.resolve(host, "0", tcp::resolver::numeric_service, ec);
  if (ec) return "";
  for (const auto& e : endpoints) {
    if (e.endpoint().address().is_loopback()) return e.endpoint().address().to_string();
  }
  return "";
}

}  // namespace

struct Rendezvous::Impl {
  enum class Phase { kJoining, kJoined, kFailed };
  enum class MemberState { kAbsent, kLive, kDeparted, kLost };
  struct Member {
    std::shared_ptr<Conn> conn;
    MemberState state = MemberState::kAbsent;
    PeerInfo info;
    Progress progress;
  };
  struct Waiter {
    bool local = false;  // rank 0's own get() or take()
    std::weak_ptr<Conn> conn;
    std::uint64_t request = 0;
    bool take = false;
  };

  explicit Impl(RendezvousOptions o);

  bool server() const { return opt.rank == 0; }
  std::string master_address() const {
    return fmt::format("{}:{}", opt.master_host, server() ? bound_port : opt.master_port);
  }
  void check_caller(std::string_view call) const {
    if (std::this_thread::get_id() == io_thread_id.load()) {
      throw std::logic_error("Rendezvous::" + std::string(call) +
                             " called on the rendezvous thread (from on_lost?) would deadlock");
    }
  }
  void require_joined(std::string_view call) const {
    std::lock_guard lock(mu);
    if (shut_down) throw RendezvousError(fmt::format("{} after shutdown()", call));
    if (phase != Phase::kJoined) throw RendezvousError(fmt::format("{} before join()", call));
  }

  // --- connections (rendezvous thread) ---
  void read_frame(const std::shared_ptr<Conn>& c);
  void on_frame(const std::shared_ptr<Conn>& c, ControlMessage msg);
  void on_bad_frame(const std::shared_ptr<Conn>& c, const std::string& what);
  void conn_failed(const std::shared_ptr<Conn>& c, const std::string& reason);
  void send(const std::shared_ptr<Conn>& c, const ControlMessage& msg);
  void send_bytes(const std::shared_ptr<Conn>& c, std::vector<std::byte> bytes);
  void write_next(const std::shared_ptr<Conn>& c);
  void close_after_flush(const std::shared_ptr<Conn>& c);
  void graceful_close(const std::shared_ptr<Conn>& c);
  void drain(const std::shared_ptr<Conn>& c);
  static void close(const std::shared_ptr<Conn>& c);
  void tick();

  // --- rank 0 (rendezvous thread) ---
  void accept();
  void on_accepted(const std::shared_ptr<Conn>& c);
  void add_pending(const std::shared_ptr<Conn>& c);
  void note_refusal(const std::string& entry);
  void refuse(const std::shared_ptr<Conn>& c, const std::string& reason);
  void on_stranger_frame(const std::shared_ptr<Conn>& c, ControlMessage msg);
  void on_join_request(const std::shared_ptr<Conn>& c, const JoinRequest& j);
  void on_hello(const std::shared_ptr<Conn>& c, const Hello& h);
  std::string hello_problem(const Conn& c, const Hello& h);
  void on_member_frame(const std::shared_ptr<Conn>& c, ControlMessage msg);
  void send_table();
  void server_join_timeout();
  void on_barrier(int rank, const std::string& name);
  void kv_set(const std::string& key, std::vector<std::byte> value);
  void kv_get(Waiter w, const std::string& key);
  void kv_erase(std::map<std::string, std::vector<std::byte>>::iterator it);
  bool deliver(const Waiter& w, const std::vector<std::byte>& value);
  void declare_lost(int rank, const std::string& reason, bool tell_it = false);
  void check_stalls(Clock::time_point now);
  void declare_stalled(std::size_t rank, const std::string& reason);

  // --- other ranks (rendezvous thread) ---
  void start_join(std::chrono::milliseconds timeout);
  void connect();
  void retry_connect(std::string why);
  void on_connected(const std::shared_ptr<Conn>& c);
  void on_challenge(const std::shared_ptr<Conn>& c, const Challenge& ch);
  void on_master_frame(const std::shared_ptr<Conn>& c, ControlMessage msg);
  std::vector<std::byte> fetch(std::string_view key, std::chrono::milliseconds timeout, bool take);
  void fail_join(const std::string& why);
  void log_waiting();

  // --- either (rendezvous thread) ---
  void record_lost(LostRank l);
  void stop_io(bool graceful);
  RankProgress sample_progress();

  RendezvousOptions opt;
  PeerInfo self;
  asio::io_context io;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard{
      asio::make_work_guard(io)};
  tcp::acceptor acceptor{io};
  tcp::resolver resolver{io};
  asio::steady_timer tick_timer{io};
  asio::steady_timer join_timer{io};
  asio::steady_timer retry_timer{io};
  asio::steady_timer wait_log_timer{io};
  std::uint16_t bound_port = 0;
  std::thread thread;
  std::atomic<std::thread::id> io_thread_id{};

  // Rendezvous thread only.
  bool stopping = false;
  std::vector<Member> members;  // rank 0: by rank; [0] is rank 0 itself
  // Rank 0: the connections that have not completed the handshake, by accept order (oldest
  // first), and the next order number.
  std::map<std::uint64_t, std::shared_ptr<Conn>> pending;
  std::uint64_t next_seq = 0;
  bool table_sent = false;
  bool join_given_up = false;
  std::map<std::string, std::set<int>> arrivals;
  std::map<std::string, std::vector<std::byte>> kv;
  std::map<std::string, std::vector<Waiter>> waiters;
  std::shared_ptr<Conn> master;  // other ranks: the connection to rank 0
  bool joining = false;
  bool leaving = false;
  std::chrono::milliseconds backoff = kFirstRetry;
  std::string last_connect_error = "no attempt yet";
  std::chrono::milliseconds join_timeout{0};
  Clock::time_point join_started = Clock::now();
  Clock::time_point tick_due = Clock::now();
  std::atomic<std::size_t> kv_bytes{0};  // rank 0: keys and values in `kv`

  // Shared with callers, under mu.
  mutable std::mutex mu;
  std::condition_variable cv;
  Phase phase = Phase::kJoining;
  std::string failure;
  bool join_called = false;
  std::vector<PeerInfo> peers;
  JobNonce job{};  // rank 0: drawn at construction; others: from rank 0's proven challenge
  bool job_known = false;
  std::vector<bool> registered;
  std::vector<LostRank> lost_ranks;
  std::string broken;  // set by the first loss (or rank 0's close); blocking calls throw it
  std::deque<std::string> refusals;
  std::map<std::string, std::uint64_t> released;
  std::map<std::uint64_t, std::optional<std::vector<std::byte>>> gets;
  std::uint64_t next_request = 1;
  int active_clients = 0;  // rank 0: registered and neither departed nor lost
  bool left = false;       // other ranks: rank 0 acknowledged the goodbye (or is gone)
  bool shut_down = false;
  bool io_exited = false;
};

// ---------------------------------------------------------------------------------------------
// Construction

Rendezvous::Impl::Impl(RendezvousOptions o) : opt(std::move(o)) {
  if (opt.world_size < 1 || static_cast<std::uint32_t>(opt.world_size) > kMaxWorldSize) {
    throw std::invalid_argument(
        fmt::format("rendezvous: world size {} is outside 1..{}", opt.world_size, kMaxWorldSize));
  }
  if (opt.rank < 0 || opt.rank >= opt.world_size) {
    throw std::invalid_argument(
        fmt::format("rendezvous: rank {} is outside 0..{}", opt.rank, opt.world_size - 1));
  }
  if (opt.heartbeat_interval.count() <= 0 || opt.heartbeat_timeout <= opt.heartbeat_interval) {
    throw std::invalid_argument(
        fmt::format("rendezvous: the heartbeat timeout ({} ms) must exceed the interval ({} ms)",
                    opt.heartbeat_timeout.count(), opt.heartbeat_interval.count()));
  }
  if (opt.world_size > 1) check_text("rendezvous master host", opt.master_host);
  if (opt.host_name.empty()) opt.host_name = asio::ip::host_name();
  check_text("rendezvous host name", opt.host_name);
  if (!opt.devices.empty()) check_text("rendezvous devices", opt.devices);
  if (opt.blob.size() > kMaxBlobField) {
    throw std::invalid_argument(fmt::format("rendezvous: blob of {} bytes exceeds the limit of {}",
                                            opt.blob.size(), kMaxBlobField));
  }
  if (opt.max_pending_connections == 0 || opt.hello_timeout.count() <= 0 ||
      opt.stall_timeout.count() < 0 || opt.join_log_interval.count() <= 0) {
    throw std::invalid_argument(fmt::format(
        "rendezvous: max_pending_connections ({}), hello_timeout ({} ms) and join_log_interval "
        "({} ms) must be positive, stall_timeout ({} ms) not negative",
        opt.max_pending_connections, opt.hello_timeout.count(), opt.join_log_interval.count(),
        opt.stall_timeout.count()));
  }
  self = PeerInfo{static_cast<std::uint32_t>(opt.rank), opt.host_name, opt.blob, opt.devices};

  if (server()) {
    job = fresh_nonce();
    job_known = true;
    members.resize(static_cast<std::size_t>(opt.world_size));
    members[0].state = MemberState::kLive;
    members[0].info = self;
    registered.assign(static_cast<std::size_t>(opt.world_size), false);
    registered[0] = true;
    if (opt.world_size == 1) {
      peers = {self};
      phase = Phase::kJoined;
      table_sent = true;
    } else {
      const std::string& host = opt.bind_host.empty() ? opt.master_host : opt.bind_host;
      try {
        tcp::resolver r(io);
        const auto endpoints = r.resolve(host, std::to_string(opt.master_port),
                                         tcp::resolver::passive | tcp::resolver::numeric_service);
        std::error_code ec = asio::error::host_not_found;
        for (const auto& e : endpoints) {
          acceptor.close();
          acceptor.open(e.endpoint().protocol(), ec);
          if (ec) continue;
          acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
          acceptor.bind(e.endpoint(), ec);
          if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
          if (!ec) break;
        }
        if (ec) throw std::system_error(ec);
        bound_port = acceptor.local_endpoint().port();
      } catch (const std::system_error& e) {
        throw RendezvousError(fmt::format("rendezvous: rank 0 cannot listen on {}:{}: {}", host,
                                          opt.master_port, e.code().message()));
      }
      const std::string loopback = loopback_behind_name(io, opt.master_host);
      if (!loopback.empty()) {
        tandem::log::warn(
            "rendezvous: rank 0's master host '{}' is a name that resolves to the loopback "
            "address {} here, so ranks on other hosts cannot reach it; set MASTER_ADDR (or "
            "TANDEM_MASTER) to this host's network address",
            printable(opt.master_host), loopback);
      }
    }
  }
}

Rendezvous::Rendezvous(RendezvousOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {
  // The library's logger is made on first use; made here, before this object's threads log,
  // rather than by two of them at once.
  (void)tandem::log::logger();
  Impl* s = impl_.get();
  s->thread = std::thread([s] {
    s->io_thread_id = std::this_thread::get_id();
    // A handler that throws (allocation failure) is logged and the loop goes on, so that the
    // callers' timeouts and the peers' heartbeats still work.
    for (;;) {
      try {
        s->io.run();
        break;
      } catch (const std::exception& e) {
        tandem::log::error("rendezvous (rank {}): {}", s->opt.rank, e.what());
      }
    }
    std::lock_guard lock(s->mu);
    s->io_exited = true;
    s->cv.notify_all();
  });
  if (s->server() && s->opt.world_size > 1) {
    asio::post(s->io, [s] {
      s->accept();
      s->tick();
    });
  }
}

Rendezvous::~Rendezvous() {
  bool orderly = false;
  {
    std::lock_guard lock(impl_->mu);
    orderly = impl_->shut_down;
  }
  // Not shut down: stop the loop where it is; the sockets close with the Impl, and the peers
  // see a connection closed without goodbye, as after a crash.
  if (!orderly) impl_->io.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

int Rendezvous::rank() const {
  return impl_->opt.rank;
}
int Rendezvous::world_size() const {
  return impl_->opt.world_size;
}
std::uint16_t Rendezvous::port() const {
  return impl_->server() ? impl_->bound_port : impl_->opt.master_port;
}

// ---------------------------------------------------------------------------------------------
// Connections

void Rendezvous::Impl::read_frame(const std::shared_ptr<Conn>& c) {
  c->reading = true;
  asio::async_read(
      c->socket, asio::buffer(c->header), [this, c](std::error_code ec, std::size_t n) {
        if (c->closed) return;
        if (c->closing) {  // refused or said goodbye meanwhile: the frame no longer matters
          c->reading = false;
          if (ec) {
            close(c);
          } else {
            drain(c);
          }
          return;
        }
        if (ec) {
          c->reading = false;
          conn_failed(c, ec == asio::error::eof && n == 0 ? "connection closed"
                         : ec == asio::error::eof
                             ? fmt::format("connection closed mid-frame ({} of {} header bytes)", n,
                                           kFrameHeaderSize)
                             : ec.message());
          return;
        }
        FrameHeader h;
        try {
          // Before its hello a connection is a stranger: a small frame is all it may send.
          h = decode_header(c->header,
                            server() && c->rank < 0 ? kMaxHelloPayload : kMaxFramePayload);
        } catch (const FrameError& e) {
          c->reading = false;
          on_bad_frame(c, e.what());
          return;
        }
        c->payload.assign(h.payload_size, std::byte{0});
        asio::async_read(
            c->socket, asio::buffer(c->payload), [this, c, h](std::error_code ec2, std::size_t m) {
              if (c->closed) return;
              c->reading = false;
              if (c->closing) {
                if (ec2) {
                  close(c);
                } else {
                  drain(c);
                }
                return;
              }
              if (ec2) {
                conn_failed(c, ec2 == asio::error::eof
                                   ? fmt::format("connection closed mid-frame ({} of {} bytes "
                                                 "of a '{}' payload)",
                                                 m, h.payload_size, frame_type_name(h.type))
                                   : ec2.message());
                return;
              }
              ControlMessage msg;
              try {
                msg = decode_payload(h.type, c->payload);
              } catch (const FrameError& e) {
                on_bad_frame(c, e.what());
                return;
              }
              if (c->payload.capacity() > kMaxHelloPayload) c->payload = {};
              c->last_seen = Clock::now();
              on_frame(c, std::move(msg));
              if (!c->closed && !c->closing) read_frame(c);
            });
      });
}

void Rendezvous::Impl::on_frame(const std::shared_ptr<Conn>& c, ControlMessage msg) {
  if (!server()) {
    on_master_frame(c, std::move(msg));
  } else if (c->rank < 0) {
    on_stranger_frame(c, std::move(msg));
  } else {
    on_member_frame(c, std::move(msg));
  }
}

void Rendezvous::Impl::on_member_frame(const std::shared_ptr<Conn>& c, ControlMessage msg) {
  const int rank = c->rank;
  Member& m = members[static_cast<std::size_t>(rank)];
  if (m.state != MemberState::kLive) return;
  if (auto* enter = std::get_if<BarrierEnter>(&msg)) {
    on_barrier(rank, enter->name);
  } else if (auto* set = std::get_if<KvSet>(&msg)) {
    kv_set(set->key, std::move(set->value));
  } else if (auto* get = std::get_if<KvGet>(&msg)) {
    kv_get(Waiter{false, c, get->request, false}, get->key);
  } else if (auto* take = std::get_if<KvTake>(&msg)) {
    kv_get(Waiter{false, c, take->request, true}, take->key);
  } else if (auto* beat = std::get_if<Heartbeat>(&msg)) {
    note_progress(m.progress, RankProgress{beat->completed, beat->has_work, beat->waiting_for});
  } else if (std::holds_alternative<Goodbye>(msg)) {
    m.state = MemberState::kDeparted;
    send(c, Goodbye{});
    close_after_flush(c);
    tandem::log::debug("rendezvous: rank {} left", rank);
    std::lock_guard lock(mu);
    --active_clients;
    cv.notify_all();
  } else {
    conn_failed(c, fmt::format("protocol error: rank {} sent a '{}' frame", rank,
                               frame_type_name(frame_type(msg))));
  }
}

void Rendezvous::Impl::on_bad_frame(const std::shared_ptr<Conn>& c, const std::string& what) {
  // A stranger is refused with the reason (a Tandem of another version can print it); a member
  // that sends garbage is treated as lost, since nothing it sends can be trusted any more.
  if (server() && c->rank < 0) {
    refuse(c, what);
  } else if (!server() && joining) {
    // Whatever listens there does not speak this protocol (or this version of it).
    close(c);
    fail_join(
        fmt::format("rank 0 at {} sent a frame this rank cannot read: {}", master_address(), what));
  } else {
    conn_failed(c, "malformed frame: " + what);
  }
}

void Rendezvous::Impl::conn_failed(const std::shared_ptr<Conn>& c, const std::string& reason) {
  if (c->closed) return;
  close(c);
  if (server()) {
    if (c->rank < 0) {
      pending.erase(c->seq);
      const std::string entry = fmt::format("from {}: {}", c->remote, reason);
      tandem::log::warn("rendezvous: rank 0 dropped a connection {}", entry);
      note_refusal(entry);
    } else {
      declare_lost(c->rank,
                   reason == "connection closed" ? "connection closed without goodbye" : reason);
    }
    return;
  }
  if (c != master) return;
  if (leaving) {
    std::lock_guard lock(mu);
    left = true;
    cv.notify_all();
    return;
  }
  if (joining) {
    // Before the peer table nothing is lost yet: rank 0 may have dropped this connection as
    // one of too many strangers, or not be up; connect again until the join's deadline.
    if (c->admitted) {
      tandem::log::warn(
          "rendezvous (rank {}): the connection to rank 0 at {} closed during the join "
          "({}); connecting again",
          opt.rank, master_address(), reason);
    }
    master.reset();
    retry_connect(reason);
    return;
  }
  const std::string why =
      reason == "connection closed" ? "connection closed without goodbye" : reason;
  std::string host;
  {
    std::lock_guard lock(mu);
    host = peers.empty() ? opt.master_host : peers[0].host;
  }
  record_lost(LostRank{0, host, why});
}

void Rendezvous::Impl::send(const std::shared_ptr<Conn>& c, const ControlMessage& msg) {
  send_bytes(c, encode_frame(msg));
}

void Rendezvous::Impl::send_bytes(const std::shared_ptr<Conn>& c, std::vector<std::byte> bytes) {
  if (c->closed || c->closing) return;
  c->out.push_back(std::move(bytes));
  if (!c->writing) write_next(c);
}

void Rendezvous::Impl::write_next(const std::shared_ptr<Conn>& c) {
  c->writing = true;
  asio::async_write(c->socket, asio::buffer(c->out.front()),
                    [this, c](std::error_code ec, std::size_t) {
                      c->writing = false;
                      if (c->closed) return;
                      if (ec) {
                        conn_failed(c, "write failed: " + ec.message());
                        return;
                      }
                      c->out.pop_front();
                      if (!c->out.empty()) {
                        write_next(c);
                      } else if (c->closing) {
                        graceful_close(c);
                      }
                    });
}

void Rendezvous::Impl::close_after_flush(const std::shared_ptr<Conn>& c) {
  if (c->closed || c->closing) return;
  c->closing = true;
  if (!c->writing) graceful_close(c);
}

void Rendezvous::Impl::graceful_close(const std::shared_ptr<Conn>& c) {
  // Half-close and read until the peer closes too: closing with unread bytes would reset the
  // connection, and the peer could lose the frame just written.
  std::error_code ignored;
  c->socket.shutdown(tcp::socket::shutdown_send, ignored);
  c->timer.cancel();
  c->timer.expires_after(kLinger);
  c->timer.async_wait([c](std::error_code ec) {
    if (!ec) close(c);
  });
  // An outstanding frame read turns into the drain when it completes (one read at a time).
  if (!c->reading) drain(c);
}

void Rendezvous::Impl::drain(const std::shared_ptr<Conn>& c) {
  c->socket.async_read_some(asio::buffer(c->drain), [this, c](std::error_code ec, std::size_t) {
    if (c->closed) return;
    if (ec) {
      close(c);
      return;
    }
    drain(c);
  });
}

void Rendezvous::Impl::close(const std::shared_ptr<Conn>& c) {
  if (c->closed) return;
  c->closed = true;
  std::error_code ignored;
  c->timer.cancel();
  c->socket.shutdown(tcp::socket::shutdown_both, ignored);
  c->socket.close(ignored);
}

void Rendezvous::Impl::tick() {
  if (stopping) return;
  const Clock::time_point now = Clock::now();
  // A tick that comes late means this thread was held up (a loaded machine, a paused VM): the
  // peers' frames may be waiting unread in the sockets, so judge silence on the next tick,
  // after they were read, rather than declare live peers lost.
  const bool judge = now - tick_due <= opt.heartbeat_interval;
  if (server()) {
    if (opt.progress) note_progress(members[0].progress, sample_progress());
    if (judge) check_stalls(now);
    for (std::size_t r = 1; r < members.size(); ++r) {
      Member& m = members[r];
      if (m.state != MemberState::kLive) continue;
      if (judge && now - m.conn->last_seen > opt.heartbeat_timeout) {
        declare_lost(static_cast<int>(r), "no heartbeat for " + secs(now - m.conn->last_seen));
      } else {
        send(m.conn, Heartbeat{});
      }
    }
  } else if (master && master->admitted && !master->closed && !leaving) {
    if (judge && now - master->last_seen > opt.heartbeat_timeout) {
      conn_failed(master, "no heartbeat for " + secs(now - master->last_seen));
    } else {
      const RankProgress p = sample_progress();
      send(master, Heartbeat{p.completed, p.has_work, printable(p.waiting_for, kMaxTextField)});
    }
  }
  tick_due = now + opt.heartbeat_interval;
  tick_timer.expires_at(tick_due);
  tick_timer.async_wait([this](std::error_code ec) {
    if (!ec) tick();
  });
}

// ---------------------------------------------------------------------------------------------
// Rank 0

void Rendezvous::Impl::accept() {
  auto c = std::make_shared<Conn>(io);
  acceptor.async_accept(c->socket, [this, c](std::error_code ec) {
    if (stopping || ec == asio::error::operation_aborted) return;
    if (ec) {
      // Out of descriptors, say: wait a little rather than spin on the error.
      tandem::log::warn("rendezvous: rank 0 could not accept a connection: {}", ec.message());
      retry_timer.expires_after(std::chrono::milliseconds(100));
      retry_timer.async_wait([this](std::error_code e) {
        if (!e) accept();
      });
      return;
    }
    on_accepted(c);
    accept();
  });
}

void Rendezvous::Impl::on_accepted(const std::shared_ptr<Conn>& c) {
  std::error_code ec;
  const tcp::endpoint remote = c->socket.remote_endpoint(ec);
  c->remote =
      ec ? "an unknown address" : fmt::format("{}:{}", remote.address().to_string(), remote.port());
  c->socket.set_option(tcp::no_delay(true), ec);
  add_pending(c);
  c->timer.expires_after(opt.hello_timeout);
  c->timer.async_wait([this, c](std::error_code e) {
    if (!e && !c->closed && !c->closing && c->rank < 0) {
      refuse(c, "no hello within " + secs(opt.hello_timeout));
    }
  });
  read_frame(c);
}

void Rendezvous::Impl::add_pending(const std::shared_ptr<Conn>& c) {
  c->seq = next_seq++;
  pending.emplace(c->seq, c);
  while (pending.size() > opt.max_pending_connections) {
    const std::shared_ptr<Conn> oldest = pending.begin()->second;
    pending.erase(pending.begin());
    const std::string entry = fmt::format(
        "from {}: dropped, the oldest of more than {} connections that had not "
        "completed the join",
        oldest->remote, opt.max_pending_connections);
    tandem::log::warn("rendezvous: rank 0 {}", entry);
    note_refusal(entry);
    close(oldest);
  }
}

void Rendezvous::Impl::note_refusal(const std::string& entry) {
  std::lock_guard lock(mu);
  refusals.push_back(entry);
  if (refusals.size() > kMaxRefusalsKept) refusals.pop_front();
}

void Rendezvous::Impl::refuse(const std::shared_ptr<Conn>& c, const std::string& reason) {
  const std::string entry = fmt::format("from {}: {}", c->remote, reason);
  tandem::log::warn("rendezvous: rank 0 refused a connection {}", entry);
  note_refusal(entry);
  pending.erase(c->seq);
  send(c, Refused{printable(reason, kMaxTextField)});
  close_after_flush(c);
}

void Rendezvous::Impl::on_stranger_frame(const std::shared_ptr<Conn>& c, ControlMessage msg) {
  if (!c->challenged) {
    if (const auto* request = std::get_if<JoinRequest>(&msg)) {
      on_join_request(c, *request);
    } else {
      refuse(c, fmt::format("expected a join request first, got a '{}' frame",
                            frame_type_name(frame_type(msg))));
    }
  } else if (const auto* hello = std::get_if<Hello>(&msg)) {
    on_hello(c, *hello);
  } else if (const auto* refused = std::get_if<Refused>(&msg)) {
    // The rank could not verify rank 0's proof; it says so and goes.
    const std::string entry = fmt::format("from {}: rank {} refused rank 0: {}", c->remote,
                                          c->claimed_rank, printable(refused->reason, 256));
    tandem::log::warn("rendezvous: rank 0 was refused by a connection {}", entry);
    note_refusal(entry);
    pending.erase(c->seq);
    close_after_flush(c);
  } else {
    refuse(c, fmt::format("expected a hello after the challenge, got a '{}' frame",
                          frame_type_name(frame_type(msg))));
  }
}

void Rendezvous::Impl::on_join_request(const std::shared_ptr<Conn>& c, const JoinRequest& j) {
  c->challenged = true;
  c->claimed_rank = j.rank;
  c->claimed_world = j.world_size;
  c->client_nonce = j.client_nonce;
  c->server_nonce = fresh_nonce();
  const ProofContext admit{
      ProofPurpose::kControlAdmit, job, 0, j.rank, 0, c->server_nonce, c->client_nonce};
  send(c, Challenge{c->server_nonce, job, make_proof(opt.job_token, admit)});
}

void Rendezvous::Impl::on_hello(const std::shared_ptr<Conn>& c, const Hello& h) {
  // The proof first: a process that cannot make it learns nothing else about this job, and
  // nothing it wrote in its hello is looked at.
  const ProofContext join{
      ProofPurpose::kControlJoin, job, c->claimed_rank, 0, 0, c->client_nonce, c->server_nonce};
  if (!check_proof(opt.job_token, join, h.proof)) {
    refuse(c, fmt::format("rank {} did not prove it holds the job token (its token differs from "
                          "rank 0's, or one side has none, or the hello is a replay)",
                          c->claimed_rank));
    return;
  }
  if (const std::string problem = hello_problem(*c, h); !problem.empty()) {
    refuse(c, problem);
    return;
  }
  const auto r = static_cast<std::size_t>(h.self.rank);
  Member& m = members[r];
  pending.erase(c->seq);
  c->timer.cancel();
  c->rank = static_cast<int>(r);
  m.conn = c;
  m.state = MemberState::kLive;
  m.info = h.self;
  m.progress = Progress{};
  tandem::log::debug("rendezvous: rank {} on '{}' registered from {}", r, h.self.host, c->remote);
  {
    std::lock_guard lock(mu);
    registered[r] = true;
    ++active_clients;
  }
  if (std::all_of(members.begin(), members.end(),
                  [](const Member& x) { return x.state == MemberState::kLive; })) {
    send_table();
  }
}

std::string Rendezvous::Impl::hello_problem(const Conn& c, const Hello& h) {
  const auto world = static_cast<std::uint32_t>(opt.world_size);
  const std::string who = fmt::format("rank {} on '{}'", h.self.rank, h.self.host);
  if (h.self.rank != c.claimed_rank) {
    return fmt::format("{}: the hello names rank {}, its join request rank {}", who, h.self.rank,
                       c.claimed_rank);
  }
  if (c.claimed_world != world) {
    return fmt::format("{} says the world has {} ranks, rank 0 says {}", who, c.claimed_world,
                       world);
  }
  if (h.self.rank == 0 || h.self.rank >= world) {
    return fmt::format("{}: rank {} is outside 1..{} (rank 0 is the listener)", who, h.self.rank,
                       world - 1);
  }
  bool failed = false;
  {
    std::lock_guard lock(mu);
    failed = phase == Phase::kFailed;
  }
  if (join_given_up || failed) return who + ": the job's rendezvous already failed on rank 0";
  const Member& m = members[h.self.rank];
  if (m.state != MemberState::kAbsent) {
    return fmt::format("{}: rank {} has already registered from {} ('{}')", who, h.self.rank,
                       m.conn->remote, m.info.host);
  }
  if (table_sent) return who + ": the job has already started";  // a guard: ranks are unique
  return "";
}

void Rendezvous::Impl::send_table() {
  PeerTable table;
  for (const Member& m : members) table.peers.push_back(m.info);
  std::vector<std::byte> bytes;
  try {
    bytes = encode_frame(table);
  } catch (const FrameError& e) {
    join_given_up = true;
    fail_join(fmt::format("rank 0 cannot send the peer table: {}", e.what()));
    return;
  }
  table_sent = true;
  join_timer.cancel();
  for (std::size_t r = 1; r < members.size(); ++r) send_bytes(members[r].conn, bytes);
  std::lock_guard lock(mu);
  peers = std::move(table.peers);
  if (phase == Phase::kJoining) phase = Phase::kJoined;
  cv.notify_all();
}

void Rendezvous::Impl::server_join_timeout() {
  if (table_sent || join_given_up) return;
  std::string missing;
  for (std::size_t r = 1; r < members.size(); ++r) {
    if (members[r].state == MemberState::kAbsent) {
      missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    }
  }
  join_given_up = true;
  const std::string why =
      fmt::format("join timed out on rank 0 (listening on {}): rank(s) {} never registered",
                  master_address(), missing.empty() ? "none" : missing);
  // The ranks that did register hear why instead of waiting for their own timeouts.
  for (std::size_t r = 1; r < members.size(); ++r) {
    Member& m = members[r];
    if (m.state != MemberState::kLive) continue;
    m.state = MemberState::kDeparted;
    send(m.conn, Refused{why});
    close_after_flush(m.conn);
    std::lock_guard lock(mu);
    --active_clients;
  }
  fail_join(why);
}

void Rendezvous::Impl::on_barrier(int rank, const std::string& name) {
  std::set<int>& in = arrivals[name];
  in.insert(rank);
  if (in.size() < members.size()) return;
  arrivals.erase(name);
  for (std::size_t r = 1; r < members.size(); ++r) {
    if (members[r].state == MemberState::kLive) send(members[r].conn, BarrierRelease{name});
  }
  std::lock_guard lock(mu);
  ++released[name];
  cv.notify_all();
}

void Rendezvous::Impl::kv_set(const std::string& key, std::vector<std::byte> value) {
  auto [it, inserted] = kv.try_emplace(key);
  if (inserted) {
    kv_bytes += key.size();
  } else {
    kv_bytes -= it->second.size();
  }
  it->second = std::move(value);
  kv_bytes += it->second.size();
  const auto w = waiters.find(key);
  if (w == waiters.end()) return;
  std::vector<Waiter> queue = std::move(w->second);
  waiters.erase(w);
  // In the order they asked: every get up to the first take that is delivered, which removes
  // the key; the requests after it wait for the next value.
  std::size_t next = 0;
  while (next < queue.size()) {
    const Waiter& x = queue[next++];
    if (deliver(x, it->second) && x.take) {
      kv_erase(it);
      break;
    }
  }
  if (next < queue.size())
    waiters[key].assign(queue.begin() + static_cast<std::ptrdiff_t>(next), queue.end());
}

void Rendezvous::Impl::kv_get(Waiter w, const std::string& key) {
  const auto it = kv.find(key);
  if (it == kv.end()) {
    waiters[key].push_back(std::move(w));
  } else if (deliver(w, it->second) && w.take) {
    kv_erase(it);
  }
}

void Rendezvous::Impl::kv_erase(std::map<std::string, std::vector<std::byte>>::iterator it) {
  kv_bytes -= it->first.size() + it->second.size();
  kv.erase(it);
}

// False when the asker is gone (a timed-out local call, a closed connection): a take then
// leaves the value for the next one.
bool Rendezvous::Impl::deliver(const Waiter& w, const std::vector<std::byte>& value) {
  if (w.local) {
    std::lock_guard lock(mu);
    const auto it = gets.find(w.request);
    if (it == gets.end()) return false;  // the caller timed out already
    it->second = value;
    cv.notify_all();
    return true;
  }
  const std::shared_ptr<Conn> c = w.conn.lock();
  if (!c || c->closed || c->closing) return false;
  send(c, KvValue{w.request, value});
  return true;
}

void Rendezvous::Impl::declare_lost(int rank, const std::string& reason, bool tell_it) {
  Member& m = members[static_cast<std::size_t>(rank)];
  if (m.state != MemberState::kLive) return;
  m.state = MemberState::kLost;
  const RankLost note{static_cast<std::uint32_t>(rank), m.info.host,
                      printable(reason, kMaxTextField)};
  if (tell_it) {  // alive but of no use (stalled): it hears why before its connection closes
    send(m.conn, note);
    close_after_flush(m.conn);
  } else {
    close(m.conn);
  }
  for (std::size_t r = 1; r < members.size(); ++r) {
    if (members[r].state == MemberState::kLive) send(members[r].conn, note);
  }
  {
    std::lock_guard lock(mu);
    --active_clients;
  }
  record_lost(LostRank{rank, m.info.host, reason});
}

void Rendezvous::Impl::check_stalls(Clock::time_point now) {
  if (opt.stall_timeout.count() == 0 || !table_sent) return;
  for (std::size_t r = 0; r < members.size(); ++r) {
    const Member& m = members[r];
    if (m.state != MemberState::kLive || !m.progress.has_work) continue;
    if (now - m.progress.since < opt.stall_timeout) continue;
    const std::string& what = m.progress.waiting_for;
    declare_stalled(
        r, fmt::format("stalled: no progress for {} with work waiting{}",
                       secs(now - m.progress.since), what.empty() ? "" : " (" + what + ")"));
  }
}

void Rendezvous::Impl::declare_stalled(std::size_t rank, const std::string& reason) {
  if (rank != 0) {
    declare_lost(static_cast<int>(rank), reason, true);
    return;
  }
  // Rank 0 itself: it stays the listener, but the job ends as for any lost rank.
  Member& m = members[0];
  if (m.state != MemberState::kLive) return;
  m.state = MemberState::kLost;
  const RankLost note{0, m.info.host, printable(reason, kMaxTextField)};
  for (std::size_t r = 1; r < members.size(); ++r) {
    if (members[r].state == MemberState::kLive) send(members[r].conn, note);
  }
  record_lost(LostRank{0, m.info.host, reason});
}

// ---------------------------------------------------------------------------------------------
// Other ranks

void Rendezvous::Impl::start_join(std::chrono::milliseconds timeout) {
  join_timeout = timeout;
  join_timer.expires_after(timeout);
  if (server()) {
    join_timer.async_wait([this](std::error_code ec) {
      if (!ec) server_join_timeout();
    });
    return;
  }
  joining = true;
  join_started = Clock::now();
  join_timer.async_wait([this](std::error_code ec) {
    if (ec || !joining) return;
    fail_join(master && master->admitted
                  ? fmt::format("join timed out after {}: registered with rank 0 at {}, which "
                                "has not sent the peer table (are all ranks started?)",
                                secs(join_timeout), master_address())
              : master ? fmt::format("join timed out after {}: connected to {}, which has not "
                                     "answered the join request",
                                     secs(join_timeout), master_address())
                       : fmt::format("join timed out after {}: rank 0 at {} not reachable ({})",
                                     secs(join_timeout), master_address(), last_connect_error));
  });
  wait_log_timer.expires_after(opt.join_log_interval);
  wait_log_timer.async_wait([this](std::error_code ec) {
    if (!ec) log_waiting();
  });
  connect();
  tick();
}

void Rendezvous::Impl::log_waiting() {
  if (!joining || stopping) return;
  const auto waited =
      std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - join_started).count();
  tandem::log::info("rendezvous (rank {}): waiting for rank 0 at {} ({} s): {}", opt.rank,
                    master_address(), waited,
                    master && master->admitted ? "registered, waiting for the other ranks to join"
                    : master                   ? "connected, waiting for its answer"
                                               : "not reachable yet (" + last_connect_error + ")");
  wait_log_timer.expires_after(opt.join_log_interval);
  wait_log_timer.async_wait([this](std::error_code ec) {
    if (!ec) log_waiting();
  });
}

void Rendezvous::Impl::connect() {
  if (stopping || !joining) return;
  auto c = std::make_shared<Conn>(io);
  resolver.async_resolve(
      opt.master_host, std::to_string(opt.master_port), tcp::resolver::numeric_service,
      [this, c](std::error_code ec, const tcp::resolver::results_type& endpoints) {
        if (stopping || !joining) return;
        if (ec) {
          retry_connect(fmt::format("cannot resolve '{}': {}", opt.master_host, ec.message()));
          return;
        }
        asio::async_connect(c->socket, endpoints,
                            [this, c](std::error_code e, const tcp::endpoint&) {
                              if (stopping || !joining) return;
                              if (e) {
                                retry_connect(e.message());
                                return;
                              }
                              on_connected(c);
                            });
      });
}

void Rendezvous::Impl::retry_connect(std::string why) {
  last_connect_error = std::move(why);
  retry_timer.expires_after(backoff);
  backoff = std::min(backoff * 2, kMaxRetry);
  retry_timer.async_wait([this](std::error_code ec) {
    if (!ec) connect();
  });
}

void Rendezvous::Impl::on_connected(const std::shared_ptr<Conn>& c) {
  std::error_code ec;
  c->socket.set_option(tcp::no_delay(true), ec);
  c->remote = master_address();
  c->rank = 0;
  c->last_seen = Clock::now();
  c->client_nonce = fresh_nonce();
  master = c;
  // Who this rank claims to be and a fresh nonce; nothing else before rank 0 proves itself.
  send(c, JoinRequest{static_cast<std::uint32_t>(opt.rank),
                      static_cast<std::uint32_t>(opt.world_size), c->client_nonce});
  read_frame(c);
}

void Rendezvous::Impl::on_challenge(const std::shared_ptr<Conn>& c, const Challenge& ch) {
  const auto me = static_cast<std::uint32_t>(opt.rank);
  const ProofContext admit{
      ProofPurpose::kControlAdmit, ch.job, 0, me, 0, ch.server_nonce, c->client_nonce};
  if (!check_proof(opt.job_token, admit, ch.proof)) {
    // Not this job's rank 0: it hears that it was refused (so that a real rank 0 of another
    // job logs why), never this rank's registration.
    send(c, Refused{fmt::format("rank {} could not verify rank 0's proof of the job token (the "
                                "tokens differ, or one side has none)",
                                opt.rank)});
    close_after_flush(c);
    master.reset();
    fail_join(
        fmt::format("rank 0 at {} could not prove that it holds this job's token (another "
                    "job's rank 0, a different TANDEM_JOB_TOKEN, or a token on one side "
                    "only): rank {} does not register with it",
                    master_address(), opt.rank));
    return;
  }
  c->admitted = true;
  c->server_nonce = ch.server_nonce;
  {
    std::lock_guard lock(mu);
    job = ch.job;
  }
  const ProofContext join{
      ProofPurpose::kControlJoin, ch.job, me, 0, 0, c->client_nonce, ch.server_nonce};
  send(c, Hello{self, make_proof(opt.job_token, join)});
}

void Rendezvous::Impl::on_master_frame(const std::shared_ptr<Conn>& c, ControlMessage msg) {
  if (!c->admitted) {
    if (auto* ch = std::get_if<Challenge>(&msg); ch && joining) {
      on_challenge(c, *ch);
      return;
    }
    if (!std::holds_alternative<Refused>(msg)) {
      close(c);
      fail_join(fmt::format("rank 0 at {} sent a '{}' frame instead of its challenge",
                            master_address(), frame_type_name(frame_type(msg))));
      return;
    }
  }
  if (auto* table = std::get_if<PeerTable>(&msg)) {
    const auto r = static_cast<std::size_t>(opt.rank);
    if (!joining || table->peers.size() != static_cast<std::size_t>(opt.world_size) ||
        table->peers[r] != self) {
      conn_failed(c, fmt::format("rank 0 sent a peer table of {} ranks that does not match this "
                                 "rank's registration",
                                 table->peers.size()));
      return;
    }
    joining = false;
    join_timer.cancel();
    retry_timer.cancel();
    wait_log_timer.cancel();
    std::lock_guard lock(mu);
    peers = std::move(table->peers);
    if (phase == Phase::kJoining) {
      phase = Phase::kJoined;
      job_known = true;
    }
    cv.notify_all();
  } else if (auto* refused = std::get_if<Refused>(&msg)) {
    close(c);
    if (joining) {
      fail_join(fmt::format("rank 0 at {} refused rank {}: {}", master_address(), opt.rank,
                            refused->reason));
    } else {
      record_lost(LostRank{0, peers.empty() ? opt.master_host : peers[0].host,
                           "refused: " + refused->reason});
    }
  } else if (auto* release = std::get_if<BarrierRelease>(&msg)) {
    std::lock_guard lock(mu);
    ++released[release->name];
    cv.notify_all();
  } else if (auto* value = std::get_if<KvValue>(&msg)) {
    std::lock_guard lock(mu);
    const auto it = gets.find(value->request);
    if (it != gets.end()) it->second = std::move(value->value);
    cv.notify_all();
  } else if (std::holds_alternative<Heartbeat>(msg)) {
    // last_seen is all rank 0's carry
  } else if (auto* lost = std::get_if<RankLost>(&msg)) {
    // Any rank, rank 0 (stalled) and this one (stalled, told before it is cut off) included.
    if (lost->rank >= static_cast<std::uint32_t>(opt.world_size)) {
      conn_failed(c, fmt::format("rank 0 reported rank {} lost, outside 0..{}", lost->rank,
                                 opt.world_size - 1));
      return;
    }
    record_lost(LostRank{static_cast<int>(lost->rank), lost->host, lost->reason});
  } else if (std::holds_alternative<Goodbye>(msg)) {
    close(c);
    std::lock_guard lock(mu);
    left = true;
    if (!leaving) {
      // Rank 0 closed the job while this rank was still in it: not a loss, but nothing the
      // rank waits for will come any more.
      if (broken.empty()) broken = "rank 0 shut the job down";
      if (phase == Phase::kJoining) {
        phase = Phase::kFailed;
        failure = "rank 0 shut the job down before all ranks joined";
      }
      joining = false;
    }
    cv.notify_all();
  } else {
    conn_failed(c, "protocol error: rank 0 sent an unexpected frame");
  }
}

void Rendezvous::Impl::fail_join(const std::string& why) {
  joining = false;
  join_timer.cancel();
  retry_timer.cancel();
  wait_log_timer.cancel();
  resolver.cancel();
  // A rank that gives up closes its connection: rank 0 then reports it lost to the others,
  // so they fail at once instead of at their own deadlines.
  if (master) close(master);
  if (opt.log_failed_join) tandem::log::error("rendezvous (rank {}): {}", opt.rank, why);
  std::lock_guard lock(mu);
  if (phase == Phase::kJoining) {
    phase = Phase::kFailed;
    failure = why;
  }
  cv.notify_all();
}

// ---------------------------------------------------------------------------------------------
// Either side

void Rendezvous::Impl::record_lost(LostRank l) {
  {
    std::lock_guard lock(mu);
    for (const LostRank& known : lost_ranks) {
      if (known.rank == l.rank) return;
    }
    lost_ranks.push_back(l);
    const std::string what =
        fmt::format("rank {} ('{}') lost: {}", l.rank, printable(l.host), printable(l.reason, 256));
    if (broken.empty()) broken = what;
    if (phase == Phase::kJoining) {
      phase = Phase::kFailed;
      failure = "join failed: " + what;
    }
    tandem::log::error("rendezvous (rank {}): {}", opt.rank, what);
    cv.notify_all();
  }
  if (!server()) {
    joining = false;
    join_timer.cancel();
    retry_timer.cancel();
  }
  if (opt.on_lost) opt.on_lost(l);
}

RankProgress Rendezvous::Impl::sample_progress() {
  if (!opt.progress) return {};
  try {
    return opt.progress();
  } catch (const std::exception& e) {
    tandem::log::error("rendezvous (rank {}): the progress callback failed: {}", opt.rank,
                       e.what());
    return {};
  }
}

void Rendezvous::Impl::stop_io(bool graceful) {
  stopping = true;
  std::error_code ignored;
  acceptor.close(ignored);
  resolver.cancel();
  tick_timer.cancel();
  join_timer.cancel();
  retry_timer.cancel();
  wait_log_timer.cancel();
  joining = false;
  std::vector<std::shared_ptr<Conn>> all;
  for (const auto& [seq, c] : pending) all.push_back(c);
  for (const Member& m : members) {
    if (m.conn) all.push_back(m.conn);
  }
  if (master) all.push_back(master);
  for (const std::shared_ptr<Conn>& c : all) {
    if (graceful && (c->writing || c->closing)) {
      close_after_flush(c);
    } else {
      close(c);
    }
  }
  pending.clear();
}

// ---------------------------------------------------------------------------------------------
// Public members

const std::vector<PeerInfo>& Rendezvous::join(std::chrono::milliseconds timeout) {
  Impl& s = *impl_;
  s.check_caller("join");
  {
    std::unique_lock lock(s.mu);
    if (s.shut_down) throw RendezvousError("join() after shutdown()");
    if (!s.join_called) {
      s.join_called = true;
      asio::post(s.io, [&s, timeout] { s.start_join(timeout); });
    }
    s.cv.wait_for(lock, timeout + kJoinGrace, [&s] { return s.phase != Impl::Phase::kJoining; });
    if (s.phase == Impl::Phase::kJoined) return s.peers;
    if (s.phase == Impl::Phase::kFailed) throw RendezvousError(s.failure);
  }
  // The rendezvous thread missed its own deadline (it is stuck in a callback): give up here.
  throw RendezvousError(fmt::format("rank {}: join did not complete within {} ms", s.opt.rank,
                                    (timeout + kJoinGrace).count()));
}

const std::vector<PeerInfo>& Rendezvous::peers() const {
  std::lock_guard lock(impl_->mu);
  if (impl_->phase != Impl::Phase::kJoined) {
    throw RendezvousError("Rendezvous::peers() before a successful join()");
  }
  return impl_->peers;
}

void Rendezvous::barrier(std::string_view name, std::chrono::milliseconds timeout) {
  Impl& s = *impl_;
  check_text("barrier name", name);
  s.check_caller("barrier");
  s.require_joined("barrier");
  const std::string key(name);
  std::unique_lock lock(s.mu);
  if (!s.broken.empty()) throw RendezvousError(fmt::format("barrier '{}': {}", key, s.broken));
  const std::uint64_t target = s.released[key] + 1;
  asio::post(s.io, [&s, key] {
    if (s.server()) {
      s.on_barrier(0, key);
    } else if (s.master) {
      s.send(s.master, BarrierEnter{key});
    }
  });
  const bool done =
      s.cv.wait_for(lock, timeout, [&] { return s.released[key] >= target || !s.broken.empty(); });
  if (s.released[key] >= target) return;
  if (done) throw RendezvousError(fmt::format("barrier '{}': {}", key, s.broken));
  throw RendezvousError(fmt::format("barrier '{}' timed out after {} ms on rank {}", key,
                                    timeout.count(), s.opt.rank));
}

void Rendezvous::set(std::string_view key, std::vector<std::byte> value) {
  Impl& s = *impl_;
  check_text("key", key);
  if (value.size() > kMaxValueField) {
    throw std::invalid_argument(
        fmt::format("value of key '{}' is {} bytes, more than the limit "
                    "of {}",
                    key, value.size(), kMaxValueField));
  }
  s.require_joined("set");
  asio::post(s.io, [&s, k = std::string(key), v = std::move(value)]() mutable {
    if (s.server()) {
      s.kv_set(k, std::move(v));
    } else if (s.master) {
      s.send(s.master, KvSet{std::move(k), std::move(v)});
    }
  });
}

std::vector<std::byte> Rendezvous::Impl::fetch(std::string_view key,
                                               std::chrono::milliseconds timeout, bool take) {
  const std::string_view call = take ? "take" : "get";
  check_text("key", key);
  check_caller(call);
  require_joined(call);
  std::unique_lock lock(mu);
  if (!broken.empty()) throw RendezvousError(fmt::format("{} '{}': {}", call, key, broken));
  const std::uint64_t id = next_request++;
  auto slot = gets.emplace(id, std::nullopt).first;
  asio::post(io, [this, id, take, k = std::string(key)] {
    if (server()) {
      kv_get(Waiter{true, {}, id, take}, k);
    } else if (master && take) {
      send(master, KvTake{id, k});
    } else if (master) {
      send(master, KvGet{id, k});
    }
  });
  cv.wait_for(lock, timeout, [&] { return slot->second.has_value() || !broken.empty(); });
  std::optional<std::vector<std::byte>> value = std::move(slot->second);
  gets.erase(slot);
  if (value) return std::move(*value);
  if (!broken.empty()) throw RendezvousError(fmt::format("{} '{}': {}", call, key, broken));
  throw RendezvousError(fmt::format("{} '{}' timed out after {} ms on rank {}: no rank set it",
                                    call, key, timeout.count(), opt.rank));
}

std::vector<std::byte> Rendezvous::get(std::string_view key, std::chrono::milliseconds timeout) {
  return impl_->fetch(key, timeout, false);
}

std::vector<std::byte> Rendezvous::take(std::string_view key, std::chrono::milliseconds timeout) {
  return impl_->fetch(key, timeout, true);
}

std::size_t Rendezvous::stored_bytes() const {
  return impl_->kv_bytes.load();
}

const JobNonce& Rendezvous::job_nonce() const {
  std::lock_guard lock(impl_->mu);
  if (!impl_->job_known) {
    throw RendezvousError(fmt::format(
        "Rendezvous::job_nonce() on rank {} before a successful join()", impl_->opt.rank));
  }
  return impl_->job;
}

JobCredentials Rendezvous::credentials() const {
  return JobCredentials{impl_->opt.job_token, job_nonce()};
}

std::vector<LostRank> Rendezvous::lost() const {
  std::lock_guard lock(impl_->mu);
  return impl_->lost_ranks;
}

std::vector<std::string> Rendezvous::refused() const {
  std::lock_guard lock(impl_->mu);
  return {impl_->refusals.begin(), impl_->refusals.end()};
}

void Rendezvous::shutdown(std::chrono::milliseconds timeout) {
  Impl& s = *impl_;
  s.check_caller("shutdown");
  std::unique_lock lock(s.mu);
  if (s.shut_down) return;
  s.shut_down = true;
  if (s.server()) {
    // The store and the barriers live here: wait for the others to leave first.
    if (s.phase == Impl::Phase::kJoined) {
      s.cv.wait_for(lock, timeout, [&s] { return s.active_clients == 0; });
    }
    asio::post(s.io, [&s] {
      for (std::size_t r = 1; r < s.members.size(); ++r) {
        Impl::Member& m = s.members[r];
        if (m.state != Impl::MemberState::kLive) continue;
        m.state = Impl::MemberState::kDeparted;
        s.send(m.conn, Goodbye{});
        s.close_after_flush(m.conn);
      }
      s.stop_io(true);
    });
  } else {
    const bool say_goodbye = s.phase == Impl::Phase::kJoined && !s.left;
    asio::post(s.io, [&s, say_goodbye] {
      if (say_goodbye && s.master && !s.master->closed) {
        s.leaving = true;
        s.send(s.master, Goodbye{});
      } else {
        std::lock_guard inner(s.mu);
        s.left = true;
        s.cv.notify_all();
      }
    });
    s.cv.wait_for(lock, timeout, [&s] { return s.left; });
    asio::post(s.io, [&s] { s.stop_io(true); });
  }
  s.guard.reset();
  // The loop ends once the last goodbye is written and acknowledged; a peer that never reads
  // it does not hold the caller beyond the grace period.
  if (!s.cv.wait_for(lock, kStopGrace, [&s] { return s.io_exited; })) s.io.stop();
  lock.unlock();
  if (s.thread.joinable()) s.thread.join();
}

}  // namespace tandem::transport
