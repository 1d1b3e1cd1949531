#pragma once
// A hand-driven UCX peer for the ucx data-plane tests: a bare UCX worker that speaks the
// channel's active messages (hellos, proofs, frames, raw junk) in rank 1's name, and can vanish
// without a goodbye.
#include <gtest/gtest.h>
#include <ucp/api/ucp.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "transport/job_proof.hpp"
#include "transport/ucx_channel.hpp"
#include "transport/wire_message.hpp"

namespace tandem::transport::testing {

// Whether `pred` held within `timeout`, polled.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

// Plays rank 1 of job `job` with a bare UCX worker: a hello, then whatever the test sends. Its
// worker is progressed by its own thread; every use of the worker holds mu_.
class UcxFakePeer {
 public:
  // `progress` false: the worker is never progressed (a peer that hangs before it answers).
  UcxFakePeer(const std::string& transports, std::uint64_t job, bool progress = true) : job_(job) {
    ucp_config_t* config = nullptr;
    EXPECT_EQ(ucp_config_read(nullptr, nullptr, &config), UCS_OK);
    if (!transports.empty()) {
      EXPECT_EQ(ucp_config_modify(config, "TLS", transports.c_str()), UCS_OK);
    }
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_AM;
    EXPECT_EQ(ucp_init(&params, config, &context_), UCS_OK);
    ucp_config_release(config);
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
    EXPECT_EQ(ucp_worker_create(context_, &wp, &worker_), UCS_OK);
    // What the channel sends: its hello and proof are kept, the rest ignored.
    ucp_am_handler_param_t hp{};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hp.id = kUcxAmId;
    hp.cb = [](void* arg, const void* header, std::size_t length, void*, std::size_t,
               const ucp_am_recv_param_t*) {
      static_cast<UcxFakePeer*>(arg)->keep(
          std::span(static_cast<const std::byte*>(header), length));
      return UCS_OK;
    };
    hp.arg = this;
    EXPECT_EQ(ucp_worker_set_am_recv_handler(worker_, &hp), UCS_OK);
    ucp_address_t* a = nullptr;
    std::size_t n = 0;
    EXPECT_EQ(ucp_worker_get_address(worker_, &a, &n), UCS_OK);
    address_.assign(reinterpret_cast<const std::byte*>(a),
                    reinterpret_cast<const std::byte*>(a) + n);
    ucp_worker_release_address(worker_, a);
    if (!progress) return;
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        {
          std::lock_guard lock(mu_);
          while (ucp_worker_progress(worker_) != 0) {
          }
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));  // pacing, not synchronisation
      }
    });
  }
  ~UcxFakePeer() { vanish(); }

  const std::vector<std::byte>& address() const { return address_; }

  void connect(const std::vector<std::byte>& channel_address) {
    std::lock_guard lock(mu_);
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep.address = reinterpret_cast<const ucp_address_t*>(channel_address.data());
    // As a channel's first endpoint, the one its hello takes: error mode "peer" (UCX pairs the
    // endpoints two workers open to each other in order, and refuses a pair whose modes differ).
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ASSERT_EQ(ucp_ep_create(worker_, &ep, &ep_), UCS_OK);
  }

  // One active message: the channel header (its rank, `seq`) in front of `frame`'s head, the
  // rest of `frame` as the payload.
  // `gone_ok`: the channel may have closed its side already (after it failed this peer), so
  // UCX may refuse the send: that too is a message the channel never takes.
  void send_frame(std::uint64_t seq, const std::vector<std::byte>& frame, bool gone_ok = false) {
    const WirePrefix pre = decode_wire_prefix(std::span(frame).first(kWirePrefixBytes));
    const std::size_t head = kWirePrefixBytes + pre.meta_bytes;
    std::vector<std::byte> header(kUcxHeaderBytes);
    put(header, 0, kUcxHeaderMagic, 4);
    put(header, 4, rank_, 4);
    put(header, 8, seq, 8);
    header.insert(header.end(), frame.begin(), frame.begin() + static_cast<std::ptrdiff_t>(head));
    send_raw(header, {frame.begin() + static_cast<std::ptrdiff_t>(head), frame.end()}, gone_ok);
  }
  void hello() { send_frame(0, encode_wire_hello({job_, rank_, 0, 1, nonce_})); }
  // Its proof to rank 0, over the channel's hello's nonce (waited for), made with `c`.
  void prove(const JobCredentials& c) {
    send_frame(0, encode_wire_proof({nonce_, make_proof(c.token, context(c, channel_nonce()))}));
  }
  void handshake(const JobCredentials& c) {
    hello();
    prove(c);
  }
  // The proof context of this fake's proof to rank 0 when the channel's nonce is `theirs`.
  ProofContext context(const JobCredentials& c, const JobNonce& theirs) const {
    return {ProofPurpose::kDataUcx, c.job, rank_, 0, 0, nonce_, theirs};
  }
  JobNonce nonce() const { return nonce_; }
  JobNonce channel_nonce() {
    std::optional<JobNonce> n;
    EXPECT_TRUE(eventually([&] {
      std::lock_guard lock(kept_mu_);
      n = channel_hello_;
      return n.has_value();
    }));
    return n.value_or(JobNonce{});
  }
  // The channel's proof to this fake, once it came.
  std::optional<WireProof> channel_proof() {
    std::optional<WireProof> got;
    (void)eventually([&] {
      std::lock_guard lock(kept_mu_);
      got = channel_proof_;
      return got.has_value();
    });
    return got;
  }

  void send_raw(const std::vector<std::byte>& header, const std::vector<std::byte>& payload,
                bool gone_ok = false) {
    void* r = nullptr;
    {
      std::lock_guard lock(mu_);
      ucp_request_param_t prm{};
      r = ucp_am_send_nbx(ep_, kUcxAmId, header.data(), header.size(), payload.data(),
                          payload.size(), &prm);
    }
    if (UCS_PTR_IS_ERR(r)) {
      if (!gone_ok) FAIL() << "ucp_am_send_nbx: " << ucs_status_string(UCS_PTR_STATUS(r));
      return;
    }
    if (r == nullptr) return;
    ASSERT_TRUE(eventually([&] {
      std::lock_guard lock(mu_);
      return ucp_request_check_status(r) != UCS_INPROGRESS;
    }));
    std::lock_guard lock(mu_);
    ucp_request_free(r);
  }

  // Gone without a goodbye: the endpoint closed by force, the worker destroyed.
  void vanish() {
    if (worker_ == nullptr) return;
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
    drain_wireup();
    if (ep_ != nullptr) {
      ucp_request_param_t prm{};
      prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      prm.flags = UCP_EP_CLOSE_FLAG_FORCE;
      void* r = ucp_ep_close_nbx(ep_, &prm);
      if (UCS_PTR_IS_PTR(r)) {
        while (ucp_request_check_status(r) == UCS_INPROGRESS) ucp_worker_progress(worker_);
        ucp_request_free(r);
      }
      ep_ = nullptr;
    }
    ucp_worker_destroy(worker_);
    worker_ = nullptr;
    ucp_cleanup(context_);
  }

 private:
  // The worker's wire-up messages still queued leave before it goes: UCX 1.13 aborts when a
  // worker is destroyed with a wire-up reply pending ("got REP message", ucp_request.c:684),
  // which the handshake's last exchange can leave behind (a quarter of the runs under
  // ThreadSanitizer). The vanishing is the same to the channel: no goodbye, a dead endpoint.
  void drain_wireup() {
    ucp_request_param_t prm{};
    void* r = ucp_worker_flush_nbx(worker_, &prm);
    if (!UCS_PTR_IS_PTR(r)) return;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (ucp_request_check_status(r) == UCS_INPROGRESS &&
           std::chrono::steady_clock::now() < deadline) {
      ucp_worker_progress(worker_);
    }
    if (ucp_request_check_status(r) == UCS_INPROGRESS) ucp_request_cancel(worker_, r);
    ucp_request_free(r);
  }

  static void put(std::vector<std::byte>& b, std::size_t at, std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) b[at + i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
  }

  // Inside the worker's progress (mu_ held): a hello's nonce or a proof from the channel.
  void keep(std::span<const std::byte> header) {
    if (header.size() < kUcxHeaderBytes + kWirePrefixBytes) return;
    const auto frame = header.subspan(kUcxHeaderBytes);
    try {
      const WirePrefix pre = decode_wire_prefix(frame.first(kWirePrefixBytes));
      const auto meta = frame.subspan(kWirePrefixBytes);
      std::lock_guard lock(kept_mu_);
      if (pre.kind == WireFrameKind::hello) channel_hello_ = decode_wire_hello(meta).nonce;
      if (pre.kind == WireFrameKind::proof) channel_proof_ = decode_wire_proof(meta);
    } catch (const WireError&) {
    }
  }

  std::mutex mu_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_ep_h ep_ = nullptr;
  std::vector<std::byte> address_;
  std::uint64_t job_;
  std::uint32_t rank_ = 1;
  JobNonce nonce_ = fresh_nonce();
  std::mutex kept_mu_;
  std::optional<JobNonce> channel_hello_;
  std::optional<WireProof> channel_proof_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace tandem::transport::testing
