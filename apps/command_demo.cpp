// `tandem demo`: a self-test of the actor runtime that prints a measured result.
#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstdint>

#include "apps/commands.hpp"
#include "runtime/actor_system.hpp"

namespace tandem::apps {
namespace {

struct Ball {
  static constexpr std::string_view kName = "demo.ball";
  std::uint64_t remaining;
};

class Player final : public Actor {
 public:
  Player(std::string name, std::atomic<bool>* done) : Actor(std::move(name)), done_(done) {}
  Actor* peer = nullptr;

 protected:
  void on_message(Message& msg) override {
    const Ball ball = msg.as<Ball>();
    if (ball.remaining == 0) {
      done_->store(true);
      return;
    }
    if (!send(peer, Ball{ball.remaining - 1}).ok()) throw std::runtime_error("peer stopped");
  }

 private:
  std::atomic<bool>* done_;
};

void run_demo(std::uint64_t round_trips, std::size_t workers) {
  ActorSystem system(make_work_sharing({.workers = workers}));
  std::atomic<bool> done{false};
  auto* ping = system.spawn<Player>("ping", &done);
  auto* pong = system.spawn<Player>("pong", &done);
  ping->peer = pong;
  pong->peer = ping;
  const auto start = std::chrono::steady_clock::now();
  if (!system.send(ping, Ball{2 * round_trips}).ok()) throw std::runtime_error("demo: send failed");
  system.wait_idle();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!done.load()) throw std::runtime_error("demo: the ball was lost");
  fmt::print("tandem runtime self-test: {} round trips between two actors on {} worker(s)\n",
             round_trips, system.scheduler().worker_count());
  fmt::print("  {:.1f} ns per round trip, {:.2f} M messages/s, errors: {}\n",
             seconds * 1e9 / static_cast<double>(round_trips),
             2.0 * static_cast<double>(round_trips) / seconds / 1e6, system.error_count());
}

}  // namespace

void add_demo_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("demo", "Runtime self-test: actor ping-pong, prints the speed");
  static std::uint64_t round_trips = 1'000'000;
  static std::size_t workers = 2;
  cmd->add_option("--round-trips", round_trips, "Number of round trips")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1'000'000'000'000}));
  cmd->add_option("--workers", workers, "Worker threads")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1024}));
  cmd->callback([] { run_demo(round_trips, workers); });
}

}  // namespace tandem::apps
