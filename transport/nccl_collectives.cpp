#include "transport/nccl_collectives.hpp"

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <thread>

#include "runtime/stream.hpp"
#include "transport/collective_group.hpp"
#include "transport/member_thread.hpp"

namespace tandem::transport {
namespace {

using Clock = std::chrono::steady_clock;

std::string who(std::span<const Endpoint> group, Endpoint member, std::int64_t round) {
  return round_text("NCCL", group, member, round);
}

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(fmt::format("{}: {}", what, cudaGetErrorString(e)));
}

// Polls `ready` until it says true, yielding at first and then sleeping briefly: the member's
// thread waits for the device or for peers, and a core is better spent on the actors meanwhile.
// Returns false when the deadline passed first.
template <class Ready>
bool poll_until(Clock::time_point deadline, Ready ready) {
  for (int i = 0;; ++i) {
    if (ready()) return true;
    if (Clock::now() >= deadline) return false;
    if (i < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

}  // namespace

struct NcclCollectives::Member final : MemberThread::Rounds {
  Member(NcclCollectives& collectives, std::span<const Endpoint> group, Endpoint endpoint,
         int index)
      : owner(collectives),
        rank(index),
        thread("NCCL", {group.begin(), group.end()}, endpoint, *this,
               collectives.options_.on_error) {}

  void reduce(MemberRound& round, std::string& step) override { owner.reduce(*this, round, step); }
  void failed() override { destroy(true); }
  void stopped() override {
    destroy(false);
    stream.reset();
  }

  // The device of the member's rounds, fixed by the first that has tensors.
  Device device_of_rounds() {
    std::lock_guard lock(device_mu);
    return device;
  }

  NcclCollectives& owner;
  const int rank;  // the index of the member's endpoint in its group
  std::mutex device_mu;
  Device device = Device::cpu();  // guarded by device_mu
  // The thread's only:
  ncclComm_t comm = nullptr;
  std::optional<Stream> stream;
  Tensor counters;       // [2] on the device: contributors, members asking for a mean
  Tensor counters_host;  // [2] pinned, for the copies both ways
  // Declared last: joined before the state its rounds use goes.
  MemberThread thread;

  // NCCL's words for a failed call: its result and the communicator's last error.
  std::string nccl_error(ncclResult_t r) const {
    std::string text = ncclGetErrorString(r);
    const char* last = ncclGetLastError(comm);
    if (last != nullptr && *last != '\0') text += std::string(" (") + last + ")";
    return text;
  }

  // Waits until the communicator has no call in progress (non-blocking communicators return
  // ncclInProgress from init and from calls that still set themselves up).
  void settle(ncclResult_t r, const char* what, Clock::time_point deadline) {
    if (r != ncclSuccess && r != ncclInProgress) {
      throw std::runtime_error(fmt::format("{}: {}", what, nccl_error(r)));
    }
    ncclResult_t state = r;
    const bool settled = poll_until(deadline, [&] {
      if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) return true;
      return state != ncclInProgress;
    });
    if (!settled) throw std::runtime_error(fmt::format("{}: timed out", what));
    if (state != ncclSuccess)
      throw std::runtime_error(fmt::format("{}: {}", what, nccl_error(state)));
  }

  // Waits for the work enqueued so far on the member's stream, watching the communicator: a
  // peer that died leaves NCCL's kernels spinning, which only an abort ends.
  void drain(const char* what, Clock::time_point deadline) {
    const Event done = stream->record();
    ncclResult_t state = ncclSuccess;
    const bool finished = poll_until(deadline, [&] {
      if (ncclCommGetAsyncError(comm, &state) == ncclSuccess && state != ncclSuccess &&
          state != ncclInProgress) {
        return true;
      }
      return done.query();
    });
    if (!finished) throw std::runtime_error(fmt::format("{}: timed out on the device", what));
    if (state != ncclSuccess && state != ncclInProgress) {
      throw std::runtime_error(fmt::format("{}: {}", what, nccl_error(state)));
    }
  }

  // Reduces the round's two counters among the group and returns the number of contributors;
  // throws when the members disagree on the reduction.
  float count_contributors(const MemberRound& round, Clock::time_point deadline) {
    auto* native = static_cast<cudaStream_t>(stream->native_handle());
    float* host = counters_host.data<float>();
    host[0] = round.contributes ? 1.0f : 0.0f;
    host[1] = round.op == Reduction::mean ? 1.0f : 0.0f;
    auto* device_counters = static_cast<float*>(counters.raw_data());
    check_cuda(
        cudaMemcpyAsync(device_counters, host, 2 * sizeof(float), cudaMemcpyHostToDevice, native),
        "cudaMemcpyAsync (counters to the device)");
    settle(ncclAllReduce(device_counters, device_counters, 2, ncclFloat, ncclSum, comm, native),
           "ncclAllReduce (counters)", deadline);
    check_cuda(
        cudaMemcpyAsync(host, device_counters, 2 * sizeof(float), cudaMemcpyDeviceToHost, native),
        "cudaMemcpyAsync (counters to the host)");
    drain("the counters' all-reduce", deadline);
    const int size = static_cast<int>(thread.group().size());
    const float means = host[1];
    if (means != 0.0f && means != static_cast<float>(size)) {
      throw std::runtime_error(
          fmt::format("members disagree on the reduction ({} of {} ask for a mean)", means, size));
    }
    return host[0];
  }

  void destroy(bool failed) {
    if (comm == nullptr) return;
    // A communicator that failed may have calls stuck on the device: abort instead of waiting.
    if (failed) {
      ncclCommAbort(comm);
    } else {
      ncclCommFinalize(comm);
      ncclResult_t state = ncclInProgress;
      poll_until(Clock::now() + std::chrono::seconds(5), [&] {
        return ncclCommGetAsyncError(comm, &state) != ncclSuccess || state != ncclInProgress;
      });
      if (state == ncclSuccess) {
        ncclCommDestroy(comm);
      } else {
        ncclCommAbort(comm);
      }
    }
    comm = nullptr;
  }
};

NcclCollectives::NcclCollectives(Rendezvous& rendezvous, NcclCollectivesOptions options)
    : options_(std::move(options)), rendezvous_(rendezvous) {}

NcclCollectives::~NcclCollectives() {
  // Stop every member first, then join: the threads finish their rounds in parallel.
  for (auto& [key, m] : members_) m->thread.stop();
  for (auto& [key, m] : members_) m->thread.join();
}

void NcclCollectives::all_reduce(std::span<const Endpoint> group, Endpoint member,
                                 std::int64_t round, std::vector<Tensor> tensors, bool contributes,
                                 Reduction op, std::function<void()> done) {
  const std::string where = who(group, member, round);
  const int rank = member_rank(group, member, where);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    const bool ok = t.defined() && t.device().is_cuda() && t.dtype() == DType::f32 &&
                    t.device() == tensors.front().device();
    if (!ok) {
      throw std::invalid_argument(fmt::format(
          "{}: tensor {} is {}; NCCL reduces f32 tensors on one cuda device (tensor 0: {})", where,
          i, t.defined() ? t.describe() : "undefined", tensors.front().describe()));
    }
  }
  // Each tensor is reduced in place: two that overlap would be added twice.
  {
    std::vector<std::pair<const std::byte*, std::size_t>> spans;
    for (const Tensor& t : tensors) {
      if (t.numel() > 0)
        spans.emplace_back(static_cast<const std::byte*>(t.raw_data()), t.nbytes());
    }
    std::sort(spans.begin(), spans.end());
    for (std::size_t i = 1; i < spans.size(); ++i) {
      if (spans[i - 1].first + spans[i - 1].second > spans[i].first) {
        throw std::invalid_argument(where + ": two tensors overlap in memory");
      }
    }
  }

  Member* m = nullptr;
  {
    std::lock_guard lock(mu_);
    auto& slot = members_[{std::vector<Endpoint>(group.begin(), group.end()), member}];
    if (!slot) slot = std::make_unique<Member>(*this, group, member, rank);
    m = slot.get();
  }
  if (!tensors.empty()) {
    std::lock_guard lock(m->device_mu);
    if (!m->device.is_cuda()) m->device = tensors.front().device();
    if (tensors.front().device() != m->device) {
      throw std::invalid_argument(
          fmt::format("{}: tensors on {}, the member's earlier rounds on {}", where,
                      tensors.front().device().str(), m->device.str()));
    }
  }
  if (auto failure =
          m->thread.submit({round, std::move(tensors), contributes, op, std::move(done)})) {
    throw NcclCollectivesError(*failure);
  }
}

void NcclCollectives::connect(Member& m, Device device) {
  const int size = static_cast<int>(m.thread.group().size());
  const auto deadline = Clock::now() + options_.timeout;
  const std::string key = options_.key_prefix + "/" + group_key(m.thread.group()) + "/id";
  ncclUniqueId id;
  if (m.rank == 0) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess)
      throw std::runtime_error(std::string("ncclGetUniqueId: ") + ncclGetErrorString(r));
    std::vector<std::byte> bytes(sizeof id);
    std::memcpy(bytes.data(), &id, sizeof id);
    if (size > 1) rendezvous_.set(key, std::move(bytes));
  } else {
    const std::vector<std::byte> bytes = rendezvous_.get(key, options_.timeout);
    if (bytes.size() != sizeof id) {
      throw std::runtime_error(fmt::format("the unique id under '{}' has {} bytes, not {}", key,
                                           bytes.size(), sizeof id));
    }
    std::memcpy(&id, bytes.data(), sizeof id);
  }
  m.stream.emplace(device);
  m.counters = Tensor::empty({2}, DType::f32, device);
  m.counters_host = Tensor::empty_pinned({2}, DType::f32);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // so that a peer that never comes times out instead of hanging
  const ncclResult_t r = ncclCommInitRankConfig(&m.comm, size, id, m.rank, &config);
  if (m.comm == nullptr) {
    throw std::runtime_error(std::string("ncclCommInitRankConfig: ") + ncclGetErrorString(r));
  }
  m.settle(r, "ncclCommInitRankConfig", deadline);
}

void NcclCollectives::reduce(Member& m, MemberRound& round, std::string& step) {
  const int size = static_cast<int>(m.thread.group().size());
  const Device device = m.device_of_rounds();
  // A round of a member that never had a tensor: nothing to reduce, no device to meet on.
  if (!device.is_cuda()) {
    if (size > 1) {
      throw std::runtime_error("a member's first round had no tensors: no device to reduce on");
    }
    return;
  }
  check_cuda(cudaSetDevice(device.index()), "cudaSetDevice");
  if (m.comm == nullptr) connect(m, device);
  const auto deadline = Clock::now() + options_.timeout;

  // The counters first: the scale of a mean is the inverse of the contributors' count.
  step = "reducing the counters";
  const float contributors = m.count_contributors(round, deadline);

  step = "reducing";
  if (!round.contributes) {
    for (Tensor& t : round.tensors) t.set_zero(*m.stream);
  }
  // As LocalCollectives: the sum over contributors, scaled by the inverse of their count.
  const bool scaled = round.op == Reduction::mean && contributors > 1.0f;
  ncclRedOp_t op = ncclSum;
  float scale = scaled ? 1.0f / contributors : 1.0f;
  if (scaled) {
    m.settle(ncclRedOpCreatePreMulSum(&op, &scale, ncclFloat, ncclScalarHostImmediate, m.comm),
             "ncclRedOpCreatePreMulSum", deadline);
  }
  auto* stream = static_cast<cudaStream_t>(m.stream->native_handle());
  ncclResult_t r = ncclGroupStart();
  for (std::size_t i = 0; r == ncclSuccess && i < round.tensors.size(); ++i) {
    Tensor& t = round.tensors[i];
    if (t.numel() == 0) continue;
    void* p = t.raw_data();
    r = ncclAllReduce(p, p, static_cast<std::size_t>(t.numel()), ncclFloat, op, m.comm, stream);
  }
  const ncclResult_t end = ncclGroupEnd();
  if (r == ncclSuccess) r = end;
  // An operator may go once the calls that use it are enqueued.
  if (scaled) ncclRedOpDestroy(op, m.comm);
  m.settle(r, "ncclAllReduce", deadline);
  m.drain("the all-reduce", deadline);
}

std::unique_ptr<Collectives> make_nccl(Rendezvous& rendezvous, NcclCollectivesOptions options) {
  return std::make_unique<NcclCollectives>(rendezvous, std::move(options));
}

}  // namespace tandem::transport
