#include "train/elastic_job.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <set>
#include <stdexcept>
#include <thread>

#include "runtime/log.hpp"
#include "schedules/schedule_kind.hpp"
#include "train/checkpoint.hpp"
#include "train/config_limits.hpp"
#include "train/elastic_plan.hpp"
#include "train/job_agreement.hpp"

namespace tandem::train {
namespace {

std::string rank_list(const std::vector<transport::LostRank>& lost) {
  std::string out;
  for (const transport::LostRank& l : lost) {
    if (!out.empty()) out += ", ";
    out += "rank " + std::to_string(l.rank);
  }
  return out;
}

// "rank 2 lost at step 340" (the step where this rank saw progress).
std::string lost_line(const std::vector<transport::LostRank>& lost, int64_t step) {
  return rank_list(lost) + " lost" + (step >= 0 ? " at step " + std::to_string(step) : "");
}

// A decimal count rank 0 sent, within [lo, hi].
int count_from_rank_0(const std::string& text, int lo, int hi, const char* what) {
  int n = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size() || n < lo || n > hi) {
    throw std::runtime_error(std::string("rank 0 sent a malformed ") + what + " '" +
                             text.substr(0, 40) + "'");
  }
  return n;
}

}  // namespace

ElasticJob::ElasticJob(JobSpec job, SessionOptions options, std::unique_ptr<ProcessGroup> group,
                       JobInputs inputs)
    : job_(std::move(job)),
      options_(std::move(options)),
      inputs_(std::move(inputs)),
      group_(std::move(group)) {
  if (group_ != nullptr) group_options_ = group_->options();
  session_ = std::make_unique<Session>(job_, session_options(), inputs_);
  model_ = session_->model();
  if (group_ != nullptr && group_->rank() == 0 && job_.cluster.elastic) {
    door_ = std::make_unique<ElasticDoor>(group_options_.env.master_host,
                                          group_options_.env.job_token, joiner_job());
    tandem::log::info(
        "elastic job: late ranks join with `tandem train CONFIG --checkpoint DIR --join "
        "{}:{}` (the job's token in TANDEM_JOB_TOKEN)",
        group_options_.env.master_host, door_->port());
  }
  if (group_ != nullptr) agree_on_job(*group_, job_description(job_, *session_), "job/agree");
  if (group_ != nullptr && job_.cluster.elastic) exchange_next_port();
}

ElasticJob::ElasticJob(JobSpec job, SessionOptions options, ProcessGroupOptions group_options,
                       ElasticJoin join)
    : job_(std::move(job)), options_(std::move(options)), group_options_(std::move(group_options)) {
  if (!options_.checkpoint_dir) {
    throw std::invalid_argument(
        "a process joining a running job resumes from the job's "
        "checkpoints: give the job's checkpoint directory");
  }
  group_options_.env.master_host = join.host;
  model_ = models::Model::build(job_.model);
  const JoinAssignment a = ElasticDoor::join(join.host, join.port, group_options_.env.job_token,
                                             group_options_.join_timeout, joiner_job());
  replans_ = a.generation;
  next_port_ = a.port;
  start_generation(a.rank, a.world_size);
}

ElasticJob::~ElasticJob() = default;

std::vector<std::string> ElasticJob::joiner_job() const {
  return joiner_description(job_, *model_, options_.steps.value_or(job_.train.steps),
                            options_.checkpoint_every);
}

TrainSummary ElasticJob::run(const std::function<void(const StepRecord&)>& on_record,
                             const std::function<void(const std::string&)>& on_replan) {
  int64_t last_step = -1;  // progress reaches rank 0 alone
  const auto record = [&](const StepRecord& r) {
    last_step = std::max(last_step, r.step);
    if (on_record) on_record(r);
  };
  for (;;) {
    try {
      TrainSummary summary = session_->run(record);
      if (grow_to_ == 0) return summary;
      const std::string line = grow();
      if (on_replan) on_replan(line);
      continue;
    } catch (const std::exception& e) {
      if (group_ == nullptr || !job_.cluster.elastic) throw;
      const std::vector<transport::LostRank> lost = lost_ranks();
      if (lost.empty()) throw;
      const std::string who = lost_line(lost, last_step);
      for (const transport::LostRank& l : lost) {
        if (l.rank == 0) {
          throw std::runtime_error(who +
                                   ": rank 0 is the job's master, without which an elastic "
                                   "job cannot go on (" +
                                   std::string(e.what()) + ")");
        }
      }
      if (replans_ >= job_.cluster.max_replans) {
        throw std::runtime_error(
            who + ": the job already re-planned " + std::to_string(replans_) +
            " times (cluster.max_replans: " + std::to_string(job_.cluster.max_replans) +
            "), so it stops (" + e.what() + ")");
      }
      const std::string line = shrink(lost, last_step);
      if (on_replan) on_replan(line);
    }
  }
}

std::vector<transport::LostRank> ElasticJob::lost_ranks() const {
  // A rank's pipeline may fail on the data plane before rank 0's word of the loss arrives.
  const auto wait_until =
      [this](const std::function<bool(const std::vector<transport::LostRank>&)>& done,
             std::chrono::milliseconds extra) {
        const auto deadline =
            std::chrono::steady_clock::now() + group_options_.heartbeat_timeout + extra;
        for (;;) {
          std::vector<transport::LostRank> lost = group_->rendezvous().lost();
          if (done(lost) || std::chrono::steady_clock::now() > deadline) return lost;
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
      };
  const auto has_master = [](const std::vector<transport::LostRank>& lost) {
    return std::any_of(lost.begin(), lost.end(),
                       [](const transport::LostRank& l) { return l.rank == 0; });
  };
  std::vector<transport::LostRank> lost =
      wait_until([](const auto& l) { return !l.empty(); }, std::chrono::seconds(2));
  if (group_->rank() == 0 && !lost.empty()) lost = settled_losses(std::move(lost));
  // Rank 0 decides who was lost: the others stay on the failed control plane until rank 0
  // leaves it, after it has passed on every loss it recorded (in order, on the same
  // connection), so every survivor ends up with rank 0's list. Leaving earlier would make the
  // survivors look lost to rank 0.
  // Losses are listed in the order they happened: rank 0 first is the master itself lost.
  if (group_->rank() == 0 || lost.empty() || lost.front().rank == 0) return lost;
  lost = wait_until(has_master, std::chrono::seconds(30));
  if (!has_master(lost)) {
    throw std::runtime_error("a rank was lost, and rank 0 did not re-form the job within " +
                             std::to_string(group_options_.heartbeat_timeout.count() / 1000 + 30) +
                             " s");
  }
  std::erase_if(lost, [](const transport::LostRank& l) { return l.rank == 0; });
  return lost;
}

std::vector<transport::LostRank> ElasticJob::settled_losses(
    std::vector<transport::LostRank> lost) const {
  // Ranks lost together (killed at once, a host of several ranks gone) are noticed some
  // milliseconds apart: rank 0 decides once no loss has been added for kLossSettle, so that one
  // re-plan covers them all. Deciding on the first alone re-formed the job with a dead rank in
  // it, and the survivors waited for it until their join timed out.
  constexpr auto kLossSettle = std::chrono::milliseconds(500);
  const auto deadline = std::chrono::steady_clock::now() + group_options_.heartbeat_timeout;
  auto quiet_since = std::chrono::steady_clock::now();
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    if (now - quiet_since >= kLossSettle || now >= deadline) return lost;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::vector<transport::LostRank> again = group_->rendezvous().lost();
    if (again.size() != lost.size()) {
      lost = std::move(again);
      quiet_since = std::chrono::steady_clock::now();
    }
  }
}

std::string ElasticJob::shrink(const std::vector<transport::LostRank>& lost, int64_t at_step) {
  std::set<int> gone;
  for (const transport::LostRank& l : lost) gone.insert(l.rank);
  const int old_world = group_->world_size(), old_rank = group_->rank();
  std::vector<int> survivors;
  for (int r = 0; r < old_world; ++r) {
    if (gone.count(r) == 0) survivors.push_back(r);
  }
  const auto me = std::find(survivors.begin(), survivors.end(), old_rank);
  {
    std::lock_guard lock(mu_);
    session_.reset();  // it runs over the failed group
  }
  group_.reset();  // leaves the failed control plane (the others see it closed, as expected)
  ++replans_;
  start_generation(static_cast<int>(me - survivors.begin()), static_cast<int>(survivors.size()));
  return lost_line(lost, at_step) + "; re-planned " + std::to_string(old_world) + " -> " +
         std::to_string(survivors.size()) + " ranks (stages " + describe_cut(session_->plan()) +
         "); resuming from step " + std::to_string(session_->first_step());
}

std::string ElasticJob::grow() {
  const int old_world = group_ != nullptr ? group_->world_size() : 1;
  const int rank = group_ != nullptr ? group_->rank() : 0;
  const int world = grow_to_;
  grow_to_ = 0;
  {
    std::lock_guard lock(mu_);
    session_.reset();
  }
  // Every rank leaves the old control plane in order; the joiners learn where the new one is.
  if (group_ != nullptr) group_->shutdown();
  group_.reset();
  ++replans_;
  if (door_ != nullptr) door_->assign(replans_, next_port_, old_world, world);
  start_generation(rank, world);
  return "took in " + std::to_string(world - old_world) + " rank" +
         (world - old_world == 1 ? "" : "s") + " at step " +
         std::to_string(session_->first_step()) + "; re-planned " + std::to_string(old_world) +
         " -> " + std::to_string(world) + " ranks (stages " + describe_cut(session_->plan()) +
         "); resuming from step " + std::to_string(session_->first_step());
}

void ElasticJob::start_generation(int rank, int world) {
  // Every rank computes and checks the same plan before it joins the new control plane.
  job_ = replan_job(job_, model_->num_layers(), world);
  check_replan_fits(job_, *model_, Machine::here().memory_bytes);
  if (world > 1) {
    ProcessGroupOptions o = group_options_;
    o.env.rank = rank;
    o.env.world_size = world;
    o.env.master_port = next_port_;
    next_reservation_.reset();  // rank 0's new control plane listens there now
    group_ = std::make_unique<ProcessGroup>(std::move(o));
  }
  SessionOptions o = session_options();
  if (options_.checkpoint_dir && latest_checkpoint(*options_.checkpoint_dir)) {
    o.resume = *options_.checkpoint_dir;
  }
  auto session = std::make_unique<Session>(job_, o, inputs_);
  if (!session->checkpoint_note().empty())
    tandem::log::info("elastic job: {}", session->checkpoint_note());
  announce_plan(*session);
  exchange_next_port();
  std::lock_guard lock(mu_);
  session_ = std::move(session);
  if (stop_requested_) session_->request_stop();
}

SessionOptions ElasticJob::session_options() {
  SessionOptions o = options_;
  o.group = group_.get();
  // A re-plan may move the stop boundaries under the interval the job was started with.
  o.round_checkpoint_every = job_.cluster.elastic;
  if (job_.cluster.elastic && replans_ < job_.cluster.max_replans) {
    o.end_after_checkpoint = [this](int segment, int64_t) { return decide_growth(segment); };
  }
  return o;
}

bool ElasticJob::decide_growth(int segment) {
  const bool master = group_ == nullptr || group_->rank() == 0;
  if (master) {
    const int world = group_ != nullptr ? group_->world_size() : 1;
    const int joiners = door_ != nullptr ? door_->claim() : 0;
    grow_to_ = joiners > 0 ? world + joiners : 0;
  }
  if (group_ != nullptr) {
    const std::string key =
        "elastic/" + std::to_string(replans_) + "/grow/" + std::to_string(segment);
    grow_to_ = count_from_rank_0(group_->broadcast_text(key, std::to_string(grow_to_)), 0, 1 << 16,
                                 "growth decision");
  }
  return grow_to_ > 0;
}

void ElasticJob::announce_plan(const Session& session) {
  if (group_ == nullptr) return;
  const std::string mine = std::string(schedules::to_string(session.plan().schedule.kind)) +
                           " stages " + describe_cut(session.plan());
  const std::string theirs =
      group_->broadcast_text("elastic/" + std::to_string(replans_) + "/plan", mine);
  if (theirs != mine) {
    throw std::runtime_error("after re-plan " + std::to_string(replans_) + " rank 0 runs '" +
                             theirs.substr(0, 200) + "', this rank computed '" + mine +
                             "': the ranks disagree on who was lost");
  }
}

void ElasticJob::exchange_next_port() {
  if (group_ == nullptr || group_->rank() == 0) {
    next_reservation_ = std::make_unique<PortReservation>(group_options_.env.master_host);
    next_port_ = next_reservation_->port();
  }
  if (group_ == nullptr) return;
  const std::string key = "elastic/" + std::to_string(replans_) + "/next-port";
  next_port_ = static_cast<std::uint16_t>(count_from_rank_0(
      group_->broadcast_text(key, std::to_string(next_port_)), 1, 65535, "next generation's port"));
}

void ElasticJob::request_stop() {
  std::lock_guard lock(mu_);
  stop_requested_ = true;
  if (session_) session_->request_stop();
}

void ElasticJob::shutdown() {
  if (group_ != nullptr) group_->shutdown();
}

}  // namespace tandem::train
