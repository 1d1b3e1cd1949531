#include "transport/ucx_channel.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "runtime/log.hpp"

namespace tandem::transport {
namespace {

using Clock = std::chrono::steady_clock;

// The progress thread wakes at least this often even when idle: UCX's keepalive (how a dead
// peer on shared memory is noticed) and the hello deadlines run from progress calls.
constexpr int kMaxSleepMs = 100;
// How far ahead of the next expected sequence number a message may be: a bound on what a
// peer can make this process hold.
constexpr std::uint64_t kMaxReorder = std::uint64_t{1} << 20;
// How long the progress thread, stopping, waits for its endpoints to flush and close.
constexpr std::chrono::seconds kEndpointCloseWait{5};
// How long the progress thread polls for more work before it arms the worker and sleeps.
constexpr std::chrono::microseconds kSpinBeforeSleep{50};
// Distinct hellos in a peer's name answered with a proof before it proved itself: one is the
// peer's, the others strangers' (see on_hello).
constexpr std::size_t kMaxHelloNonces = 8;

std::string secs(std::chrono::milliseconds d) {
  return fmt::format("{:.1f} s", std::chrono::duration<double>(d).count());
}

void put_le(std::byte* at, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) at[i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}
std::uint64_t get_le(const std::byte* at, int n) {
  std::uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= std::uint64_t{std::to_integer<std::uint8_t>(at[i])} << (8 * i);
  return v;
}

// The channel header in front of a wire frame's head: room for it, filled in by stamp().
std::vector<std::byte> with_header_room(const std::vector<std::byte>& frame_head) {
  std::vector<std::byte> out(kUcxHeaderBytes + frame_head.size());
  std::memcpy(out.data() + kUcxHeaderBytes, frame_head.data(), frame_head.size());
  return out;
}
void stamp(std::vector<std::byte>& header, int rank, std::uint64_t seq) {
  put_le(header.data(), kUcxHeaderMagic, 4);
  put_le(header.data() + 4, static_cast<std::uint32_t>(rank), 4);
  put_le(header.data() + 8, seq, 8);
}

std::string status_text(ucs_status_t s) {
  return ucs_status_string(s);
}

void check(ucs_status_t s, const char* call) {
  if (s != UCS_OK) {
    throw std::runtime_error(fmt::format("ucx data plane: {} failed: {}", call, status_text(s)));
  }
}

}  // namespace

struct UcxChannel::Impl {
  struct UcxPeerState;
  // A message (or hello, or goodbye) handed to UCX, alive until its send completes.
  struct UcxOutgoing {
    UcxPeerState* peer = nullptr;
    std::vector<std::byte> header;  // channel header and wire head
    Message msg;                    // keeps the tensors alive until UCX is done with them
    std::vector<ucp_dt_iov_t> iov;
    std::uint64_t payload = 0;
    WireFrameKind kind = WireFrameKind::message;
  };

  // A message received (its payload possibly still arriving by rendezvous), waiting for its turn.
  struct UcxIncoming {
    UcxPeerState* peer = nullptr;
    std::uint64_t seq = 0;
    WireFrameKind kind = WireFrameKind::message;
    WireHead head;
    std::vector<Tensor> tensors;
    std::vector<ucp_dt_iov_t> iov;
    std::uint64_t expected = 0;  // payload bytes
    bool receiving = false;      // a rendezvous receive is in flight
    void* rndv_desc = nullptr;   // a rendezvous waiting its turn: UCX's descriptor, held
    bool ready = false;
    ucs_status_t status = UCS_OK;
    std::string error;  // why its receive could not start (then status is an error too)
  };

  // One peer process. Fields under `mu` are shared with senders, close() and wait_connected();
  // the rest belong to the progress thread.
  struct UcxPeerState : RoutedPeer {
    UcxPeerState(Impl* impl, UcxPeer p)
        : RoutedPeer(p.rank, p.host.empty() ? fmt::format("rank {}", p.rank)
                                            : fmt::format("rank {} ({})", p.rank, p.host)),
          d(impl),
          info(std::move(p)) {}

    Impl* d;
    UcxPeer info;

    // Under mu (RoutedPeer's, with connected: its proof checked).
    std::deque<std::unique_ptr<UcxOutgoing>> queue;
    std::uint64_t next_out = 1;  // hellos and proofs take none (their channel header says 0)
    std::size_t in_flight = 0;   // handed to UCX, not completed

    ucp_ep_h ep = nullptr;     // the messages: error mode none, so shared memory may carry them
    ucp_ep_h watch = nullptr;  // the hello only: its error handler reports the peer lost
    ucp_ep_params_t data_params{};  // for `ep`, opened once the peer's hello arrived
    bool dead = false;              // failed, as the progress thread sees it
    Clock::time_point hello_deadline;
    // The handshake, on the progress thread: this side's nonce for the peer, the nonces of the
    // hellos (or the checked proof) in its name that this side answered or is to answer with a
    // proof, and whether its proof checked.
    JobNonce nonce = fresh_nonce();
    std::vector<JobNonce> answered;
    std::vector<JobNonce> to_answer;
    bool proven = false;
    std::string refused;  // why its last proof did not check, for the deadline's report
    std::uint64_t next_in = 1;
    std::map<std::uint64_t, std::unique_ptr<UcxIncoming>> arrived;
    std::deque<UcxIncoming*> waiting;   // rendezvous not started (in `arrived`), in arrival order
    std::uint64_t receiving_bytes = 0;  // payloads of rendezvous started, not completed
  };

  Impl(UcxChannel& c, UcxChannelOptions o)
      : owner(c), opt(std::move(o)), job_id(job_id_of(opt.credentials.job)) {
    rules.job = job_id;
    rules.types = &opt.types;
    rules.max_data_bytes = opt.max_data_bytes;
  }

  UcxChannel& owner;  // the skeleton: routing, peer table, failures, statistics
  UcxChannelOptions opt;
  std::uint64_t job_id;  // in every frame: job_id_of(opt.credentials.job)
  WireRules rules;
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  int worker_fd = -1;
  int wake_fd = -1;
  std::size_t max_header = 0;
  std::vector<std::byte> address;

  std::thread thread;
  std::vector<std::unique_ptr<UcxPeerState>> peers;
  std::atomic<bool> closing{false};
  std::atomic<bool> stop_requested{false};
  std::atomic<bool> wake_pending{false};
  bool tearing_down = false;  // the worker is being destroyed: callbacks only clean up
  int receives_starting = 0;  // progress thread: inside start_receive's ucp_am_recv_data_nbx
  bool closed = false;        // close() finished (caller's thread)

  // Progress thread: sends UCX has not completed, endpoints closing.
  std::unordered_set<UcxOutgoing*> sending;
  std::vector<void*> closing_eps;

  std::atomic<std::uint64_t> rendezvous_received{0}, rendezvous_waited{0};

  ~Impl() { destroy(); }

  // --- setup and teardown ---
  void create() {
    ucp_config_t* config = nullptr;
    check(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read");
    if (!opt.transports.empty()) {
      const ucs_status_t s = ucp_config_modify(config, "TLS", opt.transports.c_str());
      if (s != UCS_OK) {
        ucp_config_release(config);
        throw std::runtime_error(fmt::format("ucx data plane: transports '{}' refused: {}",
                                             opt.transports, status_text(s)));
      }
    }
    if (!opt.net_devices.empty()) {
      const ucs_status_t s = ucp_config_modify(config, "NET_DEVICES", opt.net_devices.c_str());
      if (s != UCS_OK) {
        ucp_config_release(config);
        throw std::runtime_error(fmt::format("ucx data plane: network devices '{}' refused: {}",
                                             opt.net_devices, status_text(s)));
      }
    }
    if (opt.rendezvous_min_bytes > 0 && std::getenv("UCX_RNDV_THRESH") == nullptr) {
      const std::string bytes = std::to_string(opt.rendezvous_min_bytes);
      const ucs_status_t s = ucp_config_modify(config, "RNDV_THRESH", bytes.c_str());
      if (s != UCS_OK) {
        ucp_config_release(config);
        throw std::runtime_error(fmt::format(
            "ucx data plane: rendezvous threshold {} bytes refused: {}", bytes, status_text(s)));
      }
    }
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
    params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
    params.mt_workers_shared = 0;
    const ucs_status_t s = ucp_init(&params, config, &context);
    ucp_config_release(config);
    check(s, "ucp_init");
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;  // the progress thread is its only user
    check(ucp_worker_create(context, &wp, &worker), "ucp_worker_create");
    check(ucp_worker_get_efd(worker, &worker_fd), "ucp_worker_get_efd");
    ucp_worker_attr_t attr{};
    attr.field_mask = UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER;
    check(ucp_worker_query(worker, &attr), "ucp_worker_query");
    max_header = attr.max_am_header;
    ucp_am_handler_param_t hp{};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                    UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hp.id = kUcxAmId;
    hp.flags = UCP_AM_FLAG_WHOLE_MSG;
    hp.cb = &Impl::on_am;
    hp.arg = this;
    check(ucp_worker_set_am_recv_handler(worker, &hp), "ucp_worker_set_am_recv_handler");
    ucp_address_t* a = nullptr;
    std::size_t n = 0;
    check(ucp_worker_get_address(worker, &a, &n), "ucp_worker_get_address");
    const auto* bytes = reinterpret_cast<const std::byte*>(a);
    address.assign(bytes, bytes + n);
    ucp_worker_release_address(worker, a);
    wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd < 0) {
      throw std::runtime_error(
          fmt::format("ucx data plane: eventfd failed: {}", std::strerror(errno)));
    }
  }

  // After the progress thread ended (or never started): the worker, then what UCX never
  // completed, then the context.
  void destroy() {
    tearing_down = true;
    if (worker != nullptr) {
      // Wire-up that peers started with this worker (never progressed if start() was not
      // called) is finished first: UCX 1.13 asserts when it purges a pending wire-up request.
      const auto until = Clock::now() + std::chrono::milliseconds(200);
      while (Clock::now() < until) {
        if (ucp_worker_progress(worker) == 0) {
          std::this_thread::yield();
          if (ucp_worker_progress(worker) == 0) break;
        }
      }
      for (auto& p : peers) release_waiting(*p);
      ucp_worker_destroy(worker);
      worker = nullptr;
    }
    for (UcxOutgoing* o : sending) delete o;
    sending.clear();
    for (auto& p : peers) p->arrived.clear();
    if (context != nullptr) {
      ucp_cleanup(context);
      context = nullptr;
    }
    if (wake_fd >= 0) {
      ::close(wake_fd);
      wake_fd = -1;
    }
  }

  // --- helpers ---
  UcxPeerState* peer_of_rank(std::uint64_t rank) {
    if (rank > static_cast<std::uint64_t>(std::numeric_limits<int>::max())) return nullptr;
    return static_cast<UcxPeerState*>(owner.routed_peer_of_rank(static_cast<int>(rank)));
  }
  void notify() { owner.notify(); }
  void wake() {
    if (!wake_pending.exchange(true)) {
      const std::uint64_t one = 1;
      if (::write(wake_fd, &one, sizeof one) < 0 && errno != EAGAIN) {
        tandem::log::warn("ucx data plane (rank {}): waking the progress thread: {}", opt.rank,
                          std::strerror(errno));
      }
    }
  }

  // The peer is over: its queue is dropped, later sends to it fail, what it sends is dropped,
  // and unless the channel is closing (or the peer said goodbye and merely went away) the
  // failure is reported and stops the run.
  void fail_peer(UcxPeerState& p, const std::string& what, bool lost = false) {
    if (p.dead) return;
    p.dead = true;
    std::deque<std::unique_ptr<UcxOutgoing>> unsent;
    bool quiet = closing.load();
    const ChannelError error{p.info.rank, p.name, what};
    {
      std::lock_guard lock(p.mu);
      quiet = quiet || (lost && p.said_goodbye);
      // Recorded with the failure, under the peer's lock: whoever sees one (wait_connected, a
      // refused send, errors()) sees the other.
      (void)owner.mark_failed_locked(p, error, quiet);
      p.ended = true;
      unsent.swap(p.queue);
    }
    if (quiet) {
      tandem::log::debug("ucx data plane (rank {}): {} (closing or after its goodbye): {}",
                         opt.rank, p.name, what);
    } else {
      owner.report(error, true, true);
    }
    notify();
    release_waiting(p);
    // Receives in flight keep their buffers until UCX completes them.
    std::erase_if(p.arrived, [](const auto& kv) { return !kv.second->receiving; });
  }

  // Rendezvous never started: UCX completes their sends at the sender (or drops them with it).
  void release_waiting(UcxPeerState& p) {
    for (UcxIncoming* in : p.waiting) {
      ucp_am_data_release(worker, in->rndv_desc);
      in->rndv_desc = nullptr;
    }
    p.waiting.clear();
  }

  // --- the progress thread ---
  void run() {
    for (auto& p : peers) open(*p);
    for (;;) {
      wake_pending.store(false);
      if (stop_requested.load()) break;
      open_data_endpoints();
      post_queued();
      while (ucp_worker_progress(worker) != 0) {
      }
      close_dead_endpoints();
      const int sleep_ms = check_deadlines();
      if (wake_pending.load()) continue;
      // Poll a little before sleeping: a stream of messages keeps the thread awake instead of
      // paying a sleep and a wake-up (tens of microseconds) for each one.
      if (spin_for_work()) continue;
      const ucs_status_t armed = ucp_worker_arm(worker);
      if (armed == UCS_ERR_BUSY) continue;  // events arrived meanwhile
      pollfd fds[2] = {{worker_fd, POLLIN, 0}, {wake_fd, POLLIN, 0}};
      if (armed != UCS_OK) {
        tandem::log::warn("ucx data plane (rank {}): ucp_worker_arm: {}", opt.rank,
                          status_text(armed));
        fds[0].fd = -1;  // poll only the wake-up fd, with the timeout as a fallback
      }
      (void)::poll(fds, 2, sleep_ms);
      if (fds[1].revents & POLLIN) {
        std::uint64_t count = 0;
        (void)::read(wake_fd, &count, sizeof count);
      }
    }
    close_endpoints();
  }

  // True when UCX had something to do, or a send was queued, within kSpinBeforeSleep.
  bool spin_for_work() {
    const auto until = Clock::now() + kSpinBeforeSleep;
    while (Clock::now() < until) {
      if (ucp_worker_progress(worker) != 0 || wake_pending.load()) return true;
      // Gives the core to any other runnable thread (the actors' workers, the peer process):
      // with more threads than cores, a poller that kept its core for its whole time slice
      // delayed the very message it waits for. Two processes on 2 cores: one-way latency of
      // 64 bytes 113 us without the yield, 5 us with it; 1 MiB 9.6 -> 12.8 GB/s.
      std::this_thread::yield();
    }
    return false;
  }

  void open(UcxPeerState& p) {
    p.hello_deadline = Clock::now() + opt.connect_timeout + opt.hello_timeout;
    // Two endpoints per peer. The first, in error mode "peer", carries the hello only; its error
    // handler reports the peer lost. The messages go on a second one without error handling,
    // opened once the peer's hello arrived (its worker answers): UCX 1.13 runs an endpoint in
    // mode "peer" only over transports that can tell a dead peer (never shared memory) and only
    // with protocols it can fail cleanly, so over TCP it sent every active message above 16 KiB
    // eagerly ("copy-in", one lane), where an endpoint without error handling uses zero-copy
    // rendezvous writes striped over every interface reaching the peer, as ucx_perftest does
    // (UCX_PROTO_INFO=y). Opened before the hello, such an endpoint to a peer that never answers
    // makes ucp_worker_destroy assert (a wire-up request left pending on TCP). UCX pairs the
    // endpoints two workers open to each other in order and refuses a pair whose modes differ:
    // every channel opens the "peer" one first.
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = reinterpret_cast<const ucp_address_t*>(p.info.address.data());
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = &Impl::on_ep_error;
    ep.err_handler.arg = &p;
    p.data_params = ep;
    p.data_params.field_mask &= ~std::uint64_t{UCP_EP_PARAM_FIELD_ERR_HANDLER};
    p.data_params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    const ucs_status_t s = ucp_ep_create(worker, &ep, &p.watch);
    if (s != UCS_OK) {
      p.watch = nullptr;
      tandem::log::warn(
          "ucx data plane (rank {}): cannot watch {} for failure (no UCX transport in error "
          "mode 'peer', e.g. UCX_TLS without tcp): {}; a lost peer is noticed only by the "
          "control plane",
          opt.rank, p.name, status_text(s));
      if (!open_data_endpoint(p, /*after_hello=*/false)) return;
    }
    auto hello = std::make_unique<Impl::UcxOutgoing>();
    hello->peer = &p;
    hello->kind = WireFrameKind::hello;
    hello->header = with_header_room(
        encode_wire_hello({job_id, static_cast<std::uint32_t>(opt.rank), 0, 1, p.nonce}));
    stamp(hello->header, opt.rank, 0);
    {
      std::lock_guard lock(p.mu);
      ++p.in_flight;
    }
    post(hello.release());
  }

  // `after_hello`: the peer's hello has arrived, so it was alive moments ago. A peer that
  // vanishes between its hello and this call leaves nothing to connect to (on shared memory its
  // segment is gone: "Shared memory error"; seen in CI when the peer went right after its first
  // message): it is reported lost, as a failed send to it is.
  bool open_data_endpoint(UcxPeerState& p, bool after_hello) {
    const ucs_status_t s = ucp_ep_create(worker, &p.data_params, &p.ep);
    if (s == UCS_OK) return true;
    p.ep = nullptr;
    const std::string failed = "cannot open an endpoint to its worker address: " + status_text(s);
    const bool gone = after_hello && (peer_gone(s) || s == UCS_ERR_SHMEM_SEGMENT);
    fail_peer(p, gone ? "lost (" + failed + ")" : failed);
    return false;
  }

  // Peers with hellos to answer: their data endpoint opens (the first time), and the proofs go
  // out on it, ahead of every message.
  void open_data_endpoints() {
    for (auto& p : peers) {
      if (p->dead || p->to_answer.empty()) continue;
      if (p->ep == nullptr && !open_data_endpoint(*p, /*after_hello=*/true)) continue;
      for (const JobNonce& n : p->to_answer) post_proof(*p, n);
      p->to_answer.clear();
    }
  }

  // This side's proof to the peer, made over `theirs`, the nonce of a hello in its name.
  void post_proof(UcxPeerState& p, const JobNonce& theirs) {
    const ProofContext c{ProofPurpose::kDataUcx,
                         opt.credentials.job,
                         static_cast<std::uint32_t>(opt.rank),
                         static_cast<std::uint32_t>(p.info.rank),
                         0,
                         p.nonce,
                         theirs};
    auto proof = std::make_unique<Impl::UcxOutgoing>();
    proof->peer = &p;
    proof->kind = WireFrameKind::proof;
    proof->header =
        with_header_room(encode_wire_proof({p.nonce, make_proof(opt.credentials.token, c)}));
    stamp(proof->header, opt.rank, 0);
    {
      std::lock_guard lock(p.mu);
      ++p.in_flight;
    }
    post(proof.release());
  }

  // Messages go to a peer once it proved itself (its proof checked).
  void post_queued() {
    for (auto& p : peers) {
      if (p->dead || p->ep == nullptr || !p->proven) continue;
      std::deque<std::unique_ptr<UcxOutgoing>> batch;
      {
        std::lock_guard lock(p->mu);
        if (p->queue.empty()) continue;
        batch.swap(p->queue);
        p->in_flight += batch.size();
      }
      for (auto& o : batch) post(o.release());
    }
  }

  void post(UcxOutgoing* o) {
    ucp_request_param_t prm{};
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                       UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_FLAGS;
    prm.cb.send = &Impl::on_sent;
    prm.user_data = o;
    prm.flags = 0;  // UCX picks eager or rendezvous by size
    const void* buffer = nullptr;
    std::size_t count = 0;
    prm.datatype = ucp_dt_make_contig(1);
    const auto parts = wire_payload(o->msg);
    for (const auto part : parts) o->payload += part.size();
    if (parts.size() == 1) {
      buffer = parts[0].data();
      count = parts[0].size();
    } else if (parts.size() > 1) {
      for (const auto part : parts) {
        o->iov.push_back({const_cast<std::byte*>(part.data()), part.size()});
      }
      buffer = o->iov.data();
      count = o->iov.size();
      prm.datatype = ucp_dt_make_iov();
    }
    ucp_ep_h on = o->peer->ep;
    if (o->kind == WireFrameKind::hello && o->peer->watch != nullptr) on = o->peer->watch;
    if (on == nullptr || o->peer->dead) {
      sent(o, UCS_ERR_CANCELED);
      return;
    }
    sending.insert(o);
    const ucs_status_ptr_t r =
        ucp_am_send_nbx(on, kUcxAmId, o->header.data(), o->header.size(), buffer, count, &prm);
    if (UCS_PTR_IS_PTR(r)) return;  // on_sent follows
    sent(o, UCS_PTR_STATUS(r));
  }

  static void on_sent(void* request, ucs_status_t status, void* user_data) {
    auto* o = static_cast<UcxOutgoing*>(user_data);
    o->peer->d->sent(o, status);
    ucp_request_free(request);
  }

  void sent(UcxOutgoing* o, ucs_status_t status) {
    sending.erase(o);
    std::unique_ptr<UcxOutgoing> owned(o);
    if (tearing_down) return;
    UcxPeerState& p = *o->peer;
    if (status == UCS_OK) {
      if (o->kind == WireFrameKind::message) ++owner.messages_sent_;
      owner.bytes_sent_ += o->header.size() + o->payload;
    } else if (!p.dead) {
      std::string what;
      if (o->kind == WireFrameKind::message) {
        try {
          what = describe_wire_head(decode_wire_head(
              std::span(o->header).subspan(kUcxHeaderBytes + kWirePrefixBytes), o->payload, rules));
        } catch (const std::exception&) {
          what = "a message";
        }
      } else {
        what = o->kind == WireFrameKind::hello   ? "the hello"
               : o->kind == WireFrameKind::proof ? "the proof"
                                                 : "the goodbye";
      }
      // A send that fails because the peer's side is gone races the endpoint's error handler
      // (over TCP a pending wire-up times out first): either way the peer is lost.
      const std::string failed = fmt::format("sending {}: {}", what, status_text(status));
      fail_peer(p, peer_gone(status) ? "lost (" + failed + ")" : failed, true);
    }
    {
      std::lock_guard lock(p.mu);
      --p.in_flight;
    }
    notify();  // close() waits for drained peers
  }

  // Statuses by which a transport says the other side is gone. Over shared memory that is a
  // segment that can no longer be attached: the peer's worker destroyed it.
  static bool peer_gone(ucs_status_t status) {
    return status == UCS_ERR_ENDPOINT_TIMEOUT || status == UCS_ERR_CONNECTION_RESET ||
           status == UCS_ERR_UNREACHABLE || status == UCS_ERR_NOT_CONNECTED ||
           status == UCS_ERR_SHMEM_SEGMENT;
  }

  static void on_ep_error(void* arg, ucp_ep_h, ucs_status_t status) {
    auto* p = static_cast<UcxPeerState*>(arg);
    if (p->d->tearing_down) return;
    p->d->fail_peer(*p, "lost: " + status_text(status), true);
  }

  void close_endpoint(ucp_ep_h& ep, bool force) {
    if (ep == nullptr) return;
    ucp_request_param_t prm{};
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    prm.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    void* r = ucp_ep_close_nbx(ep, &prm);
    ep = nullptr;
    if (UCS_PTR_IS_PTR(r)) closing_eps.push_back(r);
  }
  void reap_closed_endpoints() {
    std::erase_if(closing_eps, [](void* r) {
      if (ucp_request_check_status(r) == UCS_INPROGRESS) return false;
      ucp_request_free(r);
      return true;
    });
  }

  // A failed peer's endpoints are closed by force (what they had in flight completes with an
  // error).
  void close_dead_endpoints() {
    for (auto& p : peers) {
      if (!p->dead) continue;
      close_endpoint(p->ep, true);
      close_endpoint(p->watch, true);
    }
    reap_closed_endpoints();
  }

  // Stopping: the live endpoints flush what they carry and close.
  void close_endpoints() {
    for (auto& p : peers) {
      close_endpoint(p->ep, p->dead);
      close_endpoint(p->watch, p->dead);
    }
    const auto deadline = Clock::now() + kEndpointCloseWait;
    while (!closing_eps.empty() && Clock::now() < deadline) {
      ucp_worker_progress(worker);
      reap_closed_endpoints();
    }
    if (!closing_eps.empty()) {
      tandem::log::warn("ucx data plane (rank {}): {} endpoints still closing after {} s", opt.rank,
                        closing_eps.size(), kEndpointCloseWait.count());
    }
    closing_eps.clear();  // the worker's destruction releases them
  }

  // Peers silent past their hello deadline fail; returns how long the thread may sleep.
  int check_deadlines() {
    const auto now = Clock::now();
    auto next = now + std::chrono::milliseconds(kMaxSleepMs);
    for (auto& p : peers) {
      if (p->dead) continue;
      bool hello = false;
      {
        std::lock_guard lock(p->mu);
        hello = p->connected;
      }
      if (hello) continue;
      if (now >= p->hello_deadline) {
        fail_peer(*p, fmt::format("no hello and proof that checks within {}{}",
                                  secs(opt.connect_timeout + opt.hello_timeout),
                                  p->refused.empty() ? "" : " (" + p->refused + ")"));
        continue;
      }
      next = std::min(next, p->hello_deadline);
    }
    return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(next - now).count());
  }

  // --- receiving ---
  static ucs_status_t on_am(void* arg, const void* header, std::size_t header_length, void* data,
                            std::size_t length, const ucp_am_recv_param_t* param) {
    auto* d = static_cast<Impl*>(arg);
    if (!d->tearing_down &&
        d->received(std::span(static_cast<const std::byte*>(header), header_length), data, length,
                    (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0)) {
      return UCS_INPROGRESS;  // a rendezvous waiting its turn: UCX keeps the descriptor
    }
    // Returning UCS_OK drops what was not taken: a refused rendezvous completes at the sender.
    return UCS_OK;
  }

  // Reported through on_error, up to 100; then only counted (Stats::strangers),
  // so that a flood cannot grow errors() or the log without bound. `rank`: the rank claimed.
  void stranger(const std::string& what, int rank = -1) {
    const std::string who = rank < 0 ? "an unidentified sender"
                                     : fmt::format("an unidentified sender (claims rank {})", rank);
    refusal({-1, who, what});
  }
  // A refusal that does not fail the run, reported up to 100 times (then only counted).
  void refusal(ChannelError e) {
    if (closing.load()) return;
    owner.refusal(std::move(e));
  }

  // True: `data` is a rendezvous descriptor this channel holds (it waits its turn in
  // UcxPeerState::waiting).
  bool received(std::span<const std::byte> header, void* data, std::size_t length, bool rndv) {
    if (header.size() < kUcxHeaderBytes) {
      stranger(fmt::format("a message with a header of {} bytes, shorter than the channel's {}",
                           header.size(), kUcxHeaderBytes));
      return false;
    }
    const auto magic = static_cast<std::uint32_t>(get_le(header.data(), 4));
    if (magic != kUcxHeaderMagic) {
      stranger(fmt::format("not a Tandem message: channel header magic {:#010x}", magic));
      return false;
    }
    const std::uint64_t rank = get_le(header.data() + 4, 4);
    const std::uint64_t seq = get_le(header.data() + 8, 8);
    UcxPeerState* pp = peer_of_rank(rank);
    if (pp == nullptr) {
      stranger(fmt::format("a message from rank {}, which is not a peer of this channel", rank));
      return false;
    }
    UcxPeerState& p = *pp;
    if (p.dead) return false;
    const int claimed = p.info.rank;
    WirePrefix pre;
    std::span<const std::byte> meta;
    try {
      const auto frame = header.subspan(kUcxHeaderBytes);
      if (frame.size() < kWirePrefixBytes) {
        throw WireError(fmt::format("a frame of {} bytes, shorter than a prefix", frame.size()));
      }
      pre = decode_wire_prefix(frame.first(kWirePrefixBytes));
      meta = frame.subspan(kWirePrefixBytes);
      if (pre.meta_bytes != meta.size()) {
        throw WireError(fmt::format("the prefix announces {} meta bytes, the header carries {}",
                                    pre.meta_bytes, meta.size()));
      }
      if (pre.data_bytes != length) {
        throw WireError(fmt::format("the prefix announces {} data bytes, the payload has {}",
                                    pre.data_bytes, length));
      }
    } catch (const std::exception& e) {
      // Before its proof checked, nothing in a peer's name is known to be the peer's.
      if (p.proven) {
        fail_peer(p, e.what());
      } else {
        stranger(e.what(), claimed);
      }
      return false;
    }
    if (pre.kind == WireFrameKind::hello) {
      on_hello(p, meta);
      return false;
    }
    if (pre.kind == WireFrameKind::proof) {
      on_proof(p, meta);
      return false;
    }
    if (!p.proven) {
      stranger(fmt::format("a {} in the name of rank {} before its proof checked",
                           pre.kind == WireFrameKind::message ? "message" : "goodbye", claimed),
               claimed);
      return false;
    }
    auto in = std::make_unique<UcxIncoming>();
    in->peer = &p;
    in->seq = seq;
    in->expected = length;
    in->kind = pre.kind;
    std::vector<std::span<std::byte>> buffers;
    try {
      if (pre.kind == WireFrameKind::message) {
        in->head = decode_wire_head(meta, length, rules);
        const auto named = [&in] { return "data frame " + describe_wire_head(in->head); };
        owner.check_incoming(in->head, p);
        if (seq == 0) throw WireError(named() + ": sequence number 0, which no message has");
        // A rendezvous gets its tensors when its receive starts (start_receive).
        if (!rndv) {
          in->tensors = allocate_wire_tensors(in->head);
          buffers = wire_receive_buffers(in->tensors);
        }
      } else if (seq == 0) {
        throw WireError("a goodbye with sequence number 0, which no goodbye has");
      }
      if (seq < p.next_in || p.arrived.contains(seq)) {
        throw WireError(fmt::format("sequence number {} repeated", seq));
      }
      if (seq - p.next_in > kMaxReorder) {
        throw WireError(fmt::format("sequence number {} is more than {} ahead of {}", seq,
                                    kMaxReorder, p.next_in));
      }
    } catch (const std::exception& e) {
      fail_peer(p, e.what());
      return false;
    }
    owner.bytes_received_ += header.size() + length;
    UcxIncoming& msg = *in;
    p.arrived.emplace(seq, std::move(in));
    if (length == 0) {
      msg.ready = true;
    } else if (rndv) {
      ++rendezvous_received;
      if (must_wait(p, length)) {
        msg.rndv_desc = data;
        p.waiting.push_back(&msg);
        ++rendezvous_waited;
        return true;
      }
      start_receive(p, msg, data, /*held=*/false);
    } else {
      // Eager: the payload is in UCX's buffer for this call only.
      const auto* from = static_cast<const std::byte*>(data);
      for (const auto b : buffers) {
        std::memcpy(b.data(), from, b.size());
        from += b.size();
      }
      msg.ready = true;
    }
    advance(p);
    return false;
  }

  // A hello in the peer's name: its nonce is answered with a proof (open_data_endpoints), each
  // distinct one once, up to kMaxHelloNonces before the peer proved itself. Any process that
  // reaches this worker can send a hello in any name, and which hello is the peer's is known only
  // once the peer's proof checks; answering each keeps a stranger's hello from shutting the
  // peer's out (the peer refuses the proofs made for other nonces).
  void on_hello(UcxPeerState& p, std::span<const std::byte> meta) {
    WireHello h;
    try {
      h = decode_wire_hello(meta);
      if (h.job != job_id) {
        throw WireError(
            fmt::format("data-plane hello: job {:#x}, but this job is {:#x}", h.job, job_id));
      }
      if (h.rank != static_cast<std::uint32_t>(p.info.rank) || h.lanes != 1) {
        throw WireError(
            fmt::format("data-plane hello: rank {} (lane {} of {}) in a message from "
                        "rank {}",
                        h.rank, h.lane, h.lanes, p.info.rank));
      }
    } catch (const std::exception& e) {
      p.refused = e.what();
      stranger(e.what(), p.info.rank);
      return;
    }
    if (p.proven) {
      stranger(
          fmt::format("a hello in the name of rank {}, which proved itself already", p.info.rank),
          p.info.rank);
      return;
    }
    if (std::find(p.answered.begin(), p.answered.end(), h.nonce) != p.answered.end()) return;
    if (p.answered.size() >= kMaxHelloNonces) {
      stranger(
          fmt::format("more than {} hellos in the name of rank {}", kMaxHelloNonces, p.info.rank),
          p.info.rank);
      return;
    }
    answer(p, h.nonce);
  }

  void answer(UcxPeerState& p, const JobNonce& theirs) {
    p.answered.push_back(theirs);
    p.to_answer.push_back(theirs);
    wake_pending.store(true);  // the loop comes round to open_data_endpoints
  }

  // A proof in the peer's name: once one checks, the peer is connected and its messages count.
  // One that does not is reported with the rank it claims and dropped; the peer may still prove
  // itself before its deadline.
  void on_proof(UcxPeerState& p, std::span<const std::byte> meta) {
    WireProof got;
    try {
      got = decode_wire_proof(meta);
    } catch (const std::exception& e) {
      stranger(e.what(), p.info.rank);
      return;
    }
    const ProofContext c{ProofPurpose::kDataUcx,
                         opt.credentials.job,
                         static_cast<std::uint32_t>(p.info.rank),
                         static_cast<std::uint32_t>(opt.rank),
                         0,
                         got.nonce,
                         p.nonce};
    if (!check_proof(opt.credentials.token, c, got.proof)) {
      p.refused = fmt::format(
          "a data-plane proof in the name of rank {} did not check: it does not hold this job's "
          "token and nonce, or it answered a hello that was not this process's",
          p.info.rank);
      refusal({p.info.rank, p.name, p.refused});
      return;
    }
    if (p.proven) return;
    p.proven = true;
    if (std::find(p.answered.begin(), p.answered.end(), got.nonce) == p.answered.end()) {
      answer(p, got.nonce);
    }
    {
      std::lock_guard lock(p.mu);
      p.connected = true;
    }
    wake_pending.store(true);
    notify();
  }

  // A rendezvous receive, straight into the message's tensors (allocated now): UCX fetches the
  // sender's memory. The caller advances the peer (the receive may complete at once). `held`:
  // the descriptor outlived its AM callback, so if the receive cannot start it is released here
  // (inside the callback, returning UCS_OK drops it).
  void start_receive(UcxPeerState& p, UcxIncoming& msg, void* data, bool held) {
    std::vector<std::span<std::byte>> buffers;
    try {
      msg.tensors = allocate_wire_tensors(msg.head);
      buffers = wire_receive_buffers(msg.tensors);
    } catch (const std::exception& e) {
      if (held) ucp_am_data_release(worker, data);
      msg.ready = true;
      msg.status = UCS_ERR_NO_MEMORY;
      msg.error = e.what();
      return;
    }
    ucp_request_param_t prm{};
    prm.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
    prm.cb.recv_am = &Impl::on_payload;
    prm.user_data = &msg;
    void* buffer = nullptr;
    std::size_t count = 0;
    if (buffers.size() == 1) {
      prm.datatype = ucp_dt_make_contig(1);
      buffer = buffers[0].data();
      count = buffers[0].size();
    } else {
      for (const auto b : buffers) msg.iov.push_back({b.data(), b.size()});
      prm.datatype = ucp_dt_make_iov();
      buffer = msg.iov.data();
      count = msg.iov.size();
    }
    // In flight before the call: UCX may complete the receive inside it (a failed endpoint
    // does), and on_payload then finds the accounting it undoes.
    msg.receiving = true;
    p.receiving_bytes += msg.expected;
    ++receives_starting;
    const ucs_status_ptr_t r = ucp_am_recv_data_nbx(worker, data, buffer, count, &prm);
    --receives_starting;
    if (msg.ready || UCS_PTR_IS_PTR(r)) return;  // completed inside the call, or on_payload follows
    msg.receiving = false;
    p.receiving_bytes -= msg.expected;
    msg.ready = true;
    msg.status = UCS_PTR_STATUS(r);
  }

  // Whether a rendezvous of `bytes` waits for the peer's receives in flight (see
  // UcxChannelOptions::rendezvous_receive_bytes); those already waiting go first.
  bool must_wait(const UcxPeerState& p, std::uint64_t bytes) const {
    const std::uint64_t bound = opt.rendezvous_receive_bytes;
    if (bound == 0 || bytes > bound) return false;
    return !p.waiting.empty() || !has_room(p, bytes);
  }

  // Whether the peer's receives in flight leave room for `bytes` more (one always may start).
  bool has_room(const UcxPeerState& p, std::uint64_t bytes) const {
    return p.receiving_bytes == 0 || p.receiving_bytes + bytes <= opt.rendezvous_receive_bytes;
  }

  // Starts the rendezvous that wait, while the peer has room for them.
  void start_waiting(UcxPeerState& p) {
    while (!p.dead && !p.waiting.empty() && has_room(p, p.waiting.front()->expected)) {
      UcxIncoming& msg = *p.waiting.front();
      p.waiting.pop_front();
      void* desc = std::exchange(msg.rndv_desc, nullptr);
      start_receive(p, msg, desc, /*held=*/true);
    }
  }

  static void on_payload(void* request, ucs_status_t status, std::size_t length, void* user_data) {
    auto* in = static_cast<UcxIncoming*>(user_data);
    Impl* d = in->peer->d;
    in->receiving = false;
    in->peer->receiving_bytes -= in->expected;
    in->ready = true;
    in->status = status;
    if (status == UCS_OK && length != in->expected) in->status = UCS_ERR_MESSAGE_TRUNCATED;
    ucp_request_free(request);
    // Inside start_receive's call to UCX, only the record above: advancing here could fail the
    // peer and free the message that start_receive is still using. Its caller advances the peer.
    if (d->tearing_down || d->receives_starting > 0) return;
    UcxPeerState& p = *in->peer;
    if (p.dead) {
      p.arrived.erase(in->seq);
      return;
    }
    d->start_waiting(p);
    d->advance(p);
  }

  // Hands over the peer's messages that are complete, in sequence order.
  void advance(UcxPeerState& p) {
    while (!p.dead) {
      auto it = p.arrived.find(p.next_in);
      if (it == p.arrived.end() || !it->second->ready) return;
      std::unique_ptr<UcxIncoming> in = std::move(it->second);
      p.arrived.erase(it);
      ++p.next_in;
      if (in->status != UCS_OK) {
        fail_peer(p, fmt::format("receiving the tensors of {}: {}", describe_wire_head(in->head),
                                 in->error.empty() ? status_text(in->status) : in->error));
        return;
      }
      bool after_goodbye = false;
      {
        std::lock_guard lock(p.mu);
        after_goodbye = p.said_goodbye;
        if (in->kind == WireFrameKind::goodbye) p.said_goodbye = true;
      }
      if (after_goodbye) {
        fail_peer(p, in->kind == WireFrameKind::goodbye
                         ? "a second goodbye"
                         : "a message after its goodbye: " + describe_wire_head(in->head));
        return;
      }
      if (in->kind == WireFrameKind::goodbye) {
        notify();
        continue;
      }
      deliver(*in);
    }
  }

  void deliver(UcxIncoming& in) { owner.deliver(in.head.to, in.head.env, std::move(in.tensors)); }
};

UcxChannel::UcxChannel(ActorSystem& system, UcxChannelOptions options)
    : UcxDataPlane(system, skeleton_options(options, "UcxChannel", "ucx")),
      impl_(std::make_unique<Impl>(*this, std::move(options))) {
  // The library's logger is made on first use; made here, before this object's threads log,
  // rather than by two of them at once.
  (void)tandem::log::logger();
  impl_->create();
}

UcxChannel::~UcxChannel() {
  close();
}

const std::vector<std::byte>& UcxChannel::worker_address() const {
  return impl_->address;
}

void UcxChannel::add_peer(UcxPeer peer) {
  auto& d = *impl_;
  if (peer.address.empty()) {
    throw std::invalid_argument(
        fmt::format("UcxChannel::add_peer: rank {} has no worker address", peer.rank));
  }
  auto p = std::make_unique<Impl::UcxPeerState>(&d, std::move(peer));
  add_routed_peer(*p);
  d.peers.push_back(std::move(p));
}

void UcxChannel::start() {
  auto& d = *impl_;
  if (started()) throw std::logic_error("UcxChannel::start called twice");
  if (d.closed) throw std::logic_error("UcxChannel::start after close()");
  mark_started();
  d.thread = std::thread([&d] { d.run(); });
}

std::size_t UcxChannel::max_head_bytes() const {
  return impl_->max_header - kUcxHeaderBytes;
}

SendResult UcxChannel::post(RoutedPeer& peer, std::vector<std::byte> head, Message msg) {
  auto& d = *impl_;
  auto& p = static_cast<Impl::UcxPeerState&>(peer);
  auto o = std::make_unique<Impl::UcxOutgoing>();
  o->header = with_header_room(head);
  o->msg = std::move(msg);
  o->peer = &p;
  {
    std::lock_guard lock(p.mu);
    // Checked under the peer's lock, which close() takes to queue the goodbye: a message is
    // either refused or queued before it.
    if (d.closing.load()) return SendResult{SendStatus::system_stopped};
    // A peer that said goodbye receives no more: the message would be lost.
    if (p.failed || p.said_goodbye) return SendResult{SendStatus::target_stopped};
    stamp(o->header, d.opt.rank, p.next_out++);
    p.queue.push_back(std::move(o));
  }
  d.wake();
  return SendResult{};
}

void UcxChannel::close(std::chrono::milliseconds timeout) {
  auto& d = *impl_;
  if (d.closed) return;
  // Staged messages are queued behind what is queued already, before the goodbyes.
  stop_sending(timeout);
  d.closing.store(true);
  if (started()) {
    // Goodbyes go behind what is queued, so the peers receive every message first.
    for (auto& p : d.peers) {
      std::lock_guard lock(p->mu);
      if (p->failed) continue;
      auto o = std::make_unique<Impl::UcxOutgoing>();
      o->peer = p.get();
      o->kind = WireFrameKind::goodbye;
      o->header = with_header_room(encode_wire_goodbye());
      stamp(o->header, d.opt.rank, p->next_out++);
      p->queue.push_back(std::move(o));
    }
    d.wake();
    std::unique_lock lock(state_mu_);
    const auto drained = [&d] {
      for (auto& p : d.peers) {
        std::lock_guard pl(p->mu);
        if (!p->failed && (!p->queue.empty() || p->in_flight > 0)) return false;
      }
      return true;
    };
    if (!state_cv_.wait_for(lock, timeout, drained)) {
      tandem::log::warn("ucx data plane (rank {}): closing with messages still queued after {}",
                        d.opt.rank, secs(timeout));
    }
    // The peers' goodbyes, so that closing does not look like a failure to them.
    (void)state_cv_.wait_for(lock, d.opt.close_linger, [&d] {
      for (auto& p : d.peers) {
        std::lock_guard pl(p->mu);
        if (!p->failed && !p->said_goodbye && !p->ended) return false;
      }
      return true;
    });
    lock.unlock();
    d.stop_requested.store(true);
    d.wake_pending.store(false);
    d.wake();
    d.thread.join();
  }
  d.destroy();
  d.closed = true;
}

UcxChannel::Stats UcxChannel::stats() const {
  const auto& d = *impl_;
  Stats s;
  static_cast<ChannelStats&>(s) = routed_stats();
  s.rendezvous_received = d.rendezvous_received.load();
  s.rendezvous_waited = d.rendezvous_waited.load();
  return s;
}

}  // namespace tandem::transport
