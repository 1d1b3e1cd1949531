#include "train/elastic_door.hpp"

#include <charconv>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string_view>

#include "runtime/log.hpp"
#include "train/job_agreement_text.hpp"
#include "train/job_error.hpp"

namespace tandem::train {
namespace {

using nlohmann::json;
constexpr const char* kAssignment = "elastic/assignment";
constexpr const char* kJob = "elastic/job";        // rank 0's description, for the joiner
constexpr const char* kAnswer = "elastic/answer";  // the joiner's: empty when they agree
// How long the door waits for a joiner's answer: it compares a few dozen lines.
constexpr auto kAnswerTimeout = std::chrono::seconds(30);

std::vector<std::byte> bytes_of(const std::string& text) {
  const auto b = std::as_bytes(std::span(text.data(), text.size()));
  return {b.begin(), b.end()};
}

transport::RendezvousOptions door_options(int rank, const std::string& host, std::uint16_t port,
                                          const std::string& token) {
  transport::RendezvousOptions o;
  o.rank = rank;
  o.world_size = 2;
  o.master_host = host;
  o.master_port = port;
  o.job_token = token;
  // A joiner may wait until the job's next checkpoint: heartbeats keep both ends honest.
  o.heartbeat_timeout = std::chrono::seconds(10);
  o.log_failed_join = rank != 0;  // rank 0's door times out whenever nobody knocks
  return o;
}

int field(const json& j, const char* key, int lo, int hi) {
  if (!j.contains(key) || !j[key].is_number_integer()) {
    throw transport::RendezvousError(std::string("the job's assignment lacks '") + key + "'");
  }
  const auto v = j[key].get<std::int64_t>();
  if (v < lo || v > hi) {
    throw transport::RendezvousError(std::string("the job's assignment gives ") + key + " " +
                                     std::to_string(v) + ", outside [" + std::to_string(lo) + ", " +
                                     std::to_string(hi) + "]");
  }
  return static_cast<int>(v);
}

}  // namespace

ElasticDoor::ElasticDoor(std::string host, std::string job_token, std::vector<std::string> job)
    : host_(std::move(host)), token_(std::move(job_token)), job_(std::move(job)) {
  first_ = std::make_unique<transport::Rendezvous>(door_options(0, host_, 0, token_));
  port_ = first_->port();
  thread_ = std::thread([this] { serve(); });
}

ElasticDoor::~ElasticDoor() {
  {
    std::lock_guard lock(mu_);
    closing_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

// One joiner at a time: a control plane of two waits a few seconds for one, and again.
void ElasticDoor::serve() {
  for (;;) {
    {
      std::lock_guard lock(mu_);
      if (closing_) return;
    }
    try {
      auto door =
          first_ != nullptr
              ? std::move(first_)
              : std::make_unique<transport::Rendezvous>(door_options(0, host_, port_, token_));
      door->join(std::chrono::seconds(2));
      const std::string who = "a joiner (" + door->peers().at(1).host + ")";
      door->set(kJob, bytes_of(description_text(job_)));
      const std::vector<std::byte> answer = door->get(kAnswer, kAnswerTimeout);
      if (const std::optional<JobError> refusal = refusal_of_answer(answer, who, -1)) {
        tandem::log::warn("elastic door: {}; refused, the job goes on without it",
                          refusal->detail());
        door->shutdown(std::chrono::seconds(2));
        continue;
      }
      tandem::log::info("elastic door: {} waits to join the job", who);
      std::lock_guard lock(mu_);
      waiting_.push_back(std::move(door));
    } catch (const transport::RendezvousError&) {
      // Nobody came, a stranger was refused (the rendezvous logged it), or the port is taken
      // for now: open again, after a pause in case the door could not open at all.
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(200), [this] { return closing_; });
    }
  }
}

int ElasticDoor::claim() {
  // A joiner gone since it was let in (killed, its host lost) would leave the next generation
  // waiting for a rank that never registers: it is dropped, and the job goes on without it.
  std::vector<std::unique_ptr<transport::Rendezvous>> gone;
  int claimed = 0;
  {
    std::lock_guard lock(mu_);
    for (auto& w : waiting_) {
      if (!w->lost().empty()) {
        gone.push_back(std::move(w));
      } else {
        claimed_.push_back(std::move(w));
      }
    }
    waiting_.clear();
    claimed = static_cast<int>(claimed_.size());
  }
  for (const auto& g : gone) {
    tandem::log::warn(
        "elastic door: a joiner ({}) left before it was taken in; the job goes on "
        "without it",
        g->peers().at(1).host);
  }
  return claimed;  // `gone` closes outside the lock: a closing door waits for its peer
}

void ElasticDoor::assign(int generation, std::uint16_t port, int first_rank, int world_size) {
  std::vector<std::unique_ptr<transport::Rendezvous>> claimed;
  {
    std::lock_guard lock(mu_);
    claimed.swap(claimed_);
  }
  for (std::size_t i = 0; i < claimed.size(); ++i) {
    const std::string text = json{
        {"generation", generation},
        {"port", port},
        {"rank", first_rank + static_cast<int>(i)},
        {"world_size",
         world_size}}.dump();
    claimed[i]->set(
        kAssignment,
        std::vector<std::byte>(reinterpret_cast<const std::byte*>(text.data()),
                               reinterpret_cast<const std::byte*>(text.data()) + text.size()));
    claimed[i]->shutdown(std::chrono::seconds(10));  // waits for the joiner to read and leave
  }
}

JoinAssignment ElasticDoor::join(const std::string& host, std::uint16_t port,
                                 const std::string& job_token, std::chrono::milliseconds timeout,
                                 const std::vector<std::string>& mine) {
  transport::Rendezvous door(door_options(1, host, port, job_token));
  door.join(timeout);
  const std::vector<std::byte> job = door.get(kJob, kAnswerTimeout);
  const AgreementCheck check = check_against_rank0(
      std::string_view(reinterpret_cast<const char*>(job.data()), job.size()), mine);
  door.set(kAnswer, bytes_of(check.answer));
  if (check.refusal) {
    door.shutdown(std::chrono::seconds(2));  // after rank 0 has the answer
    throw *check.refusal;
  }
  // Until the job's next checkpoint: a day bounds it, the heartbeats end it sooner when the
  // job is gone.
  const std::vector<std::byte> bytes = door.get(kAssignment, std::chrono::hours(24));
  const json j = json::parse(std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()),
                             nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    throw transport::RendezvousError("the job's assignment is not a JSON object");
  }
  JoinAssignment a;
  a.generation = field(j, "generation", 1, 1 << 16);
  a.port = static_cast<std::uint16_t>(field(j, "port", 1, 65535));
  a.world_size = field(j, "world_size", 2, 1 << 16);
  a.rank = field(j, "rank", 1, a.world_size - 1);
  door.shutdown();
  return a;
}

}  // namespace tandem::train
