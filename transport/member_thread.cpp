#include "transport/member_thread.hpp"

#include <fmt/format.h>

#include <exception>
#include <utility>

#include "runtime/log.hpp"
#include "transport/collective_group.hpp"

namespace tandem::transport {

std::string round_text(std::string_view library, std::span<const Endpoint> group, Endpoint member,
                       std::int64_t round) {
  return fmt::format("{} all-reduce round {} among {{{}}} as endpoint {}", library, round,
                     members_text(group, ","), member);
}

MemberThread::MemberThread(std::string library, std::vector<Endpoint> group, Endpoint endpoint,
                           Rounds& rounds, std::function<void(const std::string&)> on_error)
    : library_(std::move(library)),
      group_(std::move(group)),
      endpoint_(endpoint),
      rounds_(rounds),
      on_error_(std::move(on_error)),
      thread_([this] { run(); }) {}

MemberThread::~MemberThread() {
  stop();
  join();
}

std::optional<std::string> MemberThread::submit(MemberRound round) {
  std::lock_guard lock(mu_);
  if (!error_.empty()) return error_;
  queue_.push_back(std::move(round));
  cv_.notify_one();
  return std::nullopt;
}

void MemberThread::stop() {
  std::lock_guard lock(mu_);
  stop_ = true;
  cv_.notify_one();
}

void MemberThread::join() {
  if (thread_.joinable()) thread_.join();
}

void MemberThread::run() {
  for (;;) {
    MemberRound round;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) break;
      round = std::move(queue_.front());
      queue_.pop_front();
    }
    const std::optional<std::string> failure = attempt(round);
    if (!failure) continue;
    tandem::log::error("{}", *failure);
    {
      std::lock_guard lock(mu_);
      error_ = *failure;
      queue_.clear();
    }
    if (on_error_) on_error_(*failure);
    rounds_.failed();
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return stop_; });
    break;
  }
  rounds_.stopped();
}

std::optional<std::string> MemberThread::attempt(MemberRound& round) {
  std::string step = "connecting";
  try {
    rounds_.reduce(round, step);
    step = "completing";
    round.done();
  } catch (const std::exception& e) {
    return fmt::format("{}: {} failed: {}", round_text(library_, group_, endpoint_, round.round),
                       step, e.what());
  }
  return std::nullopt;
}

}  // namespace tandem::transport
