#include "train/process_group.hpp"

#include <algorithm>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/ip/udp.hpp>
#include <charconv>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>
#include <utility>

#include "actors/pipeline_wire_types.hpp"
#include "transport/control_frame.hpp"
#include "transport/cuda_ipc_channel.hpp"
#include "transport/cuda_ipc_choice.hpp"
#include "transport/cuda_ipc_memory.hpp"
#include "transport/gloo_collectives.hpp"
#include "transport/nccl_collectives.hpp"
#include "transport/tcp_channel.hpp"
#include "transport/ucx_data_plane.hpp"
#include "transport/wire_message.hpp"

namespace tandem::train {
namespace {

// Values travel through the control plane's key-value store in pieces below its limit.
constexpr std::size_t kPieceBytes = std::size_t{4} << 20;
// How long a process told that it stalled waits for its pipeline to stop before it exits.
constexpr std::chrono::milliseconds kStalledExitGrace{10000};

// At most 1 TiB in one value: a count beyond is not one a rank of this job published.
constexpr std::size_t kMaxPieces = std::size_t{1} << 18;

// A decimal count of at most `max`, the whole text and nothing else; nullopt otherwise.
std::optional<std::size_t> parse_count(const std::string& text, std::size_t max) {
  std::size_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty() || v > max) {
    return std::nullopt;
  }
  return v;
}

// The local address of the route to `host`: what the master's network reaches this process
// at. A UDP connect picks the route without sending anything.
std::string route_address(const std::string& host, std::uint16_t port) {
  try {
    asio::io_context io;
    asio::ip::udp::resolver resolver(io);
    const auto results = resolver.resolve(host, std::to_string(port));
    asio::ip::udp::socket s(io);
    const asio::ip::udp::endpoint to = *results.begin();
    s.open(to.protocol());
    s.connect(to);
    return s.local_endpoint().address().to_string();
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot find this machine's address towards the master " + host +
                             ": " + e.what() + " (set TANDEM_HOST to this process's address)");
  }
}

std::vector<std::byte> text_bytes(const std::string& s) {
  std::vector<std::byte> out(s.size());
  if (!s.empty()) std::memcpy(out.data(), s.data(), s.size());
  return out;
}

std::string bytes_text(const std::vector<std::byte>& b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

// cluster.collectives: nccl when asked for, or for "auto" when every replica of every
// replicated stage computes on a cuda device and NCCL was built (Gloo reduces host memory only).
// `reduced`: the stages whose gradients an all-reduce joins besides their replicas' (tied ones).
bool use_nccl(const std::string& choice, const schedules::Plan& plan,
              const std::vector<int>& reduced) {
  if (choice == "nccl") return true;
  if (choice != "auto") return false;
  bool any = false;
  for (std::size_t s = 0; s < plan.stages.size(); ++s) {
    const schedules::StagePlan& stage = plan.stages[s];
    if (stage.replicas.size() < 2 &&
        std::find(reduced.begin(), reduced.end(), static_cast<int>(s)) == reduced.end()) {
      continue;
    }
    for (const schedules::Placement& r : stage.replicas) {
      if (!Device::parse(r.device).is_cuda()) return false;
    }
    any = true;
  }
  // Asked last, since asking loads the CUDA plugin (runtime/plugin.hpp).
  return any && transport::nccl_available();
}

// What choose_data_plane needs of a job before any channel exists: every stage on a cuda
// device, and (from the control plane) every rank on one host.
bool stages_on_cuda(const schedules::Plan& plan) {
  for (const schedules::StagePlan& stage : plan.stages) {
    for (const schedules::Placement& r : stage.replicas) {
      if (!Device::parse(r.device).is_cuda()) return false;
    }
  }
  return !plan.stages.empty();
}

// The cuda device of the first stage replica `rank` runs (stage replica d is endpoint d), or 0.
// The stages that hold copies of one tied parameter and run in different processes from another
// such stage: their SYNC's all-reduce of the copies' gradients (actors/stage_ties.hpp) then
// crosses processes, as a stage's replicas' does when they span processes.
std::vector<int> ties_across_processes(const actors::PipelineSpec& spec,
                                       const ProcessPlacement& placement) {
  std::vector<int> out;
  const schedules::ScheduleParams& p = spec.plan.schedule;
  for (const std::vector<int>& stages : actors::spread_tie_stages(spec)) {
    bool across = false;
    for (const int s : stages) {
      for (int r = 0; r < p.replicas_of(s); ++r) {
        across = across || placement.rank_of(p.device_of(s, r)) !=
                               placement.rank_of(p.device_of(stages[0], 0));
      }
    }
    if (across) out.insert(out.end(), stages.begin(), stages.end());
  }
  return out;
}

int first_cuda_device(const schedules::Plan& plan, const ProcessPlacement& placement, int rank) {
  transport::Endpoint e = 0;
  for (const schedules::StagePlan& stage : plan.stages) {
    for (const schedules::Placement& r : stage.replicas) {
      const Device d = Device::parse(r.device);
      if (placement.rank_of(e++) == rank && d.is_cuda()) return d.index();
    }
  }
  return 0;
}

}  // namespace

struct ProcessGroup::Impl {
  ProcessGroupOptions opt;
  std::unique_ptr<transport::Rendezvous> rendezvous;
  std::mutex mu;
  actors::Pipeline* watched = nullptr;  // guarded by mu
  GroupFailure first_failure;           // guarded by mu
  const ProcessPlacement* placement = nullptr;
  // The channel of the pipeline being prepared (owned by it): one of the two.
  transport::TcpChannel* tcp = nullptr;
  transport::UcxDataPlane* ucx = nullptr;
  transport::CudaIpcChannel* ipc = nullptr;
  std::unique_ptr<transport::Collectives> collectives;
  std::string address_key;  // where this rank published its data-plane address this segment
  bool shut_down = false;

  std::uint64_t completed_before = 0;  // guarded by mu: progress of earlier segments

  // Armed when this rank is told it stalled while a pipeline runs: the process ends unless
  // that pipeline stops within the grace. An embedding service whose run then fails goes on.
  struct ExitWatch {
    std::mutex mu;
    std::condition_variable cv;
    bool disarmed = false;  // guarded by mu
    void disarm() {
      {
        std::lock_guard lock(mu);
        disarmed = true;
      }
      cv.notify_all();
    }
  };
  std::shared_ptr<ExitWatch> exit_watch;  // guarded by mu

  // From the control plane's or the data plane's thread.
  void failed(GroupFailure::Kind kind, int rank, const std::string& why) {
    std::lock_guard lock(mu);
    if (first_failure.kind == GroupFailure::Kind::none) first_failure = {kind, rank, why};
    if (watched != nullptr) watched->stop_with_error(first_failure.text);
  }

  // For the heartbeats, on the control plane's thread: the pipeline of this segment, or idle
  // between segments (never a stall).
  transport::RankProgress progress() {
    std::lock_guard lock(mu);
    if (watched == nullptr) return {completed_before, false, {}};
    const actors::PipelineProgress p = watched->progress();
    return {completed_before + p.completed, p.has_work, p.waiting_for};
  }

  void on_lost(const transport::LostRank& l) {
    const bool me = l.rank == opt.env.rank;
    const std::string who = "rank " + std::to_string(l.rank) + " (" + l.host + ")";
    // "stalled: ..." (alive, of no use) reads as what the rank did; anything else lost it.
    const bool stalled = l.reason.starts_with("stalled");
    failed(stalled ? GroupFailure::Kind::stalled : GroupFailure::Kind::lost, l.rank,
           (me        ? "this process, "
            : stalled ? ""
                      : "lost ") +
               who + (stalled ? " " : ": ") + l.reason);
    if (me) exit_unless_stopped(kStalledExitGrace);
  }

  // A rank that dies mid-reduce usually surfaces first in the collectives, as a reset
  // connection naming an address rather than a rank. The control plane names the lost rank
  // within a heartbeat timeout, so the collectives' error waits that long for it to come first.
  void collectives_failed(const std::string& why) {
    const auto deadline = std::chrono::steady_clock::now() + 2 * opt.heartbeat_timeout;
    while (first_failure_now().empty() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    failed(GroupFailure::Kind::collectives, -1, "collectives: " + why);
  }

  // A stalled rank's own pipeline may never stop (its kernel or worker is stuck): the process
  // ends itself if it has not, so no rank of the job hangs. A pipeline already released (its
  // run over) needs no watch.
  void exit_unless_stopped(std::chrono::milliseconds grace) {
    std::shared_ptr<ExitWatch> watch;
    {
      std::lock_guard lock(mu);
      if (watched == nullptr || exit_watch != nullptr) return;
      exit_watch = std::make_shared<ExitWatch>();
      watch = exit_watch;
    }
    std::thread([grace, watch, why = first_failure_now()] {
      std::unique_lock lock(watch->mu);
      if (watch->cv.wait_for(lock, grace, [&] { return watch->disarmed; })) return;
      std::fprintf(stderr, "tandem: error: %s; its pipeline did not stop within %lld s\n",
                   why.c_str(), static_cast<long long>(grace.count() / 1000));
      std::fflush(stderr);
      std::_Exit(1);
    }).detach();
  }

  // The watched pipeline stopped: a stalled rank's exit is called off.
  void disarm_exit() {
    std::shared_ptr<ExitWatch> watch;
    {
      std::lock_guard lock(mu);
      watch = std::move(exit_watch);
    }
    if (watch) watch->disarm();
  }

  std::string first_failure_now() {
    std::lock_guard lock(mu);
    return first_failure.text;
  }
};

ProcessGroup::ProcessGroup(ProcessGroupOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.opt = std::move(options);
  if (m.opt.host.empty()) m.opt.host = route_address(m.opt.env.master_host, m.opt.env.master_port);
  transport::RendezvousOptions ro;
  ro.rank = m.opt.env.rank;
  ro.world_size = m.opt.env.world_size;
  ro.master_host = m.opt.env.master_host;
  ro.master_port = m.opt.env.master_port;
  ro.job_token = m.opt.env.job_token;
  ro.host_name = m.opt.host;
  ro.heartbeat_timeout = m.opt.heartbeat_timeout;
  ro.heartbeat_interval = std::max(std::chrono::milliseconds(50), m.opt.heartbeat_timeout / 6);
  ro.on_lost = [&m](const transport::LostRank& l) { m.on_lost(l); };
  ro.progress = [&m] { return m.progress(); };
  ro.stall_timeout = m.opt.stall_timeout;
  m.rendezvous = std::make_unique<transport::Rendezvous>(std::move(ro));
  m.rendezvous->join(m.opt.join_timeout);
}

ProcessGroup::~ProcessGroup() {
  // The collectives' threads go before the rendezvous their store uses.
  impl_->collectives.reset();
}

int ProcessGroup::rank() const {
  return impl_->opt.env.rank;
}
int ProcessGroup::world_size() const {
  return impl_->opt.env.world_size;
}
const std::string& ProcessGroup::host() const {
  return impl_->opt.host;
}
const ProcessGroupOptions& ProcessGroup::options() const {
  return impl_->opt;
}
transport::Rendezvous& ProcessGroup::rendezvous() {
  return *impl_->rendezvous;
}

std::string ProcessGroup::describe(int r) const {
  const auto& peers = impl_->rendezvous->peers();
  const std::string host =
      r >= 0 && r < static_cast<int>(peers.size()) ? peers[static_cast<size_t>(r)].host : "?";
  return "rank " + std::to_string(r) + " (" + host + ")";
}

void ProcessGroup::prepare(actors::PipelineSpec& spec, const ProcessPlacement& placement,
                           int segment) {
  Impl& m = *impl_;
  m.placement = &placement;
  m.tcp = nullptr;
  m.ucx = nullptr;
  m.ipc = nullptr;
  m.collectives.reset();
  const int me = rank();
  transport::DataPlaneFacts facts;
  facts.stages_on_cuda = stages_on_cuda(spec.plan);
  // Asked only where it matters, since asking loads the CUDA plugin (runtime/plugin.hpp).
  facts.cuda_built =
      (facts.stages_on_cuda || m.opt.transport == "cuda-ipc") && transport::cuda_ipc_built();
  const auto& peers = m.rendezvous->peers();
  facts.one_host = std::all_of(peers.begin(), peers.end(),
                               [&peers](const auto& p) { return p.host == peers.front().host; });
  const transport::DataPlane plane = transport::choose_data_plane(m.opt.transport, facts);
  const int device = first_cuda_device(spec.plan, placement, me);
  spec.hosts = [&placement, me](transport::Endpoint e) { return placement.rank_of(e) == me; };
  spec.make_channel = [&m, me, plane,
                       device](ActorSystem& system) -> std::unique_ptr<transport::ActorChannel> {
    if (plane == transport::DataPlane::cuda_ipc) {
      transport::CudaIpcChannelOptions o;
      o.credentials = m.rendezvous->credentials();
      o.rank = me;
      o.listen_host = m.opt.host;
      o.types = actors::pipeline_wire_types();
      o.device = device;
      o.stop_system_on_error = false;
      o.on_error = [&m](const transport::ChannelError& e) {
        if (e.peer_rank >= 0 && e.fatal)
          m.failed(GroupFailure::Kind::lost, e.peer_rank,
                   "lost " + e.peer + ": data plane: " + e.what);
      };
      auto ch = std::make_unique<transport::CudaIpcChannel>(system, std::move(o));
      m.ipc = ch.get();
      return ch;
    }
    if (plane == transport::DataPlane::ucx) {
      transport::UcxChannelOptions o;
      o.credentials = m.rendezvous->credentials();
      o.rank = me;
      o.types = actors::pipeline_wire_types();
      o.stop_system_on_error = false;
      o.on_error = [&m](const transport::ChannelError& e) {
        if (e.peer_rank >= 0 && e.fatal)
          m.failed(GroupFailure::Kind::lost, e.peer_rank,
                   "lost " + e.peer + ": data plane: " + e.what);
      };
      std::unique_ptr<transport::UcxDataPlane> ch =
          transport::make_ucx_channel(system, std::move(o));
      m.ucx = ch.get();
      return ch;
    }
    transport::TcpChannelOptions o;
    o.credentials = m.rendezvous->credentials();
    o.rank = me;
    o.listen_host = m.opt.host;
    o.lanes = m.opt.tcp_lanes;
    o.types = actors::pipeline_wire_types();
    // The group stops the run itself, with the reason, rather than the bare system stop.
    o.stop_system_on_error = false;
    o.on_error = [&m](const transport::ChannelError& e) {
      // A known peer whose connection fails is gone for this job (crashed, or sent what
      // cannot be trusted); a stranger's garbage is only logged by the channel.
      if (e.peer_rank >= 0)
        m.failed(GroupFailure::Kind::lost, e.peer_rank,
                 "lost " + e.peer + ": data plane: " + e.what);
    };
    auto ch = std::make_unique<transport::TcpChannel>(system, std::move(o));
    m.tcp = ch.get();
    return ch;
  };
  std::vector<int> tied = ties_across_processes(spec, placement);
  // Global clipping's SYNC all-reduces the norm among every stage, across processes too.
  if (actors::global_norm_sync(spec) && placement.world_size() > 1) {
    tied.clear();
    for (int s = 0; s < spec.plan.schedule.stages; ++s) tied.push_back(s);
  }
  const bool across = placement.replicas_span_processes() || !tied.empty();
  if (across && use_nccl(m.opt.collectives, spec.plan, tied)) {
    transport::NcclCollectivesOptions no;
    no.key_prefix = "nccl/" + std::to_string(segment);
    no.on_error = [&m](const std::string& why) { m.collectives_failed(why); };
    m.collectives = transport::make_nccl_collectives(*m.rendezvous, std::move(no));
    spec.collectives = m.collectives.get();
  } else if (across) {
    transport::GlooCollectivesOptions go;
    go.hostname = m.opt.host;
    go.key_prefix = "gloo/" + std::to_string(segment);
    go.on_error = [&m](const std::string& why) { m.collectives_failed(why); };
    m.collectives = std::make_unique<transport::GlooCollectives>(*m.rendezvous, std::move(go));
    spec.collectives = m.collectives.get();
  }
}

GroupFailure ProcessGroup::first_failure() const {
  std::lock_guard lock(impl_->mu);
  return impl_->first_failure;
}

void ProcessGroup::connect(actors::Pipeline& pipeline, int segment) {
  Impl& m = *impl_;
  if (m.tcp == nullptr && m.ucx == nullptr && m.ipc == nullptr) {
    throw std::logic_error("ProcessGroup::connect before prepare");
  }
  {
    std::lock_guard lock(m.mu);
    m.watched = &pipeline;
    if (m.first_failure.kind != GroupFailure::Kind::none) {
      pipeline.stop_with_error(m.first_failure.text);
    }
  }
  try {
    connect_channel(segment);
  } catch (...) {
    release();
    throw;
  }
}

void ProcessGroup::connect_channel(int segment) {
  Impl& m = *impl_;
  // Each rank publishes where its channel is reached (tcp, cuda-ipc: "host port"; ucx: its
  // worker's address) under a key of this segment, then reads the others'.
  const char* plane = m.ucx != nullptr ? "ucx/" : m.ipc != nullptr ? "ipc/" : "tcp/";
  const std::string prefix = plane + std::to_string(segment) + "/";
  m.address_key = prefix + std::to_string(rank());
  const std::uint16_t port = m.ipc != nullptr   ? m.ipc->port()
                             : m.tcp != nullptr ? m.tcp->port()
                                                : 0;
  m.rendezvous->set(m.address_key, m.ucx != nullptr
                                       ? m.ucx->worker_address()
                                       : text_bytes(host() + " " + std::to_string(port)));
  for (int r = 0; r < world_size(); ++r) {
    if (r == rank()) continue;
    std::vector<std::byte> addr = m.rendezvous->get(prefix + std::to_string(r), m.opt.join_timeout);
    const std::string peer_host = impl_->rendezvous->peers().at(static_cast<size_t>(r)).host;
    if (m.ucx != nullptr) {
      m.ucx->add_peer({r, peer_host, std::move(addr)});
      continue;
    }
    const std::string text = bytes_text(addr);
    const auto space = text.rfind(' ');
    const std::optional<std::size_t> peer_port =
        space == std::string::npos ? std::nullopt : parse_count(text.substr(space + 1), 65535);
    if (!peer_port || *peer_port == 0) {
      throw std::runtime_error("rank " + std::to_string(r) + " published a malformed address '" +
                               transport::printable(text) + "'");
    }
    const auto p = static_cast<std::uint16_t>(*peer_port);
    if (m.ipc != nullptr) {
      m.ipc->add_peer({r, text.substr(0, space), p});
    } else {
      m.tcp->add_peer({r, text.substr(0, space), p});
    }
  }
  transport::RoutedChannel& channel =
      m.ucx != nullptr   ? static_cast<transport::RoutedChannel&>(*m.ucx)
      : m.ipc != nullptr ? static_cast<transport::RoutedChannel&>(*m.ipc)
                         : static_cast<transport::RoutedChannel&>(*m.tcp);
  for (transport::Endpoint e = 0; e < m.placement->endpoints(); ++e) {
    if (m.placement->rank_of(e) != rank()) channel.route(e, m.placement->rank_of(e));
  }
  if (m.ucx != nullptr) {
    m.ucx->start();
  } else if (m.ipc != nullptr) {
    m.ipc->start();
  } else {
    m.tcp->start();
  }
}

void ProcessGroup::release() {
  {
    std::lock_guard lock(impl_->mu);
    if (impl_->watched != nullptr) {
      impl_->completed_before += impl_->watched->progress().completed;
    }
    impl_->watched = nullptr;
  }
  impl_->disarm_exit();
}

void ProcessGroup::put(const std::string& key, std::span<const std::byte> value) {
  transport::Rendezvous& rv = *impl_->rendezvous;
  const std::size_t pieces = (value.size() + kPieceBytes - 1) / kPieceBytes;
  for (std::size_t i = 0; i < pieces; ++i) {
    const auto piece =
        value.subspan(i * kPieceBytes, std::min(kPieceBytes, value.size() - i * kPieceBytes));
    rv.set(key + "/" + std::to_string(i), std::vector<std::byte>(piece.begin(), piece.end()));
  }
  // The count last: a reader that sees it finds every piece already at rank 0 (one connection,
  // in order).
  rv.set(key + "/n", text_bytes(std::to_string(pieces)));
}

std::string ProcessGroup::broadcast_text(const std::string& key, std::string_view text) {
  if (rank() == 0) {
    for (int k = 1; k < world_size(); ++k) {
      put(key + "/" + std::to_string(k), std::as_bytes(std::span(text.data(), text.size())));
    }
    return std::string(text);
  }
  const std::vector<std::byte> bytes = take(key + "/" + std::to_string(rank()));
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

std::vector<std::byte> ProcessGroup::take(const std::string& key) {
  transport::Rendezvous& rv = *impl_->rendezvous;
  // Taken, not read: rank 0's store forgets each piece once it is delivered, so what ranks
  // hand over between segments never piles up there.
  const std::string n = bytes_text(rv.take(key + "/n", impl_->opt.exchange_timeout));
  const std::optional<std::size_t> pieces = parse_count(n, kMaxPieces);
  if (!pieces) {
    throw std::runtime_error("the value '" + key +
                             "' on the control plane has a malformed piece count '" +
                             transport::printable(n) + "'");
  }
  std::vector<std::byte> out;
  for (std::size_t i = 0; i < *pieces; ++i) {
    const std::vector<std::byte> piece =
        rv.take(key + "/" + std::to_string(i), impl_->opt.exchange_timeout);
    out.insert(out.end(), piece.begin(), piece.end());
  }
  return out;
}

void ProcessGroup::barrier(const std::string& name) {
  impl_->rendezvous->barrier(name, impl_->opt.exchange_timeout);
}

void ProcessGroup::end_segment(int segment) {
  Impl& m = *impl_;
  barrier("segment/" + std::to_string(segment) + "/done");
  if (!m.address_key.empty()) {
    // Every rank has read it (the barrier), so it can go.
    (void)m.rendezvous->take(m.address_key, m.opt.exchange_timeout);
    m.address_key.clear();
  }
}

void ProcessGroup::shutdown() {
  if (impl_->shut_down) return;
  impl_->shut_down = true;
  impl_->collectives.reset();
  impl_->rendezvous->shutdown();
}

std::unique_ptr<ProcessGroup> join_launched_job(ProcessGroupOptions options,
                                                const transport::EnvLookup& lookup) {
  const transport::LaunchEnv env = transport::read_launch_env(lookup);
  if (env.world_size <= 1) return nullptr;
  options.env = env;
  if (const std::optional<std::string> host = lookup("TANDEM_HOST")) options.host = *host;
  return std::make_unique<ProcessGroup>(std::move(options));
}

std::string environment_job_token() {
  return transport::read_job_token(transport::process_env());
}

std::string launched_as() {
  return transport::read_launch_env(transport::process_env()).describe();
}

ProcessGroupOptions joiner_options(ProcessGroupOptions options) {
  const transport::EnvLookup lookup = transport::process_env();
  options.env.job_token = transport::read_job_token(lookup);
  options.env.source = transport::LaunchSource::kTandem;
  if (const std::optional<std::string> host = lookup("TANDEM_HOST")) options.host = *host;
  return options;
}

}  // namespace tandem::train
