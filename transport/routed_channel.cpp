#include "transport/routed_channel.hpp"

#include <fmt/format.h>

#include <limits>
#include <stdexcept>

#include "runtime/log.hpp"

namespace tandem::transport {
namespace {

// Refusals reported one by one (on_error, errors(), the log); past that, only counted.
constexpr std::uint64_t kMaxRefusalReports = 100;

std::string secs(std::chrono::milliseconds d) {
  return fmt::format("{:.1f} s", std::chrono::duration<double>(d).count());
}

// What failed the work before a completed copy's event, or "".
std::string copy_error(const Event& copy) {
  const std::exception_ptr error = copy.error();
  if (!error) return {};
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

}  // namespace

// What a copy's completion callback reaches the channel through: close() (or the destructor)
// clears it, so a copy that completes later touches nothing of a channel that is gone.
struct RoutedChannel::Lifeline {
  std::mutex mu;
  RoutedChannel* channel = nullptr;
};

RoutedChannel::RoutedChannel(ActorSystem& system, RoutedChannelOptions options)
    : system_(system), options_(std::move(options)), lifeline_(std::make_shared<Lifeline>()) {
  if (!options_.staging) options_.staging = std::make_shared<SendStaging>();
  lifeline_->channel = this;
}

RoutedChannel::~RoutedChannel() {
  std::lock_guard lock(lifeline_->mu);
  lifeline_->channel = nullptr;
}

void RoutedChannel::bind(Endpoint e, Actor* actor) {
  const std::string& who = options_.channel;
  if (e < 0) throw std::invalid_argument(who + "::bind: negative endpoint");
  if (actor == nullptr) throw std::invalid_argument(who + "::bind: no actor");
  check_not_started("bind");
  if (remote_.contains(e)) {
    throw std::invalid_argument(fmt::format("{}::bind: endpoint {} is routed to a peer", who, e));
  }
  if (static_cast<std::size_t>(e) >= locals_.size()) {
    locals_.resize(static_cast<std::size_t>(e) + 1);
  }
  locals_[static_cast<std::size_t>(e)] = actor;
}

void RoutedChannel::route(Endpoint e, int peer_rank) {
  check_not_started("route");
  if (e < 0 || local(e) != nullptr) {
    throw std::invalid_argument(fmt::format(
        "{}::route: endpoint {} is negative or bound in this process", options_.channel, e));
  }
  RoutedPeer* p = routed_peer_of_rank(peer_rank);
  if (p == nullptr) {
    throw std::invalid_argument(
        fmt::format("{}::route: no peer of rank {}", options_.channel, peer_rank));
  }
  remote_[e] = p;
}

bool RoutedChannel::wait_connected(std::chrono::milliseconds timeout) {
  bool all = false;
  std::unique_lock lock(state_mu_);
  state_cv_.wait_for(lock, timeout, [this, &all] {
    all = true;
    for (RoutedPeer* p : peers_) {
      std::lock_guard pl(p->mu);
      if (p->failed) {
        all = false;
        return true;
      }
      all = all && p->connected;
    }
    return all;
  });
  return all;
}

std::vector<ChannelError> RoutedChannel::errors() const {
  std::lock_guard lock(errors_mu_);
  return errors_;
}

std::size_t RoutedChannel::max_head_bytes() const {
  return std::numeric_limits<std::size_t>::max();
}

bool RoutedChannel::stages_for(const RoutedPeer&) const {
  return true;
}

void RoutedChannel::add_routed_peer(RoutedPeer& peer) {
  check_not_started("add_peer");
  if (peer.rank == options_.rank || peer.rank < 0 || routed_peer_of_rank(peer.rank) != nullptr) {
    throw std::invalid_argument(
        fmt::format("{}::add_peer: rank {} is this process, negative or added twice",
                    options_.channel, peer.rank));
  }
  peers_.push_back(&peer);
}

RoutedPeer* RoutedChannel::routed_peer_of_rank(int rank) const {
  for (RoutedPeer* p : peers_) {
    if (p->rank == rank) return p;
  }
  return nullptr;
}

Actor* RoutedChannel::local(Endpoint e) const {
  if (e < 0 || static_cast<std::size_t>(e) >= locals_.size()) return nullptr;
  return locals_[static_cast<std::size_t>(e)];
}

void RoutedChannel::check_not_started(const char* what) const {
  if (started_) throw std::logic_error(fmt::format("{}::{} after start()", options_.channel, what));
}

// Taking state_mu orders this after a waiter's check of its predicate: no lost wake-up.
void RoutedChannel::notify() {
  std::lock_guard lock(state_mu_);
  state_cv_.notify_all();
}

void RoutedChannel::report(ChannelError e, bool fatal, bool recorded) {
  e.fatal = fatal;
  tandem::log::error("{} data plane (rank {}): {}: {}", options_.transport, options_.rank, e.peer,
                     e.what);
  if (!recorded) {
    std::lock_guard lock(errors_mu_);
    errors_.push_back(e);
  }
  if (options_.on_error) options_.on_error(e);
  if (fatal && options_.stop_system_on_error) system_.stop();
}

void RoutedChannel::refusal(ChannelError e) {
  if (sends_stopped()) return;
  const std::uint64_t n = ++strangers_;
  if (n > kMaxRefusalReports) {
    if (n == kMaxRefusalReports + 1) {
      tandem::log::warn(
          "{} data plane (rank {}): more than {} refusals; further ones are counted only",
          options_.transport, options_.rank, kMaxRefusalReports);
    }
    return;
  }
  report(std::move(e), false);
}

bool RoutedChannel::mark_failed_locked(RoutedPeer& peer, const ChannelError& error, bool quiet) {
  if (peer.failed) return false;
  if (!quiet) {
    std::lock_guard lock(errors_mu_);
    errors_.push_back(error);
  }
  peer.failed = true;
  peer.connected = false;
  return true;
}

void RoutedChannel::check_incoming(const WireHead& head, const RoutedPeer& peer) const {
  const auto named = [&head] { return "data frame " + describe_wire_head(head); };
  if (local(head.to) == nullptr) {
    throw WireError(fmt::format("{}: endpoint {} is not bound in this process", named(), head.to));
  }
  auto it = remote_.find(head.from);
  if (it == remote_.end() || it->second != &peer) {
    throw WireError(
        fmt::format("{}: endpoint {} does not belong to this peer", named(), head.from));
  }
}

void RoutedChannel::deliver(Endpoint to, const Envelope& env, std::vector<Tensor> tensors) {
  ++messages_received_;
  Actor* target = local(to);
  Message m;
  m.env = env;
  m.tensors = std::move(tensors);
  m.env.target = target->id();
  // A system that stopped refuses the message (system_stopped): dropped, nothing to do.
  if (system_.send(target, std::move(m)).ok()) {
    ++delivered_;
  } else {
    ++dropped_;
  }
}

ChannelStats RoutedChannel::routed_stats() const {
  ChannelStats s;
  s.messages_sent = messages_sent_.load();
  s.messages_received = messages_received_.load();
  s.bytes_sent = bytes_sent_.load();
  s.bytes_received = bytes_received_.load();
  s.delivered = delivered_.load();
  s.dropped = dropped_.load();
  s.strangers = strangers_.load();
  s.staged = staged_.load();
  return s;
}

RoutedPeer& RoutedChannel::remote_peer(Endpoint to) const {
  auto it = remote_.find(to);
  if (it == remote_.end()) {
    throw std::out_of_range(
        fmt::format("{}: endpoint {} is neither bound nor routed", options_.channel, to));
  }
  return *it->second;
}

SendResult RoutedChannel::send(Endpoint from, Endpoint to, Message msg) {
  Actor* sender = local(from);
  if (sender == nullptr) {
    throw std::out_of_range(fmt::format("{}: endpoint {} (the sender) is not bound in this process",
                                        options_.channel, from));
  }
  if (Actor* target = local(to)) return system_.send(target, std::move(msg), sender->id());
  RoutedPeer& peer = remote_peer(to);
  std::vector<std::byte> head =
      encode_wire_head(options_.job_id, from, to, msg, options_.types, options_.max_data_bytes);
  if (head.size() > max_head_bytes()) {
    throw WireError(fmt::format(
        "data frame from endpoint {} to {}: a head of {} bytes, above the {} bytes the {} data "
        "plane carries",
        from, to, head.size(), max_head_bytes(), options_.transport));
  }
  std::vector<Event> copies;
  if (stages_for(peer)) copies = options_.staging->stage(msg);
  if (!copies.empty()) ++staged_;
  // Copies that ran already need no callback; one that failed fails the message.
  std::string failed;
  std::erase_if(copies, [&failed](const Event& e) {
    try {
      if (!e.query()) return false;
      if (failed.empty()) failed = copy_error(e);
    } catch (const std::exception& error) {
      if (failed.empty()) failed = error.what();
    }
    return true;
  });
  return stage(peer, std::move(head), std::move(msg), std::move(copies), std::move(failed));
}

SendResult RoutedChannel::stage(RoutedPeer& peer, std::vector<std::byte> head, Message msg,
                                std::vector<Event> copies, std::string failed) {
  std::lock_guard lock(peer.staging_mu);
  // Checked under the staging lock, which stop_sending's drain also takes: a message is either
  // refused or in the queue the drain waits for.
  if (sends_stopped()) return SendResult{SendStatus::system_stopped};
  if (peer.staged.empty() && copies.empty() && failed.empty()) {
    return post(peer, std::move(head), std::move(msg));
  }
  {
    std::lock_guard pl(peer.mu);
    if (peer.failed || peer.said_goodbye) return SendResult{SendStatus::target_stopped};
  }
  const std::uint64_t seq = peer.next_staged++;
  peer.staged.push_back({seq, std::move(head), std::move(msg), copies.size(), std::move(failed)});
  if (copies.empty()) post_ready(peer);
  for (const Event& copy : copies) {
    copy.on_complete([life = lifeline_, p = &peer, seq, copy] {
      std::lock_guard l(life->mu);
      if (life->channel != nullptr) life->channel->copy_done(*p, seq, copy);
    });
  }
  return SendResult{};
}

void RoutedChannel::copy_done(RoutedPeer& peer, std::uint64_t seq, const Event& copy) {
  {
    std::lock_guard lock(peer.staging_mu);
    for (StagedMessage& m : peer.staged) {
      if (m.seq != seq) continue;
      if (m.failed.empty()) m.failed = copy_error(copy);
      --m.copies_pending;
      break;
    }
    post_ready(peer);
  }
  notify();
}

void RoutedChannel::post_ready(RoutedPeer& peer) {
  while (!peer.staged.empty() && peer.staged.front().copies_pending == 0) {
    StagedMessage m = std::move(peer.staged.front());
    peer.staged.pop_front();
    if (!m.failed.empty()) {
      // The message cannot leave, and the peer would miss it: the peer fails as if its
      // connection had, and the later messages are refused by post().
      const ChannelError error{peer.rank, peer.name,
                               "copying a device tensor to host memory failed: " + m.failed};
      bool first = false;
      {
        std::lock_guard pl(peer.mu);
        first = mark_failed_locked(peer, error, false);
      }
      if (first) report(error, true, true);
      continue;
    }
    // A refusal here means the peer failed (reported) or the channel closed without waiting.
    (void)post(peer, std::move(m.head), std::move(m.msg));
  }
}

void RoutedChannel::stop_sending(std::chrono::milliseconds timeout) {
  sends_stopped_.store(true);
  std::unique_lock lock(state_mu_);
  const bool drained = state_cv_.wait_for(lock, timeout, [this] {
    for (RoutedPeer* p : peers_) {
      std::lock_guard pl(p->staging_mu);
      if (!p->staged.empty()) return false;
    }
    return true;
  });
  lock.unlock();
  if (!drained) {
    tandem::log::warn("{} data plane (rank {}): closing with device copies still pending after {}",
                      options_.transport, options_.rank, secs(timeout));
  }
  std::lock_guard l(lifeline_->mu);
  lifeline_->channel = nullptr;
}

}  // namespace tandem::transport
